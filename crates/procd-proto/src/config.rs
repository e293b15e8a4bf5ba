//! The daemon's tunables (docs/operations.md). Every key has the documented default;
//! `config/procd.toml` in the repository lists them all. Parsing from TOML
//! lives in procd-gateway; this type is plain data.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The shell and its flags; the command text is appended as one argument.
    pub shell: Vec<String>,
    /// Source a snapshot of the login scripts' setup instead of running
    /// them for every command (docs/operations.md; default `bash -lic` only).
    pub shell_snapshot: bool,
    /// How long capturing the snapshot may take before the `-lic` launch
    /// is used instead.
    pub shell_snapshot_timeout_s: f64,
    pub kill_grace_s: f64,
    pub finished_ttl_s: f64,
    pub max_sessions: usize,
    pub max_running: usize,
    pub max_log_bytes: u64,
    pub memory_tail_bytes: usize,
    pub final_drain_ms: u64,
    pub max_request_bytes: usize,
    /// The most one answer may carry (docs/SECURITY.md); longer ones are cut.
    pub max_response_bytes: usize,
    pub max_wait_s: f64,
    pub redact: bool,
    pub env_blocklist: Vec<String>,
    pub watch_min_interval_s: f64,
    pub watch_max_deliveries: u32,
    pub worker_memory_max_mb: u64,
    pub stop_timeout_s: f64,
    pub monitor_interval_s: f64,
    pub on_demand_idle_s: f64,
    /// What holds each session's tree: "auto" (a cgroup where one can be
    /// had, else a systemd scope under systemd, else the process group),
    /// "cgroup", "scope" or "group" (docs/containment.md).
    pub containment: String,
    /// Limits for sessions that give none (`spawn{limits}` wins per key).
    pub default_limits: crate::Limits,
    /// The sandbox of sessions that ask for none (docs/SECURITY.md):
    /// "full" (none), "workspace-write" or "read-only".
    pub sandbox: crate::SandboxProfile,
    /// Spawn queues by name (`[queue.build] slots = 2`, docs/queues.md).
    pub queue: std::collections::BTreeMap<String, QueueConfig>,
    /// The slots of a queue a spawn names that `queue` does not define.
    pub queue_slots: usize,
    /// The most spawns waiting in all queues at once.
    pub max_queued: usize,
    /// The jobserver's tokens: at most this many compile jobs of `jobs`
    /// sessions run at once, across all agents (docs/jobserver.md).
    /// None: the number of CPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobserver_tokens: Option<usize>,
    /// A spawn that does not say `jobs` is a `jobs` spawn, unless it is
    /// named or queued (neither ever waits for a token).
    pub default_jobs: bool,
    /// Debug builds only: a file read instead of /proc/pressure/memory, so
    /// a test can stand in for memory pressure (docs/testing.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_memory_pressure_file: Option<std::path::PathBuf>,
}

/// The queue `jobs` sessions take a token of as a slot (docs/jobserver.md):
/// no `[queue.NAME]` nor `spawn{queue}` may name it.
pub const JOBSERVER_QUEUE: &str = "jobserver";

/// One queue's settings (`[queue.NAME]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// How many of its sessions run at once.
    pub slots: usize,
    /// Its sessions wait while the kernel's memory pressure (PSI's
    /// `some avg10`, a percentage) is above this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_pressure: Option<f64>,
    /// Its sessions' CPU weight, as cgroup v2's `cpu.weight` (1 to 10000,
    /// 100 the kernel's default; `cpu.shares` = weight × 1024 / 100 in
    /// v1): a background queue's builds yield to a server. Applied where
    /// the cpu controller is (`status.limits_available`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_weight: Option<u64>,
    /// Its sessions' I/O weight, as cgroup v2's `io.weight` (1 to 10000,
    /// 100 the default; CFQ's v1 `blkio.weight` = weight × 5 in 10–1000).
    /// Applied where the disks' scheduler reads a weight
    /// (`status.limits_available` has "io"; else `limits_unavailable`
    /// says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_weight: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            shell: vec!["bash".into(), "-lic".into()],
            shell_snapshot: true,
            shell_snapshot_timeout_s: 10.0,
            kill_grace_s: 2.0,
            finished_ttl_s: 1800.0,
            max_sessions: 64,
            max_running: 256,
            max_log_bytes: 64 * 1024 * 1024,
            memory_tail_bytes: 256 * 1024,
            final_drain_ms: 250,
            max_request_bytes: 1024 * 1024,
            max_response_bytes: 4 * 1024 * 1024,
            max_wait_s: 600.0,
            redact: true,
            env_blocklist: [
                "OPENAI_BASE_URL",
                "OPENAI_API_BASE",
                "OPENAI_ORG_ID",
                "ANTHROPIC_BASE_URL",
                "GH_TOKEN",
                "GITHUB_TOKEN",
                "HF_TOKEN",
            ]
            .map(String::from)
            .to_vec(),
            watch_min_interval_s: 15.0,
            watch_max_deliveries: 8,
            worker_memory_max_mb: 4096,
            stop_timeout_s: 20.0,
            monitor_interval_s: 1.0,
            on_demand_idle_s: 900.0,
            containment: "auto".into(),
            default_limits: crate::Limits::default(),
            sandbox: crate::SandboxProfile::Full,
            queue: std::collections::BTreeMap::new(),
            queue_slots: 1,
            max_queued: 1024,
            jobserver_tokens: None,
            default_jobs: false,
            test_memory_pressure_file: None,
        }
    }
}

impl Config {
    /// Checks values that parse but make no sense; the error names the key.
    pub fn validate(&self) -> Result<(), String> {
        let non_negative = [
            ("kill_grace_s", self.kill_grace_s),
            ("finished_ttl_s", self.finished_ttl_s),
            ("max_wait_s", self.max_wait_s),
            ("watch_min_interval_s", self.watch_min_interval_s),
            ("stop_timeout_s", self.stop_timeout_s),
            ("on_demand_idle_s", self.on_demand_idle_s),
        ];
        for (key, value) in non_negative {
            // 1e9 s (~31 years): anything longer means a typo, and would
            // overflow a Duration (docs/SECURITY.md: out of range names the key).
            if !value.is_finite() || !(0.0..=1e9).contains(&value) {
                return Err(format!(
                    "{key} must be a number of seconds from 0 to 1e9, got {value}"
                ));
            }
        }
        for (key, value) in [
            ("monitor_interval_s", self.monitor_interval_s),
            ("shell_snapshot_timeout_s", self.shell_snapshot_timeout_s),
        ] {
            if !(value.is_finite() && value > 0.0 && value <= 1e9) {
                return Err(format!("{key} must be a positive number, got {value}"));
            }
        }
        if self.shell.is_empty() || self.shell[0].is_empty() {
            return Err("shell must name a program, e.g. [\"bash\", \"-lic\"]".into());
        }
        for (key, value) in [
            ("max_sessions", self.max_sessions),
            ("max_running", self.max_running),
            ("memory_tail_bytes", self.memory_tail_bytes),
            ("max_request_bytes", self.max_request_bytes),
            ("max_response_bytes", self.max_response_bytes),
            ("queue_slots", self.queue_slots),
            ("max_queued", self.max_queued),
        ] {
            if value == 0 {
                return Err(format!("{key} must be at least 1"));
            }
        }
        if !["auto", "cgroup", "scope", "group"].contains(&self.containment.as_str()) {
            return Err(format!(
                "containment must be \"auto\", \"cgroup\", \"scope\" or \"group\", got {:?}",
                self.containment
            ));
        }
        if self.jobserver_tokens == Some(0) {
            return Err("jobserver_tokens must be at least 1".into());
        }
        for (name, queue) in &self.queue {
            if name == JOBSERVER_QUEUE {
                return Err(format!(
                    "[queue.{name}]: that queue is the jobserver's own; set jobserver_tokens"
                ));
            }
            crate::QueueName::parse(name).map_err(|e| format!("[queue.{name}]: {e}"))?;
            queue
                .validate()
                .map_err(|e| format!("[queue.{name}] {e}"))?;
        }
        if self.test_memory_pressure_file.is_some() && !cfg!(debug_assertions) {
            return Err(
                "test_memory_pressure_file is for tests: only a debug build reads it".into(),
            );
        }
        if self.max_log_bytes < 4096 {
            return Err(format!(
                "max_log_bytes must be at least 4096, got {}",
                self.max_log_bytes
            ));
        }
        Ok(())
    }
}

impl QueueConfig {
    /// Checks what parses but makes no sense; the error names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.slots == 0 {
            return Err("slots must be at least 1".into());
        }
        for (key, weight) in [
            ("cpu_weight", self.cpu_weight),
            ("io_weight", self.io_weight),
        ] {
            if let Some(w) = weight.filter(|w| !(1..=10_000).contains(w)) {
                return Err(format!("{key} must be from 1 to 10000, got {w}"));
            }
        }
        if let Some(p) = self.max_memory_pressure {
            if !(p.is_finite() && (0.0..=100.0).contains(&p)) {
                return Err(format!(
                    "max_memory_pressure must be a percentage from 0 to 100, got {p}"
                ));
            }
        }
        Ok(())
    }
}
