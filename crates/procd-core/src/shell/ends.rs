//! A shell's commands come to their ends here: the shell's task reads
//! their end records (the FIFO as they come, the file for the ones that
//! came while no daemon ran), drains the output before it takes a
//! command's last cursor, and ends what the shell ran when the shell
//! itself ends. Stops (an interrupt, a timeout) escalate from here.
//!
//! A command's end comes only from the shell's own channels, which the
//! command does not have (the loop closes fds 3 to 5 for it): the record
//! `E N NONCE STATUS CWD` on the fd 5 FIFO, or, for ends while no daemon
//! ran, in the fd 4 file; and only for the command running with that number
//! and nonce (`shell/boot.rs`). That a command has begun (`S N NONCE`, what
//! an interrupt waits for) is only in the fd 4 file, read by a stop when it
//! asks, woken by inotify (`wait_begun`), so that no command wakes the
//! daemon for it. Its output range closes only once every byte before the
//! end is decided in the log (`Session::output_drained`). A run holds the
//! shell's turn from its send to its end; the shell's task
//! (`Shells::follow`) is the only one that ends commands.

use super::journal::{self, Entry};
use super::{
    boot, remove_dir, End, Shell, Shells, Stop, DRAIN_BOUND, INTERRUPT_GRACE,
    SECOND_INTERRUPT_AFTER, TAKE_UP_WAIT,
};
use procd_proto::CommandStatus;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::unix::pipe;

/// The steps of a stop, each after the grace of the one before.
#[derive(Clone, Copy)]
enum Escalation {
    /// SIGINT to the shell's group, as a terminal's Ctrl-C.
    Interrupt,
    /// SIGKILL to the group's processes but the shell.
    KillCommand,
    /// SIGKILL to the shell (a builtin loop that ignores SIGINT).
    KillShell,
}

impl Shells {
    /// The shell's task: takes its ends as they come, and its exit.
    pub(super) async fn follow(self: Arc<Self>, shell: Arc<Shell>, wake: pipe::Receiver) {
        // Ends that came while no daemon ran: the file has them all.
        self.take_recorded_ends(&shell).await;
        let (mut pending, mut buf) = (Vec::new(), [0u8; 4096]);
        loop {
            tokio::select! {
                ready = wake.readable() => {
                    if ready.is_err() {
                        break;
                    }
                    while let Ok(n @ 1..) = wake.try_read(&mut buf) {
                        pending.extend_from_slice(&buf[..n]);
                    }
                    let (records, used) = boot::parse_ends(&pending);
                    pending.drain(..used);
                    self.end_commands(&shell, records).await;
                }
                _ = shell.session.wait_end() => break,
            }
        }
        self.take_recorded_ends(&shell).await;
        self.shell_ended(&shell).await;
    }

    /// Ends the commands whose ends the shell's file holds (its last MiB).
    async fn take_recorded_ends(&self, shell: &Arc<Shell>) {
        let path = shell.dir.join(boot::ENDS);
        let read = tokio::task::spawn_blocking(move || read_tail(&path, 1 << 20)).await;
        if let Ok(Ok(bytes)) = read {
            self.end_commands(shell, boot::parse_ends(&bytes).0).await;
        }
    }

    /// Takes what `records` say: a command has begun, or ended (each
    /// once: a record read twice, or of a command that is not running, is
    /// passed over).
    async fn end_commands(&self, shell: &Arc<Shell>, records: Vec<boot::Record>) {
        for record in records {
            let record = match record {
                boot::Record::Begun { n, nonce } => {
                    mark_begun(shell, n, &nonce);
                    continue;
                }
                boot::Record::Ended(end) => end,
            };
            let known = shell
                .state()
                .commands
                .iter()
                .any(|c| c.n == record.n && c.nonce == record.nonce && c.end.is_none());
            if !known {
                continue;
            }
            // Everything the command wrote is in the pipe (or the PTY's
            // buffers) by now: have it all in the log before the cursor.
            let _ = tokio::time::timeout(DRAIN_BOUND, shell.session.output_drained()).await;
            let to = shell.session.output.end();
            self.end_command(shell, record.n, |stop| End {
                status: match stop {
                    Some(Stop::Interrupt) => CommandStatus::Interrupted,
                    Some(Stop::Timeout) => CommandStatus::TimedOut,
                    None => CommandStatus::Exited,
                },
                exit_code: Some(record.status),
                to,
                cwd: Some(record.cwd.clone()),
                duration: Duration::ZERO,
                ended_by: None,
            })
            .await;
        }
    }

    /// Records command `n`'s end (made by `end` from why it was being
    /// stopped) and gives the turn back.
    async fn end_command(&self, shell: &Arc<Shell>, n: u64, end: impl FnOnce(Option<Stop>) -> End) {
        let ended = {
            let mut state = shell.state();
            let Some(c) = state
                .commands
                .iter_mut()
                .find(|c| c.n == n && c.end.is_none())
            else {
                return;
            };
            let mut e = end(c.stop.map(|(why, _)| why));
            e.duration = c.started.elapsed();
            e.ended_by = c.stop.map(|(_, signal)| signal.to_string());
            c.end = Some(e.clone());
            c.turn = None;
            e
        };
        shell.changed.send_modify(|v| *v += 1);
        shell.record(Entry::Ended(journal::Ended {
            ended: n,
            status: ended.status,
            exit_code: ended.exit_code,
            to: ended.to,
            cwd: ended.cwd,
            duration_ms: ended.duration.as_millis() as u64,
            ended_by: ended.ended_by,
        }));
    }

    /// The shell's session ended: a command it ran ends with it, and the
    /// shell is closed (its directory removed).
    async fn shell_ended(&self, shell: &Arc<Shell>) {
        let exit = shell.session.wait_exited(Duration::ZERO).await;
        let running: Vec<u64> = {
            let mut state = shell.state();
            state.closed = true;
            state
                .commands
                .iter()
                .filter(|c| c.end.is_none())
                .map(|c| c.n)
                .collect()
        };
        let to = shell.session.output.end();
        for n in running {
            self.end_command(shell, n, |_| End {
                status: CommandStatus::ShellExited,
                exit_code: exit.as_ref().and_then(|e| e.exit_code),
                to,
                cwd: None,
                duration: Duration::ZERO,
                ended_by: None,
            })
            .await;
        }
        *shell.ctl.lock().await = None;
        shell.changed.send_modify(|v| *v += 1);
        remove_dir(shell.dir.clone()).await;
    }

    pub(super) async fn stop(&self, shell: &Arc<Shell>, n: u64, why: Stop) {
        // A SIGINT before the shell has taken the command up would find it
        // idle and be lost: wait until it says it has begun (or ended).
        let mut changed = shell.changed.subscribe();
        let taken = async {
            tokio::select! {
                () = wait_begun(shell, n) => {}
                _ = changed.wait_for(|_| shell.command_ended(n)) => {}
            }
        };
        let _ = tokio::time::timeout(TAKE_UP_WAIT, taken).await;
        for (step, grace) in [
            (Escalation::Interrupt, SECOND_INTERRUPT_AFTER),
            (
                Escalation::Interrupt,
                INTERRUPT_GRACE - SECOND_INTERRUPT_AFTER,
            ),
            (Escalation::KillCommand, INTERRUPT_GRACE),
            (Escalation::KillShell, Duration::from_secs(10)),
        ] {
            {
                let mut state = shell.state();
                let Some(c) = state.commands.iter_mut().find(|c| c.n == n) else {
                    return;
                };
                if c.end.is_some() {
                    return;
                }
                let signal = match step {
                    Escalation::Interrupt => "SIGINT",
                    Escalation::KillCommand | Escalation::KillShell => "SIGKILL",
                };
                c.stop = Some((c.stop.map_or(why, |(first, _)| first), signal));
            }
            match step {
                Escalation::Interrupt => {
                    let _ = self
                        .registry
                        .signal(&shell.id, procd_proto::SignalSpec::Name("SIGINT".into()))
                        .await;
                }
                Escalation::KillCommand => {
                    self.registry.kill_group_but_root(&shell.session).await;
                }
                Escalation::KillShell => {
                    let _ = self
                        .registry
                        .kill(
                            &shell.id,
                            Some(procd_proto::SignalSpec::Name("SIGKILL".into())),
                            None,
                            Some("shell_interrupt"),
                        )
                        .await;
                }
            }
            let mut changed = shell.changed.subscribe();
            let ended = changed.wait_for(|_| shell.command_ended(n));
            if tokio::time::timeout(grace, ended).await.is_ok() {
                return;
            }
        }
    }
}

/// Marks command `n` begun, if it is the one running with `nonce`.
fn mark_begun(shell: &Shell, n: u64, nonce: &str) {
    if let Some(c) = shell
        .state()
        .commands
        .iter_mut()
        .find(|c| c.n == n && c.nonce == nonce)
    {
        c.begun = true;
    }
    shell.begun.send_modify(|v| *v += 1);
}

/// How much of the file of ends a stop reads for its begin record: the
/// record is the file's last (nothing else is appended while the command
/// runs), after at most one end whose cwd is a path.
const BEGUN_TAIL: u64 = 8 << 10;

/// Until command `n` has begun. The shell appends its begin record to its
/// file of ends, which is looked at here only, woken by inotify: on the
/// FIFO it would wake the daemon for every command, and only a stop asks.
/// A shell a daemon before this one started says it on the FIFO, which
/// `begun` follows.
async fn wait_begun(shell: &Shell, n: u64) {
    let path = shell.dir.join(boot::ENDS);
    // Made before the first look, so that a record appended after it wakes.
    let mut appended = procd_sys::file_watch::FileWatch::new(&path).ok();
    let mut begun = shell.begun.subscribe();
    while !shell.command_begun(n) {
        let read = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || read_tail(&path, BEGUN_TAIL)).await
        };
        if let Ok(Ok(bytes)) = read {
            for record in boot::parse_ends(&bytes).0 {
                if let boot::Record::Begun { n: m, nonce } = record {
                    if m == n {
                        mark_begun(shell, m, &nonce);
                    }
                }
            }
        }
        if shell.command_begun(n) {
            return;
        }
        let file_changed = async {
            // Without a watch (or once it fails) only the FIFO's record
            // can come; the stop's own bound ends the wait.
            let Some(w) = appended.as_mut() else {
                return std::future::pending().await;
            };
            if w.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = file_changed => {}
            changed = begun.changed() => if changed.is_err() {
                return;
            },
        }
    }
}

/// The last `max` bytes of `path` (a regular file, not followed).
fn read_tail(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    f.seek(std::io::SeekFrom::Start(meta.len().saturating_sub(max)))?;
    let mut bytes = Vec::new();
    f.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}
