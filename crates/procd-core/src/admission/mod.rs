//! Who may start now, on one machine shared by many agents: running slots
//! (`max_running`), named spawn queues and the machine-wide jobserver.
//! Each answers "start, or wait in order"; the registry acts on it
//! (`registry/queue.rs`, `registry/jobs.rs`).

pub mod jobserver;
pub mod queue;
pub mod slot;
