//! Test runs as results: a recognised runner's output read line by line
//! into counts and failures (`TestSummary`, docs/agents.md "Test runs").
//!
//! The rule that shapes every parser here: a count is the runner's own, or
//! there is none. Per-test lines give the counts while a run goes on; at
//! the end only the runner's totals do, checked against what its own lines
//! said where the runner allows it. Output a parser cannot follow (cut
//! short, two runs interleaved, a format it does not know) makes the run
//! `Broken` for good: no summary rather than a wrong one.

mod go;
mod js;
mod junit;
mod python;
mod rust;

pub use junit::read_report as read_junit;

use procd_proto::{TestFailure, TestSummary};

/// A line longer than this is not a runner's result line: it is skipped
/// whole, and the run goes on.
const MAX_LINE: usize = 16 * 1024;
/// Failures kept with their text; the counts go on past them.
const MAX_FAILURES: usize = 50;
const MAX_MESSAGE_LINES: usize = 20;
const MAX_MESSAGE_CHARS: usize = 2000;

/// A test runner procd reads the output of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    Libtest,
    Nextest,
    Pytest,
    Jest,
    Vitest,
    NodeTest,
    GoTest,
}

impl Runner {
    pub fn name(self) -> &'static str {
        match self {
            Runner::Libtest => "cargo test",
            Runner::Nextest => "nextest",
            Runner::Pytest => "pytest",
            Runner::Jest => "jest",
            Runner::Vitest => "vitest",
            Runner::NodeTest => "node --test",
            Runner::GoTest => "go test",
        }
    }
}

/// Every runner, for a command that names none (`npm test`, `make check`).
const ANY: &[Runner] = &[
    Runner::Nextest,
    Runner::Libtest,
    Runner::Pytest,
    Runner::Jest,
    Runner::Vitest,
    Runner::NodeTest,
    Runner::GoTest,
];

/// The runners a command may run, judged from its words; None when it
/// looks like no test run at all (then its output is not read).
pub fn candidates(command: &str) -> Option<&'static [Runner]> {
    let words: Vec<&str> = command
        .split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')'))
        .filter(|w| !w.is_empty())
        .map(|w| w.rsplit('/').next().unwrap_or(w))
        .collect();
    let has = |w: &str| words.contains(&w);
    let pair = |a: &str, b: &str| words.windows(2).any(|p| p[0] == a && p[1] == b);
    if has("nextest") {
        Some(&[Runner::Nextest])
    } else if pair("cargo", "test") {
        Some(&[Runner::Libtest])
    } else if has("pytest") || has("py.test") || pair("-m", "pytest") {
        Some(&[Runner::Pytest])
    } else if has("vitest") {
        Some(&[Runner::Vitest])
    } else if has("jest") {
        Some(&[Runner::Jest])
    } else if has("node") && has("--test") {
        Some(&[Runner::NodeTest])
    } else if pair("go", "test") {
        Some(&[Runner::GoTest])
    } else if words.iter().any(|w| w.contains("test") || *w == "check") {
        Some(ANY)
    } else {
        None
    }
}

/// The counts and failures a parser has gathered.
#[derive(Debug, Default)]
struct Tally {
    passed: u64,
    failed: u64,
    skipped: u64,
    duration: Option<f64>,
    failures: Vec<Failure>,
    /// Failures past `MAX_FAILURES` (counted, not kept).
    failures_dropped: u64,
    /// The failure whose text the next lines are, if any.
    capturing: Option<usize>,
}

#[derive(Debug)]
struct Failure {
    name: String,
    lines: Vec<String>,
    location: Option<String>,
    cursor: Option<u64>,
}

impl Tally {
    /// The failure named `name`, made if it is new (a runner may name a
    /// failure twice: once as it happens, once in its recap).
    fn failure(&mut self, name: &str, cursor: u64) -> Option<usize> {
        if let Some(i) = self.failures.iter().position(|f| f.name == name) {
            return Some(i);
        }
        if self.failures.len() >= MAX_FAILURES {
            self.failures_dropped += 1;
            return None;
        }
        self.failures.push(Failure {
            name: name.to_string(),
            lines: Vec::new(),
            location: None,
            cursor: Some(cursor),
        });
        Some(self.failures.len() - 1)
    }

    /// Starts taking the next lines as the text of failure `name`.
    fn capture(&mut self, name: &str, cursor: u64) {
        self.capturing = self.failure(name, cursor);
        if let Some(i) = self.capturing {
            // A recap repeats the text: keep the first telling.
            if !self.failures[i].lines.is_empty() {
                self.capturing = None;
            }
        }
    }

    /// One line of the failure being captured.
    fn note(&mut self, line: &str) {
        let Some(i) = self.capturing else { return };
        let f = &mut self.failures[i];
        if f.lines.len() < MAX_MESSAGE_LINES {
            f.lines.push(line.trim_end().to_string());
        }
    }

    fn locate(&mut self, at: &str) {
        if let Some(i) = self.capturing {
            self.failures[i]
                .location
                .get_or_insert_with(|| at.to_string());
        }
    }

    fn summary(&self, runner: &str, finished: bool) -> TestSummary {
        TestSummary {
            runner: runner.to_string(),
            passed: self.passed,
            failed: self.failed,
            skipped: self.skipped,
            duration: self.duration,
            finished,
            failures: self
                .failures
                .iter()
                .map(|f| TestFailure {
                    name: f.name.clone(),
                    message: message(&f.lines),
                    location: f.location.clone(),
                    cursor: f.cursor,
                })
                .collect(),
        }
    }
}

/// A failure's lines as one message: blank lines at either end dropped,
/// within `MAX_MESSAGE_CHARS`.
fn message(lines: &[String]) -> String {
    let start = lines.iter().position(|l| !l.trim().is_empty());
    let end = lines.iter().rposition(|l| !l.trim().is_empty());
    let (Some(start), Some(end)) = (start, end) else {
        return String::new();
    };
    let text = lines[start..=end].join("\n");
    crate::output::text::first_chars(&text, MAX_MESSAGE_CHARS).to_string()
}

/// A test run's results for the model, counts first: "Tests (pytest): 1
/// passed, 3 failed, 2 skipped in 0.02s. Failed: a (at x.py:5): what it
/// said; …". Each failure gets its message on one line, cut to
/// `FAILURE_LINE_CHARS`; the rest is a `read` from its cursor away.
pub fn text(t: &TestSummary) -> String {
    const FAILURE_LINE_CHARS: usize = 160;
    const NAMED_FAILURES: usize = 20;
    let mut text = format!(
        "Tests ({}): {} passed, {} failed, {} skipped",
        t.runner, t.passed, t.failed, t.skipped
    );
    if let Some(d) = t.duration {
        text.push_str(&format!(" in {d:.2}s"));
    }
    if !t.finished {
        text.push_str(" so far");
    }
    text.push('.');
    if !t.failures.is_empty() {
        let shown: Vec<String> = t
            .failures
            .iter()
            .take(NAMED_FAILURES)
            .map(|f| {
                let mut one = crate::output::text::first_chars(&f.name, 200).to_string();
                if let Some(at) = &f.location {
                    one.push_str(&format!(
                        " (at {})",
                        crate::output::text::first_chars(at, 200)
                    ));
                }
                // Its message on one line ("Expected values to be strictly
                // equal: 2 !== 1"), cut to the budget.
                let said: Vec<&str> = f
                    .message
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect();
                if !said.is_empty() {
                    let said = said.join(" ");
                    let cut = crate::output::text::first_chars(&said, FAILURE_LINE_CHARS);
                    one.push_str(": ");
                    one.push_str(cut);
                    if cut.len() < said.len() {
                        one.push('…');
                    }
                }
                one
            })
            .collect();
        text.push_str(&format!(" Failed: {}.", shown.join("; ")));
        let unnamed = t.failed.saturating_sub(shown.len() as u64);
        if unnamed > 0 {
            text.push_str(&format!(" {unnamed} more failed; search the log for them."));
        }
        text.push_str(
            " Each failure's report starts at its cursor in `tests.failures` (read from there).",
        );
    }
    text
}

/// Output a parser could not follow: the run gets no summary.
#[derive(Debug)]
pub struct Broken;

/// One runner's line reader.
#[derive(Debug)]
enum Parser {
    Libtest(rust::Libtest),
    Nextest(rust::Nextest),
    Pytest(python::Pytest),
    Jest(js::Jest),
    Vitest(js::Vitest),
    NodeTest(js::NodeTest),
    GoTest(go::GoTest),
}

impl Parser {
    /// The parser whose runner begins its output with this line, if one of
    /// `candidates` does.
    fn detect(candidates: &[Runner], line: &str) -> Option<Parser> {
        candidates.iter().find_map(|r| match r {
            Runner::Libtest => {
                rust::Libtest::starts(line).then(|| Parser::Libtest(Default::default()))
            }
            Runner::Nextest => {
                rust::Nextest::starts(line).then(|| Parser::Nextest(Default::default()))
            }
            Runner::Pytest => {
                python::Pytest::starts(line).then(|| Parser::Pytest(Default::default()))
            }
            Runner::Jest => js::Jest::starts(line).then(|| Parser::Jest(Default::default())),
            Runner::Vitest => js::Vitest::starts(line).then(|| Parser::Vitest(Default::default())),
            Runner::NodeTest => js::NodeTest::starts(line).map(Parser::NodeTest),
            Runner::GoTest => go::GoTest::starts(line).map(Parser::GoTest),
        })
    }

    fn line(&mut self, t: &mut Tally, line: &str, cursor: u64) -> Result<(), Broken> {
        match self {
            Parser::Libtest(p) => p.line(t, line, cursor),
            Parser::Nextest(p) => p.line(t, line, cursor),
            Parser::Pytest(p) => p.line(t, line, cursor),
            Parser::Jest(p) => p.line(t, line, cursor),
            Parser::Vitest(p) => p.line(t, line, cursor),
            Parser::NodeTest(p) => p.line(t, line, cursor),
            Parser::GoTest(p) => p.line(t, line, cursor),
        }
    }

    /// At the end of the output: whether the tally holds the runner's
    /// totals (and puts them there).
    fn finish(&mut self, t: &mut Tally) -> bool {
        match self {
            Parser::Libtest(p) => p.finish(t),
            Parser::Nextest(p) => p.finish(t),
            Parser::Pytest(p) => p.finish(t),
            Parser::Jest(p) => p.finish(t),
            Parser::Vitest(p) => p.finish(t),
            Parser::NodeTest(p) => p.finish(t),
            Parser::GoTest(p) => p.finish(t),
        }
    }

    /// Whether the per-test lines so far are counts worth showing: not
    /// for runners that report nested tests twice or only at the end.
    fn counts_live(&self) -> bool {
        matches!(
            self,
            Parser::Libtest(_) | Parser::Nextest(_) | Parser::Pytest(_) | Parser::GoTest(_)
        )
    }

    fn runner(&self) -> Runner {
        match self {
            Parser::Libtest(_) => Runner::Libtest,
            Parser::Nextest(_) => Runner::Nextest,
            Parser::Pytest(_) => Runner::Pytest,
            Parser::Jest(_) => Runner::Jest,
            Parser::Vitest(_) => Runner::Vitest,
            Parser::NodeTest(_) => Runner::NodeTest,
            Parser::GoTest(_) => Runner::GoTest,
        }
    }
}

/// One session's test run, fed its output as it is stored.
#[derive(Debug)]
pub struct TestRun {
    candidates: &'static [Runner],
    parser: Option<Parser>,
    tally: Tally,
    /// The line begun but not ended, and the log cursor it starts at.
    partial: Vec<u8>,
    partial_cursor: u64,
    overlong: bool,
    broken: bool,
    /// Set once the last summary was taken, until new lines come.
    settled: bool,
}

impl TestRun {
    /// A reader for a session running `command`, if it looks like a test
    /// run; `cursor` is where its output starts in the log.
    pub fn for_command(command: &str, cursor: u64) -> Option<TestRun> {
        Some(TestRun {
            candidates: candidates(command)?,
            parser: None,
            tally: Tally::default(),
            partial: Vec::new(),
            partial_cursor: cursor,
            overlong: false,
            broken: false,
            settled: true,
        })
    }

    /// Reads `chunk`, the output stored ending at log cursor `end`.
    /// Returns true when the summary may have changed.
    pub fn feed(&mut self, chunk: &[u8], end: u64) -> bool {
        if self.broken || chunk.is_empty() {
            return false;
        }
        let mut at = end - chunk.len() as u64;
        let mut rest = chunk;
        let mut changed = false;
        while let Some(nl) = memchr::memchr(b'\n', rest) {
            let (piece, tail) = rest.split_at(nl + 1);
            self.take(&piece[..nl]);
            changed |= self.end_line();
            at += piece.len() as u64;
            self.partial_cursor = at;
            rest = tail;
        }
        self.take(rest);
        // A partial line of pytest's progress characters moves the counts.
        changed |= matches!(self.parser, Some(Parser::Pytest(_))) && !rest.is_empty();
        if changed {
            self.settled = false;
        }
        changed
    }

    fn take(&mut self, bytes: &[u8]) {
        if self.partial.len() + bytes.len() > MAX_LINE {
            self.overlong = true;
            self.partial.clear();
        } else if !self.overlong {
            self.partial.extend_from_slice(bytes);
        }
    }

    /// A whole line is in `partial`: reads it. True when it counted.
    fn end_line(&mut self) -> bool {
        let bytes = std::mem::take(&mut self.partial);
        if std::mem::take(&mut self.overlong) {
            return false;
        }
        let raw = String::from_utf8_lossy(&bytes);
        let line = crate::output::text::strip_ansi(raw.trim_end_matches('\r'));
        // A PTY's carriage returns redraw a line: its last drawing counts.
        let line = line.rsplit('\r').next().unwrap_or_default();
        let cursor = self.partial_cursor;
        if self.parser.is_none() {
            self.parser = Parser::detect(self.candidates, line);
        }
        let Some(parser) = self.parser.as_mut() else {
            return false;
        };
        if parser.line(&mut self.tally, line, cursor).is_err() {
            self.broken = true;
        }
        true
    }

    /// The summary while the run goes on, if its counts can be shown.
    pub fn live(&self) -> Option<TestSummary> {
        let parser = self.parser.as_ref()?;
        if self.broken || !parser.counts_live() {
            return None;
        }
        let mut s = self.tally.summary(parser.runner().name(), false);
        // pytest ends a file's line of progress characters only when the
        // file is done: the characters so far count already.
        if let (Parser::Pytest(_), false) = (parser, self.overlong) {
            let (p, f, k) = python::pending(&String::from_utf8_lossy(&self.partial));
            (s.passed, s.failed, s.skipped) = (s.passed + p, s.failed + f, s.skipped + k);
        }
        Some(s)
    }

    /// The summary at the end of the output: the runner's totals, or None
    /// when they were not all read.
    pub fn finish(&mut self) -> Option<TestSummary> {
        // A last line with no newline was cut off: it is not read.
        let parser = self.parser.as_mut()?;
        if self.broken || !parser.finish(&mut self.tally) {
            return None;
        }
        Some(self.tally.summary(parser.runner().name(), true))
    }

    /// True once, after lines that counted: the caller publishes `live`.
    pub fn take_changed(&mut self) -> bool {
        !std::mem::replace(&mut self.settled, true)
    }
}

/// `n` from "n word" among `parts` ("3 passed, 1 failed"), 0 when absent.
/// Err when a part is not "number word" or its word is not in `known`.
fn counts<'a>(
    parts: impl Iterator<Item = &'a str>,
    known: &[&str],
) -> Result<Vec<(String, u64)>, Broken> {
    let mut out = Vec::new();
    for part in parts {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (n, word) = part.split_once(' ').ok_or(Broken)?;
        let n: u64 = n.trim().parse().map_err(|_| Broken)?;
        let word = word.trim();
        if !known.contains(&word) {
            return Err(Broken);
        }
        out.push((word.to_string(), n));
    }
    Ok(out)
}

fn count_of(counts: &[(String, u64)], words: &[&str]) -> u64 {
    counts
        .iter()
        .filter(|(w, _)| words.contains(&w.as_str()))
        .map(|(_, n)| n)
        .sum()
}

/// Seconds from "0.12s", "300ms", "1.5 s", "2m 3s" — the forms runners print.
fn seconds(text: &str) -> Option<f64> {
    let t = text.trim();
    if let Some(ms) = t.strip_suffix("ms") {
        return ms.trim().parse::<f64>().ok().map(|v| v / 1000.0);
    }
    if let Some((m, s)) = t.split_once("m ") {
        let m: f64 = m.trim().parse().ok()?;
        return Some(m * 60.0 + seconds(s)?);
    }
    t.strip_suffix('s')?.trim().parse().ok()
}

#[cfg(test)]
mod tests;
