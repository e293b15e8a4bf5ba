//! Subcommands and their exit codes (docs/operations.md): 0 ok, 1 failed, 2 usage,
//! 3 not running (`status`); `procd wait` exits with the session's code.

use crate::base::{
    block_on, describe, wait_exit_code, EXIT_FAILED, EXIT_OK, EXIT_USAGE, EXIT_WAIT_TIMEOUT,
};
use crate::lifecycle;
use crate::render;
use jsonrpsee::core::client::{Client, Error as ClientError};
use procd_client::{Launcher, ProcdApiClient};
use procd_gateway::Paths;
use procd_proto::{GraceS, TimeoutS};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

mod args;

pub use args::Cli;
use args::{ClientCommand, Command};

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
        ClientCommand::Ps {
            task,
            running,
            limit,
            after,
        } => {
            let filter = running.then_some(procd_proto::ListFilter::Running);
            let r = match (limit, after) {
                (None, None) => procd_proto::ListResult {
                    processes: procd_client::list_all(client, task, filter).await?,
                    next_after: None,
                },
                (limit, after) => client.list(task, None, filter, None, limit, after).await?,
            };
            target.print(&r, render::table);
            if let (false, Some(next)) = (target.json, &r.next_after) {
                eprintln!("more: procd ps --after {next}");
            }
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
        ClientCommand::Port { port } => {
            let r = client.port(port).await?;
            target.print(&r, render::port_owner);
            Ok(match r.owner {
                procd_proto::PortOwner::None => EXIT_FAILED,
                _ => EXIT_OK,
            })
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
