//! The shell methods' results (docs/shells.md): a shell keeps its state
//! (cwd, variables, functions, aliases, options) across commands run in
//! it one at a time.

use serde::{Deserialize, Serialize};

/// `shell_open`: the shell, new or the named one already open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShellOpenResult {
    /// The shell's session id: `poll`, `read`, `attach` and the stdin
    /// methods take it as `session_id`.
    pub shell_id: String,
    pub name: Option<String>,
    pub pid: i32,
    pub pty: bool,
    /// False when the named shell was open already (and is reused).
    pub opened: bool,
    /// Its working directory now.
    pub cwd: String,
}

/// Where a command is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandStatus {
    /// Running (a `shell_run` waiting for its turn has not answered yet).
    Running,
    /// It ended by itself; `exit_code` is its status, as bash's `$?`.
    Exited,
    /// `shell_interrupt` ended it (SIGINT, then SIGKILL: `ended_by`).
    Interrupted,
    /// Its `timeout_s` passed and it was ended as an interrupt is.
    TimedOut,
    /// The shell itself ended during it (`exit`, a kill, a crash):
    /// `exit_code` is the shell's.
    ShellExited,
}

/// One command of a shell, as `shell_run`, `shell_wait`, `shell_read` and
/// `shell_interrupt` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShellCommandResult {
    pub shell_id: String,
    /// Its number in the shell, from 1.
    pub command_id: u64,
    /// As run, redacted.
    pub command: String,
    pub status: CommandStatus,
    pub exit_code: Option<i32>,
    /// How an interrupted or timed-out command was ended: "SIGINT", or
    /// "SIGKILL" when it outlived SIGINT's grace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<String>,
    /// Its own output (from `from_cursor` to `to_cursor`), redacted, cut to
    /// the budget.
    pub output: String,
    /// Set when `output` was cut: how many chars it had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_chars: Option<usize>,
    /// Its output's range in the shell's session log (`read` cursors);
    /// `to_cursor` is where the output has got to while it runs.
    pub from_cursor: u64,
    pub to_cursor: u64,
    /// The shell's working directory after it (None while it runs).
    pub cwd: Option<String>,
    pub started_at: String,
    pub duration_ms: Option<u64>,
    /// It is blocked reading its input: answer with `write_stdin` or
    /// `submit_stdin` on the shell's id.
    pub waiting_for_input: bool,
}

/// `shell_commands`: the shell's commands, oldest first (the last 200).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShellCommandsResult {
    pub shell_id: String,
    /// Whether the shell is still open.
    pub open: bool,
    pub commands: Vec<ShellCommandSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShellCommandSummary {
    pub command_id: u64,
    pub command: String,
    pub status: CommandStatus,
    pub exit_code: Option<i32>,
    pub started_at: String,
    pub duration_ms: Option<u64>,
    pub from_cursor: u64,
    pub to_cursor: Option<u64>,
    pub cwd: Option<String>,
}

/// `shell_close`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShellCloseResult {
    pub shell_id: String,
    /// "closed", or "already_closed".
    pub status: String,
    pub exit_code: Option<i32>,
}
