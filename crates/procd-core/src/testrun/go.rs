//! `go test`: its `-json` events when the user asked for them, else its
//! `-v` text. go prints no totals, so the counts are its per-test results,
//! and the run is whole when every package it started has ended. Without
//! `-v` go does not name passing tests: a package's "ok" with no per-test
//! lines before it makes the run unreadable (no summary).

use super::{seconds, Broken, Tally};
use std::collections::{BTreeSet, HashMap};

/// A test's output lines kept until its verdict (its failure's text).
const KEPT_LINES: usize = 20;

#[derive(Debug)]
pub struct GoTest {
    json: bool,
    /// Output since each test's start, until its verdict, by test.
    output: HashMap<String, Vec<String>>,
    started: BTreeSet<String>,
    ended: BTreeSet<String>,
    /// Text: whether per-test lines came since the last package line.
    tests_since_package: bool,
    /// Text: the test the last "=== RUN" began.
    current: Option<String>,
    duration: f64,
}

impl GoTest {
    pub fn starts(line: &str) -> Option<GoTest> {
        let json = line.starts_with('{') && line.contains("\"Action\":");
        let text = line.starts_with("=== RUN   ") || package_line(line).is_some();
        (json || text).then(|| GoTest {
            json,
            output: HashMap::new(),
            started: BTreeSet::new(),
            ended: BTreeSet::new(),
            tests_since_package: false,
            current: None,
            duration: 0.0,
        })
    }

    pub fn line(&mut self, t: &mut Tally, line: &str, cursor: u64) -> Result<(), Broken> {
        if self.json {
            self.event(t, line, cursor)
        } else {
            self.text(t, line, cursor)
        }
    }

    fn event(&mut self, t: &mut Tally, line: &str, cursor: u64) -> Result<(), Broken> {
        if !line.starts_with('{') {
            // `go test -json` also passes build errors through as text.
            return Ok(());
        }
        let v: serde_json::Value = serde_json::from_str(line).map_err(|_| Broken)?;
        let field = |k: &str| v.get(k).and_then(|x| x.as_str());
        let package = field("Package").unwrap_or_default().to_string();
        let action = field("Action").ok_or(Broken)?;
        let Some(test) = field("Test") else {
            match action {
                "start" => {
                    self.started.insert(package);
                }
                "pass" | "fail" | "skip" => {
                    self.duration += v.get("Elapsed").and_then(|e| e.as_f64()).unwrap_or(0.0);
                    self.started.insert(package.clone());
                    self.ended.insert(package);
                }
                _ => {}
            }
            return Ok(());
        };
        let key = format!("{package} {test}");
        match action {
            "output" => {
                let text = field("Output").unwrap_or_default();
                self.keep(&key, text.trim_end());
            }
            "pass" => {
                t.passed += 1;
                self.output.remove(&key);
            }
            "skip" => {
                t.skipped += 1;
                self.output.remove(&key);
            }
            "fail" => {
                t.failed += 1;
                let lines = self.output.remove(&key).unwrap_or_default();
                failed(t, test, lines, cursor);
            }
            _ => {}
        }
        Ok(())
    }

    fn keep(&mut self, key: &str, line: &str) {
        let lines = self.output.entry(key.to_string()).or_default();
        if lines.len() < KEPT_LINES {
            lines.push(line.to_string());
        }
    }

    fn text(&mut self, t: &mut Tally, line: &str, cursor: u64) -> Result<(), Broken> {
        if let Some(name) = line.strip_prefix("=== RUN   ") {
            self.current = Some(name.trim().to_string());
            self.tests_since_package = true;
            t.capturing = None;
        } else if let Some((verdict, name)) = result_line(line) {
            self.tests_since_package = true;
            let lines = self.output.remove(name).unwrap_or_default();
            match verdict {
                "PASS" => t.passed += 1,
                "SKIP" => t.skipped += 1,
                _ => {
                    t.failed += 1;
                    failed(t, name, lines, cursor);
                    // Without -v, its log lines follow, indented.
                    t.capturing = t.failures.iter().position(|f| f.name == name);
                }
            }
        } else if let Some((ok, elapsed)) = package_line(line) {
            let no_tests = line.contains("[no test files]") || line.contains("[no tests to run]");
            let built = !line.contains("[build failed]") && !line.contains("[setup failed]");
            let _ = ok;
            if built && !no_tests && !self.tests_since_package {
                return Err(Broken);
            }
            self.duration += elapsed.unwrap_or(0.0);
            self.ended.insert(line.to_string());
            self.tests_since_package = false;
            self.current = None;
            t.capturing = None;
        } else if t.capturing.is_some() && line.starts_with("    ") {
            if let Some(at) = go_location(line) {
                t.locate(at);
            }
            t.note(line.trim());
        } else if let Some(current) = self.current.clone() {
            t.capturing = None;
            self.keep(&current, line);
        }
        Ok(())
    }

    pub fn finish(&mut self, t: &mut Tally) -> bool {
        let whole = if self.json {
            !self.ended.is_empty() && self.started.is_subset(&self.ended)
        } else {
            // A package whose tests ran but whose verdict never came was cut.
            !self.ended.is_empty() && !self.tests_since_package
        };
        if whole {
            t.duration = Some((self.duration * 1000.0).round() / 1000.0);
        }
        whole
    }
}

/// A failed test: its kept lines as its text, its first "x_test.go:10:"
/// as its location.
fn failed(t: &mut Tally, name: &str, lines: Vec<String>, cursor: u64) {
    t.capturing = t.failure(name, cursor);
    for l in &lines {
        if l.starts_with("=== ") || l.trim_start().starts_with("--- ") {
            continue;
        }
        if let Some(at) = go_location(l) {
            t.locate(at);
        }
        t.note(l.trim());
    }
    t.capturing = None;
}

/// "a_test.go:10" from "    a_test.go:10: want 1, got 2".
fn go_location(line: &str) -> Option<&str> {
    let (at, _) = line.trim_start().split_once(": ")?;
    let (file, n) = at.rsplit_once(':')?;
    (file.ends_with(".go") && n.parse::<u32>().is_ok()).then_some(at)
}

/// ("FAIL", "TestB") from "--- FAIL: TestB (0.00s)" (indented for a subtest).
fn result_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim_start().strip_prefix("--- ")?;
    let (verdict, rest) = rest.split_once(": ")?;
    if !matches!(verdict, "PASS" | "FAIL" | "SKIP") {
        return None;
    }
    let name = rest.rsplit_once(" (").map_or(rest, |(n, _)| n);
    Some((verdict, name))
}

/// (Some(()) for ok / None for FAIL, its seconds) from "ok  \tpkg\t0.003s"
/// or "FAIL\tpkg\t0.002s"; "?   \tpkg\t[no test files]" counts as ok.
fn package_line(line: &str) -> Option<(Option<()>, Option<f64>)> {
    let mut fields = line.split('\t');
    let verdict = fields.next()?.trim_end();
    let package = fields.next()?;
    if package.trim().is_empty() {
        return None;
    }
    let time = fields.next().and_then(seconds);
    match verdict {
        "ok" | "?" => Some((Some(()), time)),
        "FAIL" => Some((None, time)),
        _ => None,
    }
}
