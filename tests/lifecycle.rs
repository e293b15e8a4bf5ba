//! Daemon lifecycle (docs/operations.md, G1–G25): state file and identity, start /
//! stop / restart / status, client leases, on-demand auto-stop, systemd
//! socket activation and readiness. Real daemons, real processes.

use crate::common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A home whose daemons (started by the CLI) are stopped on drop.
struct Home(tempfile::TempDir);

impl Home {
    fn new() -> Home {
        Home(short_tempdir())
    }

    fn with_config(config: &str) -> Home {
        let h = Home::new();
        std::fs::write(h.path().join("config.toml"), config).expect("config");
        h
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--home")
            .arg(self.path())
            .args(args)
            .env("HOME", self.path())
            .stdin(Stdio::null());
        c
    }

    fn cli(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run procd")
    }

    fn gateway(&self) -> Option<Value> {
        read_json(&self.path().join("run/gateway.json"))
    }

    fn leases(&self) -> Option<Value> {
        read_json(&self.path().join("run/gateway.clients.json"))
    }

    fn write_gateway(&self, value: Value) {
        std::fs::create_dir_all(self.path().join("run")).expect("run dir");
        std::fs::write(self.path().join("run/gateway.json"), value.to_string()).expect("write");
    }

    /// Replaces the lease file atomically, as procd writes it: a daemon
    /// reading it meanwhile (once a second) must never see it half
    /// written, or it would move the "corrupt" file aside.
    fn write_leases(&self, value: Value) {
        std::fs::create_dir_all(self.path().join("run")).expect("run dir");
        let temp = self.path().join("run/.gateway.clients.json.test");
        std::fs::write(&temp, value.to_string()).expect("write");
        std::fs::rename(&temp, self.path().join("run/gateway.clients.json")).expect("rename");
    }

    fn daemon_pid(&self) -> i32 {
        self.gateway().expect("gateway.json")["pid"]
            .as_i64()
            .expect("pid") as i32
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        stop_recorded_daemon(self.path());
    }
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_out(o: &Output) -> Value {
    serde_json::from_str(stdout(o).trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {o:?}"))
}

fn identity_of(pid: i32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let f: Vec<&str> = text[text.rfind(')').unwrap() + 2..].split(' ').collect();
    format!("{}:{}", f[2], f[19])
}

fn state_for(pid: i32, identity: Option<&str>, mode: &str) -> Value {
    json!({"pid": pid, "identity": identity, "started_at": "", "launch_mode": mode, "socket": ""})
}

fn session_of(pid: i32) -> i32 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let f: Vec<&str> = text[text.rfind(')').unwrap() + 2..].split(' ').collect();
    f[3].parse().expect("sid")
}

// ----- state, identity, start/stop ------------------------------------------

#[test]
fn separate_homes_are_separate_instances() {
    // G1
    let a = Daemon::start();
    let b = Daemon::start();
    assert_ne!(a.socket(), b.socket());
    for d in [&a, &b] {
        let state = read_json(&d.home.path().join("run/gateway.json")).expect("state");
        assert_eq!(state["pid"].as_u64(), Some(u64::from(d.pid())));
        assert_eq!(
            d.ok("status", json!({}))["pid"].as_u64(),
            Some(u64::from(d.pid()))
        );
    }
}

#[test]
fn start_runs_a_background_daemon_in_its_own_session_and_stop_ends_it() {
    // G2, G7, G9
    let home = Home::new();
    let out = home.cli(&["start", "--json"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(json_out(&out)["status"], "started");
    let state = home.gateway().expect("state");
    let pid = state["pid"].as_i64().unwrap() as i32;
    assert_eq!(state["launch_mode"], "background");
    assert_eq!(state["identity"], identity_of(pid));
    // Its keeper (docs/survival.md) leads a new session, and the daemon runs in it.
    let keeper = state["keeper_pid"].as_i64().expect("keeper_pid") as i32;
    assert_eq!(state["keeper_identity"], identity_of(keeper));
    assert_eq!(session_of(keeper), keeper, "runs in a new session");
    assert_eq!(
        session_of(pid),
        keeper,
        "the daemon runs in its keeper's session"
    );
    assert!(home.path().join("state/procd.log").exists());
    let status = json_out(&home.cli(&["status", "--json"]));
    assert_eq!(status["lifetime"], "explicit");
    assert_eq!(status["launch_mode"], "background");

    // A stop that slept out its timeout would outlast the test runner's
    // limit (180 s) and fail the test: no clock is read here.
    let out = home.cli(&["stop", "--timeout", "3600"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains(&format!("procd stopped (pid {pid})")));
    assert!(!alive(pid));
    assert!(!alive(keeper), "the keeper ended with its daemon");
    assert!(home.gateway().is_none(), "state removed");
    let again = home.cli(&["stop"]);
    assert_eq!(again.status.code(), Some(0));
    assert!(stdout(&again).contains("not running"));
}

#[test]
fn a_foreground_daemon_is_discoverable_and_stops_cleanly() {
    // G3, G7
    let mut d = Daemon::start();
    let status = json_out(&d.cli(&["status", "--json"]));
    assert_eq!(status["pid"].as_u64(), Some(u64::from(d.pid())));
    assert_eq!(status["launch_mode"], "foreground");
    assert_eq!(status["lifetime"], "explicit");
    assert_eq!(status["reason"], "running");
    let out = d.cli(&["stop"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        d.wait_exit_code(),
        Some(0),
        "it shut down cleanly on SIGTERM"
    );
    assert!(!d.home.path().join("run/gateway.json").exists());
    assert_eq!(d.cli(&["status"]).status.code(), Some(3));
}

#[test]
fn an_explicit_daemon_clears_a_stale_on_demand_lifetime() {
    // G4
    let home = short_tempdir();
    std::fs::create_dir_all(home.path().join("run")).unwrap();
    std::fs::write(
        home.path().join("run/gateway.clients.json"),
        json!({"auto_stop": true, "clients": {}, "stopping": true}).to_string(),
    )
    .unwrap();
    let d = Daemon::in_home(home, "");
    assert_eq!(
        json_out(&d.cli(&["status", "--json"]))["lifetime"],
        "explicit"
    );
    let leases = read_json(&d.home.path().join("run/gateway.clients.json"));
    let cleared = leases
        .as_ref()
        .is_none_or(|l| l["auto_stop"] != true && l.get("stopping").is_none());
    assert!(cleared, "{leases:?}");
}

#[test]
fn a_daemon_leaves_a_replacement_state_alone() {
    // G5
    let mut d = Daemon::start();
    let stand = Stand::sleep();
    let replacement = state_for(stand.pid(), Some(&identity_of(stand.pid())), "foreground");
    std::fs::write(
        d.home.path().join("run/gateway.json"),
        replacement.to_string(),
    )
    .unwrap();
    assert_eq!(d.stop(), Some(0));
    let kept = read_json(&d.home.path().join("run/gateway.json")).expect("kept");
    assert_eq!(kept, replacement);
}

#[test]
fn a_failed_start_up_leaves_no_state() {
    // G6: the logs directory cannot be created (a file is in the way).
    let home = Home::new();
    std::fs::create_dir_all(home.path().join("state")).unwrap();
    std::fs::write(home.path().join("state/logs"), "in the way").unwrap();
    let out = home.cli(&["daemon"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(home.gateway().is_none());
    assert!(!home.path().join("run/procd.sock").exists());
    assert!(
        !instance_cgroup(home.path()).exists(),
        "its cgroup tree is left"
    );
}

#[test]
fn concurrent_starts_create_exactly_one_daemon() {
    // G10
    let home = Home::new();
    let a = home
        .cmd(&["start", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let b = home
        .cmd(&["start", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    let statuses: Vec<String> = outs
        .iter()
        .map(|o| {
            assert!(o.status.success(), "{o:?}");
            json_out(o)["status"].as_str().unwrap().to_string()
        })
        .collect();
    let mut sorted = statuses.clone();
    sorted.sort();
    assert_eq!(sorted, ["already_running", "started"]);
    let pids: Vec<i64> = outs
        .iter()
        .map(|o| json_out(o)["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(pids[0], pids[1], "both name the one daemon");
}

#[test]
fn restart_needs_a_running_background_daemon() {
    // G11
    let home = Home::new();
    let out = home.cli(&["restart"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not running"));
    assert!(home.gateway().is_none(), "nothing was started");

    let d = Daemon::start();
    let out = d.cli(&["restart"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("foreground"), "{out:?}");
    assert_eq!(
        d.ok("status", json!({}))["pid"].as_u64(),
        Some(u64::from(d.pid()))
    );

    assert!(home.cli(&["start"]).status.success());
    let first = home.daemon_pid();
    let out = home.cli(&["restart", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let second = home.daemon_pid();
    assert_ne!(first, second);
    assert!(!alive(first));
    assert!(alive(second));
}

#[test]
fn stale_and_zombie_state_is_cleared_by_status() {
    // G20, G21
    let home = Home::new();
    home.write_gateway(state_for(999_999, Some("999999:1"), "foreground"));
    let out = home.cli(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(json_out(&out)["reason"], "stale_state");
    assert!(home.gateway().is_none(), "stale state deleted");

    // A live pid whose identity changed (recycled).
    let stand = Stand::sleep();
    let wrong = format!("{}9", identity_of(stand.pid()));
    home.write_gateway(state_for(stand.pid(), Some(&wrong), "foreground"));
    assert_eq!(home.cli(&["status"]).status.code(), Some(3));
    assert!(home.gateway().is_none());

    // A zombie: exited, not yet reaped by its parent (us).
    let mut zombie = Command::new("true").spawn().unwrap();
    let zpid = zombie.id() as i32;
    wait_until("the child is a zombie", || !alive(zpid));
    home.write_gateway(state_for(zpid, Some(&format!("{zpid}:1")), "foreground"));
    assert_eq!(home.cli(&["status"]).status.code(), Some(3));
    assert!(home.gateway().is_none());
    zombie.wait().unwrap();

    // Alive but no identity recorded: assumed running, state kept.
    home.write_gateway(state_for(stand.pid(), None, "foreground"));
    let out = home.cli(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json_out(&out)["reason"], "identity_unavailable");
    assert!(home.gateway().is_some());
    std::fs::remove_file(home.path().join("run/gateway.json")).unwrap();
}

#[test]
fn minimal_and_legacy_state_records_are_read() {
    // docs/operations.md: only pid is required; identity may be an integer pgid,
    // command an argv.
    let home = Home::new();
    let stand = Stand::sleep();
    let pgid = identity_of(stand.pid())
        .split(':')
        .next()
        .unwrap()
        .to_string();
    home.write_gateway(json!({
        "pid": stand.pid(),
        "identity": pgid.parse::<i64>().unwrap(),
        "launch_mode": "background",
        "command": ["procd", "daemon"],
    }));
    let out = home.cli(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(json_out(&out)["pid"], stand.pid());
    // A minimal record of a dead daemon is stale and cleared.
    home.write_gateway(json!({"pid": 999_999}));
    let out = home.cli(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(json_out(&out)["reason"], "stale_state");
    assert!(home.gateway().is_none());
}

#[test]
fn a_corrupt_state_file_is_not_taken_for_no_daemon() {
    let d = Daemon::start();
    let state = d.home.path().join("run/gateway.json");
    std::fs::write(&state, "\u{0}garbage").unwrap();
    let out = d.cli(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "a daemon answers: {out:?}");
    assert_eq!(json_out(&out)["pid"].as_u64(), Some(u64::from(d.pid())));
    // A second daemon does not take over: it finds the first one serving.
    let second = Command::new(BIN)
        .args(["daemon", "--home"])
        .arg(d.home.path())
        .env("HOME", d.home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(17), "{second:?}");
    assert_eq!(
        std::fs::read(&state).unwrap(),
        b"\0garbage",
        "left as it was"
    );
}

#[test]
fn stop_refuses_to_signal_an_unverifiable_pid() {
    // G22
    let home = Home::new();
    let stand = Stand::sleep();
    home.write_gateway(state_for(stand.pid(), None, "background"));
    let out = home.cli(&["stop", "--timeout", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("identity"), "{out:?}");
    assert!(alive(stand.pid()), "it was not signalled");
    assert!(home.gateway().is_some());
    std::fs::remove_file(home.path().join("run/gateway.json")).unwrap();
}

#[test]
fn a_legacy_pgid_only_identity_still_matches() {
    // G23
    let home = Home::new();
    assert!(home.cli(&["start"]).status.success());
    let mut state = home.gateway().unwrap();
    let full = state["identity"].as_str().unwrap().to_string();
    let pgid = full.split(':').next().unwrap().to_string();
    assert_eq!(full, identity_of(home.daemon_pid()));
    state["identity"] = json!(pgid);
    home.write_gateway(state);
    assert_eq!(home.cli(&["status"]).status.code(), Some(0));
    let pid = home.daemon_pid();
    assert!(home.cli(&["stop"]).status.success());
    assert!(!alive(pid));
}

#[test]
fn a_stop_that_times_out_keeps_the_state() {
    // G24. Kernel threads ignore every signal, SIGKILL included: kthreadd
    // (pid 2) is a real process that a stop cannot end. Nothing happens
    // to it; the point is procd's honest report.
    if machine_lacks("PROCD_TEST_NO_KTHREAD", "a visible kernel thread (pid 2)") {
        return;
    }
    let identity = std::fs::read_to_string("/proc/2/stat")
        .ok()
        .map(|_| identity_of(2))
        .expect("no kernel thread is visible here (a PID namespace?); set PROCD_TEST_NO_KTHREAD=1 where none can be");
    let home = Home::new();
    home.write_gateway(state_for(2, Some(&identity), "background"));
    let out = home.cli(&["stop", "--timeout", "0.2", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_out(&out)["reason"], "stop_timeout");
    assert!(home.gateway().is_some(), "state kept");
    std::fs::remove_file(home.path().join("run/gateway.json")).unwrap();
}

#[test]
fn a_process_that_ignores_sigterm_is_stopped_with_sigkill() {
    // G24 (the exit right at the deadline counts), G25
    let home = Home::new();
    assert!(home.cli(&["start"]).status.success());
    let pid = home.daemon_pid();
    // Make the daemon deaf to SIGTERM: stop it (SIGSTOP) so the TERM stays
    // pending; only SIGKILL ends it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let out = home.cli(&["stop", "--timeout", "0.3"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!alive(pid));
    assert!(
        home.gateway().is_none(),
        "the stopper released the dead daemon's state"
    );
    assert!(
        !instance_cgroup(home.path()).exists(),
        "the stopper removed the dead daemon's (empty) cgroup tree"
    );
}

// ----- leases and the on-demand lifetime -------------------------------------

fn lease(home: &Home, pid: i32) -> String {
    let out = home.cli(&["lease", "acquire", "--pid", &pid.to_string(), "--json"]);
    assert!(out.status.success(), "{out:?}");
    json_out(&out)["token"].as_str().unwrap().to_string()
}

/// Starts an on-demand daemon the way a client does (`procd spawn`).
fn start_on_demand(home: &Home) -> (i32, String) {
    let out = home.cli(&["spawn", "--json", "--", "true"]);
    assert!(out.status.success(), "{out:?}");
    let id = json_out(&out)["session_id"].as_str().unwrap().to_string();
    (home.daemon_pid(), id)
}

#[test]
fn the_on_demand_lifetime_is_recorded_before_the_daemon_starts() {
    // G15: the daemon reads the leases once before it serves; with a long
    // monitor interval it would report "explicit" if the mark came later.
    let home = Home::with_config("monitor_interval_s = 600");
    let holder = std::process::id() as i32;
    let token = lease(&home, holder);
    let (pid, _) = start_on_demand(&home);
    let status = json_out(&home.cli(&["status", "--json"]));
    assert_eq!(status["lifetime"], "on_demand");
    assert_eq!(home.leases().unwrap()["auto_stop"], true);
    let out = home.cli(&["lease", "release", &token, "--json"]);
    assert_eq!(json_out(&out)["status"], "stopped");
    assert!(!alive(pid));
}

#[test]
fn the_last_clients_release_stops_an_on_demand_daemon() {
    // G12
    let home = Home::new();
    let me = std::process::id() as i32;
    let first = lease(&home, me);
    let second = lease(&home, me);
    let (pid, _) = start_on_demand(&home);
    let out = home.cli(&["lease", "release", &first, "--json"]);
    assert_eq!(json_out(&out)["status"], "released");
    assert!(alive(pid), "another client remains");
    let out = home.cli(&["lease", "release", &second, "--json"]);
    assert_eq!(json_out(&out)["status"], "stopped");
    assert!(!alive(pid));
    assert!(home.gateway().is_none());
    assert!(home.leases().is_none(), "nothing left to record");
}

#[test]
fn the_last_client_can_leave_the_stop_to_the_monitor() {
    // G12 (deferred)
    let home = Home::with_config("monitor_interval_s = 0.1\non_demand_idle_s = 0");
    let token = lease(&home, std::process::id() as i32);
    let (pid, _) = start_on_demand(&home);
    let out = home.cli(&["lease", "release", &token, "--no-wait", "--json"]);
    assert_eq!(json_out(&out)["status"], "left_to_monitor");
    wait_until("the monitor stops the idle daemon", || !alive(pid));
    assert!(home.gateway().is_none());
}

#[test]
fn an_explicit_daemon_survives_its_last_client() {
    // G16: promoting an on-demand daemon with `procd start`.
    let home = Home::with_config("monitor_interval_s = 0.1");
    let token = lease(&home, std::process::id() as i32);
    let (pid, _) = start_on_demand(&home);
    let out = home.cli(&["start", "--json"]);
    assert_eq!(json_out(&out)["promoted"], true);
    let out = home.cli(&["lease", "release", &token, "--json"]);
    assert_eq!(json_out(&out)["status"], "released");
    assert_eq!(
        json_out(&home.cli(&["status", "--json"]))["lifetime"],
        "explicit"
    );
    // It outlives several monitor ticks (its own uptime says how long).
    let released_at = json_out(&home.cli(&["status", "--json"]))["uptime_seconds"]
        .as_f64()
        .unwrap_or(0.0);
    wait_until("the daemon has run six ticks since the release", || {
        assert!(
            alive(pid),
            "an explicit daemon stopped with its last client"
        );
        let status = json_out(&home.cli(&["status", "--json"]));
        status["uptime_seconds"].as_f64().unwrap_or(0.0) > released_at + 0.6
    });
}

#[test]
fn a_failed_last_client_stop_stays_retryable() {
    // G17 (the stop refuses: the recorded identity cannot be verified)
    let home = Home::new();
    let stand = Stand::sleep();
    home.write_gateway(state_for(stand.pid(), None, "background"));
    let me = std::process::id() as i32;
    home.write_leases(json!({"auto_stop": true, "clients": {
        "tok": {"pid": me, "identity": identity_of(me), "kind": "test"}}}));
    let out = home.cli(&["lease", "release", "tok", "--json"]);
    assert_eq!(json_out(&out)["status"], "stop_failed");
    assert_eq!(
        home.leases().unwrap(),
        json!({"auto_stop": true, "clients": {}})
    );
    assert!(alive(stand.pid()));
    std::fs::remove_file(home.path().join("run/gateway.json")).unwrap();
}

#[test]
fn dead_and_recycled_lease_holders_are_pruned() {
    // G18
    let home = Home::new();
    let stand = Stand::sleep();
    let me = std::process::id() as i32;
    home.write_leases(json!({"auto_stop": true, "clients": {
        "dead": {"pid": 999_999, "identity": "999999:1", "kind": "t"},
        "recycled": {"pid": stand.pid(), "identity": format!("{}9", identity_of(stand.pid())), "kind": "t"},
        "live": {"pid": me, "identity": identity_of(me), "kind": "t"},
        "unknown-identity": {"pid": stand.pid(), "identity": null, "kind": "t"},
    }}));
    let snap = json_out(&home.cli(&["lease", "snapshot", "--json"]));
    let mut tokens: Vec<String> = snap["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().into())
        .collect();
    tokens.sort();
    assert_eq!(tokens, ["live", "unknown-identity"]);
    let file = home.leases().unwrap();
    assert!(file["clients"].get("dead").is_none() && file["clients"].get("recycled").is_none());
}

#[test]
fn an_explicit_stop_clears_the_leases() {
    // G14
    let home = Home::new();
    assert!(home.cli(&["start"]).status.success());
    let old = lease(&home, std::process::id() as i32);
    assert!(home.cli(&["stop"]).status.success());
    assert!(home
        .leases()
        .is_none_or(|l| l["clients"].get(&old).is_none()));
    let new = lease(&home, std::process::id() as i32);
    let clients = home.leases().unwrap()["clients"].clone();
    assert_eq!(
        clients.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec![&new]
    );
}

#[test]
fn a_lease_whose_holder_dies_ends_its_sessions() {
    // docs/operations.md: owned, non-persistent sessions end with their owner.
    let d = Daemon::with_config("monitor_interval_s = 0.1");
    let holder = Stand::sleep();
    let out = d.cli(&["lease", "acquire", "--pid", &holder.pid().to_string()]);
    let token = stdout(&out).trim().to_string();
    let owned = d.spawn_with(json!({"command": "sleep 300", "owner": token}));
    let kept = d.spawn_with(json!({"command": "sleep 300", "owner": token, "persist": true}));
    let unowned = d.spawn("sleep 300");
    let (code, msg) = d.err("spawn", json!({"command": "true", "owner": "lease_nope"}));
    assert_eq!(code, -32602);
    assert!(msg.contains("unknown owner"), "{msg}");
    drop(holder); // the client process dies
    wait_until("the owned session is ended", || {
        d.ok("poll", json!({"session_id": owned}))["status"] == "exited"
    });
    let p = d.ok("poll", json!({"session_id": owned}));
    assert_eq!(p["termination_source"], "owner_released");
    assert_eq!(
        d.ok("poll", json!({"session_id": kept}))["status"],
        "running"
    );
    assert_eq!(
        d.ok("poll", json!({"session_id": unowned}))["status"],
        "running"
    );
    assert_eq!(json_out(&d.cli(&["status", "--json"]))["clients"], 0);
    d.ok("kill_all", json!({}));
}

#[test]
fn the_monitor_stops_an_orphaned_on_demand_daemon() {
    // G19: the lease holder dies; nothing runs; the daemon stops itself.
    let home = Home::with_config("monitor_interval_s = 0.1\non_demand_idle_s = 0");
    let holder = Stand::sleep();
    lease(&home, holder.pid());
    let (pid, _) = start_on_demand(&home);
    assert!(alive(pid));
    drop(holder);
    wait_until("the orphaned daemon stops", || !alive(pid));
    assert!(home.gateway().is_none());
    assert!(
        home.leases().is_none_or(|l| l.get("stopping").is_none()),
        "the mark is lifted on exit"
    );
}

/// Whether `holder` has a pidfd open on `target` (fdinfo's "Pid:" line).
fn holds_pidfd_of(holder: i32, target: i32) -> bool {
    let fds = fd_links(&format!("/proc/{holder}/fd"));
    fds.iter().any(|(fd, link)| {
        link == "anon_inode:[pidfd]"
            && std::fs::read_to_string(format!("/proc/{holder}/fdinfo/{fd}")).is_ok_and(|info| {
                info.lines()
                    .any(|l| l.split_whitespace().eq(["Pid:", &target.to_string()]))
            })
    })
}

#[test]
fn a_client_arriving_while_the_daemon_stops_waits_for_it() {
    // G13, G19: "stopping" is set; a new lease waits until the old daemon
    // has exited, and survives it.
    let home = Home::new();
    assert!(home.cli(&["start"]).status.success());
    let pid = home.daemon_pid();
    // The mark a monitor sets when it decides to stop (auto_stop itself is
    // left off here, so this daemon's own monitor does not act on it).
    home.write_leases(json!({"auto_stop": false, "clients": {}, "stopping": true}));
    let waiting = home
        .cmd(&[
            "lease",
            "acquire",
            "--pid",
            &std::process::id().to_string(),
            "--json",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let waiter = waiting.id() as i32;
    // It waits on the old daemon: it holds a pidfd of that daemon (that is
    // how it learns of the exit), and has not finished.
    wait_until("the acquire watches the stopping daemon's pidfd", || {
        holds_pidfd_of(waiter, pid)
    });
    assert!(alive(waiter), "the acquire waits for the stopping daemon");
    assert!(alive(pid));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = waiting.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        !alive(pid),
        "the acquire returned only after the old daemon exited"
    );
    let token = json_out(&out)["token"].as_str().unwrap().to_string();
    let file = home.leases().unwrap();
    assert!(file.get("stopping").is_none());
    assert_eq!(
        file["clients"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        vec![&token]
    );
}

// ----- systemd ------------------------------------------------------------------

#[test]
fn socket_activation_and_readiness_notification() {
    let home = Home::new();
    let notify_path: PathBuf = home.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("notify socket");
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let notify_env = notify_path.display().to_string();
    let mut daemon = Activated::start(home.path(), &[("NOTIFY_SOCKET", notify_env.as_str())]);
    // The keeper's messages other than its copies in the fd store (those
    // it sends as sessions come and go; their names are collected).
    let mut stored = Vec::new();
    let mut next_state = || loop {
        let mut buf = [0u8; 512];
        let n = notify.recv(&mut buf).expect("a notification arrives");
        // One assignment per line, as sd_notify(3) sends them.
        let sent = String::from_utf8_lossy(&buf[..n]).to_string();
        if !sent.starts_with("FDSTORE") {
            return (sent, stored.clone());
        }
        stored.extend(
            sent.lines()
                .filter_map(|l| l.strip_prefix("FDNAME="))
                .map(String::from),
        );
    };
    let (sent, _) = next_state();
    assert_eq!(sent.lines().collect::<Vec<_>>(), ["READY=1"], "{sent:?}");

    // The activated process is the keeper (the unit's main process, which
    // told READY=1); the daemon serves below it.
    let mut c = daemon.connect();
    let status = c.call("status", json!({}));
    let served_by = daemon_below(daemon.child.id() as i32).expect("a daemon below the keeper");
    assert_eq!(status["result"]["pid"].as_i64(), Some(i64::from(served_by)));
    let id = c.call(
        "spawn",
        json!({"command": "echo $LISTEN_FDS-$NOTIFY_SOCKET-"}),
    )["result"]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = c.call("wait", json!({"session_id": id, "timeout_s": 20}));
    assert_eq!(
        out["result"]["output"], "--\n",
        "children do not inherit the systemd variables"
    );

    // A daemon that dies comes back on systemd's socket with its sessions
    // (docs/survival.md under systemd too).
    let sleeper = c.call("spawn", json!({"command": "sleep 300"}))["result"]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(served_by),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL");
    wait_until("the killed daemon is dead", || !alive(served_by));
    let mut c = daemon.connect();
    let status = c.call("status", json!({}));
    assert_ne!(status["result"]["pid"].as_i64(), Some(i64::from(served_by)));
    let poll = c.call("poll", json!({"session_id": sleeper}));
    assert_eq!(poll["result"]["status"], "running", "{poll}");

    assert_eq!(daemon.stop(), Some(0));
    let (sent, stored) = next_state();
    assert_eq!(sent.lines().collect::<Vec<_>>(), ["STOPPING=1"], "{sent:?}");
    // Each session's pipe ends and root pidfd went to the fd store too.
    let pid = poll["result"]["pid"].as_i64().expect("pid");
    for part in [".output", ".stdin", &format!(".process.{pid}.")] {
        let name = format!("session.{sleeper}{part}");
        assert!(
            stored.iter().any(|n| n.starts_with(&name)),
            "{name}: {stored:?}"
        );
    }
    assert!(
        daemon.socket.exists(),
        "systemd's socket path is left in place"
    );
}

#[test]
fn sighup_does_not_end_the_daemon() {
    // docs/SECURITY.md: a closing terminal must not take the daemon with it.
    let d = Daemon::start();
    let id = d.spawn("sleep 300");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
    let log = d.home.path().join("daemon.err");
    wait_until("the daemon notes the SIGHUP", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("SIGHUP ignored"))
    });
    assert!(alive(d.pid() as i32));
    assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "running");
}

#[test]
fn an_on_demand_daemon_that_stops_itself_leaves_no_leftover() {
    // docs/SECURITY.md: the auto-stop ends what exited sessions left behind, also
    // a process that escaped the group and dropped the marker.
    let home = Home::with_config("monitor_interval_s = 0.1\non_demand_idle_s = 0");
    let mut strays = Strays::default();
    let holder = Stand::sleep();
    lease(&home, holder.pid());
    let out = home.cli(&[
        "spawn",
        "--json",
        "--",
        "setsid -f env -i sleep 2997; sleep 2998 & echo x",
    ]);
    assert!(out.status.success(), "{out:?}");
    let pid = home.daemon_pid();
    let mut left = Vec::new();
    wait_until("both leftovers run", || {
        left = [["sleep", "2997"], ["sleep", "2998"]]
            .iter()
            .flat_map(|argv| strays.find(argv))
            .collect();
        left.len() == 2
    });
    drop(holder);
    wait_until("the orphaned daemon stops", || !alive(pid));
    for p in left {
        assert!(!alive(p), "{p} outlived the on-demand daemon");
    }
}

#[test]
fn finished_output_stays_readable_for_a_person_at_the_terminal() {
    // docs/operations.md: an on-demand daemon lingers `on_demand_idle_s` after its
    // last client and session, then stops; after that `procd logs` reads
    // the finished session's output from disk, redacted, and says so.
    let home = Home::with_config("monitor_interval_s = 0.1\non_demand_idle_s = 3");
    let out = home.cli(&[
        "spawn",
        "--json",
        "--",
        "echo built ok; echo token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    ]);
    assert!(out.status.success(), "{out:?}");
    let id = json_out(&out)["session_id"].as_str().unwrap().to_string();
    let pid = home.daemon_pid();
    let waited = home.cli(&["wait", &id]);
    assert_eq!(waited.status.code(), Some(0), "{waited:?}");
    // Within the idle period the daemon itself answers.
    let live = json_out(&home.cli(&["logs", "--json", &id]));
    assert!(live.get("daemon").is_none(), "served by the daemon: {live}");
    assert!(live["output"].as_str().unwrap().contains("built ok"));
    wait_until("the idle on-demand daemon stops by itself", || !alive(pid));
    // From disk, by a unique prefix, redacted like the daemon does.
    let prefix = &id["proc_".len()..id.len() - 4];
    let offline = home.cli(&["logs", prefix]);
    assert!(offline.status.success(), "{offline:?}");
    let text = stdout(&offline);
    assert!(text.contains("built ok"), "{text}");
    assert!(
        !text.contains("ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
        "redacted: {text}"
    );
    assert!(
        stderr(&offline).contains("procd is not running"),
        "{offline:?}"
    );
    let json = json_out(&home.cli(&["logs", "--json", &id]));
    assert_eq!(json["daemon"], "not running");
    assert!(home.gateway().is_none(), "nothing was started");
    let missing = home.cli(&["logs", "proc_0123456789ab"]);
    assert_eq!(missing.status.code(), Some(1));
}

#[test]
fn the_lease_file_is_read_leniently_and_kept_aside_when_corrupt() {
    let home = Home::new();
    let holder = Stand::sleep();
    let pgid: i64 = identity_of(holder.pid())
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // A minimal entry: no kind, a legacy integer identity, no auto_stop.
    home.write_leases(json!({"clients": {"lease_old": {"pid": holder.pid(), "identity": pgid}}}));
    assert!(home.cli(&["start"]).status.success());
    let status = json_out(&home.cli(&["status", "--json"]));
    assert_eq!(status["clients"], 1, "the old lease is live: {status}");
    // A file that is not a lease file is moved aside, not overwritten.
    std::fs::write(
        home.path().join("run/gateway.clients.json"),
        "{\"clients\": [oops",
    )
    .unwrap();
    let token = lease(&home, std::process::id() as i32);
    assert!(token.starts_with("lease_"));
    let aside: Vec<_> = std::fs::read_dir(home.path().join("run"))
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("gateway.clients.json.corrupt-")
        })
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(
        std::fs::read_to_string(aside[0].path()).unwrap(),
        "{\"clients\": [oops"
    );
    assert!(home.cli(&["stop"]).status.success());
}

#[test]
fn a_running_session_keeps_an_on_demand_daemon_up_without_any_lease() {
    // docs/operations.md: no client, but a session runs: the daemon stays past
    // `on_demand_idle_s` (its uptime shows it outlived several idle
    // periods), and stops once the session is gone.
    let home = Home::with_config("monitor_interval_s = 0.1\non_demand_idle_s = 0.2");
    let out = home.cli(&["spawn", "--json", "--", "sleep 300"]);
    assert!(out.status.success(), "{out:?}");
    let id = json_out(&out)["session_id"].as_str().unwrap().to_string();
    let pid = home.daemon_pid();
    // The spawn's lease is gone: no client is left.
    wait_until("no client holds a lease", || {
        home.leases()
            .and_then(|l| l["clients"].as_object().map(|c| c.is_empty()))
            .unwrap_or(true)
    });
    wait_until(
        "the daemon has lived five idle periods past the spawn",
        || {
            let status = json_out(&home.cli(&["status", "--json"]));
            status["uptime_seconds"].as_f64().unwrap_or(0.0) > 1.2
        },
    );
    assert!(alive(pid), "a running session keeps it");
    assert!(home.cli(&["kill", &id]).status.success());
    wait_until("the idle daemon stops once nothing runs", || !alive(pid));
}
