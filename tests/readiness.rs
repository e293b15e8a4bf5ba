//! docs/agents.md against a real daemon: readiness (output, port, http, the
//! timeout), waiting for input (pipe `read`, PTY `input()`, node's epoll;
//! never a sleeping, computing or other-pipe-reading process), and the
//! events and early yields that come with them.

use crate::common::*;
use serde_json::{json, Value};

/// A TCP port nothing listens on right now (the OS picked it).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A python one-liner that listens on `port` after `delay` seconds.
fn server_after(delay: f64, port: u16) -> String {
    format!(
        "sleep {delay}; python3 -c \"import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',{port}))\ns.listen()\ntime.sleep(300)\""
    )
}

/// Drains until an event of `kind` for `id` shows up; returns it.
fn drained_event(d: &Daemon, kind: &str, id: &str) -> Value {
    let mut found = Value::Null;
    wait_until(&format!("a {kind} event for {id}"), || {
        let events = d.ok("drain_notifications", json!({}))["events"].clone();
        if let Some(e) = events
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["type"] == kind && e["session_id"] == id)
        {
            found = e.clone();
        }
        !found.is_null()
    });
    found
}

#[test]
fn an_output_line_makes_a_session_ready_and_the_yield_waits_for_it() {
    let d = Daemon::start();
    // Quiet for a second after "compiling": without the condition the
    // yield would return then (it returns on 300 ms of quiet).
    let r = d.ok(
        "spawn",
        json!({
            "command": "echo compiling; sleep 1; echo; printf '\\033[32mLocal: http://localhost:5173/\\033[0m\\n'; sleep 300",
            "ready": {"output": "^Local: +http://"},
            "yield_ms": 60000,
        }),
    );
    let id = r["session_id"].as_str().unwrap();
    assert_eq!(r["ready"], true, "{r}");
    assert_eq!(r["status"], "running");
    assert!(r["output"].as_str().unwrap().contains("Local:"), "{r}");
    let p = d.ok("poll", json!({"session_id": id}));
    assert_eq!(p["ready"], true);
    // It cannot be ready before the line was printed, a second in.
    assert!(p["ready_after_ms"].as_u64().unwrap() >= 1000, "{p}");
    let e = drained_event(&d, "ready", id);
    assert_eq!(e["after_ms"], p["ready_after_ms"]);
    assert!(e["text"].as_str().unwrap().contains("is ready"), "{e}");
    let listed = d.ok("list", json!({}))["processes"][0].clone();
    assert_eq!(listed["ready"], true);
    d.ok("kill", json!({"session_id": id}));
    // Once met it stays met.
    assert_eq!(d.ok("poll", json!({"session_id": id}))["ready"], true);
}

#[test]
fn a_port_opened_by_a_child_makes_a_session_ready() {
    let d = Daemon::start();
    let port = free_port();
    let r = d.ok(
        "spawn",
        json!({
            "command": format!("echo starting; {}", server_after(1.0, port)),
            "ready": {"port": port},
            "yield_ms": 60000,
        }),
    );
    let id = r["session_id"].as_str().unwrap();
    assert_eq!(r["ready"], true, "{r}");
    let e = drained_event(&d, "ready", id);
    assert_eq!(e["ports"], json!([port]), "{e}");
    assert_eq!(
        d.ok("poll", json!({"session_id": id}))["ports"],
        json!([port])
    );
    d.ok("kill", json!({"session_id": id}));

    // "any" port, while the session's other conditions hold too.
    let port = free_port();
    let r = d.ok(
        "spawn",
        json!({
            "command": format!("echo up; {}", server_after(0.5, port)),
            "ready": {"port": "any", "output": "^up$"},
            "yield_ms": 60000,
        }),
    );
    assert_eq!(r["ready"], true, "{r}");
    d.ok("kill", json!({"session_id": r["session_id"]}));
}

#[test]
fn an_http_check_needs_a_2xx_or_3xx_answer_from_the_loopback() {
    let d = Daemon::start();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("health"), "ok").unwrap();
    let serve = format!("sleep 0.5; exec python3 -m http.server {port} --bind 127.0.0.1");
    let r = d.ok(
        "spawn",
        json!({
            "command": serve,
            "cwd": dir.path(),
            "ready": {"http": format!("http://localhost:{port}/health")},
            "yield_ms": 60000,
        }),
    );
    let id = r["session_id"].as_str().unwrap().to_string();
    assert_eq!(r["ready"], true, "{r}");
    // The same server answers 404 for a missing path: never ready; the
    // timeout is reported once and the session keeps running.
    let r = d.ok(
        "spawn",
        json!({
            "command": "sleep 300",
            "ready": {"http": format!("http://127.0.0.1:{port}/missing"), "timeout_s": 1},
            "yield_ms": 60000,
        }),
    );
    let missing = r["session_id"].as_str().unwrap();
    assert_eq!(r["ready"], false, "{r}");
    assert_eq!(r["status"], "running");
    let e = drained_event(&d, "ready_timeout", missing);
    assert_eq!(e["timeout_s"], 1.0);
    let p = d.ok("poll", json!({"session_id": missing}));
    assert_eq!(
        (p["ready"].clone(), p["status"].clone()),
        (json!(false), json!("running"))
    );
    assert!(p["ready_after_ms"].is_null());
    d.ok("kill", json!({"session_id": missing}));
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn ready_conditions_are_validated_and_absent_ones_read_null() {
    let d = Daemon::start();
    for (ready, names) in [
        (json!({"port": 0}), "ready.port"),
        (json!({"port": 65536}), "ready.port"),
        (json!({"port": "some"}), "ready"),
        (json!({"output": "("}), "ready.output"),
        (json!({"http": "http://10.0.0.1:80/"}), "ready.http"),
        (json!({"http": "https://127.0.0.1/"}), "ready.http"),
        (json!({"timeout_s": 5}), "at least one"),
        (json!({"port": 80, "timeout_s": 0}), "ready.timeout_s"),
        (json!({"prot": 80}), "prot"),
        (json!("port 80"), "ready"),
    ] {
        let (code, msg) = d.err("spawn", json!({"command": "true", "ready": ready}));
        assert_eq!(code, -32602, "{ready}: {msg}");
        assert!(msg.contains(names), "{ready}: {msg}");
    }
    assert_eq!(
        d.ok("list", json!({}))["processes"],
        json!([]),
        "nothing ran"
    );
    let id = d.spawn("sleep 300");
    let p = d.ok("poll", json!({"session_id": id}));
    assert!(p["ready"].is_null() && p["ready_after_ms"].is_null(), "{p}");
    assert_eq!(p["waiting_for_input"], false);
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn a_ready_session_that_exits_first_is_never_ready() {
    let d = Daemon::start();
    let r = d.ok(
        "spawn",
        json!({"command": "echo oops; exit 3", "ready": {"port": "any"}, "yield_ms": 60000}),
    );
    assert_eq!(r["status"], "exited", "{r}");
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["ready"], false);
}

#[test]
fn a_pipe_prompt_is_reported_and_answered() {
    let d = Daemon::with_config("monitor_interval_s = 0.1");
    let r = d.ok(
        "spawn",
        json!({
            "command": "printf 'Overwrite config? [y/N] '; read answer; echo \"got $answer\"; read more; echo \"then $more\"",
            "yield_ms": 60000,
        }),
    );
    let id = r["session_id"].as_str().unwrap().to_string();
    // The yield came back because it asks, not at its deadline.
    assert_eq!(r["waiting_for_input"], true, "{r}");
    assert_eq!(r["status"], "running");
    assert!(r["output"].as_str().unwrap().contains("[y/N]"), "{r}");
    let e = drained_event(&d, "input_wanted", &id);
    assert_eq!(e["prompt"], "Overwrite config? [y/N]", "{e}");
    wait_until("poll says it waits for input", || {
        d.ok("poll", json!({"session_id": id}))["waiting_for_input"] == true
    });
    // One event per episode: five more monitor ticks (0.1 s each, by the
    // daemon's own uptime) queue no second one for the same prompt.
    let uptime = || {
        d.ok("status", json!({}))["uptime_seconds"]
            .as_f64()
            .unwrap_or(0.0)
    };
    let since = uptime();
    wait_until("five more monitor ticks", || uptime() > since + 0.5);
    let repeated = d.ok("drain_notifications", json!({}))["events"].clone();
    assert!(
        !repeated.to_string().contains("input_wanted"),
        "one event per prompt: {repeated}"
    );
    // Answering: the write's yield returns when it asks again (no output
    // in between this time: the second read prints nothing first).
    let w = d.ok(
        "submit_stdin",
        json!({"session_id": id, "data": "y", "yield_ms": 60000}),
    );
    assert_eq!(w["waiting_for_input"], true, "{w}");
    assert!(w["output"].as_str().unwrap().contains("got y"), "{w}");
    // The answer began a new episode: its event (if the probe or a tick
    // sent it yet) names the new last line (the pipe echoes no answer, so
    // it continues the prompt's line).
    let events = d.ok("drain_notifications", json!({}))["events"].clone();
    for e in events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "input_wanted")
    {
        assert_eq!(e["prompt"], "Overwrite config? [y/N] got y", "{events}");
    }
    let w = d.ok(
        "submit_stdin",
        json!({"session_id": id, "data": "z", "yield_ms": 60000}),
    );
    assert_eq!(w["session_status"], "exited", "{w}");
    assert_eq!(w["waiting_for_input"], false);
    assert!(w["output"].as_str().unwrap().contains("then z"), "{w}");
}

#[test]
fn a_terminal_prompt_is_reported_and_answered() {
    let d = Daemon::start();
    let r = d.ok(
        "spawn",
        json!({
            "command": "python3 -c 'name = input(\"Your name: \"); print(\"hello\", name)'",
            "pty": true,
            "yield_ms": 60000,
        }),
    );
    let id = r["session_id"].as_str().unwrap().to_string();
    assert_eq!(r["waiting_for_input"], true, "{r}");
    assert!(r["output"].as_str().unwrap().contains("Your name:"), "{r}");
    let e = drained_event(&d, "input_wanted", &id);
    assert_eq!(e["prompt"], "Your name:");
    let w = d.ok(
        "submit_stdin",
        json!({"session_id": id, "data": "ada", "yield_ms": 60000}),
    );
    assert!(w["output"].as_str().unwrap().contains("hello ada"), "{w}");
    assert_eq!(w["session_status"], "exited", "{w}");
}

#[test]
fn a_node_readline_question_is_reported() {
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: node is not installed");
        return;
    }
    let d = Daemon::start();
    let r = d.ok(
        "spawn",
        json!({
            "command": "node -e 'require(\"readline\").createInterface({input: process.stdin, output: process.stdout}).question(\"Project name? \", a => { console.log(\"ok\", a); process.exit(0) })'",
            "yield_ms": 60000,
        }),
    );
    let id = r["session_id"].as_str().unwrap().to_string();
    assert_eq!(r["waiting_for_input"], true, "{r}");
    let w = d.ok(
        "submit_stdin",
        json!({"session_id": id, "data": "demo", "yield_ms": 60000}),
    );
    assert!(w["output"].as_str().unwrap().contains("ok demo"), "{w}");
}

#[test]
fn sleeping_busy_and_other_pipe_readers_are_not_waiting_for_input() {
    let d = Daemon::with_config("monitor_interval_s = 0.1");
    let commands = [
        "sleep 300",
        "python3 -c 'while True: pass'",
        // Blocked reading a pipe, but not the session's input.
        "sleep 300 | cat",
    ];
    let ids: Vec<String> = commands.iter().map(|c| d.spawn(c)).collect();
    // Each yield runs to its deadline: nothing asks.
    for id in &ids {
        let w = d.ok(
            "write_stdin",
            json!({"session_id": id, "data": "", "yield_ms": 1500}),
        );
        assert_eq!(w["waiting_for_input"], false, "{id}: {w}");
    }
    // The monitor has observed each (it found their processes) since the
    // last output, and still none is waiting.
    for id in &ids {
        wait_until("an observation of the tree", || {
            d.ok("poll", json!({"session_id": id}))["resources"]["procs"].as_u64() >= Some(1)
        });
        let p = d.ok("poll", json!({"session_id": id}));
        assert_eq!(p["waiting_for_input"], false, "{}: {p}", p["command"]);
    }
    let events = d.ok("drain_notifications", json!({}))["events"].clone();
    assert!(
        !events.to_string().contains("input_wanted"),
        "no input_wanted: {events}"
    );
    // A reader whose input is closed waits on nothing.
    let id = d.spawn("cat; sleep 300");
    d.ok("close_stdin", json!({"session_id": id}));
    let w = d.ok("poll", json!({"session_id": id}));
    assert_eq!(w["waiting_for_input"], false);
    for id in ids.iter().chain([&id]) {
        d.ok("kill", json!({"session_id": id}));
    }
}

#[test]
fn the_cli_waits_for_readiness_and_shows_it() {
    let d = Daemon::start();
    let port = free_port();
    let out = d.cli(&[
        "spawn",
        "--ready-port",
        &port.to_string(),
        "--",
        &server_after(0.5, port),
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("\nready"), "{text}");
    let id = text.split_whitespace().next().unwrap().to_string();
    let poll = String::from_utf8_lossy(&d.cli(&["poll", &id]).stdout).to_string();
    assert!(
        poll.contains("ready after") && poll.contains(&port.to_string()),
        "{poll}"
    );
    let bad = d.cli(&["spawn", "--ready-port", "web", "--", "true"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    d.ok("kill", json!({"session_id": id}));
}
