//! `jobs` sessions and the jobserver (`admission/jobserver.rs`, docs/jobserver.md):
//! a session's FIFO made before its start and removed at its end, the
//! tokens shared out again whenever that could change who may have them.

use super::Registry;
use crate::admission::jobserver::{JobServer, QUEUE};
use crate::error::Error;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Notify;

impl Registry {
    /// The jobserver, or why a `jobs` spawn is refused without one.
    pub(super) fn jobserver(&self) -> Result<&Arc<JobServer>, Error> {
        self.jobs.as_ref().ok_or_else(|| {
            Error::LimitReached(
                "jobs: the jobserver could not be set up (see the daemon's log)".into(),
            )
        })
    }

    /// Makes session `id`'s FIFO and puts it in its environment (before
    /// its first run starts): its path, for `start_child`.
    pub(super) async fn open_jobs(
        &self,
        id: &str,
        env: &mut BTreeMap<String, String>,
    ) -> Result<PathBuf, Error> {
        let jobs = self.jobserver()?;
        let released = jobs
            .open(id)
            .await
            .map_err(|e| Error::SpawnFailed(format!("cannot make its jobserver FIFO: {e}")))?;
        self.watch_jobs(id.to_string(), released);
        env.extend(jobs.env(id));
        Ok(jobs.fifo(id))
    }

    /// A `jobs` session's script, the make shim first on its PATH.
    pub(super) fn jobs_script(&self, script: String) -> String {
        match &self.jobs {
            Some(jobs) => jobs.script(&script),
            None => script,
        }
    }

    /// Session `id`'s next run is to start, the last one's processes
    /// gone: what they held is back (`JobServer::renew`).
    pub(super) async fn renew_jobs(&self, id: &str) {
        if let Some(jobs) = &self.jobs {
            jobs.renew(id).await;
        }
    }

    /// Session `id` ended (or never started): its tokens are back at once
    /// (before its exit shows) and are shared out again.
    pub(super) fn end_jobs(&self, id: &str) {
        let (Some(jobs), Some(me)) = (self.jobs.clone(), self.me.upgrade()) else {
            return;
        };
        jobs.let_go(id);
        tokio::spawn(async move {
            jobs.record_shares().await;
            me.share_jobs().await;
            me.queues.wake();
        });
    }

    /// Shares the tokens out again: taken back from where they sit unused
    /// while a `jobs` spawn waits for one (the starter then starts it),
    /// else what no slot holds given to the sessions running.
    pub(super) async fn share_jobs(&self) {
        let Some(jobs) = &self.jobs else {
            return;
        };
        let _changing = jobs.changing().await;
        let gift = self.queues.under_line(QUEUE, |running, waiting| {
            (waiting == 0).then(|| jobs.reserve(running))
        });
        match gift {
            Some(gift) => jobs.give(gift).await,
            None => {
                if jobs.take_back().await {
                    self.queues.wake();
                }
            }
        }
    }

    /// Shares the tokens out off the caller's path (a start).
    pub(super) fn share_jobs_soon(&self) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        tokio::spawn(async move { me.share_jobs().await });
    }

    /// Takes back every token sitting unused, so a `jobs` spawn about to
    /// ask for a slot finds one where tokens only sat.
    pub(super) async fn reclaim_jobs(&self) {
        if let Some(jobs) = &self.jobs {
            let _changing = jobs.changing().await;
            jobs.take_back().await;
        }
    }

    /// Follows tokens written back to session `id`'s FIFO until it is let
    /// go of: each return may be one a waiting spawn needs.
    fn watch_jobs(&self, id: String, released: Arc<Notify>) {
        let (Some(jobs), me) = (self.jobs.clone(), self.me.clone()) else {
            return;
        };
        tokio::spawn(async move {
            while jobs.returned(&id, &released).await {
                let Some(registry) = me.upgrade() else {
                    return;
                };
                registry.share_jobs().await;
            }
        });
    }

    /// Takes back what the previous daemon gave the `jobs` sessions still
    /// running, and follows them again.
    pub(super) async fn recover_jobs(&self) {
        let Some(jobs) = &self.jobs else {
            return;
        };
        let live = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.spec.is_jobs() && s.state().exit().is_none())
            .map(|s| s.id.clone())
            .collect();
        for (id, released) in jobs.recover(&live).await {
            self.watch_jobs(id, released);
        }
        self.share_jobs().await;
    }

    /// `status.jobserver`.
    pub fn jobserver_status(&self) -> Option<procd_proto::JobserverStatus> {
        let usage = self.jobs.as_ref()?.usage();
        let sessions: Vec<procd_proto::JobserverHolder> = usage
            .sessions
            .into_iter()
            .map(|(session_id, tokens)| procd_proto::JobserverHolder {
                session_id,
                tokens: tokens as u32,
            })
            .collect();
        Some(procd_proto::JobserverStatus {
            tokens: usage.tokens as u32,
            in_use: sessions.iter().map(|s| s.tokens).sum(),
            sessions,
        })
    }
}
