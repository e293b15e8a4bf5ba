//! `procd spawn`'s flags, checked once into spawn's params
//! (`SpawnArgs::params`): a usage error says what is wrong before
//! anything is sent.

use crate::base::cwd_from_here;
use procd_proto::{parse_param, BackoffS, CpuCores, TimeoutS};
use std::collections::BTreeMap;

/// `spawn{ready}` from the `--ready-*` flags (None without any).
fn ready_condition(
    output: Option<String>,
    port: Option<String>,
    http: Option<String>,
    timeout_s: Option<TimeoutS>,
) -> Result<Option<procd_proto::ReadySpec>, String> {
    if output.is_none() && port.is_none() && http.is_none() {
        return match timeout_s {
            Some(_) => {
                Err("--ready-timeout needs --ready-output, --ready-port or --ready-http".into())
            }
            None => Ok(None),
        };
    }
    let port = match port.as_deref() {
        None => None,
        Some("any") => Some(procd_proto::ReadyPort::Any(procd_proto::AnyPort::Any)),
        Some("auto") => Some(procd_proto::ReadyPort::Any(procd_proto::AnyPort::Auto)),
        Some(p) => match p.parse() {
            Ok(n) => Some(procd_proto::ReadyPort::Number(n)),
            Err(_) => {
                return Err(format!(
                    "--ready-port takes a port number or \"any\", got {p:?}"
                ))
            }
        },
    };
    Ok(Some(procd_proto::ReadySpec {
        output,
        port,
        http,
        timeout_s: timeout_s.map(TimeoutS::get),
    }))
}

// `procd spawn`'s flags, checked into `SpawnParams` by `params`. (A
// plain comment: a doc comment here would become the subcommand's about
// when clap makes it, over the variant's; see `cli/args.rs`.)
#[derive(clap::Args, Debug)]
pub struct SpawnArgs {
    #[arg(long, help = procd_proto::describe!(pty))]
    pty: bool,
    #[arg(long, value_name = "DIR", help = concat!(procd_proto::describe!(cwd), " Relative to the current one; default: the current directory."))]
    cwd: Option<String>,
    #[arg(long = "env", value_name = "K=V", help = concat!(procd_proto::describe!(env), " One K=V each, repeatable."))]
    env: Vec<String>,
    #[arg(long = "task", value_name = "T", help = procd_proto::describe!(task_id))]
    task: Option<String>,
    #[arg(long, value_name = "NAME", value_parser = procd_proto::SessionName::parse, help = procd_proto::describe!(name))]
    name: Option<procd_proto::SessionName>,
    #[arg(long, value_name = "P", requires = "name", value_parser = procd_proto::ProjectName::parse, help = procd_proto::describe!(project))]
    project: Option<procd_proto::ProjectName>,
    #[arg(long, requires = "name", help = procd_proto::describe!(replace))]
    replace: bool,
    #[arg(long, value_name = "POLICY", value_parser = procd_proto::RestartPolicy::parse, help = concat!(procd_proto::describe!(restart), " Or \"no\"."))]
    restart: Option<procd_proto::RestartPolicy>,
    #[arg(long, value_name = "N", requires = "restart", help = procd_proto::describe!(max_restarts))]
    max_restarts: Option<u32>,
    #[arg(long, value_parser = parse_param::<BackoffS>, value_name = "S", requires = "restart", help = procd_proto::describe!(backoff_s))]
    backoff: Option<BackoffS>,
    #[arg(long, help = procd_proto::describe!(notify_on_complete))]
    notify: bool,
    #[arg(long = "watch", value_name = "PAT", help = concat!(procd_proto::describe!(watch_patterns), " Repeatable."))]
    watch: Vec<String>,
    #[arg(long, value_parser = parse_param::<TimeoutS>, value_name = "S", help = procd_proto::describe!(timeout_s))]
    timeout: Option<TimeoutS>,
    #[arg(long, value_name = "REGEX", help = procd_proto::describe!(ready_output))]
    ready_output: Option<String>,
    #[arg(long, value_name = "PORT", help = procd_proto::describe!(ready_port))]
    ready_port: Option<String>,
    #[arg(long, value_name = "URL", help = procd_proto::describe!(ready_http))]
    ready_http: Option<String>,
    #[arg(long, value_parser = parse_param::<TimeoutS>, value_name = "S", help = procd_proto::describe!(ready_timeout_s))]
    ready_timeout: Option<TimeoutS>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = concat!(procd_proto::describe!(memory_bytes), " Bytes, or with K, M, G (1024s)."))]
    memory: Option<u64>,
    #[arg(long, value_parser = parse_param::<CpuCores>, value_name = "CORES", help = procd_proto::describe!(cpu_cores))]
    cpus: Option<CpuCores>,
    #[arg(long, value_name = "N", help = procd_proto::describe!(pids))]
    pids: Option<u64>,
    #[arg(long, value_name = "PROFILE", value_parser = procd_proto::SandboxProfile::parse, help = procd_proto::describe!(sandbox))]
    sandbox: Option<procd_proto::SandboxProfile>,
    /// Also writable in the sandbox (repeatable; relative to its cwd).
    /// Without --sandbox, the profile is workspace-write.
    #[arg(long, value_name = "PATH")]
    writable: Vec<String>,
    /// The sandbox's network: none (the default), all, or the TCP ports it
    /// may reach, e.g. connect=5432,bind=3000.
    #[arg(long, value_name = "NET", value_parser = parse_network)]
    network: Option<procd_proto::NetworkSpec>,
    #[arg(long, value_name = "PATH", help = procd_proto::describe!(junit))]
    junit: Option<String>,
    #[arg(long, value_name = "PORT", value_parser = parse_port_ask, help = procd_proto::describe!(port))]
    port: Option<procd_proto::PortAsk>,
    #[arg(long, value_name = "DIR", help = concat!(procd_proto::describe!(watch_paths), " Repeatable."))]
    watch_files: Vec<String>,
    #[arg(long, value_name = "ACTION", requires = "watch_files", help = procd_proto::describe!(watch_action))]
    on_change: Option<String>,
    #[arg(long, value_name = "NAME", value_parser = procd_proto::QueueName::parse, help = concat!(procd_proto::describe!(queue), " Its slots: config [queue.NAME]."))]
    queue: Option<procd_proto::QueueName>,
    #[arg(long, conflicts_with = "queue", help = concat!(procd_proto::describe!(jobs), " Tokens: config jobserver_tokens (docs/jobserver.md)."))]
    jobs: bool,
    /// The command: one argument is used as given; several are joined with spaces.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

impl SpawnArgs {
    /// The request these flags ask for, or what is wrong with them (a
    /// usage error: nothing was sent).
    /// The spawn's params; `remote`: the daemon is elsewhere, so this
    /// directory means nothing there (a relative `--cwd` is the far side's
    /// to resolve, and without one its default applies).
    pub fn params(self, remote: bool) -> Result<procd_proto::SpawnParams, String> {
        let ready = ready_condition(
            self.ready_output,
            self.ready_port,
            self.ready_http,
            self.ready_timeout,
        )?;
        // With a condition, wait for it (and a bit more, so that the
        // daemon's own timeout answers first).
        let yield_ms = ready.as_ref().map(|r| {
            let s = r.timeout_s.unwrap_or(60.0);
            procd_proto::YieldMs::new(s * 1000.0 + 1000.0)
        });
        let mut vars = BTreeMap::new();
        for kv in self.env {
            match kv.split_once('=') {
                Some((k, v)) if !k.is_empty() => {
                    vars.insert(k.to_string(), v.to_string());
                }
                _ => return Err(format!("--env takes NAME=VALUE, got {kv:?}")),
            }
        }
        let limited = self.memory.is_some() || self.cpus.is_some() || self.pids.is_some();
        let sandbox = sandbox_spec(self.sandbox, self.writable, self.network)?;
        Ok(procd_proto::SpawnParams {
            name: self.name,
            project: self.project,
            replace: self.replace.then_some(true),
            restart: self.restart.map(|policy| procd_proto::RestartSpec {
                policy,
                max_restarts: self.max_restarts.map(procd_proto::MaxRestarts::new),
                backoff_s: self.backoff,
                reset_after_s: None,
            }),
            command: self.command.join(" "),
            cwd: match remote {
                true => self.cwd,
                false => cwd_from_here(self.cwd),
            },
            env: (!vars.is_empty()).then_some(vars),
            pty: Some(self.pty),
            task_id: self.task,
            notify_on_complete: Some(self.notify),
            watch_patterns: (!self.watch.is_empty()).then_some(self.watch),
            timeout_s: self.timeout,
            yield_ms,
            ready,
            sandbox,
            limits: limited.then(|| procd_proto::Limits {
                memory_bytes: self.memory.map(procd_proto::MemoryBytes::new),
                cpu_cores: self.cpus,
                pids: self.pids.map(procd_proto::Pids::new),
            }),
            junit: self.junit,
            port: self.port,
            watch: (!self.watch_files.is_empty()).then(|| procd_proto::WatchSpec {
                paths: Some(self.watch_files),
                action: self.on_change,
                ..Default::default()
            }),
            queue: self.queue,
            jobs: self.jobs.then_some(true),
            ..Default::default()
        })
    }
}

/// `--port`: a port number or "auto", checked as the daemon checks it.
fn parse_port_ask(text: &str) -> Result<procd_proto::PortAsk, String> {
    let value = match text.parse::<u64>() {
        Ok(n) => serde_json::Value::from(n),
        Err(_) => serde_json::Value::from(text),
    };
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// `spawn{sandbox}` from `--sandbox`, `--writable` and `--network`: the
/// profile alone, or the object form when paths or a network are added
/// (workspace-write's cwd kept).
fn sandbox_spec(
    profile: Option<procd_proto::SandboxProfile>,
    writable: Vec<String>,
    network: Option<procd_proto::NetworkSpec>,
) -> Result<Option<procd_proto::SandboxSpec>, String> {
    use procd_proto::{SandboxProfile, SandboxRules, SandboxSpec};
    if writable.is_empty() && network.is_none() {
        return Ok(profile.map(SandboxSpec::Profile));
    }
    let mut paths = match profile.unwrap_or(SandboxProfile::WorkspaceWrite) {
        SandboxProfile::Full => {
            return Err(
                "--writable and --network are for a sandbox; --sandbox full has none".into(),
            )
        }
        SandboxProfile::WorkspaceWrite => vec![".".to_string()],
        SandboxProfile::ReadOnly => Vec::new(),
    };
    paths.extend(writable);
    Ok(Some(SandboxSpec::Rules(SandboxRules {
        writable: Some(paths),
        readable: None,
        network,
    })))
}

/// `--network`: "all", "none", or `connect=PORT` and `bind=PORT` items
/// separated by commas.
fn parse_network(text: &str) -> Result<procd_proto::NetworkSpec, String> {
    use procd_proto::NetworkSpec;
    match text {
        "all" => return Ok(NetworkSpec::All),
        "none" => return Ok(NetworkSpec::None),
        _ => {}
    }
    let (mut connect, mut bind) = (Vec::new(), Vec::new());
    for item in text.split(',') {
        let bad = || format!("{item:?}: expected all, none, or connect=PORT / bind=PORT items");
        let (kind, port) = item.split_once('=').ok_or_else(bad)?;
        let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(bad)?;
        match kind {
            "connect" => connect.push(port),
            "bind" => bind.push(port),
            _ => return Err(bad()),
        }
    }
    Ok(NetworkSpec::Ports { connect, bind })
}

/// "512M", "2G", "64k" or plain bytes (powers of 1024).
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let shift = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => {
            return Err(format!(
                "{text:?}: expected bytes, or a number with K, M, G or T"
            ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: expected bytes, or a number with K, M, G or T"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?}: too large"))
}
