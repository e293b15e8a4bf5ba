//! Sessions over the socket: spawn, poll, read, log, wait, stdin, list,
//! notifications and retention (docs/protocol.md).

use crate::common::*;
use serde_json::{json, Value};

#[test]
fn poll_shows_a_running_session_then_its_exit() {
    // R5, R6
    let d = Daemon::start();
    let id = d.spawn("echo first-line; read _; exit 7");
    d.read_until(&id, "first-line");
    let p = d.ok("poll", json!({"session_id": id}));
    assert_eq!(p["status"], "running");
    assert_eq!(p["command"], "echo first-line; read _; exit 7");
    assert!(p["output_preview"].as_str().unwrap().contains("first-line"));
    assert!(
        p.get("exit_code").is_none(),
        "no exit fields while running: {p}"
    );
    d.ok("submit_stdin", json!({"session_id": id, "data": ""}));
    d.wait_exit(&id);
    let p = d.ok("poll", json!({"session_id": id}));
    assert_eq!(p["status"], "exited");
    assert_eq!(p["exit_code"], 7);
    assert_eq!(p["completion_reason"], "exited");
    assert_eq!(p["signal"], Value::Null);
    assert!(p["exited_at"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn output_streams_as_it_arrives() {
    // R8: each line shows up while the process is still running.
    let d = Daemon::start();
    let id = d.spawn("for i in 1 2 3 4 5; do echo tick-$i; sleep 0.1; done; sleep 0.5");
    let mut cursor = 0;
    let mut seen_running = Vec::new();
    loop {
        let r = d.ok(
            "read",
            json!({"session_id": id, "cursor": cursor, "wait_ms": 5000}),
        );
        let data = r["data"].as_str().unwrap();
        if r["status"] == "running" {
            seen_running.extend(data.lines().map(String::from));
        }
        cursor = r["next_cursor"].as_u64().unwrap();
        if r["eof"] == true {
            break;
        }
    }
    let expected: Vec<String> = (1..=5).map(|i| format!("tick-{i}")).collect();
    assert_eq!(
        seen_running, expected,
        "every line was readable before exit"
    );
}

#[test]
fn utf8_split_across_reads_is_decoded_whole() {
    // R9 (pipe): 2-byte char split, 4-byte char split three ways,
    // invalid byte, truncated sequence at EOF.
    let d = Daemon::start();
    let cmd = r"printf 'a\xc3'; sleep 0.2; printf '\xa9b\n'; printf '\xf0'; sleep 0.1; printf '\x9f\x98'; sleep 0.1; printf '\x80\n'; printf 'x\xffy\n'; printf 'end\xe2\x82'";
    let id = d.spawn(cmd);
    let mut text = String::new();
    let mut cursor = 0;
    loop {
        let r = d.ok(
            "read",
            json!({"session_id": id, "cursor": cursor, "wait_ms": 5000}),
        );
        // The store is append-only: a character mangled when it was split
        // would stay mangled in the concatenation checked below. (The
        // truncated tail becomes U+FFFD only once the child has exited, but
        // may be read a moment before the session is marked exited.)
        text.push_str(r["data"].as_str().unwrap());
        cursor = r["next_cursor"].as_u64().unwrap();
        if r["eof"] == true {
            break;
        }
    }
    assert_eq!(text, "aéb\n😀\nx\u{FFFD}y\nend\u{FFFD}");
}

#[test]
fn a_descendant_holding_the_pipe_does_not_keep_the_session_running() {
    // R10, R29
    let d = Daemon::start();
    let id = d.spawn_with(json!({
        "command": "sleep 30 & echo started",
        "notify_on_complete": true,
    }));
    // Exited while the background sleep (30 s) still holds the pipe: the
    // leftover check below shows it still runs.
    let w = d.ok("wait", json!({"session_id": id, "timeout_s": 20}));
    assert_eq!(w["status"], "exited", "{w}");
    assert_eq!(w["exit_code"], 0);
    assert_eq!(w["completion_reason"], "exited");
    assert!(w["output"].as_str().unwrap().contains("started"));
    let leftover = session_pids(&id);
    assert_eq!(leftover.len(), 1, "the background sleep still runs");
    let events = d.ok("drain_notifications", json!({}))["events"].clone();
    let completions: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "completion" && e["session_id"] == id.as_str())
        .collect();
    assert_eq!(completions.len(), 1, "exactly one completion: {events}");
    assert_eq!(completions[0]["exit_code"], 0);
    assert!(completions[0]["text"]
        .as_str()
        .unwrap()
        .contains("completed normally"));
    // Killing the exited session ends the leftover.
    let k = d.ok("kill", json!({"session_id": id}));
    assert_eq!(k["status"], "already_exited");
    assert_eq!(k["orphans_killed"], 1);
    assert!(!alive(leftover[0]));
}

#[test]
fn a_pending_wait_is_woken_by_the_exit() {
    // R10: the wait in progress returns at the exit, not at its timeout.
    let d = Daemon::start();
    let id = d.spawn("read _");
    let mut c = d.connect();
    c.send_raw(
        &json!({"jsonrpc":"2.0","id":1,"method":"wait","params":{"session_id":id,"timeout_s":600}})
            .to_string(),
    );
    d.ok("submit_stdin", json!({"session_id": id, "data": "go"}));
    let r = c.recv();
    assert_eq!(r["result"]["status"], "exited", "{r}");
}

#[test]
fn log_counts_lines_and_honours_offset_and_limit() {
    // R11
    let d = Daemon::start();
    let id = d.spawn("seq 1 100");
    d.wait_exit(&id);
    let r = d.ok("log", json!({"session_id": id, "offset": 10, "limit": 5}));
    assert_eq!(r["total_lines"], 100);
    assert_eq!(r["output"], "11\n12\n13\n14\n15\n");
    assert!(r["showing"].as_str().unwrap().contains("5 lines"), "{r}");
    let r = d.ok("log", json!({"session_id": id, "limit": 3}));
    assert_eq!(r["output"], "98\n99\n100\n");
    let r = d.ok("log", json!({"session_id": id, "offset": 100}));
    assert_eq!(r["output"], "");
    assert!(r["showing"].as_str().unwrap().contains("0 lines"));
}

#[test]
fn log_strips_ansi_escapes() {
    let d = Daemon::start();
    let id = d.spawn(r"printf '\033[31mred\033[0m plain\n'");
    d.wait_exit(&id);
    let r = d.ok("log", json!({"session_id": id}));
    assert_eq!(r["output"], "red plain\n");
}

#[test]
fn shell_noise_is_not_output() {
    let d = Daemon::start();
    let id = d.spawn("sleep 0.01 & echo real; exit 0");
    d.wait_exit(&id);
    let r = d.ok("read", json!({"session_id": id}));
    assert_eq!(
        r["data"], "real\n",
        "job-control warnings, job notices and logout are dropped"
    );
}

#[test]
fn read_cursors_and_long_poll() {
    let d = Daemon::start();
    let id = d.spawn("echo one; read _; echo two");
    d.read_until(&id, "one");
    let r = d.ok("read", json!({"session_id": id, "cursor": 0}));
    assert_eq!(r["data"], "one\n");
    assert_eq!(r["cursor"], 0);
    assert_eq!(r["next_cursor"], 4);
    assert_eq!(r["eof"], false);
    // Nothing new: an immediate read is empty; a long-poll is woken by output.
    let r = d.ok("read", json!({"session_id": id, "cursor": 4}));
    assert_eq!(r["data"], "");
    let mut c = d.connect();
    c.send_raw(&json!({"jsonrpc":"2.0","id":9,"method":"read","params":{"session_id":id,"cursor":4,"wait_ms":60000}}).to_string());
    d.ok("submit_stdin", json!({"session_id": id, "data": ""}));
    let r = c.recv();
    assert_eq!(r["result"]["data"], "two\n", "{r}");
    d.wait_exit(&id);
    let r = d.ok("read", json!({"session_id": id, "cursor": 8}));
    assert_eq!(r["eof"], true);
    assert_eq!(r["exit_code"], 0);
    // Reading does not consume: a second reader sees everything.
    let r = d.ok("read", json!({"session_id": id, "max_bytes": 3}));
    assert_eq!(
        r["data"], "one",
        "max_bytes cuts a long line only when it has no newline"
    );
}

#[test]
fn a_prompt_without_newline_is_returned_once_quiet() {
    let d = Daemon::start();
    let id = d.spawn("printf 'Name: '; read name; echo hi $name");
    let r = d.ok("read", json!({"session_id": id, "wait_ms": 10000}));
    assert_eq!(r["data"], "Name: ");
    d.ok("submit_stdin", json!({"session_id": id, "data": "ann"}));
    d.wait_exit(&id);
    let r = d.ok(
        "read",
        json!({"session_id": id, "cursor": r["next_cursor"]}),
    );
    assert_eq!(r["data"], "hi ann\n");
}

#[test]
fn a_progress_line_redrawn_with_carriage_returns_is_readable_while_it_runs() {
    // The line never pauses and never ends with a newline: without "\r"
    // counting as a line end, a reader would see nothing until it stops.
    let d = Daemon::start();
    let id = d.spawn_with(json!({
        "command": "i=0; while [ ! -e stop ]; do printf 'step %d\\r' $((i+=1)); done; echo; echo finished",
        "cwd": d.home.path(),
    }));
    let r = d.ok("read", json!({"session_id": id, "wait_ms": 10000}));
    let data = r["data"].as_str().unwrap();
    // As much as was there, up to its last redraw (a final "\r" may be
    // half of "\r\n" and waits for what follows it).
    assert!(
        data.starts_with("step 1\r") && data.ends_with('\r'),
        "{data:?}"
    );
    assert_eq!(r["status"], "running");
    std::fs::write(d.home.path().join("stop"), "").unwrap();
    d.wait_exit(&id);
    assert!(d.read_all(&id).ends_with("\r\nfinished\n"));
}

#[test]
fn a_polls_preview_follows_the_output_and_lists_their_own_length() {
    // The preview is made once per output end (docs/decisions.md): a poll
    // after more output shows it, and a list after a poll gets its own
    // 200 characters, not the poll's 1000.
    let d = Daemon::start();
    let id = d.spawn("cat");
    let preview = || d.ok("poll", json!({"session_id": id}))["output_preview"].clone();
    let long = "x".repeat(300);
    d.ok("submit_stdin", json!({"session_id": id, "data": long}));
    wait_until("the first line in the preview", || {
        preview() == format!("{long}\n")
    });
    d.ok("submit_stdin", json!({"session_id": id, "data": "second"}));
    wait_until("the second line in the preview", || {
        preview() == format!("{long}\nsecond\n")
    });
    let listed = d.ok("list", json!({}))["processes"][0]["output_preview"].clone();
    assert_eq!(
        listed,
        format!("{}\nsecond\n", &long[..192]),
        "a list's own length"
    );
    d.ok("close_stdin", json!({"session_id": id}));
    d.wait_exit(&id);
}

#[test]
fn stdin_write_submit_close() {
    // R4 (pipe), R12 (pipe)
    let d = Daemon::start();
    let id = d.spawn("cat");
    let w = d.ok("write_stdin", json!({"session_id": id, "data": "abc"}));
    assert_eq!(w["status"], "ok");
    assert_eq!(w["bytes_written"], 3);
    let s = d.ok("submit_stdin", json!({"session_id": id, "data": "def"}));
    assert_eq!(
        s["bytes_written"], 4,
        "Enter is \\n in pipe mode and counted"
    );
    d.read_until(&id, "abcdef\n");
    let c = d.ok("close_stdin", json!({"session_id": id}));
    assert_eq!(c["message"], "stdin closed");
    let w = d.wait_exit(&id);
    assert_eq!(w["exit_code"], 0, "cat ends at EOF");
    let r = d.ok("write_stdin", json!({"session_id": id, "data": "late"}));
    assert_eq!(r["status"], "already_exited");

    let id = d.spawn("sleep 30");
    d.ok("close_stdin", json!({"session_id": id}));
    let (code, _) = d.err("write_stdin", json!({"session_id": id, "data": "x"}));
    assert_eq!(code, -32002, "writing to closed stdin");
    let (code, _) = d.err("close_stdin", json!({"session_id": id}));
    assert_eq!(code, -32002);
    d.ok("kill", json!({"session_id": id}));

    let id = d.spawn_with(json!({"command": "sleep 30", "stdin": "null"}));
    for method in ["write_stdin", "submit_stdin"] {
        let (code, _) = d.err(method, json!({"session_id": id, "data": "x"}));
        assert_eq!(code, -32002);
    }
    let (code, _) = d.err("close_stdin", json!({"session_id": id}));
    assert_eq!(code, -32002);
    d.ok("kill", json!({"session_id": id}));
}

#[test]
fn a_full_stdin_pipe_blocks_only_that_write() {
    let d = Daemon::start();
    let id = d.spawn("sleep 600");
    let mut c = d.connect();
    let big = "x".repeat(1 << 20); // far more than a pipe holds
    c.send_raw(&json!({"jsonrpc":"2.0","id":1,"method":"write_stdin","params":{"session_id":id,"data":big}}).to_string());
    // The daemon still answers everything else meanwhile.
    let other = d.spawn("echo fine");
    d.wait_exit(&other);
    assert_eq!(d.ok("poll", json!({"session_id": id}))["status"], "running");
    d.ok("kill", json!({"session_id": id}));
    let r = c.recv();
    assert!(
        r["result"]["status"] == "already_exited" || r["error"].is_object(),
        "{r}"
    );
}

#[test]
fn session_ids_resolve_by_unique_prefix() {
    let d = Daemon::start();
    let id = d.spawn("true");
    d.wait_exit(&id);
    let hex = &id[5..];
    for form in [&id[..], &id[..9], &hex[..4], &hex.to_uppercase()[..]] {
        let p = d.ok("poll", json!({"session_id": form}));
        assert_eq!(p["session_id"], id.as_str(), "{form}");
    }
    let (code, msg) = d.err("poll", json!({"session_id": &hex[..3]}));
    assert_eq!(code, -32602, "{msg}");
    let other = if hex.starts_with("ffff") {
        "0000"
    } else {
        "ffff"
    };
    let (code, _) = d.err("poll", json!({"session_id": other}));
    assert_eq!(code, -32001);
}

#[test]
fn list_filters_by_task_and_session_key() {
    // R13
    let d = Daemon::start();
    let a = d.spawn_with(json!({"command": "sleep 30", "task_id": "t1", "session_key": "k"}));
    let b = d.spawn_with(json!({"command": "sleep 30", "task_id": "t2", "session_key": "k"}));
    let c = d.spawn_with(json!({"command": "sleep 30", "task_id": "t3", "session_key": "other"}));
    let ids = listed_ids;
    let only = d.ok("list", json!({"task_id": "t1"}));
    assert_eq!(ids(&only), vec![a.clone()]);
    let scoped = d.ok("list", json!({"task_id": "t1", "session_key": "k"}));
    assert_eq!(ids(&scoped), vec![a.clone(), b.clone()]);
    let procs = scoped["processes"].as_array().unwrap();
    assert!(procs[0].get("session_scoped").is_none());
    assert_eq!(procs[1]["session_scoped"], true);
    assert_eq!(ids(&d.ok("list", json!({}))).len(), 3);
    let entry = &only["processes"][0];
    for field in [
        "cwd",
        "pid",
        "started_at",
        "uptime_seconds",
        "output_preview",
        "pty",
        "persist",
        "notify_on_complete",
        "watch_patterns",
    ] {
        assert!(
            entry.get(field).is_some(),
            "list entry lacks {field}: {entry}"
        );
    }
    assert_eq!(d.ok("kill_all", json!({}))["killed"], 3);
    assert_eq!(ids(&d.ok("list", json!({"status": "running"}))).len(), 0);
    assert_eq!(
        ids(&d.ok("list", json!({"status": "exited"}))),
        vec![a, b, c]
    );
}

#[test]
fn list_pages_walk_every_session_once_while_they_exit() {
    let d = Daemon::start();
    let spawned: Vec<String> = (0..7).map(|_| d.spawn("sleep 30")).collect();
    let ids = listed_ids;
    let whole = ids(&d.ok("list", json!({})));
    assert_eq!(whole, spawned, "list is in start order");

    // Pages of 3 give the whole list, each once, and say where to go on.
    let first = d.ok("list", json!({"limit": 3}));
    assert_eq!(ids(&first), whole[..3]);
    assert_eq!(first["next_after"], whole[2].as_str());
    let second = d.ok("list", json!({"limit": 3, "after": first["next_after"]}));
    assert_eq!(ids(&second), whole[3..6]);
    let last = d.ok("list", json!({"limit": 3, "after": second["next_after"]}));
    assert_eq!(ids(&last), whole[6..]);
    assert!(last.get("next_after").is_none(), "the last page: {last}");
    // A page that ends exactly at the end does not promise another.
    let exact = d.ok("list", json!({"limit": 1, "after": whole[5]}));
    assert_eq!(ids(&exact), whole[6..]);
    assert!(exact.get("next_after").is_none(), "{exact}");

    // The session a running-only walk stopped at exits before the next
    // page: the walk goes on after it, and shows none twice.
    let page = d.ok("list", json!({"status": "running", "limit": 2}));
    assert_eq!(ids(&page), whole[..2]);
    let cursor = page["next_after"].as_str().unwrap().to_string();
    d.ok("kill", json!({"session_id": cursor, "grace_s": 0}));
    wait_until("the cursor's session exited", || {
        d.ok("poll", json!({"session_id": cursor}))["status"] == "exited"
    });
    let rest = d.ok("list", json!({"status": "running", "after": cursor}));
    assert_eq!(ids(&rest), whole[2..]);

    // A cursor procd does not know, and a page size out of range, are
    // refused by name.
    let (code, msg) = d.err("list", json!({"after": "proc_000000000000"}));
    assert_eq!(code, -32001);
    assert!(msg.contains("after"), "{msg}");
    for bad in [json!(0), json!(10_001), json!(2.5), json!("3")] {
        let (code, msg) = d.err("list", json!({ "limit": bad }));
        assert_eq!(
            (code, msg.contains("limit")),
            (-32602, true),
            "{bad}: {msg}"
        );
    }
    assert_eq!(ids(&d.ok("list", json!({"limit": 10_000}))), whole);

    // procd ps pages with --limit, and says how to go on.
    let out = d.cli(&["ps", "--limit", "4"]);
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout);
    let shown: Vec<&String> = whole
        .iter()
        .filter(|id| table.contains(id.as_str()))
        .collect();
    assert_eq!(shown, whole[..4].iter().collect::<Vec<_>>(), "{table}");
    let more = String::from_utf8_lossy(&out.stderr);
    assert!(
        more.contains(&format!("procd ps --after {}", whole[3])),
        "{more}"
    );
    let out = d.cli(&["ps", "--after", &whole[3]]);
    let table = String::from_utf8_lossy(&out.stdout);
    let shown: Vec<&String> = whole
        .iter()
        .filter(|id| table.contains(id.as_str()))
        .collect();
    assert_eq!(shown, whole[4..].iter().collect::<Vec<_>>(), "{table}");
    assert!(out.stderr.is_empty(), "{out:?}");
    d.ok("kill_all", json!({}));
}

#[test]
fn has_active_by_task_key_and_age() {
    // R14
    let d = Daemon::start();
    d.spawn_with(json!({"command": "sleep 30", "task_id": "t", "session_key": "k"}));
    let r = d.ok("has_active", json!({"task_id": "t"}));
    assert_eq!(r, json!({"active": true, "count": 1}));
    assert_eq!(
        d.ok("has_active", json!({"task_id": "nope"}))["active"],
        false
    );
    assert_eq!(
        d.ok(
            "has_active",
            json!({"session_key": "k", "max_active_age_s": 3600})
        )["count"],
        1
    );
    // Older than an age of 0 s: ignored.
    assert_eq!(
        d.ok(
            "has_active",
            json!({"session_key": "k", "max_active_age_s": 0})
        )["active"],
        false
    );
    d.ok("kill_all", json!({"task_id": "t"}));
    assert_eq!(d.ok("has_active", json!({"task_id": "t"}))["active"], false);
}

#[test]
fn retention_keeps_at_most_max_sessions_earliest_exited_first() {
    // R15 (count)
    let d = Daemon::with_config("max_sessions = 3");
    let mut ids = Vec::new();
    for i in 0..3 {
        let id = d.spawn(&format!("echo {i}"));
        d.wait_exit(&id);
        ids.push(id);
    }
    let running = d.spawn("sleep 30");
    let listed = || -> Vec<String> {
        d.ok("list", json!({}))["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["session_id"].as_str().unwrap().to_string())
            .collect()
    };
    let now = listed();
    assert_eq!(now.len(), 3, "{now:?}");
    assert!(
        !now.contains(&ids[0]),
        "the earliest-exited session was pruned"
    );
    assert!(now.contains(&running));
    let pruned_log = d.state_dir().join(format!("logs/{}.log", ids[0]));
    wait_until("its log is deleted", || !pruned_log.exists());
    d.ok("kill", json!({"session_id": running}));
}

/// Spawn after spawn at the cap, the one dropped is always the finished
/// session that exited earliest, also when exits come in another order
/// than starts (the order is kept across spawns, not re-sorted per spawn).
#[test]
fn retention_at_the_cap_drops_in_exit_order_spawn_after_spawn() {
    let d = Daemon::with_config("max_sessions = 3");
    // The ids listed, and those expected, in one order (the list's is by
    // start, and the expected ones are named in exit order).
    let listed = || {
        let mut ids = listed_ids(&d.ok("list", json!({})));
        ids.sort();
        ids
    };
    let sorted = |ids: [&String; 3]| {
        let mut ids = ids.map(String::clone);
        ids.sort();
        ids.to_vec()
    };
    let a = d.spawn("sleep 60");
    let b = d.spawn("true");
    d.wait_exit(&b);
    let c = d.spawn("true");
    d.wait_exit(&c);
    d.ok("kill", json!({"session_id": a}));
    d.wait_exit(&a);
    // Exited: b, c, a, in that order.
    let e = d.spawn("true");
    assert_eq!(listed(), sorted([&c, &a, &e]), "b exited first");
    d.wait_exit(&e);
    let f = d.spawn("true");
    assert_eq!(listed(), sorted([&a, &e, &f]), "then c");
    d.wait_exit(&f);
    let g = d.spawn("true");
    assert_eq!(
        listed(),
        sorted([&e, &f, &g]),
        "then a, started first but exited after c"
    );
    d.wait_exit(&g);
    let h = d.spawn("true");
    assert_eq!(
        listed(),
        sorted([&f, &g, &h]),
        "then e, exited after the order was taken"
    );
    d.wait_exit(&h);
}

#[test]
fn retention_prunes_finished_sessions_after_the_ttl() {
    // R15 (TTL)
    let d = Daemon::with_config("finished_ttl_s = 0.3\nmonitor_interval_s = 0.1");
    let done = d.spawn("true");
    let alive_one = d.spawn("sleep 30");
    d.wait_exit(&done);
    wait_until("the finished session is pruned", || {
        d.call("poll", json!({"session_id": done}))["error"]["code"] == -32001
    });
    assert_eq!(
        d.ok("poll", json!({"session_id": alive_one}))["status"],
        "running"
    );
    d.ok("kill", json!({"session_id": alive_one}));
}

#[test]
fn max_running_refuses_with_limit_reached() {
    let d = Daemon::with_config("max_running = 2");
    let a = d.spawn("sleep 30");
    let b = d.spawn("sleep 30");
    let (code, msg) = d.err("spawn", json!({"command": "sleep 30"}));
    assert_eq!(code, -32004, "{msg}");
    d.ok("kill", json!({"session_id": a}));
    let c = d.spawn("sleep 30");
    d.ok("kill_all", json!({}));
    let _ = (b, c);
}

#[test]
fn a_failed_spawn_leaves_nothing() {
    // R17
    let d = Daemon::with_config("shell = [\"/nonexistent/shell\", \"-c\"]");
    let (code, msg) = d.err("spawn", json!({"command": "echo hi"}));
    assert_eq!(code, -32003);
    assert!(
        msg.contains("No such file"),
        "the OS error is carried: {msg}"
    );
    assert_eq!(d.ok("list", json!({}))["processes"], json!([]));
    // The spare the next session's log is made from is a dot file.
    let logs: Vec<_> = std::fs::read_dir(d.state_dir().join("logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".spare.log")
        .collect();
    assert!(logs.is_empty(), "a log file is left behind: {logs:?}");
}

/// A session's log is the spare made ahead of time (renamed: no file is
/// made on the spawn's path), another spare follows, and a spare a dead
/// daemon left is removed by the next one.
#[test]
fn a_session_log_is_the_spare_made_before_it() {
    use std::os::unix::fs::MetadataExt;
    let d = Daemon::start();
    let logs = d.state_dir().join("logs");
    let spare = logs.join(".spare.log");
    d.spawn("true");
    wait_until("a spare log is made", || spare.exists());
    let inode = std::fs::metadata(&spare).unwrap().ino();
    let id = d.spawn("echo into-the-spare");
    d.wait_exit(&id);
    let log = logs.join(format!("{id}.log"));
    assert_eq!(
        std::fs::metadata(&log).unwrap().ino(),
        inode,
        "not the spare"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "into-the-spare\n");
    wait_until("the next spare is made", || {
        std::fs::metadata(&spare).is_ok_and(|m| m.ino() != inode)
    });
    assert!(spare.exists());
    d.kill_daemon();
    // The next daemon removed it as it started; its own comes with a spawn.
    assert!(!spare.exists(), "a dead daemon's spare is left");
    d.spawn("true");
    wait_until("the new daemon's spare is made", || spare.exists());
}

#[test]
fn environment_is_sanitised_and_marked() {
    // R16 (daemon side: caller env, force prefix, marker, PYTHONUNBUFFERED)
    let d = Daemon::start();
    let id = d.spawn_with(json!({
        "command": "echo \"custom=$MY_VAR secret=${STRIPE_SECRET:-none} forced=${GH_TOKEN:-none} force_name=${PROCD_FORCE_GH_TOKEN:-none} py=$PYTHONUNBUFFERED id=$PROCD_SESSION_ID\"",
        "env": {"MY_VAR": "kept", "STRIPE_SECRET": "dropped", "PROCD_FORCE_GH_TOKEN": "forced-value"},
    }));
    d.wait_exit(&id);
    let out = d.read_all(&id);
    assert_eq!(
        out.trim(),
        format!("custom=kept secret=none forced=forced-value force_name=none py=1 id={id}")
    );
}

#[test]
fn compound_background_is_rewritten_but_recorded_as_given() {
    // R19: `A && B &` must not leave a subshell holding the output pipe.
    let d = Daemon::start();
    let cmd = "cd /tmp && sleep 30 &>/dev/null &";
    let id = d.spawn(cmd);
    d.wait_exit(&id);
    let pids = session_pids(&id);
    let names: Vec<String> = pids.iter().map(|p| comm(*p)).collect();
    assert_eq!(names, vec!["sleep"], "only the sleep remains, no subshell");
    assert_eq!(d.ok("poll", json!({"session_id": id}))["command"], cmd);
    d.ok("kill", json!({"session_id": id}));
    assert!(pids.iter().all(|p| !alive(*p)));
}

#[test]
fn drain_notifications_respects_session_keys() {
    // R23
    let d = Daemon::start();
    let spawn = |key: Option<&str>, tag: &str| {
        let mut p = json!({"command": format!("echo {tag}"), "notify_on_complete": true});
        if let Some(k) = key {
            p["session_key"] = json!(k);
        }
        let id = d.spawn_with(p);
        d.wait_exit(&id);
        id
    };
    let a1 = spawn(Some("a"), "a1");
    let b1 = spawn(Some("b"), "b1");
    let free = spawn(None, "free");
    let a2 = spawn(Some("a"), "a2");
    let old = spawn(Some("a-old"), "old");
    let got = |v: Value| -> Vec<String> {
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["session_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        got(d.ok("drain_notifications", json!({"session_key": "a"}))),
        vec![a1, free, a2]
    );
    assert_eq!(
        got(d.ok("drain_notifications", json!({"session_key": "c"}))),
        Vec::<String>::new()
    );
    assert_eq!(
        got(d.ok(
            "drain_notifications",
            json!({"session_key": "a", "owned_keys": ["a-old"]})
        )),
        vec![old]
    );
    assert_eq!(
        got(d.ok("drain_notifications", json!({"session_key": "b"}))),
        vec![b1]
    );
    assert_eq!(
        got(d.ok("drain_notifications", json!({}))),
        Vec::<String>::new()
    );
}

#[test]
fn the_log_cap_drops_the_oldest_output_and_says_so() {
    let d = Daemon::with_config("max_log_bytes = 8192\nmemory_tail_bytes = 1024");
    let id = d.spawn("seq 1 5000");
    d.wait_exit(&id);
    let r = d.ok(
        "read",
        json!({"session_id": id, "cursor": 0, "max_bytes": 100}),
    );
    let dropped = r["dropped"].as_u64().unwrap();
    assert!(dropped > 0, "{r}");
    assert_eq!(r["cursor"].as_u64().unwrap(), dropped);
    let size = std::fs::metadata(d.state_dir().join(format!("logs/{id}.log")))
        .unwrap()
        .len();
    assert!(size <= 8192, "log file capped: {size}");
    let tail = d.ok("log", json!({"session_id": id, "limit": 1}));
    assert_eq!(tail["output"], "5000\n");
    // Line numbers stay exact across the drops: lines first..=5000 remain.
    let first = d.ok("log", json!({"session_id": id, "offset": 0, "limit": 1}));
    let first: u64 = first["output"].as_str().unwrap().trim().parse().unwrap();
    assert_eq!(tail["total_lines"].as_u64(), Some(5000 - first + 1));
    let end = d.ok("read", json!({"session_id": id, "cursor": 23_893 - 5}));
    assert_eq!(end["data"], "5000\n");
    assert_eq!(end["eof"], true);
}

#[test]
fn after_a_flood_the_log_is_plain_capped_text_again_once_output_is_quiet() {
    // During a flood the log's head is punched out (a hole of zeros, kept
    // size); a second of quiet collapses it, while the session runs on.
    let d = Daemon::with_config("max_log_bytes = 65536");
    let id = d.spawn("seq 1 300000; echo quiet now; read _");
    let log = d.state_dir().join(format!("logs/{id}.log"));
    wait_until("the flood is over and its log tidied", || {
        let bytes = std::fs::read(&log).unwrap_or_default();
        bytes.ends_with(b"quiet now\n") && !bytes.contains(&0) && bytes.len() <= 65536 + 4096
    });
    let polled = d.ok("poll", json!({"session_id": id}));
    assert_eq!(polled["status"], "running");
    let r = d.ok(
        "read",
        json!({"session_id": id, "cursor": 0, "max_bytes": 1 << 20}),
    );
    assert!(
        r["dropped"].as_u64().unwrap() > 1_000_000,
        "{}",
        r["dropped"]
    );
    let data = r["data"].as_str().unwrap();
    assert!(data.ends_with("300000\nquiet now\n") && !data.contains('\0'));
    let last = d.ok("log", json!({"session_id": id, "limit": 2}));
    assert_eq!(last["output"], "300000\nquiet now\n");
    d.ok("kill", json!({"session_id": id}));
}

/// 1000 concurrent kill, write, poll and resize calls on one session
/// across its exits, restarts and its final kill (issue 49: one session,
/// one owner): every call is answered within a deadline, and the answers
/// fit one order of events — a poll never sees fewer restarts than one
/// that ended before it began, nothing after the kill's answer sees it
/// running, and no call meets an error it should not.
#[test]
fn a_thousand_concurrent_calls_on_one_session_fit_one_order_of_events() {
    use std::time::Instant;
    let d = Daemon::start();
    let id = d.spawn_with(json!({
        "command": "read x; exit 3",
        "pty": true,
        "restart": {"policy": "on-failure", "max_restarts": 1000000, "backoff_s": 0.1},
    }));
    #[derive(Debug)]
    struct Call {
        method: &'static str,
        began: Instant,
        ended: Instant,
        answer: Value,
    }
    const THREADS: usize = 8;
    const EACH: usize = 125;
    // Thread 0 kills once its polls have seen 3 restarts; every thread
    // goes on until it has made EACH calls and 20 after the kill.
    let killed = std::sync::atomic::AtomicBool::new(false);
    let began = Instant::now();
    let calls: Vec<Call> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (d, id, killed) = (&d, id.clone(), &killed);
                scope.spawn(move || {
                    let mut conn = d.connect();
                    let mut calls = Vec::with_capacity(EACH);
                    let (mut seen_restarts, mut after_kill) = (0, 0);
                    for i in 0.. {
                        use std::sync::atomic::Ordering::SeqCst;
                        let kill_now = t == 0 && seen_restarts >= 3 && !killed.load(SeqCst);
                        let (method, params) = match i % 3 {
                            _ if kill_now => ("kill", json!({"session_id": id})),
                            0 => ("poll", json!({"session_id": id})),
                            1 => ("write_stdin", json!({"session_id": id, "data": "x\r"})),
                            _ => (
                                "resize",
                                json!({"session_id": id, "rows": 20 + i % 10, "cols": 80}),
                            ),
                        };
                        let start = Instant::now();
                        let answer = conn.call(method, params);
                        seen_restarts =
                            seen_restarts.max(answer["result"]["restarts"].as_u64().unwrap_or(0));
                        calls.push(Call {
                            method,
                            began: start,
                            ended: Instant::now(),
                            answer,
                        });
                        if kill_now {
                            killed.store(true, SeqCst);
                        }
                        if killed.load(SeqCst) {
                            after_kill += 1;
                        }
                        if calls.len() >= EACH && after_kill >= 20 {
                            break;
                        }
                        assert!(
                            began.elapsed() < std::time::Duration::from_secs(60),
                            "no end in sight: {} calls, {seen_restarts} restarts",
                            calls.len()
                        );
                    }
                    calls
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a worker"))
            .collect()
    });
    assert!(calls.len() >= THREADS * EACH, "{} calls", calls.len());
    assert!(
        began.elapsed() < std::time::Duration::from_secs(120),
        "took {:?}",
        began.elapsed()
    );

    // Errors: only "not possible now" (-32002: a write or resize meeting
    // an ended run), never a lost session or anything else.
    for c in &calls {
        if let Some(e) = c.answer.get("error") {
            assert_eq!(e["code"], -32002, "{} answered {}", c.method, c.answer);
        }
    }
    let kill = calls.iter().find(|c| c.method == "kill").expect("the kill");
    assert_eq!(kill.answer["result"]["status"], "killed", "{}", kill.answer);
    let restarts = |c: &Call| c.answer["result"]["restarts"].as_u64().unwrap_or(0);
    let polls: Vec<&Call> = calls.iter().filter(|c| c.method == "poll").collect();
    for c in &calls {
        if c.began <= kill.ended {
            continue;
        }
        // Begun after the kill was answered: the session has ended.
        match c.method {
            "poll" => {
                let r = &c.answer["result"];
                assert_eq!(
                    (r["status"].as_str(), r["completion_reason"].as_str()),
                    (Some("exited"), Some("killed")),
                    "{r}"
                );
            }
            "write_stdin" => assert!(
                c.answer["result"]["status"] == "already_exited"
                    || c.answer["error"]["code"] == -32002,
                "{}",
                c.answer
            ),
            "resize" => assert_eq!(c.answer["error"]["code"], -32002, "{}", c.answer),
            _ => {}
        }
    }
    for a in &polls {
        for b in polls.iter().filter(|b| b.began > a.ended) {
            assert!(
                restarts(a) <= restarts(b),
                "restarts went back: {} then {}",
                a.answer,
                b.answer
            );
            if a.answer["result"]["completion_reason"] == "killed" {
                assert_eq!(
                    b.answer["result"]["status"], "exited",
                    "{} then {}",
                    a.answer, b.answer
                );
            }
        }
    }
    // It really restarted in between.
    assert!(
        polls.iter().map(|c| restarts(c)).max() >= Some(1),
        "no restart happened"
    );
}

/// The daemon's descriptors open on one of these sessions' logs.
fn open_logs(d: &Daemon, ids: &[String]) -> Vec<String> {
    d.fds()
        .into_iter()
        .map(|(_, target)| target)
        .filter(|target| ids.iter().any(|id| target.contains(&format!("{id}.log"))))
        .collect()
}

#[test]
fn an_ended_session_holds_no_descriptor_and_its_output_still_reads() {
    // A retained session's log is opened for each read, so 10 000 ended
    // sessions hold no 10 000 descriptors. A 1 KiB memory tail makes the
    // reads below come from the file.
    let mut d = Daemon::with_config("memory_tail_bytes = 1024");
    let ids: Vec<String> = (0..8)
        .map(|i| d.spawn(&format!("seq 1 2000; echo end-{i}")))
        .collect();
    let check = |d: &Daemon, when: &str| {
        wait_until(&format!("no log held open {when}"), || {
            open_logs(d, &ids).is_empty()
        });
        for (i, id) in ids.iter().enumerate() {
            let r = d.ok(
                "read",
                json!({"session_id": id, "cursor": 0, "max_bytes": 10}),
            );
            assert_eq!(r["data"], "1\n2\n3\n4\n5\n", "{when}: {r}");
            let r = d.ok("log", json!({"session_id": id, "offset": 1000, "limit": 2}));
            assert_eq!(r["output"], "1001\n1002\n", "{when}: {r}");
            let r = d.ok("log", json!({"session_id": id, "limit": 1}));
            assert_eq!(r["output"], format!("end-{i}\n"), "{when}: {r}");
        }
        assert!(
            open_logs(d, &ids).is_empty(),
            "a read left a log open {when}"
        );
    };
    for id in &ids {
        d.wait_exit(id);
    }
    check(&d, "after the exits");
    // Listed again by the next daemon, as ended: no log held either.
    d.stop();
    d.restart();
    check(&d, "after a daemon restart");
}
