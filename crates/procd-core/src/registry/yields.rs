//! Spawn-and-yield and write-and-yield: waiting, within `yield_ms`, for
//! the moment an agent should look (the session exited, went quiet, asks
//! for input, or became ready), then returning its output from a cursor.

use super::{
    present::{exit_info, status_of},
    reading::next_change,
    Registry, MAX_READ_BYTES,
};
use crate::error::Error;
use crate::session::{self, Session};
use procd_proto::{ExitInfo, SessionStatus, YieldMs};
use std::sync::Arc;
use std::time::Duration;

impl Registry {
    /// Waits until the session exits, goes quiet after some output, starts
    /// waiting for input, becomes ready (when that was awaited and
    /// `await_ready`: then quiet does not count), or `wait` passes; then
    /// returns its output from `from` on.
    pub(super) async fn yield_output(
        &self,
        s: &Arc<Session>,
        from: u64,
        wait: Duration,
        budget: Option<usize>,
        await_ready: bool,
    ) -> Result<Yielded, Error> {
        let deadline = tokio::time::Instant::now() + wait;
        let awaited_ready = await_ready && s.readiness().awaited();
        let mut next_probe = tokio::time::Instant::now();
        let mut waiting = false;
        loop {
            let mut output_changed = s.output.subscribe();
            // (Readiness is in the view too: a change of it wakes this.)
            let mut state_changed = s.subscribe();
            if !s.is_running() {
                break;
            }
            let readiness = s.readiness();
            if awaited_ready && !readiness.awaited() {
                break; // ready (or timed out)
            }
            // (While readiness is awaited, going quiet is not an answer.)
            let quiet_counts = s.output.end() > from && !awaited_ready;
            if s.takes_input() && s.idle_for() >= session::INPUT_QUIET {
                if tokio::time::Instant::now() >= next_probe {
                    self.probe(s).await;
                    next_probe = tokio::time::Instant::now() + session::INPUT_QUIET;
                }
                if s.waiting_for_input() {
                    waiting = true;
                    break;
                }
            }
            // Seen blocked on its input, not yet for long enough: the next
            // probe decides, so "quiet" does not end the yield meanwhile.
            let confirming = s.takes_input() && s.seen_reading_input();
            if quiet_counts && !confirming && s.output.quiet_for() >= YIELD_QUIET {
                break;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            let quiet = s.output.quiet_for();
            let mut wake = deadline;
            if quiet_counts && !confirming {
                wake = wake.min(now + YIELD_QUIET.saturating_sub(quiet));
            }
            if s.takes_input() {
                wake = wake.min(match session::INPUT_QUIET.checked_sub(s.idle_for()) {
                    Some(left) if !left.is_zero() => now + left,
                    _ => next_probe,
                });
            }
            next_change(&mut output_changed, &mut state_changed, wake).await;
        }
        self.yielded(s, from, budget, waiting).await
    }

    /// What a yield answers: the output from `from` (within `budget`)
    /// and where the session stands.
    async fn yielded(
        &self,
        s: &Arc<Session>,
        from: u64,
        budget: Option<usize>,
        waiting: bool,
    ) -> Result<Yielded, Error> {
        let r = self
            .read(&s.id, Some(from), Some(MAX_READ_BYTES), None, None)
            .await?;
        let fetch = format!("read from cursor {} to see all of it", r.cursor);
        let cut = crate::output::budget::apply(&r.data, budget, &fetch);
        let state = s.state();
        Ok(Yielded {
            output: cut.text,
            cursor: r.next_cursor,
            original_chars: cut.original_chars,
            kept_error_lines: cut.kept_error_lines,
            status: status_of(&state),
            exit: exit_info(&state),
            ready: s.readiness().flag(),
            waiting_for_input: waiting,
        })
    }
}

/// How long output must pause before a yield returns ("it went quiet").
pub(super) const YIELD_QUIET: Duration = Duration::from_millis(300);
/// The longest a spawn or write may yield.
pub(super) const MAX_YIELD: Duration = Duration::from_secs(300);

/// What a spawn or write that yields returns.
pub(super) struct Yielded {
    pub(super) output: String,
    pub(super) cursor: u64,
    pub(super) original_chars: Option<u64>,
    pub(super) kept_error_lines: Option<u64>,
    pub(super) status: SessionStatus,
    pub(super) exit: Option<ExitInfo>,
    pub(super) ready: Option<bool>,
    pub(super) waiting_for_input: bool,
}

/// How long a call yields: none unless asked, at most `MAX_YIELD`.
pub(super) fn yield_duration(yield_ms: Option<YieldMs>) -> Duration {
    yield_ms.map_or(Duration::ZERO, |y| y.duration().min(MAX_YIELD))
}
