//! `procd exec-server`: Codex's exec-server protocol on stdio
//! (docs/codex.md), as a client of the local procd daemon. Each Codex
//! process is a procd session, so it is contained, killed with its whole
//! tree, and outlives this server's connection.
//!
//! - `mod.rs`: the connection (one JSON object per line, JSON-RPC without
//!   `"jsonrpc"`), `initialize` and `environment/info`, dispatch;
//! - `process.rs`: `process/*` and the numbered output they push;
//! - `env.rs`: Codex's environment policy and the command line;
//! - `fs.rs`: `fs/*`;
//! - `sandbox.rs`: Codex's sandbox intent as procd's rules;
//! - `uri.rs`: path URIs, read as Codex's server reads them.

mod env;
mod fs;
mod process;
mod sandbox;
mod uri;

use procd_client::{Launcher, Lease};
use procd_gateway::Paths;
use procd_proto::{GraceS, ProcdApiClient, SignalSpec, SpawnParams};
use process::Process;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use uri::{path_of, uri_of};

/// The Codex release whose wire this speaks (docs/codex.md).
pub const CODEX_VERSION: &str = "0.171.0";

/// How long the last pushes may take to be written after Codex left.
const WRITER_LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// The longest line read (a `fs/writeFile` carries a whole file).
const MAX_LINE: usize = 64 << 20;

/// The most of the line buffer kept between lines.
const LINE_KEPT: usize = 1 << 20;

/// An error in Codex's shape: `{code, message, data?}`.
#[derive(Debug)]
pub struct RpcError {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn invalid(message: impl Into<String>) -> RpcError {
        RpcError::new(-32602, message)
    }

    fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(-32603, message)
    }

    fn json(self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(data) = self.data {
            e["data"] = data;
        }
        e
    }
}

/// How many lines may wait for stdout. A Codex that stops reading holds
/// up the pumps (a process's output then waits in procd's log) and the
/// answers (and so the reading of its requests), never this server's
/// memory: at most this many lines, each an answer or a chunk of at
/// most procd's 64 KiB read window.
const OUTBOX_LINES: usize = 64;

/// The most requests handled at once; the next line is read when one is
/// answered (a Codex that sends without reading answers is held up, not
/// given a task per line).
const MAX_IN_FLIGHT: usize = 256;

/// How many requests whose message or answer may be as large as a file
/// (`fs::Weight`) exist at once, from the reading of the request until
/// its answer is written to stdout: each holds up to `fs::MAX_READ_FILE`
/// and its base64, so `MAX_IN_FLIGHT` of them, or `OUTBOX_LINES` answers
/// waiting for a Codex that does not read, would be tens of GiB. A
/// request whose message is that large holds up the next line until it
/// has its place; one whose answer is waits for its place in its own
/// task, so that the lines after it are still read and served.
const LARGE_AT_ONCE: usize = 4;

/// A line for stdout, and the place among the `LARGE_AT_ONCE` it holds
/// until it is written.
pub type Line = (Value, Option<OwnedSemaphorePermit>);

/// Where answers and notifications go: one writer, lines in send order,
/// at most `OUTBOX_LINES` waiting.
#[derive(Clone)]
pub struct Outbox(mpsc::Sender<Line>);

impl Outbox {
    async fn answer(&self, id: Value, result: Result<Value, RpcError>) {
        self.answer_holding(id, result, None).await
    }

    /// The answer, holding `large` until it is written.
    async fn answer_holding(
        &self,
        id: Value,
        result: Result<Value, RpcError>,
        large: Option<OwnedSemaphorePermit>,
    ) {
        let answer = match result {
            Ok(result) => json!({"id": id, "result": result}),
            Err(e) => json!({"id": id, "error": e.json()}),
        };
        let _ = self.0.send((answer, large)).await;
    }
}

/// A notification, as a line to send through a place taken in the
/// outbox (it holds no place among the `LARGE_AT_ONCE`).
fn notification(method: &str, params: Value) -> Line {
    (json!({"method": method, "params": params}), None)
}

struct Server {
    conn: Arc<procd_client::Reconnecting>,
    /// The lease every process is owned by: they end with this server
    /// unless `keep`.
    owner: String,
    /// `--keep`: processes are started with `persist`, so that the end of
    /// the lease ends none of them.
    keep: bool,
    /// This connection's session (`initialize`), also each process's
    /// procd session key.
    session_id: String,
    processes: Mutex<HashMap<String, Arc<Process>>>,
    /// Files Codex holds open by handle (`fs/open`).
    files: fs::Handles,
    out: Outbox,
    /// Where the connection's handshake is (`Handshake`'s steps): Codex's
    /// server serves nothing but `initialize` before it, and procd's does
    /// the same, with its words.
    handshake: std::sync::atomic::AtomicU8,
}

/// The handshake's steps: `initialize` answered, then `initialized` sent.
struct Handshake;

impl Handshake {
    const NONE: u8 = 0;
    const ANSWERED: u8 = 1;
    const DONE: u8 = 2;
}

/// Runs the server on stdin/stdout until Codex closes stdin.
/// `keep`: the processes outlive this server (`--keep`).
pub async fn run(paths: &Paths, launcher: &Launcher, keep: bool) -> Result<(), String> {
    let lease = Lease::acquire(paths, "exec-server")
        .await
        .map_err(|e| format!("cannot take a client lease: {e}"))?;
    let client = procd_client::connect_or_start(paths, launcher)
        .await
        .map_err(|e| e.to_string())?;
    let conn =
        procd_client::Reconnecting::new(procd_client::Endpoint::Socket(paths.socket()), client);
    let (tx, rx) = mpsc::channel::<Line>(OUTBOX_LINES);
    let server = Arc::new(Server {
        conn: Arc::new(conn),
        owner: lease.token().to_string(),
        keep,
        session_id: new_session_id(),
        processes: Mutex::new(HashMap::new()),
        files: fs::Handles::default(),
        out: Outbox(tx),
        handshake: std::sync::atomic::AtomicU8::new(Handshake::NONE),
    });
    let writer = tokio::spawn(write_lines(rx));
    read_requests(&server).await;
    // Codex is gone: so is the lease, and with it the processes it
    // started (the daemon ends them); what they push meanwhile is
    // written while stdout takes it, for a moment at most.
    drop(server);
    let _ = lease.release(false).await;
    let _ = tokio::time::timeout(WRITER_LINGER, writer).await;
    Ok(())
}

/// Writes each message as a line to stdout until every sender is gone
/// or stdout is.
async fn write_lines(mut rx: mpsc::Receiver<Line>) {
    let mut stdout = tokio::io::stdout();
    // A large answer's place is given back once its line is written.
    while let Some((msg, _large)) = rx.recv().await {
        let mut line = msg.to_string();
        line.push('\n');
        if stdout.write_all(line.as_bytes()).await.is_err() {
            return;
        }
        let _ = stdout.flush().await;
    }
}

/// Reads requests from stdin until it ends, each handled in a task of its
/// own (at most `MAX_IN_FLIGHT` at once, `LARGE_AT_ONCE` of them large),
/// the handshake's in order.
async fn read_requests(server: &Arc<Server>) {
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let large = Arc::new(Semaphore::new(LARGE_AT_ONCE));
    loop {
        // A buffer a large line grew (a file for `fs/writeFile`, up to
        // twice `MAX_LINE`) is not kept for the small lines after it.
        match line.capacity() > LINE_KEPT {
            true => line = Vec::new(),
            false => line.clear(),
        }
        // Never closed: Err cannot come.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        match (&mut stdin)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.len() > MAX_LINE {
            let error = RpcError::new(-32700, "line too long");
            server.out.answer(Value::Null, Err(error)).await;
            skip_line(&mut stdin).await;
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let msg: Value = match serde_json::from_slice(&line) {
            Ok(v) => v,
            Err(e) => {
                let error = RpcError::new(-32700, format!("parse error: {e}"));
                server.out.answer(Value::Null, Err(error)).await;
                continue;
            }
        };
        let server = server.clone();
        // The handshake in the order it was sent: a request read after
        // `initialize` or `initialized` sees what they did.
        let handshake = msg.get("id").is_none()
            || msg.get("method").and_then(Value::as_str) == Some("initialize");
        if handshake {
            server.handle(msg, None).await;
            continue;
        }
        let method = msg.get("method").and_then(Value::as_str);
        // A large message's place is taken here, a large answer's in its
        // task. (The semaphore is never closed: Err cannot come.)
        let (held, answer_place) = match method.map_or(fs::Weight::Small, fs::weight) {
            fs::Weight::LargeMessage => (large.clone().acquire_owned().await.ok(), None),
            fs::Weight::LargeAnswer => (None, Some(large.clone())),
            fs::Weight::Small => (None, None),
        };
        tokio::spawn(async move {
            let held = match answer_place {
                Some(places) => places.acquire_owned().await.ok(),
                None => held,
            };
            server.handle(msg, held).await;
            drop(permit);
        });
    }
}

/// Reads past the rest of a line, keeping none of it (it may have no end).
async fn skip_line(stdin: &mut (impl tokio::io::AsyncBufRead + Unpin)) {
    loop {
        let Ok(buf) = stdin.fill_buf().await else {
            return;
        };
        if buf.is_empty() {
            return;
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(at) => return stdin.consume(at + 1),
            None => {
                let n = buf.len();
                stdin.consume(n);
            }
        }
    }
}

use tokio::io::AsyncReadExt as _;

/// A fresh session id in Codex's form (a UUID).
fn new_session_id() -> String {
    let mut b = [0u8; 16];
    let _ = getrandom_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn getrandom_bytes(b: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(b)
}

/// Parses a method's params, naming what is wrong.
fn params<T: for<'de> Deserialize<'de>>(p: Value) -> Result<T, RpcError> {
    serde_json::from_value(p).map_err(|e| RpcError::invalid(e.to_string()))
}

/// `environment/info` (also in `initialize`'s answer): only the
/// capabilities procd has (docs/codex.md); false or absent is "not here".
fn environment_info() -> Value {
    let shell = std::env::var("SHELL").unwrap_or_else(|_| "/bin/bash".into());
    let name = std::path::Path::new(&shell)
        .file_name()
        .map_or("bash".into(), |n| n.to_string_lossy().into_owned());
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let home = std::env::var_os("HOME").map_or_else(|| "/".into(), std::path::PathBuf::from);
    json!({
        "shell": {"name": name, "path": shell},
        "executorVersion": CODEX_VERSION,
        "cwd": uri_of(&cwd),
        "userHomeDir": uri_of(&home),
        "platformOs": "linux",
        "prependPathDirs": [],
        "temporaryDirectories": [],
        "tempDir": uri_of(&std::env::temp_dir()),
        "capabilities": {
            "networkProxyLaunch": false,
            "networkProxyReviewDomains": false,
            "networkProxyTransparentTcp": false,
            "credentialMasking": false,
            "credentialMaskingCustomProviders": false,
            "capabilityDiscoverySandbox": false,
            "fsWatchMissing": false,
            "capabilityDiscoveryV2": false,
            "environmentConfigRead": false,
            "httpHeaderEnvVars": false,
            "sandboxedFileStreaming": false,
            "fileWriteStreaming": false,
            "shellSnapshotV2": false,
            "windowsMxc": false,
            "linuxRootWritePreservesDevices": false,
            "linuxApprovedRootWritePreservesRestrictions": false,
        },
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartParams {
    process_id: String,
    argv: Vec<String>,
    cwd: String,
    #[serde(default)]
    env_policy: Option<env::EnvPolicy>,
    env: BTreeMap<String, String>,
    tty: bool,
    #[serde(default)]
    pipe_stdin: bool,
    #[serde(default)]
    arg0: Option<String>,
    #[serde(default)]
    sandbox: Option<Value>,
    #[serde(default)]
    enforce_managed_network: bool,
    #[serde(default)]
    #[allow(dead_code)]
    managed_network: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    #[allow(dead_code)]
    client_name: String,
    #[serde(default)]
    resume_session_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReadParams {
    process_id: String,
    #[serde(default)]
    after_seq: Option<u64>,
    #[serde(default)]
    max_bytes: Option<usize>,
    #[serde(default)]
    wait_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WriteParams {
    process_id: String,
    chunk: String,
    write_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProcessRef {
    process_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SignalParams {
    process_id: String,
    signal: CodexSignal,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
enum CodexSignal {
    Interrupt,
}

/// The longest `waitMs` honoured: a read waits at most this long.
const MAX_WAIT_MS: u64 = 300_000;

impl Server {
    /// Answers `msg`; `large` is its place among the `LARGE_AT_ONCE`,
    /// held until its answer is written.
    async fn handle(self: Arc<Self>, msg: Value, large: Option<OwnedSemaphorePermit>) {
        // Every line that is no message is answered, as Codex's own server
        // does (it names the line's fault; procd's id is JSON-RPC's null).
        let invalid = |why: &str| {
            let error = RpcError::new(-32600, format!("invalid request: {why}"));
            self.out.answer(Value::Null, Err(error))
        };
        if !msg.is_object() {
            return invalid("a message is one JSON object (no batches)").await;
        }
        let Some(method) = msg
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            match msg.get("id") {
                // An answer: procd asks Codex nothing, so it answers nothing.
                Some(_) if msg.get("result").is_some() || msg.get("error").is_some() => {}
                Some(id) => {
                    let error = RpcError::new(-32600, "no method");
                    self.out.answer(id.clone(), Err(error)).await
                }
                None => invalid("neither a method nor an id").await,
            }
            return;
        };
        let Some(id) = msg.get("id").cloned() else {
            // A notification: nothing to answer. `initialized` ends the
            // handshake; before `initialize`, Codex's server ends the
            // connection, procd's lets it pass.
            if method == "initialized" {
                let _ = self.handshake.compare_exchange(
                    Handshake::ANSWERED,
                    Handshake::DONE,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
            return;
        };
        // Codex's request ids are strings or integers (`RequestId`); its
        // server refuses any other, so procd does not run one.
        if !(id.is_string() || id.is_i64() || id.is_u64()) {
            return invalid("an id is a string or an integer").await;
        }
        if let Some(why) = self.before_handshake(&method) {
            return self.out.answer(id, Err(RpcError::new(-32600, why))).await;
        }
        let p = msg.get("params").cloned().unwrap_or(json!({}));
        if method == "process/start" {
            let started = match params(p) {
                Ok(p) => self.start(p).await,
                Err(e) => Err(e),
            };
            match started {
                Ok(proc) => {
                    // The answer goes out before the first output (one
                    // writer, lines in send order).
                    // Codex's name for the Linux sandbox (procd's is Landlock
                    // and seccomp; Codex's own, bubblewrap and seccomp).
                    let kind = if proc.sandboxed {
                        "linuxSeccomp"
                    } else {
                        "none"
                    };
                    let answer = json!({"processId": proc.id, "sandboxType": kind});
                    self.out.answer(id, Ok(answer)).await;
                    tokio::spawn(proc.pump(self.conn.clone(), self.out.clone()));
                }
                Err(e) => self.out.answer(id, Err(e)).await,
            }
            return;
        }
        let answer = self.call(&method, p).await;
        self.out.answer_holding(id, answer, large).await;
    }

    /// Why `method` is not served yet, in Codex's server's words: its
    /// filesystem, exec and environment methods wait for the handshake.
    fn before_handshake(&self, method: &str) -> Option<String> {
        let what = match method {
            "environment/info" => "environment info",
            m if m.starts_with("fs/") => "filesystem",
            m if m.starts_with("process/") => "exec",
            _ => return None,
        };
        match self.handshake.load(Ordering::SeqCst) {
            Handshake::NONE => Some(format!(
                "client must call initialize before using {what} methods"
            )),
            Handshake::ANSWERED => Some(format!(
                "client must send initialized before using {what} methods"
            )),
            _ => None,
        }
    }

    /// `initialize`: the session's id and the environment; only the
    /// first that succeeds counts.
    fn initialize(&self, p: InitializeParams) -> Result<Value, RpcError> {
        if let Some(id) = p.resume_session_id {
            // Over stdio every connection is a new server, as with
            // Codex's own stdio server: nothing to resume.
            return Err(RpcError::new(-32600, format!("unknown session id {id}")));
        }
        let first = self.handshake.compare_exchange(
            Handshake::NONE,
            Handshake::ANSWERED,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        if first.is_err() {
            return Err(RpcError::new(
                -32600,
                "initialize may only be sent once per connection",
            ));
        }
        Ok(json!({
            "sessionId": self.session_id,
            "environmentInfo": environment_info(),
        }))
    }

    async fn call(self: &Arc<Self>, method: &str, p: Value) -> Result<Value, RpcError> {
        match method {
            "initialize" => self.initialize(params(p)?),
            "environment/info" => Ok(environment_info()),
            "process/read" => {
                let p: ReadParams = params(p)?;
                let proc = self.process(&p.process_id)?;
                let wait = p.wait_ms.unwrap_or(0).min(MAX_WAIT_MS);
                Ok(proc.read(p.after_seq.unwrap_or(0), p.max_bytes, wait).await)
            }
            "process/write" => self.write(params(p)?).await,
            // An unknown process is signalled and terminated as one that
            // ended, as Codex's server answers.
            "process/signal" => {
                let p: SignalParams = params(p)?;
                let CodexSignal::Interrupt = p.signal;
                let Ok(proc) = self.process(&p.process_id) else {
                    return Ok(json!({}));
                };
                if proc.running() {
                    let client = self.conn.last().await;
                    let _ = client
                        .signal(proc.session_id.clone(), SignalSpec::Name("SIGINT".into()))
                        .await;
                }
                Ok(json!({}))
            }
            "process/terminate" => {
                let p: ProcessRef = params(p)?;
                let Ok(proc) = self.process(&p.process_id) else {
                    return Ok(json!({"running": false}));
                };
                let running = proc.running();
                if running {
                    // The whole tree, at once, as Codex's own server kills.
                    let client = self.conn.last().await;
                    client
                        .kill(
                            proc.session_id.clone(),
                            Some(SignalSpec::Name("SIGKILL".into())),
                            Some(GraceS::new(0.0)),
                            Some("codex".into()),
                        )
                        .await
                        .map_err(|e| RpcError::internal(e.to_string()))?;
                }
                Ok(json!({"running": running}))
            }
            m if m.starts_with("fs/") => match self.files.call(m, p.clone()).await {
                Some(answer) => answer,
                None => fs::call(m, p).await,
            },
            m => Err(RpcError::new(
                -32601,
                format!("procd exec-server does not implement `{m}`"),
            )),
        }
    }

    fn process(&self, id: &str) -> Result<Arc<Process>, RpcError> {
        self.processes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| process::unknown(id))
    }

    /// `process/start`: a procd session running `argv` as Codex asked.
    async fn start(self: &Arc<Self>, p: StartParams) -> Result<Arc<Process>, RpcError> {
        if p.argv.is_empty() {
            return Err(RpcError::invalid("argv must not be empty"));
        }
        if p.enforce_managed_network {
            return Err(RpcError::invalid(
                "procd exec-server cannot enforce managed networking",
            ));
        }
        let cwd = path_of(&p.cwd)?;
        let env = env::resolve(p.env_policy.as_ref(), std::env::vars(), &p.env);
        // Given exactly by the daemon, or refused with the reason.
        let sandbox = match p.sandbox.as_ref().filter(|s| !s.is_null()) {
            Some(intent) => Some(sandbox::rules(intent, &env).map_err(RpcError::invalid)?),
            None => None,
        };
        found(&p.argv[0], &env, &cwd).await?;
        if self.process(&p.process_id).is_ok() {
            return Err(exists(&p.process_id));
        }
        let stdin = p.tty || p.pipe_stdin;
        let spawn = SpawnParams {
            command: env::command_line(&p.argv, p.arg0.as_deref(), &env),
            cwd: Some(cwd.to_string_lossy().into_owned()),
            pty: Some(p.tty),
            session_key: Some(self.session_id.clone()),
            owner: Some(self.owner.clone()),
            stdin: Some(if stdin {
                procd_proto::StdinMode::Pipe
            } else {
                procd_proto::StdinMode::Null
            }),
            meta: Some(json!({"codex_process_id": p.process_id})),
            sandbox: sandbox.clone().map(procd_proto::SandboxSpec::Rules),
            persist: self.keep.then_some(true),
            ..Default::default()
        };
        let client = self.conn.last().await;
        let started = procd_client::spawn(&client, spawn)
            .await
            .map_err(|e| RpcError::internal(e.to_string()))?;
        let proc = Process::new(
            p.process_id.clone(),
            started.session_id,
            p.tty,
            stdin,
            sandbox.is_some(),
        );
        let raced = {
            let mut table = self.processes.lock().unwrap_or_else(|e| e.into_inner());
            let raced = table.contains_key(&p.process_id);
            if !raced {
                table.insert(p.process_id.clone(), proc.clone());
            }
            raced
        };
        if raced {
            // Two starts of one id raced: the second loses, and ends.
            let _ = client
                .kill(
                    proc.session_id.clone(),
                    Some(SignalSpec::Name("SIGKILL".into())),
                    None,
                    None,
                )
                .await;
            return Err(exists(&p.process_id));
        }
        Ok(proc)
    }

    async fn write(&self, p: WriteParams) -> Result<Value, RpcError> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(p.chunk.as_bytes())
            .map_err(|e| RpcError::invalid(e.to_string()))?;
        let Ok(proc) = self.process(&p.process_id) else {
            return Ok(json!({"status": "unknownProcess"}));
        };
        if !proc.first_write(&p.write_id) {
            return Ok(json!({"status": "accepted"}));
        }
        if !proc.stdin || !proc.running() {
            return Ok(json!({"status": "stdinClosed"}));
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let client = self.conn.last().await;
        match client
            .write_stdin(proc.session_id.clone(), text, None, None, None)
            .await
        {
            Ok(r) if r.status == procd_proto::StdinStatus::Ok => Ok(json!({"status": "accepted"})),
            Ok(_) => Ok(json!({"status": "stdinClosed"})),
            Err(e) => Err(RpcError::internal(e.to_string())),
        }
    }
}

fn exists(id: &str) -> RpcError {
    RpcError::new(-32600, format!("process {id} already exists"))
}

/// Codex's server fails a start whose program or cwd is missing, where
/// procd would start a shell that says so and exits 127: the same error
/// as Codex's, checked off the event loop.
async fn found(
    argv0: &str,
    env: &BTreeMap<String, String>,
    cwd: &std::path::Path,
) -> Result<(), RpcError> {
    // Codex's words: its spawn's error and kind.
    const NOT_FOUND: (&str, &str) = ("No such file or directory (os error 2)", "spawnNotFound");
    const NOT_A_DIRECTORY: (&str, &str) = ("Not a directory (os error 20)", "spawnFailed");
    let (argv0, env, cwd) = (argv0.to_string(), env.clone(), cwd.to_path_buf());
    let found = tokio::task::spawn_blocking(move || match std::fs::metadata(&cwd) {
        Ok(m) if !m.is_dir() => Err(NOT_A_DIRECTORY),
        Ok(_) if resolvable(&argv0, &env, &cwd) => Ok(()),
        _ => Err(NOT_FOUND),
    })
    .await
    .unwrap_or(Err(NOT_FOUND));
    found.map_err(|(message, kind)| {
        let mut e = RpcError::internal(message);
        e.data = Some(json!({"kind": kind}));
        e
    })
}

/// Whether `argv0` names a program: a path that exists, or a name found
/// on the process's PATH (else the default one, as execvp searches).
fn resolvable(argv0: &str, env: &BTreeMap<String, String>, cwd: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if argv0.contains('/') {
        return executable(&cwd.join(argv0));
    }
    let path = env
        .get("PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", String::as_str);
    path.split(':')
        .any(|dir| executable(&cwd.join(dir).join(argv0)))
}
