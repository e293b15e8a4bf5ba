//! Descriptor slots for a child's sources (`spawn`'s step 4).

use super::MAX_INHERITED;
use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, RawFd};

/// Descriptor numbers low in the daemon's table, reserved for a child's
/// sources (stdio, what it inherits, its Landlock ruleset): each holds
/// `/dev/null` but while a spawn places a source there, so no other
/// thread's `open` can take the number. A child cloned with
/// `CLONE_FILES` copies the table below `end` and nothing above it.
pub(super) struct Slots {
    null: std::os::fd::OwnedFd,
    fds: [RawFd; SLOTS],
    /// One past the highest slot.
    end: RawFd,
}

/// Slots: stdio, the inherited ones, the ruleset.
const SLOTS: usize = 3 + MAX_INHERITED + 1;

/// The process's slots, made at the first spawn (`reserve_slots` makes
/// them sooner); the lock makes spawns take turns with them.
static SLOTS_HELD: std::sync::Mutex<Option<Slots>> = std::sync::Mutex::new(None);

/// Reserves the slots now, while the descriptor table is small, so that
/// they are its lowest free numbers (a daemon calls this at its start).
pub fn reserve_slots() -> io::Result<()> {
    Slots::reserved(&mut Slots::lock()).map(drop)
}

/// `fd` moved above the slots (the slots reserved first if need be): a
/// child copies nothing from there, not even for the moment between its
/// clone and its exec, which closes its copies. A daemon moves its
/// listening socket there: a copy in a child outlives a daemon killed
/// meanwhile, and a client that connects to it is reset when the child's
/// exec closes it.
pub fn above_slots(fd: std::os::fd::OwnedFd) -> io::Result<std::os::fd::OwnedFd> {
    let mut held = Slots::lock();
    let end = Slots::reserved(&mut held)?.end;
    // `fd` is closed as it drops, once the copy is made.
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, end)?)
}

impl Slots {
    pub(super) fn lock() -> std::sync::MutexGuard<'static, Option<Slots>> {
        SLOTS_HELD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The slots `held` has, reserved now if it has none yet.
    pub(super) fn reserved(held: &mut Option<Slots>) -> io::Result<&Slots> {
        match held {
            Some(slots) => Ok(slots),
            None => Ok(held.insert(Slots::reserve()?)),
        }
    }

    fn reserve() -> io::Result<Slots> {
        use rustix::fs::{Mode, OFlags};
        let null = rustix::fs::open("/dev/null", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
        // Above every target (0 to 3 + MAX_INHERITED), so that no dup2 in
        // the child overwrites a source, and never dup2(fd, fd) (which
        // would keep close-on-exec).
        let floor = (3 + MAX_INHERITED) as RawFd;
        let owned = (0..SLOTS)
            .map(|_| rustix::io::fcntl_dupfd_cloexec(&null, floor))
            .collect::<Result<Vec<_>, _>>()?;
        // Kept for the life of the process.
        let mut fds = [-1; SLOTS];
        for (slot, fd) in fds.iter_mut().zip(owned) {
            *slot = std::os::fd::IntoRawFd::into_raw_fd(fd);
        }
        let end = fds.iter().max().map_or(0, |&fd| fd + 1);
        Ok(Slots { null, fds, end })
    }
}

/// Sources in their slots, in order; dropped, the slots hold
/// `/dev/null` again.
pub(super) struct Placed<'a> {
    slots: &'a Slots,
    pub(super) fds: Vec<RawFd>,
    pub(super) end: RawFd,
}

impl Slots {
    /// Puts `sources` into the slots, in order (at most `SLOTS`).
    pub(super) fn place<'s, 'f>(
        &'s self,
        sources: impl Iterator<Item = BorrowedFd<'f>>,
    ) -> io::Result<Placed<'s>> {
        let mut placed = Placed {
            slots: self,
            fds: Vec::with_capacity(SLOTS),
            end: self.end,
        };
        for (source, &slot) in sources.zip(&self.fds) {
            // SAFETY: `slot` is one of this process's slots, open for its
            // whole life and owned by no one else: replacing what it holds
            // closes nothing another part of the process uses.
            let mut target = unsafe { std::os::fd::OwnedFd::from_raw_fd(slot) };
            let dup = rustix::io::dup3(source, &mut target, rustix::io::DupFlags::CLOEXEC);
            std::mem::forget(target);
            dup?;
            placed.fds.push(slot);
        }
        Ok(placed)
    }
}

impl Drop for Placed<'_> {
    fn drop(&mut self) {
        for &slot in &self.fds {
            // SAFETY: as in `place`.
            let mut target = unsafe { std::os::fd::OwnedFd::from_raw_fd(slot) };
            // Cannot fail: both are open and differ. Were it to, the slot
            // would keep a child's file open (its pipe not ending) until
            // the next spawn placed another there.
            let _ = rustix::io::dup3(&self.slots.null, &mut target, rustix::io::DupFlags::CLOEXEC);
            std::mem::forget(target);
        }
    }
}
