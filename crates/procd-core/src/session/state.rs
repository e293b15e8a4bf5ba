//! What a session's state is made of: how it ended, why procd is ending
//! it, and what a caller may change of it (`Session`'s view holds them).

use procd_proto::CompletionReason;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// How a session ended.
#[derive(Debug, Clone)]
pub struct ExitRecord {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: CompletionReason,
    pub source: Option<String>,
    pub exited_at: SystemTime,
    pub exited_instant: Instant,
}

#[derive(Debug, Clone)]
pub enum SessionState {
    Running,
    Exited(Arc<ExitRecord>),
}

impl SessionState {
    pub fn exit(&self) -> Option<&Arc<ExitRecord>> {
        match self {
            SessionState::Running => None,
            SessionState::Exited(e) => Some(e),
        }
    }
}

/// Why a termination was requested (recorded before signalling, so the
/// supervisor reports the exit as killed/timeout rather than exited).
#[derive(Debug, Clone)]
pub struct Termination {
    pub reason: CompletionReason,
    pub source: String,
}

/// What a caller may change of a running session (`update`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Asks {
    pub watch_patterns: Arc<[String]>,
    pub meta: Option<Arc<serde_json::Value>>,
}
