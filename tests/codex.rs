//! Codex runs its commands through procd (docs/codex.md): one scripted
//! transcript of Codex's exec-server protocol (tests/codex_exec_transcript.py)
//! goes to Codex's own server (`codex exec-server --listen stdio`, 0.171.0
//! from npm) and to `procd exec-server`; the normalised answers must be the
//! same, and procd's processes must have been procd sessions.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};

const TRANSCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/codex_exec_transcript.py"
);

/// The transcript against `server` (argv), run in `workdir`.
fn transcript(workdir: &Path, server: &[&str], env: &[(&str, &str)]) -> Vec<Value> {
    let mut cmd = Command::new("python3");
    cmd.arg(TRANSCRIPT)
        .arg(workdir)
        .arg("--")
        .args(server)
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let out = cmd.output().expect("run the transcript");
    let err = std::fs::read_to_string(workdir.join(".server.err")).unwrap_or_default();
    assert!(
        out.status.success(),
        "transcript against {server:?}: {}\nserver stderr: {err}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the transcript prints JSON")
}

#[test]
fn procds_exec_server_answers_as_codexs_own_does() {
    let codex = prepared("codex-cli.sh", "Codex's CLI");
    let d = Daemon::start();
    let theirs_dir = short_tempdir();
    let ours_dir = short_tempdir();
    let codex_home = short_tempdir();
    let theirs = transcript(
        theirs_dir.path(),
        &[&codex, "exec-server", "--listen", "stdio"],
        &[("CODEX_HOME", codex_home.path().to_str().expect("utf-8"))],
    );
    let home = d.home.path().to_str().expect("utf-8");
    let ours = transcript(ours_dir.path(), &[BIN, "--home", home, "exec-server"], &[]);
    assert_eq!(theirs.len(), ours.len());
    for (t, o) in theirs.iter().zip(&ours) {
        assert_eq!(
            o, t,
            "step {}: procd (left) and Codex (right) differ",
            t["step"]
        );
    }

    // Each process was a procd session of this exec-server's Codex
    // session, and none runs on.
    let listed = d.ok("list", json!({}));
    let ours: Vec<&Value> = listed["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter(|p| p["meta"]["codex_process_id"].is_string())
        .collect();
    assert_eq!(ours.len(), 6, "{listed:#}");
    let keys: std::collections::HashSet<&str> = ours
        .iter()
        .filter_map(|p| p["session_key"].as_str())
        .collect();
    assert_eq!(keys.len(), 1, "one Codex session: {listed:#}");
    for p in &ours {
        assert_eq!(p["status"], "exited", "{p}");
    }
    let killed = ours
        .iter()
        .find(|p| p["meta"]["codex_process_id"] == "p5")
        .expect("the terminated sleeper");
    let polled = d.ok("poll", json!({"session_id": killed["session_id"]}));
    assert_eq!(
        (
            polled["completion_reason"].clone(),
            polled["termination_source"].clone()
        ),
        (json!("killed"), json!("codex")),
        "{polled}"
    );
}

/// When Codex goes (closes stdin) the exec-server releases its lease, and
/// the daemon ends every process Codex started, with the whole tree.
#[test]
fn processes_end_with_the_codex_that_started_them() {
    use std::io::{BufRead, BufReader, Write};
    let d = Daemon::start();
    let work = short_tempdir();
    let mut server = Command::new(BIN)
        .arg("--home")
        .arg(d.home.path())
        .arg("exec-server")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("procd exec-server");
    let mut stdin = server.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(server.stdout.take().expect("stdout"));
    let cwd = format!("file://{}", work.path().display());
    for msg in [
        json!({"id": 1, "method": "initialize", "params": {"clientName": "t"}}),
        json!({"id": 2, "method": "process/start", "params": {
            "processId": "bg", "argv": ["/bin/sh", "-c", "sleep 300 & sleep 300; wait"],
            "cwd": cwd, "env": {}, "tty": false}}),
    ] {
        writeln!(stdin, "{msg}").expect("write");
    }
    let mut started = None;
    for line in (&mut stdout).lines() {
        let msg: Value = serde_json::from_str(&line.expect("a line")).expect("JSON");
        if msg["id"] == 2 {
            started = Some(msg);
            break;
        }
    }
    let started = started.expect("an answer to process/start");
    assert_eq!(started["result"]["processId"], "bg", "{started}");
    let listed = d.ok("list", json!({}));
    let session = listed["processes"][0]["session_id"]
        .as_str()
        .expect("a session")
        .to_string();
    // The markers survive `env -i`: procd finds the tree by them.
    wait_until("both sleepers run", || session_pids(&session).len() >= 3);
    let root = listed["processes"][0]["pid"].as_i64().expect("pid") as i32;
    drop(stdin);
    let status = server.wait().expect("the exec-server ends");
    assert!(status.success(), "{status:?}");
    let exit = d.wait_exit(&session);
    assert_eq!(exit["completion_reason"], "killed", "{exit}");
    wait_until("the tree is gone", || session_pids(&session).is_empty());
    assert!(!alive(root), "root {root} still runs");
}
