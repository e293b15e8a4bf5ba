//! Test runs as results (docs/agents.md "Test runs"): real runners run as
//! sessions — cargo test and nextest on a throwaway crate, pytest in the
//! project's venv, node's own test runner, go test — and their counts and
//! failures are checked in `wait`, `poll` and the completion event.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;

fn write(dir: &Path, file: &str, text: &str) {
    let path = dir.join(file);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("dirs");
    }
    std::fs::write(path, text).expect("write");
}

/// Runs `command` in `dir` as a session whose end is queued for `key`,
/// and returns its `wait` result.
fn run_in(d: &Daemon, dir: &Path, command: &str, key: &str, env: Value) -> (String, Value) {
    let id = d.spawn_with(json!({
        "command": command,
        "cwd": dir,
        "env": env,
        "session_key": key,
        "notify_on_complete": true,
    }));
    let r = d.ok("wait", json!({"session_id": id, "timeout_s": 300}));
    assert_eq!(r["status"], "exited", "{command} did not end: {r}");
    (id, r)
}

/// The counts of a `tests` field: (runner, passed, failed, skipped, finished).
fn counts(t: &Value) -> (String, u64, u64, u64, bool) {
    (
        t["runner"].as_str().unwrap_or_default().to_string(),
        t["passed"].as_u64().unwrap_or(u64::MAX),
        t["failed"].as_u64().unwrap_or(u64::MAX),
        t["skipped"].as_u64().unwrap_or(u64::MAX),
        t["finished"] == true,
    )
}

fn failure<'a>(t: &'a Value, name: &str) -> &'a Value {
    t["failures"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == name))
        .unwrap_or_else(|| panic!("no failure named {name}: {t}"))
}

/// The one completion event queued for `key`.
fn completion(d: &Daemon, key: &str) -> Value {
    let events = d.ok("drain_notifications", json!({"session_key": key}))["events"].clone();
    let done: Vec<&Value> = events
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"] == "completion")
        .collect();
    assert_eq!(done.len(), 1, "{events}");
    done[0].clone()
}

const TALLY_LIB: &str = r#"
#[cfg(test)]
mod tests {
    #[test]
    fn passes() {
        assert_eq!(1, 1);
    }
    #[test]
    fn fails() {
        assert_eq!(1, 2, "one is not two");
    }
    #[test]
    fn panics() {
        panic!("boom at the end");
    }
    #[test]
    #[ignore]
    fn ignored() {}
}
"#;

#[test]
fn cargo_test_and_nextest_runs_become_counts_and_failures() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "Cargo.toml",
        "[package]\nname = \"tally\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    );
    write(dir.path(), "src/lib.rs", TALLY_LIB);
    // The toolchain as the suite runs under it (the session's login
    // environment is the test daemon's, whose HOME is a temp dir).
    let home = std::env::var("HOME").unwrap_or_default();
    let var = |k: &str, default: String| std::env::var(k).unwrap_or(default);
    let env = json!({
        "PATH": var("PATH", String::new()),
        "CARGO_HOME": var("CARGO_HOME", format!("{home}/.cargo")),
        "RUSTUP_HOME": var("RUSTUP_HOME", format!("{home}/.rustup")),
        "CARGO_TARGET_DIR": dir.path().join("target"),
        "RUST_BACKTRACE": "0",
    });
    let (id, r) = run_in(&d, dir.path(), "cargo test --offline", "cargo", env.clone());
    assert_eq!(r["exit_code"], 101, "{r}");
    let t = &r["tests"];
    assert_eq!(counts(t), ("cargo test".into(), 1, 2, 1, true), "{t}");
    let fails = failure(t, "tests::fails");
    assert!(
        fails["message"]
            .as_str()
            .unwrap_or_default()
            .contains("one is not two"),
        "{t}"
    );
    let at = fails["location"].as_str().unwrap_or_default();
    assert!(at.starts_with("src/lib.rs:10:"), "{t}");
    assert_eq!(failure(t, "tests::panics")["message"], "boom at the end");
    // Its cursor is where its report starts in the log.
    let cursor = fails["cursor"].as_u64().expect("a cursor");
    let report = d.ok("read", json!({"session_id": id, "cursor": cursor}));
    let report = report["data"].as_str().unwrap_or_default();
    assert!(
        report.starts_with("test tests::fails ... FAILED"),
        "{report}"
    );
    // poll says the same; the completion event leads with it.
    assert_eq!(d.ok("poll", json!({"session_id": id}))["tests"], *t);
    let done = completion(&d, "cargo");
    assert_eq!(done["tests"], *t);
    let text = done["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("Tests (cargo test): 1 passed, 2 failed, 1 skipped"),
        "{text}"
    );
    assert!(text.contains("tests::fails (at src/lib.rs:10:"), "{text}");
    assert!(text.contains("tests::panics (at src/lib.rs:14:"), "{text}");

    let (_, r) = run_in(
        &d,
        dir.path(),
        "cargo nextest run --offline --no-fail-fast",
        "nextest",
        env,
    );
    let t = &r["tests"];
    assert_eq!(counts(t), ("nextest".into(), 1, 2, 1, true), "{t}");
    assert_eq!(
        failure(t, "tally tests::panics")["message"],
        "boom at the end"
    );
}

const PYTEST_FILE: &str = r#"
import os, time, pytest

def test_one():
    assert 1 == 1

def test_two():
    x = 1
    assert x == 2, "x is not two"

def test_waits():
    deadline = time.time() + 60
    while not os.path.exists("go"):
        assert time.time() < deadline, "never told to go"
        time.sleep(0.02)

@pytest.mark.skip(reason="later")
def test_three():
    pass

@pytest.mark.xfail
def test_four():
    assert 0

@pytest.fixture
def broken():
    raise RuntimeError("fixture boom")

def test_five(broken):
    pass
"#;

#[test]
fn a_pytest_run_is_counted_while_it_runs_and_summed_at_its_end() {
    let d = Daemon::start();
    let py = mcp_python();
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "test_a.py", PYTEST_FILE);
    let id = d.spawn_with(json!({
        "command": format!("{py} -m pytest -p no:cacheprovider test_a.py"),
        "cwd": dir.path(),
        "session_key": "py",
        "notify_on_complete": true,
    }));
    // Blocked in test_waits: the two before it are counted already,
    // though pytest has not ended their line.
    wait_until("the first two tests are counted", || {
        let t = &d.ok("poll", json!({"session_id": id}))["tests"];
        counts(t) == ("pytest".into(), 1, 1, 0, false)
    });
    std::fs::write(dir.path().join("go"), "").expect("go");
    let r = d.wait_exit(&id);
    let t = &r["tests"];
    // 1 failed + 1 error; 2 passed; 1 skipped + 1 xfailed.
    assert_eq!(counts(t), ("pytest".into(), 2, 2, 2, true), "{t}");
    let two = failure(t, "test_a.py::test_two");
    assert_eq!(
        two["message"],
        "AssertionError: x is not two\nassert 1 == 2"
    );
    assert_eq!(two["location"], "test_a.py:9");
    assert_eq!(
        failure(t, "test_a.py::test_five")["message"],
        "RuntimeError: fixture boom"
    );
    let text = completion(&d, "py")["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        text.contains("Tests (pytest): 2 passed, 2 failed, 2 skipped"),
        "{text}"
    );

    // The same run's JUnit report, named at the spawn, gives the same counts.
    let (_, r) = run_in(
        &d,
        dir.path(),
        &format!("{py} -m pytest -p no:cacheprovider --junitxml=out/report.xml test_a.py"),
        "junit",
        json!({}),
    );
    assert_eq!(
        counts(&r["tests"]).0,
        "pytest",
        "the output is read without junit"
    );
    let id = d.spawn_with(json!({
        "command": format!("{py} -m pytest -p no:cacheprovider --junitxml=out/report.xml test_a.py"),
        "cwd": dir.path(),
        "junit": "out/report.xml",
    }));
    let t = d.wait_exit(&id)["tests"].clone();
    assert_eq!(counts(&t), ("junit".into(), 2, 2, 2, true), "{t}");
    assert_eq!(
        failure(&t, "test_a.test_two")["message"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .next(),
        Some("AssertionError: x is not two")
    );
}

/// A run cut short (killed while a test blocks) gets no counts at its end,
/// though it had some while it ran: never a total the runner did not give.
#[test]
fn a_test_run_killed_midway_ends_with_no_counts() {
    let d = Daemon::start();
    let py = mcp_python();
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "test_a.py", PYTEST_FILE);
    let id = d.spawn_with(json!({
        "command": format!("{py} -m pytest -p no:cacheprovider test_a.py"),
        "cwd": dir.path(),
    }));
    wait_until("the first two tests are counted", || {
        d.ok("poll", json!({"session_id": id}))["tests"]["failed"] == 1
    });
    d.ok("kill", json!({"session_id": id}));
    let r = d.wait_exit(&id);
    assert!(r.get("tests").is_none(), "{r}");
    assert!(d
        .ok("poll", json!({"session_id": id}))
        .get("tests")
        .is_none());
}

const NODE_FILE: &str = r#"
const test = require('node:test');
const assert = require('node:assert');
test('passes', () => { assert.strictEqual(1, 1); });
test('fails', () => { assert.strictEqual(1, 2); });
test('skipped', { skip: true }, () => {});
test('todo', { todo: true }, () => {});
test.describe('suite', () => {
  test.it('inner passes', () => {});
  test.it('inner fails', () => { throw new Error('inner boom'); });
});
"#;

#[test]
fn a_node_test_run_becomes_counts_and_failures() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "t.test.js", NODE_FILE);
    let (_, r) = run_in(&d, dir.path(), "node --test", "node", json!({}));
    let t = &r["tests"];
    assert_eq!(counts(t), ("node --test".into(), 2, 2, 2, true), "{t}");
    assert_eq!(failure(t, "inner fails")["message"], "inner boom");
    let fails = failure(t, "fails");
    assert!(
        fails["message"]
            .as_str()
            .unwrap_or_default()
            .contains("1 !== 2"),
        "{t}"
    );
    assert!(
        fails["location"]
            .as_str()
            .unwrap_or_default()
            .ends_with("t.test.js:5:1"),
        "{t}"
    );
}

const GO_FILE: &str = r#"package tally

import "testing"

func TestPasses(t *testing.T) {}

func TestFails(t *testing.T) {
	t.Errorf("want 1, got %d", 2)
}

func TestSkips(t *testing.T) {
	t.Skip("later")
}
"#;

#[test]
fn go_test_runs_become_counts_and_failures() {
    if std::process::Command::new("go")
        .arg("version")
        .output()
        .is_err()
        && machine_lacks(
            "PROCD_TEST_NO_GO",
            "go (tests/system-deps.sh installs golang-go)",
        )
    {
        return;
    }
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "go.mod",
        "module example.com/tally\n\ngo 1.19\n",
    );
    write(dir.path(), "tally_test.go", GO_FILE);
    let env = json!({
        "GOCACHE": dir.path().join("cache"),
        "GOPATH": dir.path().join("gopath"),
        "GOFLAGS": "-mod=mod",
        "GOTOOLCHAIN": "local",
    });
    for (command, key) in [("go test -v ./...", "v"), ("go test -json ./...", "json")] {
        let (_, r) = run_in(&d, dir.path(), command, key, env.clone());
        let t = &r["tests"];
        assert_eq!(
            counts(t),
            ("go test".into(), 1, 1, 1, true),
            "{command}: {t}"
        );
        let fails = failure(t, "TestFails");
        assert_eq!(fails["location"], "tally_test.go:8", "{command}: {t}");
        assert!(
            fails["message"]
                .as_str()
                .unwrap_or_default()
                .contains("want 1, got 2"),
            "{command}: {t}"
        );
    }
    // Without -v go does not name its passing tests: no counts at all.
    let (_, r) = run_in(&d, dir.path(), "go test ./...", "quiet", env);
    assert!(r.get("tests").is_none(), "{r}");
}

#[test]
fn a_command_that_is_no_test_run_gets_no_tests_and_a_bad_junit_is_refused() {
    let d = Daemon::start();
    // Output that looks like libtest's, from a command that runs no tests.
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "out.txt",
        "running 1 test\ntest a ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
    );
    let id = d.spawn_with(json!({"command": "cat out.txt", "cwd": dir.path()}));
    let r = d.wait_exit(&id);
    assert!(r.get("tests").is_none(), "not a test command: {r}");
    let (code, message) = d.err("spawn", json!({"command": "true", "junit": ""}));
    assert_eq!(code, -32602);
    assert!(message.contains("junit"), "{message}");
    // A report that is not there, or is a FIFO nobody writes: no counts,
    // and the session still ends.
    let fifo = dir.path().join("fifo.xml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    for junit in ["missing.xml", "fifo.xml"] {
        let id = d.spawn_with(json!({"command": "true", "cwd": dir.path(), "junit": junit}));
        let r = d.wait_exit(&id);
        assert!(r.get("tests").is_none(), "{junit}: {r}");
    }
}
