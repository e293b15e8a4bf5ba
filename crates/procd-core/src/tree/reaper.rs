//! The daemon's single owner of wait(2).
//!
//! procd is a child subreaper, so orphaned descendants of sessions become its
//! children and must be reaped too. One thread blocks in `waitpid(-1)` and
//! routes each status to whoever registered that pid; unknown pids (orphans)
//! are simply reaped. Nothing else in the daemon may wait for children: a
//! stray `waitpid(pid)` elsewhere would race this thread for the status.
//!
//! The registration race (the child exits before its pid is registered) is
//! closed by holding the table lock across the fork: the thread first peeks
//! at an exited child without reaping it (`WNOWAIT`), then takes the lock
//! and only then reaps and routes. So while a spawner holds the lock, its
//! child cannot be reaped: its /proc entry (start time) is still readable
//! even if it has already exited.
//!
//! Roots a dead daemon left are the keeper's children: only the keeper
//! reaps them, and their statuses come back over the link
//! (`Link::exit_of`), so one owner of wait(2) holds per process. Under
//! systemd the keeper's death gives them to the user manager; the next
//! keeper reads their statuses from their pidfds, never by wait(2).

use nix::errno::Errno;
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag};
use std::collections::HashMap;
use std::io;
use std::process::{Child, Command};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use tokio::sync::oneshot;

pub use procd_sys::wait::ChildExit;

#[derive(Default)]
struct Table {
    waiting: HashMap<i32, oneshot::Sender<ChildExit>>,
    /// Bumped on every spawn so the thread wakes from "no children".
    generation: u64,
}

pub struct Reaper {
    table: Mutex<Table>,
    spawned: Condvar,
}

impl Reaper {
    /// The process-wide reaper; its thread starts on first use.
    pub fn global() -> Arc<Reaper> {
        static REAPER: OnceLock<Arc<Reaper>> = OnceLock::new();
        REAPER
            .get_or_init(|| {
                let reaper = Arc::new(Reaper {
                    table: Mutex::new(Table::default()),
                    spawned: Condvar::new(),
                });
                let worker = reaper.clone();
                std::thread::Builder::new()
                    .name("procd-reaper".into())
                    .spawn(move || worker.run())
                    .expect("cannot start the reaper thread");
                reaper
            })
            .clone()
    }

    /// Spawns `cmd` and returns the child with a receiver for its exit.
    /// `inspect` runs before the child can be reaped (e.g. to read its start
    /// time). The std `Child` must never be waited on (the reaper owns that).
    pub fn spawn<R>(
        &self,
        cmd: &mut Command,
        inspect: impl FnOnce(u32) -> R,
    ) -> io::Result<(Child, R, oneshot::Receiver<ChildExit>)> {
        let mut child = None;
        let (_, inspected, rx) = self.start(
            || {
                let started = cmd.spawn()?;
                let pid = started.id() as i32;
                child = Some(started);
                Ok(pid)
            },
            |pid| inspect(pid as u32),
        )?;
        let child = child.ok_or_else(|| io::Error::other("no child"))?;
        Ok((child, inspected, rx))
    }

    /// Runs `start` (which makes a child and returns its pid) and
    /// registers the child, with `inspect` run before it can be reaped.
    pub fn start<R>(
        &self,
        start: impl FnOnce() -> io::Result<i32>,
        inspect: impl FnOnce(i32) -> R,
    ) -> io::Result<(i32, R, oneshot::Receiver<ChildExit>)> {
        let mut table = self.lock();
        let pid = start()?;
        let inspected = inspect(pid);
        let (tx, rx) = oneshot::channel();
        table.waiting.insert(pid, tx);
        table.generation += 1;
        drop(table);
        self.spawned.notify_one();
        Ok((pid, inspected, rx))
    }

    /// Whether someone waits for `pid` (a session root or a helper that
    /// has not been reaped yet).
    pub fn is_waited(&self, pid: i32) -> bool {
        self.lock().waiting.contains_key(&pid)
    }

    fn run(&self) {
        loop {
            // Read before waiting so a spawn that races an ECHILD is seen.
            let seen = self.lock().generation;
            let peeked = waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT);
            let result = match peeked {
                Ok(status) => match status.pid() {
                    Some(pid) => {
                        // Reap under the lock: a spawner inspecting this
                        // very child finishes first.
                        let _table = self.lock();
                        waitpid(pid, Some(WaitPidFlag::WNOHANG))
                    }
                    None => continue,
                },
                Err(e) => Err(e),
            };
            match result {
                Ok(status) => {
                    let Some((pid, exit)) = ChildExit::of(status) else {
                        continue;
                    };
                    let sender = self.lock().waiting.remove(&pid.as_raw());
                    if let Some(sender) = sender {
                        crate::persist::crash::at(crate::persist::crash::Point::AfterReap);
                        let _ = sender.send(exit);
                    }
                }
                Err(Errno::EINTR) => {}
                Err(_) => {
                    // ECHILD: no children at all, so no descendants either
                    // (an orphan is reparented to us only when its parent,
                    // our descendant, dies). Sleep until the next spawn; the
                    // timeout is only a safety net.
                    let table = self.lock();
                    let _unused = self
                        .spawned
                        .wait_timeout_while(table, std::time::Duration::from_secs(60), |t| {
                            t.generation == seen
                        })
                        .unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}
