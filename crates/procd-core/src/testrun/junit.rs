//! A JUnit XML report (`spawn{junit}`), read once the command has ended:
//! every `<testcase>`, failed when it holds `<failure>` or `<error>`,
//! skipped when it holds `<skipped>`. A report that is missing, too big or
//! not of this shape gives no summary.

use super::{Tally, MAX_MESSAGE_CHARS};
use procd_proto::TestSummary;
use std::io::Read;
use std::path::Path;

/// A report larger than this is not read.
const MAX_REPORT_BYTES: u64 = 64 << 20;

/// The summary of the report at `path`, if it is one. Blocking: callers
/// run it off the event loop.
pub fn read_report(path: &Path) -> Option<TestSummary> {
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking: a FIFO planted at the path must not hold the reader.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_REPORT_BYTES + 1)
        .read_to_string(&mut text)
        .ok()?;
    if text.len() as u64 > MAX_REPORT_BYTES {
        return None;
    }
    parse(&text)
}

/// The summary of a report's text.
pub fn parse(xml: &str) -> Option<TestSummary> {
    if !xml.contains("<testsuite") {
        return None;
    }
    let mut t = Tally::default();
    let mut rest = xml;
    while let Some(at) = rest.find("<testcase") {
        rest = &rest[at..];
        let open_end = rest.find('>')?;
        let tag = &rest[..open_end];
        let (body, after) = if tag.ends_with('/') {
            ("", &rest[open_end + 1..])
        } else {
            let close = rest.find("</testcase>")?;
            (
                &rest[open_end + 1..close],
                &rest[close + "</testcase>".len()..],
            )
        };
        case(&mut t, tag, body);
        rest = after;
    }
    if t.passed + t.failed + t.skipped == 0 && !xml.contains("tests=\"0\"") {
        return None;
    }
    t.duration = attr(suites_tag(xml)?, "time").and_then(|s| s.parse().ok());
    Some(t.summary("junit", true))
}

/// One `<testcase …>` with its body.
fn case(t: &mut Tally, tag: &str, body: &str) {
    let failed = ["<failure", "<error"]
        .iter()
        .find_map(|k| body.find(k).map(|i| &body[i..]));
    let Some(failure) = failed else {
        if body.contains("<skipped") {
            t.skipped += 1;
        } else {
            t.passed += 1;
        }
        return;
    };
    t.failed += 1;
    let name = attr(tag, "name").unwrap_or_default();
    let name = match attr(tag, "classname") {
        Some(class) if !class.is_empty() => format!("{class}.{name}"),
        _ => name,
    };
    t.capturing = t.failure(&name, 0);
    if let Some(i) = t.capturing {
        t.failures[i].cursor = None;
    }
    if let (Some(file), Some(line)) = (attr(tag, "file"), attr(tag, "line")) {
        t.locate(&format!("{file}:{line}"));
    }
    let open_end = failure.find('>').unwrap_or(failure.len());
    if let Some(message) = attr(&failure[..open_end], "message") {
        t.note(&message);
    }
    let text = failure
        .get(open_end + 1..)
        .and_then(|b| b.find("</").map(|e| &b[..e]))
        .unwrap_or_default();
    let text = text.replace("<![CDATA[", "").replace("]]>", "");
    let text = unescape(crate::output::text::first_chars(&text, MAX_MESSAGE_CHARS));
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        t.note(line);
    }
    t.capturing = None;
}

/// The outermost suite's tag: `<testsuites …>`, else the first
/// `<testsuite …>`.
fn suites_tag(xml: &str) -> Option<&str> {
    let at = xml.find("<testsuites").or_else(|| xml.find("<testsuite"))?;
    let end = xml[at..].find('>')?;
    Some(&xml[at..at + end])
}

/// The value of attribute `name` in a tag's text, unescaped.
fn attr(tag: &str, name: &str) -> Option<String> {
    let mut rest = tag;
    loop {
        let i = rest.find(name)?;
        let before = rest[..i].chars().last();
        rest = &rest[i + name.len()..];
        let after = rest.trim_start();
        if before.is_some_and(char::is_whitespace) && after.starts_with('=') {
            let value = after[1..].trim_start();
            let quote = value.chars().next()?;
            if quote != '"' && quote != '\'' {
                return None;
            }
            let end = value[1..].find(quote)?;
            return Some(unescape(&value[1..1 + end]));
        }
    }
}

fn unescape(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(end) = rest.find(';').filter(|e| *e <= 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..end];
        let c = match entity {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            e => e
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| e.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match c {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}
