//! What outlives the daemon: the checkpoint (`procs.json`, `ended.jsonl`),
//! the faults lived with while it cannot be written, and, in debug builds,
//! the crash points tests ask for.

pub mod checkpoint;
pub(crate) mod crash;
pub mod faults;
