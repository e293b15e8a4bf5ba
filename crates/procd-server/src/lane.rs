//! One thread of the daemon's own for periodic blocking work (reading the
//! lease file under its lock, every monitor tick and on `status`).
//!
//! Done on tokio's blocking pool, that once-a-second task kept every idle
//! pool thread warm (idle threads are woken in turn, and none ever reached
//! the 10 s keep-alive), so the threads a burst of work had started never
//! went away. On a lane of its own it costs one thread, always the same.

use std::sync::mpsc;
use std::sync::Mutex;

type Job = Box<dyn FnOnce() + Send>;

pub struct Lane(Mutex<mpsc::Sender<Job>>);

impl Lane {
    pub fn start(name: &str) -> std::io::Result<Lane> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // Ends when the daemon drops the lane.
                while let Ok(job) = rx.recv() {
                    job();
                }
            })?;
        Ok(Lane(Mutex::new(tx)))
    }

    /// Runs `job` on the lane; None if the lane is gone.
    pub async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Box::new(move || {
                let _ = tx.send(job());
            }));
        sent.ok()?;
        rx.await.ok()
    }
}
