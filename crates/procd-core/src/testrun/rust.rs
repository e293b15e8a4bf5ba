//! libtest (`cargo test`) and cargo-nextest.

use super::{count_of, counts, seconds, Broken, Tally};

/// Passed, failed, skipped.
type Three = (u64, u64, u64);

fn add(a: Three, b: Three) -> Three {
    (a.0 + b.0, a.1 + b.1, a.2 + b.2)
}

/// `cargo test`: one "running N tests" … "test result:" section per test
/// binary, each checked to add up to its N.
#[derive(Debug, Default)]
pub struct Libtest {
    /// The open section's announced count, and its per-test lines so far.
    open: Option<(u64, Three)>,
    closed: Three,
    sections: u32,
    duration: f64,
}

/// N from "running N tests" (unindented: nextest shows libtest's own lines
/// indented inside its reports).
fn running(line: &str) -> Option<u64> {
    let n = line.strip_prefix("running ")?;
    let n = n
        .strip_suffix(" tests")
        .or_else(|| n.strip_suffix(" test"))?;
    n.parse().ok()
}

/// Where a panic happened: "src/lib.rs:4:26" from "… panicked at
/// src/lib.rs:4:26:" (or the older "panicked at 'msg', src/lib.rs:4:26").
fn panic_location(line: &str) -> Option<&str> {
    let at = line.split_once("panicked at ")?.1;
    let at = match at.rsplit_once("', ") {
        Some((_, loc)) => loc,
        None => at,
    };
    Some(at.trim_end_matches(':'))
}

impl Libtest {
    pub fn starts(line: &str) -> bool {
        running(line).is_some()
    }

    pub fn line(&mut self, t: &mut Tally, line: &str, cursor: u64) -> Result<(), Broken> {
        if let Some(n) = running(line) {
            if self.open.is_some() {
                return Err(Broken);
            }
            self.open = Some((n, (0, 0, 0)));
            t.capturing = None;
        } else if let Some(result) = line.strip_prefix("test result: ") {
            self.close(result)?;
        } else if let Some((name, verdict)) = line
            .strip_prefix("test ")
            .and_then(|rest| rest.rsplit_once(" ... "))
        {
            let Some((_, seen)) = self.open.as_mut() else {
                return Ok(());
            };
            match verdict {
                "ok" => seen.0 += 1,
                "FAILED" => {
                    seen.1 += 1;
                    t.failure(name, cursor);
                }
                v if v.starts_with("ignored") => seen.2 += 1,
                _ => {}
            }
        } else if let Some(name) = line.strip_prefix("---- ").and_then(|l| {
            l.strip_suffix(" stdout ----")
                .or_else(|| l.strip_suffix(" stderr ----"))
        }) {
            t.capture(name, cursor);
        } else if line == "failures:"
            || line.starts_with("stack backtrace:")
            || line.starts_with("note: ")
        {
            t.capturing = None;
        } else if t.capturing.is_some() {
            match panic_location(line) {
                Some(at) => t.locate(at),
                None => t.note(line),
            }
        }
        let live = self.open.map(|(_, seen)| seen).unwrap_or_default();
        (t.passed, t.failed, t.skipped) = add(self.closed, live);
        Ok(())
    }

    /// "ok. 1 passed; 2 failed; 2 ignored; 0 measured; 0 filtered out;
    /// finished in 0.10s": the open section's totals, which must add up
    /// to its "running N".
    fn close(&mut self, result: &str) -> Result<(), Broken> {
        let (n, _) = self.open.take().ok_or(Broken)?;
        let (_, rest) = result.split_once(". ").ok_or(Broken)?;
        let mut parts: Vec<&str> = rest.split("; ").collect();
        if let Some(last) = parts.last().copied() {
            if let Some(d) = last.strip_prefix("finished in ") {
                self.duration += seconds(d).ok_or(Broken)?;
                parts.pop();
            }
        }
        let c = counts(
            parts.into_iter(),
            &["passed", "failed", "ignored", "measured", "filtered out"],
        )?;
        let three = (
            count_of(&c, &["passed"]),
            count_of(&c, &["failed"]),
            count_of(&c, &["ignored"]),
        );
        if three.0 + three.1 + three.2 + count_of(&c, &["measured"]) != n {
            return Err(Broken);
        }
        self.closed = add(self.closed, three);
        self.sections += 1;
        Ok(())
    }

    pub fn finish(&mut self, t: &mut Tally) -> bool {
        if self.sections == 0 || self.open.is_some() {
            return false;
        }
        (t.passed, t.failed, t.skipped) = self.closed;
        t.duration = Some((self.duration * 1000.0).round() / 1000.0);
        true
    }
}

/// cargo-nextest: a status line per test, the panic in its "stderr"
/// block, and a "Summary" line whose counts must add up to its run count.
#[derive(Debug, Default)]
pub struct Nextest {
    seen: Three,
    totals: Option<Three>,
    /// The failure the next stderr block belongs to.
    last_failed: Option<usize>,
}

impl Nextest {
    pub fn starts(line: &str) -> bool {
        let l = line.trim_start();
        l.starts_with("Starting ") && l.contains(" across ") && l.contains(" test")
    }

    pub fn line(&mut self, t: &mut Tally, line: &str, cursor: u64) -> Result<(), Broken> {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("Summary [") {
            return self.summary(t, rest);
        }
        if self.totals.is_some() {
            // The recap after the summary names failures again.
            return Ok(());
        }
        if let Some((status, name)) = status_line(l) {
            t.capturing = None;
            match status {
                "PASS" | "LEAK" | "FLAKY" => self.seen.0 += 1,
                "SKIP" => self.seen.2 += 1,
                "FAIL" | "TIMEOUT" | "ABORT" | "LEAK-FAIL" => self.fail(t, name, cursor),
                s if s.starts_with("SIG") => self.fail(t, name, cursor),
                _ => {}
            }
            (t.passed, t.failed, t.skipped) = self.seen;
        } else if l.starts_with("stderr ─") || l.starts_with("--- STDERR:") {
            t.capturing = self.last_failed;
        } else if l.starts_with("stdout ─")
            || l.starts_with("--- STDOUT:")
            || l.starts_with("stack backtrace:")
            || l.starts_with("note: ")
        {
            t.capturing = None;
        } else if t.capturing.is_some() {
            match panic_location(l) {
                Some(at) => t.locate(at),
                None => t.note(l),
            }
        }
        Ok(())
    }

    fn fail(&mut self, t: &mut Tally, name: &str, cursor: u64) {
        self.seen.1 += 1;
        self.last_failed = t.failure(name, cursor);
    }

    /// "[   0.137s] 2/3 tests run: 0 passed, 2 failed, 2 skipped".
    fn summary(&mut self, t: &mut Tally, rest: &str) -> Result<(), Broken> {
        let (duration, rest) = rest.split_once(']').ok_or(Broken)?;
        let (run, outcomes) = rest.trim().split_once(" run: ").ok_or(Broken)?;
        let run = run.split([' ', '/']).next().ok_or(Broken)?;
        let run: u64 = run.parse().map_err(|_| Broken)?;
        // "2 passed (1 slow)": the note in brackets is not a count.
        let parts = outcomes
            .split(", ")
            .map(|p| p.split(" (").next().unwrap_or(p));
        let c = counts(
            parts,
            &[
                "passed",
                "failed",
                "skipped",
                "timed out",
                "exec failed",
                "leaky",
            ],
        )?;
        let three = (
            count_of(&c, &["passed"]),
            count_of(&c, &["failed", "timed out", "exec failed"]),
            count_of(&c, &["skipped"]),
        );
        if three.0 + three.1 != run {
            return Err(Broken);
        }
        t.duration = seconds(duration.trim());
        t.capturing = None;
        self.totals = Some(three);
        Ok(())
    }

    pub fn finish(&mut self, t: &mut Tally) -> bool {
        let Some(totals) = self.totals else {
            return false;
        };
        (t.passed, t.failed, t.skipped) = totals;
        true
    }
}

/// ("FAIL", "tally tests::fails") from "FAIL [   0.137s] (2/3) tally
/// tests::fails".
fn status_line(l: &str) -> Option<(&str, &str)> {
    let (status, rest) = l.split_once(" [")?;
    if status.is_empty() || !status.chars().all(|c| c.is_ascii_uppercase() || c == '-') {
        return None;
    }
    let (_, name) = rest.split_once("] ")?;
    let name = name.trim();
    let name = match name.strip_prefix('(') {
        Some(counted) => counted.split_once(") ")?.1,
        None => name,
    };
    Some((status, name))
}
