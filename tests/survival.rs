//! Sessions survive the daemon (docs/survival.md): when the daemon is SIGKILLed its
//! keeper keeps every session's descriptors and exit status and starts a new
//! daemon, which has every session back — same id, every byte in order,
//! stdin, resize and kill working, the exact exit code of what ended in the
//! gap. `procd restart` hands sessions over the same way; followers ride
//! through; a killed keeper leaves the daemon serving.

use crate::common::*;
use serde_json::json;
use std::process::{Command, Stdio};

/// A session printing "tick 0" … "tick 300", one line every 10 ms.
const TICKER: &str = "for i in $(seq 0 300); do echo tick $i; sleep 0.01; done";

/// Every line of `out` is "tick N", N counting up from 0 to `last` with no
/// gap and no repeat.
fn assert_ticks(out: &str, last: u64) {
    let lines: Vec<&str> = out
        .split('\n')
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.is_empty())
        .collect();
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(
            *line,
            format!("tick {i}"),
            "line {i} of the output: {out:?}"
        );
    }
    assert_eq!(lines.len() as u64, last + 1, "{out:?}");
}

/// The session `while read l; do echo got $l; done; exit 3` still takes
/// input, and ends with 3 when its stdin is closed.
fn assert_echo_answers_and_exits_3(d: &Daemon, echo: &str) {
    d.ok(
        "write_stdin",
        json!({"session_id": echo, "data": "hello\n"}),
    );
    d.read_until(echo, "got hello");
    d.ok("close_stdin", json!({"session_id": echo}));
    assert_eq!(d.wait_exit(echo)["exit_code"], 3);
}

#[test]
fn a_killed_daemon_loses_no_session_no_byte_and_no_exit_code() {
    let d = Daemon::start();
    let daemon = d.pid() as i32;
    let pipe = d.spawn(TICKER);
    let pty = d.spawn_with(json!({"command": TICKER, "pty": true}));
    let echo = d.spawn("while read l; do echo got $l; done; exit 3");
    let size = d.spawn_with(json!({"command": "read x; stty size", "pty": true}));
    let sleeper = d.spawn("sleep 300");
    let trapper = d.spawn("trap 'echo got USR1' USR1; while :; do sleep 0.1; done");
    // A lease and a session it owns: the lease is on disk and survives.
    let holder = Stand::sleep();
    let token = d.lease(holder.pid());
    let owned = d.spawn_with(json!({"command": "sleep 300", "owner": token}));
    // Two that end while no daemon may be serving: with a code, by a signal.
    let seven = d.spawn(&format!("tail --pid={daemon} -f /dev/null; exit 7"));
    let signalled = d.spawn(&format!(
        "exec sh -c 'tail --pid={daemon} -f /dev/null; kill -TERM $$'"
    ));
    let sleeper_pid = pid_of(&d, &sleeper);
    let sleeper_start = start_time(sleeper_pid);
    d.read_until(&pipe, "tick 20");
    d.read_until(&pty, "tick 20");

    let new = d.kill_daemon();
    assert_ne!(new as i32, daemon);
    // gateway.json names the daemon that serves, and its keeper.
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.home.path().join("run/gateway.json")).expect("gateway.json"),
    )
    .expect("json");
    assert_eq!(state["pid"].as_u64(), Some(u64::from(new)), "{state}");
    assert_eq!(
        state["keeper_pid"].as_i64(),
        Some(i64::from(d.keeper_pid())),
        "{state}"
    );

    // The same sessions, the same processes.
    let list = d.ok("list", json!({}));
    let ids: Vec<&str> = list["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter_map(|s| s["session_id"].as_str())
        .collect();
    for id in [
        &pipe, &pty, &echo, &size, &sleeper, &trapper, &owned, &seven, &signalled,
    ] {
        assert!(ids.contains(&id.as_str()), "{id} is gone: {list}");
    }
    assert!(alive(sleeper_pid) && start_time(sleeper_pid) == sleeper_start);
    assert_eq!(
        d.ok("poll", json!({"session_id": sleeper}))["status"],
        "running"
    );

    // Exact exits of what ended around the gap.
    let r = d.wait_exit(&seven);
    assert_eq!(r["exit_code"], 7, "{r}");
    assert_eq!(r["completion_reason"], "exited", "{r}");
    let r = d.wait_exit(&signalled);
    assert_eq!(r["signal"], "SIGTERM", "{r}");

    // Stdin and the terminal work on.
    assert_echo_answers_and_exits_3(&d, &echo);
    d.ok(
        "resize",
        json!({"session_id": size, "rows": 41, "cols": 101}),
    );
    d.ok("write_stdin", json!({"session_id": size, "data": "go\n"}));
    d.read_until(&size, "41 101");

    // Every byte, in order, and no SIGPIPE: both tickers finish with 0.
    for id in [&pipe, &pty] {
        assert_eq!(d.wait_exit(id)["exit_code"], 0, "{id}");
        assert_ticks(&d.read_all(id), 300);
    }

    // Signals reach it; the lease still owns its session and can own more.
    d.ok(
        "signal",
        json!({"session_id": trapper, "signal": "SIGUSR1"}),
    );
    d.read_until(&trapper, "got USR1");
    d.ok("kill", json!({"session_id": trapper}));
    assert_eq!(
        d.ok("poll", json!({"session_id": owned}))["status"],
        "running"
    );
    let more = d.spawn_with(json!({"command": "sleep 300", "owner": token}));
    for id in [&owned, &more] {
        d.ok("kill", json!({"session_id": id}));
    }

    // And kill still kills.
    let k = d.ok("kill", json!({"session_id": sleeper}));
    assert_eq!(k["status"], "killed", "{k}");
    wait_until("the killed session's process is gone", || {
        !alive(sleeper_pid)
    });
}

#[test]
fn sessions_survive_several_kills_in_a_row() {
    // The keeper restarts a daemon that keeps dying, handing the same
    // sessions over each time; what ended under one daemon keeps its exit
    // (ended.jsonl) under every later one.
    let d = Daemon::start();
    let id = d.spawn(TICKER);
    let ended = d.spawn("exit 9");
    assert_eq!(d.wait_exit(&ended)["exit_code"], 9);
    for round in 0..3 {
        d.read_until(&id, &format!("tick {}", 10 * (round + 1)));
        d.kill_daemon();
    }
    assert_eq!(d.wait_exit(&id)["exit_code"], 0);
    assert_ticks(&d.read_all(&id), 300);
    let r = d.ok("poll", json!({"session_id": ended}));
    assert_eq!(r["exit_code"], 9, "{r}");
    assert_eq!(r["completion_reason"], "exited", "{r}");
}

#[test]
fn a_follower_and_a_waiter_ride_through_a_kill() {
    let d = Daemon::start();
    let id = d.spawn("for i in $(seq 0 300); do echo tick $i; sleep 0.01; done; exit 5");
    let bin = env!("CARGO_BIN_EXE_procd");
    let home = d.home.path().to_str().expect("home");
    let follow = Command::new(bin)
        .args(["--home", home, "logs", "-f", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("procd logs -f");
    let waiter = Command::new(bin)
        .args(["--home", home, "wait", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("procd wait");
    d.read_until(&id, "tick 30");
    d.kill_daemon();
    let followed = output_within(follow, "procd logs -f");
    assert!(followed.status.success(), "{followed:?}");
    assert_ticks(&String::from_utf8_lossy(&followed.stdout), 300);
    let waited = output_within(waiter, "procd wait");
    assert_eq!(waited.status.code(), Some(5), "{waited:?}");
}

/// `procd wait --timeout S` gives up S seconds after it began, however
/// many daemons it waited on: after a reconnect it asks for what is left,
/// not for S again.
#[test]
fn a_waiters_timeout_bounds_the_whole_wait_across_a_kill() {
    let d = Daemon::start();
    let id = d.spawn("sleep 300");
    let bin = env!("CARGO_BIN_EXE_procd");
    let home = d.home.path().to_str().expect("home");
    let timeout = 4.0;
    let began = std::time::Instant::now();
    let waiter = Command::new(bin)
        .args(["--home", home, "wait", &id, "--timeout", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("procd wait");
    // Three of its four seconds go by before its daemon dies.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let killed = std::time::Instant::now();
    d.kill_daemon();
    let restart = killed.elapsed().as_secs_f64();
    let waited = output_within(waiter, "procd wait");
    let took = began.elapsed().as_secs_f64();
    assert_eq!(waited.status.code(), Some(124), "{waited:?}");
    // Asking for 4 s again would end it 3 s (plus the restart) later.
    assert!(
        took < timeout + restart + 1.5,
        "it gave up after {took:.1} s (the restart took {restart:.1} s)"
    );
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn restart_hands_every_session_to_the_new_daemon() {
    // Run from a copy of procd, replaced by another copy before the
    // restart, as an upgrade replaces the installed binary.
    let home = short_tempdir();
    let bin = home.path().join("procd");
    std::fs::copy(env!("CARGO_BIN_EXE_procd"), &bin).expect("copy procd");
    let cli = |args: &[&str]| {
        Command::new(&bin)
            .arg("--home")
            .arg(home.path())
            .args(args)
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .output()
            .expect("run procd")
    };
    let _cleanup = RecordedDaemon(home.path().to_path_buf());
    assert!(cli(&["start"]).status.success());
    let spawned = cli(&["spawn", "--json", "--", TICKER]);
    let id = serde_json::from_slice::<serde_json::Value>(&spawned.stdout).expect("json")
        ["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    let echo_out = cli(&["spawn", "--json", "--", "read l; echo got $l"]);
    let echo = serde_json::from_slice::<serde_json::Value>(&echo_out.stdout).expect("json")
        ["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    let before = gateway_pid(home.path());
    let upgrade = home.path().join("procd.new");
    std::fs::copy(env!("CARGO_BIN_EXE_procd"), &upgrade).expect("copy procd");
    std::fs::rename(&upgrade, &bin).expect("replace procd");
    let out = cli(&["restart", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let after = gateway_pid(home.path());
    assert_ne!(before, after, "a new daemon serves");
    assert_eq!(
        std::fs::read_link(format!("/proc/{after}/exe")).expect("exe"),
        bin,
        "the new daemon runs the binary now on disk"
    );
    assert!(cli(&["send", &echo, "hi"]).status.success());
    let waited = cli(&["wait", &echo]);
    assert_eq!(waited.status.code(), Some(0), "{waited:?}");
    let waited = cli(&["wait", &id]);
    assert_eq!(waited.status.code(), Some(0), "{waited:?}");
    let logs = cli(&["logs", "--limit", "1000", &id]);
    assert_ticks(&String::from_utf8_lossy(&logs.stdout), 300);
    let logs = cli(&["logs", &echo]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("got hi"),
        "{logs:?}"
    );
    // `procd stop` still ends everything.
    let sleeper = cli(&["spawn", "--json", "--", "sleep 300"]);
    let pid = serde_json::from_slice::<serde_json::Value>(&sleeper.stdout).expect("json")["pid"]
        .as_i64()
        .expect("pid") as i32;
    assert!(cli(&["stop"]).status.success());
    assert!(!alive(pid), "stop ended the session");
    assert!(!alive(after), "the daemon is gone");
}

/// A daemon whose crash points (`PROCD_TEST_CRASH_FILE`) are armed by
/// writing a point's name into `crash`.
fn crashable(crash: &std::path::Path) -> Daemon {
    Daemon::with_env(
        "",
        &[("PROCD_TEST_CRASH_FILE", crash.to_str().expect("path"))],
    )
}

/// Arms the crash at `point`, ends `id` (it waits in `read`), and waits
/// for the next daemon. The request is not answered: the daemon may die
/// before it replies.
fn crash_at(d: &Daemon, crash: &std::path::Path, point: &str, id: &str) {
    let before = d.pid();
    std::fs::write(crash, point).expect("arm the crash");
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "submit_stdin",
        "params": {"session_id": id, "data": ""}});
    let mut conn = d.connect();
    conn.send_raw(&request.to_string());
    d.next_daemon_after(before);
    drop(conn);
    assert!(!crash.exists(), "the daemon died at {point}");
}

/// A restarting session counting its runs in `dir` (`counting`): each
/// waits in `read`, then the first exits 3 and later ones 0.
fn restarting(d: &Daemon, dir: &std::path::Path) -> String {
    d.spawn_with(json!({
        "command": counting(dir, "read _; [ $n -ge 2 ] && exit 0; exit 3"),
        "restart": {"policy": "on-failure", "max_restarts": 2, "backoff_s": 0.1},
    }))
}

/// The daemon dies right after it reaped a session's root, before it
/// recorded the exit anywhere. The keeper learns the exit from the root's
/// pidfd; the next daemon ends the session with it, and a restarting
/// session starts its next run. (Each root is reaped by the daemon that
/// started it: a root handed over is the keeper's child.)
#[test]
fn an_exit_the_daemon_reaped_as_it_died_is_not_lost() {
    assert!(
        procd_sys::pidfd::exits_visible(),
        "a pidfd's holder cannot read an exit on this kernel (Linux 6.15+ can): the window this test closes stays open here"
    );
    let dir = tempfile::tempdir().expect("dir");
    let crash = dir.path().join("crash");
    let d = crashable(&crash);
    let once = d.spawn("read _; exit 7");
    crash_at(&d, &crash, "after-reap", &once);
    let id = restarting(&d, dir.path());
    d.read_until(&id, "run 1 ");
    crash_at(&d, &crash, "after-reap", &id);
    let w = d.wait_exit(&once);
    assert_eq!(w["exit_code"], 7, "{w}");
    assert_eq!(w["completion_reason"], "exited", "{w}");
    d.read_until(&id, "\nrun 2 \n");
    d.ok("submit_stdin", json!({"session_id": id, "data": ""}));
    let w = d.wait_exit(&id);
    assert_eq!(w["exit_code"], 0, "its second run ended it: {w}");
    assert_eq!(runs(dir.path()), 2);
    d.read_until(&id, "it exited with code 3; run 2 starts");
}

/// The daemon dies after it started a restarted run and gave the keeper
/// its descriptors, before the checkpoint named the run (it still names
/// the run before, in its backoff). The next daemon takes the new run
/// back instead of ending it as unrecorded, and announces the restart
/// once.
#[test]
fn a_restarted_run_the_checkpoint_did_not_name_yet_is_taken_back() {
    let dir = tempfile::tempdir().expect("dir");
    let crash = dir.path().join("crash");
    let d = crashable(&crash);
    let id = restarting(&d, dir.path());
    d.read_until(&id, "run 1 ");
    crash_at(&d, &crash, "after-restart-hold", &id);
    d.read_until(&id, "\nrun 2 \n");
    let polled = d.ok("poll", json!({"session_id": id}));
    assert_eq!(polled["status"], "running", "{polled}");
    let pid = polled["pid"].as_i64().expect("pid") as i32;
    assert!(alive(pid), "run 2 was not ended as unrecorded");
    let restarted: Vec<_> = restarted_events(&d, &id, None)
        .into_iter()
        .map(|e| e["run"].clone())
        .collect();
    assert_eq!(restarted, vec![json!(2)], "announced once");
    d.ok("submit_stdin", json!({"session_id": id, "data": ""}));
    let w = d.wait_exit(&id);
    assert_eq!(w["exit_code"], 0, "run 2 ended it: {w}");
    assert_eq!(runs(dir.path()), 2);
}

#[test]
fn a_killed_keeper_leaves_the_daemon_serving_and_says_so() {
    let mut d = Daemon::start();
    let id = d.spawn("sleep 300");
    let pid = pid_of(&d, &id);
    let daemon = d.pid() as i32;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.keeper_pid()),
        nix::sys::signal::Signal::SIGKILL,
    );
    wait_until("the daemon reports the keeper gone", || {
        d.ok("status", json!({}))["faults"]
            .to_string()
            .contains("keeper")
    });
    assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "running");
    assert!(alive(daemon));
    // Stopping the daemon itself still ends every session.
    d.stop();
    stop_recorded_daemon(d.home.path());
    assert!(!alive(daemon), "the daemon stopped");
    assert!(!alive(pid), "the session ended with the daemon");
}

/// The daemon recorded in `<home>/run/gateway.json`.
fn gateway_pid(home: &std::path::Path) -> i32 {
    let text = std::fs::read_to_string(home.join("run/gateway.json")).expect("gateway.json");
    serde_json::from_str::<serde_json::Value>(&text).expect("json")["pid"]
        .as_i64()
        .expect("pid") as i32
}

/// Stops a background daemon this test started, whatever happens.
struct RecordedDaemon(std::path::PathBuf);

impl Drop for RecordedDaemon {
    fn drop(&mut self) {
        stop_recorded_daemon(&self.0);
    }
}

/// `procd mcp` on pipes, initialized, against `d`.
struct McpPipe {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl McpPipe {
    fn start(d: &Daemon) -> McpPipe {
        let mut child = Command::new(env!("CARGO_BIN_EXE_procd"))
            .arg("--home")
            .arg(d.home.path())
            .arg("mcp")
            .env("HOME", d.home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("procd mcp");
        let input = child.stdin.take().expect("stdin");
        let output = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut mcp = McpPipe {
            child,
            input,
            output,
        };
        mcp.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "survival", "version": "0"}}}),
        );
        mcp.recv();
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, msg: serde_json::Value) {
        use std::io::Write;
        writeln!(self.input, "{msg}").expect("write to procd mcp");
    }

    fn recv(&mut self) -> serde_json::Value {
        use std::io::BufRead;
        let mut line = String::new();
        self.output
            .read_line(&mut line)
            .expect("read from procd mcp");
        serde_json::from_str(&line).expect("a JSON answer")
    }

    fn tool(&mut self, id: u64, name: &str, arguments: serde_json::Value) -> serde_json::Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}));
        self.recv()
    }

    /// Closes its input; it must then exit 0.
    fn finish(self) {
        drop(self.input);
        let out = output_within(self.child, "procd mcp");
        assert!(out.status.success(), "{out:?}");
    }
}

#[test]
fn an_mcp_server_rides_through_a_kill() {
    let d = Daemon::start();
    let id = d.spawn("sleep 300");
    let mut mcp = McpPipe::start(&d);
    let before = mcp.tool(2, "list", json!({}));
    assert!(before.to_string().contains(&id), "{before}");
    d.kill_daemon();
    // The next call reaches the new daemon, which has the session.
    let after = mcp.tool(3, "list", json!({}));
    assert_ne!(after["result"]["isError"], true, "{after}");
    assert!(after.to_string().contains(&id), "{after}");
    mcp.finish();
}

/// A `start` whose daemon dies before it answers has started its command
/// (the spawn is checkpointed before the answer waits): the model is told
/// to look before starting it again, not just to try again, and `list`
/// shows the one session.
#[test]
fn an_mcp_start_cut_by_a_kill_says_the_command_may_have_started() {
    let d = Daemon::start();
    let mut mcp = McpPipe::start(&d);
    let command = "echo begun; exec sleep 300";
    mcp.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "start", "arguments": {
            "command": command, "yield_ms": 60000,
            "ready": {"output": "never printed"}}}}));
    // Killed once procs.json records it: a daemon killed between the fork
    // and that write leaves a process the next one ends (not this case).
    wait_until("procs.json records the command", || {
        checkpointed(d.home.path())
            .iter()
            .any(|e| e["command"] == command)
    });
    d.kill_daemon();
    let cut = mcp.recv();
    assert_eq!(cut["result"]["isError"], true, "{cut}");
    let text = cut["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        text.contains("may have started: call `list` before starting it again"),
        "{cut}"
    );
    let after = mcp.tool(3, "list", json!({}));
    let processes = &after["result"]["structuredContent"]["processes"];
    assert_eq!(processes.as_array().map(Vec::len), Some(1), "{after}");
    assert_eq!(processes[0]["command"], command, "{after}");
    d.ok("kill_all", json!({}));
    mcp.finish();
}

/// The same for `procd spawn`, which waits for readiness too: it fails
/// (exit 1) saying what was asked may have been done, and the session is
/// there.
#[test]
fn a_cli_spawn_cut_by_a_kill_says_it_may_have_been_done() {
    let d = Daemon::start();
    let command = "echo begun; exec sleep 300";
    let spawn = Command::new(env!("CARGO_BIN_EXE_procd"))
        .arg("--home")
        .arg(d.home.path())
        .args(["spawn", "--ready-output", "never printed", "--", command])
        .env("HOME", d.home.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("procd spawn");
    wait_until("procs.json records the command", || {
        checkpointed(d.home.path())
            .iter()
            .any(|e| e["command"] == command)
    });
    d.kill_daemon();
    let out = output_within(spawn, "procd spawn");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("what was asked may have been done: see `procd ps` before asking again"),
        "{said}"
    );
    let listed = d.ok("list", json!({}))["processes"].clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["command"], command, "{listed}");
    d.ok("kill_all", json!({}));
}

/// The lines `from` prints, as they come (a thread reads them).
fn lines_of(from: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(from).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line of `lines` that holds `text`, or panics after
/// `PATIENCE`.
fn line_with(lines: &std::sync::mpsc::Receiver<String>, text: &str) -> String {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(text) => return line,
            Ok(_) => continue,
            Err(e) => panic!("no line with {text:?}: {e}"),
        }
    }
}

/// `procd events` rides through a daemon's death: it subscribes again
/// from the last event number it printed, and a new reader given a
/// number (`--since`) gets what came after it, across the kill.
#[test]
fn procd_events_rides_through_a_kill() {
    let d = Daemon::start();
    let events = |args: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_procd"))
            .arg("--home")
            .arg(d.home.path())
            .arg("events")
            .args(args)
            .env("HOME", d.home.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("procd events");
        let printed = lines_of(child.stdout.take().expect("stdout"));
        (child, printed)
    };
    let (mut follower, printed) = events(&["--json"]);
    // Subscribed once a start it did not see coming is printed.
    let mut first = String::new();
    let mut started = serde_json::Value::Null;
    wait_until("procd events prints a start", || {
        first = d.spawn("true");
        let until = std::time::Instant::now() + std::time::Duration::from_millis(200);
        let left = || until.saturating_duration_since(std::time::Instant::now());
        std::iter::from_fn(|| printed.recv_timeout(left()).ok()).any(|line| {
            started = serde_json::from_str(&line).unwrap_or_default();
            started["type"] == "started" && started["session_id"] == first.as_str()
        })
    });
    let seq = started["seq"]
        .as_u64()
        .expect("a started event is numbered");
    d.wait_exit(&first);
    d.kill_daemon();
    let second = d.spawn("true");
    line_with(&printed, &second);
    let _ = follower.kill();
    let _ = follower.wait();

    // A new reader resumes after the number it was given: the first
    // session's exit (before the kill) and the second's start (after it)
    // are still there, one line each, in order.
    let since = seq.to_string();
    let (mut resumed, lines) =
        events(&["--since", &since, "--session", &first, "--session", &second]);
    let exited = line_with(&lines, " exited ");
    let again = line_with(&lines, &format!(" started {second} "));
    let _ = resumed.kill();
    let _ = resumed.wait();
    let number = |line: &str| line.split(' ').next().and_then(|n| n.parse::<u64>().ok());
    assert!(number(&exited) > Some(seq), "{exited}");
    assert!(number(&again) > number(&exited), "{exited}\n{again}");
    assert!(
        exited.ends_with(&format!(
            "exited {first} exited (exit code 0, exited): true"
        )),
        "{exited}"
    );
}

#[test]
fn an_attached_terminal_rides_through_a_kill() {
    let d = Daemon::start();
    let id = d.spawn_with(json!({"command": TICKER, "pty": true}));
    // Its keyboard stays open (and silent) until it is done: EOF on stdin
    // would detach it.
    let (stdin, keyboard) = std::io::pipe().expect("pipe");
    let attach = Command::new(env!("CARGO_BIN_EXE_procd"))
        .arg("--home")
        .arg(d.home.path())
        .args(["attach", &id])
        .env("HOME", d.home.path())
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("procd attach");
    d.read_until(&id, "tick 30");
    d.kill_daemon();
    let out = output_within(attach, "procd attach");
    drop(keyboard);
    assert!(out.status.success(), "{out:?}");
    assert_ticks(&String::from_utf8_lossy(&out.stdout), 300);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("exited with code 0"),
        "{out:?}"
    );
}

/// Each daemon that takes the session over keeps its deadline: it is
/// recorded anew in procs.json from the session's start and its whole
/// timeout, not from what was left of it (which moved it earlier on every
/// takeover).
#[test]
fn a_timeout_keeps_its_deadline_across_two_daemon_kills() {
    let d = Daemon::start();
    let id = d.spawn_with(json!({"command": "sleep 300", "timeout_s": 4}));
    let uptime = || {
        d.ok("poll", json!({"session_id": id}))["uptime_seconds"]
            .as_f64()
            .expect("uptime")
    };
    for age in [1.0, 2.0] {
        wait_until("the session is old enough", || uptime() >= age);
        d.kill_daemon();
    }
    let ended = d.wait_exit(&id);
    assert_eq!(ended["completion_reason"], "timeout", "{ended}");
    let lived = ended["uptime_seconds"].as_f64().expect("uptime");
    assert!(lived >= 3.9, "it timed out after {lived} s: {ended}");
}

#[test]
fn a_timeout_and_a_met_ready_condition_outlive_the_daemon() {
    let d = Daemon::start();
    let timed = d.spawn_with(json!({"command": "sleep 300", "timeout_s": 2}));
    let ready = d.spawn_with(json!({
        "command": "echo booting; echo READY; sleep 300",
        "ready": {"output": "^READY$"},
    }));
    wait_until("the server is ready", || {
        d.ok("poll", json!({"session_id": ready}))["ready"] == true
    });
    let before = d.ok("poll", json!({"session_id": ready}))["ready_after_ms"].clone();
    // The checkpoint records it (written right after it is met).
    wait_until("procs.json records the session as ready", || {
        checkpointed(d.home.path())
            .iter()
            .any(|e| e["session_id"] == ready.as_str() && e["ready_after_ms"] == before)
    });
    d.kill_daemon();
    let r = d.ok("poll", json!({"session_id": ready}));
    assert_eq!(r["ready"], true, "{r}");
    assert_eq!(r["ready_after_ms"], before, "{r}");
    // The timeout still ends the session, counted from its start.
    let w = d.wait_exit(&timed);
    assert_eq!(w["completion_reason"], "timeout", "{w}");
    d.ok("kill", json!({"session_id": ready}));
}

/// Writes numbered records as fast as the pipe takes them (chunks of 200,
/// a short pause between chunks so the log stays small) until `stop`
/// exists, then "end N". `sep` ends each record: "\n" (lines that start
/// like a held `logout` line, so the noise filter holds chunk ends) or no
/// newline at all (a progress bar redrawn with "\r").
fn fast_writer(stop: &std::path::Path, lines: bool) -> String {
    let (record, end) = if lines {
        ("'line %d\\n'", "'end %d\\n'")
    } else {
        ("'\\r%07d'", "'\\nend %d\\n'")
    };
    format!(
        "exec python3 -c \"
import os, time
i = 0
while not os.path.exists('{stop}'):
    os.write(1, ''.join({record} % n for n in range(i, i + 200)).encode())
    i += 200
    time.sleep(0.0005)
os.write(1, ({end} % i).encode())
\"",
        stop = stop.display()
    )
}

/// The records of `log` are 0, 1, 2 … N-1 exactly once each, in order,
/// followed by "end N".
fn assert_records(log: &[u8], lines: bool, what: &str) -> u64 {
    let text = String::from_utf8_lossy(log).replace('\r', if lines { "" } else { "\r" });
    let (body, end) = text
        .trim_end()
        .rsplit_once('\n')
        .unwrap_or_else(|| panic!("{what}: no end line in {} bytes", log.len()));
    let n: u64 = end
        .trim()
        .strip_prefix("end ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{what}: the last line is {end:?}"));
    let records: Vec<&str> = if lines {
        body.split('\n').collect()
    } else {
        body.split('\r').filter(|r| !r.is_empty()).collect()
    };
    for (i, r) in records.iter().enumerate() {
        let want = if lines {
            format!("line {i}")
        } else {
            format!("{i:07}")
        };
        assert!(
            *r == want,
            "{what}: record {i} is {r:?} (want {want:?}); {} records, end {n}",
            records.len()
        );
    }
    assert_eq!(records.len() as u64, n, "{what}: records before the end");
    n
}

#[test]
fn fast_output_loses_no_byte_across_fifteen_kills() {
    // Four writers as fast as they can (pipe and PTY, lines and a progress
    // bar); the daemon is SIGKILLed 15 times at random gaps of 50-400 ms
    // while they write. The log must hold every record once, in order.
    let d = Daemon::with_config("max_log_bytes = 1073741824\n");
    let stop = d.home.path().join("stop-writing");
    let writers: Vec<(String, bool, &str)> = [
        (false, true, "pipe lines"),
        (false, false, "pipe progress bar"),
        (true, true, "pty lines"),
        (true, false, "pty progress bar"),
    ]
    .into_iter()
    .map(|(pty, lines, what)| {
        let id = d.spawn_with(json!({"command": fast_writer(&stop, lines), "pty": pty}));
        (id, lines, what)
    })
    .collect();
    for (id, lines, _) in &writers {
        d.read_until(id, if *lines { "line 1000" } else { "0001000" });
    }
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos() as u64)
        .unwrap_or(1)
        | 1;
    eprintln!("kill gaps seeded with {seed}");
    for _ in 0..15 {
        // xorshift: a different spread of gaps on every run.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(std::time::Duration::from_millis(50 + seed % 351));
        d.kill_daemon();
    }
    std::fs::write(&stop, "").expect("stop file");
    for (id, lines, what) in &writers {
        assert_eq!(d.wait_exit(id)["exit_code"], 0, "{what}");
        let log = std::fs::read(d.home.path().join(format!("state/logs/{id}.log")))
            .expect("the session's log");
        let n = assert_records(&log, *lines, what);
        eprintln!("{what}: {n} records, {} bytes", log.len());
        // What a reader is served is the log, too.
        let tail = d.ok("log", json!({"session_id": id, "limit": 1}));
        assert!(
            tail["output"]
                .as_str()
                .unwrap_or("")
                .contains(&format!("end {n}")),
            "{what}: {tail}"
        );
    }
}

/// A monitor tick often enough to see a prompt within a test's patience.
const PROMPT_SEEN_SOON: &str = "monitor_interval_s = 0.1\n";

/// Drains every event there is now (one call).
fn drain(d: &Daemon) -> Vec<serde_json::Value> {
    d.ok("drain_notifications", json!({}))["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The events of `events` of `kind` about session `id`.
fn count(events: &[serde_json::Value], kind: &str, id: &str) -> usize {
    events
        .iter()
        .filter(|e| e["type"] == kind && e["session_id"] == id)
        .count()
}

/// Queues a completion, a watch match and an input_wanted event, and
/// waits (through a subscriber, which consumes nothing) until all three
/// are queued. Returns the three sessions.
fn queue_three(d: &Daemon) -> [String; 3] {
    let mut sub = d.connect();
    let r = sub.call("subscribe_events", json!({}));
    assert!(r["result"].is_number() || r["result"].is_string(), "{r}");
    let done = d.spawn_with(json!({"command": "echo bye; exit 4", "notify_on_complete": true}));
    let watched = d.spawn_with(json!({
        "command": "echo 'BUILD FAILED here'; sleep 300",
        "watch_patterns": ["BUILD FAILED"],
    }));
    let asker = d.spawn("printf 'Your name? '; read name; echo \"hi $name\"");
    let mut seen: Vec<(String, String)> = Vec::new();
    let wanted = [
        ("completion", &done),
        ("watch_match", &watched),
        ("input_wanted", &asker),
    ];
    while !wanted
        .iter()
        .all(|(k, id)| seen.contains(&(k.to_string(), id.to_string())))
    {
        let v = sub.recv();
        if v["method"] == "event" {
            let e = &v["params"]["result"];
            let kind = e["type"].as_str().unwrap_or_default().to_string();
            let id = e["session_id"].as_str().unwrap_or_default().to_string();
            seen.push((kind, id));
        }
    }
    [done, watched, asker]
}

/// Each of the three queued events is drained once, and only once.
fn assert_drained_once(d: &Daemon, [done, watched, asker]: &[String; 3]) {
    let events = drain(d);
    assert_eq!(count(&events, "completion", done), 1, "{events:?}");
    assert_eq!(count(&events, "watch_match", watched), 1, "{events:?}");
    assert_eq!(count(&events, "input_wanted", asker), 1, "{events:?}");
    let c = events
        .iter()
        .find(|e| e["type"] == "completion")
        .expect("completion");
    assert_eq!(c["exit_code"], 4, "{c}");
    let again = drain(d);
    assert!(again.is_empty(), "drained twice: {again:?}");
}

#[test]
fn queued_notifications_survive_daemon_kills_and_are_drained_once() {
    let d = Daemon::with_config(PROMPT_SEEN_SOON);
    let three = queue_three(&d);
    d.kill_daemon();
    assert_drained_once(&d, &three);
    // The drain is remembered too: the next daemon queues none of them
    // again (the asker still waits at the same prompt).
    d.kill_daemon();
    let after = drain(&d);
    assert!(after.is_empty(), "queued again after a drain: {after:?}");
    for id in &three {
        d.ok("kill", json!({"session_id": id}));
    }
}

#[test]
fn queued_notifications_survive_the_keeper_and_daemon_dying_together() {
    let mut d = Daemon::with_config(PROMPT_SEEN_SOON);
    let three = queue_three(&d);
    d.crash();
    d.restart();
    assert_drained_once(&d, &three);
    for id in &three {
        let _ = d.call("kill", json!({"session_id": id}));
    }
}

/// Installs procd at `path` as an upgrade would: a new file renamed over
/// the old one (another inode, the running program untouched).
fn install(path: &std::path::Path) {
    let tmp = path.with_extension("new");
    std::fs::copy(BIN, &tmp).expect("copy procd");
    std::fs::rename(&tmp, path).expect("install procd");
}

fn inode(path: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| m.ino()).unwrap_or(0)
}

#[test]
fn restart_onto_a_new_program_upgrades_the_keeper_in_place() {
    let bin = short_tempdir();
    let program = bin.path().join("procd");
    install(&program);
    let d = Daemon::running(&program);
    let keeper = d.keeper_pid();
    let keeper_start = start_time(keeper);
    let old = d.pid() as i32;
    let echo = d.spawn("while read l; do echo got $l; done; exit 3");
    let pty = d.spawn_with(json!({"command": TICKER, "pty": true}));
    // Ends as the old daemon goes: its exit crosses the keeper's exec.
    let seven = d.spawn(&format!("tail --pid={old} -f /dev/null; exit 7"));
    d.read_until(&pty, "tick 20");
    let program_path = program.display().to_string();
    let before = inode(&format!("/proc/{keeper}/exe"));
    assert_eq!(before, inode(&program_path));

    install(&program);
    assert_ne!(inode(&program_path), before);
    // What `procd restart` and the unit's ExecReload= send.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(keeper),
        nix::sys::signal::Signal::SIGUSR1,
    );
    wait_until("a daemon of the new program serves", || {
        let now = d.pid() as i32;
        now != 0 && now != old && status_pid(&d.socket()) == Some(now as u64)
    });
    // The same keeper process, now running the new file.
    assert_eq!(d.keeper_pid(), keeper);
    assert_eq!(start_time(keeper), keeper_start);
    assert_eq!(inode(&format!("/proc/{keeper}/exe")), inode(&program_path));
    let log = std::fs::read_to_string(d.home.path().join("daemon.err")).unwrap_or_default();
    assert!(
        log.contains("upgraded in place; 3 session(s) carried over"),
        "{log}"
    );

    // Every session on, with its exact exit.
    assert_eq!(d.wait_exit(&seven)["exit_code"], 7);
    assert_echo_answers_and_exits_3(&d, &echo);
    assert_eq!(d.wait_exit(&pty)["exit_code"], 0);
    assert_ticks(&d.read_all(&pty), 300);
}

#[test]
fn a_keeper_gives_up_after_five_daemons_that_die_before_serving() {
    // Restart policy (docs/survival.md): a daemon that cannot start is
    // tried again, after the brake, but not forever: after 5 in a row the
    // keeper exits 1, and the sessions it held go the "both die" way.
    let mut d = Daemon::start();
    let keeper = d.keeper_pid();
    let id = d.spawn("sleep 300");
    let pid = pid_of(&d, &id);
    // Every daemon started from now on refuses its config.
    std::fs::write(d.home.path().join("config.toml"), "no_such_key = 1\n").expect("config");
    let daemon = d.pid() as i32;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_eq!(d.wait_exit_code(), Some(1), "the keeper gave up with 1");
    assert!(!alive(keeper));
    let log = std::fs::read_to_string(d.home.path().join("daemon.err")).unwrap_or_default();
    assert!(
        log.contains("5 daemons in a row died before serving; giving up"),
        "{log}"
    );
    let refused = log.matches("no_such_key").count();
    assert!(refused >= 5, "{refused} refusals of the config: {log}");
    // Nothing of the session may outlive the test.
    kill_checkpointed_sessions(d.home.path());
    wait_until("the held session's process is gone", || !alive(pid));
    remove_instance_cgroups(d.home.path());
}

/// An exit a kill answered with is on disk when the answer comes: the
/// keeper and the daemon SIGKILLed right after `kill_all` (nothing left to
/// write a checkpoint), the next daemon lists each session as killed by
/// `kill_all`, none of them lost.
#[test]
fn exits_a_kill_answered_with_outlive_a_crash_right_after() {
    let mut d = Daemon::start();
    let ids: Vec<String> = (0..24).map(|_| d.spawn("sleep 300")).collect();
    let killed = d.ok("kill_all", json!({}));
    d.crash();
    assert_eq!(killed["killed"], 24, "{killed}");
    d.restart();
    for id in &ids {
        let p = d.ok("poll", json!({"session_id": id}));
        let exit = json!([p["status"], p["completion_reason"], p["termination_source"]]);
        assert_eq!(exit, json!(["exited", "killed", "kill_all"]), "{id}: {p}");
    }
}

/// The first answer to `status` on `socket`, from a client that connects
/// as soon as anything accepts there: it retries only while nothing is
/// bound or listening yet, never after a connection was accepted. It
/// fails at once when it reached the listener of `crashed` (the pid that
/// called `listen`, as SO_PEERCRED gives it), saying who still holds one
/// at the path; any failure says whose listener it reached.
fn first_answer(socket: &std::path::Path, crashed: u32) -> Result<serde_json::Value, String> {
    use std::io::{BufRead, Write};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let stream = loop {
        match std::os::unix::net::UnixStream::connect(socket) {
            Ok(stream) => break stream,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::yield_now()
            }
            Err(e) => return Err(format!("connect: {e}")),
        }
    };
    let reached = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .map(|c| c.pid())
        .ok();
    if reached == Some(crashed as i32) {
        return Err(format!(
            "reached the crashed daemon's listener; listeners at the path, with their holders: {:?}",
            listeners_at(socket)
        ));
    }
    let failed = |what: &str, e: std::io::Error| {
        format!(
            "{what}: {e} (the listener reached was made by pid {reached:?}; \
             listeners at the path now, with their holders: {:?})",
            listeners_at(socket)
        )
    };
    let timeout = Some(std::time::Duration::from_secs(30));
    stream
        .set_read_timeout(timeout)
        .map_err(|e| e.to_string())?;
    (&stream)
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"status\"}\n")
        .map_err(|e| failed("write", e))?;
    let mut line = String::new();
    std::io::BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(|e| failed("read", e))?;
    serde_json::from_str(&line).map_err(|e| format!("answer {line:?}: {e}"))
}

/// The listening sockets bound at `path` (socket inodes, from
/// /proc/net/unix), each with the processes that hold it.
fn listeners_at(path: &std::path::Path) -> Vec<(u64, Vec<String>)> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let path = path.to_string_lossy();
    // Num RefCount Protocol Flags Type St Inode Path; 00010000: listening.
    let inodes: Vec<u64> = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 8 && f[7] == path && f[3] == "00010000")
        .filter_map(|f| f[6].parse().ok())
        .collect();
    inodes
        .into_iter()
        .map(|inode| (inode, holders_of(&format!("socket:[{inode}]"))))
        .collect()
}

/// Processes with a descriptor whose link reads `target`: each pid with
/// its /proc stat line (name, state, parent). Every thread's table is
/// looked at: a killed process's leader shows none while its other
/// threads still hold it.
fn holders_of(target: &str) -> Vec<String> {
    let holds = |pid: i32| {
        let threads = std::fs::read_dir(format!("/proc/{pid}/task"));
        threads.into_iter().flatten().flatten().any(|thread| {
            let dir = format!("{}/fd", thread.path().display());
            fd_links(&dir).iter().any(|(_, link)| link == target)
        })
    };
    all_pids()
        .filter(|pid| holds(*pid))
        .map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or(pid.to_string()))
        .collect()
}

/// A whole crash (keeper and daemon SIGKILLed, one session's processes
/// killed too), then a new daemon, and a client at its socket at once: the
/// first request is answered, every time (docs/survival.md, "A client
/// during a crash").
#[test]
fn recovery_never_drops_the_first_client() {
    let mut d = Daemon::start();
    let socket = d.socket();
    for round in 0..300 {
        let kept = d.spawn("exec sleep 300");
        let killed = d.spawn("sleep 300 & exec sleep 301");
        let group = pid_of(&d, &killed);
        let old = d.pid();
        d.crash();
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(group),
            nix::sys::signal::Signal::SIGKILL,
        );
        d.restart_at_once();
        let answer = first_answer(&socket, old).unwrap_or_else(|e| {
            let new = d.pid();
            panic!("round {round}: {e}; the crashed daemon was pid {old}, the new one is {new}")
        });
        assert!(
            answer["result"]["pid"].as_u64().is_some(),
            "round {round}: {answer}"
        );
        wait_until("the killed session is seen to have ended", || {
            d.ok("poll", json!({"session_id": killed}))["status"] == "exited"
        });
        d.ok("kill", json!({"session_id": kept}));
    }
}

/// No child of the daemon holds the listening socket, not even between
/// its clone and its exec: the daemon keeps the socket above the
/// descriptors a child copies (its spawn slots, which hold /dev/null
/// between spawns). A copy there outlives a daemon SIGKILLed in that
/// moment, and a client that connects to it is reset when the child's
/// exec closes it (docs/survival.md, "A client during a crash").
#[test]
fn the_listening_socket_sits_above_what_a_child_copies() {
    let d = Daemon::start();
    let listeners = listeners_at(&d.socket());
    let [(inode, holders)] = listeners.as_slice() else {
        panic!("one listener at the socket: {listeners:?}")
    };
    // (What `recovery_never_drops_the_first_client` reports rests on it.)
    let daemon = format!("{} (procd)", d.pid());
    assert!(
        holders.iter().any(|h| h.starts_with(&daemon)),
        "the daemon among the listener's holders: {holders:?}"
    );
    let fds = d.fds();
    let at = |link: &str| -> Vec<i32> {
        fds.iter()
            .filter(|(_, l)| l == link)
            .map(|(fd, _)| *fd)
            .collect()
    };
    let listener = at(&format!("socket:[{inode}]"));
    let slots = at("/dev/null").into_iter().max();
    assert!(
        matches!((listener.as_slice(), slots), ([fd], Some(top)) if *fd > top),
        "the listener at {listener:?}, the highest /dev/null at {slots:?}: {fds:?}"
    );
}

/// A follower rides through its daemon's restart (the keeper's next
/// daemon: the same instance), and is told, rather than moved over in
/// silence, when it reconnects to another procd: keeper and daemon
/// crashed and a new `procd daemon` started afresh (docs/cluster.md).
#[test]
fn a_follower_rides_through_a_restart_and_is_told_of_another_procd() {
    let mut d = Daemon::start();
    let id = d.spawn("echo first; exec cat");
    let instance = d.ok("status", json!({}))["instance"].clone();
    let mut follower = Command::new(BIN)
        .arg("--home")
        .arg(d.home.path())
        .env("HOME", d.home.path())
        .args(["logs", "-f", &id])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("logs -f");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        follower.stdout.take().expect("stdout"),
    ));
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("first"));

    d.kill_daemon();
    assert_eq!(d.ok("status", json!({}))["instance"], instance);
    d.ok(
        "submit_stdin",
        json!({"session_id": id, "data": "second\n"}),
    );
    assert_eq!(
        lines.next().and_then(Result::ok).as_deref(),
        Some("second"),
        "the follower rode through the restart"
    );

    d.crash();
    d.restart();
    let now = d.ok("status", json!({}))["instance"].clone();
    assert_ne!(now, instance, "a keeper started afresh is another instance");
    drop(lines);
    let out = output_within(follower, "logs -f across another procd");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        said.contains(&format!(
            "is another procd now (instance {}; it was {})",
            now.as_str().unwrap_or_default(),
            instance.as_str().unwrap_or_default()
        )),
        "{said}"
    );
    d.ok("kill", json!({"session_id": id}));
}

/// `procs.json` among many sessions: a spawn, an exit and a kill each
/// write their own session's record in place (the file keeps its inode;
/// a whole write swaps in another), and after a whole crash (keeper and
/// daemon SIGKILLed) the next daemon has every session from that file
/// alone: the running ones running, the ended ones with their exits.
#[test]
fn procs_json_written_in_place_among_many_sessions_outlives_a_crash() {
    let mut d = Daemon::start();
    let sleepers: Vec<String> = (0..24).map(|_| d.spawn("exec sleep 300")).collect();
    let path = d.state_dir().join("procs.json");
    let path = path.to_str().expect("a UTF-8 path");
    let before = inode(path);
    let extra = d.spawn("exec sleep 300");
    let ended = d.spawn("exit 7");
    assert_eq!(d.wait_exit(&ended)["exit_code"], 7);
    let killed = &sleepers[5..8];
    for id in killed {
        let k = d.ok("kill", json!({"session_id": id}));
        assert_eq!(k["status"], "killed", "{k}");
    }
    assert_eq!(inode(path), before, "procs.json was written whole");
    d.crash();
    d.restart();
    let running: std::collections::BTreeSet<String> = d.ok("list", json!({"status": "running"}))
        ["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .map(|p| p["session_id"].as_str().unwrap_or("").to_string())
        .collect();
    let expected: std::collections::BTreeSet<String> = sleepers
        .iter()
        .filter(|id| !killed.contains(id))
        .chain([&extra])
        .cloned()
        .collect();
    assert_eq!(running, expected);
    for id in killed {
        let p = d.ok("poll", json!({"session_id": id}));
        let exit = json!([p["status"], p["completion_reason"]]);
        assert_eq!(exit, json!(["exited", "killed"]), "{id}: {p}");
    }
    assert_eq!(d.ok("poll", json!({"session_id": ended}))["exit_code"], 7);
    d.ok("kill_all", json!({}));
}
