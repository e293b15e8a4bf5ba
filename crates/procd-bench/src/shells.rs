//! The rows of shells that keep their state (docs/shells.md): a command
//! in an open shell beside a spawn + wait of the same command (no new
//! shell to fork), and beside a persistent bash driven the way marker
//! readers drive one (a command, then `echo MARKER $?`, read until the
//! marker) behind a Unix socket, as Daytona's toolbox and OpenHands'
//! runtime serve their sessions to the agent, in the same run.

use crate::{in_turn, median, Daemon, Ratio, Row};
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
    let spawned = || {
        let t = Instant::now();
        let id = c2.call("spawn", json!({"command": "true"}))["session_id"].clone();
        let w = c2.call("wait", json!({"session_id": id, "timeout_s": 30}));
        assert_eq!(w["exit_code"], 0, "{w}");
        t.elapsed().as_secs_f64() * 1e3
    };
    let served = MarkerServer::start(&d.home);
    let mut to_marker = served.connect();
    let by_marker = || {
        let t = Instant::now();
        assert_eq!(to_marker.run("true"), 0);
        t.elapsed().as_secs_f64() * 1e3
    };
    let rounds = rounds.max(20);
    // Two pairs, each in turn with its own baseline only: a spawn leaves
    // the daemon work to do after its answer (the reap, the cgroup, the
    // checkpoint), which the next call would pay for beside a server
    // that does none of it.
    let (ours, spawns) = in_turn(rounds, &mut in_shell, spawned);
    let (ours_alone, markers) = in_turn(rounds, in_shell, by_marker);
    let ours_ms = median(&ours);
    let beside_spawn = Row::against(
        "`true` in an open shell, beside spawn + wait".into(),
        ours_ms,
        median(&spawns),
        "ms",
        Ratio::AtMost(0.5),
        format!(
            "median of {rounds} rounds, in turn: one `shell_run` (the command sent on the shell's FIFO, its end read from another, the output drained) beside `spawn` + `wait` of `true` on the same daemon"
        ),
    );
    let mut beside_marker = Row::against(
        "`true` in an open shell, beside a marker-read bash".into(),
        median(&ours_alone),
        median(&markers),
        "ms",
        Ratio::AtMost(1.0),
        format!(
            "median of {rounds} rounds, in turn (apart from the spawns): one `shell_run` over procd's socket beside one JSON line over a Unix socket to a thread of this program that drives a bash on pipes as marker readers do (`true; echo MARK-N $?`, its output read until the marker line) and answers a JSON line: a server of the least work, with an end that a command can fake"
        ),
    );
    beside_marker.baseline_name = Some("marker-read bash".into());
    c.call("shell_close", json!({"shell_id": shell}));
    vec![beside_spawn, beside_marker]
}

/// A marker-read bash behind a Unix socket: a line `{"command": …}` in,
/// a line `{"exit_code": …, "output": …}` out.
struct MarkerServer {
    path: std::path::PathBuf,
    _server: std::thread::JoinHandle<()>,
}

struct MarkerClient {
    stream: std::os::unix::net::UnixStream,
    reader: BufReader<std::os::unix::net::UnixStream>,
}

impl MarkerServer {
    fn start(home: &std::path::Path) -> MarkerServer {
        let path = home.join("marker.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let home = home.to_path_buf();
        let server = std::thread::spawn(move || {
            let mut shell = MarkerShell::start(&home);
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut writer = stream.try_clone().expect("clone");
            let mut lines = BufReader::new(stream);
            let mut line = String::new();
            while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
                let ask: serde_json::Value = serde_json::from_str(&line).expect("a request");
                let (code, output) = shell.run(ask["command"].as_str().unwrap_or("true"));
                let answer = json!({"exit_code": code, "output": output});
                if writeln!(writer, "{answer}").is_err() {
                    return;
                }
                line.clear();
            }
        });
        MarkerServer {
            path,
            _server: server,
        }
    }

    fn connect(&self) -> MarkerClient {
        let stream = std::os::unix::net::UnixStream::connect(&self.path).expect("connect");
        let reader = BufReader::new(stream.try_clone().expect("clone"));
        MarkerClient { stream, reader }
    }
}

impl MarkerClient {
    fn run(&mut self, command: &str) -> i64 {
        writeln!(self.stream, "{}", json!({"command": command})).expect("send");
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("answer");
        let answer: serde_json::Value = serde_json::from_str(&line).expect("json");
        answer["exit_code"].as_i64().unwrap_or(-1)
    }
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

    /// Runs `command`; its status, from the marker line, and its output.
    fn run(&mut self, command: &str) -> (i32, String) {
        self.n += 1;
        let marker = format!("__MARK_{}__", self.n);
        writeln!(self.stdin, "{command}; echo \"{marker} $?\"").expect("write");
        let (mut line, mut output) = (String::new(), String::new());
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).expect("read") > 0,
                "bash ended"
            );
            if let Some(rest) = line.trim_end().strip_prefix(&marker) {
                return (rest.trim().parse().unwrap_or(-1), output);
            }
            output.push_str(&line);
        }
    }
}

impl Drop for MarkerShell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
