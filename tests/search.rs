//! `search` over logs of many windows, a time range, a budget, and a log
//! of 1 GiB (issue: find it in the output). What procd returns is checked
//! against what `grep` prints for the same log file.

use crate::common::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

/// Lines of many lengths, some matching, over several 1 MiB windows.
const VARIED_LINES: &str = r#"
import random, sys
r = random.Random(7)
out = []
for i in range(1, 130001):
    n = r.randrange(0, 90)
    payload = "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    if i % 4999 == 0:
        payload = "ERROR boom " + payload
    out.append(f"row {i}" + (" " + payload if payload else ""))
sys.stdout.write("\n".join(out) + "\n")
"#;

/// `grep -n` on the session's log file with `args`.
fn grep(d: &Daemon, id: &str, args: &[&str]) -> String {
    let log = d.state_dir().join(format!("logs/{id}.log"));
    let out = Command::new("grep")
        .args(["-n", "-E"])
        .args(args)
        .arg(&log)
        .output()
        .expect("grep");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A log that spans several windows reads as `grep -n` reads it: the same
/// lines, numbers and context, where windows meet too; a match that would
/// run over a line's end is no match; `^` and `$` are a line's ends.
#[test]
fn search_over_many_windows_prints_what_grep_prints() {
    let d = Daemon::start();
    let script = d.home.path().join("lines.py");
    std::fs::write(&script, VARIED_LINES).expect("script");
    let id = d.spawn(&format!("python3 {}", script.display()));
    d.wait_exit(&id);
    let log = d.state_dir().join(format!("logs/{id}.log"));
    let size = std::fs::metadata(&log).map_or(0, |m| m.len());
    assert!(size > 5 << 20, "a log of several windows: {size} bytes");
    // The lines on either side of each place where one window (1 MiB,
    // cut back to a line's end) meets the next: their context lies in
    // the other window.
    let bytes = std::fs::read(&log).expect("log");
    let (mut start, mut lasts, mut firsts) = (0, Vec::new(), Vec::new());
    while start + (1 << 20) < bytes.len() {
        let window = &bytes[start..start + (1 << 20)];
        let end = start
            + window
                .iter()
                .rposition(|b| *b == b'\n')
                .expect("a line end");
        let last = bytes[..end].iter().filter(|b| **b == b'\n').count() + 1;
        lasts.push(last.to_string());
        firsts.push((last + 1).to_string());
        start = end + 1;
    }
    let last_lines = format!("^row ({})( |$)", lasts.join("|"));
    let first_lines = format!("^row ({})( |$)", firsts.join("|"));
    for (pattern, context, ignore_case) in [
        (last_lines.as_str(), &["-C", "3"][..], false),
        (first_lines.as_str(), &["-C", "3"][..], false),
        ("ERROR", &["-C", "3"][..], false),
        ("error boom", &["-B", "4", "-A", "1"][..], true),
        ("^row [0-9]*00 ", &["-C", "2"][..], false),
        ("qzx", &["-C", "5"][..], false),
        ("[0-9]$", &["-A", "2"][..], false),
        // Common enough that some match sits on a window's first or last
        // lines, its context in the window next to it.
        ("ab", &["-C", "3"][..], false),
        ("ab", &[][..], false),
    ] {
        let mut ours = vec!["grep", pattern, &id, "--max", "10000"];
        ours.extend(context);
        let mut theirs: Vec<&str> = context.to_vec();
        if ignore_case {
            ours.push("-i");
            theirs.push("-i");
        }
        theirs.push(pattern);
        let out = d.cli(&ours);
        let expected = grep(&d, &id, &theirs);
        assert!(expected.lines().count() > 20, "{pattern}: a test of little");
        assert_eq!(out.status.code(), Some(0), "{pattern}: {out:?}");
        let got = String::from_utf8_lossy(&out.stdout);
        if got != expected {
            let first = got
                .lines()
                .zip(expected.lines())
                .find(|(a, b)| a != b)
                .map(|(a, b)| format!("ours {a:?}, grep's {b:?}"));
            panic!("{pattern}: differs from grep at {first:?}");
        }
    }
    // Across a line's end: grep finds nothing, and nor does procd.
    let crossing = d.ok(
        "search",
        json!({"session_ids": [id], "pattern": "[a-z]\\srow"}),
    );
    assert_eq!(crossing["total"], 0, "{crossing}");
    assert!(grep(&d, &id, &["[a-z]\\srow"]).is_empty());

    // From a cursor deep in the log (a line's start, or inside a line):
    // the lines that start there or later, numbered as in the whole log,
    // and the log before the line-count mark next to it (one a MiB) not
    // read at all.
    let offsets = grep(&d, &id, &["-b", "ERROR"]);
    let deep = bytes.len() * 3 / 4;
    let line_start = deep + bytes[deep..].iter().position(|b| *b == b'\n').unwrap() + 1;
    for from in [line_start, line_start + 5] {
        let expected: Vec<(u64, u64)> = offsets
            .lines()
            .filter_map(|l| {
                let mut parts = l.splitn(3, ':');
                let line = parts.next()?.parse().ok()?;
                let at: u64 = parts.next()?.parse().ok()?;
                (at >= from as u64).then_some((line, at))
            })
            .collect();
        assert!(expected.len() >= 3, "{expected:?}");
        let r = d.ok(
            "search",
            json!({"session_ids": [id], "pattern": "ERROR", "from_cursor": from}),
        );
        let got: Vec<(u64, u64)> = r["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["line"].as_u64().unwrap(), m["cursor"].as_u64().unwrap()))
            .collect();
        assert_eq!(got, expected, "from {from}");
        let scanned = r["bytes_scanned"].as_u64().unwrap();
        assert!(
            scanned <= size - from as u64 + (2 << 20),
            "{scanned} bytes read from {from}"
        );
    }
}

/// Waits until the wall clock is in a later second than `t`'s.
fn next_second_after(t: SystemTime) -> SystemTime {
    let second = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    wait_until("the clock moves to the next second", || {
        second(SystemTime::now()) > second(t)
    });
    SystemTime::now()
}

fn rfc3339(t: SystemTime) -> String {
    procd_sys::clock::rfc3339(t)
}

/// `since` and `until` take the output written in that time (to the
/// second), on the wire as RFC 3339 and in the CLI as a time ago too; an
/// inverted range or a bad time is refused by name.
#[test]
fn search_takes_a_time_range() {
    let d = Daemon::start();
    let go = d.home.path().join("go");
    let id = d.spawn(&format!(
        "echo 'early match'; while [ ! -e {} ]; do sleep 0.02; done; echo 'late match'",
        go.display()
    ));
    d.read_until(&id, "early match");
    // A running session is searched as an ended one is.
    let running = d.ok("search", json!({"session_ids": [id], "pattern": "match"}));
    assert_eq!(running["matches"][0]["text"], "early match", "{running}");
    assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "running");
    let between = next_second_after(SystemTime::now());
    next_second_after(between);
    std::fs::write(&go, "").expect("go");
    d.wait_exit(&id);
    let texts = |r: &Value| -> Vec<String> {
        r["matches"]
            .as_array()
            .map(|m| {
                m.iter()
                    .map(|m| m["text"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let search = |extra: Value| {
        let mut params = json!({"session_ids": [id], "pattern": "match"});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        d.ok("search", params)
    };
    let since = search(json!({"since": rfc3339(between)}));
    assert_eq!(texts(&since), ["late match"], "{since}");
    assert_eq!(since["matches"][0]["line"], 2, "{since}");
    let until = search(json!({"until": rfc3339(between)}));
    assert_eq!(texts(&until), ["early match"], "{until}");
    let day = search(json!({"since": rfc3339(SystemTime::now() - Duration::from_secs(86_400))}));
    assert_eq!(texts(&day), ["early match", "late match"], "{day}");
    // The CLI: the same, as grep prints it.
    let cli = d.cli(&["logs", &id, "--grep", "match", "--since", &rfc3339(between)]);
    assert_eq!(
        String::from_utf8_lossy(&cli.stdout),
        "2:late match\n",
        "{cli:?}"
    );
    let ago = d.cli(&["grep", "match", &id, "--since", "1h"]);
    assert_eq!(
        String::from_utf8_lossy(&ago.stdout),
        "1:early match\n2:late match\n",
        "{ago:?}"
    );
    let bad = d.cli(&["grep", "match", &id, "--since", "yesterday"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    for (params, names) in [
        (json!({"pattern": "x", "since": "yesterday"}), "since:"),
        (
            json!({"pattern": "x", "since": rfc3339(between), "until": rfc3339(between - Duration::from_secs(5))}),
            "since:",
        ),
    ] {
        d.refused("search", params, names);
    }
}

/// `max_output_chars` bounds what comes back, all matches still counted.
#[test]
fn search_keeps_to_a_budget_in_characters() {
    let d = Daemon::start();
    let id = d.spawn("for i in $(seq 1 50); do echo \"hit number $i of fifty\"; done");
    d.wait_exit(&id);
    let r = d.ok(
        "search",
        json!({"session_ids": [id], "pattern": "hit", "max_output_chars": 100}),
    );
    let returned: usize = r["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap().chars().count() + 1)
        .sum();
    assert!(returned <= 100, "{returned} characters: {r}");
    assert_eq!(r["matches"].as_array().map(Vec::len), Some(4), "{r}");
    assert_eq!(
        (r["total"].as_u64(), r["truncated"].as_bool()),
        (Some(50), Some(true)),
        "{r}"
    );
}

/// A chunk of 8 MiB with a few ERROR lines; 128 of them make 1 GiB.
const CHUNK: &str = r#"
import random, sys
r = random.Random(11)
lines, size, i = [], 0, 0
while size < (8 << 20):
    i += 1
    n = r.randrange(10, 120)
    line = f"{i} " + "".join(r.choice("abcdefghij klmnop") for _ in range(n))
    if i % 29989 == 0:
        line = f"{i} ERROR code={r.randrange(1000)}"
    lines.append(line)
    size += len(line) + 1
sys.stdout.write("\n".join(lines) + "\n")
"#;

/// 1 GiB of log: the matches are grep's (line, byte offset, text), the
/// daemon's memory grows by at most 16 MiB while it searches, other
/// clients' polls are answered meanwhile, and a daemon killed during a
/// search leaves a clear error and the log whole, searched again alike.
#[test]
fn search_over_a_gigabyte_is_grep_exact_bounded_and_survives_a_kill() {
    let d = Daemon::with_config("max_log_bytes = 1610612736\n");
    let chunk = d.home.path().join("chunk");
    let made = Command::new("python3")
        .arg("-c")
        .arg(CHUNK)
        .stdout(std::fs::File::create(&chunk).expect("chunk"))
        .status()
        .expect("python3");
    assert!(made.success());
    let id = d.spawn(&format!(
        "for i in $(seq 128); do cat {}; done",
        chunk.display()
    ));
    // Taking in 1 GiB can outlast a Conn's 60 s read timeout on a loaded
    // machine (the debug build, the whole suite beside it): this wait's
    // connection waits as long as the wait does.
    let stream = std::os::unix::net::UnixStream::connect(d.socket()).expect("connect");
    let mut waiting = Conn::from_stream(stream.try_clone().expect("clone"));
    stream
        .set_read_timeout(Some(Duration::from_secs(660)))
        .expect("timeout");
    let long = json!({"session_id": id, "timeout_s": 600});
    let waited = waiting.call("wait", long);
    assert_eq!(waited["result"]["status"], "exited", "{waited}");
    let log = d.state_dir().join(format!("logs/{id}.log"));
    let size = std::fs::metadata(&log).expect("log").len();
    assert!(size >= 1 << 30, "1 GiB of log: {size}");

    let expected = Command::new("grep")
        .args(["-n", "-b", "ERROR"])
        .arg(&log)
        .output()
        .expect("grep");
    let expected: Vec<(u64, u64, String)> = String::from_utf8_lossy(&expected.stdout)
        .lines()
        .map(|l| {
            let mut parts = l.splitn(3, ':');
            let line = parts.next().and_then(|n| n.parse().ok()).unwrap_or(0);
            let at = parts.next().and_then(|n| n.parse().ok()).unwrap_or(0);
            (line, at, parts.next().unwrap_or("").to_string())
        })
        .collect();
    assert!(expected.len() > 100, "{} matches", expected.len());

    // Other clients poll while the search runs; the peak RSS is reset
    // first so that VmHWM is the search's peak.
    let pid = d.pid();
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the peak RSS");
    let before = status_kib(pid, "VmRSS:");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (socket, done, id) = (d.socket(), done.clone(), id.clone());
        std::thread::spawn(move || {
            let mut conn = Conn::open(&socket);
            let (mut answered, mut slowest) = (0u32, Duration::ZERO);
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let asked = Instant::now();
                let r = conn.call("poll", json!({"session_id": id}));
                assert!(r.get("result").is_some(), "{r}");
                slowest = slowest.max(asked.elapsed());
                answered += 1;
            }
            (answered, slowest)
        })
    };
    // The scan runs at nice + 10, so beside other work on the machine it
    // can outlast a Conn's 60 s read timeout too: asked on the long one.
    let searched = Instant::now();
    let r = waiting.call(
        "search",
        json!({"session_ids": [id], "pattern": "ERROR", "max_matches": 10000}),
    );
    let took = searched.elapsed();
    let r = r
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("search failed: {r}"));
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (answered, slowest) = poller.join().expect("poller");
    let peak = status_kib(pid, "VmHWM:");
    eprintln!("searched 1 GiB in {took:?}; RSS {before} kB, peak {peak} kB; {answered} polls, the slowest {slowest:?}");
    let got: Vec<(u64, u64, String)> = r["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["line"].as_u64().unwrap_or(0),
                m["cursor"].as_u64().unwrap_or(0),
                m["text"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(r["total"].as_u64(), Some(expected.len() as u64));
    assert_eq!(r["bytes_scanned"].as_u64(), Some(size));
    assert!(got == expected, "the matches differ from grep's");
    assert!(
        peak.saturating_sub(before) <= 16 * 1024,
        "the daemon's RSS grew from {before} kB to {peak} kB"
    );
    // Polls were answered all along (a liveness check; the latency ratio
    // is the bench's): at least one per second of search, none held up
    // for the search's whole length.
    assert!(
        u128::from(answered) >= took.as_millis() / 1000,
        "{answered} polls in {took:?}"
    );
    assert!(
        slowest < took / 2 || took < Duration::from_secs(1),
        "a poll took {slowest:?} of a {took:?} search"
    );

    // A daemon SIGKILLed mid-search: the client sees the connection end
    // and asks again (the CLI does), the new daemon has the whole log,
    // and the same search gives the same answer.
    let grep_cli = Command::new(BIN)
        .arg("--home")
        .arg(d.home.path())
        .args(["grep", "ERROR", &id, "--max", "10000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("procd grep");
    let busy = |pid: u32| {
        // The search reads the log: the daemon's read bytes grow.
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
        io.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let read_before = busy(pid);
    wait_until("the search is under way", || {
        busy(pid) > read_before + (64 << 20)
    });
    let read = busy(pid) - read_before;
    let new = d.kill_daemon();
    assert!(
        read < size,
        "the search was over ({read} bytes read) before the kill"
    );
    assert_ne!(new, pid);
    // A search only reads: the CLI asks the new daemon again, and prints
    // what grep prints.
    // The new daemon searches the whole gigabyte again: as long as the
    // first search took on this machine now, and then some.
    let cli = output_within_for(grep_cli, "procd grep", took * 3 + PATIENCE);
    assert_eq!(cli.status.code(), Some(0), "{cli:?}");
    let printed: Vec<(u64, String)> = String::from_utf8_lossy(&cli.stdout)
        .lines()
        .map(|l| {
            let (n, text) = l.split_once(':').unwrap_or(("0", l));
            (n.parse().unwrap_or(0), text.to_string())
        })
        .collect();
    let grep_lines: Vec<(u64, String)> = expected.iter().map(|(n, _, t)| (*n, t.clone())).collect();
    assert!(
        printed == grep_lines,
        "procd grep after the kill printed other lines than grep's"
    );
    assert_eq!(std::fs::metadata(&log).expect("log").len(), size);
    let again = d.ok(
        "search",
        json!({"session_ids": [id], "pattern": "ERROR", "max_matches": 10000}),
    );
    assert_eq!(again["matches"], r["matches"]);

    // A client that goes away mid-search leaves no scan running: the
    // search's thread stops reading long before the log's end.
    let pid = d.pid();
    let scanning = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks.flatten().any(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim() == "procd-search")
                })
            })
            .unwrap_or(false)
    };
    let read_before = busy(pid);
    let mut conn = Conn::open(&d.socket());
    conn.send_raw(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "search", "params": {"session_ids": [id], "pattern": "ERROR"}})
            .to_string(),
    );
    wait_until("the search is under way", || {
        busy(pid) > read_before + (64 << 20)
    });
    drop(conn);
    wait_until("the search's thread ends", || !scanning());
    let read = busy(pid) - read_before;
    assert!(read < size / 2, "{read} bytes read after the client went");
}
