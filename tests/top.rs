//! `procd top` (docs/operations.md) in a real terminal: tmux runs it,
//! `send-keys` types and `capture-pane` reads the screen. What a key did
//! is checked where it happened too: the process is gone, the session
//! got the line, the exit code is the one it exited with.

use crate::common::tmux::Tmux;
use crate::common::*;
use serde_json::Value;
use std::path::Path;

/// Spawns through the CLI; returns the session's id and pid.
fn spawn(d: &Daemon, args: &[&str]) -> (String, i32) {
    let mut all = vec!["--json", "spawn"];
    all.extend_from_slice(args);
    let out = d.cli(&all);
    assert!(out.status.success(), "{out:?}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("json");
    let id = r["session_id"].as_str().expect("id").to_string();
    (id, r["pid"].as_i64().expect("pid") as i32)
}

fn poll(d: &Daemon, id: &str) -> Value {
    let out = d.cli(&["--json", "poll", id]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("json")
}

/// The screen line showing `label`'s row.
fn row<'a>(screen: &'a str, label: &str) -> &'a str {
    screen.lines().find(|l| l.starts_with(label)).unwrap_or("")
}

/// A shell line for tmux: the terminal's settings before and after `top`
/// and its exit status, written to files in `dir` (the status last, so
/// that once it is there the others are complete).
fn top_script(d: &Daemon, dir: &Path, extra: &str) -> String {
    let dir = dir.display();
    format!(
        "stty -a > {dir}/before; {BIN} --home {} {extra} top; rc=$?; stty -a > {dir}/after; echo $rc > {dir}/rc; sleep 60",
        d.home.path().display()
    )
}

/// Presses q and waits for top's exit status.
fn quit(tmux: &Tmux, dir: &Path) -> String {
    tmux.keys(&["q"]);
    let rc = dir.join("rc");
    wait_until("top exits", || {
        std::fs::read_to_string(&rc).is_ok_and(|s| s.ends_with('\n'))
    });
    std::fs::read_to_string(rc).expect("rc").trim().to_string()
}

/// An exit shows from its event alone: the quiet refresh is an hour here,
/// and the line that ends the session is sent from outside top.
#[test]
fn an_exit_shows_from_its_event_without_a_refresh() {
    let d = Daemon::start();
    let (id, _) = spawn(&d, &["--", "read line; exit 5"]);
    let dir = short_tempdir();
    let script = top_script(&d, dir.path(), "").replace(
        &format!("{BIN} --home"),
        &format!("PROCD_TEST_TOP_REFRESH_S=3600 {BIN} --home"),
    );
    let tmux = Tmux::start(&script, 150, 20);
    tmux.wait_until("the session runs", |s| row(s, &id).contains("running"));
    let sent = d.cli(&["send", &id, "go"]);
    assert!(sent.status.success(), "{sent:?}");
    tmux.wait_until("its exit shows", |s| row(s, &id).contains("exit 5"));
    assert_eq!(quit(&tmux, dir.path()), "0");
}

#[test]
fn top_shows_sessions_and_acts_on_them_then_quits_cleanly() {
    let d = Daemon::start();
    let (_idle_id, idle_pid) = spawn(&d, &["--name", "idle", "--", "sleep 300"]);
    let (asker, _) = spawn(&d, &["--", "read line; echo got-$line; exit 7"]);
    let (echoer, _) = spawn(
        &d,
        &[
            "--name",
            "echoer",
            "--",
            "while read l; do echo echo-$l; done",
        ],
    );
    let dir = short_tempdir();
    let tmux = Tmux::start(&top_script(&d, dir.path(), ""), 150, 30);
    tmux.wait_until("the three sessions", |s| {
        row(s, "idle").contains("running")
            && row(s, &asker).contains("running")
            && row(s, "echoer").contains("running")
    });

    // `/` filters, `s` sends a line: the session reads it and exits, and
    // its exit shows live.
    tmux.keys(&["/"]);
    tmux.keys(&["-l", &asker]);
    tmux.keys(&["Enter"]);
    tmux.wait_until("the filter leaves one row", |s| {
        row(s, &asker).contains("running") && row(s, "idle").is_empty()
    });
    tmux.keys(&["s"]);
    tmux.wait_for("Enter sends");
    tmux.keys(&["-l", "hello"]);
    tmux.keys(&["Enter"]);
    tmux.wait_until("its exit shows", |s| {
        let r = row(s, &asker);
        r.contains("exit 7") && r.contains("got-hello")
    });
    let polled = poll(&d, &asker);
    assert_eq!(polled["exit_code"], 7, "{polled}");

    // `l` follows the selected session's log: a line it prints after top
    // started shows in the pane (at the start of a screen line, where the
    // table's last-line column is not).
    tmux.keys(&["Escape"]);
    tmux.wait_until("the filter is gone", |s| !s.contains("filter:"));
    tmux.keys(&["/"]);
    tmux.keys(&["-l", "echoer"]);
    tmux.keys(&["Enter", "l"]);
    tmux.wait_for("log: echoer");
    let sent = d.cli(&["send", &echoer, "marker-after-top"]);
    assert!(sent.status.success(), "{sent:?}");
    tmux.wait_until("the new line in the log pane", |s| {
        s.lines().any(|l| l.starts_with("echo-marker-after-top"))
    });

    // `k` asks, then kills: the process is really gone.
    // (One Escape at a time: two in one read are one Alt+Escape.)
    tmux.keys(&["Escape"]);
    tmux.wait_until("the pane closes", |s| !s.contains("log: echoer"));
    tmux.keys(&["Escape"]);
    tmux.wait_until("the filter is gone", |s| !s.contains("filter:"));
    tmux.keys(&["/"]);
    tmux.keys(&["-l", "idle"]);
    tmux.keys(&["Enter", "k"]);
    tmux.wait_for("kill idle and everything it started? y/n");
    tmux.keys(&["y"]);
    wait_until("the killed session's process is gone", || !alive(idle_pid));
    // (A shell that got the SIGTERM exits 143.)
    tmux.wait_until("the kill shows", |s| {
        let r = row(s, "idle");
        r.contains("SIGTERM") || r.contains("exit 143")
    });

    // q: exit 0, the terminal as it was.
    assert_eq!(quit(&tmux, dir.path()), "0");
    let before = std::fs::read_to_string(dir.path().join("before")).expect("before");
    let after = std::fs::read_to_string(dir.path().join("after")).expect("after");
    assert_eq!(before, after, "stty -a differs after top");
    assert!(
        before.contains("icanon") && before.contains(" echo "),
        "{before}"
    );
    d.cli(&["kill", &echoer]);
}

#[test]
fn top_redraws_on_resize_and_rides_out_a_lost_daemon() {
    let mut d = Daemon::start();
    spawn(&d, &["--name", "alpha", "--", "sleep 300"]);
    let dir = short_tempdir();
    let tmux = Tmux::start(&top_script(&d, dir.path(), ""), 60, 15);
    tmux.wait_until("alpha", |s| row(s, "alpha").contains("running"));
    // 60 columns cut the key help before "q quit"; a wider window shows
    // it all, and the column that did not fit.
    let narrow = tmux.screen();
    assert!(
        !narrow.contains("q quit") && !narrow.contains("LAST LINE"),
        "{narrow}"
    );
    tmux.run(&["resize-window", "-x", "140", "-y", "30"]);
    tmux.wait_until("the redraw at 140 columns", |s| {
        s.contains("q quit") && s.contains("LAST LINE")
    });

    // The daemon SIGKILLed (its keeper starts another): top goes on and
    // shows what the new one runs.
    d.kill_daemon();
    spawn(&d, &["--name", "beta", "--", "sleep 300"]);
    tmux.wait_until("beta, after the crash", |s| {
        row(s, "beta").contains("running")
    });

    // No daemon at all: top says so and keeps trying; a new one is found.
    d.stop();
    tmux.wait_for("daemon lost");
    d.restart();
    spawn(&d, &["--name", "gamma", "--", "sleep 300"]);
    tmux.wait_until("gamma, from the next daemon", |s| {
        row(s, "gamma").contains("running") && !s.contains("daemon lost")
    });
    assert_eq!(quit(&tmux, dir.path()), "0");
    d.cli(&["kill", "gamma"]);
}

#[test]
fn top_works_over_host_and_refuses_what_is_not_a_terminal() {
    let d = Daemon::start();
    let (id, _) = spawn(&d, &["--", "echo over-the-host; sleep 300"]);
    let dir = short_tempdir();
    let host = format!("--host unix://{}", d.socket().display());
    let tmux = Tmux::start(&top_script(&d, dir.path(), &host), 150, 20);
    tmux.wait_until("the session, through --host", |s| {
        row(s, &id).contains("over-the-host")
    });
    assert_eq!(quit(&tmux, dir.path()), "0");

    // Not a terminal: a message and exit 1; --json: a usage error.
    let out = d.cli(&["top"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs a terminal"),
        "{out:?}"
    );
    let out = d.cli(&["--json", "top"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    d.cli(&["kill", &id]);
}

#[test]
fn top_restarts_a_stack_service() {
    let d = Daemon::start();
    let project = tempfile::tempdir().expect("project dir");
    std::fs::write(
        project.path().join("procd.toml"),
        "[service.web]\ncommand = \"echo run-$$; sleep 300\"\n",
    )
    .expect("procd.toml");
    let file = project.path().join("procd.toml");
    let up = d.cli(&["--json", "up", "-f", file.to_str().expect("utf-8")]);
    assert!(up.status.success(), "{up:?}");
    let up: Value = serde_json::from_slice(&up.stdout).expect("json");
    let first = up["services"][0]["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    let first_pid = poll(&d, &first)["pid"].as_i64().expect("pid") as i32;
    // Where web came from outlives the daemon that started it.
    d.kill_daemon();
    let out = d.cli(&["--json", "ps"]);
    let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        listed["processes"][0]["stack_file"].as_str().map(Path::new),
        Some(file.canonicalize().expect("canonical").as_path()),
        "{listed}"
    );
    let dir = short_tempdir();
    let tmux = Tmux::start(&top_script(&d, dir.path(), ""), 150, 20);
    tmux.wait_until("web", |s| row(s, "web").contains("running"));
    tmux.keys(&["r"]);
    // The old run is gone and a new session of that name runs.
    wait_until("the first web's process is gone", || !alive(first_pid));
    let mut second = String::new();
    wait_until("a second web runs", || {
        let out = d.cli(&["--json", "poll", "web"]);
        let polled: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        second = polled["session_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        polled["status"] == "running" && second != first
    });
    tmux.wait_for("restarted web: started");
    assert_eq!(quit(&tmux, dir.path()), "0");
    d.cli(&["kill", &second]);
}

#[test]
fn a_panic_in_top_restores_the_terminal() {
    let d = Daemon::start();
    let dir = short_tempdir();
    // A debug build panics on `!` with PROCD_TEST_TOP_PANIC set: the one
    // fault here no real system produces on demand.
    let script = top_script(&d, dir.path(), "").replace(
        &format!("{BIN} --home"),
        &format!("env PROCD_TEST_TOP_PANIC=1 RUST_BACKTRACE=0 {BIN} --home"),
    );
    let tmux = Tmux::start(&script, 120, 20);
    tmux.wait_for("q quit");
    tmux.keys(&["!"]);
    let rc = dir.path().join("rc");
    wait_until("top ends", || {
        std::fs::read_to_string(&rc).is_ok_and(|s| s.ends_with('\n'))
    });
    assert_eq!(std::fs::read_to_string(&rc).expect("rc").trim(), "101");
    let before = std::fs::read_to_string(dir.path().join("before")).expect("before");
    let after = std::fs::read_to_string(dir.path().join("after")).expect("after");
    assert_eq!(before, after, "stty -a differs after a panic in top");
    // The message is on the normal screen, readable.
    tmux.wait_for("PROCD_TEST_TOP_PANIC asked for");
}

/// The header says what the jobserver's tokens are doing: a `jobs`
/// session holds its own token, and the CLI's `status` says the same.
#[test]
fn top_and_status_show_the_jobserver_tokens_in_use() {
    let d = Daemon::with_config("jobserver_tokens = 2\n");
    let (id, _) = spawn(&d, &["--jobs", "--", "exec sleep 300"]);
    let status = String::from_utf8_lossy(&d.cli(&["status"]).stdout).to_string();
    assert!(
        status.contains(&format!("jobserver: 1 of 2 tokens in use: {id} 1")),
        "{status}"
    );
    let dir = short_tempdir();
    let tmux = Tmux::start(&top_script(&d, dir.path(), ""), 150, 30);
    tmux.wait_for(&format!("jobserver 1/2 ({id} 1)"));
    quit(&tmux, dir.path());
    d.ok("kill", serde_json::json!({"session_id": id}));
}
