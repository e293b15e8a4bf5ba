//! The rows of "find it in the output" (docs/agents.md): `search` over a
//! large log beside ripgrep on the same file, polls answered while it
//! runs beside polls while rg runs, and a 2000-test run's completion text beside its raw output.

use crate::{median, percentile, Daemon, Ratio, Row};
use serde_json::json;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn search_rows(size: u64, rounds: usize) -> Vec<Row> {
    let mut rows = search_beside_ripgrep(size, rounds);
    rows.push(test_run_text());
    rows
}

/// A chunk of log: lines of 10 to 120 characters from a fixed seed, one
/// in about 30000 an ERROR line.
fn chunk(bytes: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let letters = b"abcdefghij klmnop";
    let (mut out, mut line) = (Vec::with_capacity(bytes + 200), 0u64);
    while out.len() < bytes {
        line += 1;
        if line % 29_989 == 0 {
            out.extend_from_slice(format!("{line} ERROR code={}\n", next() % 1000).as_bytes());
            continue;
        }
        out.extend_from_slice(format!("{line} ").as_bytes());
        for _ in 0..10 + next() % 110 {
            out.push(letters[(next() % letters.len() as u64) as usize]);
        }
        out.push(b'\n');
    }
    out
}

/// `search` for a rare word over a log of `size` bytes, and `rg -n` for
/// it over the same file, alternating; and the polls another client makes
/// meanwhile, beside polls on an idle daemon.
fn search_beside_ripgrep(size: u64, rounds: usize) -> Vec<Row> {
    let rg = ["/usr/bin/rg", "/usr/local/bin/rg"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("ripgrep (`rg`, Debian's ripgrep; tests/system-deps.sh installs it)");
    let d = Daemon::with_config(&format!("max_log_bytes = {}\n", size * 2));
    let piece = chunk((8 << 20).min(size as usize));
    let file = d.home.join("chunk.txt");
    std::fs::write(&file, &piece).expect("chunk");
    let times = size.div_ceil(piece.len() as u64);
    let mut c = d.connect();
    let id = c.call(
        "spawn",
        json!({"command": format!("for i in $(seq {times}); do cat {}; done", file.display())}),
    )["session_id"]
        .clone();
    let w = c.call("wait", json!({"session_id": id, "timeout_s": 600}));
    assert_eq!(w["status"], "exited", "{w}");
    let log = d
        .home
        .join(format!("state/logs/{}.log", id.as_str().unwrap_or("")));
    let bytes = std::fs::metadata(&log).expect("log").len();
    let mut ripgrep = || {
        let t = Instant::now();
        let mut child = Command::new(rg)
            .args(["-n", "ERROR"])
            .arg(&log)
            .stdout(Stdio::piped())
            .spawn()
            .expect("rg");
        let mut out = String::new();
        let _ = child.stdout.take().map(|mut o| o.read_to_string(&mut out));
        child.wait().expect("rg");
        (t.elapsed(), out.lines().count() as u64)
    };
    let mut search = || {
        let t = Instant::now();
        let r = c.call(
            "search",
            json!({"session_ids": [id], "pattern": "ERROR", "max_matches": 10000}),
        );
        (t.elapsed(), r["total"].as_u64().unwrap_or(0))
    };
    ripgrep(); // the file in the page cache for both
               // Each side's throughput, and the polls another client made while it
               // ran: procd's search loads the daemon, rg the same cores but not it.
    let (mut ours, mut theirs) = (Side::default(), Side::default());
    let once = |side: &mut Side, run: &mut dyn FnMut() -> (Duration, u64)| {
        let mut took = Duration::ZERO;
        side.polls.extend(polls_during(&d, &id, || {
            let (t, found) = run();
            took = t;
            assert!(found > 0, "nothing found");
        }));
        side.rates.push(bytes as f64 / took.as_secs_f64() / 1e6);
    };
    for round in 0..rounds {
        if round % 2 == 0 {
            once(&mut ours, &mut search);
            once(&mut theirs, &mut ripgrep);
        } else {
            once(&mut theirs, &mut ripgrep);
            once(&mut ours, &mut search);
        }
    }
    let (rg_found, found) = (ripgrep().1, search().1);
    assert_eq!(found, rg_found, "search and rg count different matches");
    let mut throughput = Row::against(
        format!("search throughput ({} MiB log, {found} matches)", bytes >> 20),
        median(&ours.rates),
        median(&theirs.rates),
        "MB/s",
        Ratio::AtLeast(0.5),
        format!(
            "median of {rounds} rounds, alternating, the log in the page cache. procd: one `search` RPC (max_matches 10000) over the session's log; ripgrep: `rg -n ERROR LOG` on the same file, its output read through a pipe"
        ),
    );
    throughput.baseline_name = Some("ripgrep".into());
    let (busy_polls, idle_polls) = (ours.polls, theirs.polls);
    let (busy, idle) = (percentile(&busy_polls, 0.99), percentile(&idle_polls, 0.99));
    let polls = Row::against(
        "poll p99 while a search runs".into(),
        busy,
        idle,
        "ms",
        Ratio::AtMost(2.0),
        format!(
            "{} polls on another connection during the searches, beside {} during rg's (the same load on the cores, none in the daemon); p50 {:.3} vs {:.3} ms. The search scans on a thread of its own at nice + 10",
            busy_polls.len(),
            idle_polls.len(),
            median(&busy_polls),
            median(&idle_polls)
        ),
    );
    vec![throughput, polls]
}

/// One side of the comparison: MB/s per round, and poll round trips (ms)
/// taken meanwhile.
#[derive(Default)]
struct Side {
    rates: Vec<f64>,
    polls: Vec<f64>,
}

/// Polls of `id` on another connection, one after another, for as long
/// as `during` runs: their round trips in ms.
fn polls_during(d: &Daemon, id: &serde_json::Value, during: impl FnOnce()) -> Vec<f64> {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (mut c, done, id) = (d.connect(), done.clone(), id.clone());
        std::thread::spawn(move || {
            let mut took = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let t = Instant::now();
                c.call("poll", json!({"session_id": id}));
                took.push(t.elapsed().as_secs_f64() * 1e3);
            }
            took
        })
    };
    during();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    poller.join().expect("poller")
}

/// The failing tests of the 2000-test run.
const FAILING: [u32; 7] = [13, 250, 511, 900, 1300, 1777, 1999];

/// A node test run of 2000 tests, 7 failing: the characters of the
/// completion text the model reads, as a share of the raw output's; met
/// at 2 % or less with every failure named.
fn test_run_text() -> Row {
    let d = Daemon::start();
    let dir = d.home.join("tests");
    std::fs::create_dir_all(&dir).expect("dir");
    let failing: Vec<String> = FAILING.iter().map(u32::to_string).collect();
    std::fs::write(
        dir.join("many.test.js"),
        format!(
            "const test = require('node:test');\nconst assert = require('node:assert');\nconst failing = new Set([{}]);\nfor (let i = 1; i <= 2000; i++) {{\n  test(`case ${{i}} of the suite`, () => {{\n    if (failing.has(i)) assert.strictEqual(i * 2, i + 1);\n  }});\n}}\n",
            failing.join(", ")
        ),
    )
    .expect("test file");
    let mut c = d.connect();
    let id = c.call(
        "spawn",
        json!({"command": "node --test", "cwd": dir, "session_key": "bench-tests", "notify_on_complete": true}),
    )["session_id"]
        .clone();
    c.call("wait", json!({"session_id": id, "timeout_s": 300}));
    let events = c.call("drain_notifications", json!({"session_key": "bench-tests"}));
    let text = events["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["type"] == "completion"))
        .and_then(|e| e["text"].as_str())
        .unwrap_or("")
        .to_string();
    let log = d
        .home
        .join(format!("state/logs/{}.log", id.as_str().unwrap_or("")));
    let raw = std::fs::read_to_string(&log).expect("log").chars().count();
    let named = FAILING
        .iter()
        .filter(|n| text.contains(&format!("case {n} of the suite")))
        .count();
    let chars = text.chars().count();
    let mut row = Row::at_most(
        "completion text of 2000 tests, 7 failing".into(),
        100.0 * chars as f64 / raw.max(1) as f64,
        "%",
        2.0,
        format!(
            "`node --test`: the completion event's text, {chars} characters, beside the {raw} of the raw output; failures named: {named} of 7"
        ),
    );
    row.met &= named == FAILING.len();
    row
}
