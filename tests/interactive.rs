//! Interactive sessions (docs/protocol.md): PTY mode, subscriptions,
//! close_terminal, watch patterns, and `procd attach` on a real terminal.

use crate::common::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

fn spawn_pty(d: &Daemon, command: &str) -> String {
    d.spawn_with(json!({"command": command, "pty": true}))
}

#[test]
fn pty_write_and_submit_reach_the_child() {
    // R3, R4 (PTY): bytes arrive; Enter is "\r" and counted.
    let d = Daemon::start();
    let id = spawn_pty(&d, "read line; echo \"got:$line\"");
    let w = d.ok("write_stdin", json!({"session_id": id, "data": "abc"}));
    assert_eq!(w["bytes_written"], 3);
    let s = d.ok("submit_stdin", json!({"session_id": id, "data": "def"}));
    assert_eq!(s["bytes_written"], 4);
    d.read_until(&id, "got:abcdef");
    assert_eq!(d.wait_exit(&id)["exit_code"], 0);
    let p = d.ok("list", json!({}))["processes"][0].clone();
    assert_eq!(p["pty"], true);
}

#[test]
fn pty_close_stdin_sends_eof_to_an_eof_driven_child() {
    // R12 (PTY)
    let d = Daemon::start();
    let id = spawn_pty(
        &d,
        "python3 -c \"import sys; print(sys.stdin.read().strip())\"",
    );
    d.ok("submit_stdin", json!({"session_id": id, "data": "hello"}));
    let c = d.ok("close_stdin", json!({"session_id": id}));
    assert_eq!(c["message"], "EOF sent");
    let w = d.wait_exit(&id);
    assert_eq!(w["exit_code"], 0, "{w}");
    let out = d.read_all(&id);
    assert!(
        out.ends_with("hello\r\n"),
        "echo of the input, then the child's line: {out:?}"
    );
    let late = d.ok("write_stdin", json!({"session_id": id, "data": "x"}));
    assert_eq!(late["status"], "already_exited");
}

#[test]
fn pty_stdin_is_closed_after_close_stdin() {
    let d = Daemon::start();
    let id = spawn_pty(&d, "sleep 300");
    d.ok("close_stdin", json!({"session_id": id}));
    let (code, _) = d.err("write_stdin", json!({"session_id": id, "data": "x"}));
    assert_eq!(code, -32002);
    // The PTY itself stays usable for resizes.
    d.ok("resize", json!({"session_id": id, "rows": 20, "cols": 20}));
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn pty_mid_line_eof_still_ends_input() {
    let d = Daemon::start();
    let id = spawn_pty(&d, "cat >/dev/null; echo done");
    d.ok("write_stdin", json!({"session_id": id, "data": "partial"}));
    d.ok("close_stdin", json!({"session_id": id}));
    d.read_until(&id, "done");
    assert_eq!(d.wait_exit(&id)["exit_code"], 0);
}

#[test]
fn pty_size_pager_and_resize() {
    let d = Daemon::start();
    let id = d.spawn_with(json!({
        "command": "stty size; echo \"pager=$PAGER git=$GIT_PAGER\"; read _; stty size",
        "pty": true, "rows": 40, "cols": 100,
    }));
    d.read_until(&id, "git=cat");
    let r = d.ok("resize", json!({"session_id": id, "rows": 50, "cols": 132}));
    assert_eq!(r, json!({"status": "ok", "rows": 50, "cols": 132}));
    d.ok("submit_stdin", json!({"session_id": id, "data": ""}));
    d.wait_exit(&id);
    let out = d.ok("log", json!({"session_id": id}))["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(out, "40 100\npager=cat git=cat\n\n50 132\n");
    let pipe = d.spawn("sleep 30");
    let (code, _) = d.err(
        "resize",
        json!({"session_id": pipe, "rows": 10, "cols": 10}),
    );
    assert_eq!(code, -32002, "not a PTY");
    d.ok("kill", json!({"session_id": pipe}));
}

#[test]
fn pty_utf8_split_across_reads_is_decoded_whole() {
    // R9 (PTY)
    let d = Daemon::start();
    let id = spawn_pty(
        &d,
        r"printf 'a\xc3'; sleep 0.2; printf '\xa9b\n'; printf '\xf0'; sleep 0.1; printf '\x9f\x98'; sleep 0.1; printf '\x80\n'; printf 'x\xffy\n'",
    );
    assert_eq!(d.read_all(&id), "aéb\r\n😀\r\nx\u{FFFD}y\r\n");
}

#[test]
fn subscribe_output_streams_then_ends_with_the_exit() {
    let d = Daemon::start();
    let id = d.spawn("echo one; read _; echo two; exit 5");
    let mut c = d.connect();
    let r = c.call("subscribe_output", json!({"session_id": id, "cursor": 0}));
    let sub = r["result"].clone();
    assert!(sub.is_number() || sub.is_string(), "{r}");
    let mut got = String::new();
    let next = |c: &mut Conn| -> Value {
        let n = c.recv();
        assert_eq!(n["method"], "output");
        assert_eq!(n["params"]["subscription"], sub);
        n["params"]["result"].clone()
    };
    while !got.contains("one") {
        got.push_str(next(&mut c)["data"].as_str().unwrap());
    }
    d.ok("submit_stdin", json!({"session_id": id, "data": ""}));
    loop {
        let item = next(&mut c);
        if item["exited"] == true {
            assert_eq!(item["exit_code"], 5);
            assert_eq!(item["completion_reason"], "exited");
            break;
        }
        got.push_str(item["data"].as_str().unwrap());
    }
    assert_eq!(got, "one\ntwo\n");
    // The connection stays usable after the stream ended.
    assert!(c.call("status", json!({}))["result"].is_object());
}

#[test]
fn a_subscriber_that_goes_away_frees_its_subscription() {
    let d = Daemon::start();
    // A quiet session: nothing would ever fail a lingering stream's write,
    // so only the daemon noticing the departure can end it.
    let id = d.spawn("sleep 300");
    let fds = || d.fds().len();
    let before = fds();
    for _ in 0..5 {
        let mut c = d.connect();
        let r = c.call("subscribe_output", json!({"session_id": id}));
        assert!(r["result"].is_number() || r["result"].is_string(), "{r}");
    }
    // Each connection (and its socket) ends once its stream is dropped.
    wait_until("the subscribers' connections are closed", || {
        fds() <= before
    });
    assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "running");
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn close_terminal_only_tells_the_ui() {
    // R7
    let d = Daemon::start();
    let id = d.spawn("sleep 300");
    let (code, msg) = d.err("close_terminal", json!({"session_id": id}));
    assert_eq!(code, -32002, "{msg}");
    let mut ui = d.connect();
    let r = ui.call("subscribe_events", json!({}));
    assert!(r["result"].is_number() || r["result"].is_string(), "{r}");
    let ok = d.ok("close_terminal", json!({"session_id": id}));
    assert_eq!(ok, json!({"status": "ok", "closed": id}));
    let event = ui.recv();
    assert_eq!(event["method"], "event");
    assert_eq!(
        event["params"]["result"],
        json!({"type": "close_terminal", "session_id": id})
    );
    assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "running");
    assert_eq!(
        d.ok("list", json!({}))["processes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn subscribe_events_sees_starts_exits_and_queued_events() {
    let d = Daemon::start();
    let mut ui = d.connect();
    ui.call("subscribe_events", json!({}));
    let id = d.spawn_with(json!({"command": "echo hi", "notify_on_complete": true}));
    let mut kinds = Vec::new();
    while kinds.len() < 3 {
        let e = ui.recv()["params"]["result"].clone();
        assert_eq!(e["session_id"], id.as_str());
        kinds.push(e["type"].as_str().unwrap().to_string());
    }
    kinds.sort();
    assert_eq!(kinds, ["completion", "exited", "started"]);
    // Streaming did not consume the queued completion.
    assert_eq!(
        d.ok("drain_notifications", json!({}))["events"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn watch_patterns_match_split_lines_rate_limit_and_cap() {
    let d = Daemon::with_config("watch_min_interval_s = 0.5\nwatch_max_deliveries = 2");
    let id = d.spawn_with(json!({
        // The coreutils printf writes its lines at once (bash's writes them
        // one by one; the matcher's linger covers that, see watch.rs tests).
        "command": "printf 'server rea'; sleep 0.2; env printf 'dy on 3000\\nnext\\n'; echo ready again; sleep 1; echo ready third; read _",
        "watch_patterns": ["ready"],
    }));
    let mut events: Vec<Value> = Vec::new();
    wait_until("two deliveries and the switch", || {
        events.extend(
            d.ok("drain_notifications", json!({}))["events"]
                .as_array()
                .unwrap()
                .iter()
                .cloned(),
        );
        events.iter().any(|e| e["type"] == "watch_disabled")
    });
    let matches: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "watch_match")
        .collect();
    assert_eq!(matches.len(), 2, "{events:?}");
    assert_eq!(matches[0]["pattern"], "ready");
    assert!(
        matches[0]["output"]
            .as_str()
            .unwrap()
            .starts_with("server ready on 3000\nnext"),
        "{:?}",
        matches[0]
    );
    assert_eq!(matches[0]["suppressed"], 0);
    assert_eq!(
        matches[1]["output"].as_str().unwrap().lines().next(),
        Some("ready third")
    );
    assert_eq!(
        matches[1]["suppressed"], 1,
        "'ready again' came inside the interval"
    );
    // Watching stopped: completion notification is on now.
    let listed = d.ok("list", json!({}))["processes"][0].clone();
    assert_eq!(listed["notify_on_complete"], true);
    d.ok("submit_stdin", json!({"session_id": id, "data": ""}));
    d.wait_exit(&id);
    let after = d.ok("drain_notifications", json!({}))["events"].clone();
    assert_eq!(after.as_array().unwrap().len(), 1, "{after}");
    assert_eq!(after[0]["type"], "completion");
}

#[test]
fn a_last_line_the_noise_filter_held_back_is_watched_too() {
    // "logo" could still have become the shell's "logout" line, so the
    // noise filter holds it until the end of output.
    let d = Daemon::start();
    let id = d.spawn_with(json!({"command": "printf logo", "watch_patterns": ["logo"]}));
    d.wait_exit(&id);
    let events = d.ok("drain_notifications", json!({}))["events"].clone();
    let matched: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "watch_match")
        .collect();
    assert_eq!(matched.len(), 1, "{events}");
    assert_eq!(matched[0]["output"], "logo");
}

#[test]
fn watch_patterns_are_validated() {
    let d = Daemon::start();
    let (code, msg) = d.err("spawn", json!({"command": "true", "watch_patterns": [""]}));
    assert_eq!(code, -32602);
    assert!(msg.contains("watch_patterns"), "{msg}");
    let many: Vec<String> = (0..33).map(|i| format!("p{i}")).collect();
    let (code, _) = d.err("spawn", json!({"command": "true", "watch_patterns": many}));
    assert_eq!(code, -32602);
}

// ----- procd attach, through a terminal the test opens itself --------------

struct Terminal {
    master: OwnedFd,
    screen: Arc<Mutex<Vec<u8>>>,
}

impl Terminal {
    fn open(rows: u16, cols: u16) -> (Terminal, OwnedFd) {
        let ws = nix::pty::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&ws), None).expect("openpty");
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = std::fs::File::from(pty.master.try_clone().expect("dup"));
        let sink = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        (
            Terminal {
                master: pty.master,
                screen,
            },
            pty.slave,
        )
    }

    fn type_keys(&self, keys: &[u8]) {
        std::fs::File::from(self.master.try_clone().unwrap())
            .write_all(keys)
            .expect("type");
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    fn wait_for(&self, text: &str) {
        wait_until(&format!("the terminal shows {text:?}"), || {
            self.screen().contains(text)
        });
    }

    fn resize(&self, rows: u16, cols: u16) {
        let ws = libc_winsize(rows, cols);
        // SAFETY: TIOCSWINSZ reads one winsize from the struct we pass.
        let r = unsafe { nix::libc::ioctl(self.master.as_raw_fd(), nix::libc::TIOCSWINSZ, &ws) };
        assert_eq!(r, 0, "TIOCSWINSZ");
    }
}

fn libc_winsize(rows: u16, cols: u16) -> nix::libc::winsize {
    nix::libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

#[test]
fn attach_types_streams_resizes_and_detaches() {
    use std::os::unix::process::CommandExt;
    let d = Daemon::start();
    let id = spawn_pty(&d, "while read -r line; do eval \"$line\"; done");
    let (term, slave) = Terminal::open(24, 80);
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("--home").arg(d.home.path()).args(["attach", &id]);
    cmd.stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave);
    // SAFETY: in the forked child before exec: setsid(2) and ioctl(2) are
    // async-signal-safe; the terminal becomes the controlling tty so that
    // resizing it sends SIGWINCH to `procd attach`.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
            if nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let attach = cmd.spawn().expect("procd attach");
    term.wait_for("Ctrl-] detaches");
    // Keystrokes go to the session; its output comes back.
    term.type_keys(b"echo marker-$((40+2))\r");
    term.wait_for("marker-42");
    // The attach forwarded our 24x80 at start; a resize follows SIGWINCH.
    term.type_keys(b"stty size\r");
    term.wait_for("24 80");
    term.resize(33, 101);
    wait_until("the session's terminal is resized", || {
        term.type_keys(b"stty size\r");
        std::thread::sleep(std::time::Duration::from_millis(50));
        term.screen().contains("33 101")
    });
    // Ctrl-] detaches; the session keeps running.
    term.type_keys(&[0x1d]);
    let status = output_within(attach, "procd attach after Ctrl-]").status;
    assert!(status.success(), "{status:?}");
    term.wait_for("it keeps running");
    assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "running");
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn a_subscriber_that_never_reads_does_not_slow_ingestion() {
    let d = Daemon::start();
    let id = d.spawn("sleep 0.2; seq 1 200000; echo finished");
    // Subscribe and then never read: its buffers fill up and it lags.
    let mut stalled = d.connect();
    stalled.call("subscribe_output", json!({"session_id": id}));
    let w = d.wait_exit(&id);
    assert_eq!(w["exit_code"], 0);
    let tail = d.ok("log", json!({"session_id": id, "limit": 2}));
    assert_eq!(
        tail["output"], "200000\nfinished\n",
        "all output was ingested"
    );
    assert_eq!(tail["total_lines"], 200_001);
    // The subscriber only lagged by cursor: read now, its stream still
    // has every byte, in order, then the exit.
    let mut text = String::new();
    let mut next = 0;
    loop {
        let item = stalled.recv();
        let item = &item["params"]["result"];
        if item["exited"] == true {
            assert_eq!(item["exit_code"], 0, "{item}");
            break;
        }
        assert_eq!(
            item["cursor"], next,
            "a gap in the stream before next_cursor {}",
            item["next_cursor"]
        );
        next = item["next_cursor"].as_u64().expect("next_cursor");
        text.push_str(item["data"].as_str().expect("data"));
    }
    let expected: String =
        (1..=200_000).map(|i| format!("{i}\n")).collect::<String>() + "finished\n";
    assert!(
        text == expected,
        "the stalled subscriber's stream lost or changed bytes"
    );
    drop(stalled);
    assert!(d.ok("status", json!({}))["pid"].is_number());
}
