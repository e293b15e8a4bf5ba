//! The method table. jsonrpsee generates the server trait the daemon
//! implements (`ProcdApiServer`) and a typed client (`ProcdApiClient`).
//! Params are passed by name (`param_kind = map`); positional arrays are
//! accepted too, in the order written here.

#![allow(clippy::too_many_arguments)]

use crate::names::{ProjectName, SessionName};
use crate::params::{
    Cols, Cursor, GraceS, Limit, ListLimit, MaxActiveAgeS, MaxBytes, MaxOutputChars,
    MaxOutputTokens, Offset, Port, Rows, TimeoutS, WaitMs, YieldMs,
};
use crate::types::{
    CloseTerminalResult, DrainResult, HasActiveResult, KillResult, KilledCount, ListFilter,
    ListResult, LogResult, OutputItem, PollResult, PortResult, ReadResult, ResizeResult,
    SearchResult, ShutdownResult, SignalResult, SignalSpec, SnapshotResult, StatusResult,
    StdinResult, StreamedEvent, WaitAnyResult, WaitCondition, WaitResult,
};
use crate::types::{DownResult, UpResult, UpdateResult};
use crate::types::{
    SandboxSpec, ShellCloseResult, ShellCommandResult, ShellCommandsResult, ShellOpenResult,
};
use jsonrpsee::core::{RpcResult, SubscriptionResult};
use jsonrpsee::proc_macros::rpc;

#[rpc(server, client)]
pub trait ProcdApi {
    // `spawn` takes one `SpawnParams` (see types/spawn.rs): it is registered by
    // the daemon beside this table, and called by clients through
    // `procd_client::spawn`.

    #[method(name = "poll", param_kind = map)]
    async fn poll(
        &self,
        session_id: String,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<PollResult>;

    /// Incremental output from a byte cursor, optionally long-polling.
    #[method(name = "read", param_kind = map)]
    async fn read(
        &self,
        session_id: String,
        cursor: Option<Cursor>,
        max_bytes: Option<MaxBytes>,
        wait_ms: Option<WaitMs>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<ReadResult>;

    #[method(name = "log", param_kind = map)]
    async fn log(
        &self,
        session_id: String,
        offset: Option<Offset>,
        limit: Option<Limit>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<LogResult>;

    #[method(name = "wait", param_kind = map)]
    async fn wait(
        &self,
        session_id: String,
        timeout_s: Option<TimeoutS>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<WaitResult>;

    /// Waits on several sessions (by id, or every running one of a
    /// session key) for the first of: an exit, readiness, a wish for
    /// input, an output line matching `output`, or the timeout.
    #[method(name = "wait_any", param_kind = map)]
    async fn wait_any(
        &self,
        session_ids: Option<Vec<String>>,
        session_key: Option<String>,
        until: Option<Vec<WaitCondition>>,
        output: Option<String>,
        cursors: Option<std::collections::BTreeMap<String, u64>>,
        timeout_s: Option<TimeoutS>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<WaitAnyResult>;

    /// Where a regex matches in sessions' logs (by id, a key's, or all).
    #[method(name = "search", param_kind = map)]
    async fn search(
        &self,
        pattern: String,
        session_ids: Option<Vec<String>>,
        session_key: Option<String>,
        ignore_case: Option<bool>,
        before: Option<u32>,
        after: Option<u32>,
        from_cursor: Option<u64>,
        to_cursor: Option<u64>,
        since: Option<String>,
        until: Option<String>,
        max_matches: Option<u64>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<SearchResult>;

    /// `source`: who ends it, reported as its `termination_source`
    /// (default "kill").
    #[method(name = "kill", param_kind = map)]
    async fn kill(
        &self,
        session_id: String,
        signal: Option<SignalSpec>,
        grace_s: Option<GraceS>,
        source: Option<String>,
    ) -> RpcResult<KillResult>;

    /// Changes what a running session was spawned with: its completion
    /// event, its watch patterns, its `meta`.
    #[method(name = "update", param_kind = map)]
    async fn update(
        &self,
        session_id: String,
        notify_on_complete: Option<bool>,
        watch_patterns: Option<Vec<String>>,
        meta: Option<serde_json::Value>,
    ) -> RpcResult<UpdateResult>;

    #[method(name = "signal", param_kind = map)]
    async fn signal(&self, session_id: String, signal: SignalSpec) -> RpcResult<SignalResult>;

    /// Writes to stdin; with `yield_ms`, waits for the answer (exit, quiet,
    /// or the time) and returns the output produced after the write.
    #[method(name = "write_stdin", param_kind = map)]
    async fn write_stdin(
        &self,
        session_id: String,
        data: String,
        yield_ms: Option<YieldMs>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<StdinResult>;

    #[method(name = "submit_stdin", param_kind = map)]
    async fn submit_stdin(
        &self,
        session_id: String,
        data: String,
        yield_ms: Option<YieldMs>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<StdinResult>;

    #[method(name = "close_stdin", param_kind = map)]
    async fn close_stdin(&self, session_id: String) -> RpcResult<StdinResult>;

    /// PTY sessions: set the window size (the child gets SIGWINCH).
    #[method(name = "resize", param_kind = map)]
    async fn resize(&self, session_id: String, rows: Rows, cols: Cols) -> RpcResult<ResizeResult>;

    /// A UI drops its view of a session; the process keeps running.
    #[method(name = "close_terminal", param_kind = map)]
    async fn close_terminal(&self, session_id: String) -> RpcResult<CloseTerminalResult>;

    /// Streams output from `cursor` as it arrives, then one exit item.
    #[subscription(name = "subscribe_output" => "output", unsubscribe = "unsubscribe_output", item = OutputItem, param_kind = map)]
    async fn subscribe_output(
        &self,
        session_id: String,
        cursor: Option<Cursor>,
    ) -> SubscriptionResult;

    /// Streams every event as it is queued (without consuming it), plus
    /// `started`/`exited` for every session and `close_terminal`.
    /// Every event as it happens; with `since`, first the kept events
    /// numbered after it (a resume after a daemon restart).
    #[subscription(name = "subscribe_events" => "event", unsubscribe = "unsubscribe_events", item = StreamedEvent, param_kind = map)]
    async fn subscribe_events(&self, since: Option<u64>) -> SubscriptionResult;

    #[method(name = "list", param_kind = map)]
    async fn list(
        &self,
        task_id: Option<String>,
        session_key: Option<String>,
        status: Option<ListFilter>,
        owner: Option<String>,
        limit: Option<ListLimit>,
        after: Option<String>,
    ) -> RpcResult<ListResult>;

    #[method(name = "has_active", param_kind = map)]
    async fn has_active(
        &self,
        task_id: Option<String>,
        session_key: Option<String>,
        max_active_age_s: Option<MaxActiveAgeS>,
        owner: Option<String>,
    ) -> RpcResult<HasActiveResult>;

    #[method(name = "snapshot_running", param_kind = map)]
    async fn snapshot_running(&self, task_id: String) -> RpcResult<SnapshotResult>;

    #[method(name = "kill_all", param_kind = map)]
    async fn kill_all(
        &self,
        task_id: Option<String>,
        exclude_ids: Option<Vec<String>>,
        source: Option<String>,
        session_key: Option<String>,
        owner: Option<String>,
    ) -> RpcResult<KilledCount>;

    #[method(name = "kill_started_since", param_kind = map)]
    async fn kill_started_since(
        &self,
        task_id: String,
        baseline: Vec<String>,
        source: Option<String>,
    ) -> RpcResult<KilledCount>;

    #[method(name = "drain_notifications", param_kind = map)]
    async fn drain_notifications(
        &self,
        session_key: Option<String>,
        owned_keys: Option<Vec<String>>,
    ) -> RpcResult<DrainResult>;

    /// Starts a stack's services that are not running, in dependency
    /// order (docs/stacks.md).
    #[method(name = "up", param_kind = map)]
    async fn up(
        &self,
        file: Option<String>,
        dir: Option<String>,
        services: Option<Vec<SessionName>>,
        yield_ms: Option<YieldMs>,
    ) -> RpcResult<UpResult>;

    /// Kills a project's sessions, dependents first.
    #[method(name = "down", param_kind = map)]
    async fn down(
        &self,
        project: ProjectName,
        services: Option<Vec<SessionName>>,
    ) -> RpcResult<DownResult>;

    /// Opens a shell that keeps its state across commands
    /// (docs/shells.md), or answers with the open one of that `name`.
    #[method(name = "shell_open", param_kind = map)]
    async fn shell_open(
        &self,
        name: Option<SessionName>,
        cwd: Option<String>,
        env: Option<std::collections::BTreeMap<String, String>>,
        pty: Option<bool>,
        sandbox: Option<SandboxSpec>,
        owner: Option<String>,
        session_key: Option<String>,
        task_id: Option<String>,
    ) -> RpcResult<ShellOpenResult>;

    /// Runs a command in a shell, after the one running; answers when it
    /// ends, asks for input, or `yield_ms` passes (default 30 s).
    #[method(name = "shell_run", param_kind = map)]
    async fn shell_run(
        &self,
        shell_id: String,
        command: String,
        yield_ms: Option<YieldMs>,
        timeout_s: Option<TimeoutS>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<ShellCommandResult>;

    /// Waits for a shell's command (the last one if not given).
    #[method(name = "shell_wait", param_kind = map)]
    async fn shell_wait(
        &self,
        shell_id: String,
        command_id: Option<u64>,
        timeout_s: Option<TimeoutS>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<ShellCommandResult>;

    /// A shell's command as it stands (the last one if not given).
    #[method(name = "shell_read", param_kind = map)]
    async fn shell_read(
        &self,
        shell_id: String,
        command_id: Option<u64>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<ShellCommandResult>;

    /// Interrupts a shell's command (the last one if not given), as
    /// Ctrl-C does; answers once it has ended.
    #[method(name = "shell_interrupt", param_kind = map)]
    async fn shell_interrupt(
        &self,
        shell_id: String,
        command_id: Option<u64>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<ShellCommandResult>;

    /// A shell's commands, with their exits and durations.
    #[method(name = "shell_commands", param_kind = map)]
    async fn shell_commands(&self, shell_id: String) -> RpcResult<ShellCommandsResult>;

    /// Closes a shell (its session is killed).
    #[method(name = "shell_close", param_kind = map)]
    async fn shell_close(&self, shell_id: String) -> RpcResult<ShellCloseResult>;

    /// Who listens on a TCP port: a session, a process of this user's,
    /// another user's, or nothing.
    #[method(name = "port", param_kind = map)]
    async fn port(&self, port: Port) -> RpcResult<PortResult>;

    #[method(name = "status")]
    async fn status(&self) -> RpcResult<StatusResult>;

    #[method(name = "shutdown", param_kind = map)]
    async fn shutdown(&self, timeout_s: Option<TimeoutS>) -> RpcResult<ShutdownResult>;
}

/// Each method's parameter names, in the order positional arrays follow
/// (`spawn`'s are `SpawnParams`, which refuses unknown keys itself). The
/// daemon refuses any other name before the method runs (docs/protocol.md):
/// jsonrpsee's generated parsing would ignore it. A test sends every name
/// listed here to a real daemon (tests/protocol.rs).
pub const METHOD_PARAMS: &[(&str, &[&str])] = &[
    (
        "poll",
        &["session_id", "max_output_chars", "max_output_tokens"],
    ),
    (
        "read",
        &[
            "session_id",
            "cursor",
            "max_bytes",
            "wait_ms",
            "max_output_chars",
            "max_output_tokens",
        ],
    ),
    (
        "log",
        &[
            "session_id",
            "offset",
            "limit",
            "max_output_chars",
            "max_output_tokens",
        ],
    ),
    (
        "search",
        &[
            "pattern",
            "session_ids",
            "session_key",
            "ignore_case",
            "before",
            "after",
            "from_cursor",
            "to_cursor",
            "since",
            "until",
            "max_matches",
            "max_output_chars",
            "max_output_tokens",
        ],
    ),
    (
        "wait_any",
        &[
            "session_ids",
            "session_key",
            "until",
            "output",
            "cursors",
            "timeout_s",
            "max_output_chars",
            "max_output_tokens",
        ],
    ),
    (
        "wait",
        &[
            "session_id",
            "timeout_s",
            "max_output_chars",
            "max_output_tokens",
        ],
    ),
    ("kill", &["session_id", "signal", "grace_s", "source"]),
    (
        "update",
        &["session_id", "notify_on_complete", "watch_patterns", "meta"],
    ),
    ("signal", &["session_id", "signal"]),
    (
        "write_stdin",
        &[
            "session_id",
            "data",
            "yield_ms",
            "max_output_chars",
            "max_output_tokens",
        ],
    ),
    (
        "submit_stdin",
        &[
            "session_id",
            "data",
            "yield_ms",
            "max_output_chars",
            "max_output_tokens",
        ],
    ),
    ("close_stdin", &["session_id"]),
    ("resize", &["session_id", "rows", "cols"]),
    ("close_terminal", &["session_id"]),
    ("subscribe_output", &["session_id", "cursor"]),
    ("unsubscribe_output", &["subscription"]),
    ("subscribe_events", &["since"]),
    ("unsubscribe_events", &["subscription"]),
    (
        "list",
        &[
            "task_id",
            "session_key",
            "status",
            "owner",
            "limit",
            "after",
        ],
    ),
    (
        "has_active",
        &["task_id", "session_key", "max_active_age_s", "owner"],
    ),
    ("snapshot_running", &["task_id"]),
    (
        "kill_all",
        &["task_id", "exclude_ids", "source", "session_key", "owner"],
    ),
    ("kill_started_since", &["task_id", "baseline", "source"]),
    ("drain_notifications", &["session_key", "owned_keys"]),
    ("up", &["file", "dir", "services", "yield_ms"]),
    ("down", &["project", "services"]),
    (
        "shell_open",
        &[
            "name",
            "cwd",
            "env",
            "pty",
            "sandbox",
            "owner",
            "session_key",
            "task_id",
        ],
    ),
    (
        "shell_run",
        &[
            "shell_id",
            "command",
            "yield_ms",
            "timeout_s",
            "max_output_chars",
            "max_output_tokens",
        ],
    ),
    (
        "shell_wait",
        &[
            "shell_id",
            "command_id",
            "timeout_s",
            "max_output_chars",
            "max_output_tokens",
        ],
    ),
    (
        "shell_read",
        &[
            "shell_id",
            "command_id",
            "max_output_chars",
            "max_output_tokens",
        ],
    ),
    (
        "shell_interrupt",
        &[
            "shell_id",
            "command_id",
            "max_output_chars",
            "max_output_tokens",
        ],
    ),
    ("shell_commands", &["shell_id"]),
    ("shell_close", &["shell_id"]),
    ("port", &["port"]),
    ("status", &[]),
    ("shutdown", &["timeout_s"]),
];

/// The methods that name a session by `session_id`: each also takes
/// `name` (and `project`) instead, resolved by the daemon before the
/// method runs (docs/stacks.md).
pub const BY_SESSION: &[&str] = &[
    "poll",
    "read",
    "log",
    "wait",
    "kill",
    "update",
    "signal",
    "write_stdin",
    "submit_stdin",
    "close_stdin",
    "resize",
    "close_terminal",
    "subscribe_output",
];

/// The parameter names of `method`, if it is one `METHOD_PARAMS` lists.
pub fn method_params(method: &str) -> Option<&'static [&'static str]> {
    METHOD_PARAMS
        .iter()
        .find(|(name, _)| *name == method)
        .map(|(_, params)| *params)
}
