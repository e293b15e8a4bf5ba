//! Running slots: the `max_running` gate (docs/protocol.md, docs/SECURITY.md).
//!
//! A spawn takes a slot before it forks; the session it creates owns the
//! slot while it runs, and the slot is given back when it is dropped — by
//! the exit's bookkeeping, or by whichever error path ends the spawn. So no
//! error path (a failed checkpoint write, a failed scope, a killed spawn)
//! can leak a slot or give one back twice: there is one owner and one Drop.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// How many slots are held (running sessions plus spawns in progress).
#[derive(Debug, Default, Clone)]
pub struct Slots(Arc<Counter>);

#[derive(Debug, Default)]
struct Counter {
    held: AtomicUsize,
    /// Woken at each slot given back: a queued spawn that found no
    /// running slot waits on it (`registry/queue.rs`).
    freed: Arc<Notify>,
}

impl Slots {
    /// A slot, unless `max` are held already.
    pub fn try_take(&self, max: usize) -> Option<RunningSlot> {
        self.0
            .held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| RunningSlot::new(self.0.clone()))
    }

    /// A slot regardless of the limit (a session recovered after a
    /// restart is running whether or not there is room).
    pub fn take(&self) -> RunningSlot {
        self.0.held.fetch_add(1, Ordering::SeqCst);
        RunningSlot::new(self.0.clone())
    }

    pub fn held(&self) -> usize {
        self.0.held.load(Ordering::SeqCst)
    }

    /// Notified at each slot given back (a permit is kept if none waits).
    pub fn freed(&self) -> Arc<Notify> {
        self.0.freed.clone()
    }
}

/// One held slot; given back on drop, exactly once. A session spawned
/// through a queue holds that queue's slot with it.
#[derive(Debug)]
pub struct RunningSlot {
    counter: Arc<Counter>,
    queue: Option<crate::admission::queue::QueueSlot>,
}

impl RunningSlot {
    fn new(counter: Arc<Counter>) -> RunningSlot {
        RunningSlot {
            counter,
            queue: None,
        }
    }

    /// This slot and the queue slot, held and given back together.
    pub fn with_queue(mut self, queue: Option<crate::admission::queue::QueueSlot>) -> RunningSlot {
        self.queue = queue;
        self
    }
}

impl Drop for RunningSlot {
    fn drop(&mut self) {
        self.counter.held.fetch_sub(1, Ordering::SeqCst);
        self.counter.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_given_back_once() {
        let slots = Slots::default();
        let a = slots.try_take(2).expect("first");
        let b = slots.try_take(2).expect("second");
        assert!(slots.try_take(2).is_none(), "the limit holds");
        drop(a);
        assert_eq!(slots.held(), 1);
        let c = slots.try_take(2).expect("room again");
        let over = slots.take();
        assert_eq!(slots.held(), 3, "recovered sessions count past the limit");
        drop((b, c, over));
        assert_eq!(slots.held(), 0);
    }
}
