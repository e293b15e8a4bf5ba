//! procd elsewhere (docs/remote.md): `--host ssh://` through a real
//! OpenSSH server on a loopback port (tests/common/sshd.rs) and the
//! system's ssh client, `--connect`, `unix://`, and the errors a person
//! meets, each a message and an exit code, never a hang.

use crate::common::sshd::{free_port, LocalUser, Sshd};
use crate::common::tmux::Tmux;
use crate::common::*;
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{out:?}: {e}"))
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn remote_over_ssh_runs_sessions_there_and_rides_through_a_dropped_connection() {
    let Some(sshd) = Sshd::start() else {
        return;
    };
    // The far side's procd is the one under test, with the test's home.
    let spawned = sshd.procd(&["--json", "spawn", "--", "echo one; exit 4"]);
    assert!(spawned.status.success(), "{spawned:?}");
    let id = json_of(&spawned)["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    let waited = sshd.procd(&["wait", &id]);
    assert_eq!(waited.status.code(), Some(4), "{waited:?}");
    let log = sshd.remote_home().join(format!("state/logs/{id}.log"));
    let on_disk = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        on_disk,
        "one\n",
        "the session ran on the far side: {}",
        log.display()
    );

    // `logs -f` through ssh; the ssh under it is killed twice midway: it
    // connects again and goes on from its cursor, every tick once, in order.
    let gate = sshd.remote_home().join("gate");
    let ticker = format!(
        "i=0; until [ -e {} ]; do i=$((i+1)); echo tick $i; sleep 0.02; done",
        gate.display()
    );
    let spawned = sshd.procd(&["--json", "spawn", "--", &ticker]);
    let id = json_of(&spawned)["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    let mut follower = sshd
        .through(Command::new(BIN).args(["--host", &sshd.url(), "logs", "-f", &id]))
        .spawn()
        .expect("logs -f");
    let cli = follower.id() as i32;
    // What it printed so far, line by line, as it prints it.
    let printed = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stdout = follower.stdout.take().expect("stdout");
    let reader = {
        let printed = printed.clone();
        std::thread::spawn(move || {
            for line in
                std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok)
            {
                printed.lock().expect("lines").push(line);
            }
        })
    };
    let count = || printed.lock().expect("lines").len();
    for _ in 0..2 {
        // Only while it follows: new lines keep coming through this ssh.
        let seen = count();
        wait_until("logs -f prints through its connection", || {
            assert!(
                !matches!(follower.try_wait(), Ok(Some(_))),
                "logs -f ended early"
            );
            count() > seen + 5
        });
        let ssh = children_of(cli).into_iter().find(|p| comm(*p) == "ssh");
        let ssh = ssh.expect("the CLI's ssh");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(ssh),
            nix::sys::signal::Signal::SIGKILL,
        );
        wait_until("that ssh is gone", || !alive(ssh) || comm(ssh) != "ssh");
    }
    // And after the second kill it follows again.
    let seen = count();
    wait_until("logs -f prints again", || count() > seen + 5);
    std::fs::write(&gate, "").expect("end the ticker");
    let out = output_within(follower, "logs -f");
    reader.join().expect("reader");
    assert!(out.status.success(), "{out:?}");
    let lines = printed.lock().expect("lines").clone();
    let want: Vec<String> = (1..=lines.len()).map(|i| format!("tick {i}")).collect();
    assert_eq!(lines, want, "{out:?}");
}

#[test]
fn remote_errors_say_what_is_wrong_and_never_hang() {
    let Some(sshd) = Sshd::start() else {
        return;
    };
    let run = |envs: &[(&str, String)], args: &[&str]| {
        let mut cmd = Command::new(BIN);
        sshd.through(cmd.args(args));
        for (k, v) in envs {
            cmd.env(k, v);
        }
        output_within(cmd.spawn().expect("procd"), &args.join(" "))
    };
    let fails = |out: &Output, says: &str| {
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(stderr_of(out).contains(says), "wanted {says:?}: {out:?}");
    };
    let url = sshd.url();
    // It works as configured, through PROCD_HOST too.
    let ok = run(&[("PROCD_HOST", url.clone())], &["ps"]);
    assert!(ok.status.success(), "{ok:?}");
    fails(
        &run(
            &[("PROCD_SSH", "/nonexistent/ssh".into())],
            &["--host", &url, "ps"],
        ),
        "ssh is not installed",
    );
    let nobody = format!("ssh://root@127.0.0.1:{}", free_port());
    fails(
        &run(&[], &["--host", &nobody, "ps"]),
        "cannot reach 127.0.0.1",
    );
    // Another protocol on the far side (a stand-in: no other version of
    // procd exists to run there).
    let other = r#"read _; echo '{"jsonrpc":"2.0","id":0,"result":{"version":"9.0.0"}}'; sleep 1"#;
    fails(
        &run(&[], &["--connect", other, "ps"]),
        "of another protocol",
    );
    // A URL that would be an option to ssh is refused before anything runs.
    let out = run(
        &[],
        &["--host", "ssh://-oProxyCommand=touch%20/tmp/x", "ps"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // Local-only commands refuse --host.
    assert_eq!(run(&[], &["--host", &url, "stop"]).status.code(), Some(2));
    sshd.refuse_logins().expect("authorized_keys");
    fails(&run(&[], &["--host", &url, "ps"]), "refused the login");
}

#[test]
fn remote_without_procd_on_the_far_path_says_so() {
    let Some(sshd) = Sshd::start_with(false) else {
        return;
    };
    let out = sshd.procd(&["ps"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = stderr_of(&out);
    assert!(said.contains("procd is not on 127.0.0.1's PATH"), "{out:?}");
    assert!(
        said.contains("procd"),
        "the far side's own message: {out:?}"
    );
}

#[test]
fn remote_unix_socket_and_connect_reach_a_daemon_like_the_socket_does() {
    let d = Daemon::start();
    let socket = format!("unix://{}", d.socket().display());
    let id = d.spawn("echo via-unix");
    // Through a unix:// URL, and through --connect to `dial-stdio` (the
    // far end), the same answer.
    let dial = format!("PROCD_HOME={} {BIN} dial-stdio", d.home.path().display());
    for via in [["--host", &socket], ["--connect", &dial]] {
        let out = Command::new(BIN)
            .args(via)
            .args(["--json", "wait", &id])
            .output()
            .expect("procd");
        assert!(out.status.success(), "{via:?}: {out:?}");
        assert_eq!(json_of(&out)["output"], "via-unix\n", "{via:?}");
    }

    // Thousands of requests at once, and megabytes of answers coming back
    // while they are still being sent: every one is answered, in order.
    // Through pipes (the daemon takes them over) and through a socket (a
    // stdio that is not a pipe: dial-stdio relays it), the same.
    for stdio in ["pipes", "a socket"] {
        pipelined_polls(&d, &id, stdio == "pipes");
    }
}

/// 5000 polls sent at once through `procd dial-stdio`, and megabytes of
/// answers coming back while they are still being sent: every one is
/// answered, in order (a relay that blocks on either side deadlocks).
fn pipelined_polls(d: &Daemon, id: &str, pipes: bool) {
    use std::io::{Read, Write};
    let n = 5000;
    let requests: String = (0..n)
        .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"poll\",\"params\":{{\"session_id\":\"{id}\"}}}}\n"))
        .collect();
    let mut cmd = Command::new(BIN);
    cmd.arg("dial-stdio")
        .env("PROCD_HOME", d.home.path())
        .stderr(Stdio::piped());
    let (mut to_dial, mut from_dial): (Box<dyn Write + Send>, Box<dyn Read + Send>);
    let mut dial = if pipes {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("dial-stdio");
        to_dial = Box::new(child.stdin.take().expect("stdin"));
        from_dial = Box::new(child.stdout.take().expect("stdout"));
        child
    } else {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let theirs_out = theirs.try_clone().expect("clone");
        let child = cmd
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs_out)))
            .spawn()
            .expect("dial-stdio");
        from_dial = Box::new(ours.try_clone().expect("clone"));
        to_dial = Box::new(HalfCloser(ours));
        child
    };
    // The Command still holds the socket's far end: only dial-stdio may.
    drop(cmd);
    let writer = std::thread::spawn(move || {
        to_dial.write_all(requests.as_bytes()).expect("send");
    });
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        from_dial.read_to_string(&mut text).expect("answers");
        text
    });
    writer.join().expect("writer");
    let text = reader.join().expect("reader");
    wait_until("dial-stdio exits", || {
        matches!(dial.try_wait(), Ok(Some(_)))
    });
    let answers: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("an answer"))
        .collect();
    assert_eq!(
        answers.len(),
        n,
        "through {}",
        if pipes { "pipes" } else { "a socket" }
    );
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a["id"], i, "{a}");
        assert_eq!(a["result"]["session_id"], id, "{a}");
    }
}

/// A socket's write side that half-closes when dropped (as a pipe's
/// writer closes): dial-stdio sees its stdin end.
struct HalfCloser(std::os::unix::net::UnixStream);

impl std::io::Write for HalfCloser {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl Drop for HalfCloser {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Write);
    }
}

#[test]
fn remote_mcp_keeps_one_connection_and_makes_it_again_when_it_drops() {
    let Some(sshd) = Sshd::start() else {
        return;
    };
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/mcp_remote_client.py"
    );
    let python = mcp_python();
    let client = sshd
        .through(Command::new(python).args([script, BIN, &sshd.url()]))
        .spawn()
        .expect("the Python MCP client");
    let out = output_within_for(client, "the MCP client", Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr_of(&out));
    let seen = json_of(&out);
    assert_eq!(seen["first"]["result"]["output"], "one-remote\n", "{seen}");
    assert_eq!(seen["ssh_killed"], 1, "one connection: {seen}");
    assert_eq!(seen["second"]["result"]["output"], "two-remote\n", "{seen}");
    assert!(seen["retries"].as_u64() <= Some(1), "{seen}");
    assert_eq!(seen["ssh_after"], 1, "made again, once: {seen}");
    // Both ran on the far side.
    let logs = std::fs::read_dir(sshd.remote_home().join("state/logs"))
        .expect("the far side's logs")
        .count();
    assert!(logs >= 2, "{logs} logs");
}

#[test]
fn a_first_byte_that_is_no_handover_starts_an_ordinary_connection() {
    use std::io::{BufRead, Write};
    let d = Daemon::start();
    // A NUL alone, then a NUL carrying two descriptors that are not pipes:
    // each is the first byte of a bad request line, answered as one, and
    // the connection goes on.
    let file = std::fs::File::open("/dev/null").expect("/dev/null");
    let dir = std::fs::File::open("/").expect("/");
    for with_fds in [false, true] {
        let s = std::os::unix::net::UnixStream::connect(d.socket()).expect("connect");
        let fds = [
            std::os::fd::AsFd::as_fd(&file),
            std::os::fd::AsFd::as_fd(&dir),
        ];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut ancillary = rustix::net::SendAncillaryBuffer::new(&mut space);
        if with_fds {
            assert!(ancillary.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
        }
        rustix::net::sendmsg(
            &s,
            &[std::io::IoSlice::new(b"\0")],
            &mut ancillary,
            rustix::net::SendFlags::empty(),
        )
        .expect("sendmsg");
        let mut w = s.try_clone().expect("clone");
        w.write_all(b"\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"status\"}\n")
            .expect("write");
        let mut lines = std::io::BufReader::new(s).lines();
        let bad: Value =
            serde_json::from_str(&lines.next().expect("an answer").expect("read")).expect("JSON");
        assert_eq!(bad["error"]["code"], -32700, "{bad}");
        let ok: Value =
            serde_json::from_str(&lines.next().expect("an answer").expect("read")).expect("JSON");
        assert_eq!(ok["id"], 7, "{ok}");
        assert!(ok["result"]["pid"].is_number(), "{ok}");
    }
}

/// The environment variable that says the machine cannot run a container.
const NO_CONTAINER: &str = "PROCD_TEST_NO_CONTAINER";

/// A real container (podman with runc, docs/remote.md): a minimal Debian
/// root filesystem (tests/container-rootfs.sh, overlaid so every run
/// starts clean), the procd under test bind-mounted in, no network.
/// Removed (`podman rm -f`) when dropped.
struct Container(String);

impl Container {
    fn start() -> Option<Container> {
        if machine_lacks(NO_CONTAINER, "podman with runc") {
            return None;
        }
        let rootfs = prepared(
            "container-rootfs.sh",
            &format!("the container's root filesystem (or set {NO_CONTAINER}=1)"),
        );
        let name = format!("procd-test-{}", std::process::id());
        let out = Command::new("podman")
            .args(["--runtime", "runc", "run", "-d", "--name", &name, "--init"])
            .args(["--network", "none"])
            .args([
                "--ulimit",
                "nofile=4096:4096",
                "--ulimit",
                "nproc=4096:4096",
            ])
            .args(["-v", &format!("{BIN}:/usr/local/bin/procd:ro")])
            .args(["--rootfs", &format!("{rootfs}:O"), "sleep", "infinity"])
            .output()
            .expect("podman (apt-get install podman runc, as tests/system-deps.sh does)");
        assert!(out.status.success(), "podman run: {out:?}");
        Some(Container(name))
    }

    /// What `--connect` runs to reach the procd inside.
    fn connect(&self) -> String {
        format!("podman --runtime runc exec -i {} procd dial-stdio", self.0)
    }

    /// Runs `sh -c SCRIPT` inside.
    fn sh(&self, script: &str) -> Output {
        let child = Command::new("podman")
            .args(["--runtime", "runc", "exec", &self.0, "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("podman exec");
        output_within(child, "podman exec")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "0", &self.0])
            .output();
    }
}

#[test]
fn remote_connect_into_a_real_container_runs_the_session_there() {
    let Some(ctr) = Container::start() else {
        return;
    };
    let connect = ctr.connect();
    let procd = |args: &[&str]| {
        let home = short_tempdir();
        let child = Command::new(BIN)
            .args(["--connect", &connect])
            .args(args)
            .env("PROCD_HOME", home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("procd");
        output_within(child, &format!("procd --connect … {}", args.join(" ")))
    };
    let spawn = |command: &str| {
        let out = procd(&["--json", "spawn", "--", command]);
        assert!(out.status.success(), "{out:?}");
        json_of(&out)
    };
    let ticker = spawn("for i in 1 2 3; do echo t$i; sleep 0.2; done");
    let id = ticker["session_id"].as_str().expect("id").to_string();
    // logs -f follows it, through the container's stdio, to its end.
    let out = procd(&["logs", "-f", &id]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "t1\nt2\nt3\n");
    // The container's daemon ran it: its log is in the container.
    let inside = ctr.sh(&format!(
        "ls /tmp/procd-0/*/logs/{id}.log /root/.local/state/procd/logs/{id}.log 2>/dev/null || true"
    ));
    assert!(
        String::from_utf8_lossy(&inside.stdout).contains(&format!("{id}.log")),
        "{inside:?}"
    );
    // kill ends one for real, inside (its pid is of the container's
    // pid namespace).
    let sleeper = spawn("exec sleep 300");
    let (id, pid) = (
        sleeper["session_id"].as_str().expect("id").to_string(),
        sleeper["pid"].as_i64().expect("pid"),
    );
    let alive = ctr.sh(&format!("cat /proc/{pid}/comm"));
    assert_eq!(
        String::from_utf8_lossy(&alive.stdout).trim(),
        "sleep",
        "{alive:?}"
    );
    let out = procd(&["kill", &id]);
    assert!(out.status.success(), "{out:?}");
    let waited = procd(&["--json", "wait", &id]);
    assert_eq!(json_of(&waited)["status"], "exited", "{waited:?}");
    let gone = ctr.sh(&format!(
        "kill -0 {pid} 2>/dev/null && echo alive || echo gone"
    ));
    assert_eq!(
        String::from_utf8_lossy(&gone.stdout).trim(),
        "gone",
        "{gone:?}"
    );
}

#[test]
fn remote_as_another_user_runs_that_users_daemon() {
    let user = LocalUser::create();
    let Some(sshd) = Sshd::start_as(true, &user.name) else {
        return;
    };
    let out = sshd.procd(&["rpc", "spawn", r#"{"command":"id -u","yield_ms":10000}"#]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        json_of(&out)["output"],
        format!("{}\n", user.uid),
        "{out:?}"
    );
    // Its daemon is that user's, and so are its files.
    let out = sshd.procd(&["rpc", "status"]);
    let pid = json_of(&out)["pid"].as_i64().expect("pid");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next().map(String::from));
    assert_eq!(uid, Some(user.uid.to_string()), "{status}");
    use std::os::unix::fs::MetadataExt;
    let state = std::fs::metadata(sshd.remote_home().join("state")).expect("state dir");
    assert_eq!(state.uid(), user.uid);
}

#[test]
fn remote_attach_in_a_real_terminal() {
    let Some(sshd) = Sshd::start() else {
        return;
    };
    let out = sshd.procd(&[
        "--json",
        "spawn",
        "--pty",
        "--",
        "while read -r line; do eval \"$line\"; done",
    ]);
    assert!(out.status.success(), "{out:?}");
    let id = json_of(&out)["session_id"]
        .as_str()
        .expect("id")
        .to_string();
    // tmux gives `procd --host … attach` a real terminal.
    let attach = format!(
        "env PROCD_SSH='{}' PROCD_HOME={} {BIN} --host {} attach {id}; echo attach-exited-$?; sleep 60",
        sshd.ssh_command(),
        sshd.local_home().display(),
        sshd.url()
    );
    let tmux = Tmux::start(&attach, 100, 30);
    tmux.wait_for("Ctrl-] detaches");
    tmux.run(&["send-keys", "echo marker-$((40+2))", "Enter"]);
    tmux.wait_for("marker-42");
    tmux.run(&["send-keys", "stty size", "Enter"]);
    tmux.wait_for("30 100");
    // Ctrl-] detaches; the far session keeps running.
    tmux.run(&["send-keys", "C-]"]);
    tmux.wait_for("attach-exited-0");
    let polled = sshd.procd(&["--json", "poll", &id]);
    assert_eq!(json_of(&polled)["status"], "running", "{polled:?}");
    sshd.procd(&["kill", &id]);
}
