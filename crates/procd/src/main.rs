//! The `procd` binary: `procd daemon` runs the server (procd-server); every
//! other subcommand is a thin client of it (procd-client). Argument parsing
//! and human-readable output live here; no logic does.
//!
//! What is where: `cli.rs` and `cli/` (clap's definitions, completions and
//! the man page; what was parsed is run), `base.rs` (exit statuses and the
//! runtime), `render.rs` (tables and `grep -n` lines), `lifecycle.rs`
//! (daemon, start, stop, lease), `spawning.rs` (`procd spawn`'s flags
//! checked into spawn's params), `attach.rs` (raw tty, SIGWINCH),
//! `events.rs`, `waiting.rs` (`wait --any`), `sh.rs`, `grep.rs`,
//! `offline.rs` (`logs` from disk with no daemon), `dial.rs`
//! (`dial-stdio`), `stacks.rs` (`up`/`down`), `top/` (`model.rs` what is
//! shown and what a key asks, `view.rs` the drawing, `mod.rs` the loop and
//! the terminal's restoration), `mcp/` (the MCP server: one agent, one lease,
//! one session key; `tools.rs`, `calls.rs`, `shell.rs`, `said.rs` what the
//! model reads, `progress.rs`, `channel.rs` the paced push) and
//! `exec_server/` (Codex's exec-server protocol: `process.rs`, `env.rs`,
//! `fs.rs`, `sandbox.rs`; docs/codex.md).

mod attach;
mod base;
mod cli;
mod dial;
mod events;
mod exec_server;
mod grep;
mod lifecycle;
mod mcp;
mod offline;
mod render;
mod sh;
mod spawning;
mod stacks;
mod top;
mod waiting;

use clap::Parser;

fn main() {
    let args = cli::Cli::parse();
    std::process::exit(cli::run(args));
}
