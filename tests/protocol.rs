//! The wire protocol (docs/protocol.md): framing, JSON-RPC errors, batches,
//! notifications, limits, access — and the daemon keeps serving after each.

use crate::common::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

fn assert_still_serving(d: &Daemon) {
    let status = d.ok("status", json!({}));
    assert_eq!(status["pid"].as_u64(), Some(u64::from(d.pid())));
}

#[test]
fn malformed_json_is_a_parse_error() {
    let d = Daemon::start();
    let mut c = d.connect();
    c.send_raw("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ");
    let r = c.recv();
    assert_eq!(r["error"]["code"], -32700);
    assert_eq!(r["id"], Value::Null);
    // Same connection keeps working.
    assert!(c.call("status", json!({}))["result"].is_object());
    assert_still_serving(&d);
}

#[test]
fn json_that_is_not_a_request_is_invalid_request() {
    let d = Daemon::start();
    let mut c = d.connect();
    for bad in [
        "42",
        "\"x\"",
        "{\"id\": 1, \"method\": \"status\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1}",
        // Params are an object or an array (JSON-RPC 2.0), never a scalar.
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"status\",\"params\":3}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"spawn\",\"params\":\"true\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"poll\",\"params\":true}",
    ] {
        c.send_raw(bad);
        let r = c.recv();
        assert_eq!(r["error"]["code"], -32600, "{bad} -> {r}");
    }
    assert_still_serving(&d);
}

#[test]
fn unknown_method_is_method_not_found() {
    // R22
    let d = Daemon::start();
    let r = d.call("frobnicate", json!({}));
    assert_eq!(r["error"]["code"], -32601);
    assert_eq!(r["id"], 1);
    assert_still_serving(&d);
}

#[test]
fn bad_params_name_the_field() {
    let d = Daemon::start();
    let (code, msg) = d.err("spawn", json!({}));
    assert_eq!(code, -32602);
    assert!(msg.contains("command"), "{msg}");
    let (code, msg) = d.err("spawn", json!({"command": 5}));
    assert_eq!(code, -32602);
    assert!(msg.contains("invalid type"), "{msg}");
    let (code, msg) = d.err("spawn", json!({"command": "true", "cwd": "/no/such/dir"}));
    assert_eq!(code, -32602);
    assert!(msg.contains("cwd"), "{msg}");
    let (code, msg) = d.err(
        "wait",
        json!({"session_id": "proc_000000000000", "timeout_s": 1}),
    );
    assert_eq!(code, -32001, "{msg}");
    assert_still_serving(&d);
}

/// A number is judged once, by its type, with one rule for every method
/// that takes it: a zero timeout is refused by spawn and wait alike, with
/// the same message, before anything runs; out-of-range terminal sizes
/// likewise.
#[test]
fn numbers_have_one_rule_for_every_method() {
    let d = Daemon::start();
    let rule = "Invalid params: timeout_s: must be a number of seconds greater than 0 and up to 1000000000, got 0";
    let (code, msg) = d.err("spawn", json!({"command": "sleep 300", "timeout_s": 0}));
    assert_eq!((code, msg.as_str()), (-32602, rule));
    let list = d.ok("list", json!({}));
    assert_eq!(list["processes"], json!([]), "a refused spawn ran: {list}");
    let id = d.spawn_with(json!({"command": "sleep 300", "pty": true}));
    let (code, msg) = d.err("wait", json!({"session_id": id, "timeout_s": 0}));
    assert_eq!((code, msg.as_str()), (-32602, rule));
    for (method, params) in [
        ("spawn", json!({"command": "true", "pty": true, "rows": 0})),
        ("resize", json!({"session_id": id, "rows": 0, "cols": 80})),
    ] {
        let (code, msg) = d.err(method, params);
        let rows = "Invalid params: rows: must be a whole number from 1 to 4096, got 0";
        assert_eq!((code, msg.as_str()), (-32602, rows), "{method}");
    }
    d.ok("kill", json!({"session_id": id}));
    assert_still_serving(&d);
}

#[test]
fn a_notification_gets_no_response_but_runs() {
    let d = Daemon::start();
    let mut c = d.connect();
    // A notification (no id) that spawns: no answer, but the session exists.
    c.send_raw(r#"{"jsonrpc":"2.0","method":"spawn","params":{"command":"echo from-notification","task_id":"n"}}"#);
    c.send_raw(r#"{"jsonrpc":"2.0","method":"no_such_method"}"#);
    c.send_raw(r#"{"jsonrpc":"2.0","id":"after","method":"status"}"#);
    let r = c.recv();
    assert_eq!(
        r["id"], "after",
        "the first line answered must be the request: {r}"
    );
    wait_until("the notification's spawn is listed", || {
        d.ok("list", json!({"task_id": "n"}))["processes"]
            .as_array()
            .is_some_and(|p| p.len() == 1)
    });
}

#[test]
fn a_null_id_is_a_request_not_a_notification() {
    let d = Daemon::start();
    let mut c = d.connect();
    c.send_raw(r#"{"jsonrpc":"2.0","id":null,"method":"status"}"#);
    let r = c.recv();
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(r["id"], Value::Null);
}

#[test]
fn batches_answer_each_request_and_skip_notifications() {
    let d = Daemon::start();
    let mut c = d.connect();
    c.send_raw(
        r#"[{"jsonrpc":"2.0","id":1,"method":"status"},
            {"jsonrpc":"2.0","method":"status"},
            {"jsonrpc":"2.0","id":2,"method":"nope"},
            7]"#
        .replace('\n', " ")
        .as_str(),
    );
    let r = c.recv();
    let items = r.as_array().expect("a batch answer is an array");
    assert_eq!(items.len(), 3, "{r}");
    let by_id = |id: Value| items.iter().find(|i| i["id"] == id).cloned();
    assert!(by_id(json!(1)).expect("id 1")["result"].is_object());
    assert_eq!(by_id(json!(2)).expect("id 2")["error"]["code"], -32601);
    assert!(items.iter().any(|i| i["error"]["code"] == -32600));

    c.send_raw("[]");
    assert_eq!(c.recv()["error"]["code"], -32600);
    c.send_raw(r#"[{"jsonrpc":"2.0","method":"status"}]"#);
    c.send_raw(r#"{"jsonrpc":"2.0","id":3,"method":"status"}"#);
    assert_eq!(
        c.recv()["id"],
        3,
        "an all-notification batch gets no answer"
    );
}

#[test]
fn an_over_long_line_is_refused_and_the_connection_closed() {
    let d = Daemon::with_config("max_request_bytes = 4096");
    let mut c = d.connect();
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"spawn","params":{{"command":"echo {}"}}}}"#,
        "x".repeat(10_000)
    );
    c.send_raw(&big);
    let r = c.recv();
    assert_eq!(r["error"]["code"], -32600);
    assert!(r["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("max_request_bytes"));
    assert!(c.recv_raw().is_none(), "the connection is closed");
    assert_eq!(d.ok("list", json!({}))["processes"], json!([]));
    assert_still_serving(&d);
}

#[test]
fn requests_on_one_connection_run_concurrently() {
    let d = Daemon::start();
    let id = d.spawn("sleep 30");
    let mut c = d.connect();
    c.send_raw(
        &json!({"jsonrpc":"2.0","id":1,"method":"wait","params":{"session_id":id,"timeout_s":60}})
            .to_string(),
    );
    c.send_raw(
        &json!({"jsonrpc":"2.0","id":2,"method":"poll","params":{"session_id":id}}).to_string(),
    );
    let first = c.recv();
    assert_eq!(
        first["id"], 2,
        "poll is answered while wait is pending: {first}"
    );
    d.ok("kill", json!({"session_id": id}));
    let second = c.recv();
    assert_eq!(second["id"], 1);
    assert_eq!(second["result"]["status"], "exited");
}

#[test]
fn files_are_private_and_a_second_daemon_exits_17() {
    let d = Daemon::start();
    let run = d.home.path().join("run");
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&run), 0o700);
    assert_eq!(mode(&d.socket()), 0o600);
    assert_eq!(mode(&d.state_dir()), 0o700);
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("gateway.json")).expect("state"))
            .expect("json");
    assert_eq!(state["pid"].as_u64(), Some(u64::from(d.pid())));
    assert_eq!(state["launch_mode"], "foreground");
    let identity = state["identity"].as_str().expect("identity");
    let start = start_time(d.pid() as i32).expect("start time");
    assert!(identity.ends_with(&format!(":{start}")), "{identity}");

    let out = std::process::Command::new(BIN)
        .args(["daemon", "--home"])
        .arg(d.home.path())
        .output()
        .expect("second daemon");
    assert_eq!(out.status.code(), Some(17));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("procd is already running (pid {})", d.pid())),
        "{stderr}"
    );
    let after: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("gateway.json")).expect("state"))
            .expect("json");
    assert_eq!(after, state, "the first daemon's state is untouched");
    assert_still_serving(&d);
}

#[test]
fn a_stale_socket_and_state_are_replaced() {
    let home = short_tempdir();
    let run = home.path().join("run");
    std::fs::create_dir_all(&run).expect("mkdir");
    // A socket file nobody listens on, and a state naming a dead process.
    drop(std::os::unix::net::UnixListener::bind(run.join("procd.sock")).expect("bind"));
    std::fs::write(
        run.join("gateway.json"),
        r#"{"pid": 999999, "identity": "999999:1", "started_at": "", "launch_mode": "foreground", "socket": ""}"#,
    )
    .expect("state");
    let d = Daemon::in_home(home, "");
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(d.home.path().join("run/gateway.json")).expect("state"),
    )
    .expect("json");
    assert_eq!(state["pid"].as_u64(), Some(u64::from(d.pid())));
    assert_still_serving(&d);
}

#[test]
fn shutdown_ends_sessions_and_removes_socket_and_state() {
    let mut d = Daemon::start();
    let id = d.spawn("sleep 300 & sleep 300");
    let pids = {
        let mut pids = Vec::new();
        wait_until("both sleeps run", || {
            pids = session_pids(&id);
            pids.len() >= 3
        });
        pids
    };
    assert_eq!(d.ok("shutdown", json!({}))["status"], "stopping");
    assert_eq!(d.wait_exit_code(), Some(0));
    for pid in pids {
        assert!(!alive(pid), "pid {pid} outlived the daemon");
    }
    assert!(!d.socket().exists());
    assert!(!d.home.path().join("run/gateway.json").exists());
}

#[test]
fn sigterm_stops_the_daemon_cleanly() {
    let mut d = Daemon::start();
    let id = d.spawn("sleep 300");
    wait_until("sleep runs", || !session_pids(&id).is_empty());
    let pids = session_pids(&id);
    assert_eq!(d.stop(), Some(0));
    assert!(pids.iter().all(|p| !alive(*p)));
    assert!(!d.home.path().join("run/gateway.json").exists());
}

#[test]
fn a_peer_with_another_uid_is_refused_before_any_request_and_told_why() {
    use std::os::unix::process::CommandExt;
    let d = Daemon::start();
    // Open the way past file permissions so that only the uid check remains.
    let run = d.home.path().join("run");
    for (path, mode) in [
        (d.home.path().to_path_buf(), 0o755),
        (run, 0o755),
        (d.socket(), 0o777),
    ] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let probe = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(10)
try:
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"status"}\n')
except (BrokenPipeError, ConnectionResetError):
    pass  # refused before our request: what it said is still to be read
data = b''
while True:
    try:
        chunk = s.recv(4096)
    except ConnectionResetError:
        break
    if not chunk:
        break
    data += chunk
print("answer:" + data.decode())
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", probe])
        .arg(d.socket())
        .uid(65534)
        .gid(65534)
        .output()
        .expect("probe as nobody");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    // Nothing is served; the one line it gets says why (-32005).
    let line = text.trim().strip_prefix("answer:").unwrap_or_default();
    let answer: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("a JSON-RPC error line, not {line:?}: {e}"));
    assert_eq!(answer["error"]["code"], -32005, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("permission denied"),
        "{answer}"
    );
    assert!(
        answer.get("result").is_none(),
        "a foreign uid gets nothing: {answer}"
    );
    assert_still_serving(&d);
}

#[test]
fn every_numeric_parameter_is_checked_before_anything_happens() {
    // docs/SECURITY.md: negative, non-finite, fractional counts, wrong types and
    // values past a field's limit are -32602 naming the field, for every
    // numeric parameter of every method, and nothing runs.
    let d = Daemon::start();
    let live = d.spawn("sleep 300");
    let durations = [json!(-1), json!(1e20), json!("5"), json!({}), json!([1])];
    let counts = [
        json!(-1),
        json!(1.5),
        json!(9007199254740993u64),
        json!(1e300),
        json!("3"),
    ];
    let sizes = [json!(0), json!(4097), json!(-3), json!(70000), json!(2.5)];
    let table: &[(&str, Value, &str, &[Value])] = &[
        (
            "spawn",
            json!({"command": "echo SHOULD-NOT-RUN"}),
            "timeout_s",
            &durations,
        ),
        (
            "spawn",
            json!({"command": "echo SHOULD-NOT-RUN"}),
            "yield_ms",
            &durations,
        ),
        (
            "spawn",
            json!({"command": "echo SHOULD-NOT-RUN"}),
            "max_output_chars",
            &counts,
        ),
        (
            "spawn",
            json!({"command": "echo SHOULD-NOT-RUN"}),
            "max_output_tokens",
            &counts,
        ),
        (
            "spawn",
            json!({"command": "echo SHOULD-NOT-RUN", "pty": true}),
            "rows",
            &sizes,
        ),
        (
            "spawn",
            json!({"command": "echo SHOULD-NOT-RUN", "pty": true}),
            "cols",
            &sizes,
        ),
        (
            "poll",
            json!({"session_id": live}),
            "max_output_chars",
            &counts,
        ),
        ("read", json!({"session_id": live}), "cursor", &counts),
        ("read", json!({"session_id": live}), "max_bytes", &counts),
        ("read", json!({"session_id": live}), "wait_ms", &durations),
        ("log", json!({"session_id": live}), "offset", &counts),
        ("log", json!({"session_id": live}), "limit", &counts),
        ("wait", json!({"session_id": live}), "timeout_s", &durations),
        (
            "wait",
            json!({"session_id": live}),
            "max_output_tokens",
            &counts,
        ),
        // A negative grace is clamped to 0 (docs/SECURITY.md): only the absurd.
        (
            "kill",
            json!({"session_id": live}),
            "grace_s",
            &[json!(-1e20), json!(1e20), json!("5")],
        ),
        (
            "write_stdin",
            json!({"session_id": live, "data": "x"}),
            "yield_ms",
            &durations,
        ),
        (
            "submit_stdin",
            json!({"session_id": live, "data": "x"}),
            "yield_ms",
            &durations,
        ),
        (
            "resize",
            json!({"session_id": live, "rows": 10, "cols": 10}),
            "rows",
            &sizes,
        ),
        (
            "resize",
            json!({"session_id": live, "rows": 10, "cols": 10}),
            "cols",
            &sizes,
        ),
        (
            "subscribe_output",
            json!({"session_id": live}),
            "cursor",
            &counts,
        ),
        ("has_active", json!({}), "max_active_age_s", &durations),
        ("shutdown", json!({}), "timeout_s", &durations),
    ];
    let mut conn = d.connect();
    for (method, base, field, bad_values) in table {
        for bad in bad_values.iter() {
            let mut params = base.clone();
            params[*field] = bad.clone();
            let resp = conn.call(method, params.clone());
            let err = &resp["error"];
            assert_eq!(err["code"], -32602, "{method}({params}) -> {resp}");
            let msg = err["message"].as_str().unwrap_or("");
            assert!(
                msg.contains(field),
                "{method}({params}): {msg:?} names no field"
            );
        }
    }
    // Nothing ran, nothing was killed, the daemon still serves.
    let list = d.ok("list", json!({}));
    assert_eq!(
        list["processes"].as_array().map(Vec::len),
        Some(1),
        "{list}"
    );
    assert_eq!(
        d.ok("poll", json!({"session_id": live}))["status"],
        "running"
    );
    assert_still_serving(&d);
}

// ----- connections that misbehave (docs/SECURITY.md) ------------------------------------

#[test]
fn a_client_that_pauses_reading_is_answered_when_it_reads_again() {
    // A busy subscription plus 65 pipelined waits (one more than may run
    // at once), and the client stops reading while the waits time out: the
    // connection must not deadlock, and every wait is answered.
    let d = Daemon::start();
    // Output starts once the waits have all been read, then floods.
    let busy = d.spawn("sleep 0.3; while true; do echo line-of-output-to-fill-buffers; done");
    let idle = d.spawn("sleep 300");
    let mut c = d.connect();
    c.send_raw(&json!({"jsonrpc": "2.0", "id": 0, "method": "subscribe_output", "params": {"session_id": busy}}).to_string());
    for id in 1..=65 {
        c.send_raw(&json!({"jsonrpc": "2.0", "id": id, "method": "wait", "params": {"session_id": idle, "timeout_s": 3}}).to_string());
    }
    // Not reading until well after the waits have timed out. (Before the
    // fix, the 65th wait held the connection's loop while the subscription
    // filled its queue, and the timed-out waits could never hand in their
    // answers: none ever came.)
    let paused = Instant::now();
    wait_until("the waits have timed out", || {
        paused.elapsed() > Duration::from_millis(4500)
    });
    let mut answered = std::collections::HashSet::new();
    while answered.len() < 65 {
        let msg = c.recv();
        if let Some(id) = msg["id"].as_u64().filter(|id| *id >= 1) {
            assert_eq!(msg["result"]["status"], "timeout", "{msg}");
            answered.insert(id);
        }
    }
    // Another client is served meanwhile, and the daemon still stops.
    assert_still_serving(&d);
    d.ok("kill", json!({"session_id": busy}));
    drop(c);
}

#[test]
fn a_departed_clients_waits_are_cancelled_and_its_connection_freed() {
    let d = Daemon::start();
    let idle = d.spawn("sleep 300");
    let mut gone = d.connect();
    for id in 1..=10 {
        gone.send_raw(&json!({"jsonrpc": "2.0", "id": id, "method": "wait", "params": {"session_id": idle, "timeout_s": 300}}).to_string());
    }
    // A request on the same connection is answered after the waits were
    // read, so they are in flight when the client goes.
    assert_eq!(gone.call("status", json!({}))["result"]["running"], 1);
    drop(gone);
    let log = d.home.path().join("daemon.err");
    wait_until(
        "the waits are cancelled with their client, not 300 s later",
        || {
            std::fs::read_to_string(&log).is_ok_and(|l| {
                l.contains("cancelled=10") && l.contains("a client left with requests in flight")
            })
        },
    );
    assert_still_serving(&d);
}

#[test]
fn a_client_that_never_reads_does_not_hold_up_shutdown() {
    // docs/SECURITY.md: SIGTERM ends the daemon within kill_grace_s + 2 s whatever
    // clients do; here one never reads a subscription that fills its socket.
    let mut d = Daemon::with_config("kill_grace_s = 0.5");
    let busy =
        d.spawn("sleep 0.3; while true; do echo more-output-for-a-client-that-never-reads; done");
    let idle = d.spawn("sleep 300");
    let mut stuck = d.connect();
    stuck.send_raw(&json!({"jsonrpc": "2.0", "id": 0, "method": "subscribe_output", "params": {"session_id": busy}}).to_string());
    for id in 1..=65 {
        stuck.send_raw(&json!({"jsonrpc": "2.0", "id": id, "method": "wait", "params": {"session_id": idle, "timeout_s": 1}}).to_string());
    }
    // The output has filled whatever the client will never read.
    let _ = d.read_until(&busy, "more-output");
    let flooding = Instant::now();
    wait_until("the waits have timed out", || {
        flooding.elapsed() > Duration::from_millis(2500)
    });
    assert_eq!(d.stop(), Some(0), "SIGTERM ends the daemon");
    drop(stuck);
}

#[test]
fn idle_connections_do_not_keep_a_new_client_out() {
    // 600 idle connections (past the cap of 512): a new client is still
    // answered, and the longest idle connections were closed to make
    // room. The longest idle of all was answered once before: it waits
    // in its read loop, not for its first byte, and is closed there too.
    let d = Daemon::start();
    let mut served = d.connect();
    let status = served.call("status", json!({}));
    assert!(status["result"]["pid"].is_number(), "{status}");
    let mut idle: Vec<std::os::unix::net::UnixStream> = Vec::new();
    for _ in 0..600 {
        idle.push(std::os::unix::net::UnixStream::connect(d.socket()).expect("connect"));
    }
    let mut fresh = d.connect();
    let status = fresh.call("status", json!({}));
    assert!(status["result"]["pid"].is_number(), "{status}");
    // End of stream is the close (a connection left open times out the
    // read, which fails the test).
    assert_eq!(
        served.recv_raw(),
        None,
        "the served, idle connection was not closed"
    );
    // The first connections were closed by the daemon: EOF on read.
    use std::io::Read;
    let first = &mut idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 16];
    // EOF (Ok(0)) is the close; a timeout or any byte is not.
    match first.read(&mut buf) {
        Ok(0) => {}
        other => panic!("the idlest connection was not closed: {other:?}"),
    }
    // And the newest idle one is still open (nothing to read yet).
    let last = idle.last_mut().expect("connections");
    last.set_nonblocking(true).unwrap();
    let e = last
        .read(&mut buf)
        .expect_err("the newest connection is open");
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
}

#[test]
fn a_served_connection_left_open_ends_with_the_stop_not_by_abort() {
    // A connection answered once and left open waits in its read loop:
    // the stop reaches it there, so it ends on its own and the listener
    // has nothing to abort at its deadline.
    let mut d = Daemon::start();
    let mut open = d.connect();
    assert!(open.call("status", json!({}))["result"]["pid"].is_number());
    assert_eq!(d.stop(), Some(0), "SIGTERM ends the daemon");
    assert_eq!(open.recv_raw(), None, "the connection ends with the daemon");
    let log = std::fs::read_to_string(d.home.path().join("daemon.err")).expect("daemon.err");
    assert!(
        !log.contains("connections still busy at shutdown were aborted"),
        "the open connection missed the stop and was aborted:\n{log}"
    );
}

/// A repeatable pick below `n` (xorshift64 from `seed`), so that a
/// generated request that fails is the same on the next run.
fn picker(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    }
}

/// `line` as a client may space it: after each key's colon, as Python's
/// `json.dumps` does, and before the end of the line (never at its
/// start, which would send it the general way).
fn spaced(line: String, next: &mut impl FnMut(usize) -> usize) -> String {
    let line = match next(3) {
        0 => line.replace("\":", "\": "),
        1 => line.replace("\":", "\" :\t"),
        _ => line,
    };
    line + ["", " ", "\t\r"][next(3)]
}

/// Sends `line` down the fast path and, with a leading space (which
/// always takes the general path), down the general one; the answers
/// must be the same bytes.
fn both_paths_agree(fast: &mut Conn, general: &mut Conn, line: &str) {
    fast.send_raw(line);
    general.send_raw(&format!(" {line}"));
    let (a, b) = (fast.recv_raw(), general.recv_raw());
    assert_eq!(a, b, "the two paths answer {line} differently");
}

/// Requests in poll's common shape are answered by a fast path, not by
/// jsonrpsee (crates/procd-server/src/fast.rs). Whatever the request, the
/// answer must be byte for byte jsonrpsee's: 10 000 generated polls, valid
/// and not, are each sent as they are and with a leading space (which
/// always takes the general path), and the two answers compared.
#[test]
fn fast_poll_answers_byte_for_byte_as_jsonrpsee_does() {
    let d = Daemon::start();
    let sessions: Vec<String> = [
        json!({"command": "printf 'h\\303\\251llo \"quoted\" \\t tab \\\\ back \\001 ctrl\\n'; exit 3"}),
        json!({"command": "echo on a terminal; exit 0", "pty": true}),
        json!({"command": "kill -9 $$"}),
        json!({"command": "seq 1 5000"}),
        // A name, a sandbox, restarts: each answered with its own fields.
        json!({"command": "exit 0", "name": "boxed", "sandbox": "read-only"}),
        json!({"command": "exit 1", "restart": {"policy": "on-failure", "max_restarts": 1, "backoff_s": 0.05}}),
    ]
    .into_iter()
    .map(|p| d.spawn_with(p))
    .collect();
    for id in &sessions {
        d.wait_exit(id);
    }
    let mut sids: Vec<String> = sessions.iter().map(|s| format!("\"{s}\"")).collect();
    sids.extend(
        [
            "\"proc_000000000000\"",
            "\"\"",
            "\"proc_\\u0030\"",
            "5",
            "null",
            "[\"x\"]",
        ]
        .map(String::from),
    );
    let ids = [
        "0",
        "1",
        "42",
        "18446744073709551615",
        "18446744073709551616",
        "-1",
        "01",
        "1.5",
        "1e2",
        "\"a\"",
        "\"\"",
        "\"x y\"",
        "\"q\\\"q\"",
        "\"\\u00e9\"",
        "null",
        "true",
    ];
    let mut next = picker(0x9e37_79b9_7f4a_7c15);
    let mut fast = d.connect();
    let mut general = d.connect();
    let mut common_shape = 0;
    for _ in 0..10_000 {
        let id = ids[next(ids.len())];
        let sid = &sids[next(sids.len())];
        let mut params = vec![format!("\"session_id\":{sid}")];
        match next(8) {
            0 => params.push("\"max_output_chars\":10".into()),
            1 => params.push("\"unknown\":1".into()),
            2 => params.push(format!("\"session_id\":{sid}")),
            3 => params.clear(),
            _ => {}
        }
        let jsonrpc = ["\"2.0\"", "\"2.0\"", "\"2.0\"", "\"1.0\""][next(4)];
        let method = [
            "\"poll\"",
            "\"poll\"",
            "\"poll\"",
            "\"Poll\"",
            "\"has_active\"",
        ][next(5)];
        let mut fields = [
            format!("\"jsonrpc\":{jsonrpc}"),
            format!("\"id\":{id}"),
            format!("\"method\":{method}"),
            format!("\"params\":{{{}}}", params.join(",")),
        ];
        // Any order of the four keys, sometimes with spaces between.
        for i in (1..fields.len()).rev() {
            fields.swap(i, next(i + 1));
        }
        let sep = [",", ", "][next(2)];
        let line = spaced(format!("{{{}}}", fields.join(sep)), &mut next);
        if jsonrpc == "\"2.0\"" && method == "\"poll\"" && params.len() == 1 {
            common_shape += 1;
        }
        both_paths_agree(&mut fast, &mut general, &line);
    }
    assert!(
        common_shape > 1000,
        "{common_shape} requests in poll's common shape"
    );
}

/// `read` in its common shape (session_id, and cursor and max_bytes if
/// any) is answered by the fast path too, when it can answer at once.
/// 10 000 generated reads, valid and not, some of them from a log file
/// (the general path's), each sent as it is and with a leading space,
/// and the two answers compared byte for byte.
#[test]
fn fast_read_answers_byte_for_byte_as_jsonrpsee_does() {
    let d = Daemon::start();
    let sessions: Vec<String> = [
        json!({"command": "printf 'h\\303\\251llo \"quoted\" \\t tab \\\\ back \\001 ctrl\\n'; exit 3"}),
        json!({"command": "echo on a terminal; exit 0", "pty": true}),
        json!({"command": "seq 1 5000"}),
        // Past the memory tail: its start is read from the log file.
        json!({"command": "seq 1 100000"}),
        json!({"command": "echo token ghp_abcdefghijklmnopqrstuvwxyz0123456789 here"}),
        // Every control byte, each escaped its own way.
        json!({"command": "printf 'a\\000\\001\\002\\003\\004\\005\\006\\007\\010\\011\\013\\014\\015\\016\\017\\020\\021\\022\\023\\024\\025\\026\\027\\030\\031\\032\\033\\034\\035\\036\\037\\177 z\\n'"}),
    ]
    .into_iter()
    .map(|p| d.spawn_with(p))
    .collect();
    for id in &sessions {
        d.wait_exit(id);
    }
    let running = d.spawn_with(json!({"command": "echo live; exec sleep 300"}));
    let mut sids: Vec<String> = sessions.iter().map(|s| format!("\"{s}\"")).collect();
    sids.push(format!("\"{running}\""));
    sids.extend(["\"proc_000000000000\"", "\"\"", "5", "null"].map(String::from));
    let numbers = [
        "0",
        "1",
        "7",
        "4096",
        "65536",
        "600000",
        "9007199254740993",
        "-1",
        "1.5",
        "\"3\"",
        "null",
    ];
    let ids = [
        "0",
        "9",
        "18446744073709551615",
        "-1",
        "\"a\"",
        "\"q\\\"q\"",
        "null",
    ];
    let mut next = picker(0x2545_f491_4f6c_dd1d);
    let mut fast = d.connect();
    let mut general = d.connect();
    let mut common_shape = 0;
    for _ in 0..10_000 {
        let id = ids[next(ids.len())];
        let sid = &sids[next(sids.len())];
        let mut params = vec![format!("\"session_id\":{sid}")];
        let mut common = true;
        if next(3) > 0 {
            params.push(format!("\"cursor\":{}", numbers[next(numbers.len())]));
        }
        if next(3) > 0 {
            params.push(format!("\"max_bytes\":{}", numbers[next(numbers.len())]));
        }
        match next(10) {
            0 => params.push("\"wait_ms\":0".into()),
            1 => params.push("\"max_output_chars\":50".into()),
            2 => params.push("\"cursr\":1".into()),
            3 => params.push(format!("\"session_id\":{sid}")),
            _ => {}
        }
        if params.len() > 3
            || params
                .iter()
                .any(|p| p.contains("wait_ms") || p.contains("max_output") || p.contains("cursr"))
        {
            common = false;
        }
        for i in (1..params.len()).rev() {
            params.swap(i, next(i + 1));
        }
        let method = ["\"read\"", "\"read\"", "\"read\"", "\"Read\""][next(4)];
        let mut fields = [
            "\"jsonrpc\":\"2.0\"".to_string(),
            format!("\"id\":{id}"),
            format!("\"method\":{method}"),
            format!("\"params\":{{{}}}", params.join(",")),
        ];
        for i in (1..fields.len()).rev() {
            fields.swap(i, next(i + 1));
        }
        let line = spaced(
            format!("{{{}}}", fields.join([",", ", "][next(2)])),
            &mut next,
        );
        if common && method == "\"read\"" {
            common_shape += 1;
        }
        both_paths_agree(&mut fast, &mut general, &line);
    }
    assert!(
        common_shape > 3000,
        "{common_shape} requests in read's common shape"
    );
    d.ok("kill", json!({"session_id": running}));
}
