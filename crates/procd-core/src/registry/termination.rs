//! Ending sessions: the one termination path every kill takes, signals, the bulk kills.

use super::{present::exit_info, Registry, MAX_GRACE};
use crate::error::Error;
use crate::identity::ProcessIdentity;
use crate::session::Session;
use crate::tree::kill::{self, parse_signal, signal_name};
use procd_proto::{CompletionReason, GraceS, KillResult, KillStatus, SignalResult, SignalSpec};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

impl Registry {
    /// Ends one session's tree; the single path every kill takes.
    pub(super) async fn terminate(
        &self,
        s: &Arc<Session>,
        signal: i32,
        grace: Duration,
        reason: CompletionReason,
        source: &str,
    ) -> KillResult {
        if !s.is_running() {
            // Leftovers still in its group, carrying its marker, or left to
            // the daemon by its root (known shortly after the exit).
            s.adoption_known(ADOPTION_LIMIT).await;
            let out = kill::terminate(&s.tree(), &self.procfs, false, signal, grace).await;
            self.stop_containment(s).await;
            return KillResult {
                orphans_killed: out.signalled.saturating_sub(out.survivors.len()) as u32,
                survivors: out.survivors,
                ..kill_result(s, KillStatus::AlreadyExited)
            };
        }
        s.request_termination(reason, source);
        let out = kill::terminate(&s.tree(), &self.procfs, true, signal, grace).await;
        if out.survivors.is_empty() {
            self.stop_containment(s).await;
        }
        // The root is dead or being reaped: give the supervisor its drain.
        let settle = Duration::from_millis(self.config.final_drain_ms) + Duration::from_secs(2);
        let exited = if out.survivors.contains(&s.pid()) {
            None
        } else {
            s.wait_exited(settle).await
        };
        if !out.survivors.is_empty() || exited.is_none() {
            if s.is_running() {
                s.clear_termination();
            }
            let mut survivors = out.survivors;
            if exited.is_none() && !survivors.contains(&s.pid()) {
                survivors.push(s.pid());
            }
            return KillResult {
                error: Some(format!(
                    "Kill incomplete: {} process(es) still alive",
                    survivors.len()
                )),
                survivors,
                process_running: Some(true),
                ..kill_result(s, KillStatus::Error)
            };
        }
        kill_result(s, KillStatus::Killed)
    }

    /// After a kill: stops the session's systemd scope, if it has one, and
    /// removes its cgroup if nothing lives in it any more; true when
    /// neither is left.
    pub(super) async fn stop_containment(&self, s: &Session) -> bool {
        let run = s.run();
        let cgroup_gone = run.cgroup.as_ref().is_none_or(|c| c.remove());
        let scope_gone = match (&run.systemd_unit, &self.scopes) {
            (Some(unit), Some(scopes)) => scopes.stop(unit).await,
            _ => true,
        };
        cgroup_gone && scope_gone
    }

    /// A kill's grace: as asked (a negative one is 0), else the
    /// configured one; at most `MAX_GRACE`.
    pub(super) fn grace(&self, grace_s: Option<GraceS>) -> Duration {
        let configured = || Duration::from_secs_f64(self.config.kill_grace_s);
        grace_s
            .map_or_else(configured, GraceS::duration)
            .min(MAX_GRACE)
    }

    /// `source`: who ends it, as its `termination_source` (default "kill").
    pub async fn kill(
        &self,
        id: &str,
        signal: Option<SignalSpec>,
        grace_s: Option<GraceS>,
        source: Option<&str>,
    ) -> Result<KillResult, Error> {
        let source = check_source(source)?;
        let s = match self.find(id) {
            Ok(s) => s,
            Err(e) => {
                let Some(entry) = self.find_queued(id) else {
                    return Err(e);
                };
                if let Some(removed) = self.kill_queued(&entry).await {
                    return Ok(removed);
                }
                self.find(&entry.id)?
            }
        };
        let signal = match signal {
            None => libc::SIGTERM,
            Some(spec) => signal_param(&spec)?,
        };
        let grace = self.grace(grace_s);
        let killed = self
            .terminate(
                &s,
                signal,
                grace,
                CompletionReason::Killed,
                source.unwrap_or("kill"),
            )
            .await;
        self.exits_on_disk().await;
        Ok(killed)
    }

    /// Waits until the checkpoint holds every exit recorded so far: a kill
    /// answers only then, so the exit it reports outlives a crash of the
    /// daemon and its keeper right after (the write an exit schedules may
    /// not have run yet). A failed write is a fault, retried.
    async fn exits_on_disk(&self) {
        let _ = self.write_checkpoint().await;
    }

    pub async fn signal(&self, id: &str, signal: SignalSpec) -> Result<SignalResult, Error> {
        let s = self.find(id)?;
        let sig = signal_param(&signal)?;
        if !s.is_running() {
            return Err(Error::WrongState(format!(
                "session {} has already exited",
                s.id
            )));
        }
        let delivered = kill::signal_group(&s.tree(), &self.procfs, sig).await as u32;
        Ok(SignalResult {
            session_id: s.id.clone(),
            status: "ok".into(),
            signal: signal_name(sig),
            delivered,
        })
    }

    pub(super) async fn kill_many(&self, victims: Vec<Arc<Session>>, source: &str) -> u32 {
        if victims.is_empty() {
            // (The monitor asks every tick: no write when nothing ends.)
            return 0;
        }
        let grace = self.grace(None);
        let kills = victims
            .iter()
            .map(|s| self.terminate(s, libc::SIGTERM, grace, CompletionReason::Killed, source));
        let killed = futures::future::join_all(kills)
            .await
            .into_iter()
            .filter(|r| r.status == KillStatus::Killed)
            .count() as u32;
        self.exits_on_disk().await;
        killed
    }

    /// Kills the running sessions of `whose` (each filter given must
    /// hold: a client ends its own sessions only), but `exclude_ids`.
    pub async fn kill_all(
        &self,
        whose: Whose<'_>,
        exclude_ids: &[String],
        source: Option<&str>,
    ) -> Result<u32, Error> {
        let source = check_source(source)?;
        let exclude: HashSet<String> = exclude_ids.iter().map(|i| normalize_id(i)).collect();
        let victims = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.is_running())
            .filter(|s| whose.holds(s))
            .filter(|s| !exclude.contains(&s.id))
            .collect();
        // Queued ones first: none starts while the others are killed.
        let exclude: Vec<String> = exclude.into_iter().collect();
        let removed = self.remove_queued_of(whose, &exclude).await;
        Ok(removed + self.kill_many(victims, source.unwrap_or("kill_all")).await)
    }

    pub async fn kill_started_since(
        &self,
        task_id: &str,
        baseline: &[String],
        source: Option<&str>,
    ) -> u32 {
        let baseline: HashSet<String> = baseline.iter().map(|i| normalize_id(i)).collect();
        let victims = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.is_running() && s.spec.task_id.as_deref() == Some(task_id))
            .filter(|s| !baseline.contains(&s.id))
            .collect();
        self.kill_many(victims, source.unwrap_or("kill_started_since"))
            .await
    }

    /// Whether a running session has an owner (whose lease must be watched).
    pub fn has_owned_sessions(&self) -> bool {
        self.table()
            .values()
            .any(|s| s.spec.owner.is_some() && s.is_running())
            || self.queues.all().iter().any(|e| e.params().owner.is_some())
    }

    /// Ends what owners whose lease is gone started: their running
    /// non-persistent sessions, and, once per owner, what their exited
    /// ones left behind (a daemon forked by a finished command), so that
    /// an agent that goes leaves nothing running. `swept`, kept by the
    /// caller across calls, holds the owners already seen gone; it is
    /// trimmed to owners that still have sessions here.
    pub async fn end_released_owners(
        &self,
        live_owners: &HashSet<String>,
        swept: &mut HashSet<String>,
    ) -> u32 {
        for entry in self.queues.all() {
            let p = entry.params();
            let gone = p
                .owner
                .as_ref()
                .is_some_and(|o| !p.persist.unwrap_or(false) && !live_owners.contains(o));
            if gone {
                self.remove_queued_of(
                    Whose {
                        owner: p.owner.as_deref(),
                        ..Whose::default()
                    },
                    &[],
                )
                .await;
            }
        }
        let sessions = self.all_sessions();
        let released_owner = |s: &Session| {
            s.spec
                .owner
                .as_ref()
                .filter(|o| !s.spec.persist && !live_owners.contains(*o))
                .cloned()
        };
        let mut victims = Vec::new();
        let mut leftovers = Vec::new();
        for s in &sessions {
            let Some(owner) = released_owner(s) else {
                continue;
            };
            if s.is_running() {
                victims.push(s.clone());
            } else if !swept.contains(&owner) {
                leftovers.push(s.clone());
            }
        }
        let grace = self.grace(None);
        let leftovers = leftovers.iter().map(|s| {
            self.terminate(
                s,
                libc::SIGTERM,
                grace,
                CompletionReason::Killed,
                "owner_released",
            )
        });
        let (killed, _) = tokio::join!(
            self.kill_many(victims, "owner_released"),
            futures::future::join_all(leftovers)
        );
        swept.extend(sessions.iter().filter_map(|s| released_owner(s)));
        swept.retain(|o| sessions.iter().any(|s| s.spec.owner.as_ref() == Some(o)));
        killed
    }

    /// Terminates every running session (daemon shutdown), then every
    /// leftover: what exited sessions left in their group, under their
    /// marker or to the daemon, and any other child of the daemon that no
    /// one waits for. A stopping daemon leaves nothing it started behind.
    pub async fn shutdown_all(&self) -> u32 {
        self.drop_queued().await;
        let sessions = self.all_sessions();
        let running = sessions.iter().filter(|s| s.is_running()).cloned();
        let killed = self.kill_many(running.collect(), "shutdown").await;
        let grace = self.grace(None);
        let leftovers = sessions.iter().map(|s| {
            self.terminate(
                s,
                libc::SIGTERM,
                grace,
                CompletionReason::Killed,
                "shutdown",
            )
        });
        futures::future::join_all(leftovers).await;
        let strays = self.unclaimed_children(HashSet::new()).await;
        if !strays.is_empty() {
            let spec = kill::TreeSpec {
                root: ProcessIdentity {
                    pid: 0,
                    start_time: 0,
                },
                pgid: 0,
                marker: Vec::new(),
                root_pinned: false,
                adopted: strays,
                cgroup: None,
            };
            kill::terminate(&spec, &self.procfs, false, libc::SIGTERM, grace).await;
        }
        if let Some(tree) = &self.cgroups {
            // Cgroups of sessions no longer listed (pruned with leftovers,
            // or from a daemon before this one): end and remove them all,
            // at once. A killed process can take a while to leave (it
            // frees its memory first; a loaded machine schedules it
            // late): each gets `SHUTDOWN_EMPTY_WAIT`, and the tree goes
            // only once all are gone.
            let ends = tree.sessions().into_iter().map(|cgroup| async move {
                let _ = cgroup.kill();
                cgroup.wait_removable(SHUTDOWN_EMPTY_WAIT).await;
                if !cgroup.remove() {
                    tracing::warn!(cgroup = %cgroup.path().display(), "a session's cgroup did not empty; left");
                }
            });
            futures::future::join_all(ends).await;
            if !tree.remove() {
                tracing::warn!(tree = %tree.base().display(), "the instance's cgroup tree is not empty; left");
            }
        }
        killed
    }
}

/// How long a stopping daemon waits for a killed session's cgroup to
/// empty before it leaves it (and says so).
const SHUTDOWN_EMPTY_WAIT: Duration = Duration::from_secs(10);

impl Registry {
    /// Observes every running session's tree (ports, resources) in one
    /// pass off the event loop; a port that opened since the last pass is
    /// announced with a `port` event. Called by the monitor.
    pub async fn observe_sessions(&self) {
        let began = std::time::Instant::now();
        let sessions: Vec<Arc<Session>> = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.is_running())
            .collect();
        if !sessions.is_empty() {
            let sessions: Vec<&Session> = sessions.iter().map(|s| &**s).collect();
            self.observe_and_record(&sessions).await;
        }
        // What this look at every tree did not read is no session's now.
        self.procfs.forget_unread_since(began);
    }
}

/// How long a kill of an exited session waits for the scan that finds
/// what its root left to the daemon (it runs right after the exit).
const ADOPTION_LIMIT: Duration = Duration::from_secs(2);

pub fn normalize_id(id: &str) -> String {
    if id.starts_with("proc_") {
        id.to_ascii_lowercase()
    } else {
        format!("proc_{}", id.to_ascii_lowercase())
    }
}

/// A kill's answer with the session's current exit fields, nothing else set.
fn kill_result(s: &Session, status: KillStatus) -> KillResult {
    KillResult {
        session_id: s.id.clone(),
        status,
        orphans_killed: 0,
        error: None,
        survivors: Vec::new(),
        process_running: None,
        exit: exit_info(&s.state()),
    }
}

/// The signal number a `signal` parameter names.
fn signal_param(spec: &SignalSpec) -> Result<i32, Error> {
    parse_signal(spec)
        .ok_or_else(|| Error::InvalidParams(format!("signal: unknown signal {spec:?}")))
}

/// Whose sessions a bulk call acts on: each filter given must hold.
#[derive(Debug, Clone, Copy, Default)]
pub struct Whose<'a> {
    pub task_id: Option<&'a str>,
    pub session_key: Option<&'a str>,
    /// A lease token: the sessions spawned with it as `owner`.
    pub owner: Option<&'a str>,
}

impl Whose<'_> {
    pub fn holds(&self, s: &Session) -> bool {
        self.holds_fields(
            s.spec.task_id.as_deref(),
            s.spec.session_key.as_deref(),
            s.spec.owner.as_deref(),
        )
    }
}

/// The longest `source`.
const MAX_SOURCE_CHARS: usize = 64;

/// A kill's `source`, checked: 1 to 64 printable characters.
fn check_source(source: Option<&str>) -> Result<Option<&str>, Error> {
    match source {
        Some(s)
            if s.is_empty()
                || s.chars().count() > MAX_SOURCE_CHARS
                || s.chars().any(char::is_control) =>
        {
            Err(Error::InvalidParams(format!(
                "source: 1 to {MAX_SOURCE_CHARS} printable characters, got {s:?}"
            )))
        }
        other => Ok(other),
    }
}
