//! Restart policies (docs/stacks.md): whether, and how soon, a session's
//! command starts again when a run ends. The decisions only; the
//! registry acts on them (`registry/restarts.rs`).

use procd_proto::{
    BackoffS, CompletionReason, MaxRestarts, ResetAfterS, RestartPolicy, RestartSpec,
};
use std::time::Duration;

/// The longest a restart waits, however many came before it in a row.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The shortest: a command that ends at once, under `always` with a zero
/// backoff, restarts at most ten times a second, not in a hot loop.
pub const MIN_DELAY: Duration = Duration::from_millis(100);
const DEFAULT_MAX_RESTARTS: u32 = 5;
const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);
const DEFAULT_RESET_AFTER: Duration = Duration::from_secs(60);

/// A session's restart policy with its defaults applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestartPlan {
    pub policy: RestartPolicy,
    pub max_restarts: u32,
    pub backoff: Duration,
    pub reset_after: Duration,
}

/// What comes after a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The session ends with this run.
    End,
    /// It restarted `max_restarts` times in a row: it ends as `crash_loop`.
    CrashLoop,
    /// The next run starts after this delay.
    RestartIn(Duration),
}

/// Where a session stands across its runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunCount {
    /// The run now (or last) going: 1 is the first start.
    pub run: u32,
    /// Restarts in a row, each after a run shorter than `reset_after`.
    pub streak: u32,
}

impl Default for RunCount {
    fn default() -> Self {
        RunCount { run: 1, streak: 0 }
    }
}

impl RestartPlan {
    /// The plan `spec` asks for; None for `policy: "no"` (no plan at all).
    pub fn new(spec: &RestartSpec) -> Option<RestartPlan> {
        (spec.policy != RestartPolicy::No).then(|| RestartPlan {
            policy: spec.policy,
            max_restarts: spec
                .max_restarts
                .map_or(DEFAULT_MAX_RESTARTS, MaxRestarts::get),
            backoff: spec
                .backoff_s
                .map_or(DEFAULT_BACKOFF, BackoffS::duration)
                .min(MAX_BACKOFF),
            reset_after: spec
                .reset_after_s
                .map_or(DEFAULT_RESET_AFTER, ResetAfterS::duration),
        })
    }

    /// The plan of a session restarted only when its files change
    /// (`spawn{watch}` without a restart policy): its own ends are final.
    pub fn on_change_only() -> RestartPlan {
        RestartPlan {
            policy: RestartPolicy::No,
            max_restarts: DEFAULT_MAX_RESTARTS,
            backoff: DEFAULT_BACKOFF,
            reset_after: DEFAULT_RESET_AFTER,
        }
    }

    /// The plan as a spawn would ask for it (the checkpoint keeps this).
    pub fn spec(&self) -> RestartSpec {
        RestartSpec {
            policy: self.policy,
            max_restarts: Some(MaxRestarts::new(self.max_restarts)),
            backoff_s: Some(BackoffS::new(self.backoff.as_secs_f64())),
            reset_after_s: Some(ResetAfterS::new(self.reset_after.as_secs_f64())),
        }
    }

    /// What follows a run that lasted `lived` and ended for `reason` with
    /// `exit_code`, given the count so far; and the count for the next run.
    /// procd's own ends (kill, timeout, a failed start) are final.
    pub fn next(
        &self,
        count: RunCount,
        lived: Duration,
        reason: CompletionReason,
        exit_code: Option<i32>,
    ) -> (Next, RunCount) {
        let failed = match reason {
            CompletionReason::Exited => exit_code != Some(0),
            // Gone unseen (its code unknown) or killed by the kernel.
            CompletionReason::Lost | CompletionReason::Oom => true,
            CompletionReason::Killed
            | CompletionReason::Timeout
            | CompletionReason::FailedStart
            | CompletionReason::CrashLoop => return (Next::End, count),
        };
        let wanted = match self.policy {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => failed,
            RestartPolicy::No => false,
        };
        if !wanted {
            return (Next::End, count);
        }
        let streak = if lived >= self.reset_after {
            0
        } else {
            count.streak
        };
        if streak >= self.max_restarts {
            return (Next::CrashLoop, count);
        }
        let delay = self
            .backoff
            .saturating_mul(1u32 << streak.min(16))
            .clamp(MIN_DELAY, MAX_BACKOFF);
        let next = RunCount {
            run: count.run.saturating_add(1),
            streak: streak + 1,
        };
        (Next::RestartIn(delay), next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(policy: RestartPolicy, max: u32) -> RestartPlan {
        RestartPlan {
            policy,
            max_restarts: max,
            backoff: Duration::from_millis(200),
            reset_after: Duration::from_secs(10),
        }
    }

    const SHORT: Duration = Duration::from_millis(5);

    #[test]
    fn backoff_doubles_up_to_the_cap_then_the_row_ends_in_a_crash_loop() {
        let p = RestartPlan {
            backoff: Duration::from_secs(4),
            ..plan(RestartPolicy::Always, 5)
        };
        let mut count = RunCount::default();
        let mut delays = Vec::new();
        loop {
            match p.next(count, SHORT, CompletionReason::Exited, Some(1)) {
                (Next::RestartIn(d), next) => {
                    delays.push(d.as_secs());
                    assert_eq!(next.run, count.run + 1);
                    count = next;
                }
                (Next::CrashLoop, same) => {
                    assert_eq!(same, count);
                    break;
                }
                (Next::End, _) => panic!("always ended"),
            }
        }
        assert_eq!(delays, [4, 8, 16, 30, 30]);
        assert_eq!(count.run, 6);
    }

    #[test]
    fn a_run_that_lasts_reset_after_starts_a_new_row() {
        let p = plan(RestartPolicy::OnFailure, 1);
        let (first, count) = p.next(
            RunCount::default(),
            SHORT,
            CompletionReason::Exited,
            Some(2),
        );
        assert_eq!(first, Next::RestartIn(Duration::from_millis(200)));
        assert_eq!(
            p.next(count, SHORT, CompletionReason::Exited, Some(2)).0,
            Next::CrashLoop
        );
        let (again, after) = p.next(
            count,
            Duration::from_secs(10),
            CompletionReason::Exited,
            Some(2),
        );
        assert_eq!(again, Next::RestartIn(Duration::from_millis(200)));
        assert_eq!((after.run, after.streak), (3, 1));
    }

    #[test]
    fn on_failure_ends_at_exit_zero_and_procd_ends_are_final() {
        let p = plan(RestartPolicy::OnFailure, 5);
        let c = RunCount::default();
        assert_eq!(
            p.next(c, SHORT, CompletionReason::Exited, Some(0)).0,
            Next::End
        );
        for failed in [
            (CompletionReason::Exited, Some(-9)),
            (CompletionReason::Oom, Some(137)),
            (CompletionReason::Lost, None),
        ] {
            assert!(matches!(
                p.next(c, SHORT, failed.0, failed.1).0,
                Next::RestartIn(_)
            ));
        }
        let always = plan(RestartPolicy::Always, 5);
        assert!(matches!(
            always.next(c, SHORT, CompletionReason::Exited, Some(0)).0,
            Next::RestartIn(_)
        ));
        for ours in [
            CompletionReason::Killed,
            CompletionReason::Timeout,
            CompletionReason::FailedStart,
        ] {
            assert_eq!(always.next(c, SHORT, ours, Some(1)).0, Next::End);
        }
    }

    #[test]
    fn a_zero_backoff_still_waits_the_floor() {
        let p = RestartPlan {
            backoff: Duration::ZERO,
            ..plan(RestartPolicy::Always, 5)
        };
        let (next, _) = p.next(
            RunCount::default(),
            SHORT,
            CompletionReason::Exited,
            Some(0),
        );
        assert_eq!(next, Next::RestartIn(MIN_DELAY));
    }

    #[test]
    fn policy_no_is_no_plan_and_the_spec_round_trips() {
        let spec = |policy| RestartSpec {
            policy,
            max_restarts: None,
            backoff_s: Some(BackoffS::new(99.0)),
            reset_after_s: None,
        };
        assert_eq!(RestartPlan::new(&spec(RestartPolicy::No)), None);
        let p = RestartPlan::new(&spec(RestartPolicy::Always)).unwrap();
        assert_eq!(p.backoff, MAX_BACKOFF);
        assert_eq!((p.max_restarts, p.reset_after.as_secs()), (5, 60));
        assert_eq!(RestartPlan::new(&p.spec()), Some(p));
    }
}
