//! A sleep to the microsecond, for the few waits whose length is the
//! point (a debounce): Tokio's timer rounds a deadline up to its next
//! millisecond tick and parks in epoll with a millisecond timeout, so a
//! 50 ms debounce fired 51.4 ms after the last change (measured here).
//! A timerfd wakes the event loop when it expires.

use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};
use std::io;
use std::os::fd::OwnedFd;
use std::time::Instant;
use tokio::io::unix::AsyncFd;

/// A timerfd on the event loop, set again for each wait.
pub struct PreciseTimer(AsyncFd<OwnedFd>);

impl PreciseTimer {
    /// A timer on `CLOCK_MONOTONIC` (the clock of `Instant`).
    pub fn new() -> io::Result<PreciseTimer> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        crate::cgroup::watch_async(fd).map(PreciseTimer)
    }

    /// Until `deadline`. Cancel-safe: a wait given up leaves the timer
    /// to be set again by the next (setting it resets its count).
    pub async fn until(&mut self, deadline: Instant) -> io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(()); // (a zero expiration would disarm it)
        }
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let it_value = Timespec::try_from(left).map_err(|_| io::ErrorKind::InvalidInput)?;
        let when = Itimerspec {
            it_interval: zero,
            it_value,
        };
        timerfd_settime(self.0.get_ref(), TimerfdTimerFlags::empty(), &when)?;
        loop {
            let mut ready = self.0.readable().await?;
            let mut count = [0u8; 8];
            match rustix::io::read(ready.get_inner(), &mut count) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::AGAIN) => ready.clear_ready(),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PreciseTimer;
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn it_wakes_at_its_deadline_and_not_before() {
        let mut timer = PreciseTimer::new().expect("a timerfd");
        for ms in [1, 7, 20] {
            let deadline = Instant::now() + Duration::from_millis(ms);
            tokio::time::timeout(Duration::from_secs(10), timer.until(deadline))
                .await
                .expect("it woke")
                .expect("a wait");
            assert!(Instant::now() >= deadline, "woke before {ms} ms");
        }
        // A deadline gone by is no wait (a zero setting would disarm it).
        let past = Instant::now() - Duration::from_millis(5);
        tokio::time::timeout(Duration::from_secs(10), timer.until(past))
            .await
            .expect("no wait for a past deadline")
            .expect("a wait");
    }

    #[tokio::test]
    async fn a_wait_given_up_leaves_the_next_one_whole() {
        let mut timer = PreciseTimer::new().expect("a timerfd");
        // The first wait is given up before its deadline...
        let far = Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            _ = timer.until(far) => panic!("an hour went by"),
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
        // ...and one set, then given up, expires unread...
        tokio::select! {
            biased;
            _ = timer.until(Instant::now() + Duration::from_millis(2)) => panic!("no time passed"),
            () = std::future::ready(()) => {}
        }
        std::thread::sleep(Duration::from_millis(10));
        // ...and is not taken for the next wait.
        let deadline = Instant::now() + Duration::from_millis(30);
        tokio::time::timeout(Duration::from_secs(10), timer.until(deadline))
            .await
            .expect("it woke")
            .expect("a wait");
        assert!(Instant::now() >= deadline, "an old expiry ended a new wait");
    }
}
