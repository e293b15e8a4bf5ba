//! A queued spawn as results show it (docs/queues.md).

use serde::{Deserialize, Serialize};

/// A queued spawn's place, or how long a started one waited for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueInfo {
    pub name: String,
    /// Its place in the queue, 1 first; absent once it has started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// How long it has waited (or waited, once started).
    pub queued_ms: u64,
    /// Why it still waits, in words ("2 of 2 slots taken", "memory
    /// pressure 34% > 20%").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}
