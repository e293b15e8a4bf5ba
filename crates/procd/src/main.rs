//! The `procd` binary: `procd daemon` runs the server (procd-server); every
//! other subcommand is a thin client of it (procd-client). Argument parsing
//! and human-readable output live here; no logic does.

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
