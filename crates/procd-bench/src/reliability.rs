//! The reliability figures (SPEC §10 "Evidence"): a protocol fuzzer, a chaos
//! run that SIGKILLs the daemon in the middle of traffic, and a load run.
//! `procd-bench --reliability` prints them as README's Reliability table;
//! `tests/reliability.rs` runs the same code and asserts every target.
//!
//! Everything runs against real daemons in temp homes; sessions carry the
//! temp home as HOME, which is how this code finds (and ends) exactly its
//! own processes.

use crate::{Daemon, Line};
use serde::Serialize;
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

/// The method table, as a client sees it (procd-proto's `ProcdApi`), less
/// `shutdown` (it would end the run). Commands are always harmless: the
/// generator never makes up a command line.
const METHODS: &[(&str, &[(&str, Kind)])] = &[
    (
        "spawn",
        &[
            ("command", Kind::Text),
            ("cwd", Kind::Text),
            ("env", Kind::Map),
            ("pty", Kind::Bool),
            ("rows", Kind::Size),
            ("cols", Kind::Size),
            ("task_id", Kind::Text),
            ("session_key", Kind::Text),
            ("owner", Kind::Text),
            ("persist", Kind::Bool),
            ("notify_on_complete", Kind::Bool),
            ("watch_patterns", Kind::List),
            ("timeout_s", Kind::Seconds),
            ("stdin", Kind::Text),
            ("yield_ms", Kind::Millis),
            ("max_output_chars", Kind::Count),
        ],
    ),
    (
        "poll",
        &[
            ("session_id", Kind::Session),
            ("max_output_tokens", Kind::Count),
        ],
    ),
    (
        "read",
        &[
            ("session_id", Kind::Session),
            ("cursor", Kind::Count),
            ("max_bytes", Kind::Count),
            ("wait_ms", Kind::Millis),
        ],
    ),
    (
        "log",
        &[
            ("session_id", Kind::Session),
            ("offset", Kind::Count),
            ("limit", Kind::Count),
        ],
    ),
    (
        "wait",
        &[("session_id", Kind::Session), ("timeout_s", Kind::Seconds)],
    ),
    (
        "kill",
        &[
            ("session_id", Kind::Session),
            ("signal", Kind::Signal),
            ("grace_s", Kind::Seconds),
        ],
    ),
    (
        "signal",
        &[("session_id", Kind::Session), ("signal", Kind::Signal)],
    ),
    (
        "write_stdin",
        &[
            ("session_id", Kind::Session),
            ("data", Kind::Text),
            ("yield_ms", Kind::Millis),
        ],
    ),
    (
        "submit_stdin",
        &[("session_id", Kind::Session), ("data", Kind::Text)],
    ),
    ("close_stdin", &[("session_id", Kind::Session)]),
    (
        "resize",
        &[
            ("session_id", Kind::Session),
            ("rows", Kind::Size),
            ("cols", Kind::Size),
        ],
    ),
    ("close_terminal", &[("session_id", Kind::Session)]),
    (
        "list",
        &[
            ("task_id", Kind::Text),
            ("session_key", Kind::Text),
            ("status", Kind::Text),
        ],
    ),
    (
        "has_active",
        &[("task_id", Kind::Text), ("max_active_age_s", Kind::Seconds)],
    ),
    ("snapshot_running", &[("task_id", Kind::Text)]),
    (
        "kill_all",
        &[("task_id", Kind::Text), ("exclude_ids", Kind::List)],
    ),
    (
        "kill_started_since",
        &[("task_id", Kind::Text), ("baseline", Kind::List)],
    ),
    (
        "drain_notifications",
        &[("session_key", Kind::Text), ("owned_keys", Kind::List)],
    ),
    ("status", &[]),
    ("subscribe_events", &[]),
    (
        "subscribe_output",
        &[("session_id", Kind::Session), ("cursor", Kind::Count)],
    ),
    ("unsubscribe_output", &[]),
    ("no_such_method", &[("x", Kind::Text)]),
];

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

/// One generated input line and how many answers it must get.
fn input(rng: &mut fastrand::Rng, id: u64, sessions: &[String]) -> (Vec<u8>, usize) {
    let request = |rng: &mut fastrand::Rng, id: u64| -> Value {
        let (method, params) = rng.choice(METHODS.iter()).expect("something to pick");
        let mut p = serde_json::Map::new();
        for (name, kind) in params.iter() {
            if rng.u64(..100) < 60 {
                let v = if rng.u64(..100) < 75 {
                    valid(rng, *kind, sessions)
                } else {
                    hostile(rng)
                };
                p.insert(name.to_string(), v);
            }
        }
        if *method == "spawn" {
            // Whatever else is mutated, the command stays harmless.
            p.insert(
                "command".into(),
                json!(*rng.choice(COMMANDS.iter()).expect("something to pick")),
            );
            p.insert("yield_ms".into(), json!(0));
        }
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": p})
    };
    match rng.u64(..100) {
        0..=59 => (request(rng, id).to_string().into_bytes(), 1),
        60..=67 => {
            // A wrong envelope.
            let v = match rng.u64(..6) {
                0 => json!({"id": id, "method": "status"}),
                1 => json!({"jsonrpc": "2.0", "id": id, "method": 7}),
                2 => json!({"jsonrpc": "2.0", "id": id, "method": "status", "params": 3}),
                3 => json!({"jsonrpc": "1.0", "id": id, "method": "status"}),
                4 => json!({"jsonrpc": "2.0", "id": {"x": id}, "method": "status"}),
                _ => {
                    json!({"jsonrpc": "2.0", "id": id, "method": "poll", "params": ["proc_000000000000", 1, 2, 3]})
                }
            };
            (v.to_string().into_bytes(), 1)
        }
        68..=77 => {
            let n = rng.u64(..6) as usize;
            let items: Vec<Value> = (0..n).map(|i| request(rng, id * 10 + i as u64)).collect();
            (Value::Array(items).to_string().into_bytes(), 1)
        }
        78..=85 => {
            // Random bytes, invalid UTF-8 included, never a newline.
            let n = 1 + rng.u64(..300) as usize;
            let mut bytes: Vec<u8> = (0..n).map(|_| rng.u64(..) as u8).collect();
            bytes.retain(|b| *b != b'\n');
            let answers = usize::from(!String::from_utf8_lossy(&bytes).trim().is_empty());
            (bytes, answers)
        }
        86..=89 => {
            let depth = 100 + rng.u64(..20_000) as usize;
            let mut s = "[".repeat(depth);
            s.push_str(&"]".repeat(depth * (rng.u64(..2) as usize)));
            (s.into_bytes(), 1)
        }
        90..=94 => {
            // A notification: run, never answered.
            let v = json!({"jsonrpc": "2.0", "method": "status"});
            (v.to_string().into_bytes(), 0)
        }
        _ => {
            let v = json!({"jsonrpc": "2.0", "id": id, "method": "poll", "params": {"session_id": "proc_000000000000", "extra": hostile(rng)}});
            (v.to_string().into_bytes(), 1)
        }
    }
}

/// Answers on one connection: counts lines that answer requests (objects
/// with an `id`, and batch arrays; subscription items are skipped) until
/// as many as `expected` says have come, or the socket times out.
fn count_answers(
    stream: UnixStream,
    expected: std::sync::mpsc::Receiver<usize>,
    done: std::sync::mpsc::Sender<usize>,
) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut answers = 0usize;
    let mut want = None;
    loop {
        if want.is_none() {
            want = expected.try_recv().ok();
        }
        if want.is_some_and(|w| answers >= w) {
            break;
        }
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                if v.is_array() || v.get("id").is_some() {
                    answers += 1;
                }
            }
        }
    }
    let _ = done.send(answers);
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
            let mut rng =
                fastrand::Rng::with_seed(seed ^ (c as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let stream = UnixStream::connect(&socket).expect("connect");
            stream.set_read_timeout(Some(Duration::from_secs(120))).ok();
            let (tx, rx) = std::sync::mpsc::channel();
            let (want_tx, want_rx) = std::sync::mpsc::channel();
            let reader = stream.try_clone().expect("clone");
            let counter = std::thread::spawn(move || count_answers(reader, want_rx, tx));
            let mut writer = std::io::BufWriter::new(stream);
            let mut expected = 0usize;
            for i in 0..per {
                let (line, answers) = input(&mut rng, i as u64, &sessions);
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
                expected += answers;
            }
            let _ =
                writer.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":\"end\",\"method\":\"status\"}\n");
            let _ = writer.flush();
            expected += 1;
            let _ = want_tx.send(expected);
            let answered = rx.recv_timeout(Duration::from_secs(300)).unwrap_or(0);
            let _ = counter.join();
            (expected, answered)
        }));
    }
    let (mut expected, mut answered) = (0, 0);
    for w in workers {
        let (e, a) = w.join().unwrap_or((1, 0));
        expected += e;
        answered += a;
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
    vec![
        Figure {
            check: format!("protocol fuzzer: {inputs} generated inputs"),
            value: format!("{answered} of {expected} answered; daemon {}", if serving && !panicked { "serving, the same process" } else { "DOWN or replaced" }),
            target: "all answered, 0 crashes".into(),
            met: answered == expected && serving && !panicked,
            detail: format!("seed {seed} (PROCD_FUZZ_SEED); {:.0} inputs/s over 4 connections; wrong types, extreme numbers, deep nesting, invalid UTF-8, split lines, batches, notifications, 2 MiB lines", inputs as f64 / secs),
        },
    ]
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
    let home = tempfile::Builder::new()
        .prefix("pc")
        .tempdir_in("/tmp")
        .expect("home");
    std::fs::write(
        home.path().join("config.toml"),
        "max_sessions = 100000\nfinished_ttl_s = 100000\nkill_grace_s = 0.2\n",
    )
    .expect("config");
    let (mut lost, mut duplicated, mut untracked, mut unparsable) =
        (0usize, 0usize, 0usize, 0usize);
    let mut known: std::collections::BTreeSet<String> = Default::default();
    // Kills amid traffic, and those after each round's kill_all.
    let (mut kills, mut quiet_kills, mut daemon_kills, mut exits_lost) = (0, 0, 0, 0usize);
    for round in 0..rounds {
        // Every other round only the daemon dies (its keeper starts the
        // next, which must have every session live, none "lost"); the
        // others kill the keeper and the daemon both.
        let daemon_only = round % 2 == 0;
        let d = Daemon::in_home(home.path());
        let socket = d.socket();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let traffic = {
            let stop = stop.clone();
            let mut rng = fastrand::Rng::with_seed(rng.u64(..) | 1);
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let Ok(mut c) = Line::try_open(&socket) else {
                    return acked;
                };
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let command = *rng
                        .choice(
                            [
                                "sleep 30",
                                "true",
                                "echo x; sleep 0.05",
                                "sleep 30 & sleep 30",
                            ]
                            .iter(),
                        )
                        .expect("something to pick");
                    let Ok(r) = c.try_call("spawn", json!({"command": command})) else {
                        break;
                    };
                    if let Some(id) = r["session_id"].as_str() {
                        acked.push(id.to_string());
                        if rng.u64(..100) < 30 {
                            let victim =
                                rng.choice(acked.iter()).expect("something to pick").clone();
                            if c.try_call("kill", json!({"session_id": victim, "grace_s": 0.1}))
                                .is_err()
                            {
                                break;
                            }
                        }
                    }
                }
                acked
            })
        };
        std::thread::sleep(Duration::from_millis(5 + rng.u64(..150)));
        let old = d.pid();
        let d = if daemon_only && old > 0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(old),
                nix::sys::signal::Signal::SIGKILL,
            );
            daemon_kills += 1;
            Some(d)
        } else {
            d.crash();
            None
        };
        kills += 1;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let acked: Vec<String> = traffic.join().unwrap_or_default();
        // The files a crash leaves must parse.
        for file in [
            "state/procs.json",
            "run/gateway.json",
            "run/gateway.clients.json",
        ] {
            if let Ok(text) = std::fs::read_to_string(home.path().join(file)) {
                if serde_json::from_str::<Value>(&text).is_err() {
                    unparsable += 1;
                }
            }
        }
        // What must not be lost: the sessions recorded as running, and
        // those whose processes still run.
        let mut must_list: std::collections::BTreeSet<String> =
            std::fs::read_to_string(home.path().join("state/procs.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Vec<Value>>(&t).ok())
                .unwrap_or_default()
                .iter()
                .filter_map(|e| e["session_id"].as_str().map(String::from))
                .collect();
        let live_before: std::collections::BTreeSet<String> = session_processes(home.path())
            .into_iter()
            .map(|(_, id)| id)
            .collect();
        must_list.extend(live_before.iter().filter(|id| acked.contains(id)).cloned());
        // A new daemon (the keeper's, or one started now): every session
        // known so far is listed once, and every live session process is
        // one it tracks as running.
        let d = match d {
            Some(d) => {
                // Dead, it accepts nothing more on the socket it shares
                // with its keeper; a connection now waits for the next one.
                crate::wait_dead(old);
                let mut c = d.connect();
                let deadline = Instant::now() + Duration::from_secs(20);
                while c.call("status", json!({}))["pid"].as_i64() == Some(i64::from(old)) {
                    assert!(Instant::now() < deadline, "no new daemon: {}", d.stderr());
                    c = d.connect();
                }
                d
            }
            None => Daemon::in_home(home.path()),
        };
        let listed = d.connect().call("list", json!({}));
        if daemon_only {
            // Under a keeper no exit of this round's sessions may be unknown.
            exits_lost += listed["processes"].as_array().map_or(0, |a| {
                a.iter()
                    .filter(|p| p["completion_reason"] == "lost")
                    .filter(|p| {
                        p["session_id"]
                            .as_str()
                            .is_some_and(|id| acked.iter().any(|a| a == id))
                    })
                    .count()
            });
        }
        let mut ids: Vec<String> = listed["processes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p["session_id"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let running: std::collections::HashSet<String> = listed["processes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|p| p["status"] == "running")
                    .filter_map(|p| p["session_id"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let total = ids.len();
        ids.sort();
        ids.dedup();
        duplicated += total - ids.len();
        let listed_ids: std::collections::HashSet<&String> = ids.iter().collect();
        lost += must_list
            .iter()
            .filter(|id| !listed_ids.contains(id))
            .count();
        // Processes of sessions the new daemon does not run must be gone
        // (it ends what the old one started but never recorded); a killed
        // process may take a moment to disappear.
        let settle = Instant::now() + Duration::from_secs(2);
        let mut strays = Vec::new();
        while Instant::now() < settle {
            strays = session_processes(home.path())
                .into_iter()
                .filter(|(_, id)| !running.contains(id))
                .collect();
            if strays.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for (pid, _) in strays {
            untracked += 1;
            // End it here: nothing else would.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        known.extend(ids);
        known.extend(acked);
        d.connect().call("kill_all", json!({}));
        d.crash();
        quiet_kills += 1;
    }
    // Nothing of this run may outlive it.
    let d = Daemon::in_home(home.path());
    d.connect().call("kill_all", json!({}));
    drop(d);
    for (pid, _) in session_processes(home.path()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    vec![Figure {
        check: format!("chaos: daemon SIGKILLed {kills} times amid spawn/kill traffic ({daemon_kills} of them the daemon alone, its keeper left), and {quiet_kills} times after a round's kill_all"),
        value: format!("{lost} lost, {duplicated} duplicated, {untracked} untracked, {unparsable} unparsable files, {exits_lost} exits unknown after a daemon-only kill ({} sessions)", known.len()),
        target: "0 / 0 / 0 / 0 / 0".into(),
        met: lost + duplicated + untracked + unparsable + exits_lost == 0,
        detail: format!("seed {seed}; a kill lands 5-155 ms into each round; after each, a new daemon must list every session once and track every live session process"),
    }]
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
            std::thread::spawn(move || {
                let mut c = Line::open(&socket);
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
                    let Some(id) = spawned.and_then(|r| r["session_id"].as_str().map(String::from))
                    else {
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
                    if n % 8 == 0 {
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
            })
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
