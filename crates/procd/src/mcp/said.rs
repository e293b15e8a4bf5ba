//! What the model reads. Claude Code, Codex and VS Code show the model
//! only `structuredContent` when a result has it, so every fact the text
//! gives is also a field there: `summary` is the text's sentence, and the
//! session's state (`waiting_for_input` with its `prompt`, `ready`,
//! `ports`, `resources`) is merged beside the method's own result.

use jsonrpsee::core::client::Error as ClientError;
use procd_proto::{PollResult, Resources, SessionStatus, TestSummary};
use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;
use serde_json::{Map, Value};

/// A running session's state beyond its output, from a poll.
#[derive(Debug, Clone, Serialize)]
pub struct Now {
    pub waiting_for_input: bool,
    /// What it asks (its last line), when it waits for input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    pub ready: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_after_ms: Option<u64>,
    pub ports: Vec<u16>,
    /// Files under its cwd changed after it started (docs/stacks.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<procd_proto::StaleInfo>,
    pub resources: Resources,
    /// A recognised test run's counts and failures (docs/agents.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests: Option<TestSummary>,
    #[serde(skip)]
    running: bool,
}

impl Now {
    pub fn of(p: &PollResult) -> Now {
        let waiting = p.activity.waiting_for_input && p.status == SessionStatus::Running;
        Now {
            waiting_for_input: waiting,
            prompt: p.activity.prompt.clone().filter(|_| waiting),
            ready: p.activity.ready,
            ready_after_ms: p.activity.ready_after_ms,
            ports: p.activity.ports.clone(),
            stale: p.activity.stale.clone(),
            resources: p.activity.resources.clone(),
            tests: p.tests.clone(),
            running: p.status == SessionStatus::Running,
        }
    }

    /// " [ready (after 120 ms); listening on port(s) [3000]; …]", or ""
    /// for a session that is not running or shows nothing.
    pub fn words(&self) -> String {
        let tests = self.tests.as_ref().map(procd_core::testrun::text);
        if !self.running {
            return tests.map(|t| format!(" [{t}]")).unwrap_or_default();
        }
        let mut words: Vec<String> = tests.into_iter().collect();
        match (self.ready, self.ready_after_ms) {
            (Some(true), Some(ms)) => words.push(format!("ready (after {ms} ms)")),
            (Some(_), _) => words.push("not ready yet".to_string()),
            (None, _) => {}
        }
        if !self.ports.is_empty() {
            words.push(format!("listening on port(s) {:?}", self.ports));
        }
        let r = &self.resources;
        if r.procs > 0 {
            words.push(format!(
                "{} process(es), {:.0} MB memory, {:.1} s CPU",
                r.procs,
                r.rss_bytes as f64 / 1e6,
                r.cpu_seconds
            ));
        }
        if let Some(stale) = &self.stale {
            words.push(stale_words(stale));
        }
        if self.waiting_for_input {
            words.push(match &self.prompt {
                Some(p) if !p.is_empty() => {
                    format!("WAITING FOR INPUT at {p:?}: answer with `write`")
                }
                _ => "WAITING FOR INPUT: answer with `write`".to_string(),
            });
        }
        if words.is_empty() {
            String::new()
        } else {
            format!(" [{}]", words.join("; "))
        }
    }
}

/// "STALE: started before src/app.ts changed; restart it".
pub fn stale_words(stale: &procd_proto::StaleInfo) -> String {
    let files = match stale.files.as_slice() {
        [] => "its files".to_string(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} (and {} more)", rest.len()),
    };
    format!("STALE: started before {files} changed; restart it to serve the new code")
}

/// One answer: `summary` (the sentence), then the output it introduces
/// (`body`) in the text; in `structuredContent`, the result's fields with
/// `summary` and the state beside them.
pub fn answer<T: Serialize>(
    summary: String,
    body: Option<&str>,
    result: &T,
    now: Option<&Now>,
) -> CallToolResult {
    let mut fields = match serde_json::to_value(result) {
        Ok(Value::Object(map)) => map,
        Ok(other) => Map::from_iter([("result".to_string(), other)]),
        Err(_) => Map::new(),
    };
    if let Some(Value::Object(state)) = now.and_then(|n| serde_json::to_value(n).ok()) {
        fields.extend(state);
    }
    fields.insert("summary".into(), Value::String(summary.clone()));
    let text = match body {
        Some(body) => format!("{summary}\n{body}"),
        None => summary,
    };
    let mut r = CallToolResult::structured(Value::Object(fields));
    r.content = vec![ContentBlock::text(text)];
    r
}

/// A tool error: the text alone (clients show an error's text).
pub fn failed(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// A tool error a model can act on.
pub fn tool_error(e: ClientError) -> CallToolResult {
    let message = match &e {
        ClientError::Call(obj) => match obj.code() {
            procd_proto::error::SESSION_NOT_FOUND => format!(
                "{} Call `list` to see the sessions and their ids.",
                obj.message()
            ),
            procd_proto::error::INVALID_PARAMS => format!("Invalid arguments: {}", obj.message()),
            procd_proto::error::WRONG_STATE => format!("Not possible now: {}", obj.message()),
            _ => obj.message().to_string(),
        },
        other => format!("procd did not answer: {other}. Try again; if it persists, the daemon may have stopped."),
    };
    failed(message)
}

/// The error of a call that changes something (`may_have`: what it may
/// have done). When the connection broke before the answer, the daemon
/// may have done it and died (its successor has the result), so the
/// model is told to look before it repeats the call, not just to retry.
pub fn change_error(e: ClientError, may_have: &str) -> CallToolResult {
    if !procd_client::is_disconnect(&e) {
        return tool_error(e);
    }
    failed(format!(
        "The connection to procd broke before it answered ({e}); a daemon that died comes back by itself. {may_have}"
    ))
}

/// "running", or how it exited, in the words `ending` uses for the code.
pub fn exit_words(exit: &Option<procd_proto::ExitInfo>) -> String {
    match exit {
        None => "running".into(),
        Some(e) => match (e.exit_code, &e.signal) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(signal)) => format!("was ended by {signal}"),
            (None, None) => "exited (exit code unknown)".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_session_is_said_plainly_with_its_files() {
        let stale = |files: &[&str]| procd_proto::StaleInfo {
            since: "2026-12-05T07:31:39.545Z".into(),
            files: files.iter().map(|f| f.to_string()).collect(),
        };
        assert_eq!(
            super::stale_words(&stale(&["src/app.ts"])),
            "STALE: started before src/app.ts changed; restart it to serve the new code"
        );
        assert!(super::stale_words(&stale(&["a.ts", "b.ts", "c.ts"]))
            .starts_with("STALE: started before a.ts (and 2 more) changed"));
    }

    #[test]
    fn the_structured_answer_carries_the_summary_and_the_state() {
        #[derive(Serialize)]
        struct R {
            session_id: &'static str,
            ready: Option<bool>,
        }
        let now = Now {
            waiting_for_input: true,
            prompt: Some("Name? ".into()),
            ready: Some(true),
            ready_after_ms: Some(5),
            ports: vec![3000],
            stale: None,
            resources: Resources::default(),
            tests: None,
            running: true,
        };
        let r = answer(
            format!("proc_1: running{}.", now.words()),
            Some("out"),
            &R {
                session_id: "proc_1",
                ready: None,
            },
            Some(&now),
        );
        let s = serde_json::to_string(&r.structured_content).unwrap();
        for cue in [
            "WAITING FOR INPUT",
            "Name? ",
            "3000",
            "\"ready\":true",
            "proc_1",
        ] {
            assert!(s.contains(cue), "{cue} in {s}");
        }
        assert!(
            !s.contains("out"),
            "the output is not repeated in the summary"
        );
    }
}
