//! Restart on change (docs/stacks.md): `spawn{watch}` restarts a session
//! when files under its watched directories change, once per burst,
//! leaving ignored paths out, and across a daemon SIGKILL.

use crate::common::*;
use serde_json::{json, Value};

fn restarts(d: &Daemon, id: &str) -> u64 {
    d.ok("poll", json!({"session_id": id}))["restarts"]
        .as_u64()
        .unwrap_or(0)
}

fn log_of(d: &Daemon, id: &str) -> String {
    d.ok("log", json!({"session_id": id, "limit": 10000}))["output"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Spawns the test server (it says "run-started" at each run) in `cwd`
/// with `watch`; returns its id.
fn spawn_watched(d: &Daemon, cwd: &std::path::Path, watch: Value) -> String {
    let r = d.ok(
        "spawn",
        json!({"command": "echo run-started; exec sleep 300", "cwd": cwd,
               "watch": watch, "yield_ms": 5000}),
    );
    r["session_id"].as_str().expect("a session id").to_string()
}

/// Writes `path` and waits until the session has restarted because of
/// it: its log says so.
fn edit_and_wait(d: &Daemon, id: &str, dir: &std::path::Path, path: &str) {
    let before = restarts(d, id);
    std::fs::write(dir.join(path), "edit").unwrap();
    let said = format!("[procd] {path} changed: restarting");
    wait_until(&format!("a restart for {path}"), || {
        log_of(d, id).contains(&said)
    });
    wait_next_run(d, id, before);
}

/// Waits until a run after the `before`th restart has started. A file
/// written before it starts is no change to it (it starts with it), so a
/// test edits only once the run is there.
fn wait_next_run(d: &Daemon, id: &str, before: u64) {
    wait_until("the next run", || {
        let now = restarts(d, id);
        now > before
            && d.ok("poll", json!({"session_id": id}))["status"] == "running"
            && log_of(d, id).matches("run-started").count() as u64 == now + 1
    });
}

#[test]
fn an_edit_restarts_once_per_burst_and_ignored_paths_restart_nothing() {
    let d = Daemon::start();
    let cwd = tempfile::tempdir().expect("cwd");
    let at = |p: &str| cwd.path().join(p);
    std::fs::create_dir_all(at("src")).unwrap();
    std::fs::create_dir_all(at("src/node_modules/dep")).unwrap();
    std::fs::write(at(".gitignore"), "*.log\n").unwrap();
    let id = spawn_watched(
        &d,
        cwd.path(),
        json!({"paths": ["src"], "debounce_ms": 1000}),
    );
    assert_eq!(restarts(&d, &id), 0);

    // One edit: one restart, same id and log, the file named in the log
    // and in the `restarted` event.
    edit_and_wait(&d, &id, cwd.path(), "src/a.ts");
    assert_eq!(restarts(&d, &id), 1);
    let events = restarted_events(&d, &id, None);
    assert!(
        events
            .iter()
            .any(|e| e["text"].as_str().unwrap_or("").contains("src/a.ts")),
        "{events:?}"
    );

    // 50 edits in a burst: one restart, then a sentinel's restart is the
    // next one (a second restart for the burst would come before it).
    // (Paced over ~200 ms, as a formatter or a checkout writes: not one
    // read of the inotify queue.)
    for i in 0..50 {
        std::fs::write(at(&format!("src/b{i}.ts")), "x").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(4));
    }
    wait_next_run(&d, &id, 1);
    edit_and_wait(&d, &id, cwd.path(), "src/sentinel.ts");
    assert_eq!(restarts(&d, &id), 3, "{}", log_of(&d, &id));

    // Ignored paths first, then a sentinel: only the sentinel restarts it.
    std::fs::write(at("src/node_modules/dep/index.js"), "x").unwrap();
    std::fs::write(at("src/server.log"), "x").unwrap();
    edit_and_wait(&d, &id, cwd.path(), "src/sentinel2.ts");
    assert_eq!(restarts(&d, &id), 4, "{}", log_of(&d, &id));
    let log = log_of(&d, &id);
    assert!(
        !log.contains("node_modules") && !log.contains("server.log"),
        "{log}"
    );

    // An editor's save: a swap file, then a rename over the file.
    std::fs::write(at("src/.a.ts.swp"), "swap").unwrap();
    std::fs::write(at("src/a.ts.tmp~"), "new").unwrap();
    std::fs::rename(at("src/a.ts.tmp~"), at("src/a.ts")).unwrap();
    wait_until("the save's restart", || restarts(&d, &id) == 5);
    let log = log_of(&d, &id);
    assert!(
        log.contains("[procd] src/a.ts changed: restarting"),
        "{log}"
    );
    assert!(!log.contains(".swp"), "{log}");
    d.ok("kill", json!({"session_id": id}));
}

/// A glob in `watch.paths` watches its base and counts only the files it
/// matches.
#[test]
fn a_glob_in_watch_paths_restarts_for_matching_files_only() {
    let d = Daemon::start();
    let cwd = tempfile::tempdir().expect("cwd");
    std::fs::create_dir_all(cwd.path().join("src/deep/er")).unwrap();
    let id = spawn_watched(
        &d,
        cwd.path(),
        json!({"paths": ["src/**/*.ts"], "debounce_ms": 50}),
    );
    // Not matching first, then a match: only the match is named, once.
    std::fs::write(cwd.path().join("src/deep/notes.md"), "x").unwrap();
    std::fs::write(cwd.path().join("src/deep/er/app.js"), "x").unwrap();
    edit_and_wait(&d, &id, cwd.path(), "src/deep/er/app.ts");
    assert_eq!(restarts(&d, &id), 1);
    let log = log_of(&d, &id);
    assert!(
        !log.contains("notes.md") && !log.contains("app.js"),
        "{log}"
    );
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn a_watch_survives_a_daemon_sigkill_and_bad_watches_are_refused() {
    let d = Daemon::start();
    let cwd = tempfile::tempdir().expect("cwd");
    std::fs::create_dir_all(cwd.path().join("src")).unwrap();
    let id = spawn_watched(&d, cwd.path(), json!({"paths": ["src"], "debounce_ms": 50}));
    d.kill_daemon();
    edit_and_wait(&d, &id, cwd.path(), "src/after-crash.ts");
    assert_eq!(restarts(&d, &id), 1);
    d.ok("kill", json!({"session_id": id}));

    for (bad, names) in [
        (json!({"paths": ["nope"]}), "watch.paths"),
        (
            json!({"paths": ["src"], "action": "reboot"}),
            "watch.action",
        ),
        (
            json!({"paths": ["src"], "debounce_ms": 0}),
            "watch.debounce_ms",
        ),
        (json!({"paths": ["src"], "when": "now"}), "when"),
        (json!({"paths": ["../*.ts"]}), "watch.paths"),
        (json!({"paths": ["nope/**/*.ts"]}), "watch.paths"),
    ] {
        let (code, message) = d.err(
            "spawn",
            json!({"command": "true", "cwd": cwd.path(), "watch": bad.clone()}),
        );
        assert_eq!(code, -32602, "{bad}: {message}");
        assert!(message.contains(names), "{bad}: {message}");
    }
    assert_eq!(
        d.ok("list", json!({"status": "running"}))["processes"],
        json!([])
    );
}

/// A stack service with `watch` in procd.toml restarts on change too.
#[test]
fn a_stack_service_with_watch_restarts_on_change() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("project");
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    let file = dir.path().join("procd.toml");
    std::fs::write(
        &file,
        "[service.web]\ncommand = \"echo run-started; exec sleep 300\"\n\
         watch = { paths = [\"src\"] }\n",
    )
    .unwrap();
    let out = d.cli(&["up", "--json", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let up: Value = serde_json::from_slice(&out.stdout).expect("up --json");
    let id = up["services"][0]["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    edit_and_wait(&d, &id, dir.path(), "src/app.py");
    assert_eq!(restarts(&d, &id), 1);
    let _: Value = d.ok("kill", json!({"session_id": id}));
}

/// `run:COMMAND`: the command runs first as a session of its own; a
/// failure leaves the old run going, a success restarts it.
#[test]
fn a_rebuild_step_runs_first_and_only_its_success_restarts() {
    let d = Daemon::start();
    let cwd = tempfile::tempdir().expect("cwd");
    std::fs::create_dir_all(cwd.path().join("src")).unwrap();
    let id = spawn_watched(
        &d,
        cwd.path(),
        json!({"paths": ["src"], "action": "run:test -f src/ok && echo built"}),
    );
    // Two failed rebuilds: the second is asked by the same run's
    // follower, so had the first restarted it, that restart is counted.
    for (n, file) in [(1, "src/broken.ts"), (2, "src/again.ts")] {
        std::fs::write(cwd.path().join(file), "x").unwrap();
        wait_until("the failed rebuild is said", || {
            log_of(&d, &id)
                .matches("(exit code 1): not restarting")
                .count()
                == n
        });
    }
    assert_eq!(restarts(&d, &id), 0);
    assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "running");
    std::fs::write(cwd.path().join("src/ok"), "x").unwrap();
    wait_until("the rebuilt run", || {
        restarts(&d, &id) == 1
            && d.ok("poll", json!({"session_id": id}))["status"] == "running"
            && log_of(&d, &id).matches("run-started").count() == 2
    });
    let log = log_of(&d, &id);
    assert!(
        log.contains("src/ok changed: running \"test -f src/ok && echo built\""),
        "{log}"
    );
    d.ok("kill_all", json!({}));
}

/// A server that ignores SIGTERM, with a child that does too: an edit
/// still restarts it once the grace is out, neither outlives its run,
/// and the next run, which has the same cgroup by then, is left alone.
#[test]
fn a_server_deaf_to_sigterm_is_killed_by_the_restart_and_the_next_run_lives() {
    let d = Daemon::with_config("kill_grace_s = 0.5\n");
    let cwd = tempfile::tempdir().expect("cwd");
    std::fs::create_dir_all(cwd.path().join("src")).unwrap();
    let r = d.ok(
        "spawn",
        json!({"command": "trap '' TERM; sleep 300 & echo \"child $! run-started\"; while :; do sleep 0.05; done",
               "cwd": cwd.path(), "watch": {"paths": ["src"], "debounce_ms": 50}}),
    );
    let id = r["session_id"].as_str().expect("id").to_string();
    let child_of = |run: usize| -> i32 {
        wait_until("the run's child", || {
            log_of(&d, &id).matches("run-started").count() > run
        });
        let log = log_of(&d, &id);
        let line = log.lines().filter(|l| l.contains("run-started")).nth(run);
        line.and_then(|l| l.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no child pid in {log}"))
    };
    let first = child_of(0);
    let first_start = procd_sys::procfs::ProcFs::default()
        .stat(first)
        .expect("child")
        .start_time;
    edit_and_wait(&d, &id, cwd.path(), "src/a.ts");
    let gone = || {
        procd_sys::procfs::ProcFs::default()
            .stat(first)
            .map_or(true, |s| s.start_time != first_start)
    };
    assert!(gone(), "the first run's child outlived it");
    let second = child_of(1);
    let root = d.ok("poll", json!({"session_id": id}))["pid"].clone();
    // Past the grace twice over: the last run's SIGKILL, due after the
    // grace, must not have reached the run that holds its cgroup now.
    let since = std::time::Instant::now();
    wait_until("twice the grace", || since.elapsed().as_millis() > 1000);
    let poll = d.ok("poll", json!({"session_id": id}));
    assert_eq!(poll["status"], "running", "{poll}");
    assert_eq!(poll["pid"], root, "{poll}");
    assert_eq!(poll["restarts"], 1, "{poll}");
    assert!(std::path::Path::new(&format!("/proc/{second}")).exists());
    d.ok("kill", json!({"session_id": id}));
}
