//! Checks of what a caller asks for: a spawn's params validated once into
//! a `SessionSpec`, and the bounds each param has.

use super::names::env_digest;
use super::{
    Registry, INSTANCE_VAR, MAX_COMMAND_BYTES, MAX_ENV_BYTES, MAX_ENV_VARS, MAX_TIMEOUT,
    MAX_WATCH_PATTERNS, MAX_WATCH_PATTERN_BYTES,
};
use crate::error::Error;
use crate::session::SessionSpec;
use procd_proto::{Cols, Limits, MemoryBytes, Pids, QueueName, Rows, SpawnParams, StdinMode};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl Registry {
    /// What `spawn` was asked, checked and with the defaults applied: the
    /// session's spec. Numbers come already checked by their procd-proto
    /// types; what is left is what only the daemon can judge.
    pub(super) fn validate(&self, req: &SpawnParams) -> Result<SessionSpec, Error> {
        check_command(&req.command)?;
        let cwd = self.cwd_of(req.cwd.as_deref())?;
        if let Some(env) = &req.env {
            check_env(env)?;
        }
        check_name_params(req)?;
        let timeout = req.timeout_s.map(|t| t.duration().min(MAX_TIMEOUT));
        // `owner` is checked against the leases by the daemon (procd-server).
        let watch_patterns = req.watch_patterns.clone().unwrap_or_default();
        check_watch_patterns(&watch_patterns)?;
        let meta = req.meta.clone().map(check_meta).transpose()?;
        let (rows, cols) = (
            req.rows.map_or(30, Rows::get),
            req.cols.map_or(120, Cols::get),
        );
        let (pty, stdin) = (req.pty.unwrap_or(false), req.stdin.unwrap_or_default());
        if pty && stdin == StdinMode::Null {
            return Err(Error::InvalidParams(
                "stdin: \"null\" is only for pipe sessions".into(),
            ));
        }
        let ready = req
            .ready
            .as_ref()
            .map(crate::observation::readiness::ReadyCheck::parse)
            .transpose()
            .map_err(Error::InvalidParams)?;
        let limits = self.session_limits(req)?;
        let junit = req
            .junit
            .as_deref()
            .map(|p| junit_path(&cwd, p))
            .transpose()?;
        let sandbox = crate::child::sandbox::SandboxPlan::new(
            req.sandbox.as_ref(),
            self.config.sandbox,
            &cwd,
            &self.tmp_dir,
            &self.own_paths,
        )?;
        let (restart, on_change) = restart_and_watch(req, &cwd)?;
        Ok(SessionSpec {
            command: req.command.clone(),
            cwd,
            task_id: req.task_id.clone(),
            session_key: req.session_key.clone(),
            owner: req.owner.clone(),
            persist: req.persist.unwrap_or(false),
            pty,
            rows,
            cols,
            notify_on_complete: req.notify_on_complete.unwrap_or(false),
            watch_patterns,
            meta,
            timeout,
            stdin,
            ready,
            limits,
            name: req.name.clone(),
            project: req.project.clone(),
            stack_file: None,
            env_digest: Some(env_digest(req.env.as_ref().unwrap_or(&BTreeMap::new()))),
            restart,
            sandbox,
            junit,
            shell: None,
            port: fixed_port(req.port),
            named_ports: Default::default(),
            on_change,
            queue: self.queue_of(req)?,
            queued_for: std::time::Duration::ZERO,
        })
    }

    /// The queue a spawn takes a slot of: its `queue`, or for `jobs` (or
    /// config `default_jobs`) the jobserver's (never both; no spawn
    /// names the jobserver's itself).
    fn queue_of(&self, req: &SpawnParams) -> Result<Option<QueueName>, Error> {
        let by_default = self.config.default_jobs && req.name.is_none() && req.queue.is_none();
        let jobs = req.jobs.unwrap_or(by_default);
        match &req.queue {
            Some(q) if q.as_str() == crate::admission::jobserver::QUEUE => Err(Error::InvalidParams(
                "queue: \"jobserver\" is the jobserver's own queue; spawn with jobs: true".into(),
            )),
            Some(_) if jobs => Err(Error::InvalidParams(
                "jobs: a jobs spawn waits for a token in the jobserver's queue; give jobs or queue, not both".into(),
            )),
            Some(q) => Ok(Some(q.clone())),
            None if jobs => {
                self.jobserver()?;
                QueueName::parse(crate::admission::jobserver::QUEUE)
                    .map(Some)
                    .map_err(Error::Internal)
            }
            None => Ok(None),
        }
    }

    /// What the caller (or the config's default) asks, and its queue's
    /// weights where a cgroup can carry them (else status's
    /// limits_unavailable says why the controller is missing).
    fn session_limits(&self, req: &SpawnParams) -> Result<procd_sys::cgroup::Limits, Error> {
        use procd_sys::cgroup::Controller;
        let asked = req.limits.unwrap_or_default();
        let mut limits = self.kernel_limits(asked.or(self.config.default_limits))?;
        let queue = req
            .queue
            .as_ref()
            .and_then(|q| self.config.queue.get(q.as_str()));
        if let (Some(tree), Some(queue)) = (&self.cgroups, queue) {
            limits.cpu_weight = queue.cpu_weight.filter(|_| tree.has(Controller::Cpu));
            limits.io_weight = queue.io_weight.filter(|_| tree.has(Controller::Io));
        }
        Ok(limits)
    }

    /// The limits as the kernel takes them; -32002 naming the controller
    /// when there is no cgroup to write them to (never a silently
    /// unlimited session).
    fn kernel_limits(&self, limits: Limits) -> Result<procd_sys::cgroup::Limits, Error> {
        use procd_sys::cgroup::Controller;
        let asked = [
            (Controller::Memory, limits.memory_bytes.is_some()),
            (Controller::Cpu, limits.cpu_cores.is_some()),
            (Controller::Pids, limits.pids.is_some()),
        ];
        if let (None, Some((controller, _))) = (&self.cgroups, asked.iter().find(|(_, on)| *on)) {
            return Err(Error::WrongState(format!(
                "limits: the {} controller is not available: sessions get no cgroup here (see procd status: containment)",
                controller.name()
            )));
        }
        Ok(procd_sys::cgroup::Limits {
            memory_bytes: limits.memory_bytes.map(MemoryBytes::get),
            // CpuCores is at least 0.01: at least the kernel's 1 ms.
            cpu_quota_us: limits
                .cpu_cores
                .map(|c| (c.get() * procd_sys::cgroup::CPU_PERIOD_US as f64).round() as u64),
            pids: limits.pids.map(Pids::get),
            cpu_weight: None,
            io_weight: None,
        })
    }

    /// The argv that runs `script`, the launch line of `command`: a
    /// non-interactive `bash -c` with the shell snapshot's variables in its
    /// environment, which sources the snapshot first when it has something
    /// to run that `command` may need (on its own line, so that aliases
    /// apply to the command); or, without a snapshot or when it cannot be
    /// made, the configured shell (`bash -lic`). The caller's variables and
    /// those procd sets per session win over the scripts'.
    pub(super) async fn launch_argv(
        &self,
        command: &str,
        script: &str,
        env: &mut BTreeMap<String, String>,
        caller_env: &BTreeMap<String, String>,
    ) -> Vec<String> {
        if let Some(snapshot) = &self.snapshot {
            match snapshot.current().await {
                Ok(snapshot) => {
                    self.faults.clear(SNAPSHOT_FAULT);
                    let mut keep: Vec<&str> = caller_env
                        .keys()
                        .map(|k| k.strip_prefix(crate::child::env::FORCE_PREFIX).unwrap_or(k))
                        .collect();
                    keep.extend(SESSION_VARS);
                    for (name, value) in &snapshot.vars {
                        if !keep.contains(&name.as_str()) {
                            env.insert(name.clone(), value.clone());
                        }
                    }
                    let Some(path) = snapshot.script_for(command, env) else {
                        return vec![self.shell[0].clone(), "-c".into(), script.to_string()];
                    };
                    if snapshot.sets_vars {
                        env.insert(crate::child::snapshot::KEEP_VAR.into(), keep.join(" "));
                    }
                    let source = crate::child::snapshot::quote(&path.display().to_string());
                    return vec![
                        self.shell[0].clone(),
                        "-c".into(),
                        format!(". {source}\n{script}"),
                    ];
                }
                Err(e) => {
                    if !self.faults.has(SNAPSHOT_FAULT) {
                        tracing::warn!(error = %e, "no shell snapshot; commands start with the login shell");
                    }
                    self.faults.set(SNAPSHOT_FAULT, &e);
                }
            }
        }
        let mut argv = self.shell.clone();
        argv.push(script.to_string());
        argv
    }
}

/// What goes with a name: `replace` only with one, `queue` never (a
/// queued spawn's name would be claimed only when it starts).
fn check_name_params(req: &SpawnParams) -> Result<(), Error> {
    if req.jobs == Some(true) && req.name.is_some() {
        return Err(Error::InvalidParams(
            "jobs: a named session cannot wait for a jobserver token (its name is claimed when it starts; give name or jobs)".into(),
        ));
    }
    if req.queue.is_some() && req.name.is_some() {
        return Err(Error::InvalidParams(
            "queue: a named session cannot be queued (its name is claimed when it starts; give name or queue)".into(),
        ));
    }
    if req.replace.is_some() && req.name.is_none() {
        return Err(Error::InvalidParams(
            "replace: only for a named spawn (give name)".into(),
        ));
    }
    Ok(())
}

/// The extra environment: bounded in count and size, each name and value
/// one a process can have.
fn check_env(env: &std::collections::BTreeMap<String, String>) -> Result<(), Error> {
    if env.len() > MAX_ENV_VARS {
        return Err(Error::InvalidParams(format!(
            "env: at most {MAX_ENV_VARS} variables, got {}",
            env.len()
        )));
    }
    let env_bytes: usize = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if env_bytes > MAX_ENV_BYTES {
        return Err(Error::InvalidParams(format!(
            "env: at most {MAX_ENV_BYTES} bytes in all, got {env_bytes}"
        )));
    }
    match env
        .iter()
        .find(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
    {
        Some((k, _)) => Err(Error::InvalidParams(format!(
            "env: invalid variable name or value for {k:?}"
        ))),
        None => Ok(()),
    }
}

/// `command`, checked: 1 to `MAX_COMMAND_BYTES` bytes, no NUL (for
/// `spawn` and a shell's commands alike).
pub(crate) fn check_command(command: &str) -> Result<(), Error> {
    let n = command.len();
    if n == 0 || n > MAX_COMMAND_BYTES {
        return Err(Error::InvalidParams(format!(
            "command: must be 1 to {MAX_COMMAND_BYTES} bytes, got {n}"
        )));
    }
    if command.contains('\0') {
        return Err(Error::InvalidParams("command: contains a NUL byte".into()));
    }
    Ok(())
}

impl Registry {
    /// Where a session runs: `cwd` from the default one (the user's home),
    /// an existing directory.
    pub(super) fn cwd_of(&self, cwd: Option<&str>) -> Result<PathBuf, Error> {
        let cwd = match cwd {
            None => self.default_cwd.clone(),
            Some(c) if c.contains('\0') => {
                return Err(Error::InvalidParams("cwd: contains a NUL byte".into()))
            }
            Some(c) => self.default_cwd.join(c),
        };
        if !cwd.is_dir() {
            return Err(Error::InvalidParams(format!(
                "cwd: not an existing directory: {}",
                cwd.display()
            )));
        }
        Ok(cwd)
    }
}

/// The largest `meta`, as JSON.
pub const MAX_META_BYTES: usize = 4096;

/// `spawn{junit}`: a report path, relative to the cwd; read by the daemon
/// at the end (regular files only, at most 64 MiB: `testrun/junit.rs`).
fn junit_path(cwd: &Path, path: &str) -> Result<PathBuf, Error> {
    if path.is_empty() || path.len() > 4096 || path.contains('\0') {
        return Err(Error::InvalidParams(
            "junit: a path of 1 to 4096 bytes, without NUL".into(),
        ));
    }
    Ok(cwd.join(path))
}

/// `meta`, checked: a JSON object of at most `MAX_META_BYTES`.
pub(super) fn check_meta(meta: serde_json::Value) -> Result<Arc<serde_json::Value>, Error> {
    let kind = match &meta {
        serde_json::Value::Object(_) => None,
        serde_json::Value::Null => Some("null"),
        serde_json::Value::Bool(_) => Some("a boolean"),
        serde_json::Value::Number(_) => Some("a number"),
        serde_json::Value::String(_) => Some("a string"),
        serde_json::Value::Array(_) => Some("an array"),
    };
    if let Some(kind) = kind {
        return Err(Error::InvalidParams(format!(
            "meta: a JSON object of at most {MAX_META_BYTES} bytes, got {kind}"
        )));
    }
    let size = serde_json::to_vec(&meta).map_or(usize::MAX, |b| b.len());
    if size > MAX_META_BYTES {
        return Err(Error::InvalidParams(format!(
            "meta: a JSON object of at most {MAX_META_BYTES} bytes, got {size}"
        )));
    }
    Ok(Arc::new(meta))
}

pub(super) fn check_watch_patterns(patterns: &[String]) -> Result<(), Error> {
    if patterns.len() > MAX_WATCH_PATTERNS {
        return Err(Error::InvalidParams(format!(
            "watch_patterns: at most {MAX_WATCH_PATTERNS} patterns, got {}",
            patterns.len()
        )));
    }
    match patterns
        .iter()
        .find(|p| p.is_empty() || p.len() > MAX_WATCH_PATTERN_BYTES || p.contains('\n'))
    {
        Some(bad) => Err(Error::InvalidParams(format!(
            "watch_patterns: each pattern must be 1 to {MAX_WATCH_PATTERN_BYTES} bytes on one line, got {bad:?}"
        ))),
        None => Ok(()),
    }
}

/// The fault `status.faults` shows while no shell snapshot can be made.
const SNAPSHOT_FAULT: &str = "shell snapshot";
/// Variables procd sets per session: a snapshot never overrides them.
const SESSION_VARS: [&str; 6] = [
    "PYTHONUNBUFFERED",
    "PROCD_SESSION_ID",
    INSTANCE_VAR,
    "TERM",
    "PAGER",
    "GIT_PAGER",
];

/// spawn's `port` when it is a number ("auto" is picked at the spawn:
/// `give_port`).
fn fixed_port(ask: Option<procd_proto::PortAsk>) -> Option<u16> {
    match ask {
        Some(procd_proto::PortAsk::Number(n)) => Some(n.get()),
        _ => None,
    }
}

/// spawn's `restart` and `watch`: a watch without a policy restarts on
/// change only (`RestartPlan::on_change_only`).
fn restart_and_watch(
    req: &SpawnParams,
    cwd: &Path,
) -> Result<
    (
        Option<crate::stacks::restart::RestartPlan>,
        Option<Arc<crate::stacks::onchange::ChangePlan>>,
    ),
    Error,
> {
    let on_change = req
        .watch
        .as_ref()
        .map(|w| crate::stacks::onchange::ChangePlan::check(w, cwd).map(Arc::new))
        .transpose()
        .map_err(Error::InvalidParams)?;
    let restart = req
        .restart
        .as_ref()
        .and_then(crate::stacks::restart::RestartPlan::new)
        .or(on_change
            .as_ref()
            .map(|_| crate::stacks::restart::RestartPlan::on_change_only()));
    Ok((restart, on_change))
}
