//! The `procd` command line (docs/operations.md): round trips, exit codes, on-demand start.

use crate::common::*;
use serde_json::Value;
use std::process::{Command, Output, Stdio};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json_out(o: &Output) -> Value {
    serde_json::from_str(stdout(o).trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {:?} / {:?}",
            stdout(o),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// A home with no daemon yet; any daemon a CLI call starts there is
/// stopped on drop.
struct EmptyHome(tempfile::TempDir);

impl EmptyHome {
    fn new() -> EmptyHome {
        EmptyHome(short_tempdir())
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--home")
            .arg(self.0.path())
            .args(args)
            .env("HOME", self.0.path())
            .stdin(Stdio::null())
            .output()
            .expect("run procd")
    }
}

impl Drop for EmptyHome {
    fn drop(&mut self) {
        stop_recorded_daemon(self.0.path());
    }
}

#[test]
fn spawn_runs_in_the_current_directory_and_cwd_is_relative_to_it() {
    let d = Daemon::start();
    let project = d.home.path().join("project");
    std::fs::create_dir_all(project.join("sub")).unwrap();
    let in_project = |args: &[&str]| {
        Command::new(BIN)
            .arg("--home")
            .arg(d.home.path())
            .env("HOME", d.home.path())
            .current_dir(&project)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for (args, want) in [
        (vec!["spawn", "--json", "--", "pwd"], project.clone()),
        (
            vec!["spawn", "--json", "--cwd", "sub", "--", "pwd"],
            project.join("sub"),
        ),
    ] {
        let out = in_project(&args);
        assert!(out.status.success(), "{out:?}");
        let id = json_out(&out)["session_id"].as_str().unwrap().to_string();
        d.wait_exit(&id);
        assert_eq!(d.read_all(&id), format!("{}\n", want.display()));
    }
}

#[test]
fn spawn_wait_logs_round_trip() {
    let d = Daemon::start();
    let out = d.cli(&[
        "spawn", "--json", "--", "echo", "hello", "world;", "exit", "3",
    ]);
    assert!(out.status.success(), "{out:?}");
    let spawned = json_out(&out);
    let id = spawned["session_id"].as_str().unwrap().to_string();
    assert_eq!(
        spawned["command"], "echo hello world; exit 3",
        "arguments are joined"
    );

    let waited = d.cli(&["wait", &id, "--timeout", "20"]);
    assert_eq!(
        waited.status.code(),
        Some(3),
        "wait exits with the session's code"
    );
    assert!(stdout(&waited).contains("exit code 3"));

    let logs = d.cli(&["logs", &id]);
    assert!(logs.status.success());
    assert_eq!(stdout(&logs), "hello world\n");

    let polled = json_out(&d.cli(&["poll", "--json", &id[..9]]));
    assert_eq!(polled["status"], "exited");
    assert_eq!(polled["exit_code"], 3);

    let ps = d.cli(&["ps"]);
    let table = stdout(&ps);
    assert!(table.starts_with("ID"), "{table}");
    assert!(table.contains(&id) && table.contains("exit 3"), "{table}");
}

#[test]
fn one_argument_is_the_command_as_given() {
    let d = Daemon::start();
    let id = json_out(&d.cli(&["spawn", "--json", "--", "printf '%s|' a 'b c'"]))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(d.cli(&["wait", &id]).status.code(), Some(0));
    assert_eq!(stdout(&d.cli(&["logs", &id])), "a|b c|\n");
}

#[test]
fn send_kill_and_follow() {
    let d = Daemon::start();
    let id = json_out(&d.cli(&[
        "spawn",
        "--json",
        "--",
        "read line; echo got $line; sleep 300",
    ]))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let sent = d.cli(&["send", &id, "ping"]);
    assert!(sent.status.success(), "{sent:?}");
    d.read_until(&id, "got ping");
    let follower = Command::new(BIN)
        .arg("--home")
        .arg(d.home.path())
        .args(["logs", "-f", &id])
        .stdout(Stdio::piped())
        .spawn()
        .expect("logs -f");
    let killed = json_out(&d.cli(&["kill", "--json", &id]));
    assert_eq!(killed["status"], "killed");
    let followed = output_within(follower, "procd logs -f");
    assert!(followed.status.success());
    assert_eq!(
        stdout(&followed),
        "got ping\n",
        "logs -f ends when the session does"
    );
    assert_eq!(d.cli(&["send", &id, "late"]).status.code(), Some(1));
}

#[test]
fn status_exit_codes() {
    let home = EmptyHome::new();
    let out = home.cli(&["status"]);
    assert_eq!(out.status.code(), Some(3), "not running");
    let d = Daemon::start();
    let out = d.cli(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let s = json_out(&out);
    assert_eq!(s["launch_mode"], "foreground");
    assert_eq!(s["lifetime"], "explicit");
    assert_eq!(s["pid"].as_u64(), Some(u64::from(d.pid())));
}

#[test]
fn read_only_commands_do_not_start_a_daemon() {
    let home = EmptyHome::new();
    for args in [
        &["ps"][..],
        &["poll", "proc_abcd"],
        &["logs", "abcd"],
        &["wait", "abcd"],
        &["kill", "abcd"],
    ] {
        let out = home.cli(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("procd is not running"));
    }
    assert!(!home.0.path().join("run/gateway.json").exists());
}

#[test]
fn usage_errors_exit_2() {
    let home = EmptyHome::new();
    assert_eq!(home.cli(&["spawn"]).status.code(), Some(2));
    assert_eq!(home.cli(&["frobnicate"]).status.code(), Some(2));
}

/// A number flag is judged by its wire field's own rule, in the CLI,
/// before anything starts or is sent: the daemon's message, naming the
/// field. That covers what JSON cannot carry (serde_json would send null,
/// and the flag would silently not apply), what becomes such in
/// milliseconds, and `stop --timeout 1e30`, which once panicked. A
/// billion seconds is only long: `stop` still stops.
#[test]
fn numbers_json_cannot_carry_are_refused_and_huge_ones_are_long() {
    let home = EmptyHome::new();
    for (args, field) in [
        (
            &["spawn", "--timeout", "inf", "--", "true"][..],
            "timeout_s",
        ),
        (&["spawn", "--timeout", "0", "--", "true"], "timeout_s"),
        (&["spawn", "--cpus", "nan", "--", "true"], "cpu_cores"),
        (&["wait", "proc_abcd", "--timeout", "1e999"], "timeout_s"),
        (&["kill", "proc_abcd", "--grace", "-inf"], "grace_s"),
        (&["stop", "--timeout", "nan"], "grace_s"),
        (&["stop", "--timeout", "1e30"], "grace_s"),
        // Finite, but infinite in milliseconds.
        (&["up", "--wait", "1e306"], "yield_ms"),
    ] {
        let out = home.cli(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(&format!("{field}: must be a number of")),
            "{args:?}: {said}"
        );
    }
    assert!(!home.0.path().join("run/gateway.json").exists());

    let mut d = Daemon::start();
    let out = d.cli(&["stop", "--timeout", "1e9"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(d.wait_exit_code(), Some(0));
}

#[test]
fn spawn_starts_a_daemon_on_demand() {
    let home = EmptyHome::new();
    let out = home.cli(&["spawn", "--json", "--", "echo", "on-demand"]);
    assert!(out.status.success(), "{out:?}");
    let id = json_out(&out)["session_id"].as_str().unwrap().to_string();
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(home.0.path().join("run/gateway.json")).expect("state"),
    )
    .expect("json");
    assert_eq!(state["launch_mode"], "background");
    let pid = state["pid"].as_i64().unwrap() as i32;
    assert!(alive(pid));
    let status = json_out(&home.cli(&["status", "--json"]));
    assert_eq!(status["lifetime"], "on_demand");
    assert_eq!(home.cli(&["wait", &id]).status.code(), Some(0));
    assert_eq!(stdout(&home.cli(&["logs", &id])), "on-demand\n");
}

#[test]
fn concurrent_clients_start_exactly_one_daemon() {
    let home = EmptyHome::new();
    let children: Vec<_> = (0..4)
        .map(|i| {
            Command::new(BIN)
                .arg("--home")
                .arg(home.0.path())
                .args(["spawn", "--json", "--", &format!("echo {i}")])
                .env("HOME", home.0.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn client")
        })
        .collect();
    for child in children {
        let out = output_within(child, "a concurrent procd spawn");
        assert!(out.status.success(), "{out:?}");
    }
    let listed = json_out(&home.cli(&["ps", "--json"]));
    assert_eq!(
        listed["processes"].as_array().unwrap().len(),
        4,
        "all four in one daemon"
    );
}

#[test]
fn completions_complete_subcommands_and_the_man_page_renders() {
    let out = Command::new(BIN)
        .args(["completions", "bash"])
        .output()
        .expect("procd");
    assert!(out.status.success(), "{out:?}");
    let dir = short_tempdir();
    let script = dir.path().join("procd.bash");
    std::fs::write(&script, &out.stdout).expect("write");
    // Ask bash's completion function what `procd sp<TAB>` offers.
    let probe = format!(
        "source {}; COMP_WORDS=(procd sp); COMP_CWORD=1; COMP_LINE='procd sp'; COMP_POINT=8; _procd procd sp procd; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let done = Command::new("bash")
        .args(["-c", &probe])
        .output()
        .expect("bash");
    assert_eq!(stdout(&done).trim(), "spawn", "{done:?}");
    for (shell, mark) in [("zsh", "#compdef procd"), ("fish", "complete -c procd")] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .expect("procd");
        assert!(
            out.status.success() && stdout(&out).contains(mark),
            "{shell}: {out:?}"
        );
    }
    let man = Command::new(BIN).arg("man").output().expect("procd man");
    assert!(man.status.success());
    let page = stdout(&man);
    assert!(
        page.contains(".TH procd 1") && page.contains("spawn") && page.contains("A live view"),
        "{page}"
    );
    let bad = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .expect("procd");
    assert_eq!(
        bad.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

/// Each subcommand's help opens with the line the overview gives it, for
/// the top level and `lease`'s: a subcommand's flags are made only when it
/// runs (`cli/args.rs`), and what is made then must not replace the
/// description the overview shows (as a doc comment on its flags' struct
/// would).
#[test]
fn each_subcommand_help_opens_with_its_overview_line() {
    let help = |args: &[&str]| {
        let out = Command::new(BIN).args(args).output().expect("procd");
        assert!(out.status.success(), "{args:?}: {out:?}");
        stdout(&out)
    };
    let mut checked = 0;
    for parent in [&[][..], &["lease"][..]] {
        let overview = help(&[parent, &["--help"]].concat());
        let listed: Vec<(String, String)> = overview
            .lines()
            .skip_while(|l| *l != "Commands:")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.trim().split_once(char::is_whitespace))
            .map(|(name, about)| (name.to_string(), about.trim().to_string()))
            .filter(|(name, _)| name != "help")
            .collect();
        assert!(listed.len() >= 3, "{overview}");
        for (name, about) in listed {
            let args = [parent, &[name.as_str(), "--help"]].concat();
            assert_eq!(
                help(&args).lines().next(),
                Some(about.as_str()),
                "`procd {}` opens otherwise than the overview says",
                args.join(" ")
            );
            checked += 1;
        }
    }
    assert!(checked > 25, "only {checked} subcommands were looked at");
}

/// A spawn flag says what its parameter means in the protocol's own words
/// (`procd_proto::describe!`), the same text the protocol type's doc and
/// the MCP schema carry: one source per parameter (issue 49).
#[test]
fn spawn_flags_say_what_the_protocol_says_of_their_params() {
    let out = Command::new(BIN)
        .args(["spawn", "--help"])
        .output()
        .expect("procd");
    assert!(out.status.success(), "{out:?}");
    let help = stdout(&out)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for (flag, said) in [
        ("--task", procd_proto::describe!(task_id)),
        ("--project", procd_proto::describe!(project)),
        ("--max-restarts", procd_proto::describe!(max_restarts)),
        ("--backoff", procd_proto::describe!(backoff_s)),
        ("--memory", procd_proto::describe!(memory_bytes)),
        ("--cpus", procd_proto::describe!(cpu_cores)),
        ("--pids", procd_proto::describe!(pids)),
        ("--watch-files", procd_proto::describe!(watch_paths)),
        ("--on-change", procd_proto::describe!(watch_action)),
        ("--timeout", procd_proto::describe!(timeout_s)),
    ] {
        let line = help
            .split(" --")
            .find(|l| format!("--{l}").starts_with(&format!("{flag} ")))
            .unwrap_or_else(|| panic!("no {flag} in: {help}"));
        assert!(line.contains(said), "{flag} says {line:?}, not {said:?}");
    }
}

/// `procd events` as a watcher reads it: filtered by name and kind, one
/// line each; a bad kind is a usage error naming it; `--pending` for
/// hooks prints nothing and exits 0 when nothing is queued.
#[test]
fn procd_events_filters_by_name_and_kind() {
    let d = Daemon::start();
    let web =
        d.spawn_with(serde_json::json!({"command": "echo up; exec sleep 300", "name": "web"}));
    d.spawn("echo other");
    let mut follow = Command::new(BIN)
        .arg("--home")
        .arg(d.home.path())
        .args([
            "events", "--since", "0", "--name", "web", "--kinds", "started",
        ])
        .env("HOME", d.home.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("procd events");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        follow.stdout.take().expect("stdout"),
    ));
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(
        first.contains(&format!(" started {web} started (pid ")),
        "{first}"
    );
    let bad = d.cli(&["events", "--kinds", "finished"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("\"finished\""),
        "{bad:?}"
    );
    let none = d.cli(&["events", "--pending", "--key", "nobody"]);
    assert_eq!(
        (none.status.code(), none.stdout.len()),
        (Some(0), 0),
        "{none:?}"
    );
}
