//! Output budgets for agents (`max_output_chars`, `max_output_tokens`):
//! text over budget keeps its head and its tail, with a marker line in the
//! middle saying how much was cut and how to fetch it. Cuts fall on
//! character boundaries always, and on line boundaries when one is near.
//!
//! Budgets keep the errors (docs/agents.md): lines of the cut middle that look
//! like errors (the whole words error, failed, panic, traceback, exception,
//! fatal, in any case) are kept with their line numbers in a marked section
//! after the marker, within a quarter of the budget, so that truncation
//! never hides the one line an agent needed.

/// Characters per token, for `max_output_tokens` (a common approximation).
pub const CHARS_PER_TOKEN: u64 = 4;

/// The effective character budget of the two parameters (the smaller one).
pub fn chars_budget(max_chars: Option<u64>, max_tokens: Option<u64>) -> Option<usize> {
    let from_tokens = max_tokens.map(|t| t.saturating_mul(CHARS_PER_TOKEN));
    match (max_chars, from_tokens) {
        (None, None) => None,
        (a, b) => Some(
            a.unwrap_or(u64::MAX)
                .min(b.unwrap_or(u64::MAX))
                .min(usize::MAX as u64) as usize,
        ),
    }
}

/// Text as shown within a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub text: String,
    /// The whole text's length in characters, when it was cut.
    pub original_chars: Option<u64>,
    /// Error-looking lines kept from the cut middle, when there were any.
    pub kept_error_lines: Option<u64>,
}

const ERROR_WORDS: &[&str] = &[
    "error",
    "failed",
    "panic",
    "traceback",
    "exception",
    "fatal",
];

/// Whether `line` holds one of `ERROR_WORDS` as a whole word, in any case.
fn looks_like_error(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    ERROR_WORDS.iter().any(|w| {
        lower.match_indices(w).any(|(i, _)| {
            let before = i.checked_sub(1).map(|j| bytes[j]);
            let after = bytes.get(i + w.len()).copied();
            let boundary =
                |b: Option<u8>| b.is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'_'));
            boundary(before) && boundary(after)
        })
    })
}

/// Applies `budget` to `text`. `fetch` says how to get the cut part.
pub fn apply(text: &str, budget: Option<usize>, fetch: &str) -> Cut {
    let whole = || Cut {
        text: text.to_string(),
        original_chars: None,
        kept_error_lines: None,
    };
    let Some(budget) = budget else {
        return whole();
    };
    let total = text.chars().count();
    if total <= budget {
        return whole();
    }
    // The marker's own length is part of the budget when it fits.
    let probe = marker(total, total, fetch);
    let room = budget.saturating_sub(probe.chars().count());
    let (head_end, tail_start) = cut_points(text, total, room);
    // Errors in the middle get up to a quarter of the budget; head and
    // tail shrink to make room for what is kept.
    let quarter = budget / 4;
    let mut kept = error_lines(text, head_end, tail_start, quarter);
    let (head_end, tail_start) = if kept.is_empty() {
        (head_end, tail_start)
    } else {
        let used: usize = kept.iter().map(|l| l.chars().count()).sum::<usize>()
            + section_header(kept.len()).chars().count()
            + SECTION_END.chars().count();
        let (h, t) = cut_points(text, total, room.saturating_sub(used));
        // Lines now in the (larger) middle may be errors too, within the
        // same quarter.
        kept = error_lines(text, h, t, quarter);
        (h, t)
    };
    let cut = text[head_end..tail_start].chars().count();
    let mut out = String::with_capacity(budget * 4);
    out.push_str(&text[..head_end]);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&marker(cut, total, fetch));
    if !kept.is_empty() {
        out.push_str(&section_header(kept.len()));
        for line in &kept {
            out.push_str(line);
        }
        out.push_str(SECTION_END);
    }
    out.push_str(&text[tail_start..]);
    Cut {
        text: out,
        original_chars: Some(total as u64),
        kept_error_lines: (!kept.is_empty()).then_some(kept.len() as u64),
    }
}

fn section_header(n: usize) -> String {
    format!("[... {n} error-looking line(s) from the cut part; line numbers count from this output's first line:]\n")
}

const SECTION_END: &str = "[... end of the kept lines ...]\n";

/// Error-looking lines of `text[from..to]`, as "line N: …\n", within
/// `max_chars` in all.
fn error_lines(text: &str, from: usize, to: usize, max_chars: usize) -> Vec<String> {
    let first = text[..from].matches('\n').count() + 1;
    let mut kept = Vec::new();
    let mut used = 0;
    for (line_no, line) in (first..).zip(text[from..to].split_inclusive('\n')) {
        if looks_like_error(line) {
            let shown = format!("line {line_no}: {}\n", line.trim_end_matches(['\n', '\r']));
            let n = shown.chars().count();
            if used + n > max_chars {
                break;
            }
            used += n;
            kept.push(shown);
        }
    }
    kept
}

/// Where the head ends and the tail starts for `room` characters of both.
fn cut_points(text: &str, total: usize, room: usize) -> (usize, usize) {
    let head_chars = room / 2;
    let tail_chars = room - head_chars;
    let head_end = byte_at(text, head_chars);
    let tail_start = byte_at(text, total - tail_chars);
    // Prefer whole lines: cut after a newline in the last quarter of the
    // head, and start the tail after a newline in its first quarter.
    let head_end = text[..head_end]
        .rfind('\n')
        .filter(|&i| i + 1 >= head_end - (head_end / 4))
        .map(|i| i + 1)
        .unwrap_or(head_end);
    let tail_len = text.len() - tail_start;
    let tail_start = text[tail_start..]
        .find('\n')
        .filter(|&i| i < tail_len / 4)
        .map(|i| tail_start + i + 1)
        .unwrap_or(tail_start);
    (head_end, tail_start.max(head_end))
}

fn marker(cut: usize, total: usize, fetch: &str) -> String {
    format!("[... {cut} of {total} characters cut here; {fetch} ...]\n")
}

/// The byte index of the `n`th character (or the end).
fn byte_at(text: &str, n: usize) -> usize {
    text.char_indices()
        .nth(n)
        .map(|(i, _)| i)
        .unwrap_or(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_budget_is_untouched() {
        assert_eq!(apply("abc", Some(3), "x").text, "abc");
        assert_eq!(apply("abc", None, "x").original_chars, None);
        assert_eq!(chars_budget(Some(100), Some(10)), Some(40));
        assert_eq!(chars_budget(None, None), None);
    }

    #[test]
    fn keeps_head_and_tail_on_lines_and_characters() {
        let text: String = (0..200).map(|i| format!("línea {i:03} ✓\n")).collect();
        let Cut {
            text: out,
            original_chars: original,
            ..
        } = apply(&text, Some(600), "read with cursor 0");
        assert_eq!(original, Some(text.chars().count() as u64));
        assert!(out.chars().count() <= 600 + 20, "{}", out.chars().count());
        assert!(out.starts_with("línea 000 ✓\n"));
        assert!(out.ends_with("línea 199 ✓\n"));
        let marker = out
            .lines()
            .find(|l| l.starts_with("[... "))
            .expect("marker");
        assert!(
            marker.contains("characters cut here; read with cursor 0"),
            "{marker}"
        );
        for line in out.lines().filter(|l| !l.starts_with("[... ")) {
            assert!(
                line.starts_with("línea ") && line.ends_with('✓'),
                "a whole line: {line:?}"
            );
        }
    }

    #[test]
    fn error_lines_from_the_cut_middle_are_kept_with_line_numbers() {
        let mut text: String = (1..=400)
            .map(|i| format!("compiling unit {i:03}\n"))
            .collect();
        text = text.replace(
            "compiling unit 200\n",
            "src/lib.rs:12: Error: expected `;`\n",
        );
        text = text.replace("compiling unit 250\n", "the build FAILED (1 error)\n");
        text = text.replace("compiling unit 260\n", "no errors here, terror, panicky\n");
        let cut = apply(&text, Some(800), "read from cursor 0");
        assert_eq!(cut.kept_error_lines, Some(2), "{}", cut.text);
        assert!(
            cut.text
                .contains("line 200: src/lib.rs:12: Error: expected `;`"),
            "{}",
            cut.text
        );
        assert!(cut.text.contains("line 250: the build FAILED (1 error)"));
        assert!(!cut.text.contains("panicky"), "whole words only");
        assert!(
            cut.text.chars().count() <= 800 + 120,
            "{}",
            cut.text.chars().count()
        );
        assert!(cut.text.starts_with("compiling unit 001\n"));
        assert!(cut.text.ends_with("compiling unit 400\n"));
        // Errors that would take more than a quarter of the budget: some.
        let noisy: String = (1..=400).map(|i| format!("error number {i}\n")).collect();
        let cut = apply(&noisy, Some(800), "f");
        let kept = cut.kept_error_lines.unwrap();
        assert!(kept > 0 && kept < 20, "{kept}");
        assert_eq!(apply("short error", Some(100), "f").kept_error_lines, None);
    }

    #[test]
    fn one_long_line_is_cut_on_characters() {
        let text = "é".repeat(1000);
        let Cut {
            text: out,
            original_chars: original,
            ..
        } = apply(&text, Some(200), "f");
        assert_eq!(original, Some(1000));
        assert!(out.chars().count() <= 210);
        assert!(out.contains("characters cut here"));
    }
}
