//! Restart policies (docs/stacks.md) against a real daemon: a restart keeps
//! the id, the name and the log; `wait` follows it to the session's real
//! end; past the cap it is `crash_loop`; `kill` stops it, in a run or in a
//! backoff; it goes on across a daemon SIGKILL with the same environment.

use crate::common::*;
use serde_json::{json, Value};

#[test]
fn on_failure_restarts_in_the_same_session_until_a_crash_loop() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("dir");
    let id = d.spawn_with(json!({
        "command": counting(dir.path(), "exit 3"),
        "name": "flaky",
        "session_key": "k",
        "restart": {"policy": "on-failure", "max_restarts": 2, "backoff_s": 0.1},
    }));
    // `wait` follows the session across its runs to its real end.
    let end = d.wait_exit(&id);
    assert_eq!(end["completion_reason"], "crash_loop", "{end}");
    assert_eq!(end["exit_code"], 3, "{end}");
    assert_eq!(runs(dir.path()), 3, "1 run and 2 restarts");
    let poll = d.ok("poll", json!({"session_id": id}));
    assert_eq!(poll["restarts"], 2, "{poll}");
    assert_eq!(poll["last_exit"]["exit_code"], 3, "{poll}");
    assert_eq!(poll["name"], "flaky");
    assert!(poll.get("restarting").is_none(), "{poll}");
    // One log: every run's output, procd's line between two runs.
    let log = d.read_all(&id);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            "run 1 ",
            "[procd] it exited with code 3; run 2 starts in 0.1 s",
            "run 2 ",
            "[procd] it exited with code 3; run 3 starts in 0.2 s",
            "run 3 ",
            "[procd] it exited with code 3; 2 restarts in a row: not restarting (crash_loop)",
        ],
        "{log}"
    );
    let events = restarted_events(&d, &id, Some("k"));
    let seen: Vec<(u64, i64)> = events
        .iter()
        .map(|e| {
            (
                e["run"].as_u64().unwrap_or(0),
                e["last_exit"]["exit_code"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(seen, [(2, 3), (3, 3)], "{events:?}");

    // The CLI: `--restart`, `procd wait` exits with the last run's code,
    // `procd poll` says how often it restarted.
    let out = d.cli(&[
        "spawn",
        "--restart",
        "on-failure",
        "--max-restarts",
        "1",
        "--backoff",
        "0.1",
        "--",
        "exit 4",
    ]);
    assert!(out.status.success(), "{out:?}");
    let cli_id = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("id")
        .to_string();
    assert_eq!(d.cli(&["wait", &cli_id]).status.code(), Some(4));
    let text = String::from_utf8_lossy(&d.cli(&["poll", &cli_id]).stdout).to_string();
    assert!(text.contains("exit code 4 (crash_loop)"), "{text}");
    assert!(
        text.contains("restarted 1 time(s); the last run ended: exit code 4 (exited)"),
        "{text}"
    );
    let bad = d.cli(&["spawn", "--restart", "sometimes", "--", "true"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");

    // A run that succeeds ends an on-failure session: no restart.
    let ok = d.spawn_with(json!({
        "command": "echo fine",
        "restart": {"policy": "on-failure", "backoff_s": 0.1},
    }));
    let end = d.wait_exit(&ok);
    assert_eq!(end["completion_reason"], "exited", "{end}");
    let poll = d.ok("poll", json!({"session_id": ok}));
    assert_eq!(poll["restarts"], 0, "{poll}");
    assert_eq!(poll["last_exit"], Value::Null, "{poll}");
}

#[test]
fn always_restarts_after_success_and_kill_stops_it_in_a_run_or_a_backoff() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("dir");
    // Exits 0 at once; restarts until killed.
    let id = d.spawn_with(json!({
        "command": counting(dir.path(), "sleep 0.2"),
        "restart": {"policy": "always", "max_restarts": 1000, "backoff_s": 0.1, "reset_after_s": 0},
    }));
    let first_pid = d.ok("poll", json!({"session_id": id}))["pid"].clone();
    wait_until("three runs of an always session", || runs(dir.path()) >= 3);
    let poll = d.ok("poll", json!({"session_id": id}));
    assert_eq!(poll["status"], "running", "{poll}");
    assert!(poll["restarts"].as_u64().unwrap_or(0) >= 2, "{poll}");
    assert_eq!(poll["last_exit"]["exit_code"], 0, "{poll}");
    assert_ne!(poll["pid"], first_pid, "a new run is a new process");
    let killed = d.ok("kill", json!({"session_id": id}));
    assert_eq!(killed["status"], "killed", "{killed}");
    let poll = d.ok("poll", json!({"session_id": id}));
    assert_eq!(poll["status"], "exited", "{poll}");
    assert_eq!(poll["completion_reason"], "killed", "{poll}");

    // Killed while it waits out a long backoff: it ends now, not in 30 s,
    // and with no process left.
    let slow = tempfile::tempdir().expect("dir");
    let id = d.spawn_with(json!({
        "command": counting(slow.path(), "exit 1"),
        "restart": {"policy": "on-failure", "backoff_s": 30},
    }));
    wait_until("the first run ended and the restart waits", || {
        d.ok("poll", json!({"session_id": id}))["restarting"] == true
    });
    let pid = d.ok("poll", json!({"session_id": id}))["pid"]
        .as_i64()
        .expect("pid") as i32;
    // No run reads its stdin meanwhile, and the refusal says why.
    let wrote = d.call("write_stdin", json!({"session_id": id, "data": "x"}));
    assert_eq!(wrote["error"]["code"], -32002, "{wrote}");
    let why = wrote["error"]["message"].as_str().unwrap_or_default();
    assert!(
        why.contains("between runs") && why.contains("run 2"),
        "{wrote}"
    );
    let started = std::time::Instant::now();
    let killed = d.ok("kill", json!({"session_id": id}));
    assert_eq!(killed["status"], "killed", "{killed}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "the kill waited for the backoff"
    );
    let end = d.wait_exit(&id);
    assert_eq!(end["completion_reason"], "killed", "{end}");
    assert_eq!(runs(slow.path()), 1);
    assert!(!alive(pid));
    assert!(session_pids(&id).is_empty(), "{:?}", session_pids(&id));
}

#[test]
fn restarts_go_on_across_a_daemon_sigkill_with_the_same_environment() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("dir");
    let id = d.spawn_with(json!({
        "command": counting(dir.path(), "exec sleep 300"),
        "env": {"PROCD_TEST_VAR": "kept"},
        "name": "srv",
        "restart": {"policy": "on-failure", "backoff_s": 0.1},
    }));
    d.read_until(&id, "run 1 kept");
    let root = |d: &Daemon| {
        d.ok("poll", json!({"session_id": id}))["pid"]
            .as_i64()
            .expect("pid") as i32
    };
    // A crash before the daemon dies: one restart.
    let first = root(&d);
    kill_pid(first);
    d.read_until(&id, "run 2 kept");
    d.kill_daemon();
    let poll = d.ok("poll", json!({"name": "srv"}));
    assert_eq!(poll["session_id"], id.as_str());
    assert_eq!(poll["restarts"], 1, "{poll}");
    assert_eq!(poll["last_exit"]["exit_code"], -9, "{poll}");
    // A crash under the next daemon: it restarts the same command with
    // the same environment, in the same session and log.
    let second = root(&d);
    assert_ne!(second, first);
    kill_pid(second);
    d.read_until(&id, "run 3 kept");
    let poll = d.ok("poll", json!({"session_id": id}));
    assert_eq!(poll["restarts"], 2, "{poll}");
    assert_eq!(poll["status"], "running", "{poll}");
    // A crash no daemon sees: the daemon is stopped when the root dies,
    // then SIGKILLed; the keeper reaps the root, and the next daemon learns
    // of the end from it and restarts the session.
    let third = root(&d);
    let daemon = nix::unistd::Pid::from_raw(d.pid() as i32);
    nix::sys::signal::kill(daemon, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
    // Stopped for real before the root dies: a thread still running could
    // reap it, and then the daemon would have seen the crash after all.
    wait_until("every thread of the daemon is stopped", || {
        all_threads_stopped(d.pid() as i32)
    });
    kill_pid(third);
    d.kill_daemon();
    d.read_until(&id, "run 4 kept");
    assert_eq!(d.ok("poll", json!({"session_id": id}))["restarts"], 3);
    let log = d.ok("log", json!({"session_id": id, "limit": 1000}))["output"]
        .as_str()
        .expect("log")
        .to_string();
    assert!(
        log.contains(
            "run 1 kept\n[procd] it was killed by SIGKILL; run 2 starts in 0.1 s\nrun 2 kept\n"
        ),
        "{log}"
    );
    assert!(log.contains("run 3 kept"), "{log}");
    d.ok("kill", json!({"session_id": id}));
    assert!(session_pids(&id).is_empty());
}

/// `timeout_s` is each run's: a run that starts under the next daemon
/// gets all of it, not what was left of the run the first daemon saw.
#[test]
fn a_run_after_a_daemon_sigkill_gets_the_whole_timeout() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("dir");
    let id = d.spawn_with(json!({
        "command": counting(dir.path(), "exec sleep 300"),
        "timeout_s": 4,
        "restart": {"policy": "on-failure", "backoff_s": 0.1},
    }));
    d.read_until(&id, "run 1");
    let poll = || d.ok("poll", json!({"session_id": id}));
    // Run 1 has a second of its timeout left when its daemon dies.
    wait_until("run 1 is 3 s old", || {
        poll()["uptime_seconds"].as_f64().is_some_and(|s| s >= 3.0)
    });
    d.kill_daemon();
    kill_pid(poll()["pid"].as_i64().expect("pid") as i32);
    d.read_until(&id, "run 2");
    let ended = d.wait_exit(&id);
    assert_eq!(ended["completion_reason"], "timeout", "{ended}");
    // uptime_seconds is the last run's.
    let lived = ended["uptime_seconds"].as_f64().expect("uptime");
    assert!(lived >= 3.9, "run 2 timed out after {lived} s: {ended}");
    assert_eq!(runs(dir.path()), 2);
}

/// A daemon SIGKILLed while a session waits out its backoff: the run that
/// ended was that daemon's child, so no keeper reports its end; the
/// checkpoint says which run is next and when, and the next daemon starts
/// it then (before, the session stayed "running" for good, on a dead pid).
#[test]
fn a_backoff_goes_on_across_a_daemon_sigkill() {
    let d = Daemon::start();
    let (dir, id) = failing_into_a_backoff(&d);
    let recorded = next_run(&d, &id).expect("next_run");
    assert_eq!(recorded["run"], 2, "{recorded}");
    let first_pid = d.ok("poll", json!({"session_id": id}))["pid"].clone();
    d.kill_daemon();
    let poll = d.ok("poll", json!({"session_id": id}));
    assert_eq!(poll["status"], "running", "{poll}");
    assert_eq!(poll["restarting"], true, "{poll}");
    assert_eq!(poll["last_exit"]["exit_code"], 1, "{poll}");
    wait_until("run 2 started under the next daemon", || {
        runs(dir.path()) >= 2
    });
    d.read_until(&id, "run 2");
    let poll = d.ok("poll", json!({"session_id": id}));
    assert_eq!(poll["restarts"], 1, "{poll}");
    assert_ne!(poll["pid"], first_pid, "{poll}");
    // When the first daemon said it would, not at once.
    let at = recorded["at"].as_str().expect("at");
    let started = poll["started_at"].as_str().expect("started_at");
    assert!(started >= at, "run 2 started at {started}, due at {at}");
    d.ok("kill", json!({"session_id": id}));
    assert!(session_pids(&id).is_empty());
}

/// Each run is ready on its own (docs/stacks.md): the next run's ready
/// condition is matched against what that run writes, never the line
/// the run before wrote to the same log. Run 1 says "up" and fails; run
/// 2 never says it, so its readiness can only time out.
#[test]
fn each_run_is_ready_on_its_own_output() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("dir");
    let id = up_once_then_silent(&d, dir.path(), 1);
    let decided = readiness_after_restart(&d, &id);
    assert_eq!(decided["type"], "ready_timeout", "{decided}");
    let poll = d.ok("poll", json!({"session_id": id}));
    assert_eq!(
        (poll["ready"].clone(), poll["restarts"].clone()),
        (json!(false), json!(1)),
        "{poll}"
    );
    d.ok("kill", json!({"session_id": id}));
}

/// The same across a daemon SIGKILL in run 2: the next daemon, taking
/// the run over before it is ready, matches only what run 2 wrote (where
/// it began in the log is in procs.json), not run 1's "up".
#[test]
fn a_run_taken_over_is_ready_on_its_own_output() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("dir");
    let id = up_once_then_silent(&d, dir.path(), 5);
    // (Not "run 2 starts in", procd's line before it: run 2 is running.)
    d.read_until(&id, "run 2 \n");
    d.kill_daemon();
    let decided = readiness_after_restart(&d, &id);
    assert_eq!(decided["type"], "ready_timeout", "{decided}");
    d.ok("kill", json!({"session_id": id}));
}

/// A session whose run 1 says "up" (its ready line) and fails, and whose
/// run 2 never says it: its readiness can only time out (`timeout_s`).
fn up_once_then_silent(d: &Daemon, dir: &std::path::Path, timeout_s: u32) -> String {
    d.spawn_with(json!({
        "command": counting(dir, "if [ $n = 1 ]; then echo up; exit 1; fi; exec sleep 300"),
        "ready": {"output": "^up$", "timeout_s": timeout_s},
        "restart": {"policy": "on-failure", "backoff_s": 0.1},
    }))
}

/// The first `ready` or `ready_timeout` event of session `id` queued
/// after its `restarted` event (drained until there is one).
fn readiness_after_restart(d: &Daemon, id: &str) -> Value {
    let mut restarted = false;
    let mut decided = Value::Null;
    wait_until("the next run's readiness is decided", || {
        let events = d.ok("drain_notifications", json!({}))["events"].clone();
        for e in events.as_array().into_iter().flatten() {
            match (e["session_id"] == id, e["type"].as_str()) {
                (true, Some("restarted")) => restarted = true,
                (true, Some("ready" | "ready_timeout")) if restarted && decided.is_null() => {
                    decided = e.clone()
                }
                _ => {}
            }
        }
        !decided.is_null()
    });
    decided
}

/// A session whose run 1 fails at once and whose run 2 is due in 3 s,
/// once procs.json holds that backoff; with the dir its runs count in.
fn failing_into_a_backoff(d: &Daemon) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("dir");
    let id = d.spawn_with(json!({
        "command": counting(dir.path(), "exit 1"),
        "restart": {"policy": "on-failure", "backoff_s": 3},
    }));
    wait_until("procs.json holds the backoff", || {
        next_run(d, &id).is_some()
    });
    (dir, id)
}

/// The backoff procs.json records for session `id` (its `next_run`).
fn next_run(d: &Daemon, id: &str) -> Option<Value> {
    checkpointed(d.home.path())
        .into_iter()
        .find(|e| e["session_id"] == id)
        .map(|e| e["restart"]["next_run"].clone())
        .filter(|n| !n.is_null())
}

/// The keeper and the daemon SIGKILLed together while a session waits out
/// its backoff: how its runs start (a sealed memfd only the keeper held)
/// is gone with the keeper, so the next daemon cannot start run 2. The
/// session ends as run 1 did and says why, rather than "running" for good.
#[test]
fn a_backoff_whose_launch_died_with_the_keeper_ends_as_its_last_run() {
    let mut d = Daemon::start();
    let (dir, id) = failing_into_a_backoff(&d);
    d.crash();
    d.restart();
    let waited = d.wait_exit(&id);
    assert_eq!(waited["exit_code"], 1, "as run 1 ended: {waited}");
    let poll = d.ok("poll", json!({"session_id": id}));
    assert!(poll.get("restarting").is_none(), "{poll}");
    let output = d.ok("log", json!({"session_id": id}))["output"].to_string();
    assert!(
        output.contains(
            "[procd] not restarting: this daemon does not know how the command was started"
        ),
        "{output}"
    );
    assert_eq!(runs(dir.path()), 1, "no run started after the crash");
}

#[test]
fn a_bad_restart_is_refused_by_name() {
    let d = Daemon::start();
    let cases = [
        (json!({"policy": "sometimes"}), "restart.policy"),
        (json!({"policy": "always", "tries": 3}), "tries"),
        (
            json!({"policy": "always", "max_restarts": -1}),
            "max_restarts",
        ),
        (json!({"policy": "always", "backoff_s": "1"}), "backoff_s"),
        (json!({"max_restarts": 3}), "policy"),
    ];
    for (restart, says) in cases {
        let (code, msg) = d.err("spawn", json!({"command": "true", "restart": restart}));
        assert_eq!(code, -32602, "{restart}: {msg}");
        assert!(msg.contains(says), "{restart}: {says}: {msg}");
    }
    assert_eq!(d.ok("list", json!({}))["processes"], json!([]));
}

/// SIGKILL to a session's root this test started.
fn kill_pid(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// A terminal's resize in a restart's backoff is refused as a write is:
/// between runs, naming the run that comes next, not "has exited".
#[test]
fn a_resize_between_runs_says_so() {
    let d = Daemon::start();
    let id = d.spawn_with(json!({
        "command": "exit 1",
        "pty": true,
        "restart": {"policy": "on-failure", "backoff_s": 30},
    }));
    wait_until("the first run ended and the restart waits", || {
        d.ok("poll", json!({"session_id": id}))["restarting"] == true
    });
    let resized = d.call("resize", json!({"session_id": id, "rows": 30, "cols": 100}));
    assert_eq!(resized["error"]["code"], -32002, "{resized}");
    let why = resized["error"]["message"].as_str().unwrap_or_default();
    assert!(
        why.contains("between runs") && why.contains("run 2"),
        "{resized}"
    );
    d.ok("kill", json!({"session_id": id}));
    let ended = d.call("resize", json!({"session_id": id, "rows": 30, "cols": 100}));
    let why = ended["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("has exited"), "{ended}");
}

/// What one call saw: when it was asked and answered (as offsets from the
/// test's start), and, for a poll, the session's state.
#[derive(Debug, Clone)]
struct Seen {
    asked: std::time::Duration,
    answered: std::time::Duration,
    method: &'static str,
    answer: Value,
}

/// 1000 calls at once against one session (polls, writes that end its
/// run, resizes, and a kill), across runs that end and restart: every
/// call is answered within the deadline (no deadlock), and the answers
/// fit one order of events (issue 49): a poll answered before another
/// was asked never saw more restarts; a client that saw the session
/// killed never sees it run again; after the kill's answer every call
/// finds it ended, killed; and at the end its processes are gone.
#[test]
fn a_thousand_calls_at_once_across_exits_and_restarts_fit_one_order() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let d = Daemon::start();
    // Each line written ends the run (exit 3); the next starts 0.1 s on.
    let id = d.spawn_with(json!({
        "command": "read line; exit 3",
        "pty": true,
        "restart": {"policy": "always", "max_restarts": 1000, "backoff_s": 0.1, "reset_after_s": 0},
    }));
    let start = Instant::now();
    let killed = AtomicBool::new(false);
    const CLIENTS: usize = 8;
    const CALLS: usize = 125;
    let seen: Vec<Vec<Seen>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let (d, id, killed) = (&d, id.as_str(), &killed);
                scope.spawn(move || {
                    let mut conn = d.connect();
                    let mut seen = Vec::with_capacity(CALLS);
                    for call in 0..CALLS {
                        // Client 0 kills two thirds in, once a restart
                        // has been seen, so the calls span exits,
                        // restarts and the end.
                        let (method, params) = if client == 0 && call == CALLS * 2 / 3 {
                            wait_until("a restart", || {
                                d.ok("poll", json!({"session_id": id}))["restarts"]
                                    .as_u64()
                                    .is_some_and(|n| n >= 1)
                            });
                            ("kill", json!({"session_id": id}))
                        } else {
                            match (client + call) % 8 {
                                0..=3 => ("poll", json!({"session_id": id})),
                                4 | 5 => ("submit_stdin", json!({"session_id": id, "data": "x\n"})),
                                _ => (
                                    "resize",
                                    json!({"session_id": id, "rows": 20 + call % 10, "cols": 80}),
                                ),
                            }
                        };
                        let asked = start.elapsed();
                        let answer = conn.call(method, params);
                        let answered = start.elapsed();
                        if method == "kill" {
                            assert_eq!(answer["result"]["status"], "killed", "{answer}");
                            killed.store(true, Ordering::SeqCst);
                        }
                        seen.push(Seen {
                            asked,
                            answered,
                            method,
                            answer,
                        });
                    }
                    seen
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a client panicked"))
            .collect()
    });
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "1000 calls took {:?}",
        start.elapsed()
    );
    let all: Vec<&Seen> = seen.iter().flatten().collect();
    assert_eq!(all.len(), CLIENTS * CALLS);
    let kill = all.iter().find(|s| s.method == "kill").expect("the kill");
    let (kill_asked, kill_answered) = (kill.asked, kill.answered);

    for s in &all {
        let result = &s.answer["result"];
        match s.method {
            // Every call is answered: a result, or (input and a resize)
            // the documented refusal while no run is there to take it:
            // between runs, or once the session has ended.
            _ if s.answer.get("error").is_some() => {
                assert!(["submit_stdin", "resize"].contains(&s.method), "{s:?}");
                assert_eq!(s.answer["error"]["code"], -32002, "{s:?}");
                let said = s.answer["error"]["message"].as_str().unwrap_or("");
                // A write that meets a run as it ends is refused as such;
                // one answered while the kill runs may find it ended.
                assert!(
                    said.contains("between runs")
                        || said.contains("no longer reading its stdin")
                        || s.answered > kill_asked,
                    "refused before the kill, not between runs: {s:?}"
                );
            }
            "poll" | "kill" => assert!(result["status"].is_string(), "{s:?}"),
            "submit_stdin" => assert!(
                ["ok", "already_exited"].contains(&result["status"].as_str().unwrap_or("")),
                "{s:?}"
            ),
            _ => assert!(result.is_object(), "{s:?}"),
        }
        // Asked after the kill's answer: the session has ended, killed.
        if s.asked > kill_answered {
            match s.method {
                "poll" => {
                    assert_eq!(result["status"], "exited", "{s:?}");
                    assert_eq!(result["completion_reason"], "killed", "{s:?}");
                }
                "submit_stdin" => assert_eq!(result["status"], "already_exited", "{s:?}"),
                _ => {}
            }
        }
    }
    // One order: a poll answered before another was asked saw no more
    // restarts, and a session seen ended is not seen running after it.
    let polls: Vec<&&Seen> = all.iter().filter(|s| s.method == "poll").collect();
    let restarts = |s: &Seen| s.answer["result"]["restarts"].as_u64().unwrap_or(0);
    for a in &polls {
        for b in &polls {
            if a.answered < b.asked {
                assert!(
                    restarts(a) <= restarts(b),
                    "restarts went back: {a:?} then {b:?}"
                );
                if a.answer["result"]["status"] == "exited" {
                    assert_eq!(
                        b.answer["result"]["status"], "exited",
                        "ran again: {a:?} then {b:?}"
                    );
                }
            }
        }
    }
    let polled_restarts = polls.iter().map(|s| restarts(s)).max().unwrap_or(0);
    assert!(polled_restarts >= 1, "the calls spanned a restart");
    // The end: killed, every process of it gone, each restart marked once
    // in its one log.
    let end = d.wait_exit(&id);
    assert_eq!(end["completion_reason"], "killed", "{end}");
    let last = d.ok("poll", json!({"session_id": id}));
    let pid = last["pid"].as_i64().expect("pid") as i32;
    wait_until("the last run's process is gone", || !alive(pid));
    let log = d.read_all(&id);
    // A run announced and killed in its backoff never started.
    let marks = log
        .lines()
        .filter(|l| l.starts_with("[procd] it exited with code 3; run "))
        .count() as u64;
    let restarts = last["restarts"].as_u64().unwrap_or(0);
    assert!(
        marks == restarts || marks == restarts + 1,
        "{marks} restart lines, {restarts} restarts: {log}"
    );
}
