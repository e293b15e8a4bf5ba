//! docs/operations.md against a real daemon: the shell snapshot. What the login
//! scripts set up (exports, functions, aliases, PATH, options) reaches
//! commands without the scripts running per spawn; credentials they export
//! do not; only a command that may reach its functions and aliases
//! sources them; a change is picked up by the next spawn; a capture that
//! fails falls back to the login shell and says so.

use crate::common::*;
use serde_json::json;
use std::path::Path;

/// A home whose login shell reads ~/.bashrc (as a stock ~/.profile does),
/// and whose ~/.bashrc counts its runs in ~/rc-runs.
fn home_with_rc(rc: &str) -> tempfile::TempDir {
    let home = short_tempdir();
    std::fs::write(home.path().join(".bash_profile"), ". ~/.bashrc\n").unwrap();
    write_rc(home.path(), rc);
    std::fs::create_dir(home.path().join("bin")).unwrap();
    let prog = home.path().join("bin/rc-prog");
    std::fs::write(&prog, "#!/bin/sh\necho from-rc-path\n").unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    home
}

fn write_rc(home: &Path, rc: &str) {
    std::fs::write(
        home.join(".bashrc"),
        format!("echo run >> ~/rc-runs\n{rc}\n"),
    )
    .unwrap();
}

fn rc_runs(home: &Path) -> usize {
    std::fs::read_to_string(home.join("rc-runs"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn output_of(d: &Daemon, command: &str, extra: serde_json::Value) -> String {
    let mut params = json!({"command": command, "yield_ms": 20000});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let r = d.ok("spawn", params);
    assert_eq!(r["status"], "exited", "{r}");
    r["output"].as_str().unwrap().to_string()
}

const RC: &str = r#"export PATH="$HOME/bin:$PATH"
export PLAIN=plain-value
export OPENAI_API_KEY=sk-from-rc-1234567890
export GITHUB_TOKEN=ghp_fromrc1234567890
alias greet='echo hello-from-alias'
hi() { echo "hi from function $1"; }
shopt -s extglob"#;

#[test]
fn the_login_scripts_setup_reaches_commands_without_running_per_spawn() {
    let home = home_with_rc(RC);
    let d = Daemon::in_home(home, "");
    let out = output_of(
        &d,
        "greet; hi there; rc-prog; echo \"plain=$PLAIN\"; shopt extglob",
        json!({}),
    );
    assert_eq!(
        out,
        "hello-from-alias\nhi from function there\nfrom-rc-path\nplain=plain-value\nextglob        \ton\n"
    );
    // Credentials the scripts export never reach a child.
    let env = output_of(&d, "env", json!({}));
    assert!(env.contains("PLAIN=plain-value"), "{env}");
    assert!(
        !env.contains("OPENAI_API_KEY") && !env.contains("GITHUB_TOKEN"),
        "{env}"
    );
    assert!(!env.contains("PROCD_KEEP"), "{env}");
    // The same in a terminal.
    let r = d.ok(
        "spawn",
        json!({"command": "greet; hi pty", "pty": true, "yield_ms": 20000}),
    );
    assert_eq!(r["status"], "exited", "{r}");
    assert!(
        r["output"]
            .as_str()
            .unwrap()
            .contains("hello-from-alias\r\nhi from function pty"),
        "{r}"
    );
    // Five spawns, one run of the scripts: the capture.
    for _ in 0..2 {
        output_of(&d, "true", json!({}));
    }
    assert_eq!(
        rc_runs(d.home.path()),
        1,
        "the rc ran once, for the snapshot"
    );
    let snapshot = d.state_dir().join("shell-snapshot.sh");
    let meta = std::fs::metadata(&snapshot).expect("the snapshot file");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    let text = std::fs::read_to_string(&snapshot).unwrap();
    assert!(
        !text.contains("sk-from-rc") && !text.contains("ghp_fromrc"),
        "{text}"
    );
    // The variables, for a person to read: 0600, no credentials either.
    let listed = d.state_dir().join("shell-snapshot.env");
    let meta = std::fs::metadata(&listed).expect("the snapshot's variables");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    let vars = String::from_utf8_lossy(&std::fs::read(&listed).unwrap()).into_owned();
    assert!(
        vars.split('\0').any(|v| v == "PLAIN=plain-value"),
        "{vars:?}"
    );
    assert!(
        !vars.contains("sk-from-rc") && !vars.contains("ghp_fromrc"),
        "{vars:?}"
    );
}

/// The root's command line (its argv, NUL-separated).
fn cmdline(pid: &serde_json::Value) -> String {
    let pid = pid.as_i64().expect("pid");
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline"))
        .into_owned()
}

/// A session's shell spends nothing on what it need not run: scripts that
/// only export variables give them at exec, and the snapshot is not
/// sourced; one alias makes it sourced. A variable bash reads as it starts
/// (BASH_ENV) is still exported after the start, as the scripts did.
#[test]
fn a_snapshot_with_nothing_to_run_is_not_sourced() {
    let home = home_with_rc("export PLAIN=plain-value");
    std::fs::write(home.path().join("benv"), "echo benv-ran\n").unwrap();
    let d = Daemon::in_home(home, "");
    let output = |r: &serde_json::Value| {
        let id = r["session_id"].clone();
        wait_until("the output", || {
            d.ok("poll", json!({"session_id": id}))["output_preview"]
                .as_str()
                .is_some_and(|o| o.contains("end"))
        });
        let out = d.ok("poll", json!({"session_id": id}))["output_preview"].clone();
        d.ok("kill", json!({"session_id": id}));
        out
    };
    let r = d.ok(
        "spawn",
        json!({"command": "echo \"plain=$PLAIN\"; echo end; sleep 30"}),
    );
    let argv = cmdline(&r["pid"]);
    assert!(!argv.contains("shell-snapshot"), "sourced: {argv:?}");
    assert_eq!(output(&r), "plain=plain-value\nend\n");

    write_rc(d.home.path(), "export BASH_ENV=~/benv");
    let r = d.ok(
        "spawn",
        json!({"command": "echo \"${BASH_ENV##*/}\"; echo end; sleep 30"}),
    );
    assert!(cmdline(&r["pid"]).contains("shell-snapshot.sh"));
    assert_eq!(output(&r), "benv\nend\n", "BASH_ENV ran at the start");

    write_rc(d.home.path(), "alias greet='echo hello-from-alias'");
    let r = d.ok("spawn", json!({"command": "greet; echo end; sleep 30"}));
    let argv = cmdline(&r["pid"]);
    assert!(argv.contains("shell-snapshot.sh"), "not sourced: {argv:?}");
    assert_eq!(output(&r), "hello-from-alias\nend\n");
}

/// Functions and aliases cost a session's shell their parse, so only a
/// command that may reach one sources them: one that names one, one whose
/// words the text does not show (`$`), and a shell session, whose later
/// commands may name any. A command that names none runs without them,
/// with the scripts' variables all the same.
#[test]
fn only_a_command_that_may_reach_a_function_or_alias_sources_them() {
    let home = home_with_rc(
        "export PLAIN=plain-value\nalias greet='echo hello-from-alias'\nhi() { echo \"hi $1\"; }",
    );
    let d = Daemon::in_home(home, "");
    let sourced = |command: &str| {
        let r = d.ok("spawn", json!({"command": format!("{command}; sleep 30")}));
        let argv = cmdline(&r["pid"]);
        d.ok("kill", json!({"session_id": r["session_id"]}));
        argv.contains("shell-snapshot.sh")
    };
    assert!(!sourced("echo end"), "a command that names neither");
    assert!(sourced("hi there"), "a command that calls the function");
    assert!(sourced("echo x | greet"), "a command that uses the alias");
    assert!(sourced("echo $PLAIN"), "an expansion may make any word");
    assert_eq!(
        output_of(
            &d,
            "f",
            json!({"env": {"BASH_FUNC_f%%": "() { hi exported; }"}})
        ),
        "hi exported\n",
        "an exported function may call any"
    );
    // Either way the command sees what it would have seen.
    assert_eq!(
        output_of(&d, "echo plain=$PLAIN", json!({})),
        "plain=plain-value\n"
    );
    assert_eq!(
        output_of(&d, "printenv PLAIN; hi there; greet", json!({})),
        "plain-value\nhi there\nhello-from-alias\n"
    );
    assert_eq!(
        output_of(&d, "printenv PLAIN; type -t hi greet", json!({})),
        "plain-value\nfunction\nalias\n",
        "naming them (here to `type`) defines them"
    );
    // A shell session's later commands may name any of them.
    let sh = d.ok("shell_open", json!({}))["shell_id"].clone();
    let r = d.ok(
        "shell_run",
        json!({"shell_id": sh, "command": "hi shell; greet", "yield_ms": 20000}),
    );
    assert_eq!(r["output"], "hi shell\nhello-from-alias\n", "{r}");
    d.ok("shell_close", json!({"shell_id": sh}));
}

#[test]
fn the_callers_environment_and_procds_own_variables_win_over_the_scripts() {
    let home = home_with_rc("export PLAIN=from-rc\nexport PYTHONUNBUFFERED=0\nexport KEEP_ME=rc");
    let d = Daemon::in_home(home, "");
    let out = output_of(
        &d,
        "echo $PLAIN $PYTHONUNBUFFERED $KEEP_ME; echo ${PROCD_SESSION_ID:0:5}",
        json!({"env": {"PLAIN": "from-caller"}}),
    );
    assert_eq!(out, "from-caller 1 rc\nproc_\n");
}

#[test]
fn a_changed_script_is_picked_up_by_the_next_spawn() {
    let home = home_with_rc("export STAGE=one");
    let d = Daemon::in_home(home, "");
    assert_eq!(output_of(&d, "echo $STAGE", json!({})), "one\n");
    write_rc(
        d.home.path(),
        "export STAGE=two\nalias stage='echo alias-two'",
    );
    assert_eq!(
        output_of(&d, "echo $STAGE; stage", json!({})),
        "two\nalias-two\n"
    );
    // A script that appears counts as a change too.
    std::fs::write(d.home.path().join(".bash_login"), "export IGNORED=1\n").unwrap();
    std::fs::write(
        d.home.path().join(".bash_profile"),
        ". ~/.bashrc\nexport FROM_PROFILE=yes\n",
    )
    .unwrap();
    assert_eq!(output_of(&d, "echo $FROM_PROFILE", json!({})), "yes\n");
    assert_eq!(rc_runs(d.home.path()), 3);
}

/// A ~/.bashrc kept elsewhere (a symlink, as dotfile managers make) is
/// followed: editing its target is picked up by the next spawn, and so is
/// pointing the link at another file and editing that one.
#[test]
fn a_symlinked_script_is_followed_to_its_target() {
    let home = home_with_rc("");
    let dotfiles = home.path().join("dotfiles");
    std::fs::create_dir(&dotfiles).unwrap();
    std::fs::write(dotfiles.join("one"), "export STAGE=one\n").unwrap();
    std::fs::remove_file(home.path().join(".bashrc")).unwrap();
    std::os::unix::fs::symlink(dotfiles.join("one"), home.path().join(".bashrc")).unwrap();
    let d = Daemon::in_home(home, "");
    // Twice each time: the second spawn finds nothing changed (a capture's
    // own write looks like a change once), so the edit after it is the
    // only change the next spawn can notice.
    let stage = || {
        let first = output_of(&d, "echo $STAGE", json!({}));
        assert_eq!(output_of(&d, "echo $STAGE", json!({})), first);
        first
    };
    assert_eq!(stage(), "one\n");
    std::fs::write(dotfiles.join("one"), "export STAGE=edited\n").unwrap();
    assert_eq!(stage(), "edited\n");
    std::fs::write(dotfiles.join("two"), "export STAGE=two\n").unwrap();
    let link = d.home.path().join(".bashrc");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(dotfiles.join("two"), &link).unwrap();
    assert_eq!(stage(), "two\n");
    std::fs::write(dotfiles.join("two"), "export STAGE=two-edited\n").unwrap();
    assert_eq!(stage(), "two-edited\n");
}

#[test]
fn exit_codes_and_the_compound_rewrite_still_behave() {
    let home = home_with_rc("alias greet='echo hi'");
    let d = Daemon::in_home(home, "");
    let r = d.ok(
        "spawn",
        json!({"command": "greet; exit 7", "yield_ms": 20000}),
    );
    assert_eq!(
        (r["exit_code"].clone(), r["output"].clone()),
        (json!(7), json!("hi\n"))
    );
    let dir = tempfile::tempdir().unwrap();
    let r = d.ok(
        "spawn",
        json!({
            "command": format!("cd {} && sleep 30 &>/dev/null &", dir.path().display()),
            "yield_ms": 20000,
        }),
    );
    // The rewrite puts the background job in braces: the shell returns at
    // once (the job is the session's, and ends with it).
    assert_eq!(r["status"], "exited", "{r}");
    assert_eq!(r["exit_code"], 0);
    d.ok("kill", json!({"session_id": r["session_id"]}));
}

#[test]
fn without_the_snapshot_the_scripts_run_for_every_spawn() {
    let home = home_with_rc("export PLAIN=plain-value");
    let d = Daemon::in_home(home, "shell_snapshot = false");
    for _ in 0..3 {
        assert_eq!(output_of(&d, "echo $PLAIN", json!({})), "plain-value\n");
    }
    assert_eq!(rc_runs(d.home.path()), 3);
    assert!(!d.state_dir().join("shell-snapshot.sh").exists());
}

#[test]
fn a_capture_that_hangs_falls_back_to_the_login_shell_and_says_so() {
    // The scripts hang only while captured (PROCD_SHELL_SNAPSHOT is set
    // then): the capture times out, commands start with `bash -lic`.
    let mut strays = Strays::default();
    let home = home_with_rc(
        "export PLAIN=plain-value\nif [ -n \"$PROCD_SHELL_SNAPSHOT\" ]; then sleep 31.5; fi",
    );
    let d = Daemon::in_home(home, "shell_snapshot_timeout_s = 1");
    assert_eq!(output_of(&d, "echo $PLAIN", json!({})), "plain-value\n");
    let status = d.ok("status", json!({}));
    let faults = status["faults"].to_string();
    assert!(
        faults.contains("shell snapshot") && faults.contains("did not finish"),
        "{status}"
    );
    // The hung capture was ended with its group.
    wait_until("the capture's sleep is gone", || {
        strays.find(&["sleep", "31.5"]).is_empty()
    });
    // Not retried per spawn while the scripts stay the same.
    assert_eq!(output_of(&d, "echo $PLAIN", json!({})), "plain-value\n");
    assert_eq!(
        rc_runs(d.home.path()),
        3,
        "one capture, then two login shells"
    );
    // Fixed scripts: the next spawn makes the snapshot, the fault clears.
    write_rc(d.home.path(), "export PLAIN=fixed");
    assert_eq!(output_of(&d, "echo $PLAIN", json!({})), "fixed\n");
    let status = d.ok("status", json!({}));
    assert!(
        !status["faults"].to_string().contains("shell snapshot"),
        "{status}"
    );
}
