//! `procd mcp` driven by a real MCP client written by others: the official
//! Python SDK, in a virtual environment the project owns (target/mcp-venv,
//! made by tests/mcp-venv.sh: the README's test command runs it, and so
//! does this test when the venv is missing).

use crate::common::*;
use serde_json::Value;
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
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/mcp_client.py");
    let python = mcp_python();
    let client = Command::new(python)
        .arg(script)
        .arg(BIN)
        .arg(home.0.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the Python MCP client");
    let out = output_within_for(client, "the Python MCP client", Duration::from_secs(120));
    assert!(
        out.status.success(),
        "the MCP client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("the client's JSON report");

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
            "read",
            "signal",
            "start",
            "up",
            "wait",
            "write"
        ]
    );
    assert!(seen["start_schema"]["properties"]["command"]["description"].is_string());
    assert!(seen["start_schema"]["properties"]["ready"].is_object());
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
