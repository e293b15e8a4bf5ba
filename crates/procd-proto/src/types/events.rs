//! The events procd sends: queued ones (drained, streamed) and live-only
//! ones (streamed), and how a subscription carries them.

use super::{CompletionReason, ExitInfo};
use serde::{Deserialize, Serialize};

/// Whose a queued event is, and what it says (docs/protocol.md): every queued
/// event carries these, flattened beside its own fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct About {
    pub session_id: String,
    pub session_key: Option<String>,
    pub task_id: Option<String>,
    pub command: String,
    /// A short human summary for an agent.
    pub text: String,
    /// The session's `meta`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
}

/// Every event procd sends, by its `type`: the queued ones (consumed by
/// `drain_notifications`, streamed to `subscribe_events`) carry `About`;
/// the live-only ones (`started`, `exited`, `port`, `close_terminal`,
/// `lagged`) go to `subscribe_events` subscribers only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A session ended (sessions with `notify_on_complete`).
    Completion {
        #[serde(flatten)]
        about: About,
        exit_code: Option<i32>,
        completion_reason: CompletionReason,
        termination_source: Option<String>,
        /// The last 2000 characters of output, redacted.
        output: String,
        started_at: String,
        exited_at: String,
        /// A recognised test runner's results (docs/agents.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tests: Option<crate::TestSummary>,
    },
    /// An output line contained a watch pattern.
    WatchMatch {
        #[serde(flatten)]
        about: About,
        pattern: String,
        /// The matching line and up to 20 following lines.
        output: String,
        /// Matches since the last delivery that were not delivered.
        suppressed: u32,
    },
    /// The delivery cap was reached: watching stopped, completion is on.
    WatchDisabled {
        #[serde(flatten)]
        about: About,
        deliveries: u32,
    },
    /// The ready condition was met (docs/agents.md).
    Ready {
        #[serde(flatten)]
        about: About,
        after_ms: u64,
        ports: Vec<u16>,
    },
    /// The ready condition was not met within `timeout_s`.
    ReadyTimeout {
        #[serde(flatten)]
        about: About,
        timeout_s: f64,
    },
    /// The session waits for input; `prompt` is its last line.
    InputWanted {
        #[serde(flatten)]
        about: About,
        prompt: String,
    },
    /// The session's command ended and was started again (run 2 is the
    /// first restart); `last_exit` is how the previous run ended.
    Restarted {
        #[serde(flatten)]
        about: About,
        run: u32,
        last_exit: ExitInfo,
    },
    /// The kernel's OOM killer ended a process of the session's tree
    /// (its memory limit); `pid` is null where the kernel does not say.
    Oom {
        #[serde(flatten)]
        about: About,
        pid: Option<i32>,
        oom_kills: u64,
    },
    Started {
        session_id: String,
        pid: i32,
        command: String,
        task_id: Option<String>,
        session_key: Option<String>,
        pty: bool,
        started_at: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        meta: Option<serde_json::Value>,
    },
    Exited {
        session_id: String,
        command: String,
        task_id: Option<String>,
        session_key: Option<String>,
        exit_code: Option<i32>,
        signal: Option<String>,
        completion_reason: CompletionReason,
        termination_source: Option<String>,
        exited_at: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        meta: Option<serde_json::Value>,
    },
    /// The session's tree started listening on a port.
    Port { session_id: String, port: u16 },
    /// A UI asked to drop its view of the session (`close_terminal`).
    CloseTerminal { session_id: String },
    /// This subscriber fell behind: `missed` events were not delivered.
    Lagged { missed: u64 },
}

/// An event as `subscribe_events` streams it: its sequence number beside
/// its fields. Every event has one but a UI's `close_terminal` and
/// `lagged`; a subscriber resumes after the last it saw with `since`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamedEvent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(flatten)]
    pub event: Event,
}

impl Event {
    /// The owner and summary of a queued event (None for live-only ones).
    pub fn about(&self) -> Option<&About> {
        match self {
            Event::Completion { about, .. }
            | Event::WatchMatch { about, .. }
            | Event::WatchDisabled { about, .. }
            | Event::Ready { about, .. }
            | Event::ReadyTimeout { about, .. }
            | Event::InputWanted { about, .. }
            | Event::Restarted { about, .. }
            | Event::Oom { about, .. } => Some(about),
            _ => None,
        }
    }

    /// The session it is about, if any.
    pub fn session_id(&self) -> Option<&str> {
        match self {
            Event::Started { session_id, .. }
            | Event::Exited { session_id, .. }
            | Event::Port { session_id, .. }
            | Event::CloseTerminal { session_id } => Some(session_id),
            Event::Lagged { .. } => None,
            other => other.about().map(|a| a.session_id.as_str()),
        }
    }

    /// The session key a drain must name to consume it.
    pub fn session_key(&self) -> Option<&str> {
        self.about().and_then(|a| a.session_key.as_deref())
    }

    /// The summary written for a model (queued events only).
    pub fn text(&self) -> Option<&str> {
        self.about().map(|a| a.text.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrainResult {
    pub events: Vec<Event>,
}
