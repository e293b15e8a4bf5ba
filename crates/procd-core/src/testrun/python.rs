//! pytest: progress characters (or `-v` lines) while it runs, the
//! FAILURES and ERRORS sections for what each failure said, and the last
//! "=== 2 failed, 1 passed in 0.02s ===" line for the totals.

use super::{count_of, counts, seconds, Broken, Tally};

/// Passed, failed, skipped.
type Three = (u64, u64, u64);

#[derive(Debug, Default)]
pub struct Pytest {
    totals: Option<Three>,
}

const OUTCOMES: &[&str] = &[
    "passed",
    "failed",
    "skipped",
    "xfailed",
    "xpassed",
    "error",
    "errors",
    "warning",
    "warnings",
    "deselected",
    "rerun",
];

impl Pytest {
    pub fn starts(line: &str) -> bool {
        line.starts_with('=') && line.contains(" test session starts ")
    }

    pub fn line(&mut self, t: &mut Tally, line: &str, cursor: u64) -> Result<(), Broken> {
        if self.totals.is_some() {
            return Ok(());
        }
        if let Some((totals, duration)) = final_line(line)? {
            (t.passed, t.failed, t.skipped) = totals;
            t.duration = Some(duration);
            self.totals = Some(totals);
            t.capturing = None;
        } else if line.starts_with("====") {
            // A section: FAILURES, ERRORS, warnings, the short summary.
            t.capturing = None;
        } else if let Some(name) = failure_header(line) {
            t.capture(name, cursor);
        } else if let Some(rest) = line
            .strip_prefix("FAILED ")
            .or_else(|| line.strip_prefix("ERROR "))
        {
            short_summary(t, rest, cursor);
        } else if t.capturing.is_some() {
            if let Some(e) = line.strip_prefix("E ") {
                t.note(e.trim_start());
            } else if let Some(at) = location(line) {
                t.locate(at);
            }
        } else if let Some((outcome, _)) = verbose_line(line) {
            tally_char(t, outcome);
        } else if let Some(chars) = progress_line(line) {
            for c in chars.chars() {
                tally_char(t, c);
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

/// What an unfinished line of progress characters ("test_a.py .F") has
/// counted so far: (passed, failed, skipped).
pub fn pending(partial: &str) -> (u64, u64, u64) {
    let partial = partial.trim_end();
    let chars = match partial.rsplit_once(' ') {
        Some((file, chars)) if file.ends_with(".py") && !file.contains(' ') => chars,
        Some(_) => return (0, 0, 0),
        None => partial,
    };
    if !chars.chars().all(|c| ".sFExX".contains(c)) {
        return (0, 0, 0);
    }
    let mut t = Tally::default();
    for c in chars.chars() {
        tally_char(&mut t, c);
    }
    (t.passed, t.failed, t.skipped)
}

fn tally_char(t: &mut Tally, c: char) {
    match c {
        '.' | 'X' => t.passed += 1,
        'F' | 'E' => t.failed += 1,
        's' | 'x' => t.skipped += 1,
        _ => {}
    }
}

/// The totals from "==== 2 failed, 1 passed, 1 skipped in 0.02s ====" (or
/// `-q`'s bare form); Ok(None) for any other line, Err for a totals line
/// with a word procd does not know.
fn final_line(line: &str) -> Result<Option<(Three, f64)>, Broken> {
    let body = line.trim_matches(|c| c == '=' || c == ' ');
    let Some((outcomes, time)) = body.rsplit_once(" in ") else {
        return Ok(None);
    };
    let time = time.split(" (").next().unwrap_or(time);
    let Some(duration) = seconds(time) else {
        return Ok(None);
    };
    if outcomes == "no tests ran" {
        return Ok(Some(((0, 0, 0), duration)));
    }
    let first = outcomes.split(' ').next().unwrap_or_default();
    if first.parse::<u64>().is_err() {
        return Ok(None);
    }
    let c = counts(outcomes.split(", "), OUTCOMES)?;
    let totals = (
        count_of(&c, &["passed", "xpassed"]),
        count_of(&c, &["failed", "error", "errors"]),
        count_of(&c, &["skipped", "xfailed"]),
    );
    Ok(Some((totals, duration)))
}

/// "test_two" from "_____ test_two _____", "test_five" from "____ ERROR
/// at setup of test_five ____".
fn failure_header(line: &str) -> Option<&str> {
    if !line.starts_with("___") || !line.ends_with("___") {
        return None;
    }
    let name = line.trim_matches(|c| c == '_' || c == ' ');
    let name = name
        .strip_prefix("ERROR at setup of ")
        .or_else(|| name.strip_prefix("ERROR at teardown of "))
        .unwrap_or(name);
    (!name.is_empty()).then_some(name)
}

/// "FAILED test_a.py::TestK::test_six - ValueError: six": the failure
/// takes its node id as its name, and the message if it has none.
fn short_summary(t: &mut Tally, rest: &str, cursor: u64) {
    let (node, said) = match rest.split_once(" - ") {
        Some((node, said)) => (node, Some(said)),
        None => (rest, None),
    };
    // The section header names it "TestK.test_six".
    let short = node.split_once("::").map_or(node, |(_, tail)| tail);
    let header = short.replace("::", ".");
    let found = t
        .failures
        .iter()
        .position(|f| f.name == header || f.name == node);
    let i = match found {
        Some(i) => {
            t.failures[i].name = node.to_string();
            Some(i)
        }
        None => t.failure(node, cursor),
    };
    if let (Some(i), Some(said)) = (i, said) {
        if t.failures[i].lines.is_empty() {
            t.failures[i].lines.push(said.to_string());
        }
    }
    t.capturing = None;
}

/// "test_a.py:5" from "test_a.py:5: AssertionError".
fn location(line: &str) -> Option<&str> {
    let (at, kind) = line.rsplit_once(": ")?;
    let (file, n) = at.rsplit_once(':')?;
    let plain = !kind.contains(' ') && !file.contains(' ');
    (plain && file.ends_with(".py") && n.parse::<u32>().is_ok()).then_some(at)
}

/// ('F', "test_a.py::test_two") from "test_a.py::test_two FAILED   [ 33%]".
fn verbose_line(line: &str) -> Option<(char, &str)> {
    let (node, rest) = line.split_once(' ')?;
    if !node.contains("::") {
        return None;
    }
    let word = rest.split_whitespace().next()?;
    let c = match word {
        "PASSED" => '.',
        "FAILED" => 'F',
        "ERROR" => 'E',
        "SKIPPED" => 's',
        "XFAIL" => 'x',
        "XPASS" => 'X',
        _ => return None,
    };
    Some((c, node))
}

/// ".FsxEF" from "test_a.py .FsxEF      [100%]" (or a wrapped line of
/// characters alone).
fn progress_line(line: &str) -> Option<&str> {
    let (body, pct) = line.trim_end().rsplit_once('[')?;
    let pct = pct.strip_suffix("%]")?.trim();
    pct.parse::<u32>().ok()?;
    let body = body.trim_end();
    let chars = match body.rsplit_once(' ') {
        Some((file, chars)) if !file.contains(' ') => chars,
        Some(_) => return None,
        None => body,
    };
    let ok = !chars.is_empty() && chars.chars().all(|c| ".sFExX".contains(c));
    ok.then_some(chars)
}
