//! `procd mcp`: a Model Context Protocol server on stdio (rmcp) that lets a
//! coding agent run background processes through procd.
//!
//! It starts the daemon on demand and holds one client lease for its whole
//! life; every process it starts is owned by that lease, so the processes
//! end when the agent goes away (unless started with `persist`). Each tool
//! answers with a short text for the model plus the structured result.

use jsonrpsee::core::client::{Client, Error as ClientError};
use procd_client::{Launcher, Lease, ProcdApiClient};
use procd_gateway::Paths;
use procd_proto::{
    Cursor, GraceS, ListFilter, MaxOutputChars, SignalSpec, StdinMode, TimeoutS, WaitMs, YieldMs,
};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Output returned to the model is cut (head + tail) past this many chars
/// unless the call asks for another budget.
const DEFAULT_BUDGET: u64 = 20_000;
/// How long `start` waits for the process to finish or go quiet.
const DEFAULT_START_YIELD_MS: f64 = 10_000.0;
/// How long `write` waits for the answer to the input.
const DEFAULT_WRITE_YIELD_MS: f64 = 2_000.0;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct StartParams {
    #[schemars(
        description = "Shell command line to run, e.g. \"npm run dev\" or \"pytest -x tests/\". Runs in bash."
    )]
    pub command: String,
    #[schemars(
        description = "Working directory; a relative path is taken from the directory procd mcp runs in (normally the project). Default: that directory."
    )]
    pub cwd: Option<String>,
    #[schemars(
        description = "Run on a pseudo-terminal, for interactive programs (REPLs, prompts, TUIs). Default false."
    )]
    pub pty: Option<bool>,
    #[schemars(description = "Extra environment variables.")]
    pub env: Option<BTreeMap<String, String>>,
    #[schemars(
        description = "Milliseconds to wait for the process to finish or go quiet before answering, with its output so far. Default 10000; 0 returns at once."
    )]
    pub yield_ms: Option<f64>,
    #[schemars(
        description = "Keep the process running after this agent disconnects. Default false: it is ended with the agent."
    )]
    pub persist: Option<bool>,
    #[schemars(
        description = "Queue a notification when it exits (see the notifications tool). Default false."
    )]
    pub notify: Option<bool>,
    #[schemars(
        description = "Substrings to watch for in output lines (e.g. \"ready on port\"); matches become notifications."
    )]
    pub watch: Option<Vec<String>>,
    #[schemars(description = "Kill it after this many seconds.")]
    pub timeout_s: Option<f64>,
    #[schemars(
        description = "Most characters of output to return (head and tail are kept). Default 20000."
    )]
    pub max_output_chars: Option<u64>,
    #[schemars(
        description = "For servers: when it is ready. start then waits (up to yield_ms) until it is, instead of returning when output pauses. E.g. {\"port\": 3000} or {\"output\": \"ready in\"} or {\"http\": \"http://localhost:3000/\"}."
    )]
    pub ready: Option<ReadyParams>,
    #[schemars(
        description = "A name for it (lowercase letters, digits, - _ .), e.g. \"web\": while it runs, a start with the same name and command returns it instead of starting a second one; with another command the start is refused unless replace is true."
    )]
    pub name: Option<String>,
    #[schemars(
        description = "With name: kill the running one of that name first if it runs another command."
    )]
    pub replace: Option<bool>,
    #[schemars(
        description = "Start it again when it ends: \"on-failure\" (a non-zero exit or a crash) or \"always\". Same id and log; after 5 quick restarts in a row it ends as crash_loop."
    )]
    pub restart: Option<String>,
    #[schemars(
        description = "Run it in a sandbox the kernel enforces on its whole tree: \"workspace-write\" (write only under its cwd and its own TMPDIR, no network), \"read-only\" (write nothing but TMPDIR, no network) or \"full\" (no sandbox). A write elsewhere fails with EACCES."
    )]
    pub sandbox: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct UpParams {
    #[schemars(
        description = "The project directory holding procd.toml (or a Procfile); a relative path is taken from the directory procd mcp runs in. Default: that directory."
    )]
    pub dir: Option<String>,
    #[schemars(description = "A stack file instead of a directory.")]
    pub file: Option<String>,
    #[schemars(description = "Only these services (and what they depend on). Default: all.")]
    pub services: Option<Vec<String>>,
    #[schemars(description = "Seconds to wait for the started services to be ready. Default 60.")]
    pub wait_s: Option<f64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct DownParams {
    #[schemars(description = "The project, as `up` named it.")]
    pub project: String,
    #[schemars(description = "Only these services. Default: all of the project.")]
    pub services: Option<Vec<String>>,
}

/// Names a model gave, checked.
fn service_names(
    services: Option<Vec<String>>,
) -> Result<Option<Vec<procd_proto::SessionName>>, String> {
    services
        .map(|v| {
            v.iter()
                .map(|s| procd_proto::SessionName::parse(s))
                .collect()
        })
        .transpose()
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ReadyParams {
    #[schemars(description = "Regex an output line must match.")]
    pub output: Option<String>,
    #[schemars(description = "TCP port it must listen on, or \"any\".")]
    pub port: Option<Value>,
    #[schemars(description = "Loopback URL that must answer with status 200-399.")]
    pub http: Option<String>,
    #[schemars(description = "Seconds before it counts as not ready. Default 60.")]
    pub timeout_s: Option<f64>,
}

impl ReadyParams {
    fn to_wire(&self) -> Result<procd_proto::ReadySpec, String> {
        let port = match &self.port {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s == "any" => {
                Some(procd_proto::ReadyPort::Any(procd_proto::AnyPort::Any))
            }
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Some(procd_proto::ReadyPort::Number(n)),
                None => return Err(format!("ready.port: a port number or \"any\", got {v}")),
            },
        };
        Ok(procd_proto::ReadySpec {
            output: self.output.clone(),
            port,
            http: self.http.clone(),
            timeout_s: self.timeout_s,
        })
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ReadParams {
    #[schemars(
        description = "Session id from start (or a unique prefix of 4+ hex characters, or the name it was started with)."
    )]
    pub session_id: String,
    #[schemars(
        description = "Byte cursor to read from: 0 for the start, or the cursor a previous answer gave. Default 0."
    )]
    pub cursor: Option<u64>,
    #[schemars(
        description = "If nothing new is there yet, wait up to this many milliseconds for output or exit. Default 0."
    )]
    pub wait_ms: Option<f64>,
    #[schemars(description = "Most characters of output to return. Default 20000.")]
    pub max_output_chars: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WriteParams {
    #[schemars(description = "Session id.")]
    pub session_id: String,
    #[schemars(description = "Text to type into the process's input.")]
    pub text: Option<String>,
    #[schemars(description = "Press Enter after the text. Default true.")]
    pub submit: Option<bool>,
    #[schemars(
        description = "Then end the input (EOF), for programs that read until end of input. Default false."
    )]
    pub close: Option<bool>,
    #[schemars(
        description = "Milliseconds to wait for the answer before returning the output produced after the write. Default 2000."
    )]
    pub yield_ms: Option<f64>,
    #[schemars(description = "Most characters of output to return. Default 20000.")]
    pub max_output_chars: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WaitParams {
    #[schemars(description = "Session id.")]
    pub session_id: String,
    #[schemars(description = "Seconds to wait for the process to exit. Default 60, at most 600.")]
    pub timeout_s: Option<f64>,
    #[schemars(description = "Most characters of output to return. Default 20000.")]
    pub max_output_chars: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct KillParams {
    #[schemars(description = "Session id.")]
    pub session_id: String,
    #[schemars(
        description = "Signal to send first, e.g. \"TERM\" (default) or \"INT\"; survivors get SIGKILL after the grace period."
    )]
    pub signal: Option<String>,
    #[schemars(description = "Seconds to wait before SIGKILL. Default 2.")]
    pub grace_s: Option<f64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SignalParams {
    #[schemars(description = "Session id.")]
    pub session_id: String,
    #[schemars(description = "Signal to deliver once, e.g. \"INT\" (Ctrl-C), \"TERM\", \"HUP\".")]
    pub signal: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ListParams {
    #[schemars(description = "\"running\", \"exited\" or \"all\" (default).")]
    pub status: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct NotificationsParams {}

#[derive(Clone)]
pub struct ProcdMcp {
    /// Made again when the daemon restarts (docs/survival.md); the lease is on
    /// disk and outlives any one connection.
    client: Arc<procd_client::Reconnecting>,
    /// The lease token every started process is owned by (none over
    /// `--host`: a lease is a file of this machine's daemon).
    owner: Option<String>,
    /// The daemon runs on this machine: a relative cwd is taken from ours
    /// (over `--host` it is the far side's to resolve).
    local: bool,
    #[expect(dead_code, reason = "read by the code #[tool_handler] generates")]
    tool_router: ToolRouter<Self>,
}

/// A tool error a model can act on.
fn tool_error(e: ClientError) -> CallToolResult {
    let message = match &e {
        ClientError::Call(obj) => match obj.code() {
            procd_proto::error::SESSION_NOT_FOUND => format!(
                "{} Call `list` to see the sessions and their ids.",
                obj.message()
            ),
            procd_proto::error::INVALID_PARAMS => format!("Invalid arguments: {}", obj.message()),
            procd_proto::error::WRONG_STATE => format!("Not possible now: {}", obj.message()),
            _ => obj.message().to_string(),
        },
        other => format!("procd did not answer: {other}. Try again; if it persists, the daemon may have stopped."),
    };
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// The error of a call that changes something (`may_have`: what it may
/// have done). When the connection broke before the answer, the daemon
/// may have done it and died (its successor has the result), so the
/// model is told to look before it repeats the call, not just to retry.
fn change_error(e: ClientError, may_have: &str) -> CallToolResult {
    if !procd_client::is_disconnect(&e) {
        return tool_error(e);
    }
    CallToolResult::error(vec![ContentBlock::text(format!(
        "The connection to procd broke before it answered ({e}); a daemon that died comes back by itself. {may_have}"
    ))])
}

/// Text for the model, then the whole result as structured content.
fn answer<T: serde::Serialize>(text: String, result: &T) -> CallToolResult {
    let value = serde_json::to_value(result).unwrap_or(Value::Null);
    let mut r = CallToolResult::structured(value);
    r.content = vec![ContentBlock::text(text)];
    r
}

fn exit_words(exit: &Option<procd_proto::ExitInfo>) -> String {
    match exit {
        None => "running".into(),
        Some(e) => match e.exit_code {
            Some(c) => format!("exited with code {c}"),
            None => "exited (exit code unknown)".into(),
        },
    }
}

/// What the model should know about a running session beyond its
/// output: readiness, ports, resources, and whether it waits for input.
fn state_words(p: &procd_proto::PollResult) -> String {
    if p.status != procd_proto::SessionStatus::Running {
        return String::new();
    }
    let mut words = Vec::new();
    match (p.activity.ready, p.activity.ready_after_ms) {
        (Some(true), Some(ms)) => words.push(format!("ready (after {ms} ms)")),
        (Some(_), _) => words.push("not ready yet".to_string()),
        (None, _) => {}
    }
    if !p.activity.ports.is_empty() {
        words.push(format!("listening on port(s) {:?}", p.activity.ports));
    }
    let r = &p.activity.resources;
    if r.procs > 0 {
        words.push(format!(
            "{} process(es), {:.0} MB memory, {:.1} s CPU",
            r.procs,
            r.rss_bytes as f64 / 1e6,
            r.cpu_seconds
        ));
    }
    if p.activity.waiting_for_input {
        words.push("WAITING FOR INPUT: answer with `write`".to_string());
    }
    if words.is_empty() {
        String::new()
    } else {
        format!(" [{}]", words.join("; "))
    }
}

#[tool_router]
impl ProcdMcp {
    /// `state_words` of a session now ("" when it cannot be polled).
    async fn state_of(&self, session_id: &str) -> String {
        match self
            .client()
            .await
            .poll(session_id.to_string(), Some(MaxOutputChars::new(0)), None)
            .await
        {
            Ok(p) => state_words(&p),
            Err(_) => String::new(),
        }
    }

    /// The session id a tool's `session_id` stands for: an id, a prefix,
    /// or a name `start` gave (docs/stacks.md).
    async fn id_of(&self, arg: &str) -> Result<String, ClientError> {
        procd_client::resolve_session(&*self.client().await, arg).await
    }

    /// The daemon's client: a new connection if the daemon restarted (or
    /// the closed one, whose call then reports why, if none comes back).
    async fn client(&self) -> Arc<Client> {
        match self.client.get().await {
            Ok(client) => client,
            Err(_) => self.client.last().await,
        }
    }

    /// `owner`: the local lease processes are owned by; None when the
    /// daemon is elsewhere (`--host`).
    pub fn new(client: procd_client::Reconnecting, owner: Option<String>) -> Self {
        ProcdMcp {
            client: Arc::new(client),
            local: owner.is_some(),
            owner,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Start a shell command as a background process (dev server, test run, build, REPL). Waits up to yield_ms for it to finish, go quiet, ask for input, or (with `ready`) become ready; then returns its output so far, its status, and a session_id and cursor for later `read`, `write`, `wait` and `kill` calls. For a dev server pass ready (e.g. {\"port\": 3000}) and a yield_ms long enough to start (e.g. 60000): the answer comes as soon as it serves, with its ports. If the answer says WAITING FOR INPUT, the program asks something (a [y/N] question, a prompt): answer with `write`. Processes end when this agent disconnects unless persist is true."
    )]
    async fn start(
        &self,
        Parameters(p): Parameters<StartParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let budget = Some(p.max_output_chars.unwrap_or(DEFAULT_BUDGET));
        let ready = match p.ready.as_ref().map(ReadyParams::to_wire).transpose() {
            Ok(r) => r,
            Err(e) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "Invalid arguments: {e}"
                ))]))
            }
        };
        let name = match p
            .name
            .as_deref()
            .map(procd_proto::SessionName::parse)
            .transpose()
        {
            Ok(name) => name,
            Err(e) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "Invalid arguments: {e}"
                ))]))
            }
        };
        let restart = match p.restart.as_deref().map(procd_proto::RestartPolicy::parse) {
            None => None,
            Some(Ok(policy)) => Some(procd_proto::RestartSpec {
                policy,
                max_restarts: None,
                backoff_s: None,
                reset_after_s: None,
            }),
            Some(Err(e)) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "Invalid arguments: restart: {e}"
                ))]))
            }
        };
        let sandbox = match p.sandbox.as_deref().map(procd_proto::SandboxProfile::parse) {
            None => None,
            Some(Ok(profile)) => Some(procd_proto::SandboxSpec::Profile(profile)),
            Some(Err(e)) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "Invalid arguments: sandbox: {e}"
                ))]))
            }
        };
        let params = procd_proto::SpawnParams {
            name,
            restart,
            sandbox,
            replace: p.replace,
            command: p.command,
            cwd: match self.local {
                true => crate::base::cwd_from_here(p.cwd),
                false => p.cwd,
            },
            env: p.env,
            pty: p.pty,
            owner: self.owner.clone(),
            persist: p.persist,
            notify_on_complete: p.notify,
            watch_patterns: p.watch,
            timeout_s: p.timeout_s.map(TimeoutS::new),
            stdin: Some(StdinMode::Pipe).filter(|_| p.pty != Some(true)),
            yield_ms: Some(YieldMs::new(p.yield_ms.unwrap_or(DEFAULT_START_YIELD_MS))),
            max_output_chars: budget.map(MaxOutputChars::new),
            ready,
            ..Default::default()
        };
        let r = procd_client::spawn(&*self.client().await, params).await;
        Ok(match r {
            Ok(r) if r.reused => {
                let text = format!(
                    "{} (pid {}) already runs this command under this name: nothing was started.{}",
                    r.session_id,
                    r.pid,
                    self.state_of(&r.session_id).await,
                );
                answer(text, &r)
            }
            Ok(r) => {
                let text = format!(
                    "Started {} (pid {}): {}{}. Output so far (next cursor {}):\n{}",
                    r.session_id,
                    r.pid,
                    exit_words(&r.exit),
                    self.state_of(&r.session_id).await,
                    r.cursor.unwrap_or(0),
                    r.output.as_deref().unwrap_or("")
                );
                answer(text, &r)
            }
            Err(e) => change_error(
                e,
                "The command may have started: call `list` before starting it again.",
            ),
        })
    }

    #[tool(
        description = "Read a process's output from a byte cursor (0 = from the start; pass the next_cursor of the previous answer to get only new output). wait_ms long-polls for new output. Reading does not consume anything."
    )]
    async fn read(
        &self,
        Parameters(p): Parameters<ReadParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut p = p;
        p.session_id = match self.id_of(&p.session_id).await {
            Ok(id) => id,
            Err(e) => return Ok(tool_error(e)),
        };
        let budget = Some(p.max_output_chars.unwrap_or(DEFAULT_BUDGET));
        let r = self
            .client()
            .await
            .read(
                p.session_id.clone(),
                p.cursor.map(Cursor::new),
                None,
                p.wait_ms.map(WaitMs::new),
                budget.map(MaxOutputChars::new),
                None,
            )
            .await;
        Ok(match r {
            Ok(r) => {
                let state = match (r.eof, r.status) {
                    (true, _) => format!(
                        "exited with code {} and everything was read",
                        r.exit_code.map_or("unknown".into(), |c| c.to_string())
                    ),
                    (false, procd_proto::SessionStatus::Exited) => {
                        "exited; more output remains".into()
                    }
                    (false, procd_proto::SessionStatus::Running) => {
                        format!("running{}", self.state_of(&p.session_id).await)
                    }
                };
                let text = format!(
                    "{}: {state}. Output from cursor {} (next cursor {}):\n{}",
                    p.session_id, r.cursor, r.next_cursor, r.data
                );
                answer(text, &r)
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Type into a running process's input (stdin or terminal): text, then Enter unless submit is false; close ends the input (EOF). Use it to answer a process that is WAITING FOR INPUT (a question, a password prompt, a REPL). Returns the output produced after the write, waiting up to yield_ms for it (less when the process asks for input again)."
    )]
    async fn write(
        &self,
        Parameters(p): Parameters<WriteParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut p = p;
        p.session_id = match self.id_of(&p.session_id).await {
            Ok(id) => id,
            Err(e) => return Ok(tool_error(e)),
        };
        let budget = Some(p.max_output_chars.unwrap_or(DEFAULT_BUDGET));
        let yield_ms = Some(YieldMs::new(p.yield_ms.unwrap_or(DEFAULT_WRITE_YIELD_MS)));
        let budget = budget.map(MaxOutputChars::new);
        let text = p.text.unwrap_or_default();
        let close = p.close.unwrap_or(false);
        // When the input is closed next, the answer is awaited after that.
        let first_yield = if close { None } else { yield_ms };
        let id = p.session_id.clone();
        let written = if p.submit.unwrap_or(true) {
            self.client()
                .await
                .submit_stdin(id, text, first_yield, budget, None)
                .await
        } else {
            self.client()
                .await
                .write_stdin(id, text, first_yield, budget, None)
                .await
        };
        let mut r =
            match written {
                Ok(r) => r,
                Err(e) => return Ok(change_error(
                    e,
                    "The input may have been written: `read` the output before writing it again.",
                )),
            };
        if close && r.status == procd_proto::StdinStatus::Ok {
            if let Err(e) = self.client().await.close_stdin(p.session_id.clone()).await {
                return Ok(tool_error(e));
            }
            // Then wait for what the end of input brings.
            if let Ok(more) = self
                .client()
                .await
                .write_stdin(p.session_id.clone(), String::new(), yield_ms, budget, None)
                .await
            {
                r = more;
            }
        }
        let status = match r.status {
            procd_proto::StdinStatus::AlreadyExited => {
                "had already exited; nothing was written".to_string()
            }
            procd_proto::StdinStatus::Ok => format!(
                "{} bytes written; {}{}",
                r.bytes_written,
                exit_words(&r.exit),
                self.state_of(&p.session_id).await
            ),
        };
        let text = format!(
            "{}: {status}. Output since the write (next cursor {}):\n{}",
            p.session_id,
            r.cursor.map_or("-".into(), |c| c.to_string()),
            r.output.as_deref().unwrap_or("")
        );
        Ok(answer(text, &r))
    }

    #[tool(
        description = "Wait for a process to exit (up to timeout_s seconds) and return its exit code and the end of its output."
    )]
    async fn wait(
        &self,
        Parameters(p): Parameters<WaitParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut p = p;
        p.session_id = match self.id_of(&p.session_id).await {
            Ok(id) => id,
            Err(e) => return Ok(tool_error(e)),
        };
        let budget = Some(p.max_output_chars.unwrap_or(DEFAULT_BUDGET));
        let r = self
            .client()
            .await
            .wait(
                p.session_id.clone(),
                Some(TimeoutS::new(p.timeout_s.unwrap_or(60.0))),
                budget.map(MaxOutputChars::new),
                None,
            )
            .await;
        Ok(match r {
            Ok(r) => {
                let state = match r.status {
                    procd_proto::WaitStatus::Timeout => {
                        "still running after the timeout".to_string()
                    }
                    _ => exit_words(&r.exit),
                };
                let text = format!("{}: {state}. Last output:\n{}", r.session_id, r.output);
                answer(text, &r)
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Stop a process and everything it started (SIGTERM, then SIGKILL after grace_s)."
    )]
    async fn kill(
        &self,
        Parameters(p): Parameters<KillParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut p = p;
        p.session_id = match self.id_of(&p.session_id).await {
            Ok(id) => id,
            Err(e) => return Ok(tool_error(e)),
        };
        let r = self
            .client()
            .await
            .kill(
                p.session_id.clone(),
                p.signal.map(SignalSpec::Name),
                p.grace_s.map(GraceS::new),
            )
            .await;
        Ok(match r {
            Ok(r) => {
                let text = match r.status {
                    procd_proto::KillStatus::Killed => {
                        format!("{}: killed ({}).", r.session_id, exit_words(&r.exit))
                    }
                    procd_proto::KillStatus::AlreadyExited => format!(
                        "{}: had already exited ({}).",
                        r.session_id,
                        exit_words(&r.exit)
                    ),
                    procd_proto::KillStatus::Error => format!(
                        "{}: {} — still alive: {:?}. Try again with signal \"KILL\".",
                        r.session_id,
                        r.error.clone().unwrap_or_default(),
                        r.survivors
                    ),
                };
                answer(text, &r)
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Send one signal to a process's group without killing it, e.g. \"INT\" to interrupt like Ctrl-C."
    )]
    async fn signal(
        &self,
        Parameters(p): Parameters<SignalParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut p = p;
        p.session_id = match self.id_of(&p.session_id).await {
            Ok(id) => id,
            Err(e) => return Ok(tool_error(e)),
        };
        let r = self
            .client()
            .await
            .signal(p.session_id.clone(), SignalSpec::Name(p.signal))
            .await;
        Ok(match r {
            Ok(r) => answer(
                format!(
                    "{}: sent {} to {} process(es).",
                    r.session_id, r.signal, r.delivered
                ),
                &r,
            ),
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "List background processes: id, status, exit code, command and the last lines of output."
    )]
    async fn list(
        &self,
        Parameters(p): Parameters<ListParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let filter = match p.status.as_deref() {
            Some("running") => Some(ListFilter::Running),
            Some("exited") => Some(ListFilter::Exited),
            _ => None,
        };
        Ok(match self.client().await.list(None, None, filter).await {
            Ok(r) => {
                let mut text = format!("{} process(es).\n", r.processes.len());
                for e in &r.processes {
                    let status = match (e.status, e.exit_code) {
                        (procd_proto::SessionStatus::Running, _) => "running".to_string(),
                        (_, Some(c)) => format!("exited {c}"),
                        _ => "exited".to_string(),
                    };
                    let mut extra = String::new();
                    if !e.activity.ports.is_empty() {
                        extra.push_str(&format!("  ports {:?}", e.activity.ports));
                    }
                    if e.activity.ready == Some(true) {
                        extra.push_str("  ready");
                    }
                    if e.activity.waiting_for_input {
                        extra.push_str("  WAITING FOR INPUT");
                    }
                    text.push_str(&format!(
                        "{}  {status}{extra}  {}\n",
                        e.session_id, e.command
                    ));
                }
                answer(text, &r)
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Start a project's dev stack from its procd.toml (or Procfile): every service that is not running yet, in dependency order, each once what it depends on is started, ready or completed. Services already running are left alone, so calling it again is safe. Returns when the started services are ready (or wait_s ends), with one line per service. The services keep running after this agent disconnects; stop them with `down`."
    )]
    async fn up(&self, Parameters(p): Parameters<UpParams>) -> Result<CallToolResult, ErrorData> {
        let services = match service_names(p.services) {
            Ok(s) => s,
            Err(e) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "Invalid arguments: {e}"
                ))]))
            }
        };
        let (file, dir) = match (self.local, p.file) {
            (false, file) => (file, p.dir),
            (true, Some(file)) => (crate::base::cwd_from_here(Some(file)), None),
            (true, None) => (None, crate::base::cwd_from_here(p.dir)),
        };
        // Without wait_s the daemon's default applies.
        let wait = p.wait_s.map(|s| YieldMs::new(s.max(0.0) * 1000.0));
        let r = self.client().await.up(file, dir, services, wait).await;
        Ok(match r {
            Ok(r) => {
                let lines: Vec<String> = r
                    .services
                    .iter()
                    .map(|s| {
                        format!(
                            "{}: {}",
                            s.name,
                            serde_json::to_string(s).unwrap_or_default()
                        )
                    })
                    .collect();
                let text = format!("Project {} ({}):\n{}", r.project, r.file, lines.join("\n"));
                answer(text, &r)
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(description = "Stop a project's services (all, or the named ones), dependents first.")]
    async fn down(
        &self,
        Parameters(p): Parameters<DownParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let (project, services) = match (
            procd_proto::ProjectName::parse(&p.project),
            service_names(p.services),
        ) {
            (Ok(project), Ok(services)) => (project, services),
            (Err(e), _) | (_, Err(e)) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "Invalid arguments: {e}"
                ))]))
            }
        };
        Ok(match self.client().await.down(project, services).await {
            Ok(r) => {
                let text = if r.services.is_empty() {
                    format!("Nothing of {} was running.", r.project)
                } else {
                    let stopped: Vec<String> = r
                        .services
                        .iter()
                        .map(|s| format!("{} ({}): {:?}", s.name, s.session_id, s.status))
                        .collect();
                    format!("Stopped {}: {}", r.project, stopped.join(", "))
                };
                answer(text, &r)
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Take the queued notifications: processes that finished (for those started with notify), watch-pattern matches, servers that became ready (or did not in time), and processes waiting for input. Call between turns."
    )]
    async fn notifications(
        &self,
        Parameters(_p): Parameters<NotificationsParams>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(
            match self.client().await.drain_notifications(None, None).await {
                Ok(r) => {
                    let text = if r.events.is_empty() {
                        "No notifications.".to_string()
                    } else {
                        r.events
                            .iter()
                            .map(|e| e.text().unwrap_or_default().to_string())
                            .collect::<Vec<_>>()
                            .join("\n")
                    };
                    answer(text, &r)
                }
                Err(e) => change_error(
                    e,
                    "The notifications it took may be lost: call `list` to see which processes ended.",
                ),
            },
        )
    }
}

#[tool_handler]
impl ServerHandler for ProcdMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("procd", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Run background processes: `start` a command (it returns early output and a session_id), \
                 `read` more output by cursor, `write` to its input, `wait` for it, `kill` it. \
                 Start dev servers with `ready` (e.g. {\"port\": 3000}) and a long yield_ms: the answer comes when they serve. \
                 When an answer says WAITING FOR INPUT, the process asks a question: answer it with `write`. \
                 Call `notifications` between turns to learn what finished. \
                 A project with a procd.toml or Procfile starts as a whole with `up` and stops with `down`. Processes end when you disconnect \
                 unless started with persist.",
            )
    }
}

/// `procd mcp --host`: the MCP server here, the daemon elsewhere, one
/// connection made again when it drops. A lease cannot cross machines,
/// so the processes it starts are not owned: they run on there until
/// killed, as if started with persist (docs/remote.md).
pub async fn run_remote(host: &procd_client::Host) -> Result<(), String> {
    let client = procd_client::connect_host(host)
        .await
        .map_err(|e| e.to_string())?;
    let client =
        procd_client::Reconnecting::new(procd_client::Endpoint::Host(host.clone()), client);
    let server = ProcdMcp::new(client, None);
    match server.serve(rmcp::transport::stdio()).await {
        Ok(service) => service.waiting().await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(format!("MCP handshake failed: {e}")),
    }
}

/// Runs the MCP server on stdin/stdout until the client disconnects.
pub async fn run(paths: &Paths, launcher: &Launcher) -> Result<(), String> {
    let lease = Lease::acquire(paths, "mcp")
        .await
        .map_err(|e| format!("cannot take a client lease: {e}"))?;
    let client = procd_client::connect_or_start(paths, launcher)
        .await
        .map_err(|e| e.to_string())?;
    let client =
        procd_client::Reconnecting::new(procd_client::Endpoint::Socket(paths.socket()), client);
    let server = ProcdMcp::new(client, Some(lease.token().to_string()));
    let result = match server.serve(rmcp::transport::stdio()).await {
        Ok(service) => service.waiting().await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(format!("MCP handshake failed: {e}")),
    };
    // The agent is gone: so is its lease, and with it the processes it
    // started (the daemon ends them), unless they were started to persist.
    let _ = lease.release(false).await;
    result
}
