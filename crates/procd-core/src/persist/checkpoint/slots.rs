//! `procs.json` in slots: so that a spawn or an exit writes its own
//! session's record, not every running session's (issue 56: at 3 000
//! sessions the whole file is 1.4 MB, written twice per spawn and wait).
//!
//! The file stays what section 7 of the spec says, a JSON array of the
//! running sessions, with whitespace between the records: a header line
//! `[`, then `capacity` slots of `SLOT` bytes, each a record (and its
//! separator) padded with spaces to a line, or blank, then `]`. Every
//! record but the first in the file starts with its `,`, so a record is
//! added, changed or blanked by one write of its own slot, and the file is
//! a valid array before and after it. A slot is aligned to `SLOT`, which
//! divides a page: a write within one page is all or nothing when the
//! daemon is SIGKILLed (the kernel looks for a fatal signal only between
//! the pages of a write), so a crash leaves the file before or after each
//! change, never torn. What one slot write cannot do is done by writing
//! the file whole, atomically as before (`SwapFile`): the first record
//! blanked while others follow (the next one's `,` would have to go
//! too), a record longer than a slot, no free slot after the first
//! record, a file mostly blank, or the same id twice.

use super::Serialized;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Bytes per slot: a record is about 500 bytes, with its exit 650.
pub(super) const SLOT: usize = 1024;

/// Slots a file written whole has at least.
const MIN_CAPACITY: usize = 16;

/// One record of `procs.json` and the session id it is found by.
#[derive(Clone, Debug)]
pub struct Record {
    pub id: Arc<str>,
    pub json: Serialized,
}

impl Record {
    pub fn of(entry: &super::CheckpointEntry) -> std::io::Result<Record> {
        Ok(Record {
            id: entry.session_id.as_str().into(),
            json: serde_json::to_string(entry)
                .map_err(std::io::Error::other)?
                .into(),
        })
    }
}

/// What the file holds, slot by slot, as this daemon wrote it.
#[derive(Debug, Default)]
pub(super) struct Slots {
    /// Slots between the header and the end; 0 for `[]`.
    capacity: usize,
    /// FxHash: the ids are the daemon's own names (or an earlier
    /// daemon's, read from its own file), nothing a client chooses.
    held: FxHashMap<Arc<str>, Held>,
    /// The first slot of each record, in file order: the first one has no
    /// `,` before it.
    starts: BTreeSet<usize>,
    free: BTreeSet<usize>,
    /// Moved on by each `plan`, to find the records it did not see.
    pass: u64,
}

#[derive(Debug)]
struct Held {
    slot: usize,
    /// Slots it takes: more than one only for a record longer than a
    /// slot, which a whole write places and only a whole write changes.
    span: usize,
    json: Serialized,
    pass: u64,
}

/// A write of one slot: its offset and its `SLOT` bytes.
pub(super) type SlotWrite = (u64, Vec<u8>);

impl Slots {
    /// The file holding `records`, as a whole write makes it, and the
    /// slots it has.
    pub(super) fn whole(records: &[Record]) -> (Vec<u8>, Slots) {
        let mut slots = Slots::default();
        if records.is_empty() {
            return (b"[]\n".to_vec(), slots);
        }
        let spans: Vec<usize> = records
            .iter()
            .map(|r| (r.json.len() + 2).div_ceil(SLOT))
            .collect();
        let used: usize = spans.iter().sum();
        slots.capacity = (2 * used).max(MIN_CAPACITY);
        let mut bytes = padded(b"[", SLOT);
        let mut slot = 0;
        for (r, span) in records.iter().zip(spans) {
            bytes.extend(record_slot(slot > 0, &r.json, span * SLOT));
            slots.starts.insert(slot);
            slots.held.insert(
                r.id.clone(),
                Held {
                    slot,
                    span,
                    json: r.json.clone(),
                    pass: 0,
                },
            );
            slot += span;
        }
        for free in slot..slots.capacity {
            bytes.extend(padded(b"", SLOT));
            slots.free.insert(free);
        }
        bytes.extend_from_slice(b"]\n");
        // Two records under one id: the file has both, `held` one of
        // them, and `diff` refuses slots that count apart.
        (bytes, slots)
    }

    /// The length of the file these slots describe.
    pub(super) fn file_len(&self) -> u64 {
        match self.capacity {
            0 => 3,
            n => offset(n) + 2,
        }
    }

    /// The slot writes that take the file from what it holds to
    /// `records`, in an order that keeps it valid after each; None when
    /// only a whole write can (the caller then makes one, and these
    /// slots are no longer what the file holds).
    pub(super) fn plan(&mut self, records: &[Record]) -> Option<Vec<SlotWrite>> {
        let Diff {
            added,
            changed,
            removed,
        } = self.diff(records)?;
        let mut writes = Vec::new();
        for id in removed {
            writes.push(self.blank(&id)?);
        }
        for r in changed {
            writes.push(self.change(r)?);
        }
        for r in added {
            writes.push(self.add(r)?);
        }
        // Mostly blank, or blank, the file is written small again.
        let mostly_blank = self.capacity > 4 * MIN_CAPACITY && 4 * self.held.len() < self.capacity;
        if mostly_blank || (self.held.is_empty() && self.capacity > 0) {
            return None;
        }
        Some(writes)
    }

    /// What differs between the file and `records`; None for an id twice.
    fn diff<'r>(&mut self, records: &'r [Record]) -> Option<Diff<'r>> {
        if self.held.len() != self.starts.len() {
            return None; // a file written with one id twice (`whole`)
        }
        self.pass += 1;
        let pass = self.pass;
        let mut added = Vec::new();
        let mut changed = Vec::new();
        for r in records {
            match self.held.get_mut(&r.id) {
                None => added.push(r),
                Some(h) if h.pass == pass => return None,
                Some(h) => {
                    h.pass = pass;
                    if !Arc::ptr_eq(&h.json, &r.json) && h.json != r.json {
                        changed.push(r);
                    }
                }
            }
        }
        let seen = records.len() - added.len();
        let mut removed: Vec<(usize, Arc<str>)> = match seen == self.held.len() {
            true => Vec::new(),
            false => self
                .held
                .iter()
                .filter(|(_, h)| h.pass != pass)
                .map(|(id, h)| (h.slot, id.clone()))
                .collect(),
        };
        // Last first: the first record can go only once it is alone.
        removed.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
        Some(Diff {
            added,
            changed,
            removed: removed.into_iter().map(|(_, id)| id).collect(),
        })
    }

    /// Blanks the record of `id`: not the first while others follow.
    fn blank(&mut self, id: &str) -> Option<SlotWrite> {
        let h = self.held.remove(id)?;
        let first = self.starts.first().copied();
        if h.span > 1 || (first == Some(h.slot) && self.starts.len() > 1) {
            return None;
        }
        self.starts.remove(&h.slot);
        self.free.insert(h.slot);
        Some((offset(h.slot), padded(b"", SLOT)))
    }

    /// Writes `r` over its session's record, in its slot.
    fn change(&mut self, r: &Record) -> Option<SlotWrite> {
        let first = self.starts.first().copied();
        let h = self.held.get_mut(&r.id)?;
        if h.span > 1 || r.json.len() + 2 > SLOT {
            return None;
        }
        h.json = r.json.clone();
        Some((
            offset(h.slot),
            record_slot(first != Some(h.slot), &r.json, SLOT),
        ))
    }

    /// Writes `r` in a blank slot after the first record (anywhere when
    /// there is none).
    fn add(&mut self, r: &Record) -> Option<SlotWrite> {
        let first = self.starts.first().copied();
        let slot = match first {
            None => self.free.first(),
            Some(first) => self.free.range(first + 1..).next(),
        }
        .copied()?;
        if r.json.len() + 2 > SLOT {
            return None;
        }
        self.free.remove(&slot);
        self.starts.insert(slot);
        let held = Held {
            slot,
            span: 1,
            json: r.json.clone(),
            pass: self.pass,
        };
        self.held.insert(r.id.clone(), held);
        Some((offset(slot), record_slot(first.is_some(), &r.json, SLOT)))
    }
}

/// The records a write adds and changes, and the ids it blanks (last in
/// the file first).
struct Diff<'r> {
    added: Vec<&'r Record>,
    changed: Vec<&'r Record>,
    removed: Vec<Arc<str>>,
}

/// Where slot `slot` starts: after the header, which is a slot long.
fn offset(slot: usize) -> u64 {
    ((slot + 1) * SLOT) as u64
}

/// `text` padded with spaces to a line of `len` bytes (a blank slot:
/// no text).
fn padded(text: &[u8], len: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(len);
    bytes.extend_from_slice(text);
    bytes.resize(len - 1, b' ');
    bytes.push(b'\n');
    bytes
}

/// A record's slot (or slots): its `,` unless it is the first, then the
/// record, padded to `len`.
fn record_slot(comma: bool, json: &str, len: usize) -> Vec<u8> {
    let text = [&b","[..usize::from(comma)], json.as_bytes()].concat();
    padded(&text, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `id` in round `round`, `long` making it span slots.
    fn record(id: usize, round: usize, long: bool) -> Record {
        let pad = if long {
            "x".repeat(SLOT + 100)
        } else {
            String::new()
        };
        Record {
            id: format!("proc_{id:012x}").into(),
            json: format!(r#"{{"session_id":"proc_{id:012x}","round":{round},"pad":"{pad}"}}"#)
                .into(),
        }
    }

    /// The ids and rounds a file holds, in file order; panics when it is
    /// not a JSON array.
    fn held(file: &[u8]) -> Vec<(String, u64)> {
        let values: Vec<serde_json::Value> =
            serde_json::from_slice(file).expect("procs.json is a JSON array");
        values
            .iter()
            .map(|v| {
                (
                    v["session_id"].as_str().unwrap().to_string(),
                    v["round"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    /// Sessions come, change and go at random; after every slot write
    /// (where a SIGKILL could stop the writer) the file is a JSON array,
    /// and after the last write of each change it holds exactly the
    /// records asked for. Each slot write is one aligned slot, so within
    /// one page; and most changes need no whole write.
    #[test]
    fn every_slot_write_leaves_a_valid_array_and_the_last_the_records() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut live: Vec<Record> = Vec::new();
        let mut next_id = 0;
        let (mut file, mut slots) = Slots::whole(&live);
        let (mut whole, mut in_place) = (0, 0);
        for round in 0..1500 {
            for _ in 0..1 + next(3) {
                match next(10) {
                    0..=3 if live.len() < 100 => {
                        next_id += 1;
                        live.push(record(next_id, round, next(50) == 0));
                    }
                    4..=6 if !live.is_empty() => {
                        live.remove(next(live.len()));
                    }
                    7..=8 if !live.is_empty() => {
                        let i = next(live.len());
                        let id = live[i].id.clone();
                        live[i] = Record {
                            id: id.clone(),
                            json: record(0, round, false)
                                .json
                                .replace("proc_000000000000", &id)
                                .into(),
                        };
                    }
                    _ => {}
                }
            }
            match slots.plan(&live) {
                Some(writes) => {
                    in_place += 1;
                    for (offset, bytes) in writes {
                        assert_eq!(bytes.len(), SLOT);
                        assert_eq!(offset % SLOT as u64, 0);
                        let at = usize::try_from(offset).unwrap();
                        file[at..at + SLOT].copy_from_slice(&bytes);
                        held(&file);
                    }
                    assert_eq!(file.len() as u64, slots.file_len());
                }
                None => {
                    whole += 1;
                    (file, slots) = Slots::whole(&live);
                }
            }
            let mut got = held(&file);
            let mut want: Vec<(String, u64)> = live
                .iter()
                .map(|r| {
                    let v: serde_json::Value = serde_json::from_str(&r.json).unwrap();
                    (r.id.to_string(), v["round"].as_u64().unwrap())
                })
                .collect();
            got.sort();
            want.sort();
            assert_eq!(got, want, "round {round}");
        }
        assert!(in_place > 4 * whole, "{in_place} in place, {whole} whole");
    }

    /// The same id twice (never from a registry, but a file may be
    /// made of it) is written whole, both records in it.
    #[test]
    fn one_id_twice_is_written_whole() {
        let twice = [record(1, 0, false), record(1, 1, false)];
        let (file, mut slots) = Slots::whole(&twice);
        assert_eq!(held(&file).len(), 2);
        assert!(slots.plan(&twice).is_none());
        let (_, mut slots) = Slots::whole(&[record(1, 0, false)]);
        assert!(slots.plan(&twice).is_none());
    }
}
