//! `spawn`'s parameters: the command and how it runs, its sandbox, its
//! restart policy, its limits and its ready condition.

use super::{ExitInfo, StdinMode};
use serde::{Deserialize, Serialize};

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
    #[doc = crate::describe!(command)]
    pub command: String,
    #[doc = concat!(crate::describe!(cwd), " Default: the user's home; a relative path is taken from it.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[doc = crate::describe!(env)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    #[doc = crate::describe!(pty)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<crate::Rows>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<crate::Cols>,
    #[doc = crate::describe!(task_id)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// A lease token: the session ends with that lease (unless `persist`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[doc = crate::describe!(persist)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persist: Option<bool>,
    #[doc = crate::describe!(notify_on_complete)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_on_complete: Option<bool>,
    #[doc = crate::describe!(watch_patterns)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_patterns: Option<Vec<String>>,
    #[doc = crate::describe!(timeout_s)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<crate::TimeoutS>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<StdinMode>,
    #[doc = crate::describe!(yield_ms)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yield_ms: Option<crate::YieldMs>,
    #[doc = crate::describe!(max_output_chars)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_chars: Option<crate::MaxOutputChars>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<crate::MaxOutputTokens>,
    #[doc = crate::describe!(ready)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<ReadySpec>,
    /// Resource limits on the session's tree (docs/containment.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    #[doc = concat!(crate::describe!(name), " (docs/stacks.md)")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<crate::SessionName>,
    #[doc = crate::describe!(project)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<crate::ProjectName>,
    #[doc = crate::describe!(replace)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<bool>,
    #[doc = concat!(crate::describe!(restart), " Or an object with the policy and its limits (docs/stacks.md).")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartSpec>,
    #[doc = concat!(crate::describe!(sandbox), " Or rules (docs/SECURITY.md).")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxSpec>,
    /// The caller's own data about the session (a JSON object of at most
    /// 4 KiB): returned in poll, list and every event of the session, and
    /// kept across daemons; `update` replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
    #[doc = crate::describe!(junit)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub junit: Option<String>,
    #[doc = crate::describe!(port)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortAsk>,
    /// More ports, by the variable each is given as (`ADMIN_PORT`), each
    /// a number or `"auto"`; put for `{ADMIN_PORT}` in the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<std::collections::BTreeMap<String, PortAsk>>,
    /// Files whose change restarts it (or signals it): docs/stacks.md
    /// "Restart on change".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchSpec>,
    #[doc = concat!(crate::describe!(queue), " (docs/queues.md)")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<crate::QueueName>,
    #[doc = concat!(crate::describe!(jobs), " (docs/jobserver.md)")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<bool>,
}

/// `spawn{watch}`: what to watch, what to leave out, what to do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchSpec {
    #[doc = crate::describe!(watch_paths)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// `.gitignore`-style patterns left out, besides `.git`,
    /// `node_modules`, `target`… and the cwd's `.gitignore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<Vec<String>>,
    #[doc = crate::describe!(watch_action)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Quiet after a change before acting, in ms (default 100; 10 to
    /// 10000): a burst of changes acts once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_ms: Option<u64>,
}

/// `spawn{port}`: a port number, or `"auto"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortAsk {
    Auto,
    Number(crate::Port),
}

impl Serialize for PortAsk {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PortAsk::Auto => s.serialize_str("auto"),
            PortAsk::Number(n) => n.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for PortAsk {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        const RULE: &str = "port: a port number (1 to 65535) or \"auto\"";
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) if s == "auto" => Ok(PortAsk::Auto),
            // A number by the `port` method's rule (params.rs), said once.
            number @ serde_json::Value::Number(_) => crate::Port::deserialize(number)
                .map(PortAsk::Number)
                .map_err(D::Error::custom),
            other => Err(D::Error::custom(format!("{RULE}, got {other}"))),
        }
    }
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
    #[doc = crate::describe!(max_restarts)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<crate::MaxRestarts>,
    #[doc = crate::describe!(backoff_s)]
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
    #[doc = concat!(crate::describe!(memory_bytes), " In bytes.")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<crate::MemoryBytes>,
    #[doc = crate::describe!(cpu_cores)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<crate::CpuCores>,
    #[doc = crate::describe!(pids)]
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

/// `spawn{ready}`: when a session counts as ready (docs/agents.md). Every key
/// given must hold; a condition, once met, stays met.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "ready: an object with output, port, http and timeout_s"
)]
pub struct ReadySpec {
    #[doc = crate::describe!(ready_output)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[doc = crate::describe!(ready_port)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<ReadyPort>,
    #[doc = crate::describe!(ready_http)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    #[doc = crate::describe!(ready_timeout_s)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
}

/// `ready.port`: a port number, or `"any"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "ready.port: a port number (1 to 65535), \"any\" or \"auto\""
)]
pub enum ReadyPort {
    Number(u32),
    Any(AnyPort),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnyPort {
    Any,
    /// The port spawn's `port` gave it (picked, with `"auto"`).
    Auto,
}
