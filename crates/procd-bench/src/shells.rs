//! The rows of shells that keep their state (docs/shells.md): a command
//! in an open shell beside a spawn + wait of the same command (no new
//! shell to fork), and beside a persistent bash driven the way marker
//! readers drive one (a command, then `echo MARKER $?`, read until the
//! marker), in the same run.

use crate::{median, Daemon, Ratio, Row};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

pub(crate) fn shell_rows(d: &Daemon, rounds: usize) -> Vec<Row> {
    let mut c = d.connect();
    let shell = c.call("shell_open", json!({}))["shell_id"].clone();
    let mut in_shell = || {
        let t = Instant::now();
        let r = c.call(
            "shell_run",
            json!({"shell_id": shell, "command": "true", "yield_ms": 30000}),
        );
        assert_eq!(r["exit_code"], 0, "{r}");
        t.elapsed().as_secs_f64() * 1e3
    };
    let mut c2 = d.connect();
    let mut spawned = || {
        let t = Instant::now();
        let id = c2.call("spawn", json!({"command": "true"}))["session_id"].clone();
        let w = c2.call("wait", json!({"session_id": id, "timeout_s": 30}));
        assert_eq!(w["exit"]["exit_code"], 0, "{w}");
        t.elapsed().as_secs_f64() * 1e3
    };
    let mut marker = MarkerShell::start(&d.home);
    let mut by_marker = || {
        let t = Instant::now();
        assert_eq!(marker.run("true"), 0);
        t.elapsed().as_secs_f64() * 1e3
    };
    let rounds = rounds.max(20);
    let (mut ours, mut spawns, mut markers) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Each goes first in turn, so that none always runs warm.
        match round % 3 {
            0 => {
                ours.push(in_shell());
                spawns.push(spawned());
                markers.push(by_marker());
            }
            1 => {
                spawns.push(spawned());
                markers.push(by_marker());
                ours.push(in_shell());
            }
            _ => {
                markers.push(by_marker());
                ours.push(in_shell());
                spawns.push(spawned());
            }
        }
    }
    let ours_ms = median(&ours);
    let beside_spawn = Row::against(
        "`true` in an open shell, beside spawn + wait".into(),
        ours_ms,
        median(&spawns),
        "ms",
        Ratio::AtMost(0.5),
        format!(
            "median of {rounds} rounds, in turn: one `shell_run` (the command sent on the shell's FIFO, its end read from the shell's file, the output drained) beside `spawn` + `wait` of `true` on the same daemon"
        ),
    );
    let mut beside_marker = Row::against(
        "`true` in an open shell, beside a marker-read bash".into(),
        ours_ms,
        median(&markers),
        "ms",
        Ratio::AtMost(1.0),
        format!(
            "median of {rounds} rounds, in turn: one `shell_run` over the socket beside a bash this program drives itself on pipes as marker readers do (`true; echo MARK-N $?`, its output read until the marker line): no daemon, no socket, no end that a command could not fake"
        ),
    );
    beside_marker.baseline_name = Some("marker-read bash".into());
    c.call("shell_close", json!({"shell_id": shell}));
    vec![beside_spawn, beside_marker]
}

/// A bash on pipes, each command followed by a marker echo.
struct MarkerShell {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    n: u64,
}

impl MarkerShell {
    fn start(home: &std::path::Path) -> MarkerShell {
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .env("HOME", home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bash");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        MarkerShell {
            child,
            stdin,
            stdout,
            n: 0,
        }
    }

    /// Runs `command`; its status, from the marker line.
    fn run(&mut self, command: &str) -> i32 {
        self.n += 1;
        let marker = format!("__MARK_{}__", self.n);
        writeln!(self.stdin, "{command}; echo \"{marker} $?\"").expect("write");
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).expect("read") > 0,
                "bash ended"
            );
            if let Some(rest) = line.trim_end().strip_prefix(&marker) {
                return rest.trim().parse().unwrap_or(-1);
            }
        }
    }
}

impl Drop for MarkerShell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
