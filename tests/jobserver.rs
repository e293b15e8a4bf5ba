//! The machine-wide jobserver (docs/jobserver.md) against a real daemon
//! and real GNU make: `jobs` sessions together run at most the tokens'
//! worth of targets, where the same builds without it oversubscribe; one
//! build alone gets every token; a build SIGKILLed holding tokens gives
//! them all back, across a daemon SIGKILL too; bad input is refused by
//! name.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;

/// A Makefile of `targets` phony targets, each marking its start and end
/// in `$(LOG)` around `body`.
fn makefile(dir: &Path, targets: usize, body: &str) {
    let names: Vec<String> = (1..=targets).map(|n| format!("t{n}")).collect();
    let text = format!(
        ".PHONY: all {all}\nall: {all}\n{all}:\n\t@echo start $@ >> $(LOG); {body}; echo end $@ >> $(LOG)\n",
        all = names.join(" "),
    );
    std::fs::write(dir.join("Makefile"), text).expect("Makefile");
}

fn starts(log: &Path) -> usize {
    marks(log).iter().filter(|m| m.starts_with("start")).count()
}

/// `status.jobserver`'s tokens in use by session `id` (0: not listed).
fn tokens_of(d: &Daemon, id: &str) -> u64 {
    let status = d.ok("status", json!({}));
    status["jobserver"]["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["session_id"] == id)
        .map_or(0, |s| s["tokens"].as_u64().unwrap_or(0))
}

/// Four `make -j8` builds of 40 targets each: with `jobs` under 2 tokens,
/// never more than 2 targets at once across the four (two builds wait
/// for a token, queued); the same four without it run many more.
#[test]
fn four_makes_share_two_tokens_and_without_jobs_oversubscribe() {
    let d = Daemon::with_config("jobserver_tokens = 2\n");
    let dir = tempfile::tempdir().expect("dir");
    makefile(dir.path(), 40, "sleep 0.02");
    let run = |log: &Path, jobs: bool| -> Vec<String> {
        let command = format!("make -j8 LOG={}", log.display());
        let ids: Vec<String> = (0..4)
            .map(|_| d.spawn_with(json!({"command": command, "cwd": dir.path(), "jobs": jobs})))
            .collect();
        for id in &ids {
            let r = d.wait_exit(id);
            assert_eq!(r["exit_code"], 0, "{id}: {r}");
        }
        ids
    };
    let shared = dir.path().join("shared");
    let ids = run(&shared, true);
    let m = marks(&shared);
    assert_eq!(m.len(), 4 * 40 * 2, "every target ran: {m:?}");
    assert!(most_at_once(&m) <= 2, "{} at once: {m:?}", most_at_once(&m));
    // Two of the four waited for a token as the jobserver queue's.
    let p = d.ok("poll", json!({"session_id": ids[3]}));
    assert_eq!(p["queue"]["name"], "jobserver", "{p}");
    assert!(p["queue"]["queued_ms"].as_u64().unwrap_or(0) > 0, "{p}");
    // Every token is back once they are all done.
    let status = d.ok("status", json!({}));
    assert_eq!(status["jobserver"]["tokens"], 2, "{status}");
    assert_eq!(status["jobserver"]["in_use"], 0, "{status}");

    let free = dir.path().join("free");
    run(&free, false);
    let m = marks(&free);
    assert!(most_at_once(&m) > 2, "{} at once: {m:?}", most_at_once(&m));
}

/// A throwaway crate of six path dependencies in `dir`, built through
/// a RUSTC_WRAPPER that marks each crate's compile in `log`: what cargo
/// runs at once shows in the marks.
fn crate_of_six(dir: &Path) {
    let deps: Vec<String> = (1..=6).map(|n| format!("dep{n}")).collect();
    let mut manifest =
        "[package]\nname = \"top\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[workspace]\n[dependencies]\n"
            .to_string();
    for dep in &deps {
        manifest += &format!("{dep} = {{ path = \"{dep}\" }}\n");
        let at = dir.join(dep);
        std::fs::create_dir_all(at.join("src")).expect("dep dir");
        std::fs::write(
            at.join("Cargo.toml"),
            format!("[package]\nname = \"{dep}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
        )
        .expect("dep manifest");
        std::fs::write(at.join("src/lib.rs"), "pub fn f() -> u32 { 1 }\n").expect("dep lib");
    }
    std::fs::create_dir_all(dir.join("src")).expect("src");
    std::fs::write(dir.join("Cargo.toml"), manifest).expect("manifest");
    let calls: Vec<String> = deps.iter().map(|d| format!("{d}::f()")).collect();
    std::fs::write(
        dir.join("src/lib.rs"),
        format!("pub fn all() -> u32 {{ {} }}\n", calls.join(" + ")),
    )
    .expect("lib");
    // Marks only compiles (cargo also asks `rustc -vV` and `--crate-name
    // ___ --print` through it); the pause inside the marks makes
    // overlapping compiles overlap surely.
    let wrapper = dir.join("rustc-wrapper");
    std::fs::write(
        &wrapper,
        r#"#!/bin/sh
name= prev=
for a do [ "$prev" = --crate-name ] && name=$a; prev=$a; done
case $name in ''|___) exec "$@" ;; esac
echo "start $name" >> "$MARKS"; "$@"; s=$?; sleep 0.2; echo "end $name" >> "$MARKS"; exit $s
"#,
    )
    .expect("wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Two `cargo build -j8` of a crate of six dependencies under 2 tokens:
/// rustc at once never exceeds the tokens plus one per cargo (its own,
/// GNU make's implicit token), where the same two builds without `jobs`
/// run more.
#[test]
fn two_cargo_builds_share_two_tokens() {
    let d = Daemon::with_config("jobserver_tokens = 2\n");
    let dir = tempfile::tempdir().expect("dir");
    crate_of_six(dir.path());
    let home = std::env::var("HOME").unwrap_or_default();
    let var = |k: &str, default: String| std::env::var(k).unwrap_or(default);
    let build = |marks: &Path, jobs: bool| {
        let ids: Vec<String> = (0..2)
            .map(|n| {
                let env = json!({
                    "PATH": var("PATH", String::new()),
                    "CARGO_HOME": var("CARGO_HOME", format!("{home}/.cargo")),
                    "RUSTUP_HOME": var("RUSTUP_HOME", format!("{home}/.rustup")),
                    "CARGO_TARGET_DIR": dir.path().join(format!("target-{jobs}-{n}")),
                    "RUSTC_WRAPPER": dir.path().join("rustc-wrapper"),
                    "MARKS": marks,
                });
                d.spawn_with(json!({"command": "cargo build -j8 --offline -q",
                                    "cwd": dir.path(), "env": env, "jobs": jobs}))
            })
            .collect();
        for id in &ids {
            let r = d.wait_exit(id);
            assert_eq!(r["exit_code"], 0, "{id}: {r}");
        }
    };
    let shared = dir.path().join("shared");
    build(&shared, true);
    let m = marks(&shared);
    assert_eq!(m.len(), 2 * 7 * 2, "every crate compiled: {m:?}");
    assert!(
        most_at_once(&m) <= 2 + 2,
        "{} at once: {m:?}",
        most_at_once(&m)
    );
    let free = dir.path().join("free");
    build(&free, false);
    let m = marks(&free);
    assert!(
        most_at_once(&m) > 2 + 2,
        "{} at once: {m:?}",
        most_at_once(&m)
    );
}

/// One build alone gets every token (its own and the rest through its
/// FIFO); SIGKILLed holding them, 20 times and across a daemon SIGKILL
/// with the build running, it gives every one back: each next build runs
/// the tokens' worth of targets again, and none are in use at the end.
#[test]
fn tokens_held_by_killed_builds_all_come_back() {
    let d = Daemon::with_config("jobserver_tokens = 3\n");
    let dir = tempfile::tempdir().expect("dir");
    makefile(dir.path(), 8, "exec sleep 300");
    for round in 0..20 {
        let log = dir.path().join(format!("round-{round}"));
        let command = format!("make -j8 LOG={}", log.display());
        let id = d.spawn_with(json!({"command": command, "cwd": dir.path(), "jobs": true}));
        wait_until(&format!("round {round}: 3 targets run"), || {
            starts(&log) >= 3
        });
        assert_eq!(tokens_of(&d, &id), 3, "round {round}");
        if round == 10 {
            // The daemon dies with the build holding every token: the
            // next one knows what it gave, and takes it all back below.
            d.kill_daemon();
            assert_eq!(tokens_of(&d, &id), 3, "after a daemon SIGKILL");
        }
        d.ok("signal", json!({"session_id": id, "signal": "KILL"}));
        d.wait_exit(&id);
        assert_eq!(starts(&log), 3, "round {round}: no 4th target ran");
    }
    let status = d.ok("status", json!({}));
    assert_eq!(status["jobserver"]["in_use"], 0, "{status}");
    assert_eq!(status["jobserver"]["sessions"], json!([]), "{status}");
    // No FIFO is left behind.
    let left: Vec<_> = std::fs::read_dir(d.state_dir().join("jobs"))
        .expect("jobs dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".fifo"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A `jobs` session that restarts: the tokens its killed run held are
/// its next run's again, not lost until the session ends.
#[test]
fn a_restarted_build_gets_back_what_its_killed_run_held() {
    let d = Daemon::with_config("jobserver_tokens = 3\n");
    let dir = tempfile::tempdir().expect("dir");
    makefile(dir.path(), 8, "exec sleep 300");
    let log = dir.path().join("marks");
    let id = d.spawn_with(json!({
        "command": format!("make -j8 LOG={}", log.display()), "cwd": dir.path(),
        "jobs": true, "restart": {"policy": "always", "backoff_s": 0.1}}));
    wait_until("3 targets run", || starts(&log) >= 3);
    assert_eq!(tokens_of(&d, &id), 3);
    d.ok("signal", json!({"session_id": id, "signal": "KILL"}));
    wait_until("the next run runs 3 targets", || starts(&log) >= 6);
    assert_eq!(tokens_of(&d, &id), 3);
    assert_eq!(d.ok("poll", json!({"session_id": id}))["restarts"], 1);
    d.ok("kill", json!({"session_id": id}));
}

/// What a `jobs` session is given: make's jobserver on fd 3 in MAKEFLAGS
/// and CARGO_MAKEFLAGS, a FIFO there, procd's make first on PATH.
#[test]
fn a_jobs_session_sees_the_jobserver_where_make_and_cargo_look() {
    let d = Daemon::with_config("jobserver_tokens = 2\n");
    let id = d.spawn_with(json!({
        "command": "echo \"MF=$MAKEFLAGS\"; echo \"CMF=$CARGO_MAKEFLAGS\"; \
                    stat -Lc %F /proc/self/fd/3; command -v make",
        "jobs": true}));
    d.wait_exit(&id);
    let out = d.ok("log", json!({"session_id": id, "limit": 10000}))["output"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(out.contains("MF= -j --jobserver-auth=3,3"), "{out}");
    assert!(out.contains("CMF= -j --jobserver-auth=3,3"), "{out}");
    assert!(out.contains("fifo"), "{out}");
    let shim = d.state_dir().join("jobs/bin/make");
    assert!(out.contains(&shim.display().to_string()), "{out}");
}

/// Under config `default_jobs`, a spawn that does not say `jobs` draws
/// a token; one that says `jobs: false`, and a named one, do not.
#[test]
fn default_jobs_makes_a_plain_spawn_draw_a_token() {
    let d = Daemon::with_config("jobserver_tokens = 1\ndefault_jobs = true\n");
    let first = d.spawn_with(json!({"command": "echo \"MF=$MAKEFLAGS\"; exec sleep 300"}));
    wait_until("the first holds the token", || tokens_of(&d, &first) == 1);
    let second = d.ok("spawn", json!({"command": "exec sleep 300"}));
    assert_eq!(second["status"], "queued", "{second}");
    assert_eq!(second["queue"]["name"], "jobserver", "{second}");
    for params in [
        json!({"command": "echo \"MF=$MAKEFLAGS\"; exec sleep 300", "jobs": false}),
        json!({"command": "echo \"MF=$MAKEFLAGS\"; exec sleep 300", "name": "server"}),
    ] {
        let r = d.ok("spawn", params.clone());
        assert_eq!(r["status"], "running", "{params}: {r}");
        let id = r["session_id"].as_str().expect("id").to_string();
        let out = || d.ok("poll", json!({"session_id": id}))["output_preview"].to_string();
        wait_until("it prints MAKEFLAGS", || out().contains("MF="));
        assert!(!out().contains("jobserver-auth"), "{params}: {}", out());
        d.ok("kill", json!({"session_id": id}));
    }
    let out = d.ok("poll", json!({"session_id": first}))["output_preview"].to_string();
    assert!(out.contains("MF= -j --jobserver-auth=3,3"), "{out}");
    d.ok("kill", json!({"session_id": second["session_id"]}));
    d.ok("kill", json!({"session_id": first}));
}

#[test]
fn bad_jobs_input_is_refused_by_name() {
    let d = Daemon::with_config("jobserver_tokens = 1\n");
    d.refused(
        "spawn",
        json!({"command": "true", "jobs": true, "queue": "build"}),
        "jobs",
    );
    d.refused(
        "spawn",
        json!({"command": "true", "queue": "jobserver"}),
        "jobserver",
    );
    d.refused(
        "spawn",
        json!({"command": "true", "jobs": true, "name": "web"}),
        "jobs",
    );
    let out = d.cli(&["spawn", "--jobs", "--queue", "b", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    for (config, named) in [
        (
            "jobserver_tokens = 0\n",
            "jobserver_tokens must be at least 1",
        ),
        ("[queue.jobserver]\nslots = 1\n", "jobserver"),
    ] {
        let home = short_tempdir();
        std::fs::write(home.path().join("config.toml"), config).expect("config");
        let out = std::process::Command::new(BIN)
            .args(["daemon", "--home"])
            .arg(home.path())
            .env("HOME", home.path())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("procd daemon");
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{config}: {err}");
    }
    let _: Value = d.ok("status", json!({}));
}

/// A build's tokens are back, and its FIFO gone, when its `wait` returns:
/// the jobserver's books are kept before the exit shows, not after. (Once
/// they were kept by a task that ran a moment later, and a `status` sent
/// right after the wait still counted the build's own token.)
#[test]
fn an_ended_builds_tokens_are_back_when_its_wait_returns() {
    let d = Daemon::with_config("jobserver_tokens = 2\n");
    for round in 0..40 {
        let id = d.spawn_with(json!({"command": "true", "jobs": true}));
        d.wait_exit(&id);
        let status = d.ok("status", json!({}));
        assert_eq!(status["jobserver"]["in_use"], 0, "round {round}: {status}");
        assert_eq!(status["jobserver"]["sessions"], json!([]), "{status}");
        let fifo = d.state_dir().join("jobs").join(format!("{id}.fifo"));
        assert!(!fifo.exists(), "round {round}: {} is left", fifo.display());
    }
}
