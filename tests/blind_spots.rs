//! Behaviour the spec names that no other test covered (the evidence
//! issue's list): ambiguous id prefixes, `wait` timeouts and `max_wait_s`,
//! bad configuration naming its key, the CLI's spawn flags, a released
//! lease ending its sessions, redaction of subscription items and yields,
//! orphans reaped, `final_drain_ms`, `dropped` and unsubscribing, every
//! credential suffix and `env_blocklist`, `kill_grace_s`, `procd events`.
//! Each against a real daemon.

use crate::common::*;
use serde_json::{json, Value};
use std::process::{Command, Stdio};

#[test]
fn an_ambiguous_id_prefix_is_not_found_and_says_so() {
    // Random ids rarely share 4 hex digits, so two that do come from a
    // checkpoint (they are listed as lost sessions after recovery).
    let home = short_tempdir();
    let state = home.path().join("state");
    std::fs::create_dir_all(state.join("logs")).unwrap();
    let entry = |id: &str| {
        json!({"session_id": id, "command": "true", "pid": 999_999, "start_time": 1,
            "identity": "999999:1", "pgid": 999_999, "cwd": "/tmp",
            "started_at": "2026-11-29T12:00:00.000Z", "log_path": "/nonexistent"})
    };
    std::fs::write(
        state.join("procs.json"),
        json!([entry("proc_abcd00000001"), entry("proc_abcd00000002")]).to_string(),
    )
    .unwrap();
    let d = Daemon::in_home(home, "");
    let (code, msg) = d.err("poll", json!({"session_id": "abcd"}));
    assert_eq!(code, -32001, "{msg}");
    assert!(msg.contains("ambiguous"), "says why: {msg}");
    let p = d.ok("poll", json!({"session_id": "proc_abcd00000002"}));
    assert_eq!(p["completion_reason"], "lost");
    let p = d.ok("poll", json!({"session_id": "abcd00000001"}));
    assert_eq!(p["session_id"], "proc_abcd00000001");
}

#[test]
fn wait_times_out_with_the_running_shape_and_is_capped_by_max_wait_s() {
    let d = Daemon::with_config("max_wait_s = 0.3");
    let id = d.spawn("sleep 300");
    // Asked for 100 s, capped at 0.3 s: it answers, still running.
    let w = d.ok("wait", json!({"session_id": id, "timeout_s": 100}));
    assert_eq!(w["status"], "timeout", "{w}");
    assert_eq!(w["process_running"], true, "{w}");
    let (code, msg) = d.err("wait", json!({"session_id": id, "timeout_s": 0}));
    assert_eq!(code, -32602, "{msg}");
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn a_bad_configuration_value_makes_the_daemon_exit_1_naming_the_key() {
    for (config, key) in [
        ("max_sessions = \"many\"", "max_sessions"),
        ("kill_grace_s = 1e20", "kill_grace_s"),
        ("monitor_interval_s = 0", "monitor_interval_s"),
        ("max_response_bytes = 0", "max_response_bytes"),
        ("no_such_key = 1", "no_such_key"),
    ] {
        let home = short_tempdir();
        std::fs::write(home.path().join("config.toml"), config).unwrap();
        let out = Command::new(BIN)
            .args(["daemon", "--home"])
            .arg(home.path())
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .output()
            .expect("procd daemon");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{config}: {out:?}");
        assert!(
            err.contains(key),
            "{config}: the message names {key}: {err}"
        );
        assert!(!home.path().join("run/procd.sock").exists());
    }
}

/// A `PROCD_LOG` that is not a log filter is said on stderr (the daemon
/// logs at info instead), not silently replaced. A bad config makes the
/// daemon exit at once after it has set its log up.
#[test]
fn a_log_filter_that_does_not_parse_is_said() {
    let home = short_tempdir();
    std::fs::write(home.path().join("config.toml"), "no_such_key = 1").unwrap();
    let out = Command::new(BIN)
        .args(["daemon", "--home"])
        .arg(home.path())
        .env("HOME", home.path())
        .env("PROCD_LOG", "[[[{{")
        .stdin(Stdio::null())
        .output()
        .expect("procd daemon");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PROCD_LOG is not a log filter; logging at info"),
        "{err}"
    );
}

#[test]
fn the_cli_spawn_flags_reach_the_session() {
    let d = Daemon::start();
    let out = d.cli(&[
        "spawn",
        "--json",
        "--env",
        "GREETING=hi",
        "--task",
        "t-cli",
        "--notify",
        "--watch",
        "READY",
        "--",
        "echo $GREETING; echo READY now",
    ]);
    assert!(out.status.success(), "{out:?}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = r["session_id"].as_str().unwrap().to_string();
    d.wait_exit(&id);
    assert!(d.read_all(&id).starts_with("hi\nREADY now\n"));
    let listed = d.ok("list", json!({"task_id": "t-cli"}))["processes"].clone();
    let me = &listed.as_array().unwrap()[0];
    assert_eq!(me["session_id"], id.as_str());
    assert_eq!(me["notify_on_complete"], true);
    assert_eq!(me["watch_patterns"], json!(["READY"]));
    let events = d.ok("drain_notifications", json!({}))["events"].clone();
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"watch_match") && kinds.contains(&"completion"),
        "{kinds:?}"
    );
    let pty = d.cli(&[
        "spawn",
        "--json",
        "--pty",
        "--",
        "test -t 0 && echo on-a-tty",
    ]);
    let id = serde_json::from_slice::<Value>(&pty.stdout).unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    d.wait_exit(&id);
    assert!(d.read_all(&id).contains("on-a-tty"));
}

#[test]
fn releasing_a_lease_ends_its_owners_sessions_but_not_persistent_ones() {
    let d = Daemon::with_config("monitor_interval_s = 0.1");
    let holder = Stand::sleep();
    let token = d.lease(holder.pid());
    let owned = d.spawn_with(json!({"command": "sleep 300", "owner": token}));
    let kept = d.spawn_with(json!({"command": "sleep 300", "owner": token, "persist": true}));
    let out = d.cli(&["lease", "release", &token, "--json"]);
    assert!(out.status.success(), "{out:?}");
    let w = d.wait_exit(&owned);
    assert_eq!(w["termination_source"], "owner_released", "{w}");
    assert_eq!(
        d.ok("poll", json!({"session_id": kept}))["status"],
        "running"
    );
    d.ok("kill", json!({"session_id": kept}));
}

/// An agent that goes leaves nothing running, not even what a command of
/// its that already finished forked off (`setsid cmd &`): the leftovers
/// of its exited sessions are ended with its running ones, once.
#[test]
fn releasing_a_lease_ends_what_its_finished_sessions_left_behind() {
    let d = Daemon::with_config("monitor_interval_s = 0.1");
    let holder = Stand::sleep();
    let token = d.lease(holder.pid());
    let done = d.spawn_with(
        json!({"command": "setsid sleep 300 >/dev/null 2>&1 & echo $!", "owner": token}),
    );
    let kept = d.spawn_with(json!({"command": "setsid sleep 300 >/dev/null 2>&1 & echo $!", "owner": token, "persist": true}));
    let forked = |id: &str| -> i32 {
        d.wait_exit(id);
        d.read_all(id).trim().parse().expect("the forked pid")
    };
    let (gone, stays) = (forked(&done), forked(&kept));
    assert!(
        alive(gone) && alive(stays),
        "the forks run on after their command"
    );
    let out = d.cli(&["lease", "release", &token, "--json"]);
    assert!(out.status.success(), "{out:?}");
    wait_until("the finished session's fork is ended", || !alive(gone));
    assert!(alive(stays), "a persistent session's fork was ended");
    d.ok("kill", json!({"session_id": kept}));
    wait_until("the kept fork is ended by kill", || !alive(stays));
}

#[test]
fn subscription_items_and_yielded_output_are_redacted() {
    let d = Daemon::start();
    let secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
    let r = d.ok("spawn", json!({"command": format!("echo token {secret}; sleep 0.2; echo token {secret}"), "yield_ms": 5000}));
    let yielded = r["output"].as_str().unwrap();
    assert!(
        yielded.contains("token ghp_ab") && !yielded.contains(secret),
        "{yielded}"
    );
    let id = r["session_id"].as_str().unwrap().to_string();
    let mut c = d.connect();
    c.send_raw(&json!({"jsonrpc": "2.0", "id": 1, "method": "subscribe_output", "params": {"session_id": id}}).to_string());
    let mut seen = String::new();
    loop {
        let msg = c.recv();
        if let Some(item) = msg["params"]["result"].as_object() {
            if item.get("exited").is_some() {
                break;
            }
            seen.push_str(item["data"].as_str().unwrap_or(""));
        }
    }
    assert!(seen.contains("token ghp_ab"), "{seen}");
    assert!(
        !seen.contains(secret),
        "a subscription item leaked the token: {seen}"
    );
}

#[test]
fn orphans_are_reaped_and_final_drain_ms_is_honoured() {
    // A grandchild that outlives its parent and then exits is reaped: no
    // zombie is left under the daemon.
    let d = Daemon::with_config("final_drain_ms = 600");
    let id = d.spawn("(sleep 0.2; exit 0) & echo parent-done");
    d.wait_exit(&id);
    wait_until("no zombie under the daemon", || {
        zombie_children(d.pid() as i32).is_empty()
    });
    // Output a descendant writes within final_drain_ms after the exit is
    // kept (the descendant holds the pipe open).
    let id = d.spawn("(sleep 0.1; echo late) & echo early");
    let w = d.wait_exit(&id);
    assert_eq!(w["exit_code"], 0);
    assert_eq!(
        d.read_all(&id),
        "early\nlate\n",
        "the drain kept the late line"
    );
}

#[test]
fn output_subscriptions_report_dropped_bytes_and_unsubscribing_ends_them() {
    // `dropped` on subscribe_output items (the log cap lost the head), and
    // unsubscribe_output / unsubscribe_events end their streams.
    let d = Daemon::with_config("max_log_bytes = 4096\nmemory_tail_bytes = 4096");
    let id = d.spawn("head -c 20000 /dev/zero | tr '\\0' x; echo; echo end; read more; echo \"after $more\"; sleep 300");
    d.read_until(&id, "end");
    let mut sub = d.connect();
    let r = sub.call("subscribe_output", json!({"session_id": id, "cursor": 0}));
    let sub_id = r["result"].clone();
    assert!(!sub_id.is_null(), "{r}");
    let item = loop {
        let v = sub.recv();
        if v["method"] == "output" {
            break v["params"]["result"].clone();
        }
    };
    assert!(item["dropped"].as_u64().unwrap() > 0, "{item}");
    assert!(item["cursor"].as_u64().unwrap() > 0, "{item}");
    let events = sub.call("subscribe_events", json!({}))["result"].clone();
    let r = sub.call("unsubscribe_output", json!([sub_id]));
    assert_eq!(r["result"], true, "{r}");
    let r = sub.call("unsubscribe_events", json!([events]));
    assert_eq!(r["result"], true, "{r}");
    // More output and a new session: nothing arrives on that connection
    // any more (the answer to a later request comes with nothing before it
    // but what was already in flight for the old subscription).
    d.ok("submit_stdin", json!({"session_id": id, "data": "x"}));
    d.read_until(&id, "after x");
    let other = d.spawn("true");
    d.wait_exit(&other);
    sub.send_raw(r#"{"jsonrpc":"2.0","id":99,"method":"status"}"#);
    loop {
        let v = sub.recv();
        if v["id"] == 99 {
            break;
        }
        let text = v.to_string();
        assert!(
            !text.contains("after x") && !text.contains(&other),
            "a notification after unsubscribing: {text}"
        );
    }
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn every_credential_suffix_and_the_configured_blocklist_stay_out_of_children() {
    let vars = [
        ("A_API_KEY", "k1"),
        ("B_APIKEY", "k2"),
        ("C_TOKEN", "k3"),
        ("D_SECRET", "k4"),
        ("E_SECRET_KEY", "k5"),
        ("F_PASSWORD", "k6"),
        ("G_PASSWD", "k7"),
        ("H_CREDENTIALS", "k8"),
        ("I_PRIVATE_KEY", "k9"),
        ("MY_INTERNAL_URL", "k10"),
        ("PLAIN_SETTING", "kept"),
    ];
    let d = Daemon::with_env("env_blocklist = [\"MY_INTERNAL_URL\"]", &vars);
    let r = d.ok("spawn", json!({"command": "env", "yield_ms": 20000}));
    let env = r["output"].as_str().unwrap();
    for (name, _) in &vars[..10] {
        assert!(
            !env.contains(&format!("{name}=")),
            "{name} reached the child"
        );
    }
    assert!(env.contains("PLAIN_SETTING=kept"), "{env}");
}

#[test]
fn kill_grace_s_from_the_configuration_is_the_default_grace() {
    // kill_grace_s = 0: no escalation, so a process that ignores SIGTERM
    // survives a plain kill (and says so); an explicit grace_s escalates.
    let d = Daemon::with_config("kill_grace_s = 0");
    let id = d.spawn(
        "python3 -c 'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(\"deaf\", flush=True); time.sleep(300)'",
    );
    d.read_until(&id, "deaf");
    let r = d.ok("kill", json!({"session_id": id}));
    assert_eq!(r["status"], "error", "{r}");
    assert!(!r["survivors"].as_array().unwrap().is_empty(), "{r}");
    let r = d.ok("kill", json!({"session_id": id, "grace_s": 0.2}));
    assert_eq!(r["status"], "killed", "{r}");
}

#[test]
fn procd_events_prints_starts_and_exits_as_they_happen() {
    let d = Daemon::start();
    let mut events = Command::new(BIN)
        .args(["--home"])
        .arg(d.home.path())
        .args(["events", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("procd events");
    let out = events.stdout.take().unwrap();
    let _guard = Stand(events);
    // It has subscribed once the daemon counts a subscriber: close_terminal
    // answers -32002 ("no UI is attached") without one.
    let anchor = d.spawn("sleep 300");
    wait_until("procd events has subscribed", || {
        d.call("close_terminal", json!({"session_id": anchor}))
            .get("error")
            .is_none()
    });
    let id = d.spawn("echo hi");
    d.wait_exit(&id);
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(out));
    let mut seen = Vec::new();
    while !(seen.contains(&"started".to_string()) && seen.contains(&"exited".to_string())) {
        let line = lines.next().expect("an event line").expect("read");
        let v: Value = serde_json::from_str(&line).expect("JSON event");
        if v["session_id"] == id.as_str() {
            seen.push(v["type"].as_str().unwrap_or_default().to_string());
        }
    }
    d.ok("kill", json!({"session_id": anchor}));
}

#[test]
fn a_configuration_named_with_config_is_the_one_used() {
    // `--config FILE` (a file outside the home) reaches the daemon it
    // starts: here max_running = 1 refuses a second running session.
    let home = short_tempdir();
    let elsewhere = tempfile::tempdir().unwrap();
    let file = elsewhere.path().join("procd-test.toml");
    std::fs::write(&file, "max_running = 1\n").unwrap();
    let procd = |args: &[&str]| {
        Command::new(BIN)
            .arg("--home")
            .arg(home.path())
            .arg("--config")
            .arg(&file)
            .args(args)
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .output()
            .expect("run procd")
    };
    assert!(procd(&["start"]).status.success());
    let first = procd(&["spawn", "--", "sleep 300"]);
    assert!(first.status.success(), "{first:?}");
    let second = procd(&["spawn", "--", "sleep 300"]);
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("max_running (1)"),
        "{second:?}"
    );
    // A missing file named explicitly is an error, not the defaults.
    let missing = Command::new(BIN)
        .arg("--home")
        .arg(home.path())
        .args(["--config", "/nonexistent/procd.toml", "daemon"])
        .env("HOME", home.path())
        .output()
        .expect("run procd");
    assert_eq!(missing.status.code(), Some(1), "{missing:?}");
    assert!(procd(&["stop"]).status.success());
}

#[test]
fn a_stalled_event_subscriber_is_told_how_many_events_it_missed() {
    // subscribe_events: a subscriber that does not read falls behind the
    // daemon's event stream; what it missed is reported as one
    // {type:"lagged", missed} item instead of growing memory without bound.
    let d = Daemon::start();
    let anchor = d.spawn("sleep 300");
    let mut stalled = d.connect();
    let r = stalled.call("subscribe_events", json!({}));
    assert!(r.get("result").is_some(), "{r}");
    // Every close_terminal is an event for subscribers; the stalled one
    // reads nothing meanwhile.
    let mut c = d.connect();
    for _ in 0..6000 {
        let r = c.call("close_terminal", json!({"session_id": anchor}));
        assert!(r.get("result").is_some(), "{r}");
    }
    let missed = loop {
        let v = stalled.recv();
        let item = &v["params"]["result"];
        if item["type"] == "lagged" {
            break item["missed"].as_u64().unwrap_or(0);
        }
        assert_eq!(item["type"], "close_terminal", "{v}");
    };
    assert!(missed > 0, "it says how many it missed");
    d.ok("kill", json!({"session_id": anchor}));
}

#[test]
fn without_bash_the_default_shell_falls_back_to_shell_then_bin_sh() {
    // docs/SECURITY.md (config `shell`): the default `bash` is looked for on PATH,
    // at /usr/bin/bash and /bin/bash, then $SHELL, then `/bin/sh -lc`.
    // Bash is hidden from a real daemon in a private mount namespace.
    let unshare = std::path::Path::new("/usr/bin/unshare");
    if machine_lacks("PROCD_TEST_NO_UNSHARE", "root and unshare(1)") {
        return;
    }
    assert!(
        nix::unistd::geteuid().is_root() && unshare.exists(),
        "hiding bash needs root and unshare(1); set PROCD_TEST_NO_UNSHARE=1 where the machine cannot"
    );
    let hide_bash = "mount --bind /dev/null /usr/bin/bash && { [ -L /bin ] || mount --bind /dev/null /bin/bash; } && exec \"$0\" daemon --home \"$1\"";
    for (user_shell, expected) in [(Some("/usr/bin/dash"), "/usr/bin/dash"), (None, "/bin/sh")] {
        if user_shell.is_some_and(|s| !std::path::Path::new(s).exists()) {
            continue;
        }
        let home = short_tempdir();
        let mut cmd = Command::new(unshare);
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            hide_bash,
            BIN,
        ])
        .arg(home.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if let Some(s) = user_shell {
            cmd.env("SHELL", s);
        }
        let daemon = Stand(cmd.spawn().expect("a daemon without bash"));
        let socket = home.path().join("run/procd.sock");
        wait_until("the daemon without bash serves", || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        let mut c = Conn::open(&socket);
        let r = c.call(
            "spawn",
            json!({"command": "echo \"shell=$0\"; exit 4", "yield_ms": 20000}),
        )["result"]
            .clone();
        assert_eq!(r["output"], format!("shell={expected}\n"), "{r}");
        assert_eq!(r["exit_code"], 4, "{r}");
        let pid = nix::unistd::Pid::from_raw(daemon.pid());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        wait_until("the daemon without bash stops", || !alive(daemon.pid()));
    }
}
