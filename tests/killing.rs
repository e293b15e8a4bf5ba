//! Tree kill (SPEC §5.1) through the daemon: what dies is checked in /proc.

mod common;

use common::*;
use serde_json::json;

/// Waits until the session's root has exec'd `name` (past the shell start-up,
/// during which an interactive bash ignores SIGTERM).
fn wait_for_exec(id: &str, name: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    wait_until(&format!("{id} runs {name}"), || {
        pids = session_pids(id);
        pids.iter().any(|p| comm(*p) == name)
    });
    pids
}

#[test]
fn kill_ends_the_whole_tree_and_reports_the_signal() {
    let d = Daemon::start();
    let id = d.spawn("sleep 300 & sleep 300 & exec sleep 301");
    let pids = {
        let mut pids = Vec::new();
        wait_until("three sleeps", || {
            pids = session_pids(&id);
            pids.len() == 3 && pids.iter().all(|p| comm(*p) == "sleep")
        });
        pids
    };
    let k = d.ok("kill", json!({"session_id": id}));
    assert_eq!(k["status"], "killed", "{k}");
    assert_eq!(k["exit_code"], -15);
    assert_eq!(k["signal"], "SIGTERM");
    assert_eq!(k["completion_reason"], "killed");
    assert_eq!(k["termination_source"], "kill");
    for pid in pids {
        assert!(!alive(pid), "{pid} survived");
    }
    let again = d.ok("kill", json!({"session_id": id}));
    assert_eq!(again["status"], "already_exited"); // R21 (live part)
    assert_eq!(again["exit_code"], -15);
}

#[test]
fn descendants_that_left_the_group_are_found_by_marker() {
    let d = Daemon::start();
    // setsid puts the sleep in its own session and group; its parent exits,
    // so only the environment marker still ties it to the session.
    let id = d.spawn("setsid sleep 300 & sleep 300");
    let pids = {
        let mut pids = Vec::new();
        wait_until("both sleeps", || {
            pids = session_pids(&id);
            pids.iter().filter(|p| comm(**p) == "sleep").count() == 2
        });
        pids
    };
    let root = d.ok("poll", json!({"session_id": id}))["pid"]
        .as_i64()
        .unwrap();
    let pgrp = |p: i32| {
        let s = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let fields: Vec<&str> = s[s.rfind(')').map_or(0, |i| i + 2)..].split(' ').collect();
        fields.get(2).and_then(|g| g.parse::<i64>().ok())
    };
    let escaped = pids
        .iter()
        .filter(|p| pgrp(**p).is_some_and(|g| g != root))
        .count();
    assert_eq!(escaped, 1, "one sleep runs outside the session's group");
    let k = d.ok("kill", json!({"session_id": id}));
    assert_eq!(k["status"], "killed", "{k}");
    for pid in pids {
        assert!(!alive(pid), "{pid} escaped the kill");
    }
}

#[test]
fn sigterm_ignoring_tree_is_sigkilled_after_the_grace() {
    // R27: a TERM-ignoring parent with TERM-ignoring children all end.
    let d = Daemon::start();
    let id = d.spawn("trap '' TERM; (sleep 300) & sleep 300 & while true; do sleep 1; done");
    wait_until("the tree is up", || session_pids(&id).len() >= 3);
    let pids = session_pids(&id);
    let k = d.ok("kill", json!({"session_id": id, "grace_s": 0.3}));
    assert_eq!(k["status"], "killed", "{k}");
    assert_eq!(k["exit_code"], -9);
    wait_until("every process is gone", || pids.iter().all(|p| !alive(*p)));
    assert!(session_pids(&id).is_empty());
}

#[test]
fn a_negative_grace_means_no_escalation_and_survivors_are_reported() {
    // R27: grace is clamped to 0; 0 = the signal only, survivors reported.
    let d = Daemon::start();
    let id = d.spawn("trap '' TERM; exec sleep 300");
    let pids = wait_for_exec(&id, "sleep");
    let k = d.ok("kill", json!({"session_id": id, "grace_s": -5}));
    assert_eq!(k["status"], "error", "{k}");
    assert_eq!(k["process_running"], true);
    assert!(k["error"]
        .as_str()
        .unwrap()
        .starts_with("Kill incomplete: 1 process(es) still alive"));
    assert_eq!(k["survivors"], json!(pids));
    assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "running");
    let k = d.ok("kill", json!({"session_id": id, "signal": "KILL"}));
    assert_eq!(k["status"], "killed");
    assert!(pids.iter().all(|p| !alive(*p)));
}

#[test]
fn signal_delivers_one_signal_to_the_group() {
    let d = Daemon::start();
    let id = d.spawn("python3 -c \"import signal,sys,time\nsignal.signal(signal.SIGINT, lambda *a: (print('got INT', flush=True), sys.exit(0)))\nprint('ready', flush=True)\ntime.sleep(60)\"");
    d.read_until(&id, "ready");
    let s = d.ok("signal", json!({"session_id": id, "signal": "INT"}));
    assert_eq!(s["signal"], "SIGINT");
    assert!(s["delivered"].as_u64().unwrap() >= 1);
    let w = d.wait_exit(&id);
    assert!(w["output"].as_str().unwrap().contains("got INT"), "{w}");
    let (code, _) = d.err("signal", json!({"session_id": id, "signal": 2}));
    assert_eq!(code, -32002, "no signal to an exited session");
    let (code, _) = d.err("signal", json!({"session_id": id, "signal": "SIGNOPE"}));
    assert_eq!(code, -32602);
}

#[test]
fn timeout_kills_the_tree() {
    let d = Daemon::start();
    let id = d.spawn_with(json!({"command": "sleep 300", "timeout_s": 0.5}));
    let w = d.wait_exit(&id);
    assert_eq!(w["completion_reason"], "timeout", "{w}");
    assert_eq!(w["termination_source"], "timeout");
    assert!(session_pids(&id).is_empty());
}

#[test]
fn kill_started_since_spares_the_baseline_and_other_tasks() {
    // R1
    let d = Daemon::start();
    let before = d.spawn_with(json!({"command": "sleep 300", "task_id": "t"}));
    let baseline = d.ok("snapshot_running", json!({"task_id": "t"}))["session_ids"].clone();
    assert_eq!(baseline, json!([before]));
    let new1 = d.spawn_with(json!({"command": "sleep 300", "task_id": "t"}));
    let new2 = d.spawn_with(json!({"command": "sleep 300", "task_id": "t"}));
    let foreign = d.spawn_with(json!({"command": "sleep 300", "task_id": "u"}));
    let r = d.ok(
        "kill_started_since",
        json!({"task_id": "t", "baseline": baseline, "source": "turn_timeout"}),
    );
    assert_eq!(r["killed"], 2);
    let status = |id: &str| d.ok("poll", json!({"session_id": id}));
    assert_eq!(status(&before)["status"], "running");
    assert_eq!(status(&foreign)["status"], "running");
    for id in [&new1, &new2] {
        let p = status(id);
        assert_eq!(p["status"], "exited");
        assert_eq!(p["termination_source"], "turn_timeout");
    }
    d.ok("kill_all", json!({}));
}

#[test]
fn kill_all_honours_task_and_exclusions() {
    // R2
    let d = Daemon::start();
    let a = d.spawn_with(json!({"command": "sleep 300", "task_id": "t"}));
    let b = d.spawn_with(json!({"command": "sleep 300", "task_id": "t"}));
    let c = d.spawn_with(json!({"command": "sleep 300", "task_id": "t"}));
    let other = d.spawn_with(json!({"command": "sleep 300", "task_id": "u"}));
    let r = d.ok("kill_all", json!({"task_id": "t", "exclude_ids": [b]}));
    assert_eq!(r["killed"], 2);
    let st = |id: &str| d.ok("poll", json!({"session_id": id}))["status"].clone();
    assert_eq!(st(&a), "exited");
    assert_eq!(st(&c), "exited");
    assert_eq!(st(&b), "running");
    assert_eq!(st(&other), "running");
    assert_eq!(d.ok("kill_all", json!({}))["killed"], 2);
}
