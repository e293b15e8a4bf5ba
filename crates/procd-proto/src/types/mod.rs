//! Result and parameter types of the wire protocol. Field names are the
//! protocol's: they are serialized exactly as docs/protocol.md spells them.
//! `spawn.rs` holds spawn's parameters, `events.rs` the events; the results
//! of the other methods are here.

mod events;
mod queue;
mod shell;
mod spawn;
mod testrun;

pub use events::{About, DrainResult, Event, StreamedEvent};
pub use queue::QueueInfo;
pub use shell::{
    CommandStatus, ShellCloseResult, ShellCommandResult, ShellCommandSummary, ShellCommandsResult,
    ShellOpenResult,
};
pub use spawn::{
    AnyPort, Limits, NetworkSpec, PortAsk, Readable, ReadyPort, ReadySpec, RestartInfo,
    RestartPolicy, RestartSpec, SandboxInfo, SandboxProfile, SandboxRules, SandboxSpec,
    SpawnParams, WatchSpec,
};
pub use testrun::{TestFailure, TestSummary};

use serde::{Deserialize, Serialize};

/// A session waits in its queue, runs, then exits (exactly once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Accepted into a full queue: nothing of it runs yet (docs/queues.md).
    Queued,
    Running,
    Exited,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionReason {
    Exited,
    Killed,
    Timeout,
    Lost,
    FailedStart,
    /// The kernel's OOM killer ended a process of the tree (its memory
    /// limit); the exit code is still what the root returned.
    Oom,
    /// Its restart policy gave up: more than `max_restarts` restarts
    /// within `reset_after_s` (docs/stacks.md). The exit is the last run's.
    CrashLoop,
}

/// A signal as callers name it: "SIGINT", "INT" or 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SignalSpec {
    Number(i32),
    Name(String),
}

/// How a session's stdin is wired (pipe mode only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StdinMode {
    #[default]
    Pipe,
    Null,
}

/// Filter for `list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ListFilter {
    Running,
    Exited,
    #[default]
    All,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpawnResult {
    pub session_id: String,
    pub pid: i32,
    pub pty: bool,
    pub status: SessionStatus,
    pub command: String,
    pub started_at: String,
    /// A named spawn found its name running with the same command, cwd
    /// and env, and started nothing (docs/stacks.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
    /// Its `ready.port` was already listening before it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_in_use: Option<PortInUse>,
    /// The port spawn's `port` gave it (the one picked, for `"auto"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The ports spawn's `ports` gave it, by variable.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub named_ports: std::collections::BTreeMap<String, u16>,
    /// With `yield_ms`: the output so far, and the cursor to read on from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
    /// Set when `output` was cut to the budget: its full length in chars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_chars: Option<u64>,
    /// Error-looking lines kept from the part a budget cut (docs/agents.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_error_lines: Option<u64>,
    /// With a ready condition: whether it was met when the yield ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// With `yield_ms`: the session is waiting for input (docs/agents.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for_input: Option<bool>,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitInfo>,
    /// Its queue: its place while queued, how long it waited once started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueInfo>,
}

/// How a session ended; present in results once it has exited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// The exit status, or -N for a death by signal N; null when unknowable.
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub completion_reason: CompletionReason,
    pub termination_source: Option<String>,
    pub exited_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PollResult {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    pub command: String,
    pub status: SessionStatus,
    pub pid: i32,
    pub started_at: String,
    pub uptime_seconds: f64,
    pub output_preview: String,
    /// Ports, resources, readiness, waiting for input (docs/agents.md).
    #[serde(flatten)]
    pub activity: Activity,
    /// Set for a session recovered after a daemon restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Set when the output was cut to the budget: its full length in chars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_chars: Option<u64>,
    /// Error-looking lines kept from the part a budget cut (docs/agents.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_error_lines: Option<u64>,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitInfo>,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxInfo>,
    /// The caller's `meta` (spawn, update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
    /// A recognised test runner's results (docs/agents.md, "Test runs").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<TestSummary>,
    /// Its queue: its place while queued, how long it waited once started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadResult {
    pub data: String,
    pub cursor: u64,
    pub next_cursor: u64,
    pub eof: bool,
    pub status: SessionStatus,
    pub exit_code: Option<i32>,
    pub dropped: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_chars: Option<u64>,
    /// Error-looking lines kept from the part a budget cut (docs/agents.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_error_lines: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogResult {
    pub session_id: String,
    pub command: String,
    pub status: SessionStatus,
    pub output: String,
    pub total_lines: u64,
    pub showing: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_chars: Option<u64>,
    /// Error-looking lines kept from the part a budget cut (docs/agents.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_error_lines: Option<u64>,
    /// The page was cut at a line to stay within `max_response_bytes`;
    /// `next_offset` is where to continue (both absent when not cut).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitStatus {
    Running,
    Exited,
    Timeout,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitResult {
    pub session_id: String,
    pub command: String,
    pub status: WaitStatus,
    pub pid: i32,
    pub started_at: String,
    pub uptime_seconds: f64,
    pub output_preview: String,
    /// The last 2000 characters of output.
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_running: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_chars: Option<u64>,
    /// Error-looking lines kept from the part a budget cut (docs/agents.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_error_lines: Option<u64>,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitInfo>,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartInfo>,
    /// A recognised test runner's results (docs/agents.md, "Test runs").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<TestSummary>,
    /// Its queue: its place while queued, how long it waited once started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueInfo>,
}

/// `update`'s answer: what the session is set to now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateResult {
    pub session_id: String,
    pub notify_on_complete: bool,
    pub watch_patterns: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
}

/// One line `search` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchMatch {
    pub session_id: String,
    /// 1 for the first line the log keeps.
    pub line: u64,
    /// Where the line starts: `read` from here.
    pub cursor: u64,
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

/// `search`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// In log order, session by session; at most `max_matches`.
    pub matches: Vec<SearchMatch>,
    /// Every match in what was searched, returned or not.
    pub total: u64,
    pub sessions_searched: u32,
    pub bytes_scanned: u64,
    /// More matches than were returned.
    pub truncated: bool,
}

/// What `wait_any` waits for (docs/protocol.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitCondition {
    /// A watched session has exited.
    Exit,
    /// A watched session met its ready condition during the wait.
    Ready,
    /// A watched session waits for input.
    Input,
    /// A new output line of a watched session matches `output`.
    Output,
}

/// Which of the conditions ended a `wait_any`, or that none did in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitAnyOutcome {
    Exit,
    Ready,
    Input,
    Output,
    Timeout,
}

/// The answer of `wait_any`: what happened first, to which session, and
/// that session's output since the caller's cursor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitAnyResult {
    /// What happened: "exit", "ready", "input", "output" or "timeout".
    pub condition: WaitAnyOutcome,
    /// The session it happened to (null on timeout).
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SessionStatus>,
    /// With "output": the line that matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    /// With "input": the last line of output, what it asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// TCP ports the session's tree listens on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// The session's output from the caller's cursor (redacted, within
    /// the budget); empty on timeout.
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<u64>,
    /// Every watched session's cursor after what was looked at: pass it
    /// back as `cursors` to wait on from there.
    pub cursors: std::collections::BTreeMap<String, u64>,
    /// How long the call waited.
    pub waited_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_chars: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_error_lines: Option<u64>,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitInfo>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KillStatus {
    Killed,
    /// A queued session taken out of its queue: it never ran.
    Removed,
    AlreadyExited,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillResult {
    pub session_id: String,
    pub status: KillStatus,
    /// Leftover descendants of an already exited session that were ended.
    #[serde(default)]
    pub orphans_killed: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub survivors: Vec<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_running: Option<bool>,
    /// How the session ended (`exit_code`, `signal`, …) once it has.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalResult {
    pub session_id: String,
    pub status: String,
    pub signal: String,
    /// How many processes received the signal.
    pub delivered: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StdinStatus {
    Ok,
    AlreadyExited,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StdinResult {
    pub status: StdinStatus,
    #[serde(default)]
    pub bytes_written: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// With `yield_ms`: the output produced after the write, and the
    /// cursor to read on from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_chars: Option<u64>,
    /// Error-looking lines kept from the part a budget cut (docs/agents.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_error_lines: Option<u64>,
    /// With `yield_ms`: whether the session is still running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_status: Option<SessionStatus>,
    /// With `yield_ms`: the session is waiting for input again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for_input: Option<bool>,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessEntry {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The stack file `up` started it from (docs/stacks.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_file: Option<String>,
    pub command: String,
    pub cwd: String,
    pub pid: i32,
    pub status: SessionStatus,
    pub exit_code: Option<i32>,
    pub started_at: String,
    pub uptime_seconds: f64,
    pub output_preview: String,
    pub task_id: Option<String>,
    pub session_key: Option<String>,
    pub pty: bool,
    pub persist: bool,
    pub notify_on_complete: bool,
    pub watch_patterns: Vec<String>,
    #[serde(flatten)]
    pub activity: Activity,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session_scoped: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxInfo>,
    /// The caller's `meta` (spawn, update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
    /// Its queue: its place while queued, how long it waited once started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueInfo>,
}

/// A running session's files changed after it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleInfo {
    /// The first change (RFC 3339).
    pub since: String,
    /// What changed, relative to its cwd (at most 20; `*`: the kernel
    /// dropped events, so which is not known).
    pub files: Vec<String>,
}

/// What a session's live tree is doing (docs/agents.md), as `poll` and `list`
/// report it (flattened into both).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Activity {
    /// The port spawn's `port` gave it (the one picked, for `"auto"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The ports spawn's `ports` gave it, by variable.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub named_ports: std::collections::BTreeMap<String, u16>,
    /// TCP ports the session's tree listens on, sorted.
    #[serde(default)]
    pub ports: Vec<u16>,
    /// Files under its cwd (in a git worktree) changed after it started
    /// and no restart followed (docs/stacks.md "Stale").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale: Option<StaleInfo>,
    /// What the live tree uses.
    #[serde(default)]
    pub resources: Resources,
    /// Null without a ready condition; false until it is met, then true.
    #[serde(default)]
    pub ready: Option<bool>,
    /// Milliseconds from the start to readiness, once ready.
    #[serde(default)]
    pub ready_after_ms: Option<u64>,
    /// A process of the session is blocked reading its input, and it has
    /// been quiet for 250 ms.
    #[serde(default)]
    pub waiting_for_input: bool,
    /// While it waits for input: what it asks (its last line, redacted,
    /// escape sequences out, at most 200 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

/// Resources of a session's live tree, as last read (the monitor's tick;
/// a poll of a session with a cgroup reads them again past 100 ms).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// Live processes in the tree.
    pub procs: u32,
    /// Resident memory, summed.
    pub rss_bytes: u64,
    /// CPU time (user + system) of the live processes, summed.
    pub cpu_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListResult {
    pub processes: Vec<ProcessEntry>,
    /// With `limit`, while more follow: the `after` of the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HasActiveResult {
    pub active: bool,
    pub count: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotResult {
    pub session_ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KilledCount {
    pub killed: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusResult {
    pub version: String,
    pub pid: i32,
    pub started_at: String,
    pub uptime_seconds: f64,
    pub launch_mode: String,
    pub lifetime: String,
    pub clients: u32,
    pub running: u32,
    pub finished: u32,
    pub socket: String,
    pub state_dir: String,
    /// Faults the daemon is living with (disk full, read-only, I/O
    /// errors); empty when all is well (docs/SECURITY.md).
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// What holds each session's tree: "cgroup", "scope" or "group".
    #[serde(default)]
    pub containment: String,
    /// Why that one (where the cgroups are, or why there are none).
    #[serde(default)]
    pub containment_reason: String,
    /// Which limits can be had, and where: "memory" → "v1" or "v2".
    #[serde(default)]
    pub limits_available: std::collections::BTreeMap<String, String>,
    /// Each controller sessions cannot use, and why: "io" → "no I/O
    /// weight file …". Every one, with the containment, without cgroups.
    #[serde(default)]
    pub limits_unavailable: std::collections::BTreeMap<String, String>,
    /// The systemd unit procd runs as ("procd.service"); null when
    /// systemd did not start it.
    #[serde(default)]
    pub systemd_unit: Option<String>,
    /// Which procd this is: the same across its daemon's restarts (the
    /// sessions survive them), new when procd starts afresh (a new
    /// container or machine: the sessions of the one before are gone).
    #[serde(default)]
    pub instance: String,
    /// The jobserver's tokens and who holds them (docs/jobserver.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobserver: Option<JobserverStatus>,
}

/// `status.jobserver`: the tokens, and per `jobs` session how many its
/// processes hold now (its own one included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobserverStatus {
    pub tokens: u32,
    pub in_use: u32,
    pub sessions: Vec<JobserverHolder>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobserverHolder {
    pub session_id: String,
    pub tokens: u32,
}

/// One ongoing fault: what fails, the last error, since when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// "checkpoint", or "log <session id>".
    pub what: String,
    pub error: String,
    pub since: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShutdownResult {
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResizeResult {
    pub status: String,
    pub rows: u16,
    pub cols: u16,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloseTerminalResult {
    pub status: String,
    pub closed: String,
}

/// One item of a `subscribe_output` stream: output, then one exit record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OutputItem {
    Output {
        data: String,
        cursor: u64,
        next_cursor: u64,
        /// Bytes lost to the log cap before `cursor` (rarely non-zero).
        #[serde(default, skip_serializing_if = "is_zero")]
        dropped: u64,
    },
    Exit {
        exited: bool,
        exit_code: Option<i32>,
        signal: Option<String>,
        completion_reason: Option<CompletionReason>,
    },
}

/// For `skip_serializing_if`: a count that is 0 is left out.
pub fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A port a session is to listen on that something already listens on
/// (docs/stacks.md): the agent learns its server already runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortInUse {
    pub port: u16,
    /// The procd session whose tree listens there, if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The listening process, when it can be seen (null: another user's).
    pub pid: Option<i32>,
    /// Its command line (redacted), when it can be seen.
    pub command: Option<String>,
}

/// Who listens on a TCP port (`port`, docs/stacks.md "Who owns a port").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortResult {
    pub port: u16,
    /// What listens there: nothing, a procd session, a process of this
    /// user's outside procd, or another user's (not shown).
    pub owner: PortOwner,
    /// The session whose tree listens there (`owner: "session"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Its name, and its stack's project, when it has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The listening process (session or process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// Its command line, redacted (a session's: the command it was
    /// spawned with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its working directory: where a session was started, or the
    /// process's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The uid the listening socket belongs to (every owner but `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
}

/// What listens on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortOwner {
    /// Nothing listens there.
    None,
    /// A procd session of this daemon.
    Session,
    /// A process of this user's that procd does not run.
    Process,
    /// Another user's process: who it is is not shown.
    OtherUser,
}

/// Where a stack's service stands, in an `up` result (docs/stacks.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceStatus {
    /// Not started yet: a dependency's condition does not hold yet.
    Waiting,
    /// A dependency failed, so it will not be started (`blocked_by`).
    Blocked,
    Running,
    Exited,
    /// Its spawn was refused (`error`).
    FailedStart,
}

/// Which dependency keeps a service from starting, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedBy {
    pub service: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceState {
    pub name: String,
    pub session_id: Option<String>,
    pub status: ServiceStatus,
    /// Null without a ready condition; false until it is met.
    pub ready: Option<bool>,
    /// It was running already (same command, cwd, env): nothing started.
    pub reused: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<BlockedBy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_in_use: Option<PortInUse>,
    /// The port it was given (`port`), and its loopback URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Why its spawn was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpResult {
    pub project: String,
    /// The stack file read (procd.toml or Procfile).
    pub file: String,
    /// In dependency order.
    pub services: Vec<ServiceState>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DownEntry {
    pub name: String,
    pub session_id: String,
    pub status: KillStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DownResult {
    pub project: String,
    /// In the order they were stopped (dependents first).
    pub services: Vec<DownEntry>,
}
