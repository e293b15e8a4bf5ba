//! A test run as results show it (docs/agents.md, "Test runs").

use serde::{Deserialize, Serialize};

/// What a recognised test runner said of its run (docs/agents.md, "Test
/// runs"): in `poll`, `wait` and the completion event. While the run goes
/// on the counts are its per-test lines so far; `finished` turns true when
/// the runner's own totals were read, and then the counts are those. A run
/// whose output procd cannot follow to its totals gets no summary at all,
/// never a wrong one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestSummary {
    /// "cargo test", "nextest", "pytest", "jest", "vitest", "node --test",
    /// "go test" or "junit".
    pub runner: String,
    pub passed: u64,
    /// Failed, errored and timed-out tests.
    pub failed: u64,
    /// Skipped, ignored, todo and expected-to-fail tests.
    pub skipped: u64,
    /// Seconds, as the runner reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    pub finished: bool,
    /// The failures, in the order they were reported (at most 50).
    pub failures: Vec<TestFailure>,
}

/// One failed test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestFailure {
    pub name: String,
    /// What it said, ANSI stripped, redacted, at most 20 lines and 2000
    /// characters ("" when the runner printed nothing procd could tie to it).
    pub message: String,
    /// Where, as the runner says it ("src/lib.rs:10:5").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The log cursor of its report, to `read` from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
}
