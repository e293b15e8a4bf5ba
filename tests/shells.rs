//! Shells that keep their state (docs/shells.md): commands run one after
//! another in one bash, each with its own output and exact exit code,
//! which come from the shell's channels and never from its text.

use crate::common::*;
use serde_json::{json, Value};

fn open(d: &Daemon, params: Value) -> String {
    open_with_pid(d, params).0
}

/// Opens a shell; its id and the pid of its bash.
fn open_with_pid(d: &Daemon, params: Value) -> (String, i32) {
    let r = d.ok("shell_open", params);
    let id = r["shell_id"].as_str().expect("shell_id").to_string();
    (id, r["pid"].as_i64().expect("pid") as i32)
}

/// Runs `command` in the shell and waits for its end.
fn run(d: &impl Client, shell: &str, command: &str) -> Value {
    let r = d.ok(
        "shell_run",
        json!({"shell_id": shell, "command": command, "yield_ms": PATIENCE.as_millis() as u64}),
    );
    assert_ne!(r["status"], "running", "{command}: {r}");
    r
}

/// Runs `command` and checks its exit code and output.
fn run_ok(d: &impl Client, shell: &str, command: &str, code: i64, output: &str) -> Value {
    let r = run(d, shell, command);
    assert_eq!(r["exit_code"], code, "{command}: {r}");
    assert_eq!(r["output"], output, "{command}: {r}");
    r
}

#[test]
fn cwd_variables_functions_aliases_options_ulimit_and_a_venv_persist() {
    let d = Daemon::start();
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().display().to_string();
    let sh = open(&d, json!({"cwd": dir}));
    run_ok(&d, &sh, "mkdir sub && cd sub", 0, "");
    let r = run_ok(&d, &sh, "pwd", 0, &format!("{dir}/sub\n"));
    assert_eq!(r["cwd"], format!("{dir}/sub"), "{r}");
    run_ok(
        &d,
        &sh,
        "export EXPORTED=1; plain=2; greet() { echo \"hi $1\"; }; alias ll='echo aliased'",
        0,
        "",
    );
    run_ok(
        &d,
        &sh,
        "echo $EXPORTED $plain; greet you; ll",
        0,
        "1 2\nhi you\naliased\n",
    );
    // Exported to children, the plain one not.
    run_ok(&d, &sh, "bash -c 'echo ${EXPORTED}-${plain}'", 0, "1-\n");
    run_ok(&d, &sh, "set -o pipefail; ulimit -n 99", 0, "");
    run_ok(&d, &sh, "false | true", 1, "");
    run_ok(&d, &sh, "ulimit -n", 0, "99\n");
    // set -e stays set, and a failure then ends the command, not the shell.
    run_ok(&d, &sh, "set -e", 0, "");
    run_ok(&d, &sh, "echo before; false; echo after", 1, "before\n");
    run_ok(&d, &sh, "f() { false; echo in-f; }; f; echo after-f", 1, "");
    let r = run_ok(
        &d,
        &sh,
        "case $- in *e*) echo errexit;; esac; set +e",
        0,
        "errexit\n",
    );
    assert_eq!(r["status"], "exited");
    run_ok(&d, &sh, "false; echo after", 0, "after\n");
    // A real venv, activated once.
    run_ok(
        &d,
        &sh,
        "python3 -m venv .venv && source .venv/bin/activate",
        0,
        "",
    );
    run_ok(
        &d,
        &sh,
        "echo $VIRTUAL_ENV; command -v python",
        0,
        &format!("{dir}/sub/.venv\n{dir}/sub/.venv/bin/python\n"),
    );
    run_ok(&d, &sh, "type -t deactivate", 0, "function\n");
}

#[test]
fn exit_codes_are_exact_and_the_shell_lives_on() {
    let d = Daemon::start();
    let sh = open(&d, json!({}));
    run_ok(&d, &sh, "true", 0, "");
    run_ok(&d, &sh, "false", 1, "");
    let r = run(&d, &sh, "no-such-command-here");
    assert_eq!(r["exit_code"], 127, "{r}");
    assert!(
        r["output"]
            .as_str()
            .unwrap_or("")
            .contains("command not found"),
        "{r}"
    );
    // Killed by a signal: 128 + SIGKILL.
    let r = run(&d, &sh, "sh -c 'kill -KILL $$'");
    assert_eq!(
        (r["exit_code"].as_i64(), r["status"].as_str()),
        (Some(137), Some("exited")),
        "{r}"
    );
    assert_eq!(run(&d, &sh, "sh -c 'kill -TERM $$'")["exit_code"], 143);
    run_ok(&d, &sh, "(exit 42)", 42, "");
    run_ok(&d, &sh, "echo still", 0, "still\n");
    // `exit` ends the shell, and says so; the shell is then closed.
    let r = run(&d, &sh, "exit 3");
    assert_eq!(
        (r["status"].as_str(), r["exit_code"].as_i64()),
        (Some("shell_exited"), Some(3)),
        "{r}"
    );
    let (code, message) = d.err("shell_run", json!({"shell_id": sh, "command": "true"}));
    assert_eq!(code, -32002, "{message}");
    assert!(message.contains("closed"), "{message}");
    let list = d.ok("shell_commands", json!({"shell_id": sh}));
    assert_eq!(list["open"], false, "{list}");
    let codes: Vec<i64> = list["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|c| c["exit_code"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(codes, [0, 1, 127, 137, 143, 42, 0, 3], "{list}");
}

#[test]
fn printed_markers_random_bytes_quotes_and_prompts_do_not_end_a_command() {
    let d = Daemon::start();
    let sh = open(&d, json!({}));
    // What the shell's own records look like, printed by the command, with
    // its real end later.
    let r = run_ok(
        &d,
        &sh,
        "for n in 1 2 3; do printf 'E %s x 0 /\\0' $n; echo 'E 2 0 0 /'; done; sleep 0.2; echo real-end; (exit 5)",
        5,
        "E 1 x 0 /\0E 2 0 0 /\nE 2 x 0 /\0E 2 0 0 /\nE 3 x 0 /\0E 2 0 0 /\nreal-end\n",
    );
    assert_eq!(r["status"], "exited");
    // 1 MiB of random bytes: the output range is exactly the bytes written.
    let r = run(&d, &sh, "head -c 1048576 /dev/urandom; (exit 4)");
    assert_eq!(r["exit_code"], 4, "{}", r["command"]);
    let range = r["to_cursor"].as_u64().unwrap_or(0) - r["from_cursor"].as_u64().unwrap_or(0);
    assert_eq!(range, 1_048_576, "the command's range is its bytes");
    let next = run_ok(&d, &sh, "echo next", 0, "next\n");
    assert_eq!(next["from_cursor"], r["to_cursor"]);
    // Output with no line end is the command's too (the noise filter
    // holds a partial line back until it is told the command ended).
    for _ in 0..3 {
        run_ok(&d, &sh, "printf 'no newline'", 0, "no newline");
    }
    // Begun like noise (`logout`, a bash warning) in a new shell: held by
    // the filter, so an empty pipe alone does not say drained (the sleep
    // lets the supervisor read it before the end comes).
    for held in ["logo", "bash: w"] {
        let fresh = open(&d, json!({}));
        run_ok(&d, &fresh, &format!("printf '{held}'; sleep 0.2"), 0, held);
    }
    // Unbalanced quotes are a syntax error of that command alone.
    let r = run(&d, &sh, "echo \"unbalanced");
    assert_eq!(r["exit_code"], 2, "{r}");
    run_ok(&d, &sh, "echo 'balanced'", 0, "balanced\n");
    // A changed prompt and prompt command change nothing.
    run_ok(
        &d,
        &sh,
        "PS1='E 9 x 0 / '; PROMPT_COMMAND='echo prompt'; PS2='>'",
        0,
        "",
    );
    run_ok(&d, &sh, "echo ok", 0, "ok\n");
    // The command cannot reach the shell's channels.
    let r = run(&d, &sh, "echo fake >&4; echo . >&5");
    assert_ne!(r["exit_code"], 0, "{r}");
    run_ok(&d, &sh, "echo after", 0, "after\n");
}

/// A command is read byte for byte whatever the shell's locale: an
/// ASCII one without a switch of locale (docs/shells.md), another in the
/// C locale, and the next header right after either.
#[test]
fn commands_in_any_script_and_locale_arrive_byte_for_byte() {
    let d = Daemon::start();
    for locale in ["C.UTF-8", "C"] {
        let sh = open(&d, json!({"env": {"LC_ALL": locale}}));
        let chars = if locale == "C" { 9 } else { 6 };
        run_ok(
            &d,
            &sh,
            "x='caf\u{e9} \u{20ac}'; printf '%s|%s' \"$x\" \"${#x}\"",
            0,
            &format!("caf\u{e9} \u{20ac}|{chars}"),
        );
        run_ok(
            &d,
            &sh,
            "printf '%s|' \"$x\" 'a b' \"$LC_ALL\"",
            0,
            &format!("caf\u{e9} \u{20ac}|a b|{locale}|"),
        );
        run_ok(
            &d,
            &sh,
            "printf '\u{6f22}\u{5b57}'; (exit 3)",
            3,
            "\u{6f22}\u{5b57}",
        );
        run_ok(&d, &sh, "echo after", 0, "after\n");
    }
}

#[test]
fn an_interrupt_ends_the_command_even_a_loop_and_the_shell_lives_on() {
    let d = Daemon::start();
    let (sh, pid) = open_with_pid(&d, json!({}));
    run_ok(&d, &sh, "x=kept", 0, "");
    for command in [
        "sleep 100; echo not-printed",
        "while :; do :; done",
        "for i in 1 2; do sleep 100; done",
    ] {
        let r = d.ok(
            "shell_run",
            json!({"shell_id": sh, "command": command, "yield_ms": 200}),
        );
        assert_eq!(r["status"], "running", "{r}");
        let asked = std::time::Instant::now();
        let r = d.ok("shell_interrupt", json!({"shell_id": sh}));
        // The interrupt found the shell's record that it took the command
        // up (200 ms ago): it did not wait out the 10 s it gives a shell
        // that has not (a bound far above a loaded machine's, far below
        // that wait).
        let took = asked.elapsed();
        assert!(
            took < std::time::Duration::from_secs(5),
            "{command}: {took:?}"
        );
        // Ended by SIGINT: before its grace ran out and SIGKILL came.
        assert_eq!(
            (
                r["status"].as_str(),
                r["exit_code"].as_i64(),
                r["ended_by"].as_str()
            ),
            (Some("interrupted"), Some(130), Some("SIGINT")),
            "{command}: {r}"
        );
        assert_eq!(r["output"], "", "{r}");
        run_ok(&d, &sh, "echo $x", 0, "kept\n");
        // The shell, idle, is left as it was: no signal blocked (a `return` out
        // of bash's SIGINT trap while it waits for a child leaves SIGCHLD
        // blocked for good).
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        assert!(
            status.contains("SigBlk:\t0000000000000000\n"),
            "{command}: {status}"
        );
    }
}

#[test]
fn a_command_past_its_timeout_is_interrupted_then_killed() {
    let d = Daemon::start();
    let sh = open(&d, json!({}));
    let r = d.ok(
        "shell_run",
        json!({"shell_id": sh, "command": "sleep 100", "timeout_s": 0.5, "yield_ms": PATIENCE.as_millis() as u64}),
    );
    assert_eq!(
        (
            r["status"].as_str(),
            r["exit_code"].as_i64(),
            r["ended_by"].as_str()
        ),
        (Some("timed_out"), Some(130), Some("SIGINT")),
        "{r}"
    );
    let r = d.ok(
        "shell_run",
        json!({"shell_id": sh, "command": "trap '' INT; sleep 100", "timeout_s": 0.5, "yield_ms": PATIENCE.as_millis() as u64}),
    );
    assert_eq!(
        (
            r["status"].as_str(),
            r["exit_code"].as_i64(),
            r["ended_by"].as_str()
        ),
        (Some("timed_out"), Some(137), Some("SIGKILL")),
        "{r}"
    );
    run_ok(&d, &sh, "echo usable", 0, "usable\n");
}

#[test]
fn a_command_that_asks_for_input_waits_for_it_and_is_answered() {
    let d = Daemon::start();
    for pty in [false, true] {
        let sh = open(&d, json!({"pty": pty}));
        let r = d.ok(
            "shell_run",
            json!({"shell_id": sh, "command": "read -p 'Name? ' n; echo \"hello $n\"", "yield_ms": PATIENCE.as_millis() as u64}),
        );
        assert_eq!(
            (r["status"].as_str(), r["waiting_for_input"].as_bool()),
            (Some("running"), Some(true)),
            "pty {pty}: {r}"
        );
        d.ok("submit_stdin", json!({"session_id": sh, "data": "bob"}));
        let r = d.ok(
            "shell_wait",
            json!({"shell_id": sh, "timeout_s": PATIENCE.as_secs()}),
        );
        assert_eq!(r["exit_code"], 0, "{r}");
        let out = r["output"].as_str().unwrap_or("").replace('\r', "");
        assert!(out.ends_with("hello bob\n"), "pty {pty}: {r}");
        assert_eq!(
            out.contains("Name? "),
            pty,
            "the prompt shows on a terminal: {r}"
        );
    }
}

#[test]
fn a_shell_survives_a_daemon_sigkill_during_a_command_pipe_and_pty() {
    let d = Daemon::start();
    let shells: Vec<String> = [false, true]
        .iter()
        .map(|&pty| open(&d, json!({"pty": pty})))
        .collect();
    let daemon = d.pid();
    for sh in &shells {
        run_ok(&d, sh, "cd /tmp; kept=yes", 0, "");
        // Ends in the gap, when the daemon is gone.
        let r = d.ok(
            "shell_run",
            json!({"shell_id": sh, "command": format!("echo before; tail --pid={daemon} -f /dev/null; echo after; (exit 9)"), "yield_ms": 200}),
        );
        assert_eq!(r["status"], "running", "{r}");
    }
    d.kill_daemon();
    for sh in &shells {
        let r = d.ok(
            "shell_wait",
            json!({"shell_id": sh, "timeout_s": PATIENCE.as_secs()}),
        );
        assert_eq!(
            (r["status"].as_str(), r["exit_code"].as_i64()),
            (Some("exited"), Some(9)),
            "{r}"
        );
        assert_eq!(
            r["output"].as_str().unwrap_or("").replace('\r', ""),
            "before\nafter\n",
            "{r}"
        );
        assert_eq!(r["cwd"], "/tmp", "{r}");
        let r = run(&d, sh, "echo $kept");
        assert_eq!(
            r["output"].as_str().unwrap_or("").replace('\r', ""),
            "yes\n",
            "{r}"
        );
        assert_eq!(r["command_id"], 3, "{r}");
    }
}

#[test]
fn a_sandboxed_shell_cannot_write_outside_its_workspace() {
    let d = Daemon::start();
    let work = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    let sh = open(
        &d,
        json!({"cwd": work.path(), "sandbox": "workspace-write"}),
    );
    run_ok(&d, &sh, "echo in > inside.txt && cat inside.txt", 0, "in\n");
    let target = outside.path().join("escaped.txt");
    for command in [
        format!("echo x > {}", target.display()),
        format!("cd {} && touch escaped.txt", outside.path().display()),
        format!("bash -c 'echo x > {}'", target.display()),
    ] {
        let r = run(&d, &sh, &command);
        assert_ne!(r["exit_code"], 0, "{command}: {r}");
    }
    assert!(!target.exists(), "a sandboxed command wrote outside");
    assert!(work.path().join("inside.txt").exists());
}

#[test]
fn concurrent_commands_from_five_clients_run_one_by_one_each_with_its_own_output() {
    let d = Daemon::start();
    let sh = open(&d, json!({}));
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..5)
            .map(|client| {
                let (d, sh) = (&d, sh.clone());
                s.spawn(move || {
                    (0..10)
                        .map(|i| {
                            let tag = format!("{client}-{i}");
                            let r = run(
                                d,
                                &sh,
                                &format!("echo start {tag}; sleep 0.0{i}; echo end {tag}"),
                            );
                            assert_eq!(r["output"], format!("start {tag}\nend {tag}\n"), "{r}");
                            r
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("client"))
            .collect()
    });
    let mut ranges: Vec<(u64, u64, u64)> = results
        .iter()
        .map(|r| {
            (
                r["from_cursor"].as_u64().unwrap(),
                r["to_cursor"].as_u64().unwrap(),
                r["command_id"].as_u64().unwrap(),
            )
        })
        .collect();
    ranges.sort();
    for pair in ranges.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "outputs overlap: {pair:?}");
        assert!(pair[0].2 < pair[1].2, "ran out of order: {pair:?}");
    }
    assert_eq!(ranges.len(), 50);
}

#[test]
fn bad_shell_input_is_refused_by_name() {
    let d = Daemon::start();
    let (code, message) = d.err(
        "shell_run",
        json!({"shell_id": "proc_ffffffffffff", "command": "true"}),
    );
    assert_eq!(code, -32001, "{message}");
    let sh = open(&d, json!({}));
    d.refused(
        "shell_run",
        json!({"shell_id": sh, "command": "  "}),
        "command",
    );
    d.refused(
        "shell_run",
        json!({"shell_id": sh, "command": "a\u{0}b"}),
        "command",
    );
    d.refused(
        "shell_run",
        json!({"shell_id": sh, "command": "true", "bogus": 1}),
        "bogus",
    );
    d.refused("shell_open", json!({"name": "no spaces allowed"}), "name");
    let (code, message) = d.err("shell_wait", json!({"shell_id": sh, "command_id": 7}));
    assert_eq!(code, -32001, "{message}");
    // A named shell is reused, and not mistaken for another session.
    let named = open(&d, json!({"name": "dev"}));
    assert_eq!(d.ok("shell_open", json!({"name": "dev"}))["opened"], false);
    assert_eq!(open(&d, json!({"name": "dev"})), named);
    d.ok("shell_close", json!({"shell_id": named}));
    let (code, message) = d.err("shell_run", json!({"shell_id": named, "command": "true"}));
    assert_eq!(code, -32002, "{message}");
    assert_ne!(
        open(&d, json!({"name": "dev"})),
        named,
        "a new shell of that name"
    );
    // A shell whose session is killed is closed at once.
    let killed = open(&d, json!({}));
    d.ok("kill", json!({"session_id": killed}));
    let (code, message) = d.err("shell_run", json!({"shell_id": killed, "command": "true"}));
    assert_eq!(code, -32002, "{message}");
}

#[test]
fn procd_sh_opens_the_shell_once_prints_the_output_and_exits_with_the_code() {
    let d = Daemon::start();
    let work = tempfile::tempdir().expect("tempdir");
    let sh = |command: &str| {
        let out = output_within(
            std::process::Command::new(BIN)
                .args(["sh", "build", "--", command])
                .env("PROCD_HOME", d.home.path())
                .current_dir(work.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("procd sh"),
            "procd sh",
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(
        sh("mkdir -p out && cd out && export MODE=fast"),
        (Some(0), String::new())
    );
    assert_eq!(
        sh("echo $MODE; pwd; (exit 6)"),
        (Some(6), format!("fast\n{}/out\n", work.path().display()))
    );
    assert_eq!(sh("sh -c 'kill -KILL $$'").0, Some(137));
    let listed = d.ok("list", json!({}));
    let shells = listed["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter(|s| s["name"] == "build")
        .count();
    assert_eq!(shells, 1, "one shell named build: {listed}");
}

#[test]
fn procd_attach_on_a_shell_shows_its_commands_and_types_into_them() {
    let d = Daemon::start();
    let sh = open(&d, json!({"pty": true}));
    let attach = format!(
        "PROCD_HOME={} {BIN} attach {sh}; echo attach-exited-$?; sleep 60",
        d.home.path().display()
    );
    let tmux = crate::common::tmux::Tmux::start(&attach, 100, 30);
    tmux.wait_for("Ctrl-] detaches");
    let r = d.ok(
        "shell_run",
        json!({"shell_id": sh, "command": "read -p 'Who? ' w; echo \"hi $w\"", "yield_ms": 0}),
    );
    let n = r["command_id"].clone();
    tmux.wait_for("Who? ");
    // Typed at the attached terminal, answered in the shell.
    tmux.run(&["send-keys", "ann", "Enter"]);
    let r = d.ok(
        "shell_wait",
        json!({"shell_id": sh, "command_id": n, "timeout_s": PATIENCE.as_secs()}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(
        r["output"]
            .as_str()
            .unwrap_or("")
            .replace('\r', "")
            .ends_with("hi ann\n"),
        "{r}"
    );
    tmux.wait_for("hi ann");
    tmux.run(&["send-keys", "C-]"]);
    tmux.wait_for("attach-exited-0");
    run_ok(&d, &sh, "echo $w", 0, "ann\r\n");
}

#[test]
fn an_interrupt_that_comes_before_the_shell_took_the_command_still_ends_it() {
    let d = Daemon::start();
    let (sh, pid) = open_with_pid(&d, json!({}));
    let pid = nix::unistd::Pid::from_raw(pid);
    // The shell cannot take the command up until it is continued.
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("stop");
    let r = d.ok(
        "shell_run",
        json!({"shell_id": sh, "command": "sleep 100", "yield_ms": 0}),
    );
    assert_eq!(r["status"], "running", "{r}");
    let interrupt = std::thread::scope(|s| {
        let asked = s.spawn(|| d.ok("shell_interrupt", json!({"shell_id": sh})));
        // A SIGINT sent now would wait, pending, for an idle shell that
        // ignores it. Give the daemon a second to send one, if it would.
        let status = format!("/proc/{pid}/status");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while std::time::Instant::now() < deadline {
            let text = std::fs::read_to_string(&status).unwrap_or_default();
            if text
                .lines()
                .any(|l| l.starts_with("ShdPnd:") && !l.ends_with("0000000000000000"))
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("continue");
        asked.join().expect("interrupt")
    });
    assert_eq!(
        (
            interrupt["status"].as_str(),
            interrupt["ended_by"].as_str(),
            interrupt["exit_code"].as_i64()
        ),
        (Some("interrupted"), Some("SIGINT"), Some(130)),
        "{interrupt}"
    );
    run_ok(&d, &sh, "echo usable", 0, "usable\n");
}
