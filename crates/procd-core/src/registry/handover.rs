//! Sessions that survive the daemon (docs/survival.md): what the keeper is told as
//! sessions come and go, handing every session to the next daemon
//! (`hand_over`), and taking back the ones a previous daemon started
//! (`adopt_handed`). docs/survival.md has the design.
//!
//! The keeper holds a duplicate of each session's output read end and stdin
//! write end (or PTY master and relay) from right after the start until its
//! exit is recorded (`hold_in_keeper`, `release_from_keeper`; closing a
//! pipe's stdin closes the keeper's copy first). Where the kernel gives a
//! pidfd's holder the exit (Linux 6.15+) it holds the root's pidfd too: a
//! root the daemon reaped and died before recording has its exit read from
//! it (`reaped_by_the_daemon`).

use super::recovery::recovered_spec;
use super::{launch, Registry};
use crate::identity::ProcessIdentity;
use crate::observation::readiness::Readiness;
use crate::output::source::OutputSource;
use crate::output::store::OutputStore;
use crate::persist::checkpoint::CheckpointEntry;
use crate::session::{self, Opening, Origin, Run, SessionSpec, Started, StdinSink};
use procd_keeper::HandedSession;
use procd_proto::StdinMode;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Counts a supervisor task while it lives (`Registry::hand_over` waits
/// until none is left).
pub(super) struct SupervisorCount(tokio::sync::watch::Sender<usize>);

impl Drop for SupervisorCount {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Registry {
    pub(super) fn count_supervisor(&self) -> SupervisorCount {
        self.supervisors.send_modify(|n| *n += 1);
        SupervisorCount(self.supervisors.clone())
    }

    /// Gives the keeper duplicates of what a new session lives on: its
    /// output pipe's read end and stdin pipe's write end, or its PTY
    /// master and relay. Without them a daemon's death would close the last reader
    /// (SIGPIPE at the next write) or the master (SIGHUP).
    pub(super) fn hold_in_keeper(
        &self,
        id: &str,
        root: ProcessIdentity,
        io: &launch::ChildIo,
        restarts: Option<&session::Restarts>,
    ) {
        let Some(keeper) = &self.keeper else {
            return;
        };
        let mut fds = io.kept();
        if let Some(memfd) = restarts.and_then(|r| r.launch_memfd.as_ref()) {
            fds.push((
                procd_keeper::FdKind::Launch,
                std::os::fd::AsFd::as_fd(memfd),
            ));
        }
        // From the root's pidfd the keeper learns how it ended when this
        // daemon reaped it and died before saying so; under systemd, the
        // next keeper too (the user manager reaps it). Opened while the
        // root is our unreaped child, start time checked.
        let wanted = keeper.fd_store() || procd_sys::pidfd::exits_visible();
        let pidfd = wanted.then(|| root.open(&self.procfs)).flatten();
        if let Some(pidfd) = &pidfd {
            fds.push((procd_keeper::FdKind::Process, pidfd.as_fd()));
        }
        let held = keeper.hold(id, root.pid, root.start_time, &fds);
        self.keeper_answered(
            held,
            &format!("cannot hold session {id} (it will not survive the daemon's death)"),
        );
    }

    /// The session is over: the keeper closes its copies.
    pub(super) fn release_from_keeper(&self, id: &str) {
        if let Some(keeper) = &self.keeper {
            let released = keeper.release(id);
            self.keeper_answered(released, &format!("still holds the ended session {id}"));
        }
    }

    /// A pipe's stdin was closed: so must the keeper's copy of it be.
    pub(super) fn keeper_closes_stdin(&self, id: &str) {
        if let Some(keeper) = &self.keeper {
            let closed = keeper.close_stdin(id);
            self.keeper_answered(
                closed,
                &format!("still holds the stdin of {id} (it sees no EOF)"),
            );
        }
    }

    /// A message the keeper could not be sent is a fault (`status.faults`)
    /// until one goes through.
    fn keeper_answered(&self, sent: std::io::Result<()>, consequence: &str) {
        match sent {
            Ok(()) => self.faults.clear("keeper"),
            Err(err) => {
                tracing::warn!(%err, "keeper: {consequence}");
                self.faults
                    .set("keeper", &format!("the keeper {consequence}: {err}"));
            }
        }
    }

    /// Hands every session to the next daemon (`procd restart`, an
    /// upgrade): no spawn is accepted any more, every supervisor stops
    /// between two reads (so all output it took is stored), and the
    /// checkpoint is written last. The sessions keep running; the keeper
    /// holds their descriptors. Waits at most `limit` for the supervisors.
    pub async fn hand_over(&self, limit: Duration) {
        self.closing.store(true, Ordering::SeqCst);
        self.handing_over.send_replace(true);
        let mut left = self.supervisors.subscribe();
        let _ = tokio::time::timeout(limit, left.wait_for(|n| *n == 0)).await;
        let _ = self.write_checkpoint().await;
    }

    /// Takes back a session the keeper kept (`entry` is its checkpoint
    /// record): its log reopened at its end, a supervisor reading the same
    /// pipe or PTY master on, stdin writable again, its exit from the
    /// keeper (exact, also when it ended while no daemon ran). None when
    /// the two do not describe the same process, unless the keeper's is
    /// the next run of a restarting session the checkpoint has in its
    /// backoff (the daemon died between starting it and recording it).
    pub(super) async fn adopt_handed(
        &self,
        e: &CheckpointEntry,
        mut handed: HandedSession,
    ) -> Option<()> {
        if !e.has_session_id() {
            return None;
        }
        let next_run;
        let (e, unrecorded_run) = if handed.pid == e.pid && handed.start_time == e.start_time {
            (e, false)
        } else {
            let root = crate::identity::ProcessIdentity {
                pid: handed.pid,
                start_time: handed.start_time,
            };
            next_run = e.as_next_run(root)?;
            (&next_run, true)
        };
        let keeper = self.keeper.clone()?;
        let output = self.reopen_log(e).await?;
        // A run the checkpoint does not name yet had none of its output
        // read (its supervisor starts after the record): it begins at
        // the log's end.
        let output_from = match unrecorded_run {
            true => output.end(),
            false => e.restart.as_ref().map_or(0, |r| r.output_from),
        };
        let mut spec = recovered_spec(e);
        let launch = handed.launch.take();
        if handed.stdin.is_some() || handed.pty.is_some() {
            spec.stdin = StdinMode::Pipe;
        }
        let (reader, sink, probe) = match handed_io(handed) {
            Ok(io) => io,
            Err(err) => {
                tracing::warn!(session = %e.session_id, %err, "cannot use what the keeper kept");
                return None;
            }
        };
        let (readiness, watch_ready) = resume_readiness(&spec, e.ready_after_ms);
        let input = match spec.stdin {
            StdinMode::Pipe => crate::observation::observe::InputId::of_fd(&self.procfs, e.pid, 0),
            StdinMode::Null => None,
        };
        let slot = self.recovered_slot(&spec);
        let mut run = Run::new(e.root(), Started::at(e.started_at()), spec.pty, output_from);
        (run.systemd_unit, run.cgroup, run.input) =
            (e.systemd_unit.clone(), e.cgroup().map(Arc::new), input);
        let session = self.admit(Opening {
            id: e.session_id.clone(),
            spec,
            run,
            output: Arc::new(output),
            stdin: sink.map(stdin_writer),
            origin: Origin::HandedOver,
            output_probe: probe,
            slot: Some(slot),
            restarts: self.recovered_restarts(e, launch),
            readiness,
            ended: None,
            adopted: None,
        });
        if let Some(check) = watch_ready {
            tokio::spawn(self.watch_readiness(session.clone(), check));
        }
        self.watch_oom(&session);
        self.go_on_handed(session, reader, unrecorded_run, &keeper);
        Some(())
    }

    /// A handed-over session goes on: in a backoff its last run is over
    /// (reaped by the daemon before) and no exit will come for it, so
    /// its next run is due instead; else the run the keeper held is
    /// supervised (announced first when the checkpoint did not name it).
    fn go_on_handed(
        &self,
        session: Arc<session::Session>,
        reader: OutputSource,
        unrecorded_run: bool,
        keeper: &procd_keeper::Link,
    ) {
        if let Some(restarts) = session.restarts.clone() {
            if let Some(next) = session.next_run() {
                drop(reader);
                return self.resume_backoff(session, &restarts, next);
            }
            if unrecorded_run {
                tracing::info!(session = %session.id, pid = session.pid(), "took back a run the checkpoint did not name yet");
                self.announce_restart(&session);
            }
        }
        let exit_rx = keeper.exit_of(session.pid());
        self.supervise_in_background(session, reader, exit_rx, super::spawn::RunStart::TakenOver);
    }
}

impl Registry {
    /// A handed-over session's log, reopened at its end (off the event
    /// loop); None for a log outside procd's logs dir (planted).
    async fn reopen_log(&self, e: &CheckpointEntry) -> Option<OutputStore> {
        let log_path = PathBuf::from(&e.log_path);
        if log_path.parent() != Some(self.logs_dir.as_path()) {
            return None;
        }
        let (max, tail) = (self.config.max_log_bytes, self.config.memory_tail_bytes);
        tokio::task::spawn_blocking(move || OutputStore::open_existing(&log_path, max, tail))
            .await
            .ok()?
            .ok()
    }
}

/// A writer task for a session's stdin, and the sender that feeds it.
fn stdin_writer(sink: StdinSink) -> mpsc::Sender<session::StdinOp> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(session::stdin_writer(sink, rx));
    tx
}

/// A taken-back session's ready condition: met before stays met; else it
/// is watched on: where it starts, and the check to watch with.
fn resume_readiness(
    spec: &SessionSpec,
    ready_after_ms: Option<u64>,
) -> (Readiness, Option<crate::observation::readiness::ReadyCheck>) {
    match (ready_after_ms, spec.ready.clone()) {
        (Some(after_ms), _) => (Readiness::Ready { after_ms }, None),
        (None, Some(check)) => (Readiness::Pending { timed_out: false }, Some(check)),
        (None, None) => (Readiness::Unconditioned, None),
    }
}

/// The output source, stdin sink and unread-output probe of a handed-over
/// session, from the descriptors the keeper kept.
fn handed_io(
    handed: HandedSession,
) -> std::io::Result<(OutputSource, Option<StdinSink>, Option<OwnedFd>)> {
    if let Some(master) = handed.pty {
        // It must be a PTY master: only one has a slave name.
        if rustix::pty::ptsname(&master, Vec::new()).is_err() {
            return Err(std::io::Error::other(
                "the kept terminal is not a PTY master",
            ));
        }
        let flags = nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_SETFL(flags))?;
        let keep = master.try_clone()?;
        let reading = master.try_clone()?;
        let probe = master.try_clone().ok();
        // What the relay holds is output the last daemon had not stored.
        let relay = match (handed.relay_out, handed.relay_in) {
            (Some(read), Some(write)) if is_pipe(&read) && is_pipe(&write) => {
                crate::output::source::Relay { read, write }
            }
            _ => crate::output::source::Relay::new()?,
        };
        // SAFETY: `master` is an open PTY master (it has a slave name), in
        // non-blocking mode (set just above), and owned by this call.
        let pty = unsafe { pty_process::Pty::from_fd(master) }.map_err(std::io::Error::other)?;
        let (_, writer) = pty.into_split();
        return Ok((
            OutputSource::pty(reading, relay)?,
            Some(StdinSink::Pty(writer, keep)),
            probe,
        ));
    }
    let output = handed
        .output
        .ok_or_else(|| std::io::Error::other("the keeper kept no output pipe"))?;
    if !is_pipe(&output) {
        return Err(std::io::Error::other("the kept output is not a pipe"));
    }
    let probe = output.try_clone().ok();
    let source = OutputSource::pipe(output)?;
    let sink = match handed.stdin {
        Some(fd) => Some(StdinSink::Pipe(
            tokio::net::unix::pipe::Sender::from_owned_fd(fd)?,
        )),
        None => None,
    };
    Ok((source, sink, probe))
}

/// Whether `fd` is a pipe (what the keeper hands over is checked before
/// output is spliced from it).
fn is_pipe(fd: &OwnedFd) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo
    })
}
