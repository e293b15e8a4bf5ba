//! Result and parameter types of the wire protocol. Field names are the
//! protocol's: they are serialized exactly as docs/protocol.md spells them.

use serde::{Deserialize, Serialize};

/// A session is either still running or has exited (exactly once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
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

/// `spawn`'s parameters (docs/protocol.md, docs/agents.md), spelled out once: the daemon
/// parses a request's params into it (by name, or positionally in this
/// order), Rust clients build it with `..Default::default()`. Numbers are
/// the validating types of `params.rs`, so a bad value is -32602 naming
/// its field before anything runs. An unknown key is refused by name
/// (docs/protocol.md): a client never mistakes an older daemon for one with a
/// feature it lacks.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpawnParams {
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<crate::Rows>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<crate::Cols>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// A lease token: the session ends with that lease (unless `persist`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persist: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_on_complete: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_patterns: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<crate::TimeoutS>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<StdinMode>,
    /// Wait this long for the exit, quiet, a prompt or readiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yield_ms: Option<crate::YieldMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_chars: Option<crate::MaxOutputChars>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<crate::MaxOutputTokens>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<ReadySpec>,
    /// Resource limits on the session's tree (docs/containment.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Unique among the running sessions of `project` (docs/stacks.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<crate::SessionName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<crate::ProjectName>,
    /// Kill a running session of this name with another command first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<bool>,
    /// Start the command again when it ends (docs/stacks.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartSpec>,
    /// What the command may touch (docs/SECURITY.md): a profile or rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxSpec>,
    /// The caller's own data about the session (a JSON object of at most
    /// 4 KiB): returned in poll, list and every event of the session, and
    /// kept across daemons; `update` replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
}

/// `spawn{sandbox}`: a profile ("read-only", "workspace-write", "full")
/// or the rules themselves.
#[derive(Debug, Clone, PartialEq)]
pub enum SandboxSpec {
    Profile(SandboxProfile),
    Rules(SandboxRules),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxProfile {
    /// Read everything; write only devices and the session's temp dir.
    ReadOnly,
    /// As read-only, and write under the session's cwd.
    WorkspaceWrite,
    /// No sandbox.
    Full,
}

impl SandboxProfile {
    pub fn parse(text: &str) -> Result<SandboxProfile, String> {
        [
            SandboxProfile::ReadOnly,
            SandboxProfile::WorkspaceWrite,
            SandboxProfile::Full,
        ]
        .into_iter()
        .find(|p| p.as_str() == text)
        .ok_or_else(|| {
            format!(
                "unknown profile {text:?}: expected \"read-only\", \"workspace-write\" or \"full\""
            )
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SandboxProfile::ReadOnly => "read-only",
            SandboxProfile::WorkspaceWrite => "workspace-write",
            SandboxProfile::Full => "full",
        }
    }
}

impl Serialize for SandboxProfile {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SandboxProfile {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        SandboxProfile::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// `spawn{sandbox: {...}}`: writes only under `writable` (relative paths
/// from the session's cwd), reads under `readable` (default all), and
/// the network as `network` says (default none).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "sandbox: a profile name or an object with writable, readable and network"
)]
pub struct SandboxRules {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readable: Option<Readable>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSpec>,
}

impl Serialize for SandboxSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SandboxSpec::Profile(p) => p.serialize(s),
            SandboxSpec::Rules(r) => r.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for SandboxSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(text) => SandboxProfile::parse(&text)
                .map(SandboxSpec::Profile)
                .map_err(|e| D::Error::custom(format!("sandbox: {e}"))),
            value @ serde_json::Value::Object(_) => serde_json::from_value(value)
                .map(SandboxSpec::Rules)
                .map_err(|e| D::Error::custom(format!("sandbox: {e}"))),
            _ => Err(D::Error::custom(
                "sandbox: a profile name or an object with writable, readable and network",
            )),
        }
    }
}

/// `sandbox.readable`: "all", or the paths.
#[derive(Debug, Clone, PartialEq)]
pub enum Readable {
    All,
    Paths(Vec<String>),
}

impl Serialize for Readable {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Readable::All => s.serialize_str("all"),
            Readable::Paths(p) => p.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Readable {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) if s == "all" => Ok(Readable::All),
            value @ serde_json::Value::Array(_) => serde_json::from_value(value)
                .map(Readable::Paths)
                .map_err(|_| D::Error::custom("readable: \"all\" or a list of paths")),
            _ => Err(D::Error::custom("readable: \"all\" or a list of paths")),
        }
    }
}

/// `sandbox.network`: "all", "none", or the TCP ports it may connect to
/// and bind.
#[derive(Debug, Clone, PartialEq)]
pub enum NetworkSpec {
    All,
    None,
    Ports { connect: Vec<u16>, bind: Vec<u16> },
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PortRules {
    #[serde(default)]
    connect: Vec<u16>,
    #[serde(default)]
    bind: Vec<u16>,
}

impl Serialize for NetworkSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            NetworkSpec::All => s.serialize_str("all"),
            NetworkSpec::None => s.serialize_str("none"),
            NetworkSpec::Ports { connect, bind } => PortRules {
                connect: connect.clone(),
                bind: bind.clone(),
            }
            .serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for NetworkSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        const EXPECTED: &str =
            "network: \"all\", \"none\" or {connect, bind} with lists of ports (1 to 65535)";
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) if s == "all" => Ok(NetworkSpec::All),
            serde_json::Value::String(s) if s == "none" => Ok(NetworkSpec::None),
            value @ serde_json::Value::Object(_) => {
                let rules: PortRules = serde_json::from_value(value)
                    .map_err(|e| D::Error::custom(format!("{EXPECTED}: {e}")))?;
                if rules.connect.contains(&0) || rules.bind.contains(&0) {
                    return Err(D::Error::custom(EXPECTED));
                }
                Ok(NetworkSpec::Ports {
                    connect: rules.connect,
                    bind: rules.bind,
                })
            }
            _ => Err(D::Error::custom(EXPECTED)),
        }
    }
}

/// The sandbox in force, as `poll` and `list` show it (absent without).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxInfo {
    /// "read-only", "workspace-write", or "custom" for the object form.
    pub profile: String,
    /// Absolute paths it may write under (its temp dir among them).
    pub writable: Vec<String>,
    pub readable: Readable,
    pub network: NetworkSpec,
}

/// `spawn{restart}`: when a session's command is started again after it
/// ends, keeping the session's id, name and log.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "restart: an object with policy, max_restarts, backoff_s and reset_after_s"
)]
pub struct RestartSpec {
    pub policy: RestartPolicy,
    /// Restarts allowed in a row before the session ends as `crash_loop`
    /// (default 5); a run that lasts `reset_after_s` starts a new row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<crate::MaxRestarts>,
    /// The first delay before a restart (default 1), doubled for each
    /// restart in a row, up to 30 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_s: Option<crate::BackoffS>,
    /// How long a run must last to start a new row (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_after_s: Option<crate::ResetAfterS>,
}

/// `restart.policy`: "no", "on-failure" (an exit that is not 0, a death by
/// signal or an OOM kill) or "always". A session procd ends (kill, its
/// timeout) is never restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    No,
    OnFailure,
    Always,
}

impl Serialize for RestartPolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RestartPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)
            .map_err(|_| serde::de::Error::custom("restart.policy: must be a string"))?;
        RestartPolicy::parse(&text)
            .map_err(|e| serde::de::Error::custom(format!("restart.policy: {e}")))
    }
}

impl RestartPolicy {
    /// The policy as the wire spells it.
    pub fn parse(text: &str) -> Result<RestartPolicy, String> {
        [
            RestartPolicy::No,
            RestartPolicy::OnFailure,
            RestartPolicy::Always,
        ]
        .into_iter()
        .find(|p| p.as_str() == text)
        .ok_or_else(|| format!("expected \"on-failure\", \"always\" or \"no\", got {text:?}"))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RestartPolicy::No => "no",
            RestartPolicy::OnFailure => "on-failure",
            RestartPolicy::Always => "always",
        }
    }
}

/// A restarting session's runs, as `poll` and `list` report them
/// (flattened into both; absent without a restart policy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartInfo {
    /// How many times the command was started again.
    pub restarts: u32,
    /// How the previous run ended (null before the first restart).
    pub last_exit: Option<ExitInfo>,
    /// Its last run ended and the next one waits out its backoff.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restarting: bool,
}

/// Limits written to a session's cgroup. A limit that cannot hold is
/// -32002 naming its controller, never a silently unlimited session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<crate::MemoryBytes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<crate::CpuCores>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<crate::Pids>,
}

impl Limits {
    /// These limits, each one not given taken from `defaults`.
    pub fn or(self, defaults: Limits) -> Limits {
        Limits {
            memory_bytes: self.memory_bytes.or(defaults.memory_bytes),
            cpu_cores: self.cpu_cores.or(defaults.cpu_cores),
            pids: self.pids.or(defaults.pids),
        }
    }
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
}

/// `spawn{ready}`: when a session counts as ready (docs/agents.md). Every key
/// given must hold; a condition, once met, stays met.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "ready: an object with output, port, http and timeout_s"
)]
pub struct ReadySpec {
    /// A regex matched against whole output lines (ANSI stripped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// A TCP port the session's tree listens on, or any port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<ReadyPort>,
    /// A loopback URL that answers with a status of 200 to 399.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// How long to wait before reporting `ready_timeout` (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
}

/// `ready.port`: a port number, or `"any"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "ready.port: a port number (1 to 65535) or \"any\""
)]
pub enum ReadyPort {
    Number(u32),
    Any(AnyPort),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnyPort {
    Any,
}

/// What a session's live tree is doing (docs/agents.md), as `poll` and `list`
/// report it (flattened into both).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Activity {
    /// TCP ports the session's tree listens on, sorted.
    #[serde(default)]
    pub ports: Vec<u16>,
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
}

/// Resources of a session's live tree, as the monitor last saw them.
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
    /// The systemd unit procd runs as ("procd.service"); null when
    /// systemd did not start it.
    #[serde(default)]
    pub systemd_unit: Option<String>,
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

fn is_zero(n: &u64) -> bool {
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
