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
        // The envPolicy steps' processes ("env-N") are another server's.
        .filter(|p| {
            p["meta"]["codex_process_id"]
                .as_str()
                .is_some_and(|id| !id.starts_with("env-"))
        })
        .collect();
    assert_eq!(ours.len(), 7, "{listed:#}");
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
    let d = Daemon::start();
    let work = short_tempdir();
    let mut codex = Codex::start(&d, &[]);
    let cwd = file_uri(work.path());
    let started = codex.call(
        json!(1),
        "process/start",
        json!({"processId": "bg", "argv": ["/bin/sh", "-c", "sleep 300 & sleep 300; wait"],
            "cwd": cwd, "env": {}, "tty": false}),
    );
    assert_eq!(started["result"]["processId"], "bg", "{started}");
    let listed = d.ok("list", json!({}));
    let session = listed["processes"][0]["session_id"]
        .as_str()
        .expect("a session")
        .to_string();
    // The markers survive `env -i`: procd finds the tree by them.
    wait_until("both sleepers run", || session_pids(&session).len() >= 3);
    let root = listed["processes"][0]["pid"].as_i64().expect("pid") as i32;
    codex.end();
    let exit = d.wait_exit(&session);
    assert_eq!(exit["completion_reason"], "killed", "{exit}");
    wait_until("the tree is gone", || session_pids(&session).is_empty());
    assert!(!alive(root), "root {root} still runs");
}

const MOCK_MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/codex_mock_model.py"
);

/// The stand-in for Codex's model (tests/codex_mock_model.py): it asks
/// for one shell call of `command`, then says "done". Killed when dropped.
struct MockModel {
    child: std::process::Child,
    port: u16,
    log: std::path::PathBuf,
}

impl MockModel {
    fn start(command: &str, dir: &Path) -> MockModel {
        use std::io::BufRead;
        let log = dir.join("requests.jsonl");
        let mut child = Command::new("python3")
            .arg(MOCK_MODEL)
            .arg(command)
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the mock model");
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        out.read_line(&mut line).expect("its port");
        let port = line.trim().parse().unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the mock model printed {line:?}, not a port")
        });
        MockModel { child, port, log }
    }

    /// What Codex sent back as the tool's result.
    fn tool_outputs(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .flat_map(|r| r["body"]["input"].as_array().cloned().unwrap_or_default())
            .filter(|i| i["type"] == "function_call_output")
            .map(|i| i["output"].to_string())
            .collect()
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `codex exec --json PROMPT` in `work`, with a `CODEX_HOME` whose model is
/// `model` and whose only environment is `program args…` (docs/codex.md's
/// two files). Returns its JSONL events.
fn codex_exec(codex: &str, model: &MockModel, work: &Path, program: &str, args: &[&str]) -> String {
    codex_exec_in(codex, model, work, program, args, "danger-full-access")
}

/// `codex_exec` with another `sandbox_mode`.
fn codex_exec_in(
    codex: &str,
    model: &MockModel,
    work: &Path,
    program: &str,
    args: &[&str],
    sandbox_mode: &str,
) -> String {
    let codex_home = short_tempdir();
    let config = format!(
        r#"model = "mock-model"
model_provider = "mock"
sandbox_mode = "{sandbox_mode}"
approval_policy = "never"

[model_providers.mock]
name = "mock"
base_url = "http://127.0.0.1:{}/v1"
wire_api = "responses"
env_key = "MOCK_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false

[analytics]
enabled = false

[otel]
metrics_exporter = "none"
"#,
        model.port
    );
    let environments = format!(
        "default = \"procd\"\ninclude_local = false\n\n[[environments]]\nid = \"procd\"\nprogram = {}\nargs = {}\n",
        json!(program),
        json!(args)
    );
    std::fs::write(codex_home.path().join("config.toml"), config).expect("config.toml");
    std::fs::write(codex_home.path().join("environments.toml"), environments)
        .expect("environments.toml");
    let child = Command::new(codex)
        .args(["exec", "--json", "--skip-git-repo-check", "run it"])
        .current_dir(work)
        .env("CODEX_HOME", codex_home.path())
        .env("MOCK_API_KEY", "not-a-key")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("codex exec");
    let out = output_within_for(child, "codex exec", std::time::Duration::from_secs(120));
    assert!(
        out.status.success(),
        "codex exec: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The real Codex CLI, with a mock model and procd as its only
/// environment: its shell call runs as a procd session, the output goes
/// back to the model, and a daemon the command forks is gone once Codex
/// is.
#[test]
fn codex_exec_runs_its_commands_as_procd_sessions() {
    let codex = prepared("codex-cli.sh", "Codex's CLI");
    let d = Daemon::start();
    let work = short_tempdir();
    let model = MockModel::start(
        "echo ran-as-$PROCD_SESSION_ID; setsid sleep 300 >/dev/null 2>&1 & echo forked=$!",
        work.path(),
    );
    let home = d.home.path().to_str().expect("utf-8");
    let events = codex_exec(
        &codex,
        &model,
        work.path(),
        BIN,
        &["--home", home, "exec-server"],
    );

    let outputs = model.tool_outputs();
    assert_eq!(outputs.len(), 1, "one tool result: {outputs:?}\n{events}");
    let session = outputs[0]
        .split("ran-as-")
        .nth(1)
        .and_then(|rest| rest.get(..17))
        .unwrap_or_else(|| panic!("no session id in the tool result: {outputs:?}"));
    assert!(session.starts_with("proc_"), "{outputs:?}");
    let forked: i32 = outputs[0]
        .split("forked=")
        .nth(1)
        .map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no forked pid in the tool result: {outputs:?}"));

    let ps = d.cli(&["ps"]);
    let ps_text = String::from_utf8_lossy(&ps.stdout);
    assert!(
        ps_text.contains(session),
        "{session} not in procd ps:\n{ps_text}"
    );
    let polled = d.ok("poll", json!({"session_id": session}));
    assert!(polled["meta"]["codex_process_id"].is_string(), "{polled}");

    // Codex has exited: its exec-server released its lease, and what the
    // command left behind goes with it.
    wait_until("the forked daemon is gone", || !alive(forked));
    wait_until("the session's tree is gone", || {
        session_pids(session).is_empty()
    });
}

/// With procd's exec-server unable to start, Codex does not fall back to
/// running the command itself (`include_local = false`).
#[test]
fn codex_exec_runs_nothing_locally_when_procd_cannot_start() {
    let codex = prepared("codex-cli.sh", "Codex's CLI");
    let work = short_tempdir();
    let marker = work.path().join("ran-locally");
    let model = MockModel::start(&format!("touch {}", marker.display()), work.path());
    let events = codex_exec(
        &codex,
        &model,
        work.path(),
        BIN,
        &["--home", "/dev/null/procd", "exec-server"],
    );
    let outputs = model.tool_outputs();
    assert_eq!(outputs.len(), 1, "one tool result: {outputs:?}\n{events}");
    assert!(
        outputs[0].contains("No usable execution environment"),
        "{outputs:?}"
    );
    assert!(!marker.exists(), "the command ran locally");
    assert!(!events.contains("\"command_execution\""), "{events}");
}

/// Codex's workspace-write intent, given by procd's kernel sandbox: the
/// command writes in the workspace, and the kernel refuses it a file
/// outside (not under /tmp, which workspace-write leaves writable).
#[test]
fn a_workspace_write_turn_cannot_write_outside_the_workspace() {
    let codex = prepared("codex-cli.sh", "Codex's CLI");
    // Not under /tmp: a sandbox may not make procd's own state writable.
    let outside_tmp = || {
        tempfile::Builder::new()
            .prefix("pd")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir")
    };
    let d = Daemon::in_home(outside_tmp(), "");
    let elsewhere = outside_tmp();
    let outside = elsewhere.path().join("outside");
    let work = short_tempdir();
    let model = MockModel::start(
        &format!(
            "touch inside && echo wrote-inside; touch {} || echo refused-outside",
            outside.display()
        ),
        work.path(),
    );
    let home = d.home.path().to_str().expect("utf-8");
    let events = codex_exec_in(
        &codex,
        &model,
        work.path(),
        BIN,
        &["--home", home, "exec-server"],
        "workspace-write",
    );
    let outputs = model.tool_outputs();
    assert_eq!(outputs.len(), 1, "one tool result: {outputs:?}\n{events}");
    let said = &outputs[0];
    assert!(
        said.contains("wrote-inside") && said.contains("refused-outside"),
        "{said}"
    );
    assert!(said.contains("Permission denied"), "{said}");
    assert!(work.path().join("inside").exists(), "the workspace write");
    assert!(!outside.exists(), "written outside the workspace");
    let listed = d.ok("list", json!({}));
    let session = &listed["processes"][0];
    let root = work.path().to_str().expect("utf-8");
    assert!(
        session["sandbox"]["writable"]
            .as_array()
            .is_some_and(|w| w.iter().any(|p| p == root)),
        "{session}"
    );
    assert_eq!(session["sandbox"]["network"], "none", "{session}");
}

/// Codex's workspace-write intent as it sends it (Codex 0.171.0), for
/// the workspace `root`.
fn workspace_write(root: &Path) -> Value {
    let special = |kind: &str, access: &str| json!({"path": {"type": "special", "value": {"kind": kind}}, "access": access});
    let mut git = special("project_roots", "read");
    git["path"]["value"]["subpath"] = json!(".git");
    git["missing_path_behavior"] = json!("skip");
    let uri = file_uri(root);
    json!({
        "permissions": {"type": "managed", "file_system": {"type": "restricted", "entries": [
            special("root", "read"), special("project_roots", "write"),
            special("slash_tmp", "write"), special("tmpdir", "write"), git,
        ]}, "network": "restricted"},
        "cwd": uri, "workspaceRoots": [uri],
        "windowsSandboxLevel": "disabled", "windowsSandboxProxySettingsMode": "reconcile",
        "useLegacyLandlock": false,
    })
}

/// `fs/*` calls sent with a sandbox intent are made by a thread the
/// kernel confines to it: inside the workspace they work, outside it the
/// kernel refuses them, and nothing is written there.
#[test]
fn fs_calls_under_a_sandbox_intent_are_confined_by_the_kernel() {
    let d = Daemon::start();
    let work = short_tempdir();
    // Not under /tmp, which workspace-write leaves writable.
    let elsewhere = tempfile::Builder::new()
        .prefix("pd")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("tempdir");
    std::fs::write(elsewhere.path().join("kept.txt"), "kept").expect("a file outside");
    let mut codex = Codex::start(&d, &[]);
    let mut next = 0;
    let mut call = |method: &str, params: Value| -> Value {
        next += 1;
        codex.call(json!(next), method, params)
    };
    let sandbox = workspace_write(work.path());
    let at = |dir: &Path, name: &str| file_uri(dir.join(name));
    let hello = json!("aGVsbG8="); // "hello"

    let inside = call(
        "fs/writeFile",
        json!({"path": at(work.path(), "in.txt"), "dataBase64": hello, "sandbox": sandbox}),
    );
    assert_eq!(inside["result"], json!({}), "{inside}");
    let outside = call(
        "fs/writeFile",
        json!({"path": at(elsewhere.path(), "out.txt"), "dataBase64": hello, "sandbox": sandbox}),
    );
    assert!(
        outside["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Permission denied")),
        "{outside}"
    );
    let read = call(
        "fs/readFile",
        json!({"path": at(elsewhere.path(), "kept.txt"), "sandbox": sandbox}),
    );
    assert_eq!(
        read["result"]["dataBase64"], "a2VwdA==",
        "reads stay allowed: {read}"
    );
    for (method, params) in [
        (
            "fs/createDirectory",
            json!({"path": at(elsewhere.path(), "dir"), "sandbox": sandbox}),
        ),
        (
            "fs/remove",
            json!({"path": at(elsewhere.path(), "kept.txt"), "sandbox": sandbox}),
        ),
        (
            "fs/copy",
            json!({"sourcePath": at(work.path(), "in.txt"), "destinationPath": at(elsewhere.path(), "copy.txt"), "recursive": false, "sandbox": sandbox}),
        ),
    ] {
        let r = call(method, params);
        assert!(
            r["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("Permission denied")),
            "{method}: {r}"
        );
    }
    // What Landlock cannot give is refused, never weakened.
    std::fs::create_dir(work.path().join(".git")).expect(".git");
    let carved = call(
        "fs/writeFile",
        json!({"path": at(work.path(), "in2.txt"), "dataBase64": hello, "sandbox": sandbox}),
    );
    assert_eq!(carved["error"]["code"], -32602, "{carved}");
    assert!(!work.path().join("in2.txt").exists());
    // The same calls without an intent are this machine's, as before.
    let free = call(
        "fs/writeFile",
        json!({"path": at(elsewhere.path(), "free.txt"), "dataBase64": hello}),
    );
    assert_eq!(free["result"], json!({}), "{free}");
    codex.end();
    assert_eq!(
        std::fs::read_to_string(work.path().join("in.txt")).expect("in.txt"),
        "hello"
    );
    let left: Vec<_> = std::fs::read_dir(elsewhere.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        left,
        ["free.txt", "kept.txt"],
        "written outside the workspace"
    );
}

/// `procd exec-server` (with `args`) on `d`'s home, its stdin and stdout
/// piped to the test.
fn exec_server(
    d: &Daemon,
    args: &[&str],
) -> (
    std::process::Child,
    std::process::ChildStdin,
    std::process::ChildStdout,
) {
    let mut server = Command::new(BIN)
        .arg("--home")
        .arg(d.home.path())
        .arg("exec-server")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("procd exec-server");
    let stdin = server.stdin.take().expect("stdin");
    let stdout = server.stdout.take().expect("stdout");
    (server, stdin, stdout)
}

/// `procd exec-server` on `d`'s home, driven as Codex drives it. Its
/// stdout is read only as a test asks for messages (by a thread, so each
/// wait has a deadline, that reads one line ahead at most): until then
/// the server finds no reader, as behind a Codex that stops reading.
/// Ended when dropped, if a test fails before `end`.
struct Codex {
    server: Stand,
    stdin: Option<std::process::ChildStdin>,
    stdout: Option<std::process::ChildStdout>,
    messages: Option<std::sync::mpsc::Receiver<Value>>,
}

impl Codex {
    /// Started with `args` and past the handshake (`initialize`, then
    /// `initialized`; the server takes them in order, so nothing waits
    /// for the answer, which `answer_to` skips).
    fn start(d: &Daemon, args: &[&str]) -> Codex {
        let (server, stdin, stdout) = exec_server(d, args);
        let mut codex = Codex {
            server: Stand(server),
            stdin: Some(stdin),
            stdout: Some(stdout),
            messages: None,
        };
        codex.send(json!({"id": 0, "method": "initialize", "params": {"clientName": "t"}}));
        codex.send(json!({"method": "initialized", "params": {}}));
        codex
    }

    fn pid(&self) -> u32 {
        self.server.pid() as u32
    }

    fn send(&mut self, msg: Value) {
        self.send_raw(format!("{msg}\n").as_bytes());
    }

    /// Bytes as they are, no line of their own.
    fn send_raw(&mut self, bytes: &[u8]) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to the server");
    }

    /// The next message the server writes, within `PATIENCE`.
    fn next(&mut self) -> Value {
        use std::io::{BufRead, BufReader};
        let stdout = &mut self.stdout;
        let messages = self.messages.get_or_insert_with(|| {
            let stdout = stdout.take().expect("stdout");
            // A line is handed over only when the test takes it.
            let (tx, rx) = std::sync::mpsc::sync_channel(0);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let msg = serde_json::from_str(&line).unwrap_or(Value::Null);
                    if tx.send(msg).is_err() {
                        return; // the test is done reading: stdout closes
                    }
                }
            });
            rx
        });
        messages.recv_timeout(PATIENCE).expect("a message in time")
    }

    /// The answer to request `id`, messages before it skipped.
    fn answer_to(&mut self, id: Value) -> Value {
        loop {
            let msg = self.next();
            if msg["id"] == id {
                return msg;
            }
        }
    }

    /// Request `method` as `id`, and its answer.
    fn call(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(json!({"id": id, "method": method, "params": params}));
        self.answer_to(id)
    }

    /// Codex process `pid` started running `argv`; its procd session.
    fn start_process(&mut self, d: &Daemon, pid: &str, argv: &[&str]) -> String {
        let started = self.call(
            json!(format!("start {pid}")),
            "process/start",
            json!({"processId": pid, "argv": argv, "cwd": "file:///", "env": {}, "tty": false}),
        );
        assert_eq!(started["result"]["processId"], pid, "{started}");
        session_of(d, pid).expect("its session")
    }

    /// Codex closes stdin; the server must end, and well.
    fn end(mut self) {
        drop(self.stdin.take());
        // What the test did not read is not waited on.
        drop((self.messages.take(), self.stdout.take()));
        assert!(self.server.0.wait().expect("ends").success());
    }
}

/// `path` as the `file://` URI Codex sends (plain names: no escaping).
fn file_uri(path: impl AsRef<Path>) -> String {
    format!("file://{}", path.as_ref().display())
}

/// The procd session of Codex process `pid`, once listed.
fn session_of(d: &Daemon, pid: &str) -> Option<String> {
    let listed = d.ok("list", json!({}));
    listed["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["meta"]["codex_process_id"] == pid)
        .and_then(|p| p["session_id"].as_str())
        .map(str::to_string)
}

/// `procd exec-server --keep`: what Codex started runs on after Codex
/// goes; without it, it ends.
#[test]
fn keep_leaves_what_codex_started_running_after_it_goes() {
    let d = Daemon::with_config("monitor_interval_s = 0.1");
    let mut kept_codex = Codex::start(&d, &["--keep"]);
    let kept = kept_codex.start_process(&d, "k", &["/bin/sleep", "300"]);
    let mut ended_codex = Codex::start(&d, &[]);
    let ended = ended_codex.start_process(&d, "e", &["/bin/sleep", "300"]);
    kept_codex.end();
    // The kept one's lease is gone first; the other's goes next, and the
    // pass that ends its process has seen both gone.
    ended_codex.end();
    let exit = d.wait_exit(&ended);
    assert_eq!(exit["termination_source"], "owner_released", "{exit}");
    // A later pass ends a later one; by then the pass that ended the
    // other has finished whatever it ended.
    let mut later_codex = Codex::start(&d, &[]);
    let later = later_codex.start_process(&d, "l", &["/bin/sleep", "300"]);
    later_codex.end();
    d.wait_exit(&later);
    let polled = d.ok("poll", json!({"session_id": kept}));
    assert_eq!(polled["status"], "running", "{polled}");
    d.ok("kill", json!({"session_id": kept}));
}

/// Every line that is not a message, or whose id is neither a string nor
/// an integer, gets an error naming its fault, as from Codex's own server
/// (which answers each of these with -32600), and
/// the server goes on: a request after them is answered. An answer from
/// Codex (procd asks it nothing) gets none.
#[test]
fn lines_that_are_no_message_are_answered_and_lose_nothing() {
    use std::io::{BufRead, BufReader, Write};
    let d = Daemon::start();
    let (mut server, mut stdin, stdout) = exec_server(&d, &[]);
    let lines = [
        "not json",
        "[1,2]",
        "[]",
        "\"a string\"",
        "null",
        "{\"jsonrpc\":\"2.0\"}",
        "{\"id\":7}",
        "{\"id\":8,\"result\":{}}",
        "{\"id\":{\"a\":1},\"method\":\"initialize\",\"params\":{\"clientName\":\"t\"}}",
        "{\"id\":null,\"method\":\"initialize\",\"params\":{\"clientName\":\"t\"}}",
        "{\"id\":1.5,\"method\":\"initialize\",\"params\":{\"clientName\":\"t\"}}",
        "{\"id\":9,\"method\":\"initialize\",\"params\":{\"clientName\":\"t\"}}",
    ];
    for line in lines {
        writeln!(stdin, "{line}").expect("write");
    }
    let mut answers = Vec::new();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str(&line).expect("an answer is JSON"));
        }
    });
    // Answers come in any order (each request is handled in a task of
    // its own); the initialize answer is the last one sent.
    while answers.len() < 11 {
        let msg = rx.recv_timeout(PATIENCE).expect("an answer");
        answers.push(msg);
    }
    drop(stdin);
    let status = server.wait().expect("the server ends with its stdin");
    assert!(status.success(), "{status}");
    // Whatever else it wrote is in by now (its stdout is closed).
    answers.extend(rx.iter());
    assert_eq!(answers.len(), 11, "{answers:#?}");
    let errors: Vec<(Value, i64, String)> = answers
        .iter()
        .filter(|a| a["error"].is_object())
        .map(|a| {
            (
                a["id"].clone(),
                a["error"]["code"].as_i64().expect("a code"),
                a["error"]["message"]
                    .as_str()
                    .expect("a message")
                    .to_string(),
            )
        })
        .collect();
    let with = |id: Value, code: i64, words: &str| {
        errors
            .iter()
            .filter(|(i, c, m)| *i == id && *c == code && m.contains(words))
            .count()
    };
    assert_eq!(with(Value::Null, -32700, "parse error"), 1, "{answers:#?}");
    assert_eq!(
        with(Value::Null, -32600, "one JSON object"),
        4,
        "{answers:#?}"
    );
    assert_eq!(
        with(Value::Null, -32600, "neither a method nor an id"),
        1,
        "{answers:#?}"
    );
    assert_eq!(with(json!(7), -32600, "no method"), 1, "{answers:#?}");
    assert_eq!(
        with(Value::Null, -32600, "a string or an integer"),
        3,
        "{answers:#?}"
    );
    assert_eq!(
        errors.len(),
        10,
        "nothing for the answer of id 8: {answers:#?}"
    );
    let init = answers
        .iter()
        .find(|a| a["id"] == 9)
        .expect("initialize is answered after them");
    assert!(init["result"]["sessionId"].is_string(), "{init}");
}

/// A Codex that stops reading its stdout holds up a process's output, not
/// the server's memory: `process/output` waits in procd's log, and once
/// Codex reads again every byte comes, in order. Without the bound, the
/// server took the subscription's output as fast as procd gave it and
/// queued it for stdout (about 70 MB a second of a `yes`, release build).
#[test]
fn a_codex_that_stops_reading_holds_up_output_not_memory() {
    use base64::Engine as _;
    const LINE: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz\n";
    // Printed in pieces of whole lines over a few seconds, so that a
    // server that takes all it is given has the time to take it; 48 MiB
    // in all, under the 64 MiB log, so nothing is dropped before Codex
    // reads it.
    const PIECE: usize = 14_170 * LINE.len();
    const PIECES: usize = 96;
    let d = Daemon::start();
    let mut codex = Codex::start(&d, &[]);
    let command = format!(
        "i=0; while [ $i -lt {PIECES} ]; do yes {} | head -c {PIECE}; sleep 0.1; i=$((i+1)); done",
        std::str::from_utf8(&LINE[..LINE.len() - 1]).expect("ascii")
    );
    codex.send(json!({"id": 1, "method": "process/start", "params": {
        "processId": "y", "argv": ["/bin/sh", "-c", command],
        "cwd": "file:///", "env": {}, "tty": false}}));
    // Nothing read yet: the process prints all of it meanwhile.
    let mut session = None;
    wait_until("a session for y", || {
        session = session_of(&d, "y");
        session.is_some()
    });
    let session = session.expect("found");
    let started_kib = status_kib(codex.pid(), "VmRSS:");
    d.wait_exit(&session);
    let held_kib = status_kib(codex.pid(), "VmRSS:");
    // Now everything, in order, then the end.
    let pattern = LINE.repeat((64 << 10) / LINE.len() + 2);
    let mut got = 0usize;
    loop {
        let msg = codex.next();
        match msg["method"].as_str() {
            Some("process/output") => {
                let chunk = base64::engine::general_purpose::STANDARD
                    .decode(msg["params"]["chunk"].as_str().expect("a chunk"))
                    .expect("base64");
                let from = got % LINE.len();
                assert!(
                    chunk.len() <= pattern.len() - from
                        && chunk == pattern[from..from + chunk.len()],
                    "the {} bytes from {got} are not what was printed",
                    chunk.len()
                );
                got += chunk.len();
            }
            Some("process/closed") => break,
            _ => {}
        }
    }
    assert_eq!(got, PIECE * PIECES, "every byte, once");
    let peak_kib = status_kib(codex.pid(), "VmHWM:");
    codex.end();
    // A few MiB of queued lines and the chunks kept for `process/read`;
    // not the 64 MB (base64 of 48 MiB) the process printed.
    assert!(
        peak_kib < started_kib + (32 << 10),
        "the server used {started_kib} KiB at the start, {held_kib} KiB once the process had \
         printed all while Codex did not read, and {peak_kib} KiB at its peak"
    );
}

/// At most 256 requests are handled at once: a Codex that sends more
/// (here reads that wait for output that does not come) has the next
/// one read once one of them is answered, rather than a task per line
/// it sends.
#[test]
fn requests_past_the_in_flight_bound_wait_for_an_answer() {
    const BOUND: usize = 256;
    let d = Daemon::start();
    let mut codex = Codex::start(&d, &[]);
    let session = codex.start_process(&d, "s", &["/bin/sleep", "300"]);
    for i in 0..BOUND {
        codex.send(json!({"id": format!("read {i}"), "method": "process/read",
            "params": {"processId": "s", "afterSeq": 0, "waitMs": 300_000}}));
    }
    codex.send(json!({"id": "last", "method": "environment/info", "params": {}}));
    // The reads end with the process; only then is `last` read.
    d.ok("kill", json!({"session_id": session}));
    let mut reads_before_last = 0;
    loop {
        let msg = codex.next();
        match msg["id"].as_str() {
            Some("last") => {
                assert!(msg["result"].is_object(), "{msg}");
                break;
            }
            Some(id) if id.starts_with("read ") => {
                assert_eq!(msg["result"]["exited"], true, "{msg}");
                reads_before_last += 1;
            }
            _ => {}
        }
    }
    assert!(
        reads_before_last >= 1,
        "`last` was answered while {BOUND} reads were still waiting"
    );
    codex.end();
}

/// Requests as large as a file (`fs/readFile` here) are at most 4 at once,
/// from their reading until their answer is written: a Codex that asks
/// for a file 32 times and reads nothing makes the server hold 4 files,
/// not 32. The others wait without holding up the lines after them: a
/// `process/terminate` sent behind them is carried out while Codex
/// still reads nothing. Then every answer is the whole file.
#[test]
fn large_answers_are_held_a_few_at_a_time() {
    use base64::Engine as _;
    const ASKED: usize = 32;
    const SIZE: usize = 4 << 20;
    let d = Daemon::start();
    let work = tempfile::tempdir().expect("temp dir");
    let file = work.path().join("four.bin");
    let bytes: Vec<u8> = (0..SIZE).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&file, &bytes).expect("the file");
    let uri = file_uri(&file);
    let mut codex = Codex::start(&d, &[]);
    let session = codex.start_process(&d, "s", &["/bin/sleep", "300"]);
    // From here the test reads nothing until the terminate is carried out.
    let started_kib = status_kib(codex.pid(), "VmRSS:");
    for i in 0..ASKED {
        codex.send(json!({"id": format!("read {i}"), "method": "fs/readFile",
            "params": {"path": uri}}));
    }
    codex.send(json!({"id": "stop", "method": "process/terminate", "params": {"processId": "s"}}));
    let exit = d.wait_exit(&session);
    assert_eq!(exit["termination_source"], "codex", "{exit}");
    let mut read = 0;
    let mut stopped = false;
    while read < ASKED || !stopped {
        let msg = codex.next();
        match msg["id"].as_str() {
            Some("stop") => {
                assert_eq!(msg["result"]["running"], true, "{msg}");
                stopped = true;
            }
            Some(id) if id.starts_with("read ") => {
                let data = base64::engine::general_purpose::STANDARD
                    .decode(msg["result"]["dataBase64"].as_str().expect("data"))
                    .expect("base64");
                assert!(data == bytes, "{id}: {} bytes, not the file", data.len());
                read += 1;
            }
            _ => {}
        }
    }
    let peak_kib = status_kib(codex.pid(), "VmHWM:");
    eprintln!("the server: {started_kib} KiB at the start, {peak_kib} KiB at its peak");
    codex.end();
    // Each held read is the file, its base64 and its line: about 16 MiB.
    assert!(
        peak_kib < started_kib + (128 << 10),
        "the server used {started_kib} KiB at the start and {peak_kib} KiB at its peak"
    );
}

/// `fs/readDirectory` answers at most 200 000 entries (the most a walk
/// returns); a directory of more is an error that names `fs/walk`, not
/// an answer of every name held in memory.
#[test]
fn a_directory_too_large_to_list_is_refused() {
    const BOUND: usize = 200_000;
    let d = Daemon::start();
    let work = tempfile::tempdir().expect("temp dir");
    let dir = work.path().join("many");
    std::fs::create_dir(&dir).expect("dir");
    let one = work.path().join("one");
    std::fs::write(&one, b"").expect("a file");
    // Symlinks to one file: each a name, and a file where it leads.
    for i in 0..=BOUND {
        std::os::unix::fs::symlink(&one, dir.join(i.to_string())).expect("a link");
    }
    let uri = file_uri(&dir);
    let mut codex = Codex::start(&d, &[]);
    let r = codex.call(json!(1), "fs/readDirectory", json!({"path": uri}));
    let listed = r["result"]["entries"].as_array().map_or(0, Vec::len);
    assert_eq!(r["error"]["code"], -32600, "answered with {listed} entries");
    let message = r["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains(&format!("more than {BOUND} entries")) && message.contains("fs/walk"),
        "{message}"
    );
    std::fs::remove_file(dir.join("0")).expect("one name fewer");
    let r = codex.call(json!(2), "fs/readDirectory", json!({"path": uri}));
    let entries = r["result"]["entries"].as_array().expect("the entries");
    assert_eq!(entries.len(), BOUND);
    assert!(
        entries.iter().all(|e| e["isFile"] == true),
        "{}",
        entries[0]
    );
    codex.end();
}

/// `fs/readFile` answers a file of at most 64 MiB (the line that may carry
/// one to `fs/writeFile`); a larger one is an error that says to read it
/// in blocks, and a device (`/dev/zero`, which never ends) is not a file,
/// as Codex's own server says, not read until the server is killed.
#[test]
fn a_whole_file_read_is_bounded() {
    let d = Daemon::start();
    let work = tempfile::tempdir().expect("temp dir");
    let big = work.path().join("big.bin");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len((64 << 20) + 1))
        .expect("a sparse file");
    let mut codex = Codex::start(&d, &[]);
    let refusals = [
        (
            big.display().to_string(),
            "more than 64 MiB: read it in blocks (fs/open, fs/readBlock)",
        ),
        ("/dev/zero".into(), "path `/dev/zero` is not a file"),
    ];
    for (id, (path, why)) in (1..).zip(refusals) {
        let params = json!({"path": format!("file://{path}")});
        let answer = codex.call(json!(id), "fs/readFile", params);
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            answer["error"]["code"] == -32600 && message.contains(why),
            "{}",
            &answer.to_string()[..answer.to_string().len().min(300)]
        );
    }
    codex.end();
}

/// A closed process keeps its last 1 MiB for `process/read`, as Codex's
/// own server does (a running one, 8 MiB): every byte was pushed, and a
/// long session's ended commands are not held whole for its life.
#[test]
fn a_closed_process_keeps_its_last_mebibyte() {
    use base64::Engine as _;
    const PRINTED: usize = 4 << 20;
    let d = Daemon::start();
    let mut codex = Codex::start(&d, &[]);
    let command = format!("head -c {PRINTED} /dev/zero | tr '\\0' a; printf END");
    codex.start_process(&d, "p", &["/bin/sh", "-c", &command]);
    while codex.next()["method"] != "process/closed" {}
    let read = codex.call(
        json!(1),
        "process/read",
        json!({"processId": "p", "afterSeq": 0}),
    )["result"]
        .clone();
    let mut kept = Vec::new();
    for chunk in read["chunks"].as_array().expect("chunks") {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(chunk["chunk"].as_str().expect("a chunk"))
            .expect("base64");
        kept.extend(bytes);
    }
    assert_eq!(read["closed"], true, "{read}");
    assert!(
        kept.len() <= 1 << 20 && kept.len() > (1 << 20) - (64 << 10),
        "{} bytes kept in {} chunks",
        kept.len(),
        read["chunks"].as_array().map_or(0, Vec::len)
    );
    assert!(kept.ends_with(b"aaaEND"), "the last bytes are kept");
    assert!(
        read["chunks"][0]["seq"].as_u64() > Some(1),
        "the first chunks are gone"
    );
    codex.end();
}

/// `fs/copy` of a file onto itself leaves its bytes: Codex's own server
/// truncates it to nothing (std's copy opens the destination for writing
/// first), and answers `{}` as procd does.
#[test]
fn a_file_copied_onto_itself_keeps_its_bytes() {
    let d = Daemon::start();
    let work = tempfile::tempdir().expect("temp dir");
    let file = work.path().join("a.txt");
    std::fs::write(&file, "hello").expect("write");
    let uri = file_uri(&file);
    let mut codex = Codex::start(&d, &[]);
    let copied = codex.call(
        json!(1),
        "fs/copy",
        json!({"sourcePath": uri, "destinationPath": uri, "recursive": false}),
    );
    assert_eq!(copied["result"], json!({}), "{copied}");
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "hello");
    codex.end();
}

/// `fs/remove` never removes the root directory's tree, however the path
/// names it, as `rm -r` refuses without --no-preserve-root; Codex's own
/// server would go on until an error stopped it. The calls carry Codex's
/// read-only intent, so that a build without the check is stopped by the
/// kernel at its first unlink, and the answer tells the two apart.
#[test]
fn the_root_directory_is_never_removed() {
    let d = Daemon::start();
    let work = tempfile::tempdir().expect("temp dir");
    let link = work.path().join("root");
    std::os::unix::fs::symlink("/", &link).expect("a link to /");
    std::fs::create_dir_all(work.path().join("tree/sub")).expect("a tree");
    let read_only = {
        let mut intent = workspace_write(work.path());
        intent["permissions"]["file_system"]["entries"] =
            json!([{"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}]);
        intent
    };
    let mut codex = Codex::start(&d, &[]);
    // First, the intent is the kernel's: an ordinary tree is refused by
    // it (so the refusals below are the check's, and a build without the
    // check removes nothing).
    let tree = file_uri(work.path().join("tree"));
    let confined = codex.call(
        json!("tree"),
        "fs/remove",
        json!({"path": tree, "sandbox": read_only}),
    );
    let message = confined["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("Permission denied"), "{confined}");
    let link_uri = format!("{}/", file_uri(&link));
    let names_of_root = [
        "file:///".to_string(),
        format!("{}/..", file_uri(work.path().parent().expect("a parent"))),
        link_uri,
    ];
    let mut next = 0;
    for uri in names_of_root {
        next += 1;
        let answer = codex.call(
            json!(next),
            "fs/remove",
            json!({"path": uri, "sandbox": read_only}),
        );
        assert_eq!(answer["error"]["code"], -32600, "{uri}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("it is `/`"), "{uri}: {answer}");
    }
    // Without an intent a tree is removed, and a link to `/` is a link:
    // it goes, and what it named stays.
    let removed = codex.call(json!("free"), "fs/remove", json!({"path": tree}));
    assert_eq!(removed["result"], json!({}), "{removed}");
    assert!(!work.path().join("tree").exists());
    let unlinked = codex.call(json!("link"), "fs/remove", json!({"path": file_uri(&link)}));
    assert_eq!(unlinked["result"], json!({}), "{unlinked}");
    assert!(std::fs::symlink_metadata(&link).is_err(), "the link stayed");
    assert!(Path::new("/usr/bin").is_dir());
    codex.end();
}

/// `fs/writeFile` to a FIFO that nothing reads is an error at once: its
/// open would wait for a reader. Codex's own server waits there, and
/// answers nothing after it.
#[test]
fn a_write_to_a_fifo_nothing_reads_is_refused() {
    let d = Daemon::start();
    let work = tempfile::tempdir().expect("temp dir");
    let fifo = work.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let mut codex = Codex::start(&d, &[]);
    let answer = codex.call(
        json!(1),
        "fs/writeFile",
        json!({"path": file_uri(&fifo), "dataBase64": "eA=="}),
    );
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("a FIFO that nothing reads"), "{answer}");
    codex.end();
}

/// A line longer than 64 MiB is answered "line too long" and read past
/// without being kept: the server's memory stays near the one line it
/// may hold, however long the line goes on, and it serves the next.
#[test]
fn a_line_too_long_is_read_past_not_kept() {
    const LONG: usize = 512 << 20;
    let d = Daemon::start();
    let mut codex = Codex::start(&d, &[]);
    let block = vec![b'x'; 1 << 20];
    for _ in 0..LONG / block.len() {
        codex.send_raw(&block);
    }
    codex.send_raw(b"\n");
    let refused = codex.answer_to(Value::Null);
    assert_eq!(refused["error"]["code"], -32700, "{refused}");
    let info = codex.call(json!(1), "environment/info", json!({}));
    assert!(info["result"]["shell"].is_object(), "{info}");
    let peak_kib = status_kib(codex.pid(), "VmHWM:");
    let after_kib = status_kib(codex.pid(), "VmRSS:");
    codex.end();
    // The one line it holds (64 MiB, in a buffer that may have doubled)
    // and the server itself; not the 512 MiB that came.
    assert!(peak_kib < 256 << 10, "{peak_kib} KiB at the peak");
    // And that buffer is let go once the next line is read.
    assert!(after_kib < 48 << 10, "{after_kib} KiB after the next line");
}
