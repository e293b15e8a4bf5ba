//! Changes to single files (cgroup.events, memory.events), seen through
//! one inotify instance shared by the whole process.
//!
//! A user may own only `fs.inotify.max_user_instances` instances (128 by
//! default), counted across every process of the user. One instance per
//! watched file ran out at about a hundred sessions with a memory
//! account, and then a session's `watch` could not start: its instance
//! was refused with EMFILE. Watches on one instance are bounded by
//! `max_user_watches` instead (about a million here).
//!
//! A thread blocks in `read` on the instance and wakes each watched
//! file's waiters through a `tokio::sync::watch` counter. Neither the
//! instance nor the thread belongs to a runtime, so a watch works from
//! any runtime (each test has its own) and the event loop never reads.

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::watch;

/// A watch on one file: `changed` ends after the file is modified (or
/// removed) since the watch began or since the last `changed`.
#[derive(Debug)]
pub struct FileWatch {
    instance: Arc<Instance>,
    wd: i32,
    changes: watch::Receiver<u64>,
    /// The file, to watch it again on a new instance if this one breaks.
    file: PathBuf,
}

impl FileWatch {
    /// Watches `file` for modification.
    pub fn new(file: &Path) -> io::Result<FileWatch> {
        loop {
            if let Some(watch) = FileWatch::on(&Instance::shared()?, file)? {
                return Ok(watch);
            }
        }
    }

    /// Watches `file` on `instance`; None if it broke meanwhile (it is
    /// no longer shared then: the caller asks again).
    fn on(instance: &Arc<Instance>, file: &Path) -> io::Result<Option<FileWatch>> {
        // Held across add_watch: the reader dispatches under this lock,
        // so an event the kernel queues at once finds the entry made.
        let mut watched = instance.watched();
        if instance.broken.load(Ordering::Acquire) {
            return Ok(None);
        }
        let wd = inotify::add_watch(&instance.fd, file, WatchFlags::MODIFY)?;
        // Watching an inode twice gives its first descriptor again.
        let entry = watched.entry(wd).or_insert_with(|| Watched {
            users: 0,
            changes: watch::Sender::new(0),
            gone: false,
        });
        entry.users += 1;
        let changes = entry.changes.subscribe();
        drop(watched);
        Ok(Some(FileWatch {
            instance: instance.clone(),
            wd,
            changes,
            file: file.to_path_buf(),
        }))
    }

    /// Until the file changes. A file that is gone never changes again.
    /// When its instance can no longer be read (`Instance::give_up`), the
    /// file is watched again on a new one, and this ends as for a change
    /// (what changed meanwhile is not known: the caller looks again); an
    /// error only if that new watch cannot be made.
    pub async fn changed(&mut self) -> io::Result<()> {
        if self.changes.changed().await.is_err() {
            *self = FileWatch::new(&self.file)?;
        }
        Ok(())
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        let mut watched = self.instance.watched();
        let Some(entry) = watched.get_mut(&self.wd) else {
            return;
        };
        entry.users -= 1;
        if entry.users == 0 {
            // A gone file's watch was removed by the kernel (IN_IGNORED).
            // (Watch descriptors are allocated cyclically, so this one
            // names no other file yet.)
            if !entry.gone {
                let _ = inotify::remove_watch(&self.instance.fd, self.wd);
            }
            watched.remove(&self.wd);
        }
    }
}

/// Makes the shared instance and its reading thread now, rather than at
/// the first watch.
pub fn start() -> io::Result<()> {
    Instance::shared().map(drop)
}

/// The shared instance, made on first use; made again after one failed
/// to be made or broke.
static SHARED: Mutex<Option<Arc<Instance>>> = Mutex::new(None);

/// The process's instance, with what each of its watch descriptors wakes.
#[derive(Debug)]
struct Instance {
    /// Closed off the event loop (a broken instance is dropped with its
    /// last watch, wherever that is).
    fd: crate::inotify::ClosedOffTheLoop,
    watched: Mutex<HashMap<i32, Watched>>,
    /// Its reader met an error it cannot go on from: its watches have
    /// failed, and new ones go to a new instance. Set under `watched`.
    broken: AtomicBool,
}

#[derive(Debug)]
struct Watched {
    /// FileWatches on it: the kernel's watch is removed with the last.
    users: usize,
    /// Bumped on every event about the file.
    changes: watch::Sender<u64>,
    /// The kernel removed the watch (the file is gone).
    gone: bool,
}

impl Instance {
    /// The shared instance, made (with its reading thread) on first use,
    /// and made again on a later use if that failed.
    fn shared() -> io::Result<Arc<Instance>> {
        let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(instance) = &*shared {
            return Ok(instance.clone());
        }
        let instance = Arc::new(Instance {
            fd: crate::inotify::ClosedOffTheLoop::new(inotify::init(CreateFlags::CLOEXEC)?),
            watched: Mutex::default(),
            broken: AtomicBool::new(false),
        });
        let reader = instance.clone();
        std::thread::Builder::new()
            .name("procd-inotify".into())
            .spawn(move || reader.read_forever())?;
        *shared = Some(instance.clone());
        Ok(instance)
    }

    fn watched(&self) -> MutexGuard<'_, HashMap<i32, Watched>> {
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks reading events and wakes their files' waiters, for the
    /// life of the process.
    fn read_forever(&self) {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut events = inotify::Reader::new(&self.fd, &mut buf);
        loop {
            let event = match events.next() {
                Ok(event) => event,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return self.give_up(e),
            };
            let mut watched = self.watched();
            if event.events().contains(ReadFlags::QUEUE_OVERFLOW) {
                // Events were lost: every waiter looks again.
                for entry in watched.values() {
                    entry.changes.send_modify(|n| *n += 1);
                }
                continue;
            }
            if let Some(entry) = watched.get_mut(&event.wd()) {
                entry.gone |= event.events().contains(ReadFlags::IGNORED);
                entry.changes.send_modify(|n| *n += 1);
            }
        }
    }

    /// After an error reading the instance (none is expected: the buffer
    /// holds any event of a file watch): the next watch makes a new
    /// instance, and every watch of this one is woken at once (its sender
    /// dropped) and moves to a new one (`FileWatch::changed`).
    fn give_up(&self, e: rustix::io::Errno) {
        tracing::error!(error = %e, "cannot read the shared inotify instance; its watches fail");
        let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.as_deref().is_some_and(|s| std::ptr::eq(s, self)) {
            *shared = None;
        }
        drop(shared);
        let mut watched = self.watched();
        self.broken.store(true, Ordering::Release);
        watched.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn instances_open() -> usize {
        std::fs::read_dir("/proc/self/fd")
            .expect("fds")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.to_string_lossy().contains("inotify"))
            .count()
    }

    /// An instance that cannot be read wakes its watches' waiters at once,
    /// and each goes on on a working instance, as does a new watch.
    #[tokio::test]
    async fn a_broken_instance_moves_its_watches_to_a_new_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f");
        std::fs::write(&file, "").expect("write");
        let mut old = FileWatch::new(&file).expect("watch");
        let broken = old.instance.clone();
        let wait = Duration::from_secs(10);
        {
            let mut waiting = std::pin::pin!(old.changed());
            // Polled once: the waiter is asleep on the instance when it breaks.
            tokio::select! {
                biased;
                woke = &mut waiting => panic!("no change yet, but woke: {woke:?}"),
                () = std::future::ready(()) => {}
            }
            broken.give_up(rustix::io::Errno::IO);
            tokio::time::timeout(wait, waiting)
                .await
                .expect("the waiter is woken when the instance breaks")
                .expect("and watches again");
        }
        assert!(!Arc::ptr_eq(&old.instance, &broken), "on a new instance");
        let mut new = FileWatch::new(&file).expect("watch");
        assert!(
            !Arc::ptr_eq(&new.instance, &broken),
            "a new watch gets a new instance"
        );
        std::fs::write(&file, "x").expect("write");
        for watch in [&mut old, &mut new] {
            tokio::time::timeout(wait, watch.changed())
                .await
                .expect("which wakes on a change")
                .expect("and works");
        }
    }

    /// Many watches share one instance; each wakes on its own file's
    /// change (and only then), and a file watched twice wakes both.
    #[tokio::test]
    async fn watches_share_one_instance_and_wake_on_their_own_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files: Vec<_> = (0..200)
            .map(|i| {
                let f = dir.path().join(format!("f{i}"));
                std::fs::write(&f, "").expect("write");
                f
            })
            .collect();
        let mut watches: Vec<_> = files
            .iter()
            .map(|f| FileWatch::new(f).expect("watch"))
            .collect();
        let mut twice = FileWatch::new(&files[7]).expect("watch");
        // Far fewer than the default per-user limit of 128 instances.
        assert_eq!(instances_open(), 1, "one instance for every watch");
        let wds: Vec<i32> = watches.iter().map(|w| w.wd).collect();

        std::fs::write(&files[7], "x").expect("write");
        let wait = Duration::from_secs(10);
        tokio::time::timeout(wait, watches[7].changed())
            .await
            .expect("the changed file's watch wakes")
            .expect("works");
        tokio::time::timeout(wait, twice.changed())
            .await
            .expect("its second watch wakes too")
            .expect("works");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), watches[8].changed())
                .await
                .is_err(),
            "another file's watch stays asleep"
        );

        // Dropping one of two watches on a file keeps the other working.
        drop(twice);
        std::fs::write(&files[7], "y").expect("write");
        tokio::time::timeout(wait, watches[7].changed())
            .await
            .expect("still woken after the other watch went")
            .expect("works");

        // A removed file wakes its watch once.
        std::fs::remove_file(&files[9]).expect("remove");
        tokio::time::timeout(wait, watches[9].changed())
            .await
            .expect("removal wakes")
            .expect("works");
        drop(watches);
        let instance = Instance::shared().expect("shared");
        let watched = instance.watched();
        assert!(
            wds.iter().all(|wd| !watched.contains_key(wd)),
            "every watch is forgotten with its last user"
        );
    }
}
