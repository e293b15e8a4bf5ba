//! procd's units under a real systemd user manager (issue "the systemd
//! user service, tested for real"): socket activation and Type=notify
//! readiness, `systemctl --user stop`, `reload` and `procd restart`
//! handing sessions over, a SIGKILLed daemon and then a SIGKILLed keeper,
//! sessions in cgroups delegated to the service.
//!
//! Each test brings up its own `systemd --user` (crates/procd-usermanager:
//! a private mount namespace, its own runtime dir, HOME and cgroup) with
//! the units from `systemd/` as shipped, ExecStart's path substituted,
//! and removes everything afterwards. `PROCD_TEST_NO_SYSTEMD=1` says the
//! machine has no systemd; the tests then say so and pass, and only then.

use crate::common::systemd::UserManager;
use crate::common::*;
use serde_json::json;

/// A session printing "tick 0" … "tick 200", one line every 10 ms.
const TICKER: &str = "for i in $(seq 0 200); do echo tick $i; sleep 0.01; done";

#[test]
fn systemd_socket_activation_starts_the_service_on_the_first_request() {
    let Some(m) = UserManager::start() else {
        return;
    };
    m.start_socket();
    // Only the socket listens: status tells that from not running.
    let out = m.procd(&["status"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("socket is active"), "{text}");
    let json = m.procd_json(&["status", "--json"]);
    assert_eq!(json["socket_active"], true, "{json}");
    assert_eq!(m.active_state("procd.service"), "inactive");

    // The first request starts the service, and is answered by it.
    let mut c = m.connect();
    let r = c.call("status", json!({}));
    let status = &r["result"];
    assert!(status["pid"].as_i64().is_some(), "{r}");
    // Type=notify: "active" only after READY=1.
    assert_eq!(m.active_state("procd.service"), "active");
    let keeper = m.main_pid();
    assert!(keeper > 0 && alive(keeper));
    assert_eq!(
        status["pid"].as_i64().map(|p| p as i32),
        daemon_below(keeper),
        "the daemon serving is the keeper's child: {status}"
    );
    assert_eq!(status["systemd_unit"], "procd.service", "{status}");
    assert_eq!(status["containment"], "cgroup", "{status}");

    // A session lives in a cgroup delegated to the service, not a scope.
    let id = m.spawn("sleep 300");
    let pid = m.session_pid(&id);
    let cgroup = v2_cgroup(pid);
    assert!(
        cgroup.contains("/procd.service/procd-") && cgroup.ends_with(&format!("/{id}")),
        "{cgroup}"
    );
    let units = m.systemctl(&["list-units", "--type=scope", "--no-legend"]);
    assert!(
        !String::from_utf8_lossy(&units.stdout).contains("procd-worker"),
        "no scope per session: {units:?}"
    );
    let text = String::from_utf8_lossy(&m.procd(&["status"]).stdout).to_string();
    assert!(text.contains("systemd unit procd.service"), "{text}");
    assert!(text.contains("containment: cgroup"), "{text}");
}

#[test]
fn systemd_stop_ends_every_session_within_the_grace_and_leaves_nothing() {
    let Some(m) = UserManager::start() else {
        return;
    };
    m.start_socket();
    let plain = m.spawn("sleep 300");
    let stubborn = m.spawn(
        "exec python3 -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(\"up\", flush=True); time.sleep(300)'",
    );
    let escapee = m.spawn("setsid -f env -i sleep 300; sleep 300");
    m.read_until(&stubborn, "up");
    let roots: Vec<i32> = [&plain, &stubborn, &escapee]
        .iter()
        .map(|id| m.session_pid(id))
        .collect();
    // The roots, and the escapee in its own session outside their trees.
    let mut pids = Vec::new();
    wait_until("every session's processes are up", || {
        pids = m.session_processes();
        roots.iter().all(|r| pids.contains(r))
            && pids
                .iter()
                .any(|p| !roots.contains(p) && comm(*p) == "sleep" && start_time(*p).is_some())
    });
    let keeper = m.main_pid();
    let daemon = daemon_below(keeper).expect("the daemon");
    let stopped = m.systemctl(&["stop", "procd.service", "procd.socket"]);
    assert!(stopped.status.success(), "{stopped:?}");
    for pid in pids.iter().chain([&keeper, &daemon]) {
        assert!(!alive(*pid), "{pid} survived the stop");
    }
    assert_eq!(m.active_state("procd.service"), "inactive");
    assert!(m.session_processes().is_empty());
}

#[test]
fn systemd_reload_and_procd_restart_hand_every_session_over_live() {
    let Some(m) = UserManager::start() else {
        return;
    };
    m.start_socket();
    let echo = m.spawn_with(json!({"command": "while read l; do echo got $l; done; exit 3"}));
    let ticker = m.spawn(TICKER);
    let echo_pid = m.session_pid(&echo);
    let keeper = m.main_pid();
    let first = m.daemon_pid();
    m.read_until(&ticker, "tick 10");

    // systemctl --user reload: ExecReload= asks the keeper to hand over.
    let reloaded = m.systemctl(&["reload", "procd.service"]);
    assert!(reloaded.status.success(), "{reloaded:?}");
    let second = m.wait_new_daemon(first);
    assert_eq!(m.main_pid(), keeper, "the keeper stays");
    m.ok("write_stdin", json!({"session_id": echo, "data": "one\n"}));
    m.read_until(&echo, "got one");

    // procd restart works under systemd too, the same way.
    let out = m.procd(&["restart"]);
    assert!(out.status.success(), "{out:?}");
    m.wait_new_daemon(second);
    assert_eq!(m.main_pid(), keeper);
    m.ok("write_stdin", json!({"session_id": echo, "data": "two\n"}));
    m.read_until(&echo, "got two");
    assert_eq!(m.session_pid(&echo), echo_pid);
    m.ok("close_stdin", json!({"session_id": echo}));
    assert_eq!(m.wait_exit(&echo)["exit_code"], 3);

    // Every tick, in order, across both handovers.
    assert_eq!(m.wait_exit(&ticker)["exit_code"], 0);
    let text = m.read_all(&ticker);
    let lines: Vec<&str> = text.lines().collect();
    let want: Vec<String> = (0..=200).map(|i| format!("tick {i}")).collect();
    assert_eq!(lines, want, "{text}");
}

#[test]
fn systemd_killed_daemon_then_keeper_lose_no_output_and_no_exit() {
    let Some(m) = UserManager::start() else {
        return;
    };
    m.start_socket();
    let gate = m.home().join("gate");
    let ticker = m.spawn(TICKER);
    let pty = m.spawn_with(json!({"command": TICKER, "pty": true}));
    let echo = m.spawn_with(json!({"command": "while read l; do echo got $l; done; exit 3"}));
    // Ends, with 7, when the test says: while no procd process is there.
    let gated = m.spawn(&format!(
        "while [ ! -e {} ]; do sleep 0.01; done; exit 7",
        gate.display()
    ));
    let sleeper = m.spawn("sleep 300");
    m.read_until(&ticker, "tick 5");
    let keeper = m.main_pid();

    // The daemon alone: the keeper starts another, sessions go on (their
    // roots are the keeper's children now).
    let first = m.daemon_pid();
    kill9(first);
    let second = m.wait_new_daemon(first);
    assert_eq!(m.main_pid(), keeper);
    m.ok("write_stdin", json!({"session_id": echo, "data": "one\n"}));
    m.read_until(&echo, "got one");

    // The keeper: systemd leaves the sessions be (KillMode=process), the
    // daemon hands over and exits, and the unit's next keeper takes every
    // session back from the fd store.
    let pid_of = |id: &str| m.session_pid(id);
    let (gated_pid, sleeper_pid, echo_pid) = (pid_of(&gated), pid_of(&sleeper), pid_of(&echo));
    kill9(keeper);
    wait_until("the daemon that lost its keeper exits", || !alive(second));
    // No procd process is left above any root: the user manager reaps
    // this one, and only its pidfd in the fd store tells how it ended.
    std::fs::write(&gate, "").expect("open the gate");
    wait_until("the gated root ends", || !alive(gated_pid));
    wait_until("systemd starts the unit again", || {
        let now = m.main_pid();
        now > 0 && now != keeper && m.active_state("procd.service") == "active"
    });
    m.daemon_pid();
    assert!(
        alive(sleeper_pid) && alive(echo_pid),
        "the sessions went on"
    );

    let r = m.wait_exit(&gated);
    assert_eq!(r["exit_code"], 7, "{r}");
    assert_ne!(r["completion_reason"], "lost", "{r}");
    // Live: stdin reaches it, and its end (the new keeper's pidfd watch,
    // not a child's wait) is exact.
    m.ok("write_stdin", json!({"session_id": echo, "data": "two\n"}));
    m.read_until(&echo, "got two");
    m.ok("close_stdin", json!({"session_id": echo}));
    assert_eq!(m.wait_exit(&echo)["exit_code"], 3);
    // Every tick, in order, across both kills, from a pipe and a PTY.
    let want: Vec<String> = (0..=200).map(|i| format!("tick {i}")).collect();
    for id in [&ticker, &pty] {
        assert_eq!(m.wait_exit(id)["exit_code"], 0, "{id}");
        let text = m.read_all(id);
        let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
        assert_eq!(lines, want, "{id}: {text}");
    }
    // And still ours to end.
    m.ok("kill", json!({"session_id": sleeper}));
    wait_until("the sleeper is gone", || !alive(sleeper_pid));
    assert_eq!(m.wait_exit(&sleeper)["status"], "exited");
}

/// SIGKILL to a process this test started (through the units).
fn kill9(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// The cgroup2 path of `pid`.
fn v2_cgroup(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_default()
        .to_string()
}

/// With `containment = "scope"` a session runs in a real systemd scope;
/// a sandboxed one's processes are told by that scope's cgroup and get
/// -32005 for every request (tests/sandbox.rs covers cgroups and process
/// groups).
#[test]
fn systemd_a_sandboxed_session_in_a_scope_is_not_served() {
    let Some(m) = UserManager::start() else {
        return;
    };
    let config = m.home().join(".config/procd");
    std::fs::create_dir_all(&config).expect("config dir");
    std::fs::write(config.join("config.toml"), "containment = \"scope\"\n").expect("config");
    m.start_socket();
    let status = m.ok("status", json!({}));
    assert_eq!(status["containment"], "scope", "{status}");
    let probe = format!(
        "python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); \
         s.sendall(b\"{{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"id\\\":7,\\\"method\\\":\\\"status\\\"}}\\n\"); \
         print(s.makefile().readline(), end=\"\")' {}; sleep 300",
        m.socket().display()
    );
    // Network all, so that only this rule can refuse it.
    let id = m.spawn_with(json!({"command": probe, "sandbox": {"network": "all"}}));
    let output = m.read_until(&id, "\"id\":7");
    let cgroup = v2_cgroup(m.session_pid(&id));
    assert!(
        cgroup.contains(&format!("/procd-worker-{id}.scope")),
        "a real scope: {cgroup}"
    );
    let answer: serde_json::Value = serde_json::from_str(
        output
            .lines()
            .find(|l| l.contains("\"id\":7"))
            .unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("one JSON-RPC line, not {output:?}: {e}"));
    assert_eq!(answer["error"]["code"], -32005, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("sandboxed session {id}"))),
        "{answer}"
    );
    m.ok("kill", json!({"session_id": id}));
}
