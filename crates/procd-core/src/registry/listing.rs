//! Listing sessions: `list` (paged), `has_active`, `snapshot_running`.

use super::present::process_entry;
use super::Registry;
use crate::admission::queue::Queued;
use crate::error::Error;
use crate::session::Session;
use procd_proto::{HasActiveResult, ListFilter, ListResult, MaxActiveAgeS, SnapshotResult};
use std::sync::Arc;

/// One page of `list`: at most `limit` entries, starting after the entry
/// `after` names (a session or a queued spawn's id, as `next_after` gave).
#[derive(Debug, Clone, Copy, Default)]
pub struct ListPage<'a> {
    pub limit: Option<usize>,
    pub after: Option<&'a str>,
}

/// An entry `list` shows, before its (costlier) `ProcessEntry` is built;
/// with whether only its session key listed it.
enum Listed<'a> {
    Session(&'a Session, bool),
    Queued(&'a Queued, bool),
}

impl Registry {
    /// `owner`: only the sessions spawned with that lease token. Entries
    /// come in start order (ties by id), then the queued spawns in queue
    /// order; `page` cuts one page out of that order, and only the page's
    /// entries are built.
    pub fn list(
        &self,
        task_id: Option<&str>,
        session_key: Option<&str>,
        filter: ListFilter,
        owner: Option<&str>,
        page: ListPage<'_>,
    ) -> Result<ListResult, Error> {
        let whose = Asked {
            task_id,
            session_key,
            owner,
        };
        let sessions = self.all_sessions();
        let queued = self.queues.all();
        let (first_session, first_queued) = page_start(&sessions, &queued, page.after)?;
        let shown_sessions = sessions[first_session..]
            .iter()
            .filter(|s| match filter {
                ListFilter::All => true,
                ListFilter::Running => s.is_running(),
                ListFilter::Exited => !s.is_running(),
            })
            .filter_map(|s| {
                let spec = &s.spec;
                let scoped = whose.shows(&spec.task_id, &spec.session_key, &spec.owner)?;
                Some(Listed::Session(s, scoped))
            });
        // A queued spawn has neither run nor exited: only "all" shows it.
        let shown_queued = queued[first_queued..]
            .iter()
            .filter(|_| filter == ListFilter::All)
            .filter_map(|e| {
                let p = e.params();
                let scoped = whose.shows(&p.task_id, &p.session_key, &p.owner)?;
                Some(Listed::Queued(e, scoped))
            });
        let limit = page.limit.unwrap_or(usize::MAX);
        let mut processes = Vec::new();
        let mut items = shown_sessions.chain(shown_queued);
        for item in items.by_ref().take(limit) {
            processes.push(match item {
                Listed::Session(s, scoped) => process_entry(&self.redactor, s, scoped),
                Listed::Queued(e, scoped) => self.queued_entry(e, scoped),
            });
        }
        let next_after = match items.next() {
            Some(_) => processes.last().map(|e| e.session_id.clone()),
            None => None,
        };
        Ok(ListResult {
            processes,
            next_after,
        })
    }

    pub fn has_active(
        &self,
        task_id: Option<&str>,
        session_key: Option<&str>,
        max_active_age: Option<MaxActiveAgeS>,
        owner: Option<&str>,
    ) -> HasActiveResult {
        let max_age = max_active_age.map(MaxActiveAgeS::duration);
        // Asked for by task or key (either), and owner; the same rule for
        // a session and for a queued spawn.
        let asked = |their_task: &Option<String>,
                     their_key: &Option<String>,
                     their_owner: &Option<String>| {
            owner.is_none_or(|o| their_owner.as_deref() == Some(o))
                && match (task_id, session_key) {
                    (None, None) => true,
                    (t, k) => {
                        t.is_some_and(|t| their_task.as_deref() == Some(t))
                            || k.is_some_and(|k| their_key.as_deref() == Some(k))
                    }
                }
        };
        let count = self
            .all_sessions()
            .into_iter()
            .filter(|s| s.is_running())
            .filter(|s| asked(&s.spec.task_id, &s.spec.session_key, &s.spec.owner))
            .filter(|s| max_age.is_none_or(|age| s.started_instant().elapsed() <= age))
            .count() as u32;
        // A queued spawn is active: it will run.
        let queued = self
            .queues
            .all()
            .iter()
            .filter(|e| {
                let p = e.params();
                asked(&p.task_id, &p.session_key, &p.owner)
            })
            .count() as u32;
        let count = count + queued;
        HasActiveResult {
            active: count > 0,
            count,
        }
    }

    pub fn snapshot_running(&self, task_id: &str) -> SnapshotResult {
        SnapshotResult {
            session_ids: self
                .all_sessions()
                .into_iter()
                .filter(|s| s.is_running() && s.spec.task_id.as_deref() == Some(task_id))
                .map(|s| s.id.clone())
                .collect(),
        }
    }
}

/// What a `list` asks for by task, key and owner.
struct Asked<'a> {
    task_id: Option<&'a str>,
    session_key: Option<&'a str>,
    owner: Option<&'a str>,
}

impl Asked<'_> {
    /// Whether a session with these fields is listed, and if so whether
    /// only by its session key (`session_scoped`).
    fn shows(
        &self,
        their_task: &Option<String>,
        their_key: &Option<String>,
        their_owner: &Option<String>,
    ) -> Option<bool> {
        if self
            .owner
            .is_some_and(|o| their_owner.as_deref() != Some(o))
        {
            return None;
        }
        let own_task = self
            .task_id
            .is_none_or(|t| their_task.as_deref() == Some(t));
        let same_key = self
            .session_key
            .is_some_and(|k| their_key.as_deref() == Some(k));
        let (shown, scoped) = match (self.task_id, self.session_key) {
            (None, None) => (true, false),
            (None, Some(_)) => (same_key, false),
            (Some(_), None) => (own_task, false),
            (Some(_), Some(_)) => (own_task || same_key, !own_task && same_key),
        };
        shown.then_some(scoped)
    }
}

/// Where a page starts: (the first session, the first queued spawn). The
/// cursor is found among every entry, not only the listed ones: the
/// session it names may have exited (or started) since the last page, and
/// the walk goes on from where it stood.
fn page_start(
    sessions: &[Arc<Session>],
    queued: &[Arc<Queued>],
    after: Option<&str>,
) -> Result<(usize, usize), Error> {
    let Some(after) = after else {
        return Ok((0, 0));
    };
    if let Some(i) = sessions.iter().position(|s| s.id == after) {
        Ok((i + 1, 0))
    } else if let Some(i) = queued.iter().position(|e| e.id == after) {
        Ok((sessions.len(), i + 1))
    } else {
        Err(Error::NotFound(format!(
            "after: no session {after:?} (it was removed since the last page): \
             list again without after"
        )))
    }
}
