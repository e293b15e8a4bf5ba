//! jest, vitest and node's own `node --test` (TAP when its output is a
//! pipe, "spec" on a terminal). All three give their counts only at the
//! end, so only then do they get a summary.

use super::{count_of, counts, seconds, Broken, Tally};

/// The totals line's counts, checked to add up to its total.
fn checked(parts: &[(String, u64)], total: u64) -> Result<(u64, u64, u64), Broken> {
    let three = (
        count_of(parts, &["passed"]),
        count_of(parts, &["failed"]),
        count_of(parts, &["skipped", "todo"]),
    );
    if three.0 + three.1 + three.2 != total {
        return Err(Broken);
    }
    Ok(three)
}

/// jest: "● suite › name" blocks, then "Tests: 1 failed, 2 passed, 3 total".
#[derive(Debug, Default)]
pub struct Jest {
    totals: Option<(u64, u64, u64)>,
}

impl Jest {
    pub fn starts(line: &str) -> bool {
        let path_after = |p: &str| line.strip_prefix(p).is_some_and(|r| !r.starts_with(' '));
        path_after("PASS ") || path_after("FAIL ") || line.starts_with("Test Suites: ")
    }

    pub fn line(&mut self, t: &mut Tally, line: &str, cursor: u64) -> Result<(), Broken> {
        let l = line.trim();
        if let Some(rest) = line.strip_prefix("Tests:") {
            let parts: Vec<&str> = rest.trim().split(", ").collect();
            let (total, parts) = parts.split_last().ok_or(Broken)?;
            let total: u64 = total
                .strip_suffix(" total")
                .and_then(|n| n.parse().ok())
                .ok_or(Broken)?;
            let c = counts(
                parts.iter().copied(),
                &["failed", "skipped", "todo", "passed"],
            )?;
            self.totals = Some(checked(&c, total)?);
            t.capturing = None;
        } else if let Some(time) = line.strip_prefix("Time:") {
            let time = time.split(',').next().unwrap_or(time);
            t.duration = seconds(time);
        } else if let Some(name) = l.strip_prefix("● ") {
            if name.starts_with("Console") || name.starts_with("Test suite failed to run") {
                t.capturing = None;
            } else {
                t.capture(name, cursor);
            }
        } else if line.starts_with("PASS ") || line.starts_with("FAIL ") {
            t.capturing = None;
        } else if t.capturing.is_some() {
            if let Some(at) = l.strip_prefix("at ") {
                if let Some(loc) = at.rsplit_once('(').and_then(|(_, l)| l.strip_suffix(')')) {
                    t.locate(loc);
                } else {
                    t.locate(at);
                }
                t.capturing = None;
            } else if !code_frame(l) {
                t.note(l);
            }
        }
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

/// A line of the source excerpt jest and vitest show: "> 5 |   expect(…)",
/// "  3| describe(", "    |   ^".
fn code_frame(l: &str) -> bool {
    let l = l.trim_start_matches('>').trim_start();
    let digits = l.chars().take_while(|c| c.is_ascii_digit()).count();
    l[digits..].trim_start().starts_with('|')
}

/// vitest: " FAIL  file > suite > name" blocks after "Failed Tests", then
/// "      Tests  1 failed | 3 passed (4)".
#[derive(Debug, Default)]
pub struct Vitest {
    totals: Option<(u64, u64, u64)>,
}

impl Vitest {
    pub fn starts(line: &str) -> bool {
        let l = line.trim();
        l.starts_with("RUN  v") || l.starts_with("Test Files  ")
    }

    pub fn line(&mut self, t: &mut Tally, line: &str, cursor: u64) -> Result<(), Broken> {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("Tests  ") {
            let (parts, total) = rest.rsplit_once(" (").ok_or(Broken)?;
            let total: u64 = total
                .strip_suffix(')')
                .and_then(|n| n.parse().ok())
                .ok_or(Broken)?;
            let c = counts(parts.split(" | "), &["failed", "passed", "skipped", "todo"])?;
            self.totals = Some(checked(&c, total)?);
            t.capturing = None;
        } else if let Some(d) = l.strip_prefix("Duration  ") {
            t.duration = seconds(d.split(" (").next().unwrap_or(d));
        } else if let Some(name) = l.strip_prefix("FAIL  ") {
            if name.contains(" > ") {
                t.capture(name, cursor);
            } else {
                t.capturing = None;
            }
        } else if l.starts_with("⎯") {
            t.capturing = None;
        } else if t.capturing.is_some() {
            if let Some(at) = l.strip_prefix("❯ ") {
                t.locate(at);
                t.capturing = None;
            } else if !code_frame(l) {
                t.note(l);
            }
        }
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

/// `node --test`, in either of its reporters.
#[derive(Debug)]
pub struct NodeTest {
    tap: bool,
    /// The "# tests", "# pass", … lines (or "ℹ tests", … ), by name.
    totals: Vec<(String, u64)>,
    duration: Option<f64>,
    /// A "not ok" whose YAML block is being read (TAP).
    pending: Option<Pending>,
    /// Inside the spec reporter's "failing tests:" recap.
    recap: bool,
    /// The location the recap's next failure is at.
    recap_at: Option<String>,
}

#[derive(Debug)]
struct Pending {
    name: String,
    cursor: u64,
    location: Option<String>,
    kind: Option<String>,
    message: Vec<String>,
    /// The indentation of the block's keys while an `error: |-` runs.
    error_block: Option<usize>,
}

impl NodeTest {
    pub fn starts(line: &str) -> Option<NodeTest> {
        let tap = line == "TAP version 13";
        let spec = ["✔ ", "✖ ", "﹣ ", "▶ ", "ℹ tests "]
            .iter()
            .any(|p| line.starts_with(p));
        (tap || spec).then(|| NodeTest {
            tap,
            totals: Vec::new(),
            duration: None,
            pending: None,
            recap: false,
            recap_at: None,
        })
    }

    pub fn line(&mut self, t: &mut Tally, line: &str, cursor: u64) -> Result<(), Broken> {
        let total = if self.tap {
            line.strip_prefix("# ")
        } else {
            line.strip_prefix("ℹ ")
        };
        if let Some((word, n)) = total.and_then(|r| r.split_once(' ')) {
            if word == "duration_ms" {
                self.duration = n.parse::<f64>().ok().map(|ms| ms.round() / 1000.0);
            } else if let Ok(n) = n.parse::<u64>() {
                self.totals.push((word.to_string(), n));
            }
            return Ok(());
        }
        if self.tap {
            self.tap_line(t, line, cursor);
        } else {
            self.spec_line(t, line, cursor);
        }
        Ok(())
    }

    fn tap_line(&mut self, t: &mut Tally, line: &str, cursor: u64) {
        let l = line.trim_start();
        let indent = line.len() - l.len();
        if let Some(p) = self.pending.as_mut() {
            if let Some(key_indent) = p.error_block {
                if indent > key_indent {
                    p.message.push(l.to_string());
                    return;
                }
                p.error_block = None;
            }
            if l == "..." {
                self.commit(t);
            } else if let Some(at) = quoted(l, "location:") {
                p.location = Some(at.trim_start_matches("file://").to_string());
            } else if let Some(kind) = quoted(l, "failureType:") {
                p.kind = Some(kind.to_string());
            } else if l == "error: |-" || l == "error: >-" {
                p.error_block = Some(indent);
            } else if let Some(e) = quoted(l, "error:") {
                p.message.push(e.to_string());
            }
            return;
        }
        if let Some(rest) = l.strip_prefix("not ok ") {
            let name = rest.split_once(" - ").map_or(rest, |(_, n)| n);
            let name = name.split(" # ").next().unwrap_or(name);
            self.pending = Some(Pending {
                name: name.to_string(),
                cursor,
                location: None,
                kind: None,
                message: Vec::new(),
                error_block: None,
            });
        }
    }

    /// The end of a "not ok"'s block: a failure, unless it only says its
    /// subtests failed (they are reported themselves).
    fn commit(&mut self, t: &mut Tally) {
        let Some(p) = self.pending.take() else { return };
        if p.kind.as_deref() == Some("subtestsFailed") {
            return;
        }
        t.capturing = t.failure(&p.name, p.cursor);
        if let Some(at) = &p.location {
            t.locate(at);
        }
        for l in &p.message {
            t.note(l);
        }
        t.capturing = None;
    }

    fn spec_line(&mut self, t: &mut Tally, line: &str, cursor: u64) {
        if line.starts_with("✖ failing tests:") {
            self.recap = true;
            return;
        }
        if !self.recap {
            return;
        }
        if let Some(at) = line.strip_prefix("test at ") {
            self.recap_at = Some(at.trim().to_string());
            t.capturing = None;
        } else if let Some(rest) = line.strip_prefix("✖ ") {
            let name = rest.rsplit_once(" (").map_or(rest, |(n, _)| n);
            t.capture(name, cursor);
            if let Some(at) = self.recap_at.take() {
                t.locate(&at);
            }
        } else if line.trim_start().starts_with("at ") {
            t.capturing = None;
        } else {
            t.note(line.trim());
        }
    }

    pub fn finish(&mut self, t: &mut Tally) -> bool {
        self.commit(t);
        let get = |w: &str| {
            self.totals
                .iter()
                .rev()
                .find(|(k, _)| k == w)
                .map(|(_, n)| *n)
        };
        let (Some(tests), Some(pass), Some(fail)) = (get("tests"), get("pass"), get("fail")) else {
            return false;
        };
        let cancelled = get("cancelled").unwrap_or(0);
        let skipped = get("skipped").unwrap_or(0) + get("todo").unwrap_or(0);
        if pass + fail + cancelled + skipped != tests {
            return false;
        }
        (t.passed, t.failed, t.skipped) = (pass, fail + cancelled, skipped);
        t.duration = self.duration;
        true
    }
}

/// "x" from "key: 'x'".
fn quoted<'a>(l: &'a str, key: &str) -> Option<&'a str> {
    let v = l.strip_prefix(key)?.trim();
    v.strip_prefix('\'')?.strip_suffix('\'')
}
