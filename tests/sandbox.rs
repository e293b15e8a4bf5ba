//! Sandboxed sessions (docs/SECURITY.md) against the real kernel: Landlock
//! for files and TCP, seccomp for the other socket families, on the
//! whole tree. Each check looks at what really happened: the file is
//! there or not, the listener was reached or not.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;

/// Runs `command` in `cwd` with `sandbox` (null: none) until it exits;
/// returns its output and the poll of it.
fn run(d: &Daemon, cwd: &Path, sandbox: Value, command: &str) -> (String, Value) {
    let mut params = json!({"command": command, "cwd": cwd.to_str().expect("utf-8")});
    if !sandbox.is_null() {
        params["sandbox"] = sandbox;
    }
    let id = d.ok("spawn", params)["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    let waited = d.ok("wait", json!({"session_id": id, "timeout_s": 20}));
    assert_eq!(waited["status"], "exited", "{waited}");
    let log = d.ok("log", json!({"session_id": id}));
    let polled = d.ok("poll", json!({"session_id": id}));
    (
        log["output"].as_str().unwrap_or_default().to_string(),
        polled,
    )
}

/// A bash one-liner that says whether a TCP connection to `port` opens.
fn tcp_probe(port: u16) -> String {
    format!("(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo tcp-{port}-open || echo tcp-{port}-refused")
}

/// Connections `listener` has accepted by now.
fn accepted(listener: &std::net::TcpListener) -> usize {
    listener.set_nonblocking(true).expect("nonblocking");
    std::iter::from_fn(|| listener.accept().ok()).count()
}

#[test]
fn workspace_write_writes_the_cwd_and_nothing_else_even_from_a_grandchild() {
    let d = Daemon::start();
    let project = tempfile::tempdir().expect("project");
    let outside = tempfile::tempdir().expect("outside");
    let out_file = outside.path().join("x");
    let command = format!(
        "echo a > inside.txt; bash -c 'bash -c \"echo b > {} || echo grandchild-denied\"'; echo t > \"$TMPDIR/t\" && echo tmp-ok",
        out_file.display()
    );
    let (output, polled) = run(&d, project.path(), json!("workspace-write"), &command);
    assert_eq!(
        std::fs::read_to_string(project.path().join("inside.txt"))
            .ok()
            .as_deref(),
        Some("a\n"),
        "{output}"
    );
    assert!(
        !out_file.exists(),
        "a write outside the workspace got through: {output}"
    );
    assert!(
        output.contains("Permission denied") && output.contains("grandchild-denied"),
        "{output}"
    );
    assert!(output.contains("tmp-ok"), "{output}");
    // poll shows the sandbox in force; the temp dir goes with the session.
    let sandbox = &polled["sandbox"];
    assert_eq!(sandbox["profile"], "workspace-write", "{polled}");
    assert_eq!(sandbox["network"], "none", "{polled}");
    let writable: Vec<&str> = sandbox["writable"]
        .as_array()
        .expect("writable")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(writable.len(), 2, "{polled}");
    assert_eq!(Path::new(writable[0]), project.path(), "{polled}");
    let tmp = Path::new(writable[1]).to_path_buf();
    assert!(tmp.starts_with(d.state_dir()), "{polled}");
    wait_until("the session's temp dir is removed", || !tmp.exists());

    // The CLI's flags: --sandbox, and --writable adding a path.
    let out = d.cli(&[
        "--json",
        "spawn",
        "--cwd",
        project.path().to_str().expect("utf-8"),
        "--sandbox",
        "read-only",
        "--writable",
        outside.path().to_str().expect("utf-8"),
        "--",
        &format!("echo c > {}", out_file.display()),
    ]);
    assert!(out.status.success(), "{out:?}");
    let id: Value = serde_json::from_slice(&out.stdout).expect("json");
    let id = id["session_id"].as_str().expect("id");
    d.ok("wait", json!({"session_id": id, "timeout_s": 20}));
    assert_eq!(
        std::fs::read_to_string(&out_file).ok().as_deref(),
        Some("c\n")
    );
}

#[test]
fn read_only_reads_but_writes_nothing_in_its_cwd() {
    let d = Daemon::start();
    let project = tempfile::tempdir().expect("project");
    std::fs::write(project.path().join("notes.txt"), "readable-content\n").expect("write");
    let (output, polled) = run(
        &d,
        project.path(),
        json!("read-only"),
        "cat notes.txt; echo x > new.txt; rm -f notes.txt; ls /usr/bin/env",
    );
    assert!(output.contains("readable-content"), "{output}");
    assert!(output.contains("/usr/bin/env"), "reads elsewhere: {output}");
    assert!(!project.path().join("new.txt").exists(), "{output}");
    assert!(project.path().join("notes.txt").exists(), "{output}");
    assert_eq!(polled["sandbox"]["profile"], "read-only", "{polled}");
}

#[test]
fn network_none_refuses_tcp_and_udp_that_an_unsandboxed_session_reaches() {
    let d = Daemon::start();
    let cwd = tempfile::tempdir().expect("cwd");
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = tcp.local_addr().expect("addr").port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    let udp_port = udp.local_addr().expect("addr").port();
    let probe = format!(
        "{}; (echo datagram > /dev/udp/127.0.0.1/{udp_port}) 2>/dev/null && echo udp-sent || echo udp-refused",
        tcp_probe(port)
    );

    let (output, _) = run(&d, cwd.path(), Value::Null, &probe);
    assert!(output.contains(&format!("tcp-{port}-open")), "{output}");
    assert_eq!(
        accepted(&tcp),
        1,
        "the unsandboxed session reaches the listener"
    );
    udp.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 64];
    assert!(udp.recv(&mut buf).is_ok(), "its datagram arrives: {output}");

    let (output, polled) = run(&d, cwd.path(), json!({"network": "none"}), &probe);
    assert!(output.contains(&format!("tcp-{port}-refused")), "{output}");
    assert!(output.contains("udp-refused"), "{output}");
    assert_eq!(
        accepted(&tcp),
        0,
        "a sandboxed session reached the listener"
    );
    assert!(udp.recv(&mut buf).is_err(), "a sandboxed datagram arrived");
    assert_eq!(polled["sandbox"]["profile"], "custom", "{polled}");
}

#[test]
fn port_rules_allow_one_port_and_refuse_another() {
    let d = Daemon::start();
    let cwd = tempfile::tempdir().expect("cwd");
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let (a, b) = (
        allowed.local_addr().expect("addr").port(),
        other.local_addr().expect("addr").port(),
    );
    let out = d.cli(&[
        "--json",
        "spawn",
        "--cwd",
        cwd.path().to_str().expect("utf-8"),
        "--sandbox",
        "workspace-write",
        "--network",
        &format!("connect={a}"),
        "--",
        &format!("{}; {}", tcp_probe(a), tcp_probe(b)),
    ]);
    assert!(out.status.success(), "{out:?}");
    let id: Value = serde_json::from_slice(&out.stdout).expect("json");
    let id = id["session_id"].as_str().expect("id").to_string();
    d.ok("wait", json!({"session_id": id, "timeout_s": 20}));
    let output = d.ok("log", json!({"session_id": id}))["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(output.contains(&format!("tcp-{a}-open")), "{output}");
    assert!(output.contains(&format!("tcp-{b}-refused")), "{output}");
    assert_eq!(accepted(&allowed), 1, "{output}");
    assert_eq!(accepted(&other), 0, "{output}");
    let polled = d.ok("poll", json!({"session_id": id}));
    assert_eq!(
        polled["sandbox"]["network"],
        json!({"connect": [a], "bind": []})
    );
}

#[test]
fn the_sandbox_holds_after_a_daemon_sigkill() {
    let d = Daemon::start();
    let project = tempfile::tempdir().expect("project");
    let outside = tempfile::tempdir().expect("outside");
    let target = outside.path().join("f");
    let command = format!(
        "while read -r line; do (echo \"$line\" > {}) 2>/dev/null && echo wrote-$line || echo denied-$line; done",
        target.display()
    );
    let id = d.ok(
        "spawn",
        json!({"command": command, "cwd": project.path().to_str().expect("utf-8"),
               "sandbox": "workspace-write"}),
    )["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    d.kill_daemon();
    // The kernel keeps the sandbox; the next daemon reports it from the
    // checkpoint.
    let polled = d.ok("poll", json!({"session_id": id}));
    assert_eq!(polled["sandbox"]["profile"], "workspace-write", "{polled}");
    d.ok(
        "submit_stdin",
        json!({"session_id": id, "data": "after-crash"}),
    );
    wait_until("the session answers", || {
        d.ok("log", json!({"session_id": id}))["output"]
            .as_str()
            .is_some_and(|o| o.contains("-after-crash"))
    });
    let output = d.ok("log", json!({"session_id": id}))["output"].to_string();
    assert!(output.contains("denied-after-crash"), "{output}");
    assert!(!target.exists());
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn an_unknown_profile_and_a_missing_kernel_feature_are_refused() {
    let d = Daemon::start();
    for (sandbox, names) in [
        (json!("sandboxy"), "sandboxy"),
        (json!({"writeable": ["."]}), "writeable"),
        (json!({"network": {"connect": [0]}}), "network"),
        (json!(7), "sandbox"),
    ] {
        let r = d.call("spawn", json!({"command": "true", "sandbox": sandbox}));
        assert_eq!(r["error"]["code"], -32602, "{r}");
        let message = r["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{r}");
    }
    let r = d.call(
        "spawn",
        json!({"command": "true", "sandbox": {"writable": ["/no/such/dir"]}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r.to_string().contains("/no/such/dir"), "{r}");

    // A kernel without what it needs (debug builds take the ABI from
    // PROCD_TEST_LANDLOCK_ABI): -32002 naming it, and nothing started.
    let old = Daemon::with_env("", &[("PROCD_TEST_LANDLOCK_ABI", "3")]);
    let r = old.call(
        "spawn",
        json!({"command": "touch started", "sandbox": {"network": {"connect": [80]}}}),
    );
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Landlock ABI 4 needed for network rules, kernel has 3")),
        "{r}"
    );
    let listed = old.ok("list", json!({}));
    assert_eq!(listed["processes"], json!([]), "{listed}");
    let none = Daemon::with_env("", &[("PROCD_TEST_LANDLOCK_ABI", "0")]);
    let r = none.call("spawn", json!({"command": "true", "sandbox": "read-only"}));
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert!(r.to_string().contains("Landlock is needed"), "{r}");
}

#[test]
fn temp_dirs_go_with_their_sessions_and_a_new_daemon_sweeps_stale_ones() {
    use std::os::unix::fs::PermissionsExt;
    let home = short_tempdir();
    let tmp = home.path().join("state/tmp");
    std::fs::create_dir_all(tmp.join("sandbox-0123abcd/inner")).expect("stale dir");
    std::fs::create_dir_all(tmp.join("not-a-sandbox")).expect("other dir");
    for dir in [home.path().join("state"), tmp.clone()] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let d = Daemon::in_home(home, "");
    // Recovery ran before the daemon served: no session uses the stale one.
    assert!(!tmp.join("sandbox-0123abcd").exists());
    assert!(
        tmp.join("not-a-sandbox").exists(),
        "only procd's own are swept"
    );

    // A running session's temp dir outlives a daemon SIGKILL, and goes
    // when the session ends.
    let cwd = tempfile::tempdir().expect("cwd");
    let id = d.ok(
        "spawn",
        json!({"command": "sleep 300", "cwd": cwd.path().to_str().expect("utf-8"),
               "sandbox": "read-only"}),
    )["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    let polled = d.ok("poll", json!({"session_id": id}));
    let own = std::path::PathBuf::from(
        polled["sandbox"]["writable"][0]
            .as_str()
            .expect("its temp dir"),
    );
    assert!(own.is_dir(), "{polled}");
    d.kill_daemon();
    assert!(own.is_dir(), "a running session's temp dir was swept");
    d.ok("kill", json!({"session_id": id}));
    wait_until("the ended session's temp dir is removed", || !own.exists());
}

#[test]
fn the_configured_default_sandboxes_a_session_that_asks_for_none() {
    let d = Daemon::with_config("sandbox = \"read-only\"\n");
    let project = tempfile::tempdir().expect("project");
    let (output, polled) = run(
        &d,
        project.path(),
        Value::Null,
        "touch made || echo refused",
    );
    assert!(output.contains("refused"), "{output}");
    assert!(!project.path().join("made").exists());
    assert_eq!(polled["sandbox"]["profile"], "read-only", "{polled}");
    // `full` asks for none, whatever the default; list shows both.
    let (output, _) = run(&d, project.path(), json!("full"), "touch made && echo made");
    assert!(output.contains("made"), "{output}");
    let listed = d.ok("list", json!({}));
    let profiles: Vec<Value> = listed["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .map(|p| p["sandbox"]["profile"].clone())
        .collect();
    assert!(profiles.contains(&json!("read-only")), "{listed}");
    assert!(profiles.contains(&Value::Null), "{listed}");
    // A default that is not a profile is refused at start, naming the key.
    let out = std::process::Command::new(BIN)
        .args(["daemon", "--set", "sandbox=\"loose\""])
        .env("PROCD_HOME", short_tempdir().path())
        .output()
        .expect("procd daemon");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("loose"),
        "{out:?}"
    );
}

/// The scopes the next two tests check need Landlock ABI 6: a kernel
/// without it fails here, saying so, not at an assertion further on.
fn kernel_has_scopes() {
    let abi = procd_sys::sandbox::landlock_abi();
    assert!(
        abi >= 6,
        "this kernel has Landlock ABI {abi}; scoped signals need 6"
    );
}

#[test]
fn a_sandboxed_command_cannot_signal_the_users_other_processes() {
    kernel_has_scopes();
    let d = Daemon::start();
    let cwd = tempfile::tempdir().expect("cwd");
    // A process of the user's, outside any session.
    let mut other = Stand::sleep();
    let pid = other.pid();
    let probe = |signal: &str| {
        format!(
            "kill -{signal} {pid} 2>/dev/null && echo signal-sent || echo signal-refused; \
             sleep 100 & kill $!; wait $!; echo own-child-ended-$?"
        )
    };
    // Unsandboxed, the same user's process can be signalled (signal 0
    // only, so that it lives on for the sandboxed probe).
    let (output, _) = run(&d, cwd.path(), Value::Null, &probe("0"));
    assert!(output.contains("signal-sent"), "{output}");

    let (output, _) = run(&d, cwd.path(), json!("workspace-write"), &probe("TERM"));
    assert!(output.contains("signal-refused"), "{output}");
    assert!(
        other.0.try_wait().expect("try_wait").is_none(),
        "a sandboxed command's SIGTERM reached the user's process: {output}"
    );
    // Inside its own session a command signals as it always did.
    assert!(output.contains("own-child-ended-143"), "{output}");
}

/// Unless `network: "all"`, no unix socket can be made, so neither a
/// local service on a path (the D-Bus session bus, the user's systemd,
/// docker) nor one on an abstract name is reached; a connected pair,
/// which reaches nothing outside, still works. Under port rules a name
/// is still looked up (UDP and IPv4 sockets are made; netlink is not).
#[test]
fn unix_sockets_are_refused_unless_network_is_all() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let d = Daemon::start();
    let cwd = tempfile::tempdir().expect("cwd");
    let name = format!("procd-test-abstract-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
    let abstract_listener = UnixListener::bind_addr(&addr).expect("abstract listen");
    let dir = tempfile::tempdir().expect("socket dir");
    let path = dir.path().join("service.sock");
    let path_listener = UnixListener::bind(&path).expect("path listen");
    let listeners = [&abstract_listener, &path_listener];
    for l in listeners {
        l.set_nonblocking(true).expect("nonblocking");
    }
    let accepted = |l: &UnixListener| std::iter::from_fn(|| l.accept().ok()).count();
    let connect = |target: &str, label: &str| {
        format!(
            "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect({target})' 2>/dev/null \
             && echo {label}-reached || echo {label}-refused"
        )
    };
    let probe = [
        connect(&format!("\"\\0{name}\""), "abstract"),
        connect(&format!("\"{}\"", path.display()), "path"),
        "python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"x\"); print(\"pair-\" + b.recv(1).decode())'"
            .to_string(),
        "python3 -c 'import socket; print(\"lookup-\" + socket.getaddrinfo(\"localhost\", 80, \
         flags=socket.AI_ADDRCONFIG)[0][4][0])'"
            .to_string(),
    ]
    .join("; ");

    let (output, _) = run(&d, cwd.path(), json!({"network": "all"}), &probe);
    for label in [
        "abstract-reached",
        "path-reached",
        "pair-x",
        "lookup-127.0.0.1",
    ] {
        assert!(output.contains(label), "{label}: {output}");
    }
    assert_eq!(listeners.map(accepted), [1, 1], "network all reaches both");

    let ports = json!({"network": {"connect": [80]}});
    for sandbox in [json!("workspace-write"), ports.clone()] {
        let (output, _) = run(&d, cwd.path(), sandbox.clone(), &probe);
        for label in ["abstract-refused", "path-refused", "pair-x"] {
            assert!(output.contains(label), "{sandbox}: {label}: {output}");
        }
        if sandbox == ports {
            assert!(output.contains("lookup-127.0.0.1"), "{output}");
        }
        assert_eq!(listeners.map(accepted), [0, 0], "{sandbox} reached one");
    }
}

/// Under `network: none` the CLI cannot make its socket; `procd status`
/// says so rather than only that the socket does not answer.
#[test]
fn under_network_none_procd_status_says_why_it_cannot_connect() {
    let d = Daemon::start();
    let cwd = tempfile::tempdir().expect("cwd");
    let status = format!("{BIN} --home {} status", d.home.path().display());
    let (output, _) = run(&d, cwd.path(), json!("workspace-write"), &status);
    assert!(
        output.contains("does not answer") && output.contains("connect: Permission denied"),
        "{output}"
    );
}

#[test]
fn a_sandboxed_command_cannot_ask_procd_for_anything() {
    // Its cgroup says whose it is; without cgroups, its process group.
    for config in ["", "containment = \"group\"\n"] {
        let d = Daemon::with_config(config);
        let kind = d.ok("status", json!({}))["containment"].clone();
        assert_eq!(
            kind,
            if config.is_empty() { "cgroup" } else { "group" },
            "{config}"
        );
        refused_from_a_sandbox(&d);
    }
}

/// A connection whose peer is gone by the time the daemon looks at it
/// (connected while the daemon was stopped; the connecting process then
/// exited and was reaped, leaving the socket to its child) cannot be told
/// apart from a sandboxed session's, so while one is tracked it is
/// refused; with none tracked, it is served.
#[test]
fn a_peer_gone_before_it_is_looked_at_is_refused_while_a_sandbox_runs() {
    let d = Daemon::start();
    let answer = through_a_reaped_peer(&d);
    assert!(answer["result"]["pid"].is_u64(), "no sandbox yet: {answer}");

    let cwd = tempfile::tempdir().expect("cwd");
    let id = d.ok(
        "spawn",
        json!({"command": "sleep 300", "cwd": cwd.path().to_str().expect("utf-8"),
               "sandbox": {"network": "all"}}),
    )["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    let answer = through_a_reaped_peer(&d);
    assert_eq!(answer["error"]["code"], -32005, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("could not be told apart")),
        "{answer}"
    );
    d.ok("kill", json!({"session_id": id}));
}

/// `status` asked on a connection made while the daemon was stopped, by
/// a process reaped before the daemon resumed; the answer.
fn through_a_reaped_peer(d: &Daemon) -> Value {
    use nix::sys::signal::{kill, Signal};
    use std::io::{BufRead, Write};
    use std::process::{Command, Stdio};
    /// Resumes the daemon however the test ends.
    struct Stopped(nix::unistd::Pid);
    impl Drop for Stopped {
        fn drop(&mut self) {
            let _ = kill(self.0, Signal::SIGCONT);
        }
    }
    // The parent connects and exits; its child keeps the socket, and on
    // a line from the test asks `status` and prints the answer.
    let script = "import os, socket, sys\n\
                  s = socket.socket(socket.AF_UNIX)\n\
                  s.connect(sys.argv[1])\n\
                  if os.fork():\n    os._exit(0)\n\
                  if sys.stdin.readline():\n\
                  \x20   s.sendall(b'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"status\"}\\n')\n\
                  \x20   print(s.makefile().readline(), end='', flush=True)\n";
    let daemon = nix::unistd::Pid::from_raw(d.pid() as i32);
    kill(daemon, Signal::SIGSTOP).expect("SIGSTOP");
    let stopped = Stopped(daemon);
    // Stopped for real: a thread still running could accept and look.
    wait_until("every thread of the daemon is stopped", || {
        all_threads_stopped(d.pid() as i32)
    });
    let mut parent = Command::new("python3")
        .args(["-c", script])
        .arg(d.socket())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    // Taken first: `wait` would close stdin.
    let (mut stdin, stdout) = (parent.stdin.take(), parent.stdout.take());
    // Reaped here, before the daemon can look at it.
    assert!(parent.wait().expect("wait").success());
    drop(stopped);
    stdin
        .as_mut()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("go");
    let mut line = String::new();
    std::io::BufReader::new(stdout.expect("stdout"))
        .read_line(&mut line)
        .expect("answer");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

fn refused_from_a_sandbox(d: &Daemon) {
    let cwd = tempfile::tempdir().expect("cwd");
    let outside = tempfile::tempdir().expect("outside");
    let escaped = outside.path().join("escaped");
    // A raw spawn on the socket (what a hostile command would send; the
    // CLI's spawn would first need a lease file written), then the CLI.
    std::fs::write(
        cwd.path().join("ask.py"),
        "import json, socket, sys\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.connect(sys.argv[1])\n\
         ask = {'jsonrpc': '2.0', 'id': 7, 'method': 'spawn', 'params': {'command': sys.argv[2]}}\n\
         s.sendall((json.dumps(ask) + '\\n').encode())\n\
         print(s.makefile().readline(), end='')\n",
    )
    .expect("probe");
    let probe = |mark: &str| {
        format!(
            "python3 ask.py {socket} 'echo {mark} > {escaped}'; {bin} --home {home} ps; echo cli-exit-$?",
            socket = d.socket().display(),
            escaped = escaped.display(),
            bin = BIN,
            home = d.home.path().display(),
        )
    };
    // Unsandboxed, the command is served: its spawn runs.
    let (output, _) = run(d, cwd.path(), Value::Null, &probe("served"));
    assert!(output.contains("\"result\""), "{output}");
    assert!(output.contains("cli-exit-0"), "{output}");
    wait_until("the unsandboxed command's spawn ran", || {
        std::fs::read_to_string(&escaped).is_ok_and(|t| t == "served\n")
    });
    std::fs::remove_file(&escaped).expect("remove");
    let before = d.ok("list", json!({}))["processes"]
        .as_array()
        .expect("processes")
        .len();

    // Sandboxed (network all, so that only this rule can refuse it):
    // every request is -32005 naming the session, and nothing starts.
    let id = d.ok(
        "spawn",
        json!({"command": format!("{}; sleep 300", probe("escaped")),
               "cwd": cwd.path().to_str().expect("utf-8"), "sandbox": {"network": "all"}}),
    )["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    wait_until("the sandboxed probe ran", || {
        d.ok("log", json!({"session_id": id}))["output"]
            .as_str()
            .is_some_and(|o| o.contains("cli-exit-"))
    });
    let output = d.ok("log", json!({"session_id": id}))["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let answer: Value = serde_json::from_str(output.lines().next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("one JSON-RPC line first, not {output:?}: {e}"));
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["error"]["code"], -32005, "{answer}");
    let refusal = format!("sandboxed session {id}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&refusal)),
        "{answer}"
    );
    assert!(
        output.contains(&format!(
            "procd: permission denied: this connection comes from {refusal}"
        )),
        "the CLI says why: {output}"
    );
    assert!(output.contains("cli-exit-1"), "{output}");
    // The test's own connection, meanwhile, is served.
    let listed = d.ok("list", json!({}))["processes"]
        .as_array()
        .expect("processes")
        .len();
    assert_eq!(listed, before + 1, "a sandboxed spawn started something");
    assert!(
        !escaped.exists(),
        "a sandboxed command escaped through procd"
    );
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn a_sandboxed_command_reaches_its_own_terminal_and_no_other() {
    let d = Daemon::start();
    let cwd = tempfile::tempdir().expect("cwd");
    // Another session's terminal, and its name.
    let other = d.ok("spawn", json!({"command": "sleep 300", "pty": true}))["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    let pid = pid_of(&d, &other);
    let tty = std::fs::read_link(format!("/proc/{pid}/fd/0")).expect("its terminal");
    assert!(tty.starts_with("/dev/pts"), "{}", tty.display());
    let write_other = format!(
        "(echo injected-text > {}) 2>/dev/null && echo other-written || echo other-refused",
        tty.display()
    );
    // A sandboxed command, with a terminal of its own or not, cannot
    // write into the other's (its output, which an agent reads) nor open
    // it for a TIOCSTI (its input).
    let (output, _) = run(&d, cwd.path(), json!("workspace-write"), &write_other);
    assert!(output.contains("other-refused"), "{output}");
    let own = d.ok(
        "spawn",
        json!({"command": format!("{write_other}; echo own-$(tty) > \"$(tty)\" && stty size"),
               "pty": true, "rows": 33, "cols": 101,
               "cwd": cwd.path().to_str().expect("utf-8"), "sandbox": "workspace-write"}),
    )["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    d.wait_exit(&own);
    let output = d.ok("log", json!({"session_id": own}))["output"].to_string();
    assert!(output.contains("other-refused"), "{output}");
    assert!(
        output.contains("own-/dev/pts/"),
        "its own terminal, reopened by name: {output}"
    );
    assert!(output.contains("33 101"), "{output}");
    let seen = d.ok("log", json!({"session_id": other}))["output"].to_string();
    assert!(!seen.contains("injected-text"), "{seen}");
    // Unsandboxed, the same write gets through: the check can fail.
    let (output, _) = run(&d, cwd.path(), Value::Null, &write_other);
    assert!(output.contains("other-written"), "{output}");
    wait_until("the unsandboxed write shows in the other's output", || {
        d.ok("log", json!({"session_id": other}))["output"]
            .to_string()
            .contains("injected-text")
    });
    d.ok("kill", json!({"session_id": other}));
}

#[test]
fn a_sandbox_may_not_make_procds_own_files_writable() {
    let d = Daemon::with_config("# the daemon's config file\n");
    let home = d.home.path().to_path_buf();
    let project = tempfile::tempdir().expect("project");
    std::os::unix::fs::symlink(&home, project.path().join("link")).expect("symlink");
    let home_s = home.to_str().expect("utf-8");
    let cases = [
        // The home holds the state, the socket's dir and the config.
        json!({"command": "touch x", "cwd": home_s, "sandbox": "workspace-write"}),
        json!({"command": "touch x", "cwd": project.path().to_str().expect("utf-8"),
               "sandbox": {"writable": [d.state_dir().join("logs")]}}),
        json!({"command": "touch x", "cwd": project.path().to_str().expect("utf-8"),
               "sandbox": {"writable": ["link"]}}),
        json!({"command": "touch x", "cwd": project.path().to_str().expect("utf-8"),
               "sandbox": {"writable": [home.join("config.toml")]}}),
    ];
    for params in cases {
        let (code, msg) = d.err("spawn", params.clone());
        assert_eq!(code, -32602, "{params}: {msg}");
        assert!(msg.contains("would make procd's own"), "{params}: {msg}");
    }
    assert_eq!(d.ok("list", json!({}))["processes"], json!([]));
    assert!(!home.join("x").exists() && !project.path().join("x").exists());
    // Beside them, a project is writable as ever.
    let (_, polled) = run(&d, project.path(), json!("workspace-write"), "touch x");
    assert_eq!(polled["exit_code"], 0, "{polled}");
    assert!(project.path().join("x").exists());
}
