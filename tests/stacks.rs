//! docs/stacks.md against a real daemon: names (reuse, clash, replace,
//! lookup), stacks from procd.toml and a Procfile started in dependency
//! order with real programs (a Python HTTP server, a real Redis), `up`
//! again, `down`, a failed dependency, a cycle, and ports already taken.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;

/// A TCP port nothing listens on right now (the OS picked it).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn service<'a>(up: &'a Value, name: &str) -> &'a Value {
    up["services"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no service {name} in {up}"))
}

/// The services' names of an up or down answer, in its order.
fn names_in(answer: &Value) -> Vec<&str> {
    answer["services"]
        .as_array()
        .unwrap_or_else(|| panic!("no services in {answer}"))
        .iter()
        .map(|s| s["name"].as_str().expect("a name"))
        .collect()
}

/// `procd up --json -f FILE`, with its exit status.
fn up(d: &Daemon, file: &Path, extra: &[&str]) -> (Value, Option<i32>) {
    let mut args = vec!["up", "--json", "-f", file.to_str().expect("path")];
    args.extend_from_slice(extra);
    let out = d.cli(&args);
    (json_of(&out), out.status.code())
}

/// A Python one-liner that must reach `port` when it starts (else it
/// exits 1), then prints `says` and stays.
fn needs_port(port: u16, says: &str) -> String {
    format!(
        "python3 -c 'import socket,sys,time\ntry: socket.create_connection((\"127.0.0.1\", {port}), 2)\nexcept OSError: sys.exit(1)\nprint(\"{says}\", flush=True); time.sleep(300)'"
    )
}

#[test]
fn a_stack_starts_in_dependency_order_and_up_again_starts_nothing() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("project");
    let (db, cache) = (free_port(), free_port());
    let migrated = dir.path().join("migrated");
    let stack = format!(
        r#"project = "shop"

[service.db]
command = "exec python3 -m http.server {db} --bind 127.0.0.1"
ready = {{ port = {db} }}

[service.migrate]
command = "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {db}), 2)' && echo run >> {migrated}"
depends_on = {{ db = "ready" }}

[service.web]
command = """{web}"""
depends_on = {{ db = "ready", migrate = "completed" }}
ready = {{ output = "web up" }}

[service.cache]
command = "exec redis-server --port {cache} --save '' --appendonly no"
ready = {{ port = {cache} }}

[service.worker]
command = "test \"$(redis-cli -p {cache} PING)\" = PONG && echo first ping answered && while :; do redis-cli -p {cache} PING; sleep 1; done"
depends_on = {{ cache = "ready" }}
ready = {{ output = "^first ping answered$" }}
"#,
        migrated = migrated.display(),
        web = needs_port(db, "web up"),
    );
    let file = dir.path().join("procd.toml");
    std::fs::write(&file, stack).expect("procd.toml");

    let (first, code) = up(&d, &file, &["--wait", "30"]);
    assert_eq!(code, Some(0), "{first}");
    assert_eq!(first["project"], "shop");
    let order = names_in(&first);
    let at = |n: &str| order.iter().position(|o| *o == n).unwrap();
    assert!(
        at("db") < at("migrate") && at("migrate") < at("web"),
        "{order:?}"
    );
    assert!(at("cache") < at("worker"), "{order:?}");
    for name in ["db", "web", "cache", "worker"] {
        let s = service(&first, name);
        assert_eq!(s["status"], "running", "{name}: {first}");
        assert_eq!(s["ready"], true, "{name}: {first}");
        assert_eq!(s["reused"], false, "{name}");
    }
    // web connects to db at its start and would have exited 1 without it.
    let migrate = service(&first, "migrate");
    assert_eq!(migrate["status"], "exited", "{first}");
    assert_eq!(migrate["exit_code"], 0, "{first}");
    let ids: Vec<String> = ["db", "web", "cache", "worker"]
        .iter()
        .map(|n| {
            service(&first, n)["session_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    // Ready came with the first ping's answer; the loop's own PONG follows
    // it by a fork or two, so it is waited for, not assumed.
    let poll_worker = || d.ok("poll", json!({"name": "worker", "project": "shop"}));
    wait_until("the worker's loop has a PONG", || {
        poll_worker()["output_preview"]
            .as_str()
            .is_some_and(|p| p.contains("PONG"))
    });
    let worker = poll_worker();
    assert_eq!(worker["name"], "worker");
    assert_eq!(worker["project"], "shop");

    // Again: everything is there, nothing starts, the migration does not
    // run twice.
    let (again, code) = up(&d, &file, &[]);
    assert_eq!(code, Some(0), "{again}");
    for (name, id) in ["db", "web", "cache", "worker"].iter().zip(&ids) {
        let s = service(&again, name);
        assert_eq!(s["reused"], true, "{name}: {again}");
        assert_eq!(s["session_id"], id.as_str(), "{name}");
    }
    assert_eq!(service(&again, "migrate")["reused"], true, "{again}");
    assert_eq!(std::fs::read_to_string(&migrated).unwrap(), "run\n");
    let running = d.ok("list", json!({"status": "running"}))["processes"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(running, 4);

    let ps = String::from_utf8_lossy(&d.cli(&["ps"]).stdout).to_string();
    assert!(ps.contains("[shop]"), "{ps}");
    let text =
        String::from_utf8_lossy(&d.cli(&["up", "-f", file.to_str().unwrap()]).stdout).to_string();
    assert!(text.contains("already running"), "{text}");

    // Down: dependents first, and every process really ends.
    let pids: Vec<i32> = ids
        .iter()
        .map(|id| {
            d.ok("poll", json!({"session_id": id}))["pid"]
                .as_i64()
                .unwrap() as i32
        })
        .collect();
    let down = json_of(&d.cli(&["down", "--json", "-f", file.to_str().unwrap()]));
    let stopped = names_in(&down);
    let pos = |n: &str| stopped.iter().position(|o| *o == n).unwrap();
    assert!(
        pos("web") < pos("db") && pos("worker") < pos("cache"),
        "{down}"
    );
    assert_eq!(stopped.len(), 4, "{down}");
    for pid in pids {
        wait_until(&format!("pid {pid} ends"), || !alive(pid));
    }
    assert!(d
        .cli(&["down", "--project", "shop"])
        .stdout
        .starts_with(b"nothing of shop is running"));
}

#[test]
fn a_failed_dependency_blocks_its_dependents_and_says_why() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("project");
    let file = dir.path().join("procd.toml");
    std::fs::write(
        &file,
        r#"
[service.setup]
command = "echo no database; exit 3"

[service.app]
command = "sleep 300"
depends_on = { setup = "completed" }

[service.ui]
command = "sleep 300"
depends_on = { app = "started" }

[service.slow]
command = "sleep 300"
ready = { output = "never printed", timeout_s = 0.5 }

[service.after-slow]
command = "sleep 300"
depends_on = { slow = "ready" }

[service.flaky]
command = "echo crashing; exit 5"
restart = { policy = "on-failure", max_restarts = 1, backoff_s = 0.1 }

[service.after-flaky]
command = "sleep 300"
depends_on = { flaky = "completed" }

[service.steady]
command = "sleep 300"
restart = "always"
"#,
    )
    .expect("procd.toml");
    let (r, code) = up(&d, &file, &["--wait", "20"]);
    assert_eq!(code, Some(1), "{r}");
    let project = r["project"].as_str().unwrap().to_string();
    let app = service(&r, "app");
    assert_eq!(app["status"], "blocked", "{r}");
    assert_eq!(app["blocked_by"]["service"], "setup");
    assert!(
        app["blocked_by"]["reason"]
            .as_str()
            .unwrap()
            .contains("exit code 3"),
        "{r}"
    );
    assert_eq!(app["session_id"], Value::Null);
    let ui = service(&r, "ui");
    assert_eq!(ui["blocked_by"]["service"], "app", "{r}");
    let after = service(&r, "after-slow");
    assert!(
        after["blocked_by"]["reason"]
            .as_str()
            .unwrap()
            .contains("ready timeout"),
        "{r}"
    );
    let after = service(&r, "after-flaky");
    assert_eq!(after["blocked_by"]["service"], "flaky", "{r}");
    assert!(
        after["blocked_by"]["reason"]
            .as_str()
            .unwrap()
            .contains("a crash loop"),
        "{r}"
    );
    let steady = d.ok("poll", json!({"name": "steady", "project": project}));
    assert_eq!(
        steady["restarts"], 0,
        "the string form gives a policy: {steady}"
    );
    // Nothing was started under the blocked names.
    for name in ["app", "ui", "after-slow", "after-flaky"] {
        let (code, msg) = d.err("poll", json!({"name": name, "project": project}));
        assert_eq!(code, -32001, "{name}: {msg}");
    }
    let text = String::from_utf8_lossy(
        &d.cli(&["up", "-f", file.to_str().unwrap(), "--wait", "5"])
            .stdout,
    )
    .to_string();
    assert!(
        text.contains("blocked by setup: it did not complete: exit code 3"),
        "{text}"
    );
    d.cli(&["down", "-f", file.to_str().unwrap()]);
}

#[test]
fn a_cycle_or_an_unknown_service_is_refused_before_anything_starts() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("project");
    let file = dir.path().join("procd.toml");
    let cases = [
        (
            "[service.lonely]\ncommand='sleep 300'\n[service.a]\ncommand='sleep 300'\ndepends_on={b='ready'}\n[service.b]\ncommand='sleep 300'\ndepends_on={a='started'}\n",
            "a dependency cycle: a -> b -> a",
        ),
        (
            "[service.lonely]\ncommand='sleep 300'\n[service.a]\ncommand='sleep 300'\ndepends_on={ghost='ready'}\n",
            "unknown service \"ghost\"",
        ),
        (
            "[service.lonely]\ncommand='sleep 300'\nrestart='sometimes'\n",
            "restart: expected",
        ),
        ("[service.Lonely]\ncommand='sleep 300'\n", "\"Lonely\""),
    ];
    for (text, says) in cases {
        std::fs::write(&file, text).expect("procd.toml");
        let (code, msg) = d.err("up", json!({"file": file}));
        assert_eq!(code, -32602, "{msg}");
        assert!(msg.contains(says), "{says}: {msg}");
    }
    std::fs::write(&file, "[service.lonely]\ncommand='sleep 300'\n").expect("procd.toml");
    let (code, msg) = d.err("up", json!({"file": file, "services": ["nope"]}));
    assert_eq!(code, -32602);
    assert!(msg.contains("\"nope\""), "{msg}");
    // A FIFO would block the read for ever.
    let fifo = dir.path().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let (code, msg) = d.err("up", json!({"file": fifo}));
    assert_eq!(code, -32602);
    assert!(msg.contains("not a regular file"), "{msg}");
    let (code, msg) = d.err("up", json!({"dir": "/nonexistent-dir"}));
    assert_eq!(code, -32602);
    assert!(msg.contains("neither procd.toml nor Procfile"), "{msg}");
    let (code, msg) = d.err("up", json!({"file": file, "yield": 1}));
    assert_eq!(code, -32602);
    assert!(msg.contains("\"yield\""), "{msg}");
    assert_eq!(d.ok("list", json!({}))["processes"], json!([]));
}

#[test]
fn a_procfile_gets_foremans_ports() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("project");
    std::fs::write(
        dir.path().join("Procfile"),
        "# foreman's format\nweb: exec python3 -m http.server $PORT --bind 127.0.0.1\nclock: echo clock on $PORT; exec sleep 300\n",
    )
    .expect("Procfile");
    let r = d.ok("up", json!({"dir": dir.path(), "yield_ms": 1000}));
    assert!(r["file"].as_str().unwrap().ends_with("Procfile"), "{r}");
    let clock = service(&r, "clock")["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    d.read_until(&clock, "clock on 5100");
    let web = service(&r, "web")["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until("web listens on 5000", || {
        d.ok("poll", json!({"session_id": web}))["ports"] == json!([5000])
    });
    let project = r["project"].as_str().unwrap();
    let down = d.ok("down", json!({"project": project}));
    assert_eq!(down["services"].as_array().unwrap().len(), 2, "{down}");
}

#[test]
fn a_name_is_reused_refused_or_replaced() {
    let d = Daemon::start();
    let first = d.ok("spawn", json!({"command": "sleep 300", "name": "srv"}));
    let id = first["session_id"].as_str().unwrap().to_string();
    assert_eq!(first.get("reused"), None, "{first}");
    let again = d.ok("spawn", json!({"command": "sleep 300", "name": "srv"}));
    assert_eq!(again["reused"], true);
    assert_eq!(again["session_id"], id.as_str());
    assert_eq!(
        d.ok("list", json!({}))["processes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Another env is another service.
    let (code, msg) = d.err(
        "spawn",
        json!({"command": "sleep 300", "name": "srv", "env": {"A": "1"}}),
    );
    assert_eq!(code, -32002);
    assert!(msg.contains(&id) && msg.contains("replace"), "{msg}");

    // By name wherever a session id goes.
    assert_eq!(
        d.ok("poll", json!({"name": "srv"}))["session_id"],
        id.as_str()
    );
    let polled = String::from_utf8_lossy(&d.cli(&["poll", "srv"]).stdout).to_string();
    assert!(polled.starts_with(&id), "{polled}");
    let (code, msg) = d.err("poll", json!({"name": "srv", "session_id": id}));
    assert_eq!(code, -32602, "{msg}");
    let (code, _) = d.err("poll", json!({"name": "nosuch"}));
    assert_eq!(code, -32001);
    let (code, msg) = d.err("poll", json!({"name": "Srv"}));
    assert_eq!(code, -32602);
    assert!(msg.contains("name"), "{msg}");
    let (code, _) = d.err("spawn", json!({"command": "true", "name": "1x"}));
    assert_eq!(code, -32602);
    let (code, msg) = d.err("spawn", json!({"command": "true", "replace": true}));
    assert_eq!(code, -32602, "{msg}");

    // The same name in another project is another session; a bare name
    // then says it is ambiguous.
    let other = d.spawn_with(json!({"command": "sleep 300", "name": "srv", "project": "other"}));
    assert_ne!(other, id);
    assert_eq!(
        d.ok("poll", json!({"name": "srv"}))["session_id"],
        id.as_str()
    );
    assert_eq!(
        d.ok("poll", json!({"name": "srv", "project": "other"}))["session_id"],
        other.as_str()
    );

    // Replace: the old one is killed first, for real.
    let old_pid = d.ok("poll", json!({"session_id": id}))["pid"]
        .as_i64()
        .unwrap() as i32;
    let replaced = d.ok(
        "spawn",
        json!({"command": "sleep 301", "name": "srv", "replace": true}),
    );
    let new_id = replaced["session_id"].as_str().unwrap();
    assert_ne!(new_id, id);
    assert!(!alive(old_pid));
    assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "exited");
    assert_eq!(d.ok("poll", json!({"name": "srv"}))["session_id"], new_id);
    let other_pid = d.ok("poll", json!({"session_id": other}))["pid"]
        .as_i64()
        .unwrap() as i32;
    let killed = d.cli(&["kill", "other/srv"]);
    assert!(killed.status.success(), "{killed:?}");
    assert!(!alive(other_pid));
    d.ok("kill", json!({"name": "srv"}));
}

#[test]
fn a_name_still_stands_after_a_daemon_restart() {
    let d = Daemon::start();
    let id = d.spawn_with(json!({"command": "sleep 300", "name": "keep", "project": "p"}));
    d.kill_daemon();
    assert_eq!(
        d.ok("poll", json!({"name": "keep", "project": "p"}))["session_id"],
        id.as_str()
    );
    let again = d.ok(
        "spawn",
        json!({"command": "sleep 300", "name": "keep", "project": "p"}),
    );
    assert_eq!(again["reused"], true, "{again}");
    assert_eq!(again["session_id"], id.as_str());
    d.ok("kill", json!({"name": "keep", "project": "p"}));
}

#[test]
fn a_port_already_listening_is_reported_with_its_holder() {
    let d = Daemon::start();
    // Outside procd: this test's own listener.
    let outside = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = outside.local_addr().unwrap().port();
    let r = d.ok(
        "spawn",
        json!({"command": "sleep 300", "name": "dev", "ready": {"port": port, "timeout_s": 1}}),
    );
    let taken = &r["port_in_use"];
    assert_eq!(taken["port"], port, "{r}");
    assert_eq!(taken["pid"], std::process::id(), "{r}");
    assert_eq!(taken.get("session_id"), None, "{r}");
    let me = std::env::current_exe().unwrap();
    let me = me.file_name().unwrap().to_string_lossy();
    assert!(
        taken["command"].as_str().unwrap().contains(me.as_ref()),
        "{r}"
    );
    drop(outside);

    // Inside procd: the session whose tree listens.
    let port = free_port();
    let server = d.ok(
        "spawn",
        json!({"command": format!("exec python3 -m http.server {port} --bind 127.0.0.1"),
               "ready": {"port": port}, "yield_ms": 10000}),
    );
    assert_eq!(server["ready"], true, "{server}");
    let second = d.ok(
        "spawn",
        json!({"command": "sleep 300", "ready": {"port": port, "timeout_s": 1}}),
    );
    assert_eq!(
        second["port_in_use"]["session_id"], server["session_id"],
        "{second}"
    );
    assert_eq!(second["port_in_use"]["pid"], server["pid"], "{second}");
    let free = d.ok(
        "spawn",
        json!({"command": "sleep 300", "ready": {"port": free_port(), "timeout_s": 1}}),
    );
    assert_eq!(free.get("port_in_use"), None, "{free}");
    d.ok("kill_all", json!({}));
}

/// `port` (and `procd port`) names who listens on a port: a session of
/// this daemon with its name, cwd and command; a process of this user's
/// outside procd with its pid, command and cwd; another user's, shown by
/// uid only; or nothing (the CLI then exits 1).
#[test]
fn port_names_who_listens_a_session_a_process_another_user_or_nothing() {
    let d = Daemon::start();
    let cwd = tempfile::tempdir().expect("cwd");
    let cwd_text = cwd.path().to_str().unwrap().to_string();
    // A session: a named server in a cwd of its own.
    let port = free_port();
    let server = d.ok(
        "spawn",
        json!({"command": format!("exec python3 -m http.server {port} --bind 127.0.0.1"),
               "name": "web", "cwd": cwd_text, "ready": {"port": port}, "yield_ms": 10000}),
    );
    assert_eq!(server["ready"], true, "{server}");
    let owner = d.ok("port", json!({"port": port}));
    assert_eq!(owner["owner"], "session", "{owner}");
    assert_eq!(owner["session_id"], server["session_id"], "{owner}");
    assert_eq!(owner["name"], "web", "{owner}");
    assert_eq!(owner["cwd"], cwd_text.as_str(), "{owner}");
    assert_eq!(owner["pid"], server["pid"], "{owner}");
    assert!(
        owner["command"].as_str().unwrap().contains("http.server"),
        "{owner}"
    );
    let out = d.cli(&["port", &port.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let line = String::from_utf8_lossy(&out.stdout);
    let id = server["session_id"].as_str().unwrap();
    assert!(line.contains(id) && line.contains("(web)"), "{line}");

    // A process of this user's outside procd: this test, in its own cwd.
    let outside = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = outside.local_addr().unwrap().port();
    let owner = json_of(&d.cli(&["--json", "port", &port.to_string()]));
    assert_eq!(owner["owner"], "process", "{owner}");
    assert_eq!(owner["pid"], std::process::id(), "{owner}");
    let here = std::env::current_dir().unwrap();
    assert_eq!(owner["cwd"], here.to_str().unwrap(), "{owner}");
    let me = std::env::current_exe().unwrap();
    let me = me.file_name().unwrap().to_string_lossy();
    assert!(
        owner["command"].as_str().unwrap().contains(me.as_ref()),
        "{owner}"
    );
    assert_eq!(owner.get("session_id"), None, "{owner}");
    drop(outside);

    // Another user's listener: its uid, and nothing of the process.
    let user = crate::common::sshd::LocalUser::create();
    let port = free_port();
    let listen = format!(
        "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',{port})); s.listen(); \
         print('up', flush=True); time.sleep(300)"
    );
    let mut other = Stand(
        // setpriv execs: the pid Stand kills is the listener itself. The
        // system python: the user cannot enter root's pyenv.
        std::process::Command::new("setpriv")
            .args(["--reuid", &user.uid.to_string(), "--regid", "65534"])
            .args(["--clear-groups", "/usr/bin/python3", "-c", &listen])
            .current_dir("/tmp")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("setpriv"),
    );
    let mut up = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(other.0.stdout.take().expect("stdout"))
        .read_line(&mut up)
        .expect("read");
    assert_eq!(up, "up\n");
    let owner = d.ok("port", json!({"port": port}));
    assert_eq!(owner["owner"], "other_user", "{owner}");
    assert_eq!(owner["uid"], user.uid, "{owner}");
    for hidden in ["pid", "command", "cwd", "session_id"] {
        assert_eq!(owner.get(hidden), None, "{hidden}: {owner}");
    }
    drop(other);

    // Nothing: the CLI says so and exits 1.
    let port = free_port();
    assert_eq!(d.ok("port", json!({"port": port}))["owner"], "none");
    let out = d.cli(&["port", &port.to_string()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nothing listens"),
        "{out:?}"
    );

    // Bad input is refused by name.
    for bad in [
        json!({"port": 0}),
        json!({"port": 65536}),
        json!({"port": "x"}),
    ] {
        let (code, message) = d.err("port", bad.clone());
        assert_eq!(code, -32602, "{bad}: {message}");
        assert!(message.contains("port"), "{bad}: {message}");
    }
    let (code, message) = d.err("port", json!({"port": 80, "host": "x"}));
    assert_eq!(code, -32602, "{message}");
    assert!(message.contains("host"), "{message}");
    d.ok("kill_all", json!({}));
}

/// What a loopback HTTP server at `port` answers for `path` (the body).
fn http_body(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    write!(conn, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").expect("request");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("answer");
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or(answer)
}

/// Two git worktrees of one repo run `procd up` on the same procd.toml
/// with `port = "auto"`: each server gets a port of its own, is ready
/// there, and serves its own worktree's file; `up` prints its URL and
/// poll shows the port.
#[test]
fn two_worktrees_get_a_port_each_from_one_procd_toml() {
    let d = Daemon::start();
    let root = tempfile::tempdir().expect("root");
    let repo = root.path().join("shop");
    std::fs::create_dir(&repo).unwrap();
    let git = |dir: &Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    std::fs::write(
        repo.join("procd.toml"),
        "[service.web]\ncommand = \"exec python3 -m http.server {port} --bind 127.0.0.1\"\n\
         port = \"auto\"\nports = { ADMIN_PORT = \"auto\" }\n\
         ready = { port = \"auto\", timeout_s = 60 }\n",
    )
    .unwrap();
    std::fs::write(repo.join("which.txt"), "main tree\n").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "one"]);
    let second = root.path().join("shop-wt2");
    git(&repo, &["worktree", "add", "-q", second.to_str().unwrap()]);
    std::fs::write(second.join("which.txt"), "second tree\n").unwrap();

    let mut ports = Vec::new();
    for (tree, says) in [(&repo, "main tree\n"), (&second, "second tree\n")] {
        let file = tree.join("procd.toml");
        let out = d.cli(&["up", "-f", file.to_str().unwrap(), "--wait", "60"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let project = tree.file_name().unwrap().to_str().unwrap();
        let web = d.ok("poll", json!({"name": "web", "project": project}));
        let port = web["port"].as_u64().expect("a port") as u16;
        assert!(
            text.contains(&format!("ready at http://localhost:{port}/")),
            "{text}"
        );
        assert_eq!(web["ready"], true, "{web}");
        assert!(
            web["ports"].as_array().unwrap().contains(&json!(port)),
            "{web}"
        );
        assert_eq!(http_body(port, "/which.txt"), says);
        let admin = web["named_ports"]["ADMIN_PORT"]
            .as_u64()
            .expect("ADMIN_PORT");
        ports.push(port);
        ports.push(admin as u16);
    }
    // `up` again finds the same service running, whatever port it got.
    let file = repo.join("procd.toml");
    let again = d.cli(&["up", "-f", file.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("already running"), "{text}");
    let mut distinct = ports.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{ports:?}");
    let listed = d.ok("list", json!({"status": "running"}));
    let mut given: Vec<u64> = listed["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["port"].as_u64())
        .collect();
    given.sort();
    let mut want: Vec<u64> = ports.iter().step_by(2).map(|&p| u64::from(p)).collect();
    want.sort();
    assert_eq!(given, want, "{listed}");
    d.ok("kill_all", json!({}));
}

/// `spawn{port}`: "auto" picks a port no other session holds, given as
/// PORT and for {port}; it stays the session's across a restart; a
/// number is given the same way; bad asks are refused by name.
#[test]
fn spawn_port_auto_is_given_as_port_kept_across_restarts_and_checked() {
    let d = Daemon::start();
    // Many at once: all different.
    let spawns: Vec<Value> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let d = &d;
                scope.spawn(move || {
                    d.ok(
                        "spawn",
                        json!({"command": "echo port=$PORT arg={port}; exec sleep 300",
                               "port": "auto", "yield_ms": 5000}),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ports: Vec<u64> = spawns
        .iter()
        .map(|r| r["port"].as_u64().expect("port"))
        .collect();
    for (r, port) in spawns.iter().zip(&ports) {
        let said = format!("port={port} arg={port}");
        assert!(r["output"].as_str().unwrap().contains(&said), "{r}");
    }
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), 8, "{spawns:?}");
    d.ok("kill_all", json!({}));

    // Held across a restart: each run prints the same port.
    let r = d.ok(
        "spawn",
        json!({"command": "echo run-on-$PORT; sleep 0.2; exit 1", "port": "auto",
               "restart": {"policy": "always", "backoff_s": 0.1}}),
    );
    let (id, port) = (
        r["session_id"].as_str().unwrap(),
        r["port"].as_u64().unwrap(),
    );
    wait_until("three runs", || {
        let log = d.ok("log", json!({"session_id": id, "limit": 1000}));
        log["output"]
            .to_string()
            .matches(&format!("run-on-{port}"))
            .count()
            >= 3
    });
    let log = d.ok("log", json!({"session_id": id, "limit": 1000}))["output"].to_string();
    assert_eq!(
        log.matches("run-on-").count(),
        log.matches(&format!("run-on-{port}")).count(),
        "{log}"
    );
    d.ok("kill", json!({"session_id": id}));

    // A number is given the same way.
    let fixed = free_port();
    let r = d.ok(
        "spawn",
        json!({"command": "echo fixed=$PORT/{port}", "port": fixed, "yield_ms": 5000}),
    );
    assert_eq!(r["port"], fixed, "{r}");
    assert!(
        r["output"]
            .as_str()
            .unwrap()
            .contains(&format!("fixed={fixed}/{fixed}")),
        "{r}"
    );

    // Named ports: each in its variable and for {NAME}, all different.
    let r = d.ok(
        "spawn",
        json!({"command": "echo web=$PORT admin=$ADMIN_PORT/{ADMIN_PORT} db={DB_PORT}",
               "port": "auto", "ports": {"ADMIN_PORT": "auto", "DB_PORT": fixed},
               "yield_ms": 5000}),
    );
    let (web, admin) = (
        r["port"].as_u64().unwrap(),
        r["named_ports"]["ADMIN_PORT"].as_u64().unwrap(),
    );
    assert_ne!(web, admin, "{r}");
    assert_eq!(r["named_ports"]["DB_PORT"], fixed, "{r}");
    let said = format!("web={web} admin={admin}/{admin} db={fixed}");
    assert!(r["output"].as_str().unwrap().contains(&said), "{r}");
    let listed = d.ok("list", json!({}));
    assert!(
        listed["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["named_ports"]["ADMIN_PORT"] == admin),
        "{listed}"
    );

    // Refused by name, nothing started.
    for (bad, names) in [
        (
            json!({"command": "true", "ports": {"lower": "auto"}}),
            "lower",
        ),
        (
            json!({"command": "true", "ports": {"PORT": "auto"}}),
            "PORT",
        ),
        (
            json!({"command": "true", "ports": {"X_PORT": "auto"}, "env": {"X_PORT": "1"}}),
            "X_PORT",
        ),
        (json!({"command": "true", "port": "soon"}), "port"),
        (json!({"command": "true", "port": 0}), "port"),
        (json!({"command": "true", "port": 70000}), "port"),
        (
            json!({"command": "true", "port": "auto", "env": {"PORT": "3000"}}),
            "PORT",
        ),
        (
            json!({"command": "true", "ready": {"port": "later"}}),
            "ready.port",
        ),
    ] {
        let (code, message) = d.err("spawn", bad.clone());
        assert_eq!(code, -32602, "{bad}: {message}");
        assert!(message.contains(names), "{bad}: {message}");
    }
    // A stack's auto port beside its env PORT is refused before anything
    // starts.
    let dir = tempfile::tempdir().expect("project");
    let file = dir.path().join("procd.toml");
    std::fs::write(
        &file,
        "[service.web]\ncommand = \"sleep 300\"\nport = \"auto\"\nenv = { PORT = \"3000\" }\n",
    )
    .unwrap();
    let out = d.cli(&["up", "-f", file.to_str().unwrap()]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("port = \"auto\" beside env PORT"), "{err}");
    assert_eq!(
        d.ok("list", json!({"status": "running"}))["processes"],
        json!([])
    );
}

/// A server in a git worktree turns stale when a file under its cwd
/// changes after it started, naming the file (edits to ignored paths
/// are not counted), and a restart's new run is fresh again: what
/// changed before it started is not held against it.
#[test]
fn a_server_is_stale_after_an_edit_and_fresh_after_a_restart() {
    let d = Daemon::start();
    let repo = tempfile::tempdir().expect("repo");
    let at = |p: &str| repo.path().join(p);
    std::fs::create_dir_all(at(".git")).unwrap();
    std::fs::create_dir_all(at("src")).unwrap();
    std::fs::create_dir_all(at("node_modules/dep")).unwrap();
    std::fs::write(at(".gitignore"), "*.log\n").unwrap();
    std::fs::write(at("src/app.ts"), "one").unwrap();
    backdate(&at(".gitignore"));
    backdate(&at("src/app.ts"));
    let r = d.ok(
        "spawn",
        json!({"command": "exec python3 -m http.server {port} --bind 127.0.0.1",
               "cwd": repo.path(), "port": "auto", "ready": {"port": "auto"},
               "restart": {"policy": "always", "backoff_s": 0.1}, "yield_ms": 10000}),
    );
    assert_eq!(r["ready"], true, "{r}");
    let id = r["session_id"].as_str().unwrap().to_string();
    assert_eq!(d.ok("poll", json!({"session_id": id})).get("stale"), None);
    // Ignored first, then a real edit: the watch reads them in order, so
    // once the edit is seen the ignored ones would have been too.
    std::fs::write(at("node_modules/dep/index.js"), "x").unwrap();
    std::fs::write(at("server.log"), "x").unwrap();
    std::fs::write(at("src/app.ts"), "two").unwrap();
    let mut poll = Value::Null;
    wait_until("the edit makes it stale", || {
        poll = d.ok("poll", json!({"session_id": id}));
        poll.get("stale").is_some()
    });
    assert_eq!(poll["stale"]["files"], json!(["src/app.ts"]), "{poll}");
    let since = poll["stale"]["since"].as_str().unwrap();
    assert!(since > poll["started_at"].as_str().unwrap(), "{poll}");
    let ps = String::from_utf8_lossy(&d.cli(&["ps"]).stdout).to_string();
    assert!(
        ps.lines().any(|l| l.contains(&id) && l.contains("stale")),
        "{ps}"
    );
    let text = String::from_utf8_lossy(&d.cli(&["poll", &id]).stdout).to_string();
    assert!(
        text.contains("src/app.ts changed after it started"),
        "{text}"
    );

    // A restart: the next run serves the new code, so it is not stale.
    let first_pid = poll["pid"].clone();
    d.ok("signal", json!({"session_id": id, "signal": "TERM"}));
    wait_until("the next run is ready", || {
        let p = d.ok("poll", json!({"session_id": id}));
        p["pid"] != first_pid && p["ready"] == true
    });
    assert_eq!(d.ok("poll", json!({"session_id": id})).get("stale"), None);
    // An edit makes the new run stale in turn, naming that edit only:
    // the one before its start (src/app.ts) is not counted, though its
    // watch, set a second in, looks at every file's time since the start.
    std::fs::write(at("src/other.ts"), "three").unwrap();
    let mut poll = Value::Null;
    wait_until("the new run turns stale", || {
        poll = d.ok("poll", json!({"session_id": id}));
        poll.get("stale").is_some()
    });
    assert_eq!(poll["stale"]["files"], json!(["src/other.ts"]), "{poll}");
    d.ok("kill", json!({"session_id": id}));
}

/// An edit made while no daemon ran (keeper and daemon SIGKILLed) is
/// found by the next daemon: the session it takes back is stale.
#[test]
fn an_edit_while_the_daemon_is_down_makes_its_server_stale() {
    let mut d = Daemon::start();
    let repo = tempfile::tempdir().expect("repo");
    std::fs::create_dir_all(repo.path().join(".git")).unwrap();
    std::fs::write(repo.path().join("app.py"), "one").unwrap();
    let r = d.ok(
        "spawn",
        json!({"command": "exec sleep 300", "cwd": repo.path(), "persist": true}),
    );
    let id = r["session_id"].as_str().unwrap().to_string();
    d.crash();
    std::fs::write(repo.path().join("app.py"), "two").unwrap();
    d.restart();
    let mut poll = Value::Null;
    wait_until("the recovered session is stale", || {
        poll = d.ok("poll", json!({"session_id": id}));
        poll.get("stale").is_some()
    });
    assert_eq!(poll["status"], "running", "{poll}");
    assert_eq!(poll["stale"]["files"], json!(["app.py"]), "{poll}");
    d.ok("kill", json!({"session_id": id}));
}

/// A spawn whose ready port another process already holds answers at
/// once with `port_in_use` naming it, rather than waiting out its ready
/// timeout (no `ready_timeout` came before the answer).
#[test]
fn a_ready_port_held_by_another_fails_fast_naming_the_holder() {
    let d = Daemon::start();
    let outside = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = outside.local_addr().unwrap().port();
    let r = d.ok(
        "spawn",
        json!({"command": "echo starting; exec sleep 300", "session_key": "fast",
               "ready": {"port": port, "timeout_s": 30}, "yield_ms": 120000}),
    );
    assert_eq!(r["port_in_use"]["pid"], std::process::id(), "{r}");
    assert_eq!(r["ready"], false, "{r}");
    assert!(r["output"].as_str().unwrap().contains("starting"), "{r}");
    let events = d.ok("drain_notifications", json!({"session_key": "fast"}));
    assert!(
        !events.to_string().contains("ready_timeout"),
        "the answer came after the ready timeout: {events}"
    );
    d.ok("kill_all", json!({}));
}

#[test]
fn the_example_stack_comes_up_and_goes_down() {
    let d = Daemon::start();
    let file = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/stack/procd.toml"
    ));
    let (r, code) = up(&d, file, &["--wait", "30"]);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["project"], "example");
    for name in ["db", "cache", "web", "worker"] {
        assert_eq!(service(&r, name)["status"], "running", "{name}: {r}");
    }
    assert_eq!(service(&r, "migrate")["exit_code"], 0, "{r}");
    let web = d.ok("poll", json!({"name": "web", "project": "example"}));
    assert!(
        web["output_preview"]
            .as_str()
            .unwrap()
            .contains("web on 8766"),
        "{web}"
    );
    let down = json_of(&d.cli(&["down", "--json", "-f", file.to_str().unwrap()]));
    assert_eq!(down["services"].as_array().unwrap().len(), 4, "{down}");
    assert_eq!(
        d.ok("list", json!({"status": "running"}))["processes"],
        json!([])
    );
}

#[test]
fn the_documented_stack_file_is_one_procd_reads() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/stacks.md"))
        .expect("docs/stacks.md");
    let block = doc
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a toml block");
    let dir = tempfile::tempdir().expect("dir");
    std::fs::create_dir(dir.path().join("web")).expect("web/");
    std::fs::write(dir.path().join("procd.toml"), block).expect("procd.toml");
    let stack = procd_core::stacks::stack::Stack::load(
        None,
        Some(dir.path().to_str().unwrap()),
        Path::new("/"),
    )
    .expect("the documented file loads");
    assert_eq!(stack.project.as_str(), "shop");
    let order: Vec<&str> = stack.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(order, ["db", "migrate", "web"]);
    let web = &stack.services[2];
    assert_eq!(web.port, Some(3000));
    assert_eq!(web.spawn.env.as_ref().unwrap()["PORT"], "3000");
}
