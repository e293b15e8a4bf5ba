//! The reliability figures (docs/SECURITY.md "Evidence"): a protocol fuzzer, a chaos
//! run that SIGKILLs the daemon in the middle of traffic, and a load run.
//! `procd-bench --reliability` prints them as README's Reliability table;
//! `tests/reliability.rs` runs the same code and asserts every target.
//!
//! Everything runs against real daemons in temp homes; sessions carry the
//! temp home as HOME, which is how this code finds (and ends) exactly its
//! own processes.

use crate::{Daemon, Line};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// One figure and whether it meets its target.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub check: String,
    pub value: String,
    pub target: String,
    pub met: bool,
    pub detail: String,
}

pub struct Sizes {
    pub fuzz_inputs: usize,
    pub chaos_rounds: usize,
    pub load_clients: usize,
    pub load_secs: u64,
}

pub const FULL: Sizes = Sizes {
    fuzz_inputs: 100_000,
    chaos_rounds: 20,
    load_clients: 64,
    load_secs: 30,
};

pub const QUICK: Sizes = Sizes {
    fuzz_inputs: 5_000,
    chaos_rounds: 4,
    load_clients: 8,
    load_secs: 3,
};

pub fn run(s: &Sizes) -> Vec<Figure> {
    let mut figures = fuzz(s.fuzz_inputs);
    figures.extend(chaos(s.chaos_rounds));
    figures.extend(load(s.load_clients, Duration::from_secs(s.load_secs)));
    figures
}

// ----- reproducible randomness ----------------------------------------------------

/// The seed of reproducible inputs (`fastrand`): PROCD_FUZZ_SEED, else the clock.
fn seed() -> u64 {
    std::env::var("PROCD_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        })
}

// ----- the fuzzer -------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Kind {
    Text,
    Session,
    Bool,
    Seconds,
    Millis,
    Count,
    Size,
    Map,
    List,
    Signal,
}

/// The kind of value a param of this name takes (names are the protocol's).
fn kind_of(param: &str) -> Kind {
    match param {
        "session_id" | "shell_id" => Kind::Session,
        "pty" | "persist" | "notify_on_complete" => Kind::Bool,
        "timeout_s" | "grace_s" | "max_active_age_s" => Kind::Seconds,
        "wait_ms" | "yield_ms" => Kind::Millis,
        "cursor" | "max_bytes" | "offset" | "limit" | "max_output_chars" | "max_output_tokens"
        | "subscription" => Kind::Count,
        "rows" | "cols" => Kind::Size,
        "env" | "ready" | "limits" => Kind::Map,
        "watch_patterns" | "exclude_ids" | "baseline" | "owned_keys" => Kind::List,
        "signal" => Kind::Signal,
        _ => Kind::Text,
    }
}

/// `spawn`'s params (procd-proto's `SpawnParams`; the method table lists
/// every other method's).
const SPAWN_PARAMS: &[&str] = &[
    "command",
    "cwd",
    "env",
    "pty",
    "rows",
    "cols",
    "task_id",
    "session_key",
    "owner",
    "persist",
    "notify_on_complete",
    "watch_patterns",
    "timeout_s",
    "stdin",
    "yield_ms",
    "max_output_chars",
    "max_output_tokens",
    "ready",
    "limits",
    "name",
    "project",
    "replace",
    "restart",
    "sandbox",
];

/// The methods the fuzzer calls: procd-proto's method table, less
/// `shutdown` (it would end the run), plus `spawn` and a method that does
/// not exist. Commands are always harmless: the generator never makes up a
/// command line.
fn methods() -> Vec<(&'static str, &'static [&'static str])> {
    let mut all: Vec<(&'static str, &'static [&'static str])> = procd_proto::METHOD_PARAMS
        .iter()
        .filter(|(name, _)| *name != "shutdown")
        .copied()
        .collect();
    all.push(("spawn", SPAWN_PARAMS));
    all.push(("no_such_method", &["x"]));
    all
}

/// The error codes `method` may answer a generated request with: -32602
/// for any of them (values are mutated), and what the method's work can
/// meet (docs/protocol.md).
fn errors_of(method: &str) -> &'static [i64] {
    use procd_proto::error::{
        INVALID_PARAMS, LIMIT_REACHED, METHOD_NOT_FOUND, SESSION_NOT_FOUND, SPAWN_FAILED,
        WRONG_STATE,
    };
    const SESSION: &[i64] = &[
        INVALID_PARAMS as i64,
        SESSION_NOT_FOUND as i64,
        WRONG_STATE as i64,
    ];
    match method {
        // -32002: a name that runs another command (docs/stacks.md).
        "spawn" => &[
            INVALID_PARAMS as i64,
            SPAWN_FAILED as i64,
            LIMIT_REACHED as i64,
            WRONG_STATE as i64,
        ],
        "up" => &[INVALID_PARAMS as i64, LIMIT_REACHED as i64],
        // -32001: an `after` that names no session procd holds.
        "list" => &[INVALID_PARAMS as i64, SESSION_NOT_FOUND as i64],
        // -32004: past 256 sessions.
        "search" => &[
            INVALID_PARAMS as i64,
            SESSION_NOT_FOUND as i64,
            LIMIT_REACHED as i64,
        ],
        // -32002: a key with no running session; -32004: past 64 sessions.
        "wait_any" => &[
            INVALID_PARAMS as i64,
            SESSION_NOT_FOUND as i64,
            WRONG_STATE as i64,
            LIMIT_REACHED as i64,
        ],
        // A shell is a session: opened as one is spawned.
        "shell_open" => &[
            INVALID_PARAMS as i64,
            SPAWN_FAILED as i64,
            LIMIT_REACHED as i64,
            WRONG_STATE as i64,
        ],
        // -32002: a closed shell, or one with 64 runs waiting.
        "shell_run" | "shell_interrupt" | "shell_wait" | "shell_read" | "shell_commands"
        | "shell_close" => SESSION,
        "no_such_method" => &[METHOD_NOT_FOUND as i64],
        _ if procd_proto::method_params(method).is_some_and(|p| p.contains(&"session_id")) => {
            SESSION
        }
        _ => &[INVALID_PARAMS as i64],
    }
}

/// Whether `result` has the shape procd-proto gives `method`'s result.
fn fits(method: &str, result: &Value) -> Result<(), String> {
    use procd_proto::{
        CloseTerminalResult, DownResult, DrainResult, HasActiveResult, KillResult, KilledCount,
        ListResult, LogResult, PollResult, ReadResult, ResizeResult, SignalResult, SnapshotResult,
        SpawnResult, StatusResult, StdinResult, UpResult, UpdateResult, WaitAnyResult, WaitResult,
    };
    fn shape<T: serde::de::DeserializeOwned>(v: &Value) -> Result<(), String> {
        T::deserialize(v).map(drop).map_err(|e| e.to_string())
    }
    match method {
        "spawn" => shape::<SpawnResult>(result),
        "poll" => shape::<PollResult>(result),
        "read" => shape::<ReadResult>(result),
        "log" => shape::<LogResult>(result),
        "wait" => shape::<WaitResult>(result),
        "wait_any" => shape::<WaitAnyResult>(result),
        "search" => shape::<procd_proto::SearchResult>(result),
        "update" => shape::<UpdateResult>(result),
        "kill" => shape::<KillResult>(result),
        "signal" => shape::<SignalResult>(result),
        "write_stdin" | "submit_stdin" | "close_stdin" => shape::<StdinResult>(result),
        "resize" => shape::<ResizeResult>(result),
        "close_terminal" => shape::<CloseTerminalResult>(result),
        "list" => shape::<ListResult>(result),
        "has_active" => shape::<HasActiveResult>(result),
        "snapshot_running" => shape::<SnapshotResult>(result),
        "kill_all" | "kill_started_since" => shape::<KilledCount>(result),
        "drain_notifications" => shape::<DrainResult>(result),
        "status" => shape::<StatusResult>(result),
        "up" => shape::<UpResult>(result),
        "down" => shape::<DownResult>(result),
        "shell_open" => shape::<procd_proto::ShellOpenResult>(result),
        "shell_run" | "shell_wait" | "shell_read" | "shell_interrupt" => {
            shape::<procd_proto::ShellCommandResult>(result)
        }
        "shell_commands" => shape::<procd_proto::ShellCommandsResult>(result),
        "shell_close" => shape::<procd_proto::ShellCloseResult>(result),
        // A subscription's id.
        "subscribe_output" | "subscribe_events" if result.is_u64() || result.is_string() => Ok(()),
        "unsubscribe_output" | "unsubscribe_events" if result.is_boolean() => Ok(()),
        _ => Err(format!("{method} has no such result")),
    }
}

const COMMANDS: &[&str] = &[
    "true",
    "echo fuzz",
    "exit 3",
    "sleep 0.05",
    "printf 'a\\nb'",
];

fn hostile(rng: &mut fastrand::Rng) -> Value {
    match rng.u64(..16) {
        0 => json!(-1),
        1 => json!(1e308),
        2 => json!(-1e308),
        3 => json!(u64::MAX),
        4 => json!(1.5),
        5 => json!(""),
        6 => json!("x".repeat(70_000)),
        7 => Value::Null,
        8 => json!(true),
        9 => json!([]),
        10 => json!({"a": {"b": [1, 2, {"c": null}]}}),
        11 => json!("\u{0}\u{202e}é\u{10ffff}"),
        12 => json!(i64::MIN),
        13 => json!(9007199254740993u64),
        14 => json!([["deep"]]),
        _ => json!("proc_"),
    }
}

fn valid(rng: &mut fastrand::Rng, kind: Kind, sessions: &[String]) -> Value {
    match kind {
        Kind::Text => json!(*rng.choice(COMMANDS.iter()).expect("something to pick")),
        Kind::Session => match sessions.is_empty() || (rng.u64(..100) < 20) {
            true => json!(*rng
                .choice(["proc_000000000000", "abcd", "ab", "proc_"].iter())
                .expect("something to pick")),
            false => json!(rng.choice(sessions.iter()).expect("something to pick")),
        },
        Kind::Bool => json!((rng.u64(..100) < 50)),
        Kind::Seconds => json!(rng.u64(..200) as f64 / 1000.0),
        Kind::Millis => json!(rng.u64(..100)),
        Kind::Count => json!(rng.u64(..5000)),
        Kind::Size => json!(1 + rng.u64(..200)),
        Kind::Map => json!({"FUZZ": "1", "GH_TOKEN": "x", "PROCD_FORCE_HOME": "/"}),
        Kind::List => json!(["a", "proc_000000000000"]),
        Kind::Signal => json!(*rng
            .choice(["TERM", "SIGINT", "KILL", "NOPE"].iter())
            .expect("something to pick")),
    }
}

/// What the method table says one answer must be.
#[derive(Clone, Copy, Debug)]
enum Judge {
    /// A result of the method's shape, or one of the method's errors.
    Method(&'static str),
    /// This error code and no other.
    Error(i64),
}

/// What one input line must be answered with.
enum Expect {
    /// Nothing: a notification.
    Nothing,
    /// One answer carrying this id.
    One(Value, Judge),
    /// One array with an answer per request, matched by id.
    Batch(Vec<(Value, Judge)>),
}

/// One generated input line and what it must be answered with.
fn input(
    rng: &mut fastrand::Rng,
    id: u64,
    methods: &[(&'static str, &'static [&'static str])],
    sessions: &[String],
) -> (Vec<u8>, Expect) {
    use procd_proto::error::{INVALID_PARAMS, INVALID_REQUEST};
    let request = |rng: &mut fastrand::Rng, id: Value| -> (Value, Judge) {
        let (method, params) = *rng.choice(methods.iter()).expect("something to pick");
        let mut p = serde_json::Map::new();
        for name in params.iter() {
            if rng.u64(..100) < 60 {
                let v = if rng.u64(..100) < 75 {
                    valid(rng, kind_of(name), sessions)
                } else {
                    hostile(rng)
                };
                p.insert(name.to_string(), v);
            }
        }
        if method == "spawn" {
            // Whatever else is mutated, the command stays harmless.
            p.insert(
                "command".into(),
                json!(*rng.choice(COMMANDS.iter()).expect("something to pick")),
            );
            p.insert("yield_ms".into(), json!(0));
        }
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": p});
        (request, Judge::Method(method))
    };
    let line = |v: &Value| v.to_string().into_bytes();
    let error = |code: i32| Judge::Error(i64::from(code));
    match rng.u64(..100) {
        0..=59 => {
            let (v, judge) = request(rng, json!(id));
            (line(&v), Expect::One(json!(id), judge))
        }
        60..=67 => wrong_envelope(rng, id),
        68..=77 => {
            let n = rng.u64(..6) as usize;
            let items: Vec<(Value, Judge)> = (0..n)
                .map(|i| request(rng, json!(format!("{id}/{i}"))))
                .collect();
            let batch = Value::Array(items.iter().map(|(v, _)| v.clone()).collect());
            let expect = match n {
                0 => Expect::One(Value::Null, error(INVALID_REQUEST)),
                _ => Expect::Batch(
                    items
                        .into_iter()
                        .map(|(v, j)| (v["id"].clone(), j))
                        .collect(),
                ),
            };
            (line(&batch), expect)
        }
        78..=89 => junk(rng),
        90..=94 => {
            // A notification: run, never answered.
            let v = json!({"jsonrpc": "2.0", "method": "status"});
            (line(&v), Expect::Nothing)
        }
        _ => {
            let v = json!({"jsonrpc": "2.0", "id": id, "method": "poll", "params": {"session_id": "proc_000000000000", "extra": hostile(rng)}});
            (line(&v), Expect::One(json!(id), error(INVALID_PARAMS)))
        }
    }
}

/// A request in a wrong envelope, and its error. Where the id cannot be
/// trusted, the answer's is null.
fn wrong_envelope(rng: &mut fastrand::Rng, id: u64) -> (Vec<u8>, Expect) {
    use procd_proto::error::{INVALID_PARAMS, INVALID_REQUEST};
    let (v, answer_id, code) = match rng.u64(..6) {
        0 => (
            json!({"id": id, "method": "status"}),
            Value::Null,
            INVALID_REQUEST,
        ),
        1 => (
            json!({"jsonrpc": "2.0", "id": id, "method": 7}),
            Value::Null,
            INVALID_REQUEST,
        ),
        2 => (
            json!({"jsonrpc": "2.0", "id": id, "method": "status", "params": 3}),
            json!(id),
            INVALID_REQUEST,
        ),
        3 => (
            json!({"jsonrpc": "1.0", "id": id, "method": "status"}),
            Value::Null,
            INVALID_REQUEST,
        ),
        4 => (
            json!({"jsonrpc": "2.0", "id": {"x": id}, "method": "status"}),
            Value::Null,
            INVALID_REQUEST,
        ),
        _ => (
            json!({"jsonrpc": "2.0", "id": id, "method": "poll", "params": ["proc_000000000000", 1, 2, 3]}),
            json!(id),
            INVALID_PARAMS,
        ),
    };
    (
        v.to_string().into_bytes(),
        Expect::One(answer_id, Judge::Error(i64::from(code))),
    )
}

/// A line that is no request: random bytes, or deep nesting.
fn junk(rng: &mut fastrand::Rng) -> (Vec<u8>, Expect) {
    use procd_proto::error::{INVALID_REQUEST, PARSE_ERROR};
    let error = |code: i32| Judge::Error(i64::from(code));
    if rng.u64(..12) < 8 {
        // Random bytes, invalid UTF-8 included, never a newline, after a
        // first byte no JSON text starts with: never a request.
        let n = rng.u64(..300) as usize;
        let mut bytes = vec![*rng
            .choice(b"#%&<>?@^`|~\\".iter())
            .expect("something to pick")];
        bytes.extend((0..n).map(|_| rng.u64(..) as u8).filter(|b| *b != b'\n'));
        return (bytes, Expect::One(Value::Null, error(PARSE_ERROR)));
    }
    // Deep nesting. Balanced, it is a batch of one entry that is not a
    // request; cut off, it is not JSON.
    let depth = 100 + rng.u64(..20_000) as usize;
    let balanced = rng.bool();
    let mut s = "[".repeat(depth);
    s.push_str(&"]".repeat(depth * usize::from(balanced)));
    let expect = match balanced {
        true => Expect::Batch(vec![(Value::Null, error(INVALID_REQUEST))]),
        false => Expect::One(Value::Null, error(PARSE_ERROR)),
    };
    (s.into_bytes(), expect)
}

/// Whether `answer` is a JSON-RPC 2.0 response that `judge` accepts.
fn judged(answer: &Value, judge: Judge) -> Result<(), String> {
    if answer["jsonrpc"] != "2.0" {
        return Err("no \"jsonrpc\":\"2.0\"".into());
    }
    let (result, error) = (answer.get("result"), answer.get("error"));
    let code = match (result, error) {
        (Some(_), None) => None,
        (None, Some(e)) if e["message"].is_string() => Some(
            e["code"]
                .as_i64()
                .ok_or("an error without an integer code")?,
        ),
        _ => {
            return Err("not exactly one of result and error, or an error without a message".into())
        }
    };
    match (judge, code, result) {
        (Judge::Method(m), None, Some(result)) => fits(m, result).map_err(|e| format!("{m}: {e}")),
        (Judge::Method(m), Some(code), _) if errors_of(m).contains(&code) => Ok(()),
        (Judge::Method(m), Some(code), _) => {
            Err(format!("{m} answered error {code}, which it never should"))
        }
        (Judge::Error(want), Some(code), _) if code == want => Ok(()),
        (Judge::Error(want), _, _) => Err(format!("expected error {want}")),
        (Judge::Method(_), None, None) => unreachable!("one of them is present"),
    }
}

/// Every answer a connection must get, by id, and what is wrong so far.
#[derive(Default)]
struct Ledger {
    /// Single requests with an id: judge by the id's JSON text.
    single: std::collections::HashMap<String, Judge>,
    /// Requests answered with a null id (errors only): count per code.
    null_id: std::collections::HashMap<i64, usize>,
    /// Batch entries' ids → (batch, judge); a batch's size.
    in_batch: std::collections::HashMap<String, (usize, Judge)>,
    batch_sizes: Vec<usize>,
    /// Batches none of whose entries is a request: count per answer codes.
    null_batches: std::collections::HashMap<Vec<i64>, usize>,
    /// Answers that were right, and what was wrong (first few kept).
    right: usize,
    wrong: usize,
    examples: Vec<String>,
}

impl Ledger {
    fn expect(&mut self, expect: Expect) {
        match expect {
            Expect::Nothing => {}
            Expect::One(Value::Null, Judge::Error(code)) => {
                *self.null_id.entry(code).or_default() += 1
            }
            Expect::One(id, judge) => {
                self.single.insert(id.to_string(), judge);
            }
            Expect::Batch(items) if items.iter().all(|(id, _)| id.is_null()) => {
                let codes = items
                    .iter()
                    .map(|(_, judge)| match judge {
                        Judge::Error(code) => *code,
                        Judge::Method(_) => 0,
                    })
                    .collect();
                *self.null_batches.entry(codes).or_default() += 1;
            }
            Expect::Batch(items) => {
                let batch = self.batch_sizes.len();
                self.batch_sizes.push(items.len());
                for (id, judge) in items {
                    self.in_batch.insert(id.to_string(), (batch, judge));
                }
            }
        }
    }

    fn wrong(&mut self, what: String) {
        self.wrong += 1;
        if self.examples.len() < 5 {
            self.examples.push(what);
        }
    }

    /// One line the daemon wrote.
    fn answer(&mut self, line: &str) {
        let cut = |s: &str| s.chars().take(300).collect::<String>();
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return self.wrong(format!("an unparseable line: {}", cut(line)));
        };
        match &v {
            Value::Array(items) => self.batch(items, line),
            Value::Object(o) if !o.contains_key("id") => self.notification(&v, line),
            _ => {
                let verdict = match &v["id"] {
                    Value::Null => {
                        let code = v["error"]["code"].as_i64().unwrap_or_default();
                        match self.null_id.get_mut(&code) {
                            Some(n) if *n > 0 => {
                                *n -= 1;
                                judged(&v, Judge::Error(code))
                            }
                            _ => Err("an answer with a null id that nothing asked for".into()),
                        }
                    }
                    id => match self.single.remove(&id.to_string()) {
                        Some(judge) => judged(&v, judge),
                        None => Err("an answer to no request, or a second answer".into()),
                    },
                };
                match verdict {
                    Ok(()) => self.right += 1,
                    Err(e) => self.wrong(format!("{e}: {}", cut(line))),
                }
            }
        }
    }

    fn batch(&mut self, items: &[Value], line: &str) {
        let cut = |s: &str| s.chars().take(300).collect::<String>();
        if items.iter().all(|item| item["id"].is_null()) {
            let codes: Vec<i64> = items
                .iter()
                .map(|item| item["error"]["code"].as_i64().unwrap_or_default())
                .collect();
            let verdict = match self.null_batches.get_mut(&codes) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    items
                        .iter()
                        .zip(&codes)
                        .try_for_each(|(item, code)| judged(item, Judge::Error(*code)))
                }
                _ => Err("a batch answer to no batch".to_string()),
            };
            return match verdict {
                Ok(()) => self.right += items.len(),
                Err(e) => self.wrong(format!("{e}: {}", cut(line))),
            };
        }
        let batch = items
            .first()
            .and_then(|first| self.in_batch.get(&first["id"].to_string()))
            .map(|(batch, _)| *batch);
        let Some(batch) = batch else {
            return self.wrong(format!("a batch answer to no batch: {}", cut(line)));
        };
        if items.len() != self.batch_sizes[batch] {
            self.wrong(format!(
                "a batch of {} answered with {} entries: {}",
                self.batch_sizes[batch],
                items.len(),
                cut(line)
            ));
        }
        for item in items {
            let verdict = match self.in_batch.remove(&item["id"].to_string()) {
                Some((b, judge)) if b == batch => judged(item, judge),
                _ => Err("an entry that answers no request of this batch".to_string()),
            };
            match verdict {
                Ok(()) => self.right += 1,
                Err(e) => self.wrong(format!("{e}: {}", cut(&item.to_string()))),
            }
        }
    }

    /// A subscription's item: its method's name and item shape.
    fn notification(&mut self, v: &Value, line: &str) {
        let item = &v["params"]["result"];
        let fits = match v["method"].as_str() {
            Some("output") => procd_proto::OutputItem::deserialize(item).map(drop),
            Some("event") => procd_proto::Event::deserialize(item).map(drop),
            _ => return self.wrong(format!("a notification of no subscription: {line}")),
        };
        if let Err(e) = fits.and(
            v["params"]["subscription"]
                .is_null()
                .then_some(())
                .map_or(Ok(()), |()| {
                    Err(serde::de::Error::custom("no subscription id"))
                }),
        ) {
            self.wrong(format!(
                "a subscription item that does not fit ({e}): {line}"
            ));
        }
    }

    /// Expected answers that never came.
    fn missing(&self) -> usize {
        self.single.len()
            + self.null_id.values().sum::<usize>()
            + self.in_batch.len()
            + self.null_batches.values().sum::<usize>()
    }
}

/// Reads every line of one connection until the daemon closes it (the
/// client half-closed after its last request), judging each against the
/// ledger, which the writer fills before it sends each request.
fn judge_answers(stream: UnixStream, ledger: &std::sync::Mutex<Ledger>) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) => lock(ledger).answer(line.trim_end_matches('\n')),
            Err(e) => return lock(ledger).wrong(format!("reading answers failed: {e}")),
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn fuzz(inputs: usize) -> Vec<Figure> {
    let seed = seed();
    let mut d = Daemon::with_config("max_sessions = 512\nmax_running = 512\nfinished_ttl_s = 5\n");
    let mut ctl = d.connect();
    let sessions: Vec<String> = (0..4)
        .map(|_| {
            ctl.call("spawn", json!({"command": "cat"}))["session_id"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    // The daemon that must still be the one serving at the end: under a
    // keeper a crashed daemon is replaced, and a replacement also answers.
    let daemon = d.pid();
    let started = Instant::now();
    let conns = 4;
    let per = inputs / conns;
    let mut workers = Vec::new();
    for c in 0..conns {
        let socket = d.socket();
        let sessions = sessions.clone();
        workers.push(std::thread::spawn(move || {
            let seed = seed ^ (c as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            fuzz_connection(&socket, &sessions, seed, per)
        }));
    }
    let mut all = Ledger::default();
    for w in workers {
        let ledger = w.join().unwrap_or_else(|_| {
            let mut l = Ledger::default();
            l.wrong("a fuzzing connection's thread panicked".into());
            l
        });
        let missing = ledger.missing();
        all.right += ledger.right;
        all.wrong += ledger.wrong + missing;
        all.examples.extend(ledger.examples);
        if missing > 0 {
            all.examples.push(format!("{missing} answers never came"));
        }
    }
    let secs = started.elapsed().as_secs_f64();
    // Over-long lines: refused, connection closed, daemon unharmed.
    for _ in 0..3 {
        if let Ok(mut s) = UnixStream::connect(d.socket()) {
            let _ = s.write_all(&vec![b'x'; 2 << 20]);
        }
    }
    let alive = d.is_alive();
    let serving = alive
        && d.connect().call("status", json!({}))["pid"].as_i64() == Some(i64::from(daemon))
        && d.pid() == daemon;
    ctl.call("kill_all", json!({}));
    let panicked = d.stderr().contains("panicked");
    let examples = match all.examples.is_empty() {
        true => String::new(),
        false => format!("; first wrong: {}", all.examples.join(" | ")),
    };
    vec![
        Figure {
            check: format!("protocol fuzzer: {inputs} generated inputs"),
            value: format!(
                "{} answers as the method table says, {} wrong or missing; daemon {}",
                all.right,
                all.wrong,
                if serving && !panicked { "serving, the same process" } else { "DOWN or replaced" }
            ),
            target: "every answer right, 0 crashes".into(),
            met: all.wrong == 0 && all.right > 0 && serving && !panicked,
            detail: format!("seed {seed} (PROCD_FUZZ_SEED); {:.0} inputs/s over 4 connections; each answer matched by id and judged by its method's result type or error codes; wrong types, extreme numbers, deep nesting, invalid UTF-8, split lines, batches, notifications, 2 MiB lines{examples}", inputs as f64 / secs),
        },
    ]
}

/// One fuzzing connection: `per` generated inputs, each one's expected
/// answer recorded before it is sent, then a half-close; the ledger of
/// what came back.
fn fuzz_connection(socket: &Path, sessions: &[String], seed: u64, per: usize) -> Ledger {
    let mut rng = fastrand::Rng::with_seed(seed);
    let methods = methods();
    let stream = UnixStream::connect(socket).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(120))).ok();
    let ledger = std::sync::Arc::new(std::sync::Mutex::new(Ledger::default()));
    let reader = stream.try_clone().expect("clone");
    let judge = {
        let ledger = ledger.clone();
        std::thread::spawn(move || judge_answers(reader, &ledger))
    };
    let mut writer = std::io::BufWriter::new(&stream);
    for i in 0..per {
        let (line, expect) = input(&mut rng, i as u64, &methods, sessions);
        // Known before it is sent: an answer can come at once.
        lock(&ledger).expect(expect);
        if (rng.u64(..100) < 5) && line.len() > 2 {
            // A line that arrives in pieces.
            let cut = 1 + rng.u64(..line.len() as u64 - 1) as usize;
            let _ = writer.write_all(&line[..cut]);
            let _ = writer.flush();
            let _ = writer.write_all(&line[cut..]);
        } else {
            let _ = writer.write_all(&line);
        }
        let _ = writer.write_all(b"\n");
    }
    let _ = writer.flush();
    drop(writer);
    // Half-closed: the daemon answers what it was asked, then
    // closes, so a missing answer and an extra one both show.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = judge.join();
    let answers = std::mem::take(&mut *lock(&ledger));
    answers
}

// ----- chaos ----------------------------------------------------------------------

/// Live pids whose environment says they are sessions of the daemon whose
/// home is `home` (HOME=<home> and a PROCD_SESSION_ID), with their ids.
pub(crate) fn session_processes(home: &Path) -> Vec<(i32, String)> {
    let home_entry = format!("HOME={}", home.display());
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
        {
            continue;
        }
        let mut id = None;
        let mut ours = false;
        for var in env.split(|b| *b == 0) {
            if var == home_entry.as_bytes() {
                ours = true;
            }
            if let Some(v) = var.strip_prefix(b"PROCD_SESSION_ID=") {
                id = Some(String::from_utf8_lossy(v).to_string());
            }
        }
        if let (true, Some(id)) = (ours, id) {
            found.push((pid, id));
        }
    }
    found
}

fn chaos(rounds: usize) -> Vec<Figure> {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let home = crate::temp_home(
        "pc",
        "max_sessions = 100000\nfinished_ttl_s = 100000\nkill_grace_s = 0.2\n",
    );
    let mut t = ChaosTally::default();
    // Every session whose spawn was answered, in any round, and its exit
    // once a daemon has listed one: each later daemon must list it once,
    // with that same exit.
    let mut acked_ever: std::collections::BTreeMap<String, Option<Value>> = Default::default();
    for round in 0..rounds {
        // Every other round only the daemon dies (its keeper starts the
        // next, which must have every session live, none "lost"); the
        // others kill the keeper and the daemon both.
        let daemon_only = round % 2 == 0;
        let d = Daemon::in_home(home.path());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let traffic = traffic(d.socket(), stop.clone(), rng.u64(..) | 1);
        std::thread::sleep(Duration::from_millis(5 + rng.u64(..150)));
        let old = d.pid();
        let survivor = if daemon_only && old > 0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(old),
                nix::sys::signal::Signal::SIGKILL,
            );
            t.daemon_kills += 1;
            Some(d)
        } else {
            d.crash();
            None
        };
        t.kills += 1;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let acked: Vec<String> = traffic.join().unwrap_or_default();
        t.unparsable += unparsable_files(home.path());
        // What must not be lost: the sessions recorded as running, those
        // whose processes still run, and every one acknowledged so far.
        let mut must_list = recorded_running(home.path());
        must_list.extend(
            session_processes(home.path())
                .into_iter()
                .map(|(_, id)| id)
                .filter(|id| acked.contains(id)),
        );
        acked_ever.extend(acked.iter().map(|id| (id.clone(), None)));
        must_list.extend(acked_ever.keys().cloned());
        let d = next_daemon(survivor, old, home.path());
        let listed = d.connect().call("list", json!({}));
        if daemon_only {
            // Under a keeper no exit of this round's sessions may be unknown.
            t.exits_lost += entries(&listed)
                .filter(|p| p["completion_reason"] == "lost")
                .filter(|p| {
                    p["session_id"]
                        .as_str()
                        .is_some_and(|id| acked.iter().any(|a| a == id))
                })
                .count();
        }
        t.count_listing(&listed, &must_list);
        let running: std::collections::HashSet<String> = entries(&listed)
            .filter(|p| p["status"] == "running")
            .filter_map(|p| p["session_id"].as_str().map(String::from))
            .collect();
        t.untracked += end_untracked(home.path(), &running);
        t.same_exits(&mut acked_ever, &listed);
        let mut c = d.connect();
        c.call("kill_all", json!({}));
        // Every exit is known now; the next daemon must keep each.
        t.same_exits(&mut acked_ever, &c.call("list", json!({})));
        d.crash();
        t.quiet_kills += 1;
    }
    // The last daemon lists every session of every round once, ended,
    // with the exit first seen.
    let d = Daemon::in_home(home.path());
    let listed = d.connect().call("list", json!({}));
    for id in acked_ever.keys() {
        match entries(&listed)
            .filter(|p| p["session_id"] == id.as_str())
            .count()
        {
            0 => t.lost += 1,
            1 => {}
            n => t.duplicated += n - 1,
        }
    }
    t.same_exits(&mut acked_ever, &listed);
    let unended = acked_ever.values().filter(|exit| exit.is_none()).count();
    end_everything(d, home.path());
    t.figure(seed, unended, acked_ever.len())
}

/// What the chaos run counts, over all its rounds.
#[derive(Default)]
struct ChaosTally {
    lost: usize,
    duplicated: usize,
    untracked: usize,
    unparsable: usize,
    exits_lost: usize,
    exits_changed: usize,
    /// The first exit that changed, before and after: where to look.
    first_change: Option<String>,
    /// Kills amid traffic, those after a round's kill_all, and how many of
    /// the first left the keeper alive.
    kills: usize,
    quiet_kills: usize,
    daemon_kills: usize,
}

impl ChaosTally {
    /// The chaos row: everything counted, and the target all zero.
    fn figure(self, seed: u64, unended: usize, sessions: usize) -> Vec<Figure> {
        let ChaosTally {
            lost,
            duplicated,
            untracked,
            unparsable,
            exits_lost,
            exits_changed,
            first_change,
            kills,
            quiet_kills,
            daemon_kills,
        } = self;
        let first_change =
            first_change.map_or(String::new(), |c| format!("; first exit changed: {c}"));
        vec![Figure {
            check: format!("chaos: daemon SIGKILLed {kills} times amid spawn/kill traffic ({daemon_kills} of them the daemon alone, its keeper left), and {quiet_kills} times after a round's kill_all"),
            value: format!("{lost} lost, {duplicated} duplicated, {untracked} untracked, {unparsable} unparsable files, {exits_lost} exits unknown after a daemon-only kill, {exits_changed} exits changed, {unended} never ended ({sessions} sessions)"),
            target: "0 / 0 / 0 / 0 / 0 / 0 / 0".into(),
            met: lost + duplicated + untracked + unparsable + exits_lost + exits_changed + unended == 0 && sessions > 0,
            detail: format!("seed {seed}; a kill lands 5-155 ms into each round; after each, a new daemon must list every session acknowledged in any round once, with the exit an earlier daemon listed, and track every live session process; the last lists all of them ended{first_change}"),
        }]
    }

    /// Records the exit of every ended session in a `list` answer that
    /// `acked` holds, and counts those whose exit differs from the one
    /// recorded before (an exit, once known, never changes).
    fn same_exits(
        &mut self,
        acked: &mut std::collections::BTreeMap<String, Option<Value>>,
        listed: &Value,
    ) {
        for p in entries(listed).filter(|p| p["status"] == "exited") {
            let Some((id, known)) = p["session_id"]
                .as_str()
                .and_then(|id| acked.get_mut(id).map(|known| (id, known)))
            else {
                continue;
            };
            let exit = json!([p["exit_code"], p["completion_reason"]]);
            match known {
                Some(before) if *before != exit => {
                    self.exits_changed += 1;
                    self.first_change
                        .get_or_insert_with(|| format!("{id} {before} then {exit}"));
                }
                Some(_) => {}
                None => *known = Some(exit),
            }
        }
    }

    /// A new daemon's `list`: every id in `must_list` once, none twice.
    fn count_listing(&mut self, listed: &Value, must_list: &std::collections::BTreeSet<String>) {
        let mut ids: Vec<&str> = entries(listed)
            .filter_map(|p| p["session_id"].as_str())
            .collect();
        let total = ids.len();
        ids.sort_unstable();
        ids.dedup();
        self.duplicated += total - ids.len();
        self.lost += must_list
            .iter()
            .filter(|id| ids.binary_search(&id.as_str()).is_err())
            .count();
    }
}

/// Nothing of the chaos run may outlive it: its sessions are killed by
/// the daemon, and any process left by pid.
fn end_everything(d: Daemon, home: &Path) {
    d.connect().call("kill_all", json!({}));
    drop(d);
    for (pid, _) in session_processes(home) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// One client's spawn/kill traffic until `stop`; the ids whose spawn was
/// answered.
fn traffic(
    socket: std::path::PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seed: u64,
) -> std::thread::JoinHandle<Vec<String>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    std::thread::spawn(move || {
        let mut acked = Vec::new();
        let Ok(mut c) = Line::try_open(&socket) else {
            return acked;
        };
        let commands = [
            "sleep 30",
            "true",
            "echo x; sleep 0.05",
            "sleep 30 & sleep 30",
        ];
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let command = *rng.choice(commands.iter()).expect("something to pick");
            let Ok(r) = c.try_call("spawn", json!({"command": command})) else {
                break;
            };
            let Some(id) = r["session_id"].as_str() else {
                continue;
            };
            acked.push(id.to_string());
            if rng.u64(..100) < 30 {
                let victim = rng.choice(acked.iter()).expect("something to pick").clone();
                if c.try_call("kill", json!({"session_id": victim, "grace_s": 0.1}))
                    .is_err()
                {
                    break;
                }
            }
        }
        acked
    })
}

/// How many of the files a crash leaves do not parse.
fn unparsable_files(home: &Path) -> usize {
    [
        "state/procs.json",
        "run/gateway.json",
        "run/gateway.clients.json",
    ]
    .iter()
    .filter_map(|file| std::fs::read_to_string(home.join(file)).ok())
    .filter(|text| serde_json::from_str::<Value>(text).is_err())
    .count()
}

/// The sessions the checkpoint records as running.
fn recorded_running(home: &Path) -> std::collections::BTreeSet<String> {
    std::fs::read_to_string(home.join("state/procs.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Vec<Value>>(&t).ok())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e["session_id"].as_str().map(String::from))
        .collect()
}

/// The daemon after a kill: the keeper's next one (`survivor` is the
/// handle of the killed daemon `old`, whose keeper lives), or one started
/// now after a whole crash.
fn next_daemon(survivor: Option<Daemon>, old: i32, home: &Path) -> Daemon {
    let Some(d) = survivor else {
        return Daemon::in_home(home);
    };
    // Dead, it accepts nothing more on the socket it shares with its
    // keeper; a connection now waits for the next one.
    crate::wait_dead(old);
    let mut c = d.connect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.call("status", json!({}))["pid"].as_i64() == Some(i64::from(old)) {
        assert!(Instant::now() < deadline, "no new daemon: {}", d.stderr());
        c = d.connect();
    }
    d
}

/// The entries of a `list` answer.
fn entries(listed: &Value) -> impl Iterator<Item = &Value> {
    listed["processes"].as_array().into_iter().flatten()
}

/// Processes of sessions the new daemon does not run must be gone (it
/// ends what the old one started but never recorded); a killed process
/// may take a moment to disappear. Those left are counted and ended here,
/// as nothing else would.
fn end_untracked(home: &Path, running: &std::collections::HashSet<String>) -> usize {
    let settle = Instant::now() + Duration::from_secs(2);
    let mut strays = Vec::new();
    while Instant::now() < settle {
        strays = session_processes(home)
            .into_iter()
            .filter(|(_, id)| !running.contains(id))
            .collect();
        if strays.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for (pid, _) in &strays {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    strays.len()
}

// ----- load -------------------------------------------------------------------------

fn fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |r| r.count())
}

fn status_field(pid: i32, field: &str) -> u64 {
    crate::status_field(pid, field).unwrap_or(0)
}

fn zombies_of(pid: i32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|s| {
            let rest: Vec<&str> = s
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            rest.first() == Some(&"Z")
                && rest.get(1).and_then(|p| p.parse::<i32>().ok()) == Some(pid)
        })
        .count()
}

/// One load client: the mixed calls in a loop until `deadline`; how many
/// it made, and what each unexpected error said.
fn load_client(socket: &Path, n: usize, deadline: Instant) -> (u64, Vec<String>) {
    let mut c = Line::open(socket);
    let (mut ops, mut errors) = (0u64, Vec::new());
    let task = format!("load-{n}");
    let mut check = |r: Result<Value, Value>, what: &str| {
        ops += 1;
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                errors.push(format!("{what}: {e}"));
                None
            }
        }
    };
    while Instant::now() < deadline {
        let spawned = check(
            c.result(
                "spawn",
                json!({"command": "echo hello; sleep 0.02", "task_id": task}),
            ),
            "spawn",
        );
        let Some(id) = spawned.and_then(|r| r["session_id"].as_str().map(String::from)) else {
            continue;
        };
        check(c.result("poll", json!({"session_id": id})), "poll");
        check(
            c.result("read", json!({"session_id": id, "wait_ms": 50})),
            "read",
        );
        check(c.result("list", json!({"task_id": task})), "list");
        check(
            c.result("wait", json!({"session_id": id, "timeout_s": 10})),
            "wait",
        );
        check(
            c.result("log", json!({"session_id": id, "limit": 5})),
            "log",
        );
        check(c.result("status", json!({})), "status");
        if n.is_multiple_of(8) {
            if let Some(r) = check(
                c.result("spawn", json!({"command": "sleep 30", "task_id": task})),
                "spawn",
            ) {
                check(
                    c.result("kill", json!({"session_id": r["session_id"]})),
                    "kill",
                );
            }
        }
    }
    (ops, errors)
}

fn load(clients: usize, length: Duration) -> Vec<Figure> {
    // Finished sessions are pruned 3 s after their exit, so that what they
    // hold (their log descriptors) is back by the end.
    let d = Daemon::with_config("max_sessions = 1024\nfinished_ttl_s = 3\n");
    let pid = d.pid();
    {
        let mut c = d.connect();
        let id = c.call("spawn", json!({"command": "echo warm"}))["session_id"].clone();
        c.call("wait", json!({"session_id": id, "timeout_s": 10}));
        c.call("status", json!({}));
    }
    std::thread::sleep(Duration::from_millis(200));
    let (fds0, threads0, rss0) = (
        fds(pid),
        status_field(pid, "Threads:"),
        status_field(pid, "VmRSS:"),
    );
    // The keeper holds a copy of every live session's descriptors: they
    // must come back too.
    let keeper = d.keeper_pid();
    let keeper_fds0 = fds(keeper);
    let deadline = Instant::now() + length;
    let workers: Vec<_> = (0..clients)
        .map(|n| {
            let socket = d.socket();
            std::thread::spawn(move || load_client(&socket, n, deadline))
        })
        .collect();
    let (mut ops, mut errors) = (0u64, Vec::new());
    for w in workers {
        let (o, e) = w
            .join()
            .unwrap_or((0, vec!["a client thread panicked".into()]));
        ops += o;
        errors.extend(e);
    }
    d.connect().call("kill_all", json!({}));
    // Back to baseline: blocking threads linger ~10 s after their work.
    let settle = Instant::now() + Duration::from_secs(40);
    while Instant::now() < settle
        && (fds(pid) > fds0
            || status_field(pid, "Threads:") > threads0
            || zombies_of(pid) > 0
            || fds(keeper) > keeper_fds0
            || zombies_of(keeper) > 0)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (fds1, threads1, rss1) = (
        fds(pid),
        status_field(pid, "Threads:"),
        status_field(pid, "VmRSS:"),
    );
    let zombies = zombies_of(pid) + zombies_of(keeper);
    let keeper_fds1 = fds(keeper);
    // The figures are the same daemon's (a crash would have replaced it).
    let same = d.pid() == pid;
    let rss_growth_mib = rss1.saturating_sub(rss0) as f64 / 1024.0;
    vec![Figure {
        check: format!("load: {clients} clients × mixed calls for {} s", length.as_secs()),
        value: format!(
            "{} unexpected errors in {ops} calls; fds {fds0}→{fds1} (keeper {keeper_fds0}→{keeper_fds1}), threads {threads0}→{threads1}, RSS +{rss_growth_mib:.1} MiB, {zombies} zombies{}",
            errors.len(),
            if same { "" } else { "; the daemon was REPLACED" }
        ),
        target: "0 errors; the same daemon; fds (its and the keeper's), threads back; RSS +≤ 32 MiB; 0 zombies".into(),
        met: errors.is_empty()
            && same
            && fds1 <= fds0
            && keeper_fds1 <= keeper_fds0
            && threads1 <= threads0
            && rss_growth_mib <= 32.0
            && zombies == 0,
        detail: format!(
            "spawn, poll, read{{wait_ms}}, list, wait, log, status (and spawn+kill for 1 client in 8); {:.0} calls/s{}",
            ops as f64 / length.as_secs_f64(),
            errors.first().map(|e| format!("; first error: {e}")).unwrap_or_default()
        ),
    }]
}

pub fn print(figures: &[Figure]) {
    println!("| check | result | target | met? |");
    println!("|---|---|---|---|");
    for f in figures {
        println!(
            "| {} | {} | {} | {} |",
            f.check,
            f.value,
            f.target,
            if f.met { "yes" } else { "NO" }
        );
    }
    println!();
    for f in figures {
        println!("- {}: {}", f.check, f.detail);
    }
}
