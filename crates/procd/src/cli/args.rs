//! The command line as clap parses it: every subcommand, flag and help
//! text. `cli.rs` runs what was parsed.

use crate::lifecycle::LeaseCommand;
use clap::{Parser, Subcommand};
use procd_proto::{parse_param, GraceS, ListLimit, YieldMs};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "procd",
    version,
    about = "Run and supervise background processes for AI coding agents"
)]
pub struct Cli {
    /// Instance root (same as PROCD_HOME): run/, state/ and config.toml live here.
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) home: Option<PathBuf>,
    /// Configuration file (default: $PROCD_HOME/config.toml or ~/.config/procd/config.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Machine-readable output: the JSON result on one line.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// The procd to talk to, elsewhere: ssh://[user@]host[:port] (through
    /// the system's ssh and `procd dial-stdio` there; PROCD_SSH replaces
    /// `ssh`), docker://CONTAINER (`docker exec -i`; PROCD_DOCKER replaces
    /// `docker`), kubectl://[NS/]POD[/CONTAINER] (`kubectl exec -i`;
    /// PROCD_KUBECTL replaces `kubectl`) or unix:///path. For client
    /// commands and `mcp`.
    #[arg(long, global = true, value_name = "URL", env = "PROCD_HOST")]
    pub(crate) host: Option<String>,
    /// Like --host, through any command whose stdio reaches a `procd
    /// dial-stdio` (e.g. 'kubectl exec -i POD -- procd dial-stdio').
    #[arg(long, global = true, value_name = "CMD", conflicts_with = "host")]
    pub(crate) connect: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

// Parsed once per process and matched at once: the size of its largest
// variant (spawn's flags) costs nothing worth a Box.
//
// `defer`: a subcommand's arguments are made only when it is the one run
// (its name and about are made at once, for the parent's help). Made
// eagerly, the whole tree cost every CLI call about 0.3 ms of CPU and 40
// page faults (of 2.3 ms and 345, `procd ps`, measured 2026-12-07).
// Completions and the manual build the whole tree themselves
// (`Command::build`).
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
#[command(defer = true)]
pub(crate) enum Command {
    /// Run the daemon in the foreground.
    Daemon {
        /// Detached by `procd start` or a client (launch_mode "background").
        #[arg(long, hide = true, alias = "on-demand")]
        background: bool,
        /// Override a configuration key, e.g. --set kill_grace_s=5 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Start the daemon in the background (explicit lifetime).
    Start,
    /// Stop the daemon: SIGTERM, then SIGKILL after the timeout.
    Stop {
        /// Seconds to wait for a graceful exit (default stop_timeout_s, 20).
        #[arg(long, value_parser = parse_param::<GraceS>, value_name = "S")]
        timeout: Option<GraceS>,
    },
    /// Restart a running background daemon.
    Restart {
        #[arg(long, value_parser = parse_param::<GraceS>, value_name = "S")]
        timeout: Option<GraceS>,
    },
    /// Client leases, for agents written in other languages.
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// Show whether the daemon runs (exit 3 when not).
    Status,
    /// The commands that talk to a daemon.
    #[command(flatten)]
    Client(ClientCommand),
    /// A live view of the sessions: one row each (state, readiness, ports,
    /// CPU, memory, last line); keys: ↑/↓ select, l follow the log, a
    /// attach, s send a line, k kill, r restart a stack service, / filter,
    /// q quit. Waits for a daemon that is not running (or comes back).
    Top,
    /// Serve the Model Context Protocol on stdin/stdout for a coding agent.
    Mcp(McpArgs),
    /// Serve Codex's exec-server protocol on stdin/stdout: Codex runs its
    /// commands as procd sessions (docs/codex.md).
    ExecServer(ExecServerArgs),
    /// Connect stdin/stdout to this machine's daemon (started on demand),
    /// byte for byte: what `--host` runs on the far side.
    DialStdio,
    /// Print a shell completion script (see docs/operations.md).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `procd man | man -l -`.
    Man,
}

// `procd exec-server`'s flags (a plain comment, as `SpawnArgs`'s is).
#[derive(clap::Args, Debug)]
pub(crate) struct ExecServerArgs {
    /// Keep the processes Codex started running after it goes (they are
    /// started with `persist`); by default they end when Codex closes
    /// the connection, as with Codex's own stdio server.
    #[arg(long)]
    pub(crate) keep: bool,
}

// `procd mcp`'s flags (docs/agents.md; a plain comment, as `SpawnArgs`'s
// is).
#[derive(clap::Args, Debug)]
pub(crate) struct McpArgs {
    /// This agent's session key: its processes carry it, and its
    /// `notifications`, `wait` and pushes are its own (default: a new one).
    #[arg(long, env = "PROCD_SESSION_KEY", value_name = "KEY")]
    pub(crate) session_key: Option<String>,
    /// Also take the events of this earlier key of the agent (repeatable).
    #[arg(long = "owned-key", value_name = "KEY")]
    pub(crate) owned_keys: Vec<String>,
    /// Push this agent's events to the client as
    /// `notifications/claude/channel` (declared as an experimental capability).
    #[arg(long)]
    pub(crate) channel: bool,
    /// Seconds between progress notifications of a tool that waits.
    #[arg(long, value_parser = parse_param::<GraceS>, value_name = "S")]
    pub(crate) progress_interval: Option<GraceS>,
}

/// The commands that need a daemon (`client_run`); the others are
/// `local_command`'s.
// Parsed once per process and matched at once, as `Command` is, and its
// subcommands made when run, as `Command`'s are.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
#[command(defer = true)]
pub(crate) enum ClientCommand {
    /// Start a command as a background session.
    Spawn(crate::spawning::SpawnArgs),
    /// List sessions.
    Ps {
        /// Only this task's sessions.
        #[arg(long = "task", value_name = "T")]
        task: Option<String>,
        /// Only running sessions.
        #[arg(long)]
        running: bool,
        /// One page of at most N sessions (1 to 10000); without it, every
        /// session, fetched a page at a time.
        #[arg(long, value_parser = parse_param::<ListLimit>, value_name = "N")]
        limit: Option<ListLimit>,
        /// The page after this session (the id a paged `ps` names last).
        #[arg(long, value_name = "ID")]
        after: Option<String>,
    },
    /// Show one session's state.
    Poll { id: String },
    /// Print a session's output.
    Logs {
        id: String,
        /// Follow the output until the session exits.
        #[arg(short = 'f', long)]
        follow: bool,
        /// How many of the last lines (default 200).
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// Only the lines matching this regex, as `grep -n` prints them
        /// (with -f, as they come).
        #[arg(long, value_name = "REGEX", conflicts_with = "limit")]
        grep: Option<String>,
        /// With --grep: lines of context before and after each match.
        #[arg(
            short = 'C',
            long,
            value_name = "N",
            requires = "grep",
            conflicts_with = "follow"
        )]
        context: Option<u32>,
        /// With --grep: only output written since then, a time ago (30s,
        /// 5m, 2h, 1d) or an RFC 3339 time.
        #[arg(
            long,
            value_name = "WHEN",
            requires = "grep",
            conflicts_with = "follow",
            value_parser = crate::base::time_of
        )]
        since: Option<String>,
    },
    /// Find a regex in sessions' output (all, or the ones named), as
    /// `grep -n` prints it; exits 1 when nothing matches.
    Grep(crate::grep::GrepArgs),
    /// Run a command in the shell NAME, which keeps its cwd, variables,
    /// functions and aliases between commands (opened on first use); exit
    /// with the command's exit code.
    Sh(crate::sh::ShArgs),
    /// Wait for a session to exit and exit with its code; with --any, for
    /// the first exit, readiness, prompt or output match of several.
    Wait(crate::waiting::WaitArgs),
    /// Terminate a session and everything it started.
    Kill {
        id: String,
        /// Signal to send first (default SIGTERM).
        #[arg(long)]
        signal: Option<String>,
        /// Seconds before SIGKILL (default kill_grace_s; 0 = no escalation).
        #[arg(long, value_parser = parse_param::<GraceS>, value_name = "S", allow_hyphen_values = true)]
        grace: Option<GraceS>,
    },
    /// Type a line into a session's stdin (Enter appended).
    Send { id: String, text: String },
    /// Who listens on a TCP port: a session, a process, or another
    /// user's. Exits 0 when something listens there, 1 when nothing does.
    Port {
        #[arg(value_parser = parse_param::<procd_proto::Port>)]
        port: procd_proto::Port,
    },
    /// Print events as they happen, one line each (SEQ KIND SESSION TEXT),
    /// for a watcher such as Claude Code's Monitor; --pending for hooks.
    Events(crate::events::EventsArgs),
    /// Connect this terminal to a session; Ctrl-] detaches and leaves it running.
    Attach { id: String },
    /// Start a stack's services that are not running (procd.toml or
    /// Procfile), in dependency order; one line per service.
    Up {
        /// The stack file (default: ./procd.toml, else ./Procfile).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: Option<String>,
        /// Only these services (and what they depend on).
        #[arg(value_parser = procd_proto::SessionName::parse)]
        services: Vec<procd_proto::SessionName>,
        /// Seconds to wait for the started services to be ready (default 60).
        #[arg(long, value_parser = yield_of_seconds, value_name = "S")]
        wait: Option<YieldMs>,
    },
    /// Kill a stack's services, dependents first.
    Down {
        /// The stack file whose project to stop (default: ./procd.toml, else ./Procfile).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: Option<String>,
        /// The project, instead of reading a stack file.
        #[arg(long, value_name = "P", value_parser = procd_proto::ProjectName::parse)]
        project: Option<procd_proto::ProjectName>,
        /// Only these services.
        #[arg(value_parser = procd_proto::SessionName::parse)]
        services: Vec<procd_proto::SessionName>,
    },
    /// Call one JSON-RPC method and print its result as JSON (from shell
    /// scripts; starts a daemon on demand), e.g.
    /// `procd rpc poll '{"session_id":"proc_3f2a"}'`.
    Rpc {
        method: String,
        /// The params: a JSON object (default none).
        params: Option<String>,
    },
}

/// `up --wait S`: the wait the daemon takes in milliseconds, judged by
/// its rule (number flags are parsed by their wire types: `parse_param`).
fn yield_of_seconds(text: &str) -> Result<YieldMs, String> {
    let seconds = text
        .trim()
        .parse::<f64>()
        .map_err(|e| format!("{e}: {text:?}"))?;
    procd_proto::param_of(seconds * 1000.0)
}
