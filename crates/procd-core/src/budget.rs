//! Output budgets for agents (`max_output_chars`, `max_output_tokens`):
//! text over budget keeps its head and its tail, with a marker line in the
//! middle saying how much was cut and how to fetch it. Cuts fall on
//! character boundaries always, and on line boundaries when one is near.

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

/// Applies `budget` to `text`. Returns the text to show and, when cut, the
/// original length in characters. `fetch` says how to get the cut part.
pub fn apply(text: &str, budget: Option<usize>, fetch: &str) -> (String, Option<u64>) {
    let Some(budget) = budget else {
        return (text.to_string(), None);
    };
    let total = text.chars().count();
    if total <= budget {
        return (text.to_string(), None);
    }
    // The marker's own length is part of the budget when it fits.
    let probe = marker(total, total, fetch);
    let room = budget.saturating_sub(probe.chars().count());
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
    let cut = text[head_end..tail_start].chars().count();
    let mut out = String::with_capacity(budget * 4);
    out.push_str(&text[..head_end]);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&marker(cut, total, fetch));
    out.push_str(&text[tail_start..]);
    (out, Some(total as u64))
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
        assert_eq!(apply("abc", Some(3), "x"), ("abc".into(), None));
        assert_eq!(apply("abc", None, "x"), ("abc".into(), None));
        assert_eq!(chars_budget(Some(100), Some(10)), Some(40));
        assert_eq!(chars_budget(None, None), None);
    }

    #[test]
    fn keeps_head_and_tail_on_lines_and_characters() {
        let text: String = (0..200).map(|i| format!("línea {i:03} ✓\n")).collect();
        let (out, original) = apply(&text, Some(600), "read with cursor 0");
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
    fn one_long_line_is_cut_on_characters() {
        let text = "é".repeat(1000);
        let (out, original) = apply(&text, Some(200), "f");
        assert_eq!(original, Some(1000));
        assert!(out.chars().count() <= 210);
        assert!(out.contains("characters cut here"));
    }
}
