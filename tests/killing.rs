//! Tree kill (docs/SECURITY.md) through the daemon: what dies is checked in /proc.

use crate::common::*;
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

// ----- kill means kill (docs/SECURITY.md) -------------------------------------------

#[test]
fn a_killed_compound_command_runs_no_later_step() {
    // The shell honours SIGTERM: with no escalation at all (grace 0), the
    // group's SIGTERM alone ends the command line, and the step after the
    // one that was running never starts.
    let d = Daemon::start();
    let id = d.spawn("sleep 300; echo AFTER-KILL; sleep 300");
    let pids = wait_for_exec(&id, "sleep");
    let k = d.ok("kill", json!({"session_id": id, "grace_s": 0}));
    assert_eq!(k["status"], "killed", "SIGTERM alone ended it: {k}");
    assert_eq!(k["exit_code"], 143, "the shell left through its trap: {k}");
    assert_eq!(k["completion_reason"], "killed");
    assert!(pids.iter().all(|p| !alive(*p)));
    let out = d.read_all(&id);
    assert!(!out.contains("AFTER-KILL"), "a later step ran: {out:?}");
}

#[test]
fn a_restart_loop_is_not_restarted() {
    let d = Daemon::start();
    let id = d.spawn("while true; do sleep 300; echo restarted; done");
    wait_for_exec(&id, "sleep");
    let k = d.ok("kill", json!({"session_id": id, "grace_s": 0}));
    assert_eq!(k["status"], "killed", "{k}");
    assert!(session_pids(&id).is_empty(), "nothing of the loop runs");
    assert!(!d.read_all(&id).contains("restarted"));
}

#[test]
fn an_escaped_descendant_dies_with_its_running_session() {
    // `setsid -f env -i` leaves the group and drops the marker; it is
    // still in the session's cgroup, entered before exec
    // (docs/containment.md), or on a machine without one, still a child
    // of the daemon, which attributes it to the session.
    let d = Daemon::start();
    let mut strays = Strays::default();
    let id = d.spawn("setsid -f env -i sleep 2991; sleep 300");
    let mut escaped = Vec::new();
    wait_until("the escapee runs", || {
        escaped = strays.find(&["sleep", "2991"]);
        !escaped.is_empty()
    });
    if d.ok("status", json!({}))["containment"] == "cgroup" {
        assert!(
            cgroup_pids(d.home.path(), &id).contains(&escaped[0]),
            "the escapee is in the session's cgroup"
        );
    }
    let k = d.ok("kill", json!({"session_id": id}));
    assert_eq!(k["status"], "killed", "{k}");
    assert!(escaped.iter().all(|p| !alive(*p)), "the escapee survived");
}

#[test]
fn an_escaped_descendant_of_an_exited_session_dies_with_its_kill() {
    // The root exits first: the escapee is reparented to the daemon, which
    // records whose it was.
    let d = Daemon::start();
    let mut strays = Strays::default();
    let id = d.spawn("setsid -f env -i sleep 2992; echo launched");
    let w = d.wait_exit(&id);
    assert_eq!(w["exit_code"], 0, "{w}");
    let escaped = strays.find(&["sleep", "2992"]);
    assert_eq!(escaped.len(), 1, "the escapee outlived its root");
    let k = d.ok("kill", json!({"session_id": id}));
    assert_eq!(k["status"], "already_exited", "{k}");
    assert_eq!(k["orphans_killed"], 1, "{k}");
    assert!(!alive(escaped[0]), "the escapee survived the kill");
}

#[test]
fn a_stopping_daemon_leaves_nothing_it_started() {
    // Leftovers of sessions whose root already exited: one in the group,
    // one that escaped group and marker.
    let mut d = Daemon::start();
    let mut strays = Strays::default();
    let a = d.spawn("sleep 2993 & echo a");
    let b = d.spawn("setsid -f env -i sleep 2994; echo b");
    let c = d.spawn("sleep 2995");
    d.wait_exit(&a);
    d.wait_exit(&b);
    let mut left = Vec::new();
    wait_until("all three run", || {
        left = [["sleep", "2993"], ["sleep", "2994"], ["sleep", "2995"]]
            .iter()
            .flat_map(|argv| strays.find(argv))
            .collect();
        left.len() == 3
    });
    let _ = c;
    assert_eq!(d.stop(), Some(0));
    for pid in left {
        assert!(!alive(pid), "{pid} ({}) outlived the daemon", comm(pid));
    }
}

#[test]
fn kill_all_waits_without_a_thread_per_session() {
    let d = Daemon::start();
    let threads = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse::<i64>().ok())
            .unwrap()
    };
    let ids: Vec<String> = (0..48).map(|_| d.spawn("sleep 300; echo never")).collect();
    wait_until("every session runs sleep", || {
        ids.iter()
            .all(|id| session_pids(id).iter().any(|p| comm(*p) == "sleep"))
    });
    let before = threads();
    let r = d.ok("kill_all", json!({}));
    assert_eq!(r["killed"], 48);
    // Blocking threads linger for seconds after their work, so what the
    // kill took is still visible here.
    let added = threads() - before;
    assert!(added <= 6, "kill_all of 48 sessions added {added} threads");
}

/// The kernel gives a user 128 inotify instances, across all its
/// processes. A kill waits on its cgroup's `cgroup.events` through
/// inotify: with an instance per wait, a kill of a few hundred sessions
/// took them all, and meanwhile no session could `watch` its files (nor
/// could any other program of the user). The waits share one instance.
#[test]
fn a_kill_of_many_sessions_takes_no_inotify_instance_per_session() {
    let d = Daemon::with_config("kill_grace_s = 60");
    let inotify_instances = || {
        d.fds()
            .iter()
            .filter(|(_, link)| link.contains("inotify"))
            .count()
    };
    let said = |id: &str, what: &str| {
        d.ok("log", json!({"session_id": id}))["output"]
            .as_str()
            .is_some_and(|t| t.contains(what))
    };
    // Deaf to SIGTERM: each kill waits out its grace.
    let ids: Vec<String> = (0..140)
        .map(|_| d.spawn("trap 'echo got-term' TERM; echo up; while :; do sleep 0.2; done"))
        .collect();
    wait_until("every session runs", || ids.iter().all(|id| said(id, "up")));
    let before = inotify_instances();
    std::thread::scope(|scope| {
        let killing = scope.spawn(|| d.ok("kill_all", json!({})));
        wait_until("every session got its SIGTERM", || {
            ids.iter().all(|id| said(id, "got-term"))
        });
        let during = inotify_instances();
        assert!(
            during <= before,
            "140 kills waiting held {during} inotify instances (before: {before})"
        );
        // The waits end early: SIGKILL each session's processes.
        for id in &ids {
            for pid in session_pids(id) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        assert_eq!(killing.join().unwrap()["killed"], 140);
    });
}
