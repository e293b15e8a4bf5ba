//! Text helpers for what procd returns: UTF-8 window edges, character
//! tails and ANSI stripping. Stored output is raw bytes; decoding happens
//! only on the way out, so a character split across reads is never mangled.

/// `bytes` as text, invalid sequences replaced: `String::from_utf8_lossy`,
/// but valid text (nearly all output) is checked by `str::from_utf8`,
/// whose ASCII fast path is several times cheaper per byte than the
/// lossy decoder's (a third of a 4 KiB read's decoding, by callgrind).
pub fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// The length of `bytes` without a trailing incomplete UTF-8 sequence (one
/// whose remaining bytes may still arrive). Invalid bytes are not trimmed.
pub fn complete_utf8_len(bytes: &[u8]) -> usize {
    let n = bytes.len();
    // A sequence is at most 4 bytes: look back at most 3 for its lead byte.
    for back in 1..=3.min(n) {
        let b = bytes[n - back];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte: keep looking for the lead
        }
        let need = match b {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return n, // ASCII or invalid lead: nothing pending
        };
        return if back < need { n - back } else { n };
    }
    n
}

/// The number of leading continuation bytes (a window that starts inside a
/// character, e.g. the oldest byte of a memory tail).
pub fn leading_continuations(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|b| *b & 0xC0 == 0x80)
        .count()
}

/// The last `n` characters of `s`.
pub fn last_chars(s: &str, n: usize) -> &str {
    match s.char_indices().rev().nth(n.saturating_sub(1)) {
        Some((i, _)) if n > 0 => &s[i..],
        _ if n == 0 => "",
        _ => s,
    }
}

/// Truncates to at most `n` characters.
pub fn first_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The longest regex a caller may give (ready.output, wait_any's output,
/// search's pattern), and what its compiled form may take.
pub const MAX_REGEX_CHARS: usize = 4096;
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A caller's regex, bounded in length and in compiled size (the regex
/// crate is linear in the input; this bounds what it builds). The error
/// says what is wrong; the caller names the field.
pub fn bounded_regex(pattern: &str, ignore_case: bool) -> Result<regex::Regex, String> {
    regex_length(pattern)?;
    regex::RegexBuilder::new(pattern)
        .case_insensitive(ignore_case)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("not a valid regex: {e}"))
}

fn regex_length(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() || pattern.chars().count() > MAX_REGEX_CHARS {
        return Err(format!("a regex of 1 to {MAX_REGEX_CHARS} characters"));
    }
    Ok(())
}

/// A caller's regex for matching many lines at once (a search's window):
/// the same bounds as `bounded_regex`, with `^` and `$` at line ends
/// (`\r\n` too), so a match in the window is a match in its line.
pub fn bounded_lines_regex(
    pattern: &str,
    ignore_case: bool,
) -> Result<regex::bytes::Regex, String> {
    regex_length(pattern)?;
    regex::bytes::RegexBuilder::new(pattern)
        .case_insensitive(ignore_case)
        .multi_line(true)
        .crlf(true)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("not a valid regex: {e}"))
}

/// Removes ANSI escape sequences (CSI, OSC, and two-byte escapes) and
/// carriage returns that only precede a newline.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => match chars.next() {
                Some('[') => {
                    // CSI: parameters and intermediates, then a final byte @..~
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']') | Some('P') | Some('_') | Some('^') => {
                    // OSC/DCS/APC/PM: up to BEL or ST (ESC \)
                    while let Some(c) = chars.next() {
                        if c == '\x07' {
                            break;
                        }
                        if c == '\x1b' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                Some('(') | Some(')') => {
                    chars.next();
                }
                _ => {}
            },
            '\r' if chars.peek() == Some(&'\n') => {}
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_tails_are_held_back() {
        let euro = "€".as_bytes(); // E2 82 AC
        assert_eq!(complete_utf8_len(&euro[..1]), 0);
        assert_eq!(complete_utf8_len(&euro[..2]), 0);
        assert_eq!(complete_utf8_len(euro), 3);
        let emoji = "a😀".as_bytes(); // 61 F0 9F 98 80
        assert_eq!(complete_utf8_len(&emoji[..4]), 1);
        assert_eq!(complete_utf8_len(emoji), 5);
        assert_eq!(complete_utf8_len(b"ab\xff"), 3);
        assert_eq!(complete_utf8_len(b""), 0);
    }

    #[test]
    fn char_tails() {
        assert_eq!(last_chars("héllo", 3), "llo");
        assert_eq!(last_chars("hé", 5), "hé");
        assert_eq!(last_chars("abc", 0), "");
        assert_eq!(first_chars("héllo", 2), "hé");
    }

    #[test]
    fn ansi_is_stripped() {
        assert_eq!(strip_ansi("\x1b[31mred\x1b[0m\r\n"), "red\n");
        assert_eq!(strip_ansi("\x1b]0;title\x07text"), "text");
        assert_eq!(strip_ansi("a\x1b[2Kb"), "ab");
    }
}
