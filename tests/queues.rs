//! Queues with slots (docs/queues.md) against a real daemon: a queue runs
//! its slots' worth at once and the rest in order; a killed queued spawn
//! never starts; the queue and its order survive a daemon SIGKILL (the
//! environment kept by the keeper, never on disk); memory pressure holds
//! a queue back (a stand-in pressure file, debug builds only); bad queue
//! input is refused by name.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;

/// A job that marks its start and end in `log` and runs until its stdin
/// is closed: the test decides when each one ends.
fn job(log: &Path, n: u32) -> String {
    let log = log.display();
    format!("echo start {n} >> {log}; cat > /dev/null; echo end {n} >> {log}")
}

fn started(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("start "))
        .map(String::from)
        .collect()
}

fn status(d: &Daemon, id: &str) -> Value {
    d.ok("poll", json!({"session_id": id}))
}

/// Ends a running job (its stdin closed) and waits for its end.
fn finish(d: &Daemon, id: &str) {
    d.ok("close_stdin", json!({"session_id": id}));
    d.wait_exit(id);
}

#[test]
fn a_queue_runs_two_at_a_time_in_order_and_a_killed_one_never_starts() {
    let d = Daemon::with_config("[queue.build]\nslots = 2\n");
    let dir = tempfile::tempdir().expect("dir");
    let log = dir.path().join("marks");
    let ids: Vec<String> = (1..=6)
        .map(|n| d.spawn_with(json!({"command": job(&log, n), "queue": "build"})))
        .collect();
    for id in &ids[..2] {
        let p = status(&d, id);
        assert_eq!(p["status"], "running", "{p}");
        assert_eq!(p["queue"]["name"], "build", "{p}");
        assert!(p["queue"].get("position").is_none(), "{p}");
    }
    for (place, id) in ids[2..].iter().enumerate() {
        let p = status(&d, id);
        assert_eq!(p["status"], "queued", "{p}");
        assert_eq!(p["pid"], 0, "{p}");
        assert_eq!(p["queue"]["position"], place as u64 + 1, "{p}");
        assert_eq!(p["queue"]["waiting"], "2 of 2 slots taken", "{p}");
    }
    // A queued one is killed: out of the queue, the ones after it move up.
    let killed = d.ok("kill", json!({"session_id": ids[3]}));
    assert_eq!(killed["status"], "removed", "{killed}");
    assert_eq!(status(&d, &ids[4])["queue"]["position"], 2);
    let (code, message) = d.err("poll", json!({"session_id": ids[3]}));
    assert_eq!(code, -32001, "{message}");
    // What it cannot do yet is said, not "no such session".
    let (code, message) = d.err("log", json!({"session_id": ids[5]}));
    assert_eq!(code, -32002, "{message}");
    assert!(message.contains("is queued in build"), "{message}");
    // A wait on a queued one ends with its place when its time is up.
    let w = d.ok("wait", json!({"session_id": ids[5], "timeout_s": 0.2}));
    assert_eq!(w["status"], "timeout", "{w}");
    assert_eq!(w["queue"]["position"], 3, "{w}");
    // `list` shows the queued ones with their places; `running` does not.
    let listed = d.ok("list", json!({}))["processes"].clone();
    let queued: Vec<(String, u64)> = listed
        .as_array()
        .expect("processes")
        .iter()
        .filter(|p| p["status"] == "queued")
        .map(|p| {
            (
                p["session_id"].as_str().unwrap_or("").to_string(),
                p["queue"]["position"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        queued,
        [
            (ids[2].clone(), 1),
            (ids[4].clone(), 2),
            (ids[5].clone(), 3)
        ]
    );
    let running = d.ok("list", json!({"status": "running"}))["processes"].clone();
    assert_eq!(running.as_array().map(Vec::len), Some(2), "{running}");
    // Paged, the queued ones follow the sessions, and a queued id is a
    // cursor like any other.
    let mut walked = Vec::new();
    let mut after = Value::Null;
    loop {
        let page = d.ok("list", json!({"limit": 2, "after": after}));
        walked.push(listed_ids(&page));
        match page.get("next_after") {
            Some(next) => after = next.clone(),
            None => break,
        }
    }
    let [a, b, c, _, e, f] = [0, 1, 2, 3, 4, 5].map(|i| ids[i].clone());
    assert_eq!(walked, [vec![a, b], vec![c, e], vec![f]]);
    // `ps` says it too.
    let ps = String::from_utf8_lossy(&d.cli(&["ps"]).stdout).to_string();
    assert!(ps.contains("queued #1"), "{ps}");

    // Each end lets the next one in, in order.
    finish(&d, &ids[0]);
    wait_until("the first queued one starts", || {
        status(&d, &ids[2])["status"] == "running"
    });
    let p = status(&d, &ids[2]);
    assert!(p["queue"]["queued_ms"].as_u64().is_some(), "{p}");
    assert!(p["pid"].as_i64().unwrap_or(0) > 0, "{p}");
    finish(&d, &ids[1]);
    wait_until("the next one starts", || {
        status(&d, &ids[4])["status"] == "running"
    });
    assert_eq!(status(&d, &ids[5])["queue"]["position"], 1);
    finish(&d, &ids[2]);
    finish(&d, &ids[4]);
    wait_until("the last one starts", || {
        status(&d, &ids[5])["status"] == "running"
    });
    finish(&d, &ids[5]);
    let marks = marks(&log);
    assert_eq!(started(&marks), ["1", "2", "3", "5", "6"], "{marks:?}");
    assert_eq!(most_at_once(&marks), 2, "{marks:?}");
}

#[test]
fn the_queue_and_its_order_survive_a_daemon_sigkill() {
    let d = Daemon::with_config("[queue.one]\nslots = 1\n");
    let dir = tempfile::tempdir().expect("dir");
    let log = dir.path().join("marks");
    let first = d.spawn_with(json!({"command": job(&log, 1), "queue": "one"}));
    // The queued ones carry a variable only the keeper's copy has.
    let queued: Vec<String> = (2..=4)
        .map(|n| {
            let command = format!(
                "echo \"$QUEUE_WORD\" >> {}.word; {}",
                log.display(),
                job(&log, n)
            );
            d.spawn_with(json!({
                "command": command,
                "queue": "one",
                "env": {"QUEUE_WORD": "kept-in-memory"},
            }))
        })
        .collect();
    let on_disk = std::fs::read_to_string(d.state_dir().join("queue.json")).expect("queue.json");
    assert!(on_disk.contains(&queued[2]), "{on_disk}");
    assert!(
        !on_disk.contains("kept-in-memory"),
        "the env is never on disk: {on_disk}"
    );

    d.kill_daemon();
    assert_eq!(status(&d, &first)["status"], "running");
    for (place, id) in queued.iter().enumerate() {
        let p = status(&d, id);
        assert_eq!(p["status"], "queued", "{p}");
        assert_eq!(p["queue"]["position"], place as u64 + 1, "{p}");
    }
    // The recovered session still holds the only slot.
    let w = d.ok("wait", json!({"session_id": queued[0], "timeout_s": 1}));
    assert_eq!(w["status"], "timeout", "{w}");
    assert_eq!(w["queue"]["position"], 1, "{w}");

    finish(&d, &first);
    for id in &queued {
        wait_until("the next queued one starts", || {
            status(&d, id)["status"] == "running"
        });
        finish(&d, id);
    }
    let marks = marks(&log);
    assert_eq!(started(&marks), ["1", "2", "3", "4"], "{marks:?}");
    assert_eq!(most_at_once(&marks), 1, "{marks:?}");
    let words = std::fs::read_to_string(format!("{}.word", log.display())).expect("words");
    assert_eq!(words, "kept-in-memory\n".repeat(3), "the env came back");
}

#[test]
fn memory_pressure_holds_a_queue_until_it_drops() {
    let dir = tempfile::tempdir().expect("dir");
    let pressure = dir.path().join("pressure");
    let psi = |avg10: f64| {
        format!("some avg10={avg10:.2} avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    };
    std::fs::write(&pressure, psi(34.0)).expect("pressure");
    let d = Daemon::with_config(&format!(
        "test_memory_pressure_file = {:?}\n[queue.heavy]\nslots = 4\nmax_memory_pressure = 20\n",
        pressure.display().to_string()
    ));
    let log = dir.path().join("marks");
    let r = d.ok("spawn", json!({"command": job(&log, 1), "queue": "heavy"}));
    assert_eq!(
        r["status"], "queued",
        "slots are free, pressure is not: {r}"
    );
    let id = r["session_id"].as_str().expect("id").to_string();
    assert_eq!(
        r["queue"]["waiting"], "memory pressure 34.0% > 20%: waiting",
        "{r}"
    );
    std::fs::write(&pressure, psi(5.0)).expect("pressure");
    // The monitor's next tick reads it again.
    wait_until("the queued one starts once pressure drops", || {
        status(&d, &id)["status"] == "running"
    });
    finish(&d, &id);
    assert_eq!(started(&marks(&log)), ["1"]);
}

#[test]
fn bad_queue_input_is_refused_by_name() {
    let d = Daemon::start();
    let (code, message) = d.err("spawn", json!({"command": "true", "queue": "Big Builds"}));
    assert_eq!(code, -32602, "{message}");
    assert!(message.contains("queue"), "{message}");
    let (code, message) = d.err(
        "spawn",
        json!({"command": "true", "queue": "build", "name": "web"}),
    );
    assert_eq!(code, -32602, "{message}");
    assert!(
        message.contains("a named session cannot be queued"),
        "{message}"
    );
    // The CLI checks the name before it sends anything.
    let out = d.cli(&["spawn", "--queue", "Nope!", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // The spawns waiting are bounded: past `max_queued` a spawn is refused.
    let d = Daemon::with_config("max_queued = 1\n[queue.b]\nslots = 1\n");
    let runs = d.spawn_with(json!({"command": "exec sleep 300", "queue": "b"}));
    let waits = d.ok("spawn", json!({"command": "exec sleep 301", "queue": "b"}));
    assert_eq!(waits["status"], "queued", "{waits}");
    let (code, message) = d.err("spawn", json!({"command": "exec sleep 302", "queue": "b"}));
    assert_eq!(code, -32004, "{message}");
    assert!(message.contains("max_queued (1)"), "{message}");
    d.ok("kill", json!({"session_id": runs}));
    // A daemon refuses a config with an empty queue, naming it.
    for (config, named) in [
        ("[queue.build]\nslots = 0\n", "slots must be at least 1"),
        ("[queue.build]\nslots = 1\nslot = 2\n", "slot"),
        ("[queue.build]\nslots = 1\ncpu_weight = 0\n", "cpu_weight"),
    ] {
        let home = short_tempdir();
        std::fs::write(home.path().join("config.toml"), config).expect("config");
        let out = std::process::Command::new(BIN)
            .args(["daemon", "--home"])
            .arg(home.path())
            .env("HOME", home.path())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("procd daemon");
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{config}: {err}");
    }
}

#[test]
fn the_cli_queues_and_says_where() {
    let d = Daemon::with_config("[queue.build]\nslots = 1\n");
    let dir = tempfile::tempdir().expect("dir");
    let log = dir.path().join("marks");
    let spawn = |n: u32| {
        let out = d.cli(&["spawn", "--queue", "build", "--", &job(&log, n)]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let first = spawn(1);
    let second = spawn(2);
    assert!(second.contains("queued in build (#1, "), "{second}");
    let id = |text: &str| text.split_whitespace().next().unwrap_or("").to_string();
    let poll = String::from_utf8_lossy(&d.cli(&["poll", &id(&second)]).stdout).to_string();
    assert!(poll.contains("queued in build (#1, "), "{poll}");
    assert!(poll.contains("1 of 1 slots taken"), "{poll}");
    let killed = d.cli(&["kill", &id(&second)]);
    assert!(killed.status.success(), "{killed:?}");
    let said = String::from_utf8_lossy(&killed.stdout);
    assert!(said.contains("removed from its queue"), "{said}");
    finish(&d, &id(&first));
    assert_eq!(started(&marks(&log)), ["1"]);
}
