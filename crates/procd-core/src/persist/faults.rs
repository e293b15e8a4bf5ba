//! Disk and system faults the daemon is living with (docs/SECURITY.md): a failed
//! checkpoint write, a session log that cannot be written. Each is kept
//! until the thing works again, reported in `status.faults` and logged
//! once when it starts and once when it clears; the daemon keeps serving
//! from memory meanwhile.

use procd_proto::Fault;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

#[derive(Default)]
pub struct Faults(Mutex<BTreeMap<String, Fault>>);

impl Faults {
    /// Records that `what` fails with `error` (the first time is logged).
    pub fn set(&self, what: &str, error: &str) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match map.get_mut(what) {
            Some(fault) => fault.error = error.to_string(),
            None => {
                tracing::warn!(what, error, "fault: keeping going from memory, will retry");
                map.insert(
                    what.to_string(),
                    Fault {
                        what: what.to_string(),
                        error: error.to_string(),
                        since: crate::clock::rfc3339(SystemTime::now()),
                    },
                );
            }
        }
    }

    /// `what` works again.
    pub fn clear(&self, what: &str) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.remove(what).is_some() {
            tracing::info!(what, "fault cleared");
        }
    }

    pub fn has(&self, what: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(what)
    }

    pub fn list(&self) -> Vec<Fault> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }
}
