//! Containment (docs/containment.md): a cgroup per session, placed before
//! exec; nothing procd-only in the user's process; limits that hold on
//! this machine (memory, cpu and pids are v1 controllers here); unknown
//! params refused by name. Checked against the real kernel: /proc, the
//! cgroup files, what died.
//!
//! These need a writable cgroup2 mount (root on this machine kind). Where
//! the machine has none, set `PROCD_TEST_NO_CGROUP=1` and they skip, saying
//! so; without it, a missing cgroup fails the test with the reason.

use crate::common::*;
use serde_json::{json, Value};
use std::time::Instant;

/// A daemon whose sessions get cgroups; None (the test skips, loudly)
/// only when `PROCD_TEST_NO_CGROUP` says this machine has none.
fn cgroup_daemon(config: &str) -> Option<Daemon> {
    if machine_lacks("PROCD_TEST_NO_CGROUP", "a cgroup to manage") {
        return None;
    }
    let d = Daemon::with_config(config);
    let status = d.ok("status", json!({}));
    assert_eq!(
        status["containment"], "cgroup",
        "no cgroup containment here: {status} (set PROCD_TEST_NO_CGROUP=1 on a machine without one)"
    );
    Some(d)
}

fn environ_has(pid: i32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == entry.as_bytes()))
}

#[test]
fn status_says_cgroup_and_where() {
    let Some(d) = cgroup_daemon("") else { return };
    let s = d.ok("status", json!({}));
    let reason = s["containment_reason"].as_str().unwrap_or("");
    assert!(reason.contains(&instance_cgroup_name(d.home.path())), "{s}");
    // Memory, cpu and pids are v1 controllers on this machine kind.
    for c in ["memory", "cpu", "pids"] {
        assert!(s["limits_available"][c].is_string(), "{c}: {s}");
    }
}

#[test]
fn an_execd_root_has_no_subreaper_bit_and_leaves_no_zombies() {
    let Some(d) = cgroup_daemon("") else { return };
    // The single command bash execs in place: python is the root. It
    // double-forks 100 helpers (each child waited for; each grandchild an
    // orphan that exits at once, its pid printed by its parent before the
    // parent exits) and then lives on.
    let script = r#"
import ctypes, os, time
v = ctypes.c_int(-1)
ctypes.CDLL(None).prctl(37, ctypes.byref(v))  # PR_GET_CHILD_SUBREAPER
print("subreaper", v.value, flush=True)
for _ in range(100):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os.write(w, b"%d\n" % os.getpid())
            os._exit(0)
        os.write(1, b"orphan " + os.read(r, 32))
        os._exit(0)
    os.close(r)
    os.close(w)
    os.waitpid(pid, 0)
print("forked", flush=True)
time.sleep(300)
"#;
    let id = d.spawn_with(json!({"command": format!("exec python3 -c '{script}'")}));
    let text = d.read_until(&id, "forked");
    assert!(text.contains("subreaper 0"), "{text}");
    let root = pid_of(&d, &id);
    assert_eq!(comm(root), "python3");
    let orphans: Vec<i32> = text
        .lines()
        .filter_map(|l| l.strip_prefix("orphan ")?.trim().parse().ok())
        .collect();
    assert_eq!(orphans.len(), 100, "{text}");
    // Each was reparented to procd and reaped: gone from /proc (a zombie,
    // or one that has not exited yet, is still there).
    wait_until("every orphan is reaped", || {
        orphans
            .iter()
            .all(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    });
    assert!(zombie_children(root).is_empty());
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn an_escapee_with_a_cleared_environment_stays_in_its_cgroup_and_dies_with_it() {
    let Some(d) = cgroup_daemon("") else { return };
    let id = d.spawn("setsid -f env -i sleep 301; exec sleep 300");
    let mut escapee = 0;
    wait_until("the escapee runs in the session's cgroup", || {
        escapee = cgroup_pids(d.home.path(), &id)
            .into_iter()
            .find(|p| comm(*p) == "sleep" && !environ_has(*p, &format!("PROCD_SESSION_ID={id}")))
            .unwrap_or(0);
        escapee != 0
    });
    let all = cgroup_pids(d.home.path(), &id);
    assert_eq!(all.len(), 2, "{all:?}");
    let k = d.ok("kill", json!({"session_id": id}));
    assert_eq!(k["status"], "killed", "{k}");
    for pid in all {
        assert!(!alive(pid), "{pid} ({}) survived the kill", comm(pid));
    }
    wait_until("the session's cgroup is removed", || {
        !session_cgroup(d.home.path(), &id).exists()
    });
}

#[test]
fn a_fork_loop_is_killed_for_good() {
    let Some(d) = cgroup_daemon("") else { return };
    // Forks as fast as it can (bounded by a pids limit, so it cannot take
    // the machine); every child forks again.
    let id = d.spawn_with(json!({
        "command": "while :; do (sleep 30 &) ; done",
        "limits": {"pids": 200},
    }));
    wait_until("the loop has forked plenty", || {
        cgroup_pids(d.home.path(), &id).len() > 50
    });
    let started = Instant::now();
    let k = d.ok("kill", json!({"session_id": id, "grace_s": 0.2}));
    let took = started.elapsed();
    assert_eq!(k["status"], "killed", "{k}");
    assert!(cgroup_pids(d.home.path(), &id).is_empty());
    assert!(session_pids(&id).is_empty(), "{:?}", session_pids(&id));
    eprintln!("fork loop killed in {took:?}");
}

/// Spawns and waits for `command` with `limits`; the wait's result.
fn run_limited(d: &Daemon, command: &str, limits: Value) -> Value {
    let id =
        d.spawn_with(json!({"command": command, "limits": limits, "notify_on_complete": true}));
    d.wait_exit(&id)
}

#[test]
fn an_oom_after_the_daemon_was_killed_is_reported_as_it_happens() {
    // The limit lives in the session's cgroup; the next daemon watches it
    // too: the kill is an `oom` event at once, while the session's root
    // runs on, and its exit later says "oom".
    let Some(d) = cgroup_daemon("") else { return };
    let go = d.home.path().join("allocate-now");
    let id = d.spawn_with(json!({
        "command": format!(
            "while [ ! -e '{}' ]; do sleep 0.02; done; python3 -c 'b = []\nwhile True: b.append(bytearray(1 << 20))'; echo after $?; sleep 300",
            go.display()
        ),
        "limits": {"memory_bytes": 64 << 20},
    }));
    d.kill_daemon();
    std::fs::write(&go, "").expect("go");
    d.read_until(&id, "after 137");
    let mut events = Vec::new();
    wait_until("an oom event while the session runs", || {
        events.extend(
            d.ok("drain_notifications", json!({}))["events"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
        events.iter().any(|e| e["type"] == "oom")
    });
    let oom = events.iter().find(|e| e["type"] == "oom").expect("oom");
    assert_eq!(oom["session_id"], id.as_str(), "{oom}");
    assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "running");
    d.ok("kill", json!({"session_id": id}));
    let r = d.wait_exit(&id);
    assert_eq!(r["completion_reason"], "killed", "{r}");
}

#[test]
fn a_memory_limit_ends_the_allocator_as_oom() {
    let Some(d) = cgroup_daemon("") else { return };
    let r = run_limited(
        &d,
        "python3 -c 'b = []\nwhile True: b.append(bytearray(1 << 20))'; echo after $?",
        json!({"memory_bytes": 64 << 20}),
    );
    assert_eq!(r["completion_reason"], "oom", "{r}");
    // The shell ran on: the exit code is what the root returned.
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(
        r["output"].as_str().unwrap_or("").contains("after 137"),
        "{r}"
    );
    let events = d.ok("drain_notifications", json!({}))["events"].clone();
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    let oom = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "oom")
        .unwrap_or_else(|| panic!("no oom event: {events}"));
    assert_eq!(oom["session_id"], r["session_id"]);
    assert!(oom["oom_kills"].as_u64() >= Some(1), "{oom}");
    // Each text says what its fields say: the kill, and a completion
    // that names the OOM killer and the root's own exit code.
    assert!(
        oom["text"].as_str().unwrap_or("").contains("memory limit"),
        "{oom}"
    );
    let done = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "completion")
        .unwrap();
    let text = done["text"].as_str().unwrap_or("");
    assert!(
        text.contains("OOM killer") && text.contains("(exit code 0"),
        "{done}"
    );
    assert!(!text.contains("unknown"), "{done}");
    // The same through procd events, one line each, from the journal.
    let id = r["session_id"].as_str().unwrap();
    let mut follow = std::process::Command::new(BIN)
        .arg("--home")
        .arg(d.home.path())
        .args([
            "events",
            "--since",
            "0",
            "--session",
            id,
            "--kinds",
            "oom,completed",
        ])
        .env("HOME", d.home.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("procd events");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(follow.stdout.take().unwrap()));
    let oom_line = lines.next().and_then(Result::ok).unwrap_or_default();
    let done_line = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(
        oom_line.contains(&format!(" oom {id} ")) && oom_line.contains("memory limit"),
        "{oom_line}"
    );
    assert!(
        done_line.contains(" completed ") && done_line.contains("OOM killer"),
        "{done_line}"
    );
    // The oom event came first, then the completion.
    let completion = kinds
        .iter()
        .position(|k| *k == "completion")
        .expect("completion");
    assert!(
        kinds.iter().position(|k| *k == "oom") < Some(completion),
        "{kinds:?}"
    );
    // Without the limit the same allocation of 100 MiB succeeds.
    let r = run_limited(
        &d,
        "python3 -c 'b = bytearray(100 << 20); print(len(b))'",
        json!({}),
    );
    assert_eq!(r["completion_reason"], "exited", "{r}");
}

#[test]
fn a_pids_limit_holds() {
    let Some(d) = cgroup_daemon("") else { return };
    let script = r#"
import os, time
n = 0
for _ in range(60):
    try:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        n += 1
    except OSError:
        break
print("forked", n, flush=True)
"#;
    let r = run_limited(&d, &format!("python3 -c '{script}'"), json!({"pids": 20}));
    let out = r["output"].as_str().unwrap_or("").to_string();
    let n: u32 = out
        .split_whitespace()
        .skip_while(|w| *w != "forked")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    // bash and python count too: fewer than 20 children could be made.
    assert!(n > 0 && n < 20, "forked {n} with pids = 20: {out}");
    // The leftovers (python's sleeping children, the root gone) are
    // ended with their cgroup: looked for by their marker too, since a
    // removed cgroup lists nobody.
    let id = r["session_id"].as_str().unwrap();
    assert!(!session_pids(id).is_empty(), "children were left to end");
    d.ok("kill", json!({"session_id": id, "grace_s": 0}));
    assert!(cgroup_pids(d.home.path(), id).is_empty());
    assert!(session_pids(id).is_empty(), "{:?}", session_pids(id));
}

/// CPU seconds a 2-second busy loop got, limited as `limits` says.
fn busy_cpu_seconds(d: &Daemon, limits: Value) -> f64 {
    let script = "import os, time\nt = time.time()\nwhile time.time() - t < 2: pass\ntm = os.times()\nprint(\"cpu\", tm.user + tm.system)";
    let r = run_limited(d, &format!("python3 -c '{script}'"), limits);
    let out = r["output"].as_str().unwrap_or("").to_string();
    out.split_whitespace()
        .skip_while(|w| *w != "cpu")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"))
}

#[test]
fn a_cpu_limit_holds() {
    let Some(d) = cgroup_daemon("") else { return };
    let free = busy_cpu_seconds(&d, json!({}));
    let limited = busy_cpu_seconds(&d, json!({"cpu_cores": 0.2}));
    // 0.2 of a core for 2 s is 0.4 s; the same loop unlimited gets far
    // more, even on a loaded 2-core machine.
    assert!(
        limited < 0.6 && limited < free * 0.5,
        "limited {limited:.2}s vs free {free:.2}s"
    );
}

/// A queue's `cpu_weight` goes to its sessions' cgroups: two busy loops
/// on one CPU, one in a queue of weight 10 beside one of the kernel's
/// default weight (100; a cpu limit of 2 cores, which holds nothing back
/// here, gives it a sibling cgroup), share it about 1 to 10.
#[test]
fn a_queue_cpu_weight_makes_its_sessions_yield() {
    let Some(d) = cgroup_daemon("[queue.background]\nslots = 1\ncpu_weight = 10\n") else {
        return;
    };
    let script = "import os, time\nt = time.time()\nwhile time.time() - t < 2: pass\ntm = os.times()\nprint(\"cpu\", tm.user + tm.system)";
    let command = format!("exec taskset -c 0 python3 -c '{script}'");
    let background = d.spawn_with(json!({"command": command, "queue": "background",
        "notify_on_complete": true}));
    let server = d.spawn_with(json!({"command": command, "limits": {"cpu_cores": 2},
        "notify_on_complete": true}));
    let cpu = |id: &str| {
        let out = d.wait_exit(id)["output"].as_str().unwrap_or("").to_string();
        out.split_whitespace()
            .skip_while(|w| *w != "cpu")
            .nth(1)
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{out}"))
    };
    let (background, server) = (cpu(&background), cpu(&server));
    assert!(
        background * 3.0 < server,
        "weight 10 got {background:.2}s, weight 100 {server:.2}s of one CPU"
    );
}

/// A queue's `io_weight` goes to its sessions' cgroups where the disks'
/// scheduler reads a weight. Where none does (this machine kind: v1
/// blkio, no BFQ or CFQ), `status` says so and why, and the queue's
/// sessions run, unweighed, in no blkio cgroup of procd's.
#[test]
fn a_queue_io_weight_is_applied_where_a_scheduler_reads_it() {
    let Some(d) = cgroup_daemon("[queue.background]\nslots = 1\nio_weight = 50\n") else {
        return;
    };
    let status = d.ok("status", json!({}));
    let id = d.spawn_with(
        json!({"command": "cat /proc/self/cgroup; echo listed; exec sleep 300",
        "queue": "background"}),
    );
    let output = || {
        let poll = d.ok("poll", json!({"session_id": id}));
        poll["output_preview"].as_str().unwrap_or("").to_string()
    };
    wait_until("its cgroups listed", || output().contains("listed"));
    let own = output();
    match status["limits_available"]["io"].as_str() {
        Some(_) => {
            // Where the weight went: the v2 cgroup, or the blkio one.
            let v1 = own
                .lines()
                .find_map(|l| l.split_once(":blkio:").map(|(_, p)| p.to_string()));
            let dirs = [
                session_cgroup(d.home.path(), &id),
                std::path::Path::new("/sys/fs/cgroup/blkio")
                    .join(v1.unwrap_or_default().trim_start_matches('/')),
            ];
            let weights: Vec<String> = dirs
                .iter()
                .flat_map(|dir| {
                    [
                        "io.weight",
                        "io.bfq.weight",
                        "blkio.weight",
                        "blkio.bfq.weight",
                    ]
                    .map(|f| dir.join(f))
                })
                .filter_map(|f| std::fs::read_to_string(f).ok())
                .collect();
            assert!(
                weights
                    .iter()
                    .any(|w| w.contains(" 50") || w.trim() == "250" || w.trim() == "50"),
                "io_weight 50 is nowhere in {dirs:?}: {weights:?}"
            );
        }
        None => {
            let why = status["limits_unavailable"]["io"]
                .as_str()
                .unwrap_or_else(|| panic!("status says neither where io is nor why not: {status}"));
            assert!(why.contains("weight"), "{why}");
            assert!(d.ok("poll", json!({"session_id": id}))["status"] == "running");
            let blkio = own.lines().find(|l| l.contains(":blkio:")).unwrap_or("");
            assert!(!blkio.contains(&id), "put in a blkio cgroup: {own}");
        }
    }
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn a_limit_without_its_controller_is_refused_by_name() {
    // No cgroup at all (as on a machine without one): every limit is
    // refused, naming its controller, and nothing runs.
    let d = Daemon::with_config("containment = \"group\"\n");
    for (limits, controller) in [
        (json!({"memory_bytes": 64 << 20}), "memory"),
        (json!({"cpu_cores": 1}), "cpu"),
        (json!({"pids": 10}), "pids"),
    ] {
        let (code, msg) = d.err(
            "spawn",
            json!({"command": "touch ran", "cwd": d.home.path(), "limits": limits}),
        );
        assert_eq!(code, -32002, "{msg}");
        assert!(msg.contains(&format!("{controller} controller")), "{msg}");
    }
    assert!(!d.home.path().join("ran").exists());
    assert_eq!(d.ok("list", json!({}))["processes"], json!([]));
    assert_eq!(d.ok("status", json!({}))["containment"], "group");
}

#[test]
fn unknown_params_are_refused_by_name_before_anything_happens() {
    let d = Daemon::start();
    let marker = d.home.path().join("ran");
    let touch = format!("touch {}", marker.display());
    for (params, named) in [
        (json!({"command": touch, "limitz": {}}), "limitz"),
        (
            json!({"command": touch, "memory_limit_mb": 64}),
            "memory_limit_mb",
        ),
        (json!({"command": touch, "limits": {"memory": 1}}), "memory"),
    ] {
        let (code, msg) = d.err("spawn", params.clone());
        assert_eq!(code, -32602, "{params}: {msg}");
        assert!(msg.contains(&format!("unknown field `{named}`")), "{msg}");
    }
    assert!(!marker.exists(), "a refused spawn ran");
    let id = d.spawn("sleep 300");
    let (code, msg) = d.err("kill", json!({"session_id": id, "gracefully": true}));
    assert_eq!(code, -32602);
    assert!(msg.contains("\"gracefully\""), "{msg}");
    let (code, msg) = d.err("poll", json!([id, null, null, "extra"]));
    assert_eq!(code, -32602);
    assert!(msg.contains("4 positional params"), "{msg}");
    // A notification naming an unknown param is not run either.
    let mut c = d.connect();
    c.send_raw(r#"{"jsonrpc":"2.0","method":"kill_all","params":{"everything":true}}"#);
    let status = c.call("poll", json!({"session_id": id}));
    assert_eq!(status["result"]["status"], "running", "{status}");
    // A batch entry too, answered in its place.
    c.send_raw(&format!(
        r#"[{{"jsonrpc":"2.0","id":1,"method":"status","params":{{"x":1}}}},{{"jsonrpc":"2.0","id":2,"method":"poll","params":{{"session_id":"{id}"}}}}]"#
    ));
    let batch = c.recv();
    assert_eq!(batch[0]["error"]["code"], -32602, "{batch}");
    assert_eq!(batch[1]["result"]["status"], "running", "{batch}");
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn service_manager_variables_reach_no_session() {
    let vars = [
        ("INVOCATION_ID", "0123456789abcdef"),
        ("JOURNAL_STREAM", "8:12345"),
        ("MANAGERPID", "1"),
        ("SYSTEMD_EXEC_PID", "1"),
        ("NOTIFY_SOCKET", "/run/nowhere"),
    ];
    let d = Daemon::with_env("", &vars);
    // The daemon itself has them (else this would prove nothing) but for
    // NOTIFY_SOCKET, which its keeper takes (it speaks sd_notify).
    let environ = std::fs::read(format!("/proc/{}/environ", d.pid())).expect("environ");
    for (name, value) in vars.iter().filter(|(n, _)| *n != "NOTIFY_SOCKET") {
        let entry = format!("{name}={value}");
        assert!(
            environ.split(|b| *b == 0).any(|e| e == entry.as_bytes()),
            "the daemon lacks {entry}"
        );
    }
    let id = d.spawn("env; echo END");
    let text = d.read_until(&id, "END");
    for (name, _) in vars {
        assert!(
            !text.contains(&format!("{name}=")),
            "{name} reached the session"
        );
    }
}

#[test]
fn recovery_after_a_whole_crash_finds_every_process_by_its_cgroup() {
    let Some(mut d) = cgroup_daemon("") else {
        return;
    };
    let id = d.spawn("setsid -f env -i sleep 302; exec sleep 300");
    let mut pids = Vec::new();
    wait_until("both sleeps are in the cgroup", || {
        pids = cgroup_pids(d.home.path(), &id);
        pids.len() == 2
    });
    let procs: Value = serde_json::from_str(
        &std::fs::read_to_string(d.state_dir().join("procs.json")).expect("procs.json"),
    )
    .expect("json");
    let recorded = procs[0]["cgroup"].as_str().unwrap_or("");
    assert_eq!(
        std::path::Path::new(recorded),
        session_cgroup(d.home.path(), &id),
        "{procs}"
    );
    // Keeper and daemon die together; a new daemon adopts the session.
    d.crash();
    d.restart();
    let k = d.ok("kill", json!({"session_id": id}));
    assert_eq!(k["status"], "killed", "{k}");
    for pid in pids {
        wait_until("the escapee is dead", || !alive(pid));
    }
    wait_until("the session's cgroup is removed", || {
        !session_cgroup(d.home.path(), &id).exists()
    });
}

#[test]
fn a_stopped_daemon_leaves_no_cgroup() {
    let Some(mut d) = cgroup_daemon("") else {
        return;
    };
    let id = d.spawn("sleep 300 & exec sleep 301");
    let leftover = d.spawn("sleep 303 & exit 0");
    d.wait_exit(&leftover);
    wait_until("the sessions run in their cgroups", || {
        cgroup_pids(d.home.path(), &id).len() == 2
            && cgroup_pids(d.home.path(), &leftover).len() == 1
    });
    let base = session_cgroup(d.home.path(), &id)
        .parent()
        .expect("base")
        .to_path_buf();
    assert_eq!(d.stop(), Some(0));
    assert!(!base.exists(), "{} is left", base.display());
}

/// Kills `id` with a grace far longer than the test's patience and returns
/// the answer; fails if it does not come within `PATIENCE` (the tree
/// honours SIGTERM: nothing should wait for the grace).
fn kill_without_the_grace(d: &Daemon, id: &str) -> Value {
    let mut c = d.connect();
    let id = id.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(c.call("kill", json!({"session_id": id, "grace_s": 300})));
    });
    rx.recv_timeout(PATIENCE)
        .expect("kill waited for the grace: the tree's end was missed")
}

#[test]
fn a_tree_that_honours_sigterm_is_gone_without_waiting_for_the_grace() {
    let Some(d) = cgroup_daemon("") else { return };
    // Killed the moment its shell has forked the first step (the cgroup
    // empties and is removed at once: its end must still be seen).
    for _ in 0..5 {
        let id = d.spawn("sleep 300; echo after; sleep 300");
        let root = pid_of(&d, &id);
        wait_until("the shell forked its sleep", || {
            cgroup_pids(d.home.path(), &id)
                .iter()
                .any(|p| *p != root && comm(*p) == "sleep")
        });
        let k = kill_without_the_grace(&d, &id);
        assert_eq!(k["result"]["status"], "killed", "{k}");
        assert_eq!(k["result"]["exit_code"], 143, "the shell's TERM trap: {k}");
    }
    // A loop that forks all the time: what it forked after the first
    // signal gets it too.
    let id = d.spawn_with(json!({
        "command": "while :; do (sleep 30 &) ; done",
        "limits": {"pids": 200},
    }));
    wait_until("the loop has forked", || {
        cgroup_pids(d.home.path(), &id).len() > 20
    });
    let k = kill_without_the_grace(&d, &id);
    assert_eq!(k["result"]["status"], "killed", "{k}");
    assert!(cgroup_pids(d.home.path(), &id).is_empty());
}
