//! Instructions per request, counted by callgrind (issue "the request path
//! at socket speed"): a count is the same for the same binary and input,
//! whatever else the machine does, where a time moves by ±30 % here.
//!
//! The daemon runs under `valgrind --tool=callgrind` (the keeper and the
//! daemon both; the sessions' programs are not traced), answers `n`
//! requests on one connection and is shut down; the same for `m > n`
//! requests; the daemon's total instructions differ by the cost of `m - n`
//! requests, its start-up and shutdown cancelling out. The baseline is the
//! bench's line echo server (blocking reads, a 332-byte answer, as poll's)
//! measured the same way. The monitor is slowed to once an hour so that no
//! tick falls in one run and not the other. Each row's detail also gives
//! the same echo served on a multi-thread Tokio runtime, as the daemon's
//! requests are: what of the daemon's count is the runtime's, not procd's;
//! and the least the same request can cost through serde_json (the floor
//! server: one parse into typed params, one serialization of a stored
//! result, blocking reads, no runtime, no lookup).

use super::Row;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What is asked, over and over.
#[derive(Clone, Copy)]
enum Ask {
    /// `poll` of a running session that printed nothing.
    Poll,
    /// `poll` of a finished `seq 1 3000`: a 1000-character preview to
    /// redact and escape, as a dev server's poll has.
    PollWithOutput,
    /// `read` of 4 KiB from the start of the same session's output.
    Read4k,
    /// `read` of 4 KiB of a finished session that printed `LOG_LINE`s:
    /// words, paths, punctuation, as a server prints, where `seq`'s
    /// digits give the redaction's searches little to try.
    ReadLog,
}

/// The line the log-lines session prints, 100 times: nothing in it is a
/// secret, so procd's answer and the floor server's carry the same text.
const LOG_LINE: &str = "INFO 2026-12-03 09:26:16 proxy: GET /api/projects/42 -> 200 in 12 ms (process 3141, pool 3/10, cache miss)";

/// What each ask is, in one place: the daemon's run, its check and the
/// floor server all take it from here.
impl Ask {
    /// The session's command.
    fn command(self) -> String {
        match self {
            Ask::Poll => "sleep 600".into(),
            Ask::PollWithOutput | Ask::Read4k => "seq 1 3000".into(),
            Ask::ReadLog => format!("yes '{LOG_LINE}' | head -n 100"),
        }
    }

    /// What the session prints, all of it.
    fn output(self) -> String {
        match self {
            Ask::Poll => String::new(),
            Ask::PollWithOutput | Ask::Read4k => (1..=3000).map(|i| format!("{i}\n")).collect(),
            Ask::ReadLog => format!("{LOG_LINE}\n").repeat(100),
        }
    }

    /// The method and params asked of session `id`.
    fn request(self, id: &str) -> (&'static str, serde_json::Value) {
        match self {
            Ask::Poll | Ask::PollWithOutput => ("poll", json!({"session_id": id})),
            Ask::Read4k | Ask::ReadLog => (
                "read",
                json!({"session_id": id, "cursor": 0, "max_bytes": 4096}),
            ),
        }
    }

    /// The answer's field that carries output, and what it holds when
    /// the session printed `output`: the last 1000 characters, or a
    /// 4 KiB read's whole lines from the start.
    fn carried(self, output: &str) -> (&'static str, &str) {
        match self {
            Ask::Poll | Ask::PollWithOutput => (
                "output_preview",
                &output[output.len().saturating_sub(1000)..],
            ),
            Ask::Read4k | Ask::ReadLog => {
                let end = output[..4096].rfind('\n').map_or(0, |at| at + 1);
                ("data", &output[..end])
            }
        }
    }

    /// The session's id at the floor server, which has no spawn.
    fn floor_session(self) -> &'static str {
        match self {
            Ask::Poll => SLEEP,
            Ask::PollWithOutput | Ask::Read4k => SEQ,
            Ask::ReadLog => LOG,
        }
    }
}

/// How many requests two runs make, `n` and `m` (the count is of the
/// `m - n` more).
#[derive(Clone, Copy)]
pub(super) struct Counted {
    /// Of empty polls, and of the echoes measured beside them.
    pub polls: (u64, u64),
    /// Of the requests whose answer carries output (a poll's preview, a
    /// read's window), each costing about twenty empty polls.
    pub with_output: (u64, u64),
}

/// The rows, from runs of `n` and `m` requests.
pub(super) fn instruction_rows(counted: Counted) -> Vec<Row> {
    let (n, m) = counted.polls;
    let echo = echo_per_request(Echo::Blocking, n, m);
    let tokio_echo = echo_per_request(Echo::Tokio, n, m);
    [
        (Ask::Poll, "instructions per poll request"),
        (Ask::PollWithOutput, "instructions per poll with output"),
        (Ask::Read4k, "instructions per read of 4 KiB"),
        (Ask::ReadLog, "instructions per read of 4 KiB of log lines"),
    ]
    .into_iter()
    .map(|(ask, metric)| {
        let (n, m) = match ask {
            Ask::Poll => counted.polls,
            Ask::PollWithOutput | Ask::Read4k | Ask::ReadLog => counted.with_output,
        };
        let procd = daemon_per_request(ask, n, m);
        let floor = echo_per_request(Echo::Floor(ask), n, m);
        let mut row = Row::against(
            metric.into(),
            procd,
            floor,
            "instructions",
            super::Ratio::AtMost(1.2),
            format!(
                "callgrind: the daemon's instructions for {m} requests on one connection minus those for {n}, per request; baseline: the same request through serde_json at the least (the floor server), counted the same way; for information, no target: the line echo server answering a 332-byte line: {echo:.0}, the same echo on Tokio: {tokio_echo:.0}"
            ),
        );
        row.baseline_name = Some("floor server".into());
        row
    })
    .collect()
}

/// The daemon's instructions per request of `ask`.
fn daemon_per_request(ask: Ask, n: u64, m: u64) -> f64 {
    let a = daemon_total(ask, n);
    let b = daemon_total(ask, m);
    (b.saturating_sub(a)) as f64 / (m - n) as f64
}

fn callgrind(out: &Path) -> Command {
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--trace-children=yes")
        // Sessions' programs (and the shell snapshot's) run natively.
        .arg("--trace-children-skip=*sh,*bash,*sleep,*seq,*env,*cat")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// The daemon's instructions, start to end, when it answered `count`
/// requests of `ask`.
fn daemon_total(ask: Ask, count: u64) -> u64 {
    let home = crate::temp_home("pbi", "monitor_interval_s = 3600\n");
    let exe = std::env::current_exe().expect("own path");
    let mut daemon = Callgrinded(
        callgrind(&home.path().join("cg.%p"))
            .arg(exe)
            .arg("--daemon-child")
            .arg(home.path())
            .env("HOME", home.path())
            .env("PROCD_LOG", "warn")
            .spawn()
            .expect("valgrind (apt-get install valgrind)"),
    );
    let socket = home.path().join("run/procd.sock");
    let mut c = connect_within(&socket, Duration::from_secs(120));
    let pid = call(&mut c, "status", json!({}))["pid"]
        .as_i64()
        .expect("the daemon's pid");
    let command = ask.command();
    // Asked inside, so that a failed check still shuts the daemon down
    // below (a panic here would leave it running under callgrind).
    let asked = (|| -> Result<(), String> {
        let spawned = call(&mut c, "spawn", json!({"command": command}));
        let Some(id) = spawned["session_id"].as_str() else {
            return Err(format!("{command} did not start: {spawned}"));
        };
        if !matches!(ask, Ask::Poll) {
            // Ended, so its whole output is in and the answer is the same
            // on every call.
            let waited = call(&mut c, "wait", json!({"session_id": id, "timeout_s": 60}));
            if waited["status"] != "exited" {
                return Err(format!("{command} did not end: {waited}"));
            }
        }
        let (method, params) = ask.request(id);
        // What is counted is what the row says: the preview or the window
        // is there, and the same as the floor server's.
        let first = call(&mut c, method, params.clone());
        let output = ask.output();
        let (field, expected) = ask.carried(&output);
        if first[field].as_str() != Some(expected) {
            return Err(format!("{method} answered {first}, not {expected:?}"));
        }
        for _ in 0..count {
            if call(&mut c, method, params.clone()).is_null() {
                return Err(format!("{method} failed"));
            }
        }
        Ok(())
    })();
    call(&mut c, "kill_all", json!({}));
    call(&mut c, "shutdown", json!({}));
    drop(c);
    assert!(
        daemon.ended_within(Duration::from_secs(120)),
        "the daemon under callgrind did not stop"
    );
    if let Err(why) = asked {
        panic!("{why}");
    }
    total_of(&home.path().join(format!("cg.{pid}")))
}

/// The keeper under callgrind, ended when dropped if it still runs: a
/// call that panics (the daemon died, and its keeper started another
/// under callgrind) must not leave them running. SIGTERM first, so the
/// keeper takes its daemon and their cgroup with it.
struct Callgrinded(std::process::Child);

impl Callgrinded {
    /// Whether it exits within `limit`; killed (and reaped) if not.
    fn ended_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.0.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = self.0.kill();
                let _ = self.0.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }
}

impl Drop for Callgrinded {
    fn drop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        if self.0.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            Signal::SIGTERM,
        );
        self.ended_within(Duration::from_secs(60));
    }
}

/// Which line echo server.
#[derive(Clone, Copy)]
enum Echo {
    /// Blocking reads on one thread: the baseline.
    Blocking,
    /// A multi-thread Tokio runtime, as the daemon's.
    Tokio,
    /// Not an echo: the request answered as cheaply as serde_json can.
    Floor(Ask),
}

/// The echo server's instructions per request.
fn echo_per_request(echo: Echo, n: u64, m: u64) -> f64 {
    let a = echo_total(echo, n);
    let b = echo_total(echo, m);
    (b.saturating_sub(a)) as f64 / (m - n) as f64
}

fn echo_total(echo: Echo, count: u64) -> u64 {
    let dir = tempfile::Builder::new()
        .prefix("pbe")
        .tempdir_in("/tmp")
        .expect("temp dir");
    let socket = dir.path().join("echo.sock");
    let out = dir.path().join("cg.echo");
    let mut server = callgrind(&out)
        .arg(std::env::current_exe().expect("own path"))
        .arg(match echo {
            Echo::Blocking => "--echo-child",
            Echo::Tokio => "--tokio-echo-child",
            Echo::Floor(_) => "--floor-child",
        })
        .arg(&socket)
        .spawn()
        .expect("valgrind (apt-get install valgrind)");
    let mut c = connect_within(&socket, Duration::from_secs(60));
    let request = match echo {
        Echo::Floor(ask) => floor_request(ask),
        Echo::Blocking | Echo::Tokio => super::line_of_len(85, "params"),
    };
    for _ in 0..count {
        c.writer.write_all(request.as_bytes()).expect("write");
        let mut line = String::new();
        c.reader.read_line(&mut line).expect("echo");
        // A server that stopped answers nothing: counted, that would be a
        // figure for fewer requests than asked.
        assert!(line.ends_with('\n'), "the server under callgrind stopped");
    }
    drop(c);
    let _ = server.wait();
    total_of(&out)
}

/// Serves one connection: a 332-byte line for every line read (what
/// `--echo-child SOCKET` runs under callgrind).
pub(super) fn run_echo(socket: &Path) -> i32 {
    let listener = match std::os::unix::net::UnixListener::bind(socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("procd-bench echo: {e}");
            return 2;
        }
    };
    if let Ok((stream, _)) = listener.accept() {
        super::answer_lines(stream, &super::line_of_len(332, "result"));
    }
    0
}

/// Serves one connection as `run_echo` does, on a multi-thread Tokio
/// runtime (what `--tokio-echo-child SOCKET` runs under callgrind).
pub(super) fn run_tokio_echo(socket: &Path) -> i32 {
    let answer = super::line_of_len(332, "result");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("procd-bench tokio echo: {e}");
            return 2;
        }
    };
    runtime.block_on(async {
        let listener = match tokio::net::UnixListener::bind(socket) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("procd-bench tokio echo: {e}");
                return 2;
            }
        };
        if let Ok((stream, _)) = listener.accept().await {
            super::echo_lines(stream, &answer).await;
        }
        0
    })
}

/// The floor server's sessions: the `sleep 600`, the `seq 1 3000` and
/// the log lines.
const SLEEP: &str = "proc_0b7a51a8d6f6";
const SEQ: &str = "proc_5e9a51a8d6f6";
const LOG: &str = "proc_c3e9a51a8d6f";

/// What the floor server is sent for `ask`: the daemon's request, with
/// the floor's session id.
fn floor_request(ask: Ask) -> String {
    let (method, params) = ask.request(ask.floor_session());
    request_line(method, params)
}

/// Serves one connection polls and reads as cheaply as serde_json can
/// (what `--floor-child SOCKET` runs under callgrind): each line parsed
/// into typed, borrowed params, and a stored result, as the daemon answers
/// it, serialized into a reused buffer: a running `sleep 600`'s poll, a
/// finished `seq 1 3000`'s, the first 4 KiB of its output and of the
/// log lines'. No runtime, no registry, no lookup, no redaction: what is
/// left of a request once those are gone.
pub(super) fn run_floor(socket: &Path) -> i32 {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Request<'a> {
        #[serde(borrow)]
        jsonrpc: &'a str,
        id: u64,
        method: &'a str,
        params: Params<'a>,
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Params<'a> {
        session_id: &'a str,
        cursor: Option<u64>,
        max_bytes: Option<u64>,
    }
    let answers = FloorAnswers::new();
    let listener = match std::os::unix::net::UnixListener::bind(socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("procd-bench floor: {e}");
            return 2;
        }
    };
    let Ok((stream, _)) = listener.accept() else {
        return 2;
    };
    let Ok(mut writer) = stream.try_clone() else {
        return 2;
    };
    let mut reader = BufReader::new(stream);
    let (mut line, mut out) = (String::new(), Vec::with_capacity(8192));
    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
        let request: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("procd-bench floor: {e}");
                return 2;
            }
        };
        let Params {
            session_id,
            cursor,
            max_bytes,
        } = request.params;
        if request.jsonrpc != "2.0" {
            eprintln!("procd-bench floor: not a request it serves");
            return 2;
        }
        out.clear();
        let written = match (request.method, session_id, cursor, max_bytes) {
            ("poll", SLEEP, None, None) => respond(&mut out, request.id, &answers.poll),
            ("poll", SEQ, None, None) => respond(&mut out, request.id, &answers.poll_with_output),
            ("read", SEQ, Some(0), Some(4096)) => respond(&mut out, request.id, &answers.read),
            ("read", LOG, Some(0), Some(4096)) => respond(&mut out, request.id, &answers.read_log),
            _ => {
                eprintln!("procd-bench floor: not a request it serves");
                return 2;
            }
        };
        out.push(b'\n');
        if written.is_err() || writer.write_all(&out).is_err() {
            return 2;
        }
        line.clear();
    }
    0
}

/// The stored results the floor server answers with.
struct FloorAnswers {
    poll: procd_proto::PollResult,
    poll_with_output: procd_proto::PollResult,
    read: procd_proto::ReadResult,
    read_log: procd_proto::ReadResult,
}

impl FloorAnswers {
    fn new() -> FloorAnswers {
        let poll = procd_proto::PollResult {
            session_id: SLEEP.into(),
            name: None,
            project: None,
            command: Ask::Poll.command(),
            status: procd_proto::SessionStatus::Running,
            pid: 4928,
            started_at: "2026-12-03T09:26:16.233Z".into(),
            uptime_seconds: 1.324,
            output_preview: String::new(),
            activity: Default::default(),
            note: None,
            original_chars: None,
            kept_error_lines: None,
            exit: None,
            restart: None,
            sandbox: None,
            meta: None,
            tests: None,
            queue: None,
        };
        let seq = Ask::PollWithOutput.output();
        let poll_with_output = procd_proto::PollResult {
            session_id: SEQ.into(),
            command: Ask::PollWithOutput.command(),
            status: procd_proto::SessionStatus::Exited,
            pid: 4929,
            uptime_seconds: 0.004,
            output_preview: Ask::PollWithOutput.carried(&seq).1.into(),
            exit: Some(procd_proto::ExitInfo {
                exit_code: Some(0),
                signal: None,
                completion_reason: procd_proto::CompletionReason::Exited,
                termination_source: None,
                exited_at: "2026-12-03T09:26:16.237Z".into(),
            }),
            ..poll.clone()
        };
        // A read of 4 KiB from the start of a finished session's output.
        let read_of = |ask: Ask| {
            let data = ask.carried(&ask.output()).1.to_string();
            procd_proto::ReadResult {
                cursor: 0,
                next_cursor: data.len() as u64,
                data,
                eof: false,
                status: procd_proto::SessionStatus::Exited,
                exit_code: Some(0),
                dropped: 0,
                original_chars: None,
                kept_error_lines: None,
            }
        };
        FloorAnswers {
            poll,
            poll_with_output,
            read: read_of(Ask::Read4k),
            read_log: read_of(Ask::ReadLog),
        }
    }
}

/// Writes a JSON-RPC answer with `result`, as serde_json does.
fn respond<R: serde::Serialize>(out: &mut Vec<u8>, id: u64, result: &R) -> serde_json::Result<()> {
    #[derive(serde::Serialize)]
    struct Response<'a, R> {
        jsonrpc: &'a str,
        id: u64,
        result: &'a R,
    }
    let jsonrpc = "2.0";
    serde_json::to_writer(
        out,
        &Response {
            jsonrpc,
            id,
            result,
        },
    )
}

struct Conn {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

fn connect_within(socket: &PathBuf, limit: Duration) -> Conn {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(s) = UnixStream::connect(socket) {
            let reader = BufReader::new(s.try_clone().expect("clone"));
            return Conn { writer: s, reader };
        }
        assert!(
            Instant::now() < deadline,
            "nothing listens on {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `result` of a call (Null on an error answer).
fn call(c: &mut Conn, method: &str, params: serde_json::Value) -> serde_json::Value {
    c.writer
        .write_all(request_line(method, params).as_bytes())
        .expect("write");
    let mut line = String::new();
    c.reader.read_line(&mut line).expect("answer");
    serde_json::from_str::<serde_json::Value>(&line).unwrap_or_default()["result"].clone()
}

/// A request line, as the bench sends every request.
fn request_line(method: &str, params: serde_json::Value) -> String {
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    format!("{request}\n")
}

/// The instructions a callgrind output file counts in all.
fn total_of(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary: ")
                .or_else(|| l.strip_prefix("totals: "))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{} has no totals", path.display()))
}
