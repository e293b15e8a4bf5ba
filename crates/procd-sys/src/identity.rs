//! The identity guard: a pid together with its start time names one process
//! for all time. Every signal procd sends goes through `ProcessIdentity::open`
//! (a process it started) or `RecordedIdentity::open` (a process recorded
//! on disk: a daemon, its keeper, a lease holder), which return a pidfd
//! only if the pid still belongs to the same process.

use crate::pidfd::PidFd;
use crate::procfs::ProcFs;
use std::io;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessIdentity {
    pub pid: i32,
    pub start_time: u64,
}

impl ProcessIdentity {
    /// Records the identity of a live process.
    pub fn of(procfs: &ProcFs, pid: i32) -> io::Result<ProcessIdentity> {
        let stat = procfs.stat(pid)?;
        Ok(ProcessIdentity {
            pid,
            start_time: stat.start_time,
        })
    }

    /// A pidfd for this exact process, or None if it is gone or its pid now
    /// belongs to another process. The start time is checked after the pidfd
    /// is opened, so the fd cannot refer to a process started later.
    pub fn open(&self, procfs: &ProcFs) -> Option<PidFd> {
        if self.pid <= 1 {
            return None;
        }
        let pidfd = PidFd::open(self.pid).ok()?;
        match procfs.stat(self.pid) {
            Ok(stat) if stat.start_time == self.start_time => Some(pidfd),
            _ => None,
        }
    }

    /// Whether the process is alive and still the same one (zombies are dead).
    pub fn is_alive(&self, procfs: &ProcFs) -> bool {
        matches!(procfs.stat(self.pid), Ok(s) if s.start_time == self.start_time && !s.is_dead())
    }
}

/// A process's identity as files record it (docs/operations.md): `"<pgid>:<start
/// time>"`, or a legacy `"<pgid>"` (a string or a bare number) that only
/// names the group. Written as the string; read from either form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedIdentity {
    pub pgid: i32,
    /// None in a legacy record.
    pub start_time: Option<u64>,
}

impl RecordedIdentity {
    /// The identity of live process `pid`; Ok(None) if it is gone, a
    /// zombie or exiting (it will never serve again, though it may still
    /// hold its listening socket for a moment); Err if /proc could not tell.
    pub fn of(procfs: &ProcFs, pid: i32) -> io::Result<Option<RecordedIdentity>> {
        if pid <= 0 {
            return Ok(None);
        }
        match procfs.stat(pid) {
            Ok(stat) if stat.is_exiting() => Ok(None),
            Ok(stat) => Ok(Some(RecordedIdentity {
                pgid: stat.pgrp,
                start_time: Some(stat.start_time),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether this record names the process whose identity is `actual`
    /// (a legacy record matches on the group alone).
    pub fn matches(&self, actual: &RecordedIdentity) -> bool {
        self.pgid == actual.pgid
            && (self.start_time.is_none() || self.start_time == actual.start_time)
    }

    /// A pidfd for `pid`, only if it is still the process this record
    /// names (checked after the pidfd is opened, so the fd cannot refer to
    /// a process started later).
    pub fn open(&self, pid: i32, procfs: &ProcFs) -> Option<PidFd> {
        if pid <= 1 {
            return None;
        }
        let pidfd = PidFd::open(pid).ok()?;
        let actual = Self::of(procfs, pid).ok()??;
        self.matches(&actual).then_some(pidfd)
    }
}

impl std::fmt::Display for RecordedIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.start_time {
            Some(start) => write!(f, "{}:{start}", self.pgid),
            None => write!(f, "{}", self.pgid),
        }
    }
}

impl std::str::FromStr for RecordedIdentity {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("not an identity (\"<pgid>:<start time>\"): {s:?}");
        let (pgid, start) = match s.split_once(':') {
            Some((pgid, start)) => (pgid, Some(start.parse::<u64>().map_err(|_| bad())?)),
            None => (s, None),
        };
        Ok(RecordedIdentity {
            pgid: pgid.parse().map_err(|_| bad())?,
            start_time: start,
        })
    }
}

impl serde::Serialize for RecordedIdentity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for RecordedIdentity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => s.parse().map_err(serde::de::Error::custom),
            serde_json::Value::Number(n) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .map(|pgid| RecordedIdentity {
                    pgid,
                    start_time: None,
                })
                .ok_or_else(|| serde::de::Error::custom(format!("not a pgid: {n}"))),
            other => Err(serde::de::Error::custom(format!(
                "not an identity: {other}"
            ))),
        }
    }
}

/// For a field that must not make its whole record unreadable: an
/// identity that does not parse reads as none (`#[serde(deserialize_with)]`).
pub fn lenient<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<RecordedIdentity>, D::Error> {
    use serde::Deserialize;
    Ok(serde_json::Value::deserialize(d)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_identities_read_both_forms_and_match_exactly_or_by_group() {
        let exact: RecordedIdentity = serde_json::from_str("\"10:500\"").unwrap();
        let legacy: RecordedIdentity = serde_json::from_str("10").unwrap();
        let legacy_str: RecordedIdentity = serde_json::from_str("\"10\"").unwrap();
        assert_eq!(serde_json::to_string(&exact).unwrap(), "\"10:500\"");
        assert_eq!(legacy, legacy_str);
        let actual = |start| RecordedIdentity {
            pgid: 10,
            start_time: Some(start),
        };
        assert!(exact.matches(&actual(500)));
        assert!(!exact.matches(&actual(501)));
        assert!(legacy.matches(&actual(501)));
        assert!(!legacy.matches(&RecordedIdentity {
            pgid: 11,
            start_time: Some(501)
        }));
        assert!(serde_json::from_str::<RecordedIdentity>("\"x:1\"").is_err());
    }

    #[test]
    fn a_recorded_identity_opens_only_its_process() {
        let procfs = ProcFs::default();
        let me = std::process::id() as i32;
        let mine = RecordedIdentity::of(&procfs, me).unwrap().unwrap();
        assert!(mine.open(me, &procfs).is_some());
        let other = RecordedIdentity {
            start_time: mine.start_time.map(|s| s + 1),
            ..mine
        };
        assert!(other.open(me, &procfs).is_none());
    }

    #[test]
    fn a_wrong_start_time_is_never_opened() {
        let procfs = ProcFs::default();
        let me = ProcessIdentity::of(&procfs, std::process::id() as i32).expect("self");
        assert!(me.open(&procfs).is_some());
        let impostor = ProcessIdentity {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(impostor.open(&procfs).is_none());
        assert!(!impostor.is_alive(&procfs));
    }
}
