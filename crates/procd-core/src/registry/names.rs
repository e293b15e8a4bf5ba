//! Names (docs/stacks.md): a named spawn that finds its name running
//! reuses or replaces it; a name (with its project) stands for a session
//! id.

use super::Registry;
use crate::error::Error;
use crate::session::{Session, SessionSpec};
use procd_proto::{CompletionReason, KillStatus, ProjectName, SessionName, SpawnResult};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// What a named spawn found under its name.
pub(super) enum NameCheck {
    /// Nothing runs under it: start.
    Free,
    /// The same service runs: answer with it, start nothing.
    Reused(Box<SpawnResult>),
}

impl Registry {
    /// The running session called `name` in `project` (None: the unnamed
    /// global scope).
    fn running_named(
        &self,
        name: &SessionName,
        project: Option<&ProjectName>,
    ) -> Option<Arc<Session>> {
        self.table()
            .values()
            .find(|s| {
                s.is_running()
                    && s.spec.name.as_ref() == Some(name)
                    && s.spec.project.as_ref() == project
            })
            .cloned()
    }

    /// The session a `name` (and `project`) stands for, as `find` resolves
    /// ids: the running one of that name, else the latest that ran under
    /// it. Without a project, the unnamed scope first, then any project
    /// where the name is unique.
    pub fn find_named(&self, name: &str, project: Option<&str>) -> Result<Arc<Session>, Error> {
        let name = SessionName::parse(name).map_err(Error::InvalidParams)?;
        let project = project
            .map(ProjectName::parse)
            .transpose()
            .map_err(Error::InvalidParams)?;
        let mut candidates: Vec<Arc<Session>> = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.spec.name.as_ref() == Some(&name))
            .filter(|s| project.is_none() || s.spec.project == project)
            .collect();
        if project.is_none() && candidates.iter().any(|s| s.spec.project.is_none()) {
            candidates.retain(|s| s.spec.project.is_none());
        }
        let mut projects: Vec<&str> = candidates
            .iter()
            .filter_map(|s| s.spec.project.as_ref().map(ProjectName::as_str))
            .collect();
        projects.sort();
        projects.dedup();
        if projects.len() > 1 && project.is_none() {
            return Err(Error::NotFound(format!(
                "name {name:?} is in more than one project ({}): give project",
                projects.join(", ")
            )));
        }
        // The running one, else the one started last (all_sessions is in
        // start order).
        let running = candidates.iter().rposition(|s| s.is_running());
        let at = running.or(candidates.len().checked_sub(1));
        match at {
            Some(at) => Ok(candidates.swap_remove(at)),
            None => Err(Error::NotFound(match &project {
                Some(p) => format!("no session named {name:?} in project {p:?}"),
                None => format!("no session named {name:?}"),
            })),
        }
    }

    /// A named spawn's check, under `naming`: the same service running is
    /// reused; another one under the name is -32002, or with `replace`
    /// is killed first.
    pub(super) async fn check_name(
        &self,
        spec: &SessionSpec,
        replace: bool,
    ) -> Result<NameCheck, Error> {
        let Some(name) = &spec.name else {
            return Ok(NameCheck::Free);
        };
        let Some(running) = self.running_named(name, spec.project.as_ref()) else {
            return Ok(NameCheck::Free);
        };
        if self.same_service(&running.spec, spec) {
            let mut reused = super::present::spawn_result(&running);
            reused.reused = true;
            return Ok(NameCheck::Reused(Box::new(reused)));
        }
        if !replace {
            return Err(Error::WrongState(format!(
                "name {name:?} already runs as {} ({}) with another command, cwd or env; pass replace: true to replace it",
                running.id,
                running.shown_command(),
            )));
        }
        let grace = self.grace(None);
        let killed = self
            .terminate(
                &running,
                libc::SIGTERM,
                grace,
                CompletionReason::Killed,
                "replace",
            )
            .await;
        if killed.status == KillStatus::Error {
            return Err(Error::WrongState(format!(
                "cannot replace {} ({name:?}): {}",
                running.id,
                killed.error.unwrap_or_default()
            )));
        }
        Ok(NameCheck::Free)
    }

    /// Whether a running session is what `spec` asks for: the same
    /// command (a previous daemon's session is known by its redacted
    /// command), cwd and env (when known: the env is kept in memory only).
    fn same_service(&self, running: &SessionSpec, spec: &SessionSpec) -> bool {
        let command = self.runs_command(running, &spec.command);
        let env = match (running.env_digest, spec.env_digest) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        command && env && running.cwd == spec.cwd && running.pty == spec.pty
    }

    /// A place among the `up` service tasks waiting for their
    /// dependencies, unless `max` are taken (given back when dropped).
    pub fn waiting_slot(&self, max: usize) -> Option<crate::admission::slot::RunningSlot> {
        self.waiting.try_take(max)
    }

    /// The sessions of `project`, in start order.
    pub fn sessions_of(&self, project: &ProjectName) -> Vec<Arc<Session>> {
        self.all_sessions()
            .into_iter()
            .filter(|s| s.spec.project.as_ref() == Some(project))
            .collect()
    }

    /// Whether a session was started with `command`: a previous daemon's
    /// session is known by its redacted command (procs.json keeps no
    /// secret), so the redacted form of `command` matches too.
    pub fn runs_command(&self, spec: &SessionSpec, command: &str) -> bool {
        spec.command == command || spec.command == self.redactor.command(command)
    }
}

/// A digest of the env a caller gave (order-free), to compare services.
pub(super) fn env_digest(env: &BTreeMap<String, String>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    env.hash(&mut h);
    h.finish()
}
