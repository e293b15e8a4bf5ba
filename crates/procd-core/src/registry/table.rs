//! The sessions by id, and what of them the checkpoint has yet to write:
//! kept beside the table, under its lock, so that a checkpoint write
//! visits the sessions that changed, never every session retained.

use crate::persist::checkpoint::EndedExit;
use crate::session::Session;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

#[derive(Default)]
pub(super) struct Table {
    /// FxHash, not SipHash: the ids are the daemon's own random names, so
    /// no client chooses a key that goes in; a lookup by a client's string
    /// only hashes it. A poll's lookup: 328 -> 139 instructions.
    by_id: FxHashMap<String, Arc<Session>>,
    /// Sessions whose record `procs.json` carries: every running one, and
    /// each ended one until `ended.jsonl` holds its exit (`settle`). In
    /// the order they started (as `list` gives them), so that a write
    /// neither sorts nor looks them up.
    unsettled: BTreeMap<StartOrder, Arc<Session>>,
    /// Ended sessions taken out of the table, or replaced in it, since
    /// the checkpoint last asked: the `gone` lines `ended.jsonl` is owed.
    gone: Vec<String>,
    /// The finished sessions, earliest exit first, as they were when last
    /// looked at (`earliest_finished`): what `max_sessions` drops next.
    finished: std::collections::BinaryHeap<std::cmp::Reverse<(Instant, String)>>,
}

/// Reads go straight to the map; changes go through `insert` and
/// `remove`, which keep the checkpoint's books.
impl std::ops::Deref for Table {
    type Target = FxHashMap<String, Arc<Session>>;
    fn deref(&self) -> &Self::Target {
        &self.by_id
    }
}

/// Where a session stands in `unsettled`: when it started, then its id.
type StartOrder = (Instant, String);

fn start_order(s: &Session) -> StartOrder {
    (s.started_instant(), s.id.clone())
}

impl Table {
    pub(super) fn insert(&mut self, id: String, session: Arc<Session>) -> Option<Arc<Session>> {
        let replaced = self.by_id.insert(id, session.clone());
        if let Some(replaced) = &replaced {
            self.unsettled.remove(&start_order(replaced));
            self.owe_gone(replaced);
        }
        self.unsettled.insert(start_order(&session), session);
        replaced
    }

    /// A restarting session's next run begins (`Session::begin_run`): it
    /// moves to the new run's start in the order, under the table's lock
    /// (no lookup by its old start is left to fail).
    pub(super) fn begin_run(&mut self, s: &Arc<Session>, next: crate::session::NextRunParts) {
        let held = self.unsettled.remove(&start_order(s));
        s.begin_run(next);
        if held.is_some() {
            self.unsettled.insert(start_order(s), s.clone());
        }
    }

    pub(super) fn remove(&mut self, id: &str) -> Option<Arc<Session>> {
        let removed = self.by_id.remove(id)?;
        self.unsettled.remove(&start_order(&removed));
        self.owe_gone(&removed);
        Some(removed)
    }

    /// An ended session's record may be in `ended.jsonl` (or on its way
    /// there): it is taken back with a `gone` line.
    fn owe_gone(&mut self, s: &Session) {
        if s.state().exit().is_some() {
            self.gone.push(s.id.clone());
        }
    }

    /// The sessions `procs.json` carries, in the order they started.
    pub(super) fn unsettled(&self) -> impl Iterator<Item = &Arc<Session>> {
        self.unsettled.values()
    }

    pub(super) fn take_gone(&mut self) -> Vec<String> {
        std::mem::take(&mut self.gone)
    }

    /// `ended.jsonl` holds these exits now: the sessions drop out of
    /// `procs.json`, unless the one under the id is no longer the run
    /// that exit was of.
    pub(super) fn settle(&mut self, held: &[(String, String)]) {
        for (id, exited_at) in held {
            let Some(s) = self.by_id.get(id) else {
                continue;
            };
            let same = s
                .state()
                .exit()
                .is_some_and(|e| EndedExit::of(e).exited_at == *exited_at);
            if same {
                self.unsettled.remove(&start_order(s));
            }
        }
    }

    /// The ids of the `n` finished sessions that exited earliest. The order
    /// is taken from the table when the last one taken ran out, so most
    /// calls look at no more than they return: a session that exits later
    /// exits after every one in it. (One listed since with an exit from
    /// before, by a recovery, waits for the next look.)
    pub(super) fn earliest_finished(&mut self, n: usize) -> Vec<String> {
        let mut out = Vec::with_capacity(n);
        let mut looked = false;
        while out.len() < n {
            let Some(std::cmp::Reverse((exited, id))) = self.finished.pop() else {
                if looked {
                    break;
                }
                looked = true;
                self.finished = self
                    .by_id
                    .values()
                    .filter_map(|s| {
                        Some(std::cmp::Reverse((
                            s.state().exit()?.exited_instant,
                            s.id.clone(),
                        )))
                    })
                    .collect();
                continue;
            };
            // Still here, and still that run.
            let same = self
                .by_id
                .get(&id)
                .is_some_and(|s| s.state().exit().is_some_and(|e| e.exited_instant == exited));
            if same && !out.contains(&id) {
                out.push(id);
            }
        }
        out
    }
}
