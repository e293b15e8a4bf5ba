//! Which cursor was written when: a bounded index of time marks, for a
//! read that starts at a time.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

/// Time marks one store keeps; past it the older half is thinned.
const MAX_TIME_MARKS: usize = 512;

/// Which cursor was written when: a mark per second that saw output,
/// thinned (two neighbours merged into one) when there are too many, so a
/// long-running session's index stays `MAX_TIME_MARKS` long. Only the
/// session's reader writes it. In memory only: a recovered log becomes
/// one mark covering everything up to the file's last change.
#[derive(Default)]
pub(super) struct TimeIndex {
    marks: VecDeque<TimeMark>,
}

/// Output from `cursor` up to the next mark's was written in the seconds
/// `first..=last` (Unix time).
#[derive(Debug, Clone, Copy)]
struct TimeMark {
    first: u64,
    last: u64,
    cursor: u64,
}

impl TimeIndex {
    /// A recovered log's index: one mark, everything up to `cursor`'s
    /// output written by second `last`.
    pub(super) fn recovered(cursor: u64, last: u64) -> TimeIndex {
        let mark = TimeMark {
            first: 0,
            last,
            cursor,
        };
        TimeIndex {
            marks: VecDeque::from([mark]),
        }
    }

    /// Output starting at `cursor` is being written in second `now`.
    pub(super) fn wrote(&mut self, now: u64, cursor: u64) {
        if let Some(mark) = self.marks.back_mut() {
            if mark.last >= now {
                return;
            }
        }
        self.marks.push_back(TimeMark {
            first: now,
            last: now,
            cursor,
        });
        if self.marks.len() > MAX_TIME_MARKS {
            self.thin();
        }
    }

    /// Merges the older half's marks in pairs: recent output keeps its
    /// second, old output is placed more coarsely.
    fn thin(&mut self) {
        let half = self.marks.len() / 2;
        let (old, recent) = self.marks.make_contiguous().split_at(half);
        self.marks = old
            .chunks(2)
            .map(|pair| TimeMark {
                first: pair[0].first,
                last: pair[pair.len() - 1].last,
                cursor: pair[0].cursor,
            })
            .chain(recent.iter().copied())
            .collect();
    }

    /// Where output written at or after second `t` starts: the first mark
    /// that reaches `t` (all before it was written earlier).
    pub(super) fn first_written_at_or_after(&self, t: u64, end: u64) -> u64 {
        self.marks
            .iter()
            .find(|m| m.last >= t)
            .map_or(end, |m| m.cursor)
    }

    /// Where output written after second `t` starts: the first mark that
    /// began after it (all before it was written at or before `t`, or in a
    /// mark that straddles `t`, which is kept).
    pub(super) fn first_written_after(&self, t: u64, end: u64) -> u64 {
        self.marks
            .iter()
            .find(|m| m.first > t)
            .map_or(end, |m| m.cursor)
    }
}

pub(super) fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::{TimeIndex, MAX_TIME_MARKS};

    /// A week of output, a write a second: the index stays bounded, a
    /// range found in it never leaves out what was written in it, and
    /// the newest output keeps its second.
    #[test]
    fn the_time_index_stays_bounded_and_never_narrows_a_range() {
        let mut times = TimeIndex::default();
        let (t0, writes) = (1_000_000, 7 * 86_400u64);
        for s in 0..writes {
            times.wrote(t0 + s, s * 10);
            times.wrote(t0 + s, s * 10 + 5);
        }
        assert!(times.marks.len() <= MAX_TIME_MARKS, "{}", times.marks.len());
        let end = writes * 10;
        for s in (0..writes).step_by(997) {
            assert!(times.first_written_at_or_after(t0 + s, end) <= s * 10);
            assert!(times.first_written_after(t0 + s, end) >= (s + 1) * 10);
        }
        let last = writes - 3;
        assert_eq!(times.first_written_at_or_after(t0 + last, end), last * 10);
        assert_eq!(times.first_written_after(t0 + last, end), (last + 1) * 10);
        assert_eq!(times.first_written_at_or_after(t0 + writes, end), end);
        assert_eq!(times.first_written_after(t0 - 1, end), 0);
    }
}
