//! Subcommands and their exit codes (docs/operations.md): 0 ok, 1 failed, 2 usage,
//! 3 not running (`status`); `procd wait` exits with the session's code.

use crate::base::{
    block_on, describe, wait_exit_code, EXIT_FAILED, EXIT_OK, EXIT_USAGE, EXIT_WAIT_TIMEOUT,
};
use crate::lifecycle;
use crate::lifecycle::LeaseCommand;
use crate::render;
use clap::{Parser, Subcommand};
use jsonrpsee::core::client::{Client, Error as ClientError};
use procd_client::{Launcher, ProcdApiClient};
use procd_gateway::Paths;
use procd_proto::{parse_param, GraceS, TimeoutS, YieldMs};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "procd",
    version,
    about = "Run and supervise background processes for AI coding agents"
)]
pub struct Cli {
    /// Instance root (same as PROCD_HOME): run/, state/ and config.toml live here.
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Configuration file (default: $PROCD_HOME/config.toml or ~/.config/procd/config.toml).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Machine-readable output: the JSON result on one line.
    #[arg(long, global = true)]
    json: bool,
    /// The procd to talk to, elsewhere: ssh://[user@]host[:port] (through
    /// the system's ssh and `procd dial-stdio` there; PROCD_SSH replaces
    /// `ssh`) or unix:///path. For client commands and `mcp`.
    #[arg(long, global = true, value_name = "URL", env = "PROCD_HOST")]
    host: Option<String>,
    /// Like --host, through any command whose stdio reaches a `procd
    /// dial-stdio` (e.g. 'kubectl exec -i POD -- procd dial-stdio').
    #[arg(long, global = true, value_name = "CMD", conflicts_with = "host")]
    connect: Option<String>,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process and matched at once: the size of its largest
// variant (spawn's flags) costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
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

/// `procd exec-server`'s flags.
#[derive(clap::Args, Debug)]
struct ExecServerArgs {
    /// Keep the processes Codex started running after it goes (they are
    /// started with `persist`); by default they end when Codex closes
    /// the connection, as with Codex's own stdio server.
    #[arg(long)]
    keep: bool,
}

/// `procd mcp`'s flags (docs/agents.md).
#[derive(clap::Args, Debug)]
struct McpArgs {
    /// This agent's session key: its processes carry it, and its
    /// `notifications`, `wait` and pushes are its own (default: a new one).
    #[arg(long, env = "PROCD_SESSION_KEY", value_name = "KEY")]
    session_key: Option<String>,
    /// Also take the events of this earlier key of the agent (repeatable).
    #[arg(long = "owned-key", value_name = "KEY")]
    owned_keys: Vec<String>,
    /// Push this agent's events to the client as
    /// `notifications/claude/channel` (declared as an experimental capability).
    #[arg(long)]
    channel: bool,
    /// Seconds between progress notifications of a tool that waits.
    #[arg(long, value_parser = parse_param::<GraceS>, value_name = "S")]
    progress_interval: Option<GraceS>,
}

/// The commands that need a daemon (`client_run`); the others are
/// `local_command`'s.
// Parsed once per process and matched at once, as `Command` is.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum ClientCommand {
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

/// What a client command needs to reach the daemon.
struct Target {
    paths: Paths,
    launcher: Launcher,
    json: bool,
    /// `--host` / `--connect`: a daemon elsewhere (docs/remote.md).
    host: Option<procd_client::Host>,
}

impl Target {
    /// Where reconnections go.
    fn endpoint(&self) -> procd_client::Endpoint {
        match &self.host {
            Some(host) => procd_client::Endpoint::Host(host.clone()),
            None => procd_client::Endpoint::Socket(self.paths.socket()),
        }
    }

    /// Connects, starting a daemon on demand if `start` is set. None means
    /// no daemon runs (and none was started). Through `--host`, the far
    /// side's `procd dial-stdio` starts one there.
    async fn connect(&self, start: bool) -> Result<Option<Client>, String> {
        if let Some(host) = &self.host {
            return procd_client::connect_host(host)
                .await
                .map(Some)
                .map_err(|e| e.to_string());
        }
        if start {
            procd_client::connect_or_start(&self.paths, &self.launcher)
                .await
                .map(Some)
                .map_err(|e| e.to_string())
        } else {
            match procd_client::connect(&self.paths.socket()).await {
                Ok(client) => Ok(Some(client)),
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(e.to_string()),
                Err(_) => Ok(None),
            }
        }
    }

    fn print<T: Serialize>(&self, value: &T, human: impl FnOnce(&T) -> String) {
        if self.json {
            println!("{}", serde_json::to_string(value).unwrap_or_default());
        } else {
            let text = human(value);
            if !text.is_empty() {
                println!("{}", text.trim_end_matches('\n'));
            }
        }
    }
}

/// Writes a generated document to stdout; a reader that stops early
/// (`| head`) is not an error.
fn print_document(text: &[u8], what: &str) -> i32 {
    use std::io::Write;
    match std::io::stdout().write_all(text) {
        Ok(()) => EXIT_OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(e) => {
            eprintln!("procd {what}: {e}");
            EXIT_FAILED
        }
    }
}

pub fn run(cli: Cli) -> i32 {
    let host = match (&cli.host, &cli.connect) {
        (_, Some(cmd)) => Some(procd_client::Host::Command(cmd.clone())),
        (Some(url), None) => match procd_client::Host::parse(url) {
            Ok(host) => Some(host),
            Err(e) => {
                eprintln!("procd: --host {e}");
                return EXIT_USAGE;
            }
        },
        (None, None) => None,
    };
    let remote_ok = matches!(
        cli.command,
        Command::Client(_) | Command::Mcp(_) | Command::Top
    );
    if host.is_some() && !remote_ok {
        eprintln!("procd: --host and --connect are for client commands and mcp; this one runs on this machine");
        return EXIT_USAGE;
    }
    let paths = Paths::resolve(cli.home.as_deref());
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("procd"));
    let target = Target {
        launcher: Launcher {
            exe,
            home: paths.home.clone(),
            config: cli.config.clone(),
        },
        paths,
        json: cli.json,
        host,
    };
    // Nothing is read from, written to or connected through a runtime dir
    // another user could have placed (docs/SECURITY.md); the daemon checks both of
    // its directories when it claims them.
    let offline = matches!(cli.command, Command::Completions { .. } | Command::Man);
    if !offline {
        if let Err(e) = target.paths.check_runtime_dir() {
            eprintln!("procd: {e}");
            return EXIT_FAILED;
        }
    }
    match local_command(&target, &cli.config, cli.command) {
        Ok(code) => code,
        // One runtime for the whole command: the client's background task
        // lives on the runtime that created it.
        Err(command) => block_on(client_run(&target, cli.config, *command)),
    }
}

/// Runs a command that needs no connection to a daemon (starting and
/// stopping one, leases, documents, MCP); hands any other back.
fn local_command(
    target: &Target,
    config: &Option<PathBuf>,
    command: Command,
) -> Result<i32, Box<ClientCommand>> {
    Ok(match command {
        Command::Daemon { background, set } => {
            run_daemon(target.paths.clone(), config.clone(), background, &set)
        }
        Command::Start => lifecycle::start(&target.paths, &target.launcher, target.json),
        Command::Stop { timeout } => {
            let timeout =
                timeout.map_or_else(|| stop_timeout(&target.paths, config), GraceS::duration);
            lifecycle::stop(&target.paths, timeout, target.json)
        }
        Command::Restart { timeout } => {
            let timeout =
                timeout.map_or_else(|| stop_timeout(&target.paths, config), GraceS::duration);
            lifecycle::restart(&target.paths, &target.launcher, timeout, target.json)
        }
        Command::Lease(cmd) => lifecycle::lease(&target.paths, cmd, target.json),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "procd", &mut text);
            print_document(&text, "completions")
        }
        Command::Man => {
            use clap::CommandFactory;
            let mut text = Vec::new();
            if let Err(e) = clap_mangen::Man::new(Cli::command()).render(&mut text) {
                eprintln!("procd man: {e}");
                return Ok(EXIT_FAILED);
            }
            print_document(&text, "man")
        }
        Command::Status => lifecycle::status(&target.paths, target.json),
        Command::Mcp(args) => block_on(async {
            let every = args
                .progress_interval
                .map_or(crate::mcp::DEFAULT_PROGRESS_EVERY, |s| s.duration());
            let options = crate::mcp::McpOptions {
                session_key: args.session_key.clone(),
                owned_keys: args.owned_keys.clone(),
                channel: args.channel,
                progress_every: every.max(std::time::Duration::from_millis(100)),
            };
            let run = match &target.host {
                Some(host) => crate::mcp::run_remote(host, &options).await,
                None => crate::mcp::run(&target.paths, &target.launcher, &options).await,
            };
            match run {
                Ok(()) => EXIT_OK,
                Err(e) => {
                    eprintln!("procd mcp: {e}");
                    EXIT_FAILED
                }
            }
        }),
        Command::Top if target.json => {
            eprintln!("procd top: is for a terminal; `procd --json ps` gives the sessions as JSON");
            EXIT_USAGE
        }
        Command::Top => block_on(crate::top::run(target.endpoint())),
        Command::DialStdio => block_on(crate::dial::run(&target.paths, &target.launcher)),
        Command::ExecServer(args) => block_on(async {
            match crate::exec_server::run(&target.paths, &target.launcher, args.keep).await {
                Ok(()) => EXIT_OK,
                Err(e) => {
                    eprintln!("procd exec-server: {e}");
                    EXIT_FAILED
                }
            }
        }),
        Command::Client(client) => return Err(Box::new(client)),
    })
}

/// Runs a command against the daemon, starting one first for the
/// commands that may (under a client lease meanwhile).
async fn client_run(target: &Target, config: Option<PathBuf>, command: ClientCommand) -> i32 {
    let starts_daemon = target.host.is_none()
        && matches!(
            command,
            ClientCommand::Spawn(_)
                | ClientCommand::Up { .. }
                | ClientCommand::Send { .. }
                | ClientCommand::Attach { .. }
                | ClientCommand::Rpc { .. }
        );
    // A command that may start the daemon holds a lease meanwhile, so an
    // on-demand daemon cannot stop between our start and request.
    let lease = if starts_daemon {
        match procd_client::Lease::acquire(&target.paths, "cli").await {
            Ok(lease) => Some(lease),
            Err(err) => {
                eprintln!("procd: cannot take a client lease: {err}");
                return EXIT_FAILED;
            }
        }
    } else {
        None
    };
    let code = match target.connect(starts_daemon).await {
        Ok(Some(client)) => match client_command(
            target,
            &procd_client::Reconnecting::new(target.endpoint(), client),
            command,
        )
        .await
        {
            Ok(code) => code,
            Err(err) => {
                eprintln!("procd: {}", describe(&err));
                EXIT_FAILED
            }
        },
        Ok(None) => match command {
            // A finished session's output is still on disk (docs/operations.md).
            ClientCommand::Logs {
                id,
                follow: false,
                limit,
                grep: None,
                ..
            } => crate::offline::logs(&target.paths, &config, &id, limit, target.json).await,
            _ => not_running(target),
        },
        Err(err) => {
            eprintln!("procd: {err}");
            EXIT_FAILED
        }
    };
    if let Some(lease) = lease {
        let _ = lease.release(false).await;
    }
    code
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

/// `stop_timeout_s` from the configuration (20 s when it cannot be read).
fn stop_timeout(paths: &Paths, config: &Option<PathBuf>) -> Duration {
    let path = config.clone().unwrap_or_else(|| paths.config_file.clone());
    procd_gateway::config::load(&path, config.is_some())
        .ok()
        .and_then(|c| Duration::try_from_secs_f64(c.stop_timeout_s).ok())
        .unwrap_or(Duration::from_secs(20))
}

fn not_running(target: &Target) -> i32 {
    if target.json {
        println!(
            "{}",
            serde_json::json!({"running": false, "reason": "not_started",
                "socket": target.paths.socket().display().to_string()})
        );
    } else {
        eprintln!("procd is not running");
    }
    EXIT_FAILED
}

fn run_daemon(
    mut paths: Paths,
    config_path: Option<PathBuf>,
    background: bool,
    set: &[String],
) -> i32 {
    init_tracing();
    let explicit = config_path.is_some();
    let config_path = config_path.unwrap_or_else(|| paths.config_file.clone());
    // The file the daemon runs by (no sandbox may make it writable).
    paths.config_file = config_path.clone();
    let config = match procd_gateway::config::load_with(&config_path, explicit, set) {
        Ok(c) => c,
        Err(err) => {
            eprintln!("procd: {err}");
            return EXIT_FAILED;
        }
    };
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    procd_server::run(procd_server::DaemonOptions {
        paths,
        config,
        mode: if background {
            procd_server::LaunchMode::Background
        } else {
            procd_server::LaunchMode::Foreground
        },
        command_line,
    })
}

fn init_tracing() {
    let asked = tracing_subscriber::EnvFilter::try_from_env("PROCD_LOG");
    let (filter, refused) = match asked {
        Ok(filter) => (filter, None),
        // Unset is the default; a filter that does not parse is said, not
        // silently replaced.
        Err(e) => (
            tracing_subscriber::EnvFilter::new("info"),
            std::env::var_os("PROCD_LOG").map(|value| (value, e)),
        ),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    if let Some((value, e)) = refused {
        tracing::warn!(?value, error = %e, "PROCD_LOG is not a log filter; logging at info");
    }
}

/// Runs a client command. Those that follow a session (`logs -f`, `wait`,
/// `attach`) ride through a daemon restart on `conn` (docs/survival.md); the
/// others make one call on its client.
async fn client_command(
    target: &Target,
    conn: &procd_client::Reconnecting,
    command: ClientCommand,
) -> Result<i32, ClientError> {
    let current = conn.last().await;
    let client: &Client = &current;
    match command {
        ClientCommand::Spawn(args) => spawn(target, client, args).await,
        ClientCommand::Ps { task, running } => {
            let filter = running.then_some(procd_proto::ListFilter::Running);
            let r = client.list(task, None, filter, None).await?;
            target.print(&r, render::table);
            Ok(EXIT_OK)
        }
        ClientCommand::Up {
            file,
            services,
            wait,
        } => {
            crate::stacks::up(
                target.json,
                target.host.is_some(),
                client,
                file,
                services,
                wait,
            )
            .await
        }
        ClientCommand::Down {
            file,
            project,
            services,
        } => crate::stacks::down(target.json, client, file, project, services).await,
        ClientCommand::Poll { id } => {
            let id = resolve(client, id).await?;
            let r = client.poll(id, None, None).await?;
            target.print(&r, render::poll);
            Ok(EXIT_OK)
        }
        ClientCommand::Kill { id, signal, grace } => {
            kill(target, client, resolve(client, id).await?, signal, grace).await
        }
        ClientCommand::Send { id, text } => {
            send(target, client, resolve(client, id).await?, text).await
        }
        ClientCommand::Rpc { method, params } => rpc(client, &method, params).await,
        following => follow_command(target, conn, client, following).await,
    }
}

/// The client commands that follow a session or the event stream, and so
/// use `conn`, which reconnects through a daemon restart.
async fn follow_command(
    target: &Target,
    conn: &procd_client::Reconnecting,
    client: &Client,
    command: ClientCommand,
) -> Result<i32, ClientError> {
    match command {
        ClientCommand::Logs {
            id,
            grep: Some(pattern),
            follow: true,
            ..
        } => crate::grep::follow(conn, resolve(client, id).await?, &pattern).await,
        ClientCommand::Logs {
            id,
            grep: Some(pattern),
            context,
            since,
            ..
        } => {
            let args = crate::grep::GrepArgs::of_log(id, pattern, context, since);
            crate::grep::run(&args, target.json, conn).await
        }
        ClientCommand::Grep(args) => crate::grep::run(&args, target.json, conn).await,
        ClientCommand::Sh(args) => crate::sh::run(&args, target.json, conn).await,
        ClientCommand::Logs {
            id, follow, limit, ..
        } => logs(target, conn, resolve(client, id).await?, follow, limit).await,
        ClientCommand::Wait(args) if args.any => {
            crate::waiting::wait_any(&args, target.json, conn).await
        }
        ClientCommand::Wait(args) => match &args.ids[..] {
            [id] => {
                wait(
                    target,
                    conn,
                    resolve(client, id.clone()).await?,
                    args.timeout,
                )
                .await
            }
            _ => {
                eprintln!("procd wait: several sessions need --any");
                Ok(EXIT_USAGE)
            }
        },
        ClientCommand::Events(args) => crate::events::run(&args, target.json, conn).await,
        ClientCommand::Attach { id } => crate::attach::run(conn, resolve(client, id).await?).await,
        other => unreachable!("not a following command: {other:?}"),
    }
}

/// `procd logs`: the last lines, or (`follow`) the output as it comes.
async fn logs(
    target: &Target,
    conn: &procd_client::Reconnecting,
    id: String,
    follow: bool,
    limit: Option<u64>,
) -> Result<i32, ClientError> {
    if follow {
        return follow_output(target, conn, id).await;
    }
    let limit = limit.map(procd_proto::Limit::new);
    let r = conn.last().await.log(id, None, limit, None, None).await?;
    target.print(&r, |r| r.output.clone());
    Ok(EXIT_OK)
}

/// `procd spawn`: its flags checked (a usage error sends nothing), then
/// the spawn.
async fn spawn(
    target: &Target,
    client: &Client,
    args: crate::spawning::SpawnArgs,
) -> Result<i32, ClientError> {
    let params = match args.params(target.host.is_some()) {
        Ok(params) => params,
        Err(e) => {
            eprintln!("procd: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let r = procd_client::spawn(client, params).await?;
    target.print(&r, render::spawned);
    Ok(EXIT_OK)
}

/// `procd wait`: exits as the session did, or 124 at the timeout.
async fn wait(
    target: &Target,
    conn: &procd_client::Reconnecting,
    id: String,
    timeout: Option<TimeoutS>,
) -> Result<i32, ClientError> {
    // A call repeated after a reconnect asks for what is left of the
    // timeout (at least 1 ms, so the daemon still answers with the
    // session's state), so that `--timeout` bounds the whole command.
    let began = tokio::time::Instant::now();
    let left = |t: TimeoutS| {
        let rest = t.duration().saturating_sub(began.elapsed());
        TimeoutS::new(rest.as_secs_f64().max(0.001))
    };
    let r = conn
        .call(|c| {
            let id = id.clone();
            let timeout_s = timeout.map(left);
            async move { c.wait(id, timeout_s, None, None).await }
        })
        .await?;
    target.print(&r, render::waited);
    Ok(match r.status {
        procd_proto::WaitStatus::Exited => wait_exit_code(r.exit.and_then(|e| e.exit_code)),
        _ => EXIT_WAIT_TIMEOUT,
    })
}

/// `procd kill`: fails only when the kill itself did.
async fn kill(
    target: &Target,
    client: &Client,
    id: String,
    signal: Option<String>,
    grace: Option<GraceS>,
) -> Result<i32, ClientError> {
    let r = client
        .kill(id, signal.map(procd_proto::SignalSpec::Name), grace, None)
        .await?;
    target.print(&r, render::killed);
    Ok(match r.status {
        procd_proto::KillStatus::Error => EXIT_FAILED,
        _ => EXIT_OK,
    })
}

/// `procd send`: fails when the session has already exited.
async fn send(
    target: &Target,
    client: &Client,
    id: String,
    text: String,
) -> Result<i32, ClientError> {
    let r = client.submit_stdin(id, text, None, None, None).await?;
    target.print(&r, |r| match r.status {
        procd_proto::StdinStatus::Ok => format!("sent {} bytes", r.bytes_written),
        procd_proto::StdinStatus::AlreadyExited => "the session has already exited".into(),
    });
    Ok(match r.status {
        procd_proto::StdinStatus::Ok => EXIT_OK,
        procd_proto::StdinStatus::AlreadyExited => EXIT_FAILED,
    })
}

/// The session id a command's argument (an id, a prefix, `NAME` or
/// `PROJECT/NAME`) stands for, looked up once so a follower rides on it.
async fn resolve(client: &Client, arg: String) -> Result<String, ClientError> {
    procd_client::resolve_session(client, &arg).await
}

/// `procd rpc METHOD [PARAMS]`: one call, its result printed as JSON.
async fn rpc(client: &Client, method: &str, params: Option<String>) -> Result<i32, ClientError> {
    use jsonrpsee::core::client::ClientT;
    use serde_json::Value;
    // Named params (an object) or positional ones (an array), as the
    // caller wrote them.
    let result: Value = match params.map(|p| serde_json::from_str::<Value>(&p)) {
        None => client.request(method, Vec::<Value>::new()).await?,
        Some(Ok(Value::Object(named))) => client.request(method, named).await?,
        Some(Ok(Value::Array(positional))) => client.request(method, positional).await?,
        Some(Ok(other)) => {
            eprintln!("procd rpc: params must be a JSON object or array, got {other}");
            return Ok(EXIT_USAGE);
        }
        Some(Err(e)) => {
            eprintln!("procd rpc: params must be JSON: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    println!("{result}");
    Ok(EXIT_OK)
}

/// `procd logs -f`: reads by cursor with a long-poll until the session
/// ends; rides through a daemon restart from the same cursor.
async fn follow_output(
    target: &Target,
    conn: &procd_client::Reconnecting,
    id: String,
) -> Result<i32, ClientError> {
    use std::io::Write;
    let mut cursor = 0u64;
    loop {
        let r = conn
            .call(|c| {
                let id = id.clone();
                async move {
                    let from = Some(procd_proto::Cursor::new(cursor));
                    let wait = Some(procd_proto::WaitMs::new(30_000.0));
                    c.read(id, from, None, wait, None, None).await
                }
            })
            .await?;
        if target.json {
            println!("{}", serde_json::to_string(&r).unwrap_or_default());
        } else {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(r.data.as_bytes());
            let _ = out.flush();
        }
        cursor = r.next_cursor;
        if r.eof {
            return Ok(EXIT_OK);
        }
    }
}
