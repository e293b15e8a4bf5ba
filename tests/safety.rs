//! Safe by default (docs/SECURITY.md, docs/survival.md): credentials, redaction, checkpoint and
//! crash recovery, hostile input.

use crate::common::*;
use serde_json::{json, Value};

fn checkpoint(d: &Daemon) -> Value {
    let text = std::fs::read_to_string(d.state_dir().join("procs.json")).expect("procs.json");
    serde_json::from_str(&text).expect("procs.json is JSON")
}

fn checkpoint_ids(d: &Daemon) -> Vec<String> {
    checkpoint(d)
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["session_id"].as_str().unwrap().to_string())
        .collect()
}

fn identity_of(pid: i32) -> (i32, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let f: Vec<&str> = text[text.rfind(')').unwrap() + 2..].split(' ').collect();
    (f[2].parse().unwrap(), f[19].parse().unwrap())
}

/// A previous daemon's log of session `id` in `home`, holding `text`.
fn plant_log(home: &std::path::Path, id: &str, text: &str) -> std::path::PathBuf {
    let logs = home.join("state/logs");
    std::fs::create_dir_all(&logs).unwrap();
    let log = logs.join(format!("{id}.log"));
    std::fs::write(&log, text).unwrap();
    log
}

fn entry(id: &str, pid: i32, start_time: u64, log: &std::path::Path) -> Value {
    json!({
        "session_id": id, "command": "sleep 300", "pid": pid, "start_time": start_time,
        "identity": format!("{pid}:{start_time}"), "pgid": pid, "cwd": "/tmp",
        "started_at": "2026-11-29T12:00:00.000Z", "task_id": "t", "session_key": null,
        "owner": null, "persist": false, "pty": false, "notify_on_complete": true,
        "watch_patterns": [], "systemd_unit": null, "log_path": log,
    })
}

// ----- environment ----------------------------------------------------------

#[test]
fn daemon_credentials_are_not_inherited() {
    // R16 (daemon side)
    let d = Daemon::with_env(
        "",
        &[
            ("OPENAI_API_KEY", "sk-daemon-secret"),
            ("GITHUB_TOKEN", "ghp_daemon"),
            ("STRIPE_SECRET_KEY", "sk_live_x"),
            ("AWS_SECRET_ACCESS_KEY", "aws-kept"),
            ("MY_SETTING", "kept"),
        ],
    );
    let id = d.spawn("echo \"openai=${OPENAI_API_KEY:-none} gh=${GITHUB_TOKEN:-none} stripe=${STRIPE_SECRET_KEY:-none} aws=$AWS_SECRET_ACCESS_KEY my=$MY_SETTING\"");
    d.wait_exit(&id);
    let out = d.read_all(&id);
    assert_eq!(
        out.trim(),
        "openai=none gh=none stripe=none aws=aws-kept my=kept"
    );
}

#[test]
fn children_get_the_descriptor_limit_the_daemon_started_with() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    // Start the daemon with a soft limit under the hard one (this changes
    // only this test's process: each test runs in its own).
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let soft = hard / 2;
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    let d = Daemon::start();
    for pty in [false, true] {
        let id = d.spawn_with(json!({"command": "echo $(ulimit -Sn) $(ulimit -Hn)", "pty": pty}));
        d.wait_exit(&id);
        assert_eq!(
            d.read_all(&id).trim(),
            format!("{soft} {hard}"),
            "pty: {pty}"
        );
    }
    // Checked once it has served requests (it raises before serving; the
    // socket accepts connections a moment earlier).
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", d.pid())).unwrap();
    let open_files: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(open_files[3], hard.to_string(), "the daemon raised its own");
}

// ----- redaction ----------------------------------------------------------------

#[test]
fn a_private_key_cut_by_a_window_or_a_tail_is_masked_in_every_piece() {
    // A 4096-bit key is ~3.2 KB: previews and completion output (the last
    // 1000-2000 chars) start inside it, and a read can end inside it.
    let d = Daemon::start();
    let body: Vec<String> = (0..50)
        .map(|i| {
            format!(
                "{:0>64}",
                format!("MIIJQgIBADANBgkqhkiG9w0BAQEFAASCCSwwggkoAgEAAoICAQ{i}")
            )
        })
        .collect();
    let (head, tail) = body.split_at(20);
    let key_file = d.home.path().join("id_rsa");
    std::fs::write(
        &key_file,
        format!("-----BEGIN PRIVATE KEY-----\n{}\n", head.join("\n")),
    )
    .unwrap();
    let rest_file = d.home.path().join("id_rsa.rest");
    std::fs::write(
        &rest_file,
        format!("{}\n-----END PRIVATE KEY-----\n", tail.join("\n")),
    )
    .unwrap();
    let id = d.spawn_with(json!({
        "command": "cat id_rsa; read _; cat id_rsa.rest; read _",
        "cwd": d.home.path(),
        "notify_on_complete": true,
    }));
    // The first read ends inside the key; the next one starts inside it.
    let first = d.ok("read", json!({"session_id": id, "wait_ms": 10000}));
    d.ok("submit_stdin", json!({"session_id": id, "data": ""}));
    let second = d.read_until_from(
        &id,
        first["next_cursor"].as_u64().unwrap(),
        "END PRIVATE KEY",
    );
    let poll = d.ok("poll", json!({"session_id": id}));
    let log = d.ok("log", json!({"session_id": id, "offset": 25, "limit": 10}));
    d.ok("submit_stdin", json!({"session_id": id, "data": ""}));
    let waited = d.wait_exit(&id);
    let events = d.ok("drain_notifications", json!({}))["events"].clone();
    // Each piece really is a piece of the key, masked.
    assert!(
        second.starts_with("***\n-----END PRIVATE KEY-----"),
        "{second}"
    );
    assert_eq!(log["output"], "***");
    assert!(poll["output_preview"]
        .as_str()
        .unwrap()
        .ends_with("***\n-----END PRIVATE KEY-----\n"));
    let returned = [
        ("first read", first["data"].to_string()),
        ("second read", second),
        ("poll preview", poll["output_preview"].to_string()),
        ("log from the middle", log["output"].to_string()),
        ("wait output", waited["output"].to_string()),
        ("completion event", events.to_string()),
    ];
    for (what, text) in returned {
        for line in &body {
            assert!(
                !text.contains(&line[..40]),
                "{what} shows key material: {text}"
            );
        }
    }
}

#[test]
fn redaction_masks_secrets_in_everything_returned() {
    // R28
    let d = Daemon::start();
    let secret = "sk-proj-abc123def456ghi789jkl012";
    let cmd = "echo \"leaked $KEY here\"; echo 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123'; read _";
    let id = d.spawn_with(json!({
        "command": cmd,
        "env": {"KEY": secret},
        "notify_on_complete": true,
        "task_id": "r",
    }));
    d.read_until(&id, "Authorization");
    let poll = d.ok("poll", json!({"session_id": id}));
    let preview = poll["output_preview"].as_str().unwrap();
    assert!(!preview.contains("abc123def456"), "{preview}");
    assert!(preview.contains("leaked sk-pro...l012 here"), "{preview}");
    assert!(!preview.contains("abcdefghijklmnopqrstuvwxyz0123"));
    let listed = d.ok("list", json!({"task_id": "r"}))["processes"][0].clone();
    assert!(!listed["output_preview"]
        .as_str()
        .unwrap()
        .contains("abc123def456"));
    let log = d.ok("log", json!({"session_id": id}))["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !log.contains(secret) && log.contains("sk-pro...l012"),
        "{log}"
    );
    let read = d.ok("read", json!({"session_id": id}))["data"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!read.contains(secret));
    d.ok("submit_stdin", json!({"session_id": id, "data": ""}));
    let w = d.wait_exit(&id);
    assert!(!w["output"].as_str().unwrap().contains(secret));
    let events = d.ok("drain_notifications", json!({}))["events"].clone();
    assert!(!events.to_string().contains(secret), "{events}");
    // The raw bytes are on disk (mode 0600) — redaction is on the way out.
    let raw = std::fs::read_to_string(d.state_dir().join(format!("logs/{id}.log"))).unwrap();
    assert!(raw.contains(secret));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.state_dir().join(format!("logs/{id}.log")))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn env_dumps_mask_opaque_tokens_and_commands_are_masked_in_list() {
    // R28
    let d = Daemon::start();
    let id = d.spawn_with(json!({
        "command": "env | grep -E '^(MY_SERVICE_TOKEN|HOME)=' | sort",
        "env": {"PROCD_FORCE_MY_SERVICE_TOKEN": "abc123randomopaquetokenvalue999", "HOME": "/home/u"},
    }));
    d.wait_exit(&id);
    let log = d.ok("log", json!({"session_id": id}))["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(log, "HOME=/home/u\nMY_SERVICE_TOKEN=abc123...e999\n");

    let cmd = "curl -s -H 'Authorization: Bearer sk-abc123def456ghi789jkl012345' http://127.0.0.1:9/ ; true";
    let id = d.spawn_with(json!({"command": cmd, "task_id": "c"}));
    let entry = d.ok("list", json!({"task_id": "c"}))["processes"][0].clone();
    let shown = entry["command"].as_str().unwrap();
    assert!(!shown.contains("sk-abc123def456ghi789jkl012345"), "{shown}");
    assert!(shown.starts_with("curl"));
    assert!(!d.ok("poll", json!({"session_id": id}))["command"]
        .as_str()
        .unwrap()
        .contains("ghi789"));
}

#[test]
fn with_redaction_off_output_passes_through() {
    // R28
    let d = Daemon::with_config("redact = false");
    let id2 = d.spawn_with(json!({
        "command": "env | grep CUSTOM_TOKEN",
        "env": {"PROCD_FORCE_CUSTOM_TOKEN": "zzzopaque1234567890abcdef"},
    }));
    d.wait_exit(&id2);
    let log = d.ok("log", json!({"session_id": id2}))["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(log, "CUSTOM_TOKEN=zzzopaque1234567890abcdef\n");
}

// ----- checkpoint and recovery ---------------------------------------------------

#[test]
fn the_checkpoint_tracks_running_sessions_with_commands_redacted() {
    // R20 (redaction in the file)
    let d = Daemon::start();
    let secret = "abcdefghijklmnopqrstuvwxyz123";
    let id = d.spawn(&format!(
        "echo 'Authorization: Bearer {secret}' >/dev/null; sleep 300"
    ));
    let cp = checkpoint(&d);
    let e = cp
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["session_id"] == id.as_str())
        .expect("entry");
    assert!(!e["command"].as_str().unwrap().contains(secret), "{e}");
    let pid = e["pid"].as_i64().unwrap() as i32;
    let (_, start) = identity_of(pid);
    assert_eq!(e["start_time"].as_u64(), Some(start));
    assert_eq!(e["identity"], format!("{pid}:{start}"));
    for field in [
        "pgid",
        "cwd",
        "started_at",
        "task_id",
        "session_key",
        "owner",
        "persist",
        "pty",
        "notify_on_complete",
        "watch_patterns",
        "systemd_unit",
        "log_path",
    ] {
        assert!(e.get(field).is_some(), "checkpoint entry lacks {field}");
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.state_dir().join("procs.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    d.ok("kill", json!({"session_id": id}));
    wait_until("the exit is checkpointed", || checkpoint_ids(&d).is_empty());
}

#[test]
fn a_crashed_daemons_sessions_are_recovered_and_killable() {
    // R21 (detached kill), docs/survival.md: spawn, kill -9 the daemon, restart.
    let mut d = Daemon::start();
    let id = d.spawn("echo before-crash; exec sleep 300");
    d.read_until(&id, "before-crash");
    wait_until("sleep runs", || {
        session_pids(&id).iter().any(|p| comm(*p) == "sleep")
    });
    let pid = session_pids(&id)[0];
    wait_until("the session is checkpointed", || {
        checkpoint_ids(&d).contains(&id)
    });
    d.crash();
    assert!(alive(pid), "the session outlived its daemon");
    d.restart();

    let listed = d.ok("list", json!({}))["processes"].clone();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["session_id"], id.as_str());
    assert_eq!(listed[0]["status"], "running");
    assert!(listed[0]["note"].as_str().unwrap().contains("recovered"));
    let log = d.ok("log", json!({"session_id": id}));
    assert_eq!(log["output"], "before-crash\n");
    let (code, _) = d.err("write_stdin", json!({"session_id": id, "data": "x"}));
    assert_eq!(code, -32002);
    assert_eq!(
        checkpoint_ids(&d),
        vec![id.clone()],
        "rewritten to what is tracked"
    );

    let k = d.ok("kill", json!({"session_id": id}));
    assert_eq!(k["status"], "killed", "{k}");
    assert!(!alive(pid), "the kill really ended the sleep");
    wait_until("the checkpoint is empty", || checkpoint_ids(&d).is_empty());
}

#[test]
fn recovery_lists_lost_sessions_and_drops_what_is_not_a_session() {
    // R20, R26, docs/survival.md: a dead, recycled or foreign pid is never
    // signalled; its session stays listed (exited, "lost", code unknown)
    // so an id an agent holds keeps answering; non-sessions are dropped.
    let home = short_tempdir();
    let state = home.path().join("state");
    std::fs::create_dir_all(state.join("logs")).unwrap();
    std::fs::write(
        state.join("logs/proc_aaaaaaaaaaaa.log"),
        "before the crash\n",
    )
    .unwrap();
    let log = state.join("logs/x.log");
    let recycled = Stand::marked(Some("proc_bbbbbbbbbbbb"));
    let (_, rstart) = identity_of(recycled.pid());
    let foreign = Stand::sleep();
    let (_, fstart) = identity_of(foreign.pid());
    let entries = json!([
        entry("proc_aaaaaaaaaaaa", 999_999, 1, &log),
        entry("proc_bbbbbbbbbbbb", recycled.pid(), rstart + 1, &log),
        entry("proc_cccccccccccc", foreign.pid(), fstart, &log),
        {"session_id": "proc_dddddddddddd", "pid": 1, "pid_scope": "sandbox"},
        "not even an object",
    ]);
    std::fs::write(state.join("procs.json"), entries.to_string()).unwrap();
    let d = Daemon::in_home(home, "");
    let listed = d.ok("list", json!({}))["processes"].clone();
    let mut ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["session_id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            "proc_aaaaaaaaaaaa",
            "proc_bbbbbbbbbbbb",
            "proc_cccccccccccc"
        ]
    );
    for id in &ids {
        let p = d.ok("poll", json!({"session_id": id}));
        assert_eq!(p["status"], "exited", "{p}");
        assert_eq!(p["completion_reason"], "lost", "{p}");
        assert_eq!(p["exit_code"], Value::Null, "{p}");
    }
    let read = d.ok("read", json!({"session_id": "proc_aaaaaaaaaaaa"}));
    assert_eq!(
        read["data"], "before the crash\n",
        "its log is still readable"
    );
    assert_eq!(read["eof"], true);
    assert_eq!(
        d.err("poll", json!({"session_id": "proc_dddddddddddd"})).0,
        -32001
    );
    assert_eq!(
        checkpoint(&d),
        json!([]),
        "the checkpoint holds running sessions"
    );
    assert!(
        alive(recycled.pid()) && alive(foreign.pid()),
        "nothing was signalled"
    );
}

#[test]
fn a_corrupt_checkpoint_is_moved_aside_never_overwritten() {
    let home = short_tempdir();
    let state = home.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("procs.json"), "[{\"session_id\": \"proc_0123").unwrap();
    let d = Daemon::in_home(home, "");
    d.ok("status", json!({}));
    let aside: Vec<_> = std::fs::read_dir(d.state_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("procs.json.corrupt-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "kept beside it");
    assert_eq!(
        std::fs::read_to_string(aside[0].path()).unwrap(),
        "[{\"session_id\": \"proc_0123",
        "byte for byte"
    );
    assert_eq!(checkpoint(&d), json!([]), "a fresh checkpoint");
}

/// A session that ended just before a crash, before `ended.jsonl` held it,
/// is still in `procs.json` with its exit: the next daemon lists it with
/// that exact exit, not as lost. The process recorded for it (alive here,
/// with the recorded identity) is neither adopted nor signalled: the exit
/// wins.
#[test]
fn an_exit_recorded_only_in_procs_json_is_listed_as_it_was() {
    let home = short_tempdir();
    let log = plant_log(home.path(), "proc_ffffffffffff", "done\n");
    let stand = Stand::sleep();
    let (_, start) = identity_of(stand.pid());
    let mut ended = entry("proc_ffffffffffff", stand.pid(), start, &log);
    // Ended just now (an older end would be past retention already).
    ended["exit"] = json!({
        "exit_code": 7, "signal": null, "completion_reason": "exited",
        "termination_source": null,
        "exited_at": procd_sys::clock::rfc3339(std::time::SystemTime::now()),
    });
    std::fs::write(
        home.path().join("state/procs.json"),
        json!([ended]).to_string(),
    )
    .unwrap();
    let d = Daemon::in_home(home, "");
    let p = d.ok("poll", json!({"session_id": "proc_ffffffffffff"}));
    assert_eq!(
        (
            p["status"].clone(),
            p["exit_code"].clone(),
            p["completion_reason"].clone()
        ),
        (json!("exited"), json!(7), json!("exited")),
        "{p}"
    );
    assert!(alive(stand.pid()), "its pid was signalled");
    assert_eq!(
        checkpoint(&d),
        json!([]),
        "procs.json holds running sessions"
    );
}

#[test]
fn a_recovered_session_whose_process_ends_is_marked_exited() {
    // R26 (a detached session's pid ends: exited, reason lost, code null)
    let home = short_tempdir();
    let state = home.path().join("state");
    let log = plant_log(home.path(), "proc_eeeeeeeeeeee", "old output\n");
    let mut stand = Stand::marked(Some("proc_eeeeeeeeeeee"));
    let (_, start) = identity_of(stand.pid());
    std::fs::write(
        state.join("procs.json"),
        json!([entry("proc_eeeeeeeeeeee", stand.pid(), start, &log)]).to_string(),
    )
    .unwrap();
    let d = Daemon::in_home(home, "");
    let p = d.ok("poll", json!({"session_id": "proc_eeeeeeeeeeee"}));
    assert_eq!(p["status"], "running");
    assert_eq!(p["output_preview"], "old output\n");
    stand.0.kill().unwrap();
    stand.0.wait().unwrap();
    let w = d.ok(
        "wait",
        json!({"session_id": "proc_eeeeeeeeeeee", "timeout_s": 20}),
    );
    assert_eq!(w["status"], "exited");
    assert_eq!(w["completion_reason"], "lost");
    assert_eq!(w["exit_code"], Value::Null);
    let events = d.ok("drain_notifications", json!({}))["events"].clone();
    assert_eq!(
        events[0]["type"], "completion",
        "notify_on_complete survives recovery"
    );
}

// ----- hostile input -------------------------------------------------------------

/// One hostile input line, from a seeded generator so that failures reproduce.
fn hostile_line(rng: &mut fastrand::Rng) -> Vec<u8> {
    let methods = [
        "spawn",
        "poll",
        "read",
        "log",
        "wait",
        "kill",
        "signal",
        "write_stdin",
        "list",
        "drain_notifications",
        "resize",
        "subscribe_output",
        "kill_all",
        "nope",
        "",
    ];
    let values = [
        "null",
        "true",
        "-1",
        "1e309",
        "18446744073709551616",
        "-9223372036854775809",
        "\"\"",
        "\"proc_\"",
        "\"proc_zzzz\"",
        "\"\\u0000\"",
        "[]",
        "{}",
        "[[[[[[]]]]]]",
        "\"x\"",
        "0.5",
        "\"SIGKILL\"",
        "99999",
    ];
    let fields = [
        "session_id",
        "command",
        "cursor",
        "max_bytes",
        "wait_ms",
        "timeout_s",
        "signal",
        "data",
        "rows",
        "cols",
        "env",
        "grace_s",
        "cwd",
        "owner",
        "watch_patterns",
    ];
    match rng.u64(..8) {
        0 => (0..rng.u64(..200))
            .map(|_| rng.u64(..256) as u8)
            .filter(|b| *b != b'\n')
            .collect(),
        1 => {
            let depth = 1 + rng.u64(..5000) as usize;
            format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes()
        }
        2 => {
            let mut v =
                br#"{"jsonrpc":"2.0","id":1,"method":"poll","params":{"session_id":""#.to_vec();
            v.extend([0xff, 0xfe, 0xc3]);
            v.extend(br#""}}"#);
            v
        }
        3 => format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"{}"}}"#,
            rng.choice(values.iter()).expect("something to pick"),
            rng.choice(methods.iter()).expect("something to pick")
        )
        .into_bytes(),
        _ => {
            let mut params = String::from("{");
            for i in 0..rng.u64(..4) {
                if i > 0 {
                    params.push(',');
                }
                params.push_str(&format!(
                    "\"{}\":{}",
                    rng.choice(fields.iter()).expect("something to pick"),
                    rng.choice(values.iter()).expect("something to pick")
                ));
            }
            params.push('}');
            let params = if rng.u64(..5) == 0 {
                rng.choice(values.iter())
                    .expect("something to pick")
                    .to_string()
            } else {
                params
            };
            format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"{}","params":{}}}"#,
                rng.u64(..1000),
                rng.choice(methods.iter()).expect("something to pick"),
                params
            )
            .into_bytes()
        }
    }
}

#[test]
fn thousands_of_hostile_requests_leave_the_daemon_serving_and_clean() {
    use std::io::{BufRead, BufReader, Write};
    let d = Daemon::with_config("max_request_bytes = 65536");
    let fds_before = d.fds().len();
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
    let mut sent = 0;
    // Bounded: at most 100 connections of at most 100 lines.
    for _ in 0..100 {
        if sent >= 3000 {
            break;
        }
        let stream = std::os::unix::net::UnixStream::connect(d.socket()).expect("connect");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        // Only an over-long line closes a connection (after answering it).
        let mut closing = false;
        for _ in 0..100 {
            let mut line = hostile_line(&mut rng);
            line.push(b'\n');
            if writer.write_all(&line).is_err() {
                assert!(
                    closing,
                    "the daemon closed a connection it had no reason to close"
                );
                break;
            }
            sent += 1;
            closing |= line.len() > 65536;
            // Every line that is not a notification gets exactly one
            // answer; a blank line is skipped, as whitespace between lines.
            let is_notification =
                line.starts_with(b"{") && !line.windows(5).any(|w| w == b"\"id\":");
            let blank = String::from_utf8_lossy(&line).trim().is_empty();
            if !is_notification && !blank {
                let mut answer = String::new();
                match reader.read_line(&mut answer) {
                    Ok(0) | Err(_) => {
                        assert!(
                            closing,
                            "no answer to {:?}",
                            String::from_utf8_lossy(&line[..line.len().min(200)])
                        );
                        break;
                    }
                    Ok(_) => {
                        let v: Value = serde_json::from_str(&answer)
                            .unwrap_or_else(|e| panic!("bad answer {answer:?}: {e}"));
                        assert!(v.is_object() || v.is_array(), "{v}");
                    }
                }
            }
        }
    }
    assert!(sent >= 3000, "only {sent} lines were sent");
    // Still serving, nothing running, nothing leaked.
    assert!(d.ok("status", json!({}))["pid"].is_number());
    let running = d.ok("list", json!({"status": "running"}))["processes"].clone();
    for p in running.as_array().unwrap() {
        d.ok("kill", json!({"session_id": p["session_id"]}));
    }
    wait_until("connections are closed", || d.fds().len() <= fds_before + 2);
}

// ----- systemd scopes (R30) ------------------------------------------------------

fn calls(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// A socket-activated daemon (as systemd starts it) with stand-in
/// systemd-run/systemctl first on PATH; returns the log of their calls.
fn activated_with_stand_ins(probe_exit: i32) -> (tempfile::TempDir, Activated, std::path::PathBuf) {
    let home = short_tempdir();
    let bin = home.path().join("bin");
    let log = systemd_stand_ins(&bin, probe_exit);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Scopes are what these tests are about: where a cgroup can be had,
    // procd would use one instead (docs/containment.md).
    std::fs::write(home.path().join("config.toml"), "containment = \"scope\"\n").expect("config");
    let daemon = Activated::start(home.path(), &[("PATH", path.as_str())]);
    (home, daemon, log)
}

/// Spawns `command`, waits for its exit; (session id, wait result).
fn spawn_and_wait(c: &mut Conn, command: &str) -> (String, Value) {
    let id = c.call("spawn", json!({"command": command}))["result"]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let w = c.call("wait", json!({"session_id": id, "timeout_s": 20}))["result"].clone();
    (id, w)
}

#[test]
fn under_the_unit_sessions_run_in_scopes_and_kill_stops_them() {
    let (home, daemon, log) = activated_with_stand_ins(0);
    let mut c = daemon.connect();
    let (id, w) = spawn_and_wait(&mut c, "echo scoped");
    assert_eq!(w["output"], "scoped\n");
    assert_eq!(w["exit_code"], 0);
    let line = calls(&log)
        .into_iter()
        .find(|l| l.contains(&format!("--unit procd-worker-{id} ")))
        .expect("the session was wrapped");
    let max: u64 = line
        .split("MemoryMax=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("MemoryMax");
    assert!(max > 0 && max <= 4096 * 1024 * 1024);
    let expected_prefix = format!(
        "systemd-run --user --scope --quiet --collect --unit procd-worker-{id} --property MemoryAccounting=yes --property MemoryMax={max} --property OOMPolicy=kill -- "
    );
    assert!(line.starts_with(&expected_prefix), "{line}");
    // Then the shell: it sources the snapshot (docs/operations.md) when the
    // login scripts left something to run (the log shows the command as the
    // next line of its script), or runs the command at once.
    let all = calls(&log);
    let at = all.iter().position(|l| *l == line).expect("the call");
    let command = if line.ends_with("shell-snapshot.sh'") {
        assert!(line.contains("/bash -c . '"), "then the shell argv: {line}");
        all.get(at + 1).cloned().unwrap_or_default()
    } else {
        let (_, command) = line
            .split_once("/bash -c ")
            .unwrap_or_else(|| panic!("then the shell argv: {line}"));
        command.to_string()
    };
    assert!(
        command.starts_with("set +m; trap ") && command.ends_with(" TERM; echo scoped"),
        "then the command: {command}"
    );

    // PTY sessions are scoped too, in a new session; kill stops the scope.
    let pty = c.call("spawn", json!({"command": "sleep 300", "pty": true}))["result"].clone();
    let pid = pty["pid"].as_i64().unwrap() as i32;
    let pid_id = pty["session_id"].as_str().unwrap().to_string();
    // (spawn answers once the child exists; the stand-in logs a moment later)
    wait_until("the PTY session's scope is recorded", || {
        calls(&log)
            .iter()
            .any(|l| l.contains(&format!("--unit procd-worker-{pid_id} ")))
    });
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let sid: i32 = stat[stat.rfind(')').unwrap() + 2..]
        .split(' ')
        .nth(3)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(sid, pid, "the session leads its own session");
    let cp: Value = serde_json::from_str(
        &std::fs::read_to_string(home.path().join("state/procs.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(cp[0]["systemd_unit"], format!("procd-worker-{pid_id}"));
    let k = c.call("kill", json!({"session_id": pid_id}))["result"].clone();
    assert_eq!(k["status"], "killed");
    assert!(calls(&log).contains(&format!(
        "systemctl --user stop procd-worker-{pid_id}.scope"
    )));
}

#[test]
fn without_the_unit_there_are_no_scopes_even_with_an_invocation_id() {
    let bin = short_tempdir();
    let log = systemd_stand_ins(bin.path(), 0);
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let d = Daemon::with_env(
        "",
        &[("PATH", &path), ("INVOCATION_ID", "0123456789abcdef")],
    );
    let id = d.spawn("echo plain");
    assert_eq!(d.wait_exit(&id)["output"], "plain\n");
    assert!(
        calls(&log).is_empty(),
        "systemd-run was not even probed: {:?}",
        calls(&log)
    );
}

#[test]
fn when_systemd_run_does_not_work_sessions_run_unscoped() {
    let (_home, daemon, log) = activated_with_stand_ins(1);
    let mut c = daemon.connect();
    let (_, w) = spawn_and_wait(&mut c, "echo unscoped");
    assert_eq!(w["output"], "unscoped\n");
    let all = calls(&log);
    assert!(
        !all.is_empty() && all.iter().all(|l| l.ends_with("-- true")),
        "only the probe ran: {all:?}"
    );
}

#[test]
fn a_failed_checkpoint_write_leaks_no_running_slot() {
    // docs/SECURITY.md: counters cannot drift. A spawn whose checkpoint cannot be
    // written is refused and its process killed; its slot comes back once.
    let d = Daemon::with_config("max_running = 2");
    d.ok("status", json!({})); // past start-up (its checkpoint is written)
    let checkpoint = d.state_dir().join("procs.json");
    let _ = std::fs::remove_file(&checkpoint);
    std::fs::create_dir(&checkpoint).expect("a directory where the file goes");
    for _ in 0..3 {
        let (code, msg) = d.err("spawn", json!({"command": "sleep 300"}));
        assert_eq!(code, -32003, "{msg}");
        assert!(msg.contains("checkpoint"), "{msg}");
    }
    let status = d.ok("status", json!({}));
    assert_eq!(status["running"], 0, "{status}");
    std::fs::remove_dir(&checkpoint).expect("writable again");
    let a = d.spawn("sleep 300");
    let b = d.spawn("sleep 300");
    let (code, _) = d.err("spawn", json!({"command": "sleep 300"}));
    assert_eq!(code, -32004, "the limit still holds at exactly 2");
    let listed = d.ok("list", json!({"status": "running"}))["processes"]
        .as_array()
        .map(Vec::len);
    assert_eq!(listed, Some(2));
    assert_eq!(d.ok("status", json!({}))["running"], 2);
    d.ok("kill", json!({"session_id": a}));
    d.spawn("sleep 300");
    d.ok("kill_all", json!({}));
    let _ = b;
}

// ----- directory trust (docs/SECURITY.md) ----------------------------------------------

/// A home whose `run` dir was placed by someone else: `prepare` makes it.
fn home_with_foreign_run(prepare: impl FnOnce(&std::path::Path)) -> tempfile::TempDir {
    let home = short_tempdir();
    prepare(&home.path().join("run"));
    home
}

fn procd_in(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .env("HOME", home)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run procd")
}

#[test]
fn a_runtime_dir_placed_by_another_user_is_refused_and_left_untouched() {
    use std::os::unix::fs::PermissionsExt;
    let nobody = 65534;
    let home = home_with_foreign_run(|run| {
        std::fs::create_dir(run).unwrap();
        std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o777)).unwrap();
        nix::unistd::chown(run, Some(nix::unistd::Uid::from_raw(nobody)), None).unwrap();
    });
    let run = home.path().join("run");
    for args in [
        &["spawn", "--", "echo secret-command"][..],
        &["daemon"],
        &["start"],
        &["status"],
        &["stop"],
        &["lease", "acquire"],
    ] {
        let out = procd_in(home.path(), args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert!(
            err.contains(&run.display().to_string()) && err.contains("owned by uid 65534"),
            "{args:?} names the path and the problem: {err}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&run)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "nothing was written there: {left:?}");
    assert!(
        !home.path().join("state").exists()
            || std::fs::read_dir(home.path().join("state"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn a_symlinked_or_open_runtime_dir_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let elsewhere = short_tempdir();
    let linked =
        home_with_foreign_run(|run| std::os::unix::fs::symlink(elsewhere.path(), run).unwrap());
    let out = procd_in(linked.path(), &["spawn", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("symbolic link"),
        "{out:?}"
    );
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    let open = home_with_foreign_run(|run| {
        std::fs::create_dir(run).unwrap();
        std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o733)).unwrap();
    });
    let out = procd_in(open.path(), &["daemon"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("writable by group or others"),
        "{out:?}"
    );
}

#[test]
fn a_client_sends_nothing_to_a_listener_of_another_user() {
    // The listener binds as root (our uid here) and listens as nobody:
    // SO_PEERCRED reports who called listen(2).
    let home = short_tempdir();
    let run = home.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let socket = run.join("procd.sock");
    let fake = r#"
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
os.setgid(65534); os.setuid(65534)
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
c.settimeout(20)
got = b""
while True:
    chunk = c.recv(4096)
    if not chunk:
        break
    got += chunk
print("received", len(got), flush=True)
"#;
    let mut child = std::process::Command::new("python3")
        .args(["-c", fake])
        .arg(&socket)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("fake listener");
    let stdout = child.stdout.take().unwrap();
    let _listener = Stand(child); // ended on drop, whatever happens
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    assert_eq!(lines.next().unwrap().unwrap(), "listening");
    let out = procd_in(home.path(), &["poll", "proc_aaaaaaaaaaaa"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(err.contains("runs as uid 65534"), "{err}");
    assert_eq!(
        lines.next().unwrap().unwrap(),
        "received 0",
        "not a byte was sent"
    );
}

// ----- bounded requests (docs/SECURITY.md) ------------------------------------------------

#[test]
fn log_pages_are_capped_and_a_batch_of_them_stays_small() {
    let d = Daemon::start();
    // 60 MB of numbered 100-byte lines (600000 lines).
    let id = d.spawn("seq -w 1 600000 | sed 's/$/ ............................................................................................/' | cut -c1-99");
    let done = d.wait_exit(&id);
    assert_eq!(done["exit_code"], 0, "{done}");
    let page = d.ok(
        "log",
        json!({"session_id": id, "offset": 0, "limit": 100000}),
    );
    assert_eq!(page["total_lines"], 600000);
    assert_eq!(
        page["truncated"], true,
        "100000 lines are ~10 MB, over 4 MiB"
    );
    let next = page["next_offset"].as_u64().unwrap();
    let out = page["output"].as_str().unwrap();
    assert!(
        out.len() <= 4 * 1024 * 1024 && out.len() > 3 * 1024 * 1024,
        "{}",
        out.len()
    );
    assert_eq!(
        out.lines().count() as u64,
        next,
        "whole lines, and where to go on"
    );
    let more = d.ok("log", json!({"session_id": id, "offset": next, "limit": 2}));
    let first_line = more["output"]
        .as_str()
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    assert!(
        first_line.starts_with(&format!("{:06}", next + 1)),
        "{first_line}"
    );
    // The last lines, and lines deep in the log, come from a seek.
    let tail = d.ok("log", json!({"session_id": id, "limit": 3}));
    assert!(
        tail["output"].as_str().unwrap().starts_with("599998 "),
        "{tail}"
    );
    assert!(tail.get("truncated").is_none());
    let deep = d.ok(
        "log",
        json!({"session_id": id, "offset": 543210, "limit": 1}),
    );
    assert!(
        deep["output"].as_str().unwrap().starts_with("543211 "),
        "{deep}"
    );

    // A batch of 32 such pages: the answer is capped as one result, and
    // the daemon's peak memory barely moves.
    let before = status_kib(d.pid(), "VmHWM:");
    let batch: Vec<Value> = (0..32)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "log", "params": {"session_id": id, "offset": 0, "limit": 100000}}))
        .collect();
    let mut c = d.connect();
    c.send_raw(&Value::Array(batch).to_string());
    let answer = c.recv();
    let answers = answer.as_array().unwrap();
    assert_eq!(answers.len(), 32);
    assert!(answers[0]["result"]["truncated"] == true);
    let refused = answers
        .iter()
        .filter(|a| a["error"]["code"] == -32004)
        .count();
    assert!(refused >= 30, "entries past the cap are refused: {refused}");
    let grown_mib = (status_kib(d.pid(), "VmHWM:").saturating_sub(before)) / 1024;
    assert!(
        grown_mib < 96,
        "the batch raised the daemon's peak RSS by {grown_mib} MiB"
    );
}

// ----- disk faults (docs/SECURITY.md) ---------------------------------------------------

/// A small tmpfs mounted for a test (a real disk that really fills up);
/// unmounted on drop. None where mounting is not permitted (not root).
/// A 1 MiB tmpfs on `<home>/state`. Dropped after the daemon (whose
/// TempDir cannot remove a mount point): it unmounts, then removes the
/// home that is left.
struct SmallDisk {
    at: std::path::PathBuf,
    home: std::path::PathBuf,
}

/// Says a machine cannot mount a tmpfs (the test then does not run).
const NO_MOUNT: &str = "PROCD_TEST_NO_MOUNT";

impl SmallDisk {
    fn mount(home: &std::path::Path, size: &str) -> Option<SmallDisk> {
        if machine_lacks(NO_MOUNT, "a tmpfs mount (root)") {
            return None;
        }
        let at = home.join("state");
        std::fs::create_dir_all(&at).expect("state dir");
        let mounted = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&at)
            .status();
        assert!(
            mounted.as_ref().is_ok_and(|s| s.success()),
            "cannot mount a tmpfs on {} ({mounted:?}): the disk-fault test needs root; set {NO_MOUNT}=1 where the machine cannot",
            at.display()
        );
        Some(SmallDisk {
            at,
            home: home.to_path_buf(),
        })
    }

    /// Fills it up; returns the filler's path (remove it to free the disk).
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.at.join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let chunk = vec![b'x'; 4096];
        while f.write_all(&chunk).is_ok() {}
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.at).status();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn faults(d: &Daemon) -> Vec<String> {
    d.ok("status", json!({}))["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .map(|f| f["what"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_full_disk_is_a_reported_fault_the_daemon_lives_through() {
    let home = short_tempdir();
    let Some(disk) = SmallDisk::mount(home.path(), "1m") else {
        return;
    };
    let d = Daemon::in_home(home, "monitor_interval_s = 0.1");
    assert!(faults(&d).is_empty());
    let ticker = d.spawn("i=0; while true; do i=$((i+1)); echo tick-$i; sleep 0.01; done");
    // A session whose record is long, started while there is room.
    let long = format!("sleep 1000 # {}", "x".repeat(20_000));
    let sleeper = d.ok("spawn", json!({"command": long}))["session_id"]
        .as_str()
        .expect("session_id")
        .to_string();
    d.read_until(&ticker, "tick-5");
    let filler = disk.fill();
    // Writes now fail: the log and the checkpoint are faults, and the
    // daemon keeps serving from memory. (Each checkpoint file is
    // rewritten in the pages its spare already has, so a write is refused
    // only when it needs more of them: a second long record in
    // `procs.json` now, the sleeper's exit in `ended.jsonl` below, which
    // stays unwritable until there is room.)
    let refused = d.call("spawn", json!({"command": long}));
    assert_eq!(
        refused["error"]["code"], -32003,
        "no checkpoint, no new session: {refused}"
    );
    let listed: Vec<String> = d.ok("list", json!({}))["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .map(|p| p["session_id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        listed.len(),
        2,
        "only the ticker and the sleeper: {listed:?}"
    );
    d.ok("kill", json!({"session_id": sleeper}));
    wait_until("the log and the checkpoint are reported", || {
        let f = faults(&d);
        f.contains(&"checkpoint".to_string()) && f.contains(&format!("log {ticker}"))
    });
    let seen = d.ok(
        "read",
        json!({"session_id": ticker, "cursor": 0, "max_bytes": 1 << 20}),
    );
    let next = seen["next_cursor"].as_u64().unwrap();
    let polled = d.ok("poll", json!({"session_id": ticker}));
    assert_eq!(polled["status"], "running");
    // Room again: the faults clear by themselves, output read on.
    std::fs::remove_file(filler).unwrap();
    wait_until("the faults clear", || faults(&d).is_empty());
    let later = d.read_until_from(&ticker, next, "tick-");
    assert!(!later.is_empty());
    assert!(
        checkpoint_ids(&d).contains(&ticker),
        "the checkpoint was rewritten"
    );
    let ended = std::fs::read_to_string(d.state_dir().join("ended.jsonl")).expect("ended.jsonl");
    let held = ended.lines().any(|line| {
        serde_json::from_str::<Value>(line)
            .is_ok_and(|e| e["session_id"] == sleeper.as_str() && e["exit"].is_object())
    });
    assert!(
        held,
        "the sleeper's exit was written once there was room: {ended}"
    );
    d.ok("kill", json!({"session_id": ticker}));
}

// ----- flood fairness (docs/SECURITY.md) -------------------------------------------------

#[test]
fn floods_share_the_daemon_and_lose_nothing() {
    // Three `yes` floods and a counted one: none is starved, and the
    // counted one arrives whole and in order although the daemon holds
    // floods back. (That they are held to a shared budget is shown by
    // fairness.rs's unit test and the bench's flood rows: CPU and poll
    // latency are not asserted in tests.)
    let d = Daemon::start();
    let yes: Vec<String> = (0..3).map(|_| d.spawn("yes")).collect();
    let counted = d.spawn("seq 1 3000000");
    let w = d.ok("wait", json!({"session_id": counted, "timeout_s": 120}));
    assert_eq!(w["status"], "exited", "{w}");
    assert_eq!(w["exit_code"], 0);
    let last = d.ok("log", json!({"session_id": counted, "limit": 1}));
    assert_eq!(last["total_lines"], 3_000_000, "every line arrived");
    assert_eq!(last["output"], "3000000\n");
    for id in &yes {
        let r = d.ok("read", json!({"session_id": id, "max_bytes": 16}));
        assert!(r["next_cursor"].as_u64().unwrap() > 0, "{id} was starved");
        assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "running");
    }
    assert_eq!(d.ok("kill_all", json!({}))["killed"], 3);
}
