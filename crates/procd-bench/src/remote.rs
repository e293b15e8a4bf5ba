//! A poll through `--host ssh://` (docs/remote.md) beside the same bytes
//! through one plain ssh connection to `cat`: what procd adds on top of
//! the transport. Both over one connection each to a real sshd on a
//! loopback port (`procd-sshd`), with the same line client, alternating.

use crate::{line_of_len, median, Ratio, Row};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

/// A line client over a transport's stdio.
struct Piped {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    buf: String,
}

impl Piped {
    /// `PROCD_SSH`-style `ssh` to `port`, running `remote` there.
    fn ssh(ssh: &str, port: u16, remote: &str) -> Piped {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "exec {ssh} -o BatchMode=yes -p {port} root@127.0.0.1 {remote}"
            ))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ssh");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Piped {
            child,
            stdin,
            stdout,
            buf: String::new(),
        }
    }

    fn round_trip(&mut self, line: &str) -> &str {
        self.stdin.write_all(line.as_bytes()).expect("write");
        self.stdin.flush().expect("flush");
        self.buf.clear();
        let n = self.stdout.read_line(&mut self.buf).expect("read");
        assert!(n > 0, "the connection closed");
        &self.buf
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let req = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let answer: Value =
            serde_json::from_str(self.round_trip(&format!("{req}\n"))).expect("JSON");
        answer["result"].clone()
    }
}

impl Drop for Piped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn remote_rows(rounds: usize) -> Vec<Row> {
    let procd = crate::procd_beside_us();
    let sshd =
        procd_sshd::Sshd::start(&procd, true).unwrap_or_else(|e| panic!("an OpenSSH server: {e}"));
    let ssh = sshd.ssh_command();
    let mut remote = Piped::ssh(&ssh, sshd.port, "procd dial-stdio");
    let status = remote.call("status", json!({}));
    let home = sshd.remote_home();
    assert_eq!(
        status["state_dir"].as_str().map(std::path::PathBuf::from),
        Some(home.join("state")),
        "the far side's procd: {status}"
    );
    let id = remote.call("spawn", json!({"command": "sleep 600"}))["session_id"].clone();
    let poll = format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": 1, "method": "poll", "params": {"session_id": id}})
    );
    let answer_len = remote.round_trip(&poll).len();
    // As many bytes each way as a poll and its answer, on average.
    let ping = line_of_len((poll.len() + answer_len) / 2, "method");
    let mut cat = Piped::ssh(&ssh, sshd.port, "cat");
    assert_eq!(cat.round_trip(&ping), ping, "cat echoes");
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for i in 0..rounds + 50 {
        let t = Instant::now();
        remote.round_trip(&poll);
        let a = t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        cat.round_trip(&ping);
        let b = t.elapsed().as_secs_f64() * 1e6;
        if i >= 50 {
            ours.push(a);
            base.push(b);
        }
    }
    remote.call("kill", json!({"session_id": id}));
    vec![Row::against(
        "poll round trip through --host ssh://, p50".into(),
        median(&ours),
        median(&base),
        "us",
        Ratio::AtMost(1.3),
        format!(
            "{rounds} polls alternating on one connection each to a real sshd on loopback; procd: `ssh … procd dial-stdio`; baseline: `ssh … cat` echoing {} bytes (the mean of a poll and its answer)",
            ping.len()
        ),
    )]
}
