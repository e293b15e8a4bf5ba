//! The docs/survival.md rows: how long from a daemon's SIGKILL until a client is
//! answered again (the keeper starts the next daemon, which takes every
//! session back), and what the kills lost — output bytes of sessions
//! printing all along, and exit codes of sessions that ended right as their
//! daemon died. Both losses must be 0.

use super::{percentile, Daemon, Row};
use serde_json::json;
use std::time::{Duration, Instant};

/// Sessions printing a line every 5 ms all through the kills.
const PRINTERS: usize = 8;
/// Sessions printing as fast as they can (pipe, PTY) all through the kills:
/// a daemon killed mid-read must lose nothing of theirs either.
const FAST: [bool; 2] = [false, true];

pub(super) fn survival_rows(kills: usize) -> Vec<Row> {
    let d = Daemon::start();
    let dir = tempfile::Builder::new()
        .prefix("pbs")
        .tempdir_in("/tmp")
        .expect("temp dir");
    let stop = dir.path().join("stop");
    let mut c = d.connect();
    let printers = spawn_printers(&mut c, &stop);
    let mut restart_ms = Vec::new();
    // (session, the exit code it must report)
    let mut enders: Vec<(String, i64)> = Vec::new();
    for k in 0..kills {
        // A crash in steady state: the keeper restarts a daemon that lived
        // less than a second only after 250 ms (a crash loop's brake).
        std::thread::sleep(Duration::from_millis(1100));
        let daemon = d.pid();
        assert!(daemon > 0, "no daemon runs below the keeper");
        // One session that ends as its daemon dies: its exit code must
        // come through the keeper.
        let code = 10 + (k % 100) as i64;
        let ender = c.call(
            "spawn",
            json!({ "command": format!("tail --pid={daemon} -f /dev/null; exit {code}") }),
        );
        enders.push((ender["session_id"].as_str().expect("id").to_string(), code));
        let (line, ms) = kill_and_reach_the_next(&d, daemon);
        c = line;
        restart_ms.push(ms);
    }
    std::fs::write(&stop, b"").expect("stop file");
    let (mut lost, mut total) = (0u64, 0u64);
    let mut codes_lost = 0;
    for (n, id) in printers.iter().enumerate() {
        let w = c
            .result("wait", json!({"session_id": id, "timeout_s": 60}))
            .unwrap_or_else(|e| panic!("{e}: {}", d.stderr()));
        if w["exit_code"].as_i64() != Some(n as i64 + 3) {
            codes_lost += 1;
        }
        let text = read_all(&mut c, id);
        total += text.len() as u64;
        lost += missing_bytes(&text);
    }
    for (id, code) in &enders {
        let w = c
            .result("wait", json!({"session_id": id, "timeout_s": 60}))
            .unwrap_or_else(|e| panic!("{e}: {}: {}", c.call("list", json!({})), d.stderr()));
        if w["exit_code"].as_i64() != Some(*code) {
            codes_lost += 1;
        }
    }
    let detail = format!(
        "{kills} SIGKILLs of the daemon, 1.1 s apart; {PRINTERS} sessions printing a numbered line every 5 ms and 2 (pipe, PTY) printing as fast as they can ({total} bytes); one session ending at each kill"
    );
    vec![
        Row::at_most(
            "SIGKILL -> serving again, p50".into(),
            percentile(&restart_ms, 0.5),
            "ms",
            1000.0,
            detail.clone(),
        ),
        Row::at_most(
            "SIGKILL -> serving again, p99".into(),
            percentile(&restart_ms, 0.99),
            "ms",
            1000.0,
            detail.clone(),
        ),
        Row::at_most(
            "output bytes lost or repeated across the kills".into(),
            lost as f64,
            "bytes",
            0.0,
            detail.clone(),
        ),
        Row::at_most(
            "exit codes lost across the kills".into(),
            f64::from(codes_lost),
            "codes",
            0.0,
            format!(
                "{} sessions ending at a kill or after all of them",
                enders.len() + PRINTERS + FAST.len()
            ),
        ),
    ]
}

/// Starts the printing sessions: PRINTERS at a line every 5 ms, then the
/// FAST ones, each ending with its own exit code (its index + 3) once
/// `stop` exists.
fn spawn_printers(c: &mut super::Line, stop: &std::path::Path) -> Vec<String> {
    (0..PRINTERS + FAST.len())
        .map(|n| {
            let (command, pty) = match FAST.get(n.wrapping_sub(PRINTERS)) {
                // As fast as the pipe takes it, in bursts of 200 lines (a
                // pause between bursts keeps the log under its cap).
                Some(pty) => (
                    format!(
                        "python3 -c \"
import os, time
i = 0
while not os.path.exists('{}'):
    os.write(1, ''.join('line %d\\n' % n for n in range(i, i + 200)).encode())
    i += 200
    time.sleep(0.002)
os.write(1, ('end %d\\n' % i).encode())
\"; exit {}",
                        stop.display(),
                        n + 3
                    ),
                    *pty,
                ),
                None => (
                    format!(
                        "i=0; while [ ! -e '{}' ]; do echo \"line $i\"; i=$((i+1)); sleep 0.005; done; echo \"end $i\"; exit {}",
                        stop.display(),
                        n + 3
                    ),
                    false,
                ),
            };
            c.call("spawn", json!({ "command": command, "pty": pty }))["session_id"]
                .as_str()
                .expect("session_id")
                .to_string()
        })
        .collect()
}

/// SIGKILLs the daemon and waits for the next one to answer on the
/// socket: the connection to it, and how long that took (ms).
fn kill_and_reach_the_next(d: &Daemon, daemon: i32) -> (super::Line, f64) {
    let killed = Instant::now();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon),
        nix::sys::signal::Signal::SIGKILL,
    );
    // The keeper holds the socket: a connection made now is answered
    // by the next daemon once it serves.
    let deadline = killed + Duration::from_secs(20);
    let line = loop {
        assert!(
            Instant::now() < deadline,
            "no daemon came back: {}",
            d.stderr()
        );
        if let Ok(mut line) = super::Line::try_open(&d.socket()) {
            if let Ok(status) = line.try_call("status", json!({})) {
                if status["pid"]
                    .as_i64()
                    .is_some_and(|p| p != i64::from(daemon))
                {
                    break line;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    (line, killed.elapsed().as_secs_f64() * 1000.0)
}

/// Everything a session printed, read by cursor to its end.
fn read_all(c: &mut super::Line, id: &str) -> String {
    let mut text = String::new();
    let mut cursor = 0u64;
    loop {
        let r = c.call(
            "read",
            json!({"session_id": id, "cursor": cursor, "wait_ms": 2000}),
        );
        text.push_str(r["data"].as_str().unwrap_or(""));
        cursor = r["next_cursor"].as_u64().unwrap_or(cursor);
        if r["eof"] == true {
            return text;
        }
    }
}

/// Bytes of "line 0\nline 1\n…end N\n" missing from `text` or repeated
/// in it: each line must be the next number, and the last says how many
/// there were, so a lost tail counts too (all of it, when "end" is lost).
fn missing_bytes(text: &str) -> u64 {
    let mut lost = 0u64;
    let mut next = 0u64;
    let mut ended = false;
    for line in text.lines() {
        // A PTY ends lines with "\r\n".
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(count) = line
            .strip_prefix("end ")
            .and_then(|n| n.parse::<u64>().ok())
        {
            if !ended && count >= next {
                lost += (next..count)
                    .map(|i| format!("line {i}\n").len() as u64)
                    .sum::<u64>();
                next = count;
                ended = true;
                continue;
            }
        }
        if ended {
            // Nothing may follow the end.
            lost += line.len() as u64 + 1;
            continue;
        }
        match line
            .strip_prefix("line ")
            .and_then(|n| n.parse::<u64>().ok())
        {
            Some(n) if n == next => next += 1,
            Some(n) if n > next => {
                lost += (next..n)
                    .map(|i| format!("line {i}\n").len() as u64)
                    .sum::<u64>();
                next = n + 1;
            }
            // Repeated, or not a whole line.
            _ => lost += line.len() as u64 + 1,
        }
    }
    if !ended {
        lost += "end \n".len() as u64 + 1;
    }
    lost
}

#[cfg(test)]
mod tests {
    use super::missing_bytes;

    #[test]
    fn gaps_repeats_and_broken_lines_count() {
        assert_eq!(missing_bytes("line 0\nline 1\nend 2\n"), 0);
        assert_eq!(missing_bytes("line 0\nline 2\nend 3\n"), 7);
        assert_eq!(missing_bytes("line 0\nline 0\nline 1\nend 2\n"), 7);
        assert_eq!(missing_bytes("line 0\nne 1\nline 2\nend 3\n"), 5 + 7);
        // A lost tail: the end says 4 lines were printed.
        assert_eq!(missing_bytes("line 0\nline 1\nend 4\n"), 14);
        // The end itself lost: the tail's size is unknown, but not 0.
        assert!(missing_bytes("line 0\nline 1\n") > 0);
        assert_eq!(missing_bytes("line 0\nend 1\nline 1\n"), 7);
    }
}
