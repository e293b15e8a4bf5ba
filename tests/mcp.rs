//! `procd mcp` driven by a real MCP client written by others: the official
//! Python SDK, in a virtual environment the project owns (target/mcp-venv,
//! made by tests/mcp-venv.sh: the README's test command runs it, and so
//! does this test when the venv is missing).

use crate::common::*;
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::Duration;

struct Home(tempfile::TempDir);

impl Drop for Home {
    fn drop(&mut self) {
        stop_recorded_daemon(self.0.path());
    }
}

#[test]
fn an_mcp_client_starts_reads_writes_kills_and_its_processes_end_with_it() {
    let home = Home(short_tempdir());
    let seen = python_client("mcp_client.py", home.0.path(), &[]);

    assert_eq!(seen["server"], "procd");
    // Commands run where the agent runs procd mcp (its project), and a
    // relative cwd is taken from there.
    let project = seen["project"].as_str().unwrap();
    assert_eq!(seen["pwd"]["result"]["output"], format!("{project}\n"));
    assert_eq!(
        seen["pwd_sub"]["result"]["output"],
        format!("{project}/sub\n")
    );
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "down",
            "kill",
            "list",
            "notifications",
            "port",
            "read",
            "search",
            "shell",
            "signal",
            "start",
            "up",
            "wait",
            "write"
        ]
    );
    // `shell`: the agent's own shell keeps its cwd and variables; the
    // command's exit code and output, in the words and the fields alike.
    let shell = &seen["shell2"];
    assert_eq!(
        seen["shell1"]["result"]["exit_code"], 0,
        "{}",
        seen["shell1"]
    );
    assert_eq!(shell["result"]["exit_code"], 3, "{shell}");
    assert_eq!(
        shell["result"]["output"],
        format!("dev\n{project}/sub2\n"),
        "{shell}"
    );
    assert_eq!(shell["result"]["cwd"], format!("{project}/sub2"), "{shell}");
    let said = shell["text"].as_str().unwrap();
    assert!(said.starts_with("Command 2 exited with code 3"), "{said}");
    assert_eq!(
        shell["result"]["shell_id"], seen["shell1"]["result"]["shell_id"],
        "one shell for the agent"
    );
    assert_eq!(seen["shell_bad"]["is_error"], true, "{}", seen["shell_bad"]);
    // A command sent while the last one waits for input is refused at
    // once, not queued behind it, and runs once that one has ended.
    let asks = &seen["shell_asks"];
    assert_eq!(asks["result"]["waiting_for_input"], true, "{asks}");
    let n = asks["result"]["command_id"].as_u64().unwrap();
    let busy = &seen["shell_busy"];
    assert_eq!(busy["is_error"], true, "{busy}");
    let said = busy["text"].as_str().unwrap();
    assert!(
        said.starts_with(&format!("Not run: command {n} still runs")),
        "{said}"
    );
    let waited = &seen["shell_waited"];
    assert_eq!(waited["result"]["exit_code"], 0, "{waited}");
    assert_eq!(waited["result"]["output"], "got yes\n", "{waited}");
    let next = &seen["shell_next"];
    assert_eq!(next["result"]["output"], "next\n", "{next}");
    assert_eq!(
        next["result"]["command_id"],
        n + 1,
        "the refused one ran: {next}"
    );
    // Two at once: one runs (and waits for input), the other is refused.
    let both = seen["shell_both"].as_array().unwrap();
    let (refused, ran): (Vec<&Value>, Vec<&Value>) =
        both.iter().partition(|r| r["is_error"] == true);
    assert_eq!((refused.len(), ran.len()), (1, 1), "{both:?}");
    let said = refused[0]["text"].as_str().unwrap();
    assert!(said.starts_with("Not run: "), "{said}");
    assert_eq!(ran[0]["result"]["waiting_for_input"], true, "{both:?}");
    let ran_id = ran[0]["result"]["command_id"].as_u64().unwrap();
    assert_eq!(ran_id, n + 2, "{both:?}");
    let waited = &seen["shell_both_waited"];
    assert_eq!(waited["result"]["exit_code"], 0, "{waited}");
    let out = waited["result"]["output"].as_str().unwrap();
    assert!(out == "a x\n" || out == "b x\n", "{waited}");
    let after = &seen["shell_after_both"];
    assert_eq!(after["result"]["output"], "after\n", "{after}");
    assert_eq!(
        after["result"]["command_id"],
        ran_id + 1,
        "the refused one never ran: {after}"
    );
    // `search`: the line found, numbered as grep numbers the log, in the
    // words and in structuredContent; a bad time refused by name.
    let search = &seen["search"];
    let fast_id = seen["fast"]["result"]["session_id"].as_str().unwrap();
    assert_eq!(search["is_error"], false, "{search}");
    assert!(
        search["text"]
            .as_str()
            .unwrap()
            .contains(&format!("{fast_id}:1:hello from mcp")),
        "{search}"
    );
    assert_eq!(search["result"]["total"], 1, "{search}");
    // `port`: who listens, in the words and the fields alike.
    // A queue: the second start waits, says where, is listed and removed.
    let queued = &seen["queued"];
    assert_eq!(queued["result"]["status"], "queued", "{queued}");
    assert_eq!(queued["result"]["queue"]["position"], 1, "{queued}");
    let said = queued["text"].as_str().unwrap_or("");
    assert!(said.contains("is queued in mcpq (#1, "), "{said}");
    let listed = seen["list"]["text"].as_str().unwrap_or("");
    assert!(listed.contains("queued in mcpq (#1, "), "{listed}");
    let all_ids: Vec<&str> = seen["list"]["result"]["processes"]
        .as_array()
        .map(|ps| ps.iter().filter_map(|p| p["session_id"].as_str()).collect())
        .unwrap_or_default();
    assert!(all_ids.len() > 2, "{}", seen["list"]);
    let page = &seen["list_page"];
    assert_eq!(page["result"]["next_after"], all_ids[0], "{page}");
    let said = page["text"].as_str().unwrap_or("");
    let more = format!(
        "1 process(es); more follow: call list with after=\"{}\"",
        all_ids[0]
    );
    assert!(said.contains(&more), "{said}");
    let next = &seen["list_next"];
    assert_eq!(
        next["result"]["processes"][0]["session_id"], all_ids[1],
        "{next}"
    );
    let bad = &seen["list_bad"];
    assert_eq!(bad["is_error"], true, "{bad}");
    assert!(
        bad["text"]
            .as_str()
            .unwrap_or("")
            .contains("limit: must be"),
        "{bad}"
    );
    let unqueued = &seen["unqueued"];
    assert_eq!(unqueued["result"]["status"], "removed", "{unqueued}");
    let port = &seen["port_owner"];
    assert_eq!(port["is_error"], false, "{port}");
    assert_eq!(port["result"]["owner"], "process", "{port}");
    assert_eq!(port["result"]["pid"], seen["port_pid"], "{port}");
    let text = port["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("pid {} (not procd's)", seen["port_pid"])),
        "{text}"
    );
    let bad = &seen["port_bad"];
    assert_eq!(bad["is_error"], true, "{bad}");
    assert!(
        bad["text"].as_str().unwrap().contains("port: must be"),
        "{bad}"
    );
    let bad = &seen["search_bad_since"];
    assert_eq!(bad["is_error"], true, "{bad}");
    assert!(bad["text"].as_str().unwrap().starts_with("since:"), "{bad}");
    assert!(seen["start_schema"]["properties"]["command"]["description"].is_string());
    assert!(seen["start_schema"]["properties"]["ready"].is_object());
    // A parameter is described once (procd_proto::describe!): what the
    // model reads of it begins with the protocol's words, and `procd
    // spawn --help` says the same.
    let help = Command::new(BIN)
        .args(["spawn", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for (param, said) in [
        ("sandbox", procd_proto::describe!(sandbox)),
        ("port", procd_proto::describe!(port)),
        ("timeout_s", procd_proto::describe!(timeout_s)),
    ] {
        let schema = seen["start_schema"]["properties"][param]["description"].as_str();
        assert!(
            schema.is_some_and(|d| d.starts_with(said)),
            "{param}: {schema:?}"
        );
        assert!(
            help.contains(said),
            "{param} is not in spawn --help: {help}"
        );
    }
    let teach = seen["start_description"].as_str().unwrap();
    assert!(
        teach.contains("ready") && teach.contains("WAITING FOR INPUT"),
        "{teach}"
    );

    // docs/agents.md through MCP: a server started with `ready` answers when it
    // serves, with its port in the text; a prompt is said to wait for input
    // and `write` answers it.
    let server = &seen["devserver"];
    assert_eq!(server["result"]["ready"], true, "{server}");
    let text = server["text"].as_str().unwrap();
    assert!(
        text.contains("ready (after") && text.contains(&format!("[{}]", seen["port"])),
        "{text}"
    );
    let prompt = &seen["prompt"];
    assert_eq!(prompt["result"]["waiting_for_input"], true, "{prompt}");
    assert!(
        prompt["text"]
            .as_str()
            .unwrap()
            .contains("WAITING FOR INPUT"),
        "{prompt}"
    );
    let reply = seen["reply"]["text"].as_str().unwrap();
    assert!(
        reply.contains("answer y") && reply.contains("exited with code 0"),
        "{reply}"
    );

    // Spawn-and-yield: a fast command's output and exit code in one call.
    let fast = &seen["fast"];
    assert_eq!(fast["is_error"], false);
    assert_eq!(fast["result"]["status"], "exited");
    assert_eq!(fast["result"]["exit_code"], 3);
    assert_eq!(fast["result"]["output"], "hello from mcp\n");
    assert!(fast["text"]
        .as_str()
        .unwrap()
        .contains("exited with code 3"));
    // A slow one: running, with the output so far.
    let slow = &seen["slow"]["result"];
    assert_eq!(slow["status"], "running");
    assert_eq!(slow["output"], "started\n");
    assert_eq!(seen["read"]["result"]["data"], "started\n");
    assert!(
        seen["answer"]["text"]
            .as_str()
            .unwrap()
            .contains("got ping"),
        "{}",
        seen["answer"]
    );
    assert_eq!(seen["kill"]["result"]["status"], "killed");
    assert!(!alive(seen["doomed_pid"].as_i64().unwrap() as i32));
    // Errors are tool errors with a sentence a model can act on.
    assert_eq!(seen["bad"]["is_error"], true);
    assert!(seen["bad"]["text"]
        .as_str()
        .unwrap()
        .contains("Call `list`"));

    // Names and stacks through MCP.
    let named = &seen["named"]["result"];
    assert_eq!(
        seen["named_again"]["result"]["reused"], true,
        "{}",
        seen["named_again"]
    );
    assert_eq!(
        seen["named_again"]["result"]["session_id"],
        named["session_id"]
    );
    assert!(seen["named_again"]["text"]
        .as_str()
        .unwrap()
        .contains("nothing was started"));
    let by_name = seen["read_by_name"]["text"].as_str().unwrap();
    assert!(
        by_name.starts_with(named["session_id"].as_str().unwrap()),
        "{by_name}"
    );
    let up = &seen["up"]["result"];
    assert_eq!(up["project"], "project", "{up}");
    assert_eq!(up["services"][0]["name"], "api", "{up}");
    assert_eq!(up["services"][0]["status"], "running", "{up}");
    assert_eq!(up["services"][0]["ready"], true, "{up}");
    let down = &seen["down"]["result"];
    assert_eq!(
        down["services"][0]["session_id"], up["services"][0]["session_id"],
        "{down}"
    );
    assert_eq!(down["services"][0]["status"], "killed", "{down}");

    // The client disconnected: its processes end, unless persistent.
    let slow_pid = slow["pid"].as_i64().unwrap() as i32;
    let kept = &seen["kept"]["result"];
    let kept_pid = kept["pid"].as_i64().unwrap() as i32;
    wait_until("the agent's process ends with it", || !alive(slow_pid));
    // A sandbox through start: the write is refused, and a bad profile is
    // a tool error naming it.
    let sandboxed = &seen["sandboxed"]["result"];
    assert!(
        sandboxed["output"]
            .as_str()
            .is_some_and(|o| o.contains("Permission denied") && o.contains("refused")),
        "{sandboxed}"
    );
    assert_eq!(
        seen["bad_sandbox"]["is_error"], true,
        "{}",
        seen["bad_sandbox"]
    );
    assert!(
        seen["bad_sandbox"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("sandbox: unknown profile \"loose\"")),
        "{}",
        seen["bad_sandbox"]
    );
    // A restarting one ends with its agent too, and is not started again.
    assert_eq!(seen["bad_restart"]["is_error"], true);
    assert!(
        seen["bad_restart"]["text"]
            .as_str()
            .unwrap()
            .contains("restart: expected"),
        "{}",
        seen["bad_restart"]
    );
    let restarting = &seen["restarting"]["result"];
    let restarting_pid = restarting["pid"].as_i64().unwrap() as i32;
    wait_until("the restarting process ends with the agent", || {
        !alive(restarting_pid)
    });
    let after = Command::new(BIN)
        .arg("--home")
        .arg(home.0.path())
        .args(["--json", "wait", restarting["session_id"].as_str().unwrap()])
        .output()
        .expect("procd wait");
    let after: Value = serde_json::from_slice(&after.stdout).expect("wait --json");
    assert_eq!(after["completion_reason"], "killed", "{after}");
    assert_eq!(after["restarts"], 0, "{after}");
    assert!(alive(kept_pid), "a persistent process outlives the agent");
    let kill = Command::new(BIN)
        .arg("--home")
        .arg(home.0.path())
        .args(["kill", kept["session_id"].as_str().unwrap()])
        .output()
        .expect("procd kill");
    if !kill.status.success() {
        let log =
            std::fs::read_to_string(home.0.path().join("state/procd.log")).unwrap_or_default();
        panic!("{kill:?}\n--- procd.log ---\n{log}");
    }
    assert!(!alive(kept_pid));
}

/// Runs one of the Python MCP clients (`script` in tests/) against a
/// daemon in `home`; its JSON report.
fn python_client(script: &str, home: &std::path::Path, args: &[&str]) -> Value {
    let script = format!("{}/../../tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let client = Command::new(mcp_python())
        .arg(script)
        .arg(BIN)
        .arg(home)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the Python MCP client");
    let out = output_within_for(client, "the Python MCP client", Duration::from_secs(180));
    assert!(
        out.status.success(),
        "the MCP client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the client's JSON report")
}

/// What the model reads of one answer (`structuredContent` as JSON, or
/// an error's text).
fn model(seen: &Value) -> &str {
    seen["model"].as_str().unwrap_or_default()
}

#[test]
fn a_model_reading_only_structured_content_sees_what_procd_says() {
    let home = Home(short_tempdir());
    let with_cgroup = !machine_lacks("PROCD_TEST_NO_CGROUP", "a cgroup to manage");
    let seen = python_client(
        "mcp_agents_client.py",
        home.0.path(),
        &[if with_cgroup { "1" } else { "0" }],
    );

    // The prompt cue, the prompt, the cursor: in start, read and list.
    for step in ["prompt_start", "prompt_read", "prompt_wait_timeout"] {
        let m = model(&seen[step]);
        assert!(m.contains("WAITING FOR INPUT"), "{step}: {m}");
        assert!(m.contains(r#""prompt":"Name?""#), "{step}: {m}");
        assert!(m.contains(r#""waiting_for_input":true"#), "{step}: {m}");
        assert!(m.contains(r#""summary":"#), "{step}: {m}");
    }
    assert!(model(&seen["prompt_start"]).contains(r#""next_cursor":6"#));
    assert!(model(&seen["prompt_read"]).contains(r#""next_cursor":6"#));
    let list = model(&seen["prompt_list"]);
    assert!(list.contains(r#""prompt":"Name?""#), "{list}");
    // The answer: its output, the exit and its code.
    let write = model(&seen["prompt_write"]);
    assert!(
        write.contains("hi bob") && write.contains(r#""exit_code":0"#),
        "{write}"
    );
    assert!(write.contains("exited with code 0"), "{write}");
    let wait = model(&seen["prompt_wait"]);
    assert!(
        wait.contains(r#""exit_code":0"#) && wait.contains("exited with code 0"),
        "{wait}"
    );
    // A server's ports and readiness.
    let port = seen["port"].as_u64().unwrap();
    let server = model(&seen["server"]);
    assert!(server.contains(&format!(r#""ports":[{port}]"#)), "{server}");
    assert!(
        server.contains(&format!("listening on port(s) [{port}]")),
        "{server}"
    );
    assert!(server.contains(r#""ready":true"#), "{server}");
    let kill = model(&seen["server_kill"]);
    assert!(
        kill.contains("killed") && kill.contains(r#""completion_reason":"killed""#),
        "{kill}"
    );

    // Annotations: VS Code runs read-only tools without asking.
    let notes = &seen["annotations"];
    for tool in ["read", "list", "wait", "notifications"] {
        assert_eq!(notes[tool]["readOnlyHint"], true, "{tool}: {notes}");
    }
    for tool in ["kill", "signal", "down"] {
        assert_eq!(notes[tool]["destructiveHint"], true, "{tool}: {notes}");
    }
    assert_eq!(notes["start"]["destructiveHint"], false, "{notes}");

    // Each agent drains its own events only.
    let (a_id, b_id) = (
        seen["done_a"].as_str().unwrap(),
        seen["done_b"].as_str().unwrap(),
    );
    let ids = |step: &str| -> Vec<String> {
        seen[step]["result"]["events"]
            .as_array()
            .unwrap_or_else(|| panic!("{step}: {}", seen[step]))
            .iter()
            .map(|e| e["session_id"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let (a_got, b_got) = (ids("a_notifications"), ids("b_notifications"));
    assert!(
        a_got.contains(&a_id.to_string()),
        "A gets its own: {a_got:?}"
    );
    assert!(
        !a_got.contains(&b_id.to_string()),
        "A never gets B's: {a_got:?}"
    );
    assert!(
        b_got.contains(&b_id.to_string()),
        "B gets its own: {b_got:?}"
    );
    assert!(
        !b_got.contains(&a_id.to_string()),
        "B never gets A's: {b_got:?}"
    );
    assert!(model(&seen["a_notifications"]).contains("done-A"));

    // One wait over all of an agent's processes.
    let w = &seen["wait_output"]["result"];
    assert_eq!(w["condition"], "output", "{w}");
    assert_eq!(w["line"], "server LISTENING now", "{w}");
    assert!(w["output"].as_str().unwrap().contains("LISTENING"), "{w}");
    assert!(model(&seen["wait_output"]).contains("printed a matching line"));
    let w = &seen["wait_exit"]["result"];
    assert_eq!(w["condition"], "exit", "{w}");
    assert_eq!(w["session_id"], seen["quitter"], "{w}");
    assert_eq!(w["exit_code"], 7, "{w}");
    assert!(model(&seen["wait_exit"]).contains("exited with code 7"));
    assert_eq!(seen["wait_nothing"]["result"]["condition"], "timeout");
    // B runs nothing: its wait says so, rather than waking on A's.
    assert_eq!(
        seen["b_wait_none"]["is_error"], true,
        "{}",
        seen["b_wait_none"]
    );
    assert!(model(&seen["b_wait_none"]).contains("nothing to wait on"));
    // Bad input names its field.
    assert!(model(&seen["bad_until"]).contains("until: unknown condition \"soon\""));
    assert!(model(&seen["bad_regex"]).starts_with("Invalid arguments: output:"));
    assert!(
        model(&seen["others_session"]).contains("another agent's"),
        "{}",
        seen["others_session"]
    );

    // An OOM kill's text says what its fields say, through MCP.
    if with_cgroup {
        let events = seen["oom_notifications"]["result"]["events"]
            .as_array()
            .unwrap();
        let oom = events
            .iter()
            .find(|e| e["type"] == "oom")
            .expect("an oom event");
        assert!(
            oom["text"].as_str().unwrap().contains("memory limit"),
            "{oom}"
        );
        let done = events
            .iter()
            .find(|e| e["type"] == "completion")
            .expect("completion");
        let text = done["text"].as_str().unwrap();
        assert_eq!(done["completion_reason"], "oom", "{done}");
        assert!(
            text.contains("OOM killer") && text.contains("exit code 0"),
            "{text}"
        );
        assert!(model(&seen["oom_notifications"]).contains("memory limit"));
    }
}

#[test]
fn waits_send_progress_stop_at_a_cancel_and_a_channel_pushes() {
    if machine_lacks("PROCD_TEST_NO_NODE", "node") {
        return;
    }
    let home = Home(short_tempdir());
    let sdk = prepared("mcp-ts-sdk.sh", "the TypeScript MCP SDK");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/mcp_ts_client.mjs");
    let client = Command::new("node")
        .arg(script)
        .arg(sdk)
        .arg(BIN)
        .arg(home.0.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node");
    let out = output_within_for(
        client,
        "the TypeScript MCP client",
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "the TypeScript MCP client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("the client's JSON report");

    // A 10 s wait completes under a 3 s request timeout: progress came at
    // least every second, each saying what is awaited and the last line.
    let w = &seen["with_progress"];
    assert_eq!(w["exit_code"], 0, "{w}");
    assert!(w["ms"].as_u64() >= Some(9000), "it really waited: {w}");
    let progress = w["progress"].as_array().unwrap();
    assert!(progress.len() >= 5, "{w}");
    // Each says what is awaited and the last line: "tick" while it
    // sleeps ("done" if a note races the end).
    for p in progress {
        let message = p["message"].as_str().unwrap();
        let last = ["last printed: tick", "last printed: done"];
        assert!(
            message.contains("to exit") && last.iter().any(|l| message.contains(l)),
            "{p}"
        );
    }
    assert!(progress.iter().any(|p| p["message"]
        .as_str()
        .unwrap()
        .contains("last printed: tick")));
    // Without progress the same client gives up.
    assert_eq!(seen["without_progress"]["finished"], false, "{seen}");
    assert_eq!(seen["without_progress"]["code"], -32001, "{seen}");
    // A cancel ends the wait (no more progress) and not the process.
    let c = &seen["cancel"];
    assert_eq!(c["rejected"], true, "{c}");
    assert!(
        c["running_after"]
            .as_array()
            .unwrap()
            .contains(&c["silent_id"]),
        "{c}"
    );
    assert_eq!(
        c["progress_after"], c["progress_before"],
        "no progress after the cancel: {c}"
    );
    // The SDK drops notes for a request it gave up on, so whether the
    // server went on waiting shows in the notes that reached no handler.
    assert_eq!(c["strays_after"], 0, "the server stopped waiting: {c}");

    // The channel: declared only with --channel; this agent's completion
    // is pushed with its text and meta, nothing to the other agent.
    assert_eq!(seen["channel_capability"], json!({"claude/channel": {}}));
    assert_eq!(seen["plain_capability"], Value::Null);
    let pushes = seen["channel_pushes"].as_array().unwrap();
    let push = pushes
        .iter()
        .find(|n| n["method"] == "notifications/claude/channel")
        .unwrap_or_else(|| panic!("no push: {seen}"));
    let content = push["params"]["content"].as_str().unwrap();
    assert!(
        content.contains("completed normally (exit code 0)") && content.contains("pushed-done"),
        "{push}"
    );
    assert_eq!(
        push["params"]["meta"]["session_id"], seen["pushed_id"],
        "{push}"
    );
    assert_eq!(push["params"]["meta"]["type"], "completion", "{push}");
    assert_eq!(seen["plain_pushes"], json!([]), "{seen}");
}
