//! The supervisor: one task per run that reads the child's output into
//! its store (through the noise filter, the watch and the test run), waits
//! for its exit, drains what is left, and says how it ended. Besides output
//! and exit it wakes only for the timeout, a watch's linger, a flooded
//! log's tidy and a flood hold, each armed only while it applies.

use super::{ExitRecord, Session, Watch};
use crate::observation::watch::{WatchMatcher, WatchOutcome};
use crate::output::noise::NoiseFilter;
use crate::output::source::{OutputSource, MIN_READ_BUF};
use crate::output::store::OutputStore;
use crate::testrun::TestRun;
use crate::tree::reaper::ChildExit;
use procd_proto::CompletionReason;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};

/// What a supervisor tells the registry while its run goes on (how the run
/// ended is what `supervise` returns). The session never calls into the
/// registry: the registry takes these in the task that runs the
/// supervisor (`Registry::supervise_in_background`), in the order sent,
/// and all of them before the end.
#[derive(Debug)]
pub enum Report {
    /// The session's timeout passed: its tree is to be ended as "timeout".
    TimedOut,
    /// What the watch patterns yielded: a match, or a linger's end.
    Watch(WatchOutcome),
}

/// Where a supervisor's reports go. Unbounded, but never long: one
/// `TimedOut` a run, and watch outcomes as the matcher lets them out
/// (`watch_min_interval_s`, `watch_max_deliveries`), each taken by the
/// supervisor's own task as soon as it next waits.
pub type Reports = mpsc::UnboundedSender<Report>;

/// Waits for a recovered session's process to exit (through its pidfd,
/// which also guards against pid reuse). Its exit status is not knowable:
/// it was never our child.
pub async fn supervise_detached(
    session: Arc<Session>,
    pidfd: crate::pidfd::PidFd,
) -> Arc<ExitRecord> {
    while !pidfd.wait_exit(Duration::from_secs(3600)).await {}
    let termination = session.termination();
    session.output.finish();
    Arc::new(ExitRecord {
        exit_code: None,
        signal: None,
        reason: termination
            .as_ref()
            .map(|t| t.reason)
            .unwrap_or(CompletionReason::Lost),
        source: termination.map(|t| t.source),
        exited_at: SystemTime::now(),
        exited_instant: Instant::now(),
    })
}

/// Reads the child's output and waits for its exit, and returns how it
/// ended; the caller records the exit (events) and then calls
/// `mark_exited`. Returns None when the daemon hands its sessions over
/// (`handing_over` turns true): it stops between two steps, so every byte
/// it took from the pipe is stored, and the next daemon reads on. Output
/// reaches the log without passing through memory first (`output/source.rs`).
/// Exit comes from the direct child, never from EOF: after
/// the exit, what is still readable is drained until `final_drain` of
/// quiet (or 1 MiB), so a descendant holding the pipe cannot keep the
/// session running. Besides output and exit, the loop wakes only for the
/// timeout, a watch match's linger and a flooded log's tidy, each armed
/// only while it applies.
pub async fn supervise(
    session: Arc<Session>,
    mut output: OutputSource,
    mut exit_rx: oneshot::Receiver<ChildExit>,
    how: Supervision,
) -> Option<Arc<ExitRecord>> {
    let Supervision {
        noise,
        final_drain,
        reports,
        watch,
        mut handing_over,
        tests,
    } = how;
    let store = session.output.clone();
    let mut reading = Reading::new(noise, watch, tests);
    let mut eof = false;
    let timer = sleep_until(timeout_at(&session));
    tokio::pin!(timer);
    let mut timed_out = false;
    // Set while this session has used up its share of a multi-flood
    // (`output/fairness.rs`): its pipe is not read until then.
    let mut held_until: Option<Instant> = None;
    // Nothing read yet, nothing held: what a pipe holds, it tells itself.
    if output.is_pipe() {
        store.look_found_nothing();
    }

    let exit = loop {
        let linger = reading
            .watch
            .as_ref()
            .and_then(|w| w.matcher.as_ref()?.deadline());
        let tidy = store.tidy_due();
        tokio::select! {
            biased;
            chunk = output.next(&store, &mut reading.buf), if !eof && held_until.is_none() => match chunk {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    reading.found_empty(&store, output.is_pipe()).await;
                }
                Ok(0) | Err(_) => eof = true,
                Ok(n) => {
                    reading.took(&session, n).await;
                    fit_read_buffers(&mut reading.buf, &mut reading.filtered, n);
                    held_until = crate::output::fairness::charge(&session.id, n, Instant::now());
                }
            },
            exit = &mut exit_rx => break exit.ok(),
            () = handed_over(&mut handing_over) => {
                // What the noise filter holds is output the next daemon
                // will not judge again.
                finish_noise(&store, &mut reading.noise, &mut reading.filtered);
                return None;
            }
            () = sleep_until(linger), if linger.is_some() => {
                watch_step(&mut reading.watch, WatchMatcher::expire);
            }
            () = Watch::changed(&mut reading.watch) => {
                if let Some(w) = reading.watch.as_mut() {
                    w.renew();
                }
            }
            () = sleep_until(tidy), if tidy.is_some() => store.tidy().await,
            () = sleep_until(held_until), if held_until.is_some() => held_until = None,
            _ = &mut timer, if !timed_out => {
                timed_out = true;
                let _ = reports.send(Report::TimedOut);
            }
        }
    };
    session.mark_reaped();
    if !eof {
        reading.drain(&session, &mut output, final_drain).await;
    }
    Some(reading.finish(&session, exit).await)
}

/// What a supervisor reads with: its buffers, the noise filter, the watch
/// and the test run, which every stored chunk goes through in turn.
struct Reading {
    buf: Vec<u8>,
    filtered: Vec<u8>,
    noise: NoiseFilter,
    watch: Option<Watch>,
    tests: Option<TestRun>,
}

impl Reading {
    fn new(noise: NoiseFilter, watch: Option<Watch>, tests: Option<TestRun>) -> Reading {
        Reading {
            // Made at the first read (`OutputSource::next`): with 2000
            // sleepers that never print, these were half of what a
            // session held (44 KiB of PSS each).
            buf: Vec::new(),
            filtered: Vec::new(),
            noise,
            watch,
            tests,
        }
    }

    /// Stores the `n` bytes just read into `buf`, through the noise
    /// filter, and feeds what passed to the watch and the test run.
    async fn took(&mut self, session: &Session, n: usize) {
        let store = &session.output;
        self.noise.set_terminating(session.terminating());
        store_chunk(store, &mut self.noise, &self.buf[..n], &mut self.filtered).await;
        watch_step(&mut self.watch, |m, now| m.feed(&self.filtered, now));
        tests_step(store, &mut self.tests, &self.filtered);
    }

    /// Asked to drain, and the source was empty: what the noise filter
    /// holds is output now (a shell command's end, `shell/`).
    async fn found_empty(&mut self, store: &Arc<OutputStore>, is_pipe: bool) {
        if finish_noise(store, &mut self.noise, &mut self.filtered) {
            store.compact().await;
        }
        watch_step(&mut self.watch, |m, now| m.feed(&self.filtered, now));
        tests_step(store, &mut self.tests, &self.filtered);
        if is_pipe {
            store.look_found_nothing();
        }
        store.mark_drained();
    }

    /// After the drain: what the noise filter held is output too (stored
    /// and watched), the watch's last matches go out, and the run's end is
    /// recorded on its store.
    async fn finish(&mut self, session: &Session, exit: Option<ChildExit>) -> Arc<ExitRecord> {
        let store = &session.output;
        if finish_noise(store, &mut self.noise, &mut self.filtered) {
            store.compact().await;
        }
        watch_step(&mut self.watch, |m, now| m.feed(&self.filtered, now));
        watch_step(&mut self.watch, WatchMatcher::finish);
        tests_step(store, &mut self.tests, &self.filtered);
        finish_tests(session, self.tests.take()).await;
        let record = exit_record(session, exit);
        if store.tidy_due().is_some() {
            store.tidy().await;
        }
        store.finish();
        record
    }

    /// The final drain: everything the child wrote is already in the
    /// pipe; a descendant may add more, but only until it has been quiet
    /// for `final_drain` (and at most 1 MiB).
    async fn drain(&mut self, session: &Session, output: &mut OutputSource, final_drain: Duration) {
        const FINAL_DRAIN_MAX: usize = 1 << 20;
        let mut drained = 0usize;
        while drained < FINAL_DRAIN_MAX {
            match tokio::time::timeout(final_drain, output.next(&session.output, &mut self.buf))
                .await
            {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(n)) => {
                    drained += n;
                    self.took(session, n).await;
                }
            }
        }
    }
}

/// How the session ended: the child's status (None when unknowable), and
/// why, from the termination procd started if it did.
fn exit_record(session: &Session, exit: Option<ChildExit>) -> Arc<ExitRecord> {
    let termination = session.termination();
    let (exit_code, signal) = match exit {
        Some(ChildExit::Code(c)) => (Some(c), None),
        Some(ChildExit::Signal(s)) => (Some(-s), Some(s)),
        None => (None, None),
    };
    let (reason, source) = match (termination, exit) {
        (Some(t), _) => (t.reason, Some(t.source)),
        (None, None) => (CompletionReason::Lost, None),
        (None, Some(_)) => (CompletionReason::Exited, None),
    };
    Arc::new(ExitRecord {
        exit_code,
        signal,
        reason,
        source,
        exited_at: SystemTime::now(),
        exited_instant: Instant::now(),
    })
}

/// How a supervisor treats its session's output and life.
pub struct Supervision {
    pub noise: NoiseFilter,
    /// How long output must be quiet after the exit to end the drain.
    pub final_drain: Duration,
    /// Where the timeout's passing is reported (the watch has a sender
    /// of its own).
    pub reports: Reports,
    pub watch: Option<Watch>,
    /// Turns true when the daemon hands its sessions over.
    pub handing_over: watch::Receiver<bool>,
    /// The run's test runner, read from its first byte (None for a run
    /// that is no test run, and for one taken over mid-way: a count from
    /// half the output would be wrong).
    pub tests: Option<TestRun>,
}

/// Reads what was just stored into the test run, and shows its counts.
fn tests_step(store: &OutputStore, tests: &mut Option<TestRun>, stored: &[u8]) {
    let Some(run) = tests.as_mut() else { return };
    run.feed(stored, store.end());
    if run.take_changed() {
        store.set_tests(run.live());
    }
}

/// The run's end: the runner's totals, or those of the JUnit report the
/// spawn named (read off the event loop), or none.
async fn finish_tests(session: &Session, tests: Option<TestRun>) {
    let from_output = tests.and_then(|mut run| run.finish());
    let from_report = match session.spec.junit.clone() {
        Some(path) => tokio::task::spawn_blocking(move || crate::testrun::read_junit(&path))
            .await
            .ok()
            .flatten(),
        None => None,
    };
    if from_report.is_some() || from_output.is_some() || session.output.tests().is_some() {
        session.output.set_tests(from_report.or(from_output));
    }
}

/// Resolves once the daemon hands its sessions over (never if it cannot).
async fn handed_over(handing_over: &mut watch::Receiver<bool>) {
    if handing_over.wait_for(|h| *h).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// When the run's timeout fires: counted from its start, which a
/// recovered session's is too (`timeout_at` in the checkpoint is the same
/// instant).
fn timeout_at(session: &Session) -> Option<Instant> {
    session
        .spec
        .timeout
        .and_then(|t| session.started_instant().checked_add(t))
}

/// Sleeps until `due` (a watch match has waited long enough for its
/// following lines; the log's punched head is due to be collapsed);
/// forever without one.
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due.into()).await,
        None => std::future::pending().await,
    }
}

const MAX_READ_BUF: usize = 1 << 20;

/// Sizes the read buffers to the output's pace after a read of `n` bytes:
/// doubled while reads fill them (a flood: fewer, larger reads), shrunk
/// once reads are small again, so a session that flooded once does not
/// hold megabytes for the rest of its life.
fn fit_read_buffers(buf: &mut Vec<u8>, filtered: &mut Vec<u8>, n: usize) {
    if n == buf.len() && buf.len() < MAX_READ_BUF {
        buf.resize(buf.len() * 2, 0);
    } else if n < buf.len() / 4 && buf.len() > MIN_READ_BUF {
        let fit = (n * 2).next_power_of_two().max(MIN_READ_BUF);
        buf.truncate(fit);
        buf.shrink_to_fit();
        filtered.clear();
        filtered.shrink_to(fit);
    }
}

/// Runs one step of the session's watch matcher (feed, expire, finish),
/// if it has one, and reports what the step yields.
fn watch_step(
    watch: &mut Option<Watch>,
    step: impl FnOnce(&mut WatchMatcher, Instant) -> Vec<WatchOutcome>,
) {
    if let Some(Watch {
        matcher: Some(matcher),
        reports,
        ..
    }) = watch
    {
        for outcome in step(matcher, Instant::now()) {
            let _ = reports.send(Report::Watch(outcome));
        }
    }
}

/// Filters a chunk the source brought (in the log, undecided, or only in
/// memory) and settles it: what the filter passes is output from now on.
async fn store_chunk(
    store: &Arc<OutputStore>,
    noise: &mut NoiseFilter,
    chunk: &[u8],
    filtered: &mut Vec<u8>,
) {
    filtered.clear();
    noise.push(chunk, filtered);
    if store.settle(filtered, noise.held()) {
        store.compact().await;
    }
}

/// Decides what the noise filter still holds (the output ended, or is
/// handed over); returns true when the log should be compacted.
fn finish_noise(store: &OutputStore, noise: &mut NoiseFilter, filtered: &mut Vec<u8>) -> bool {
    filtered.clear();
    noise.finish(filtered);
    store.settle(filtered, noise.held())
}

#[cfg(test)]
mod tests {
    use super::{fit_read_buffers, MAX_READ_BUF, MIN_READ_BUF};

    #[test]
    fn read_buffers_grow_in_a_flood_and_shrink_after_it() {
        let (mut buf, mut filtered) = (vec![0u8; MIN_READ_BUF], Vec::new());
        while buf.len() < MAX_READ_BUF {
            let n = buf.len();
            filtered.resize(n, 0);
            fit_read_buffers(&mut buf, &mut filtered, n);
        }
        fit_read_buffers(&mut buf, &mut filtered, MAX_READ_BUF);
        assert_eq!(buf.len(), MAX_READ_BUF, "capped");
        fit_read_buffers(&mut buf, &mut filtered, MAX_READ_BUF / 2);
        assert_eq!(buf.len(), MAX_READ_BUF, "a half-full read keeps the size");
        fit_read_buffers(&mut buf, &mut filtered, 100);
        assert_eq!(buf.len(), MIN_READ_BUF);
        assert!(buf.capacity() <= 2 * MIN_READ_BUF && filtered.capacity() <= 2 * MIN_READ_BUF);
    }
}
