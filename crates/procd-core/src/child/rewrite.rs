//! The compound-background rewrite (docs/protocol.md, R19).
//!
//! bash runs `A && B &` as a forked subshell `(A && B) &`; when B is a
//! server, that subshell lives as long as B and holds the session's output
//! pipe. Rewriting the tail to `A && { B & }` backgrounds B itself. Only
//! top-level lists are touched: quotes, comments, `&&`, `&>`, `>&`, `|&`
//! and anything inside braces, parens or substitutions are left alone, so
//! the rewrite is idempotent.

/// Returns the command with every top-level `… && B &` / `… || B &` tail
/// wrapped in braces.
pub fn rewrite_compound_background(cmd: &str) -> String {
    let b = cmd.as_bytes();
    // (position, text to insert) and positions of '&' to replace with "& }".
    let mut inserts: Vec<(usize, &'static str)> = Vec::new();
    let mut depth = 0usize;
    let mut last_op: Option<usize> = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let prev = if i > 0 { b[i - 1] } else { b' ' };
        let next = b.get(i + 1).copied().unwrap_or(0);
        match c {
            b'\\' => {
                i += 2;
                continue;
            }
            b'\'' => i = skip_until(b, i + 1, b'\'', false),
            b'"' => i = skip_until(b, i + 1, b'"', true),
            b'`' => i = skip_until(b, i + 1, b'`', true),
            b'#' if is_word_start(prev) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'(' | b'{' => depth += 1,
            b')' | b'}' => depth = depth.saturating_sub(1),
            _ if depth > 0 => {}
            b'&' if next == b'&' => {
                last_op = Some(i + 2);
                i += 2;
                continue;
            }
            b'|' if next == b'|' => {
                last_op = Some(i + 2);
                i += 2;
                continue;
            }
            b'&' if next == b'>' || prev == b'>' || prev == b'<' || prev == b'|' => {}
            b'&' => {
                if let Some(op) = last_op.take() {
                    let mut start = op;
                    while start < i && matches!(b[start], b' ' | b'\t') {
                        start += 1;
                    }
                    if start < i {
                        inserts.push((start, "{ "));
                        let more = rest_of_line_has_text(b, i + 1);
                        inserts.push((i + 1, if more { " };" } else { " }" }));
                    }
                }
            }
            b';' | b'\n' => last_op = None,
            _ => {}
        }
        i += 1;
    }
    let mut out = String::with_capacity(cmd.len() + inserts.len() * 3);
    let mut at = 0;
    for (pos, text) in inserts {
        out.push_str(&cmd[at..pos]);
        out.push_str(text);
        at = pos;
    }
    out.push_str(&cmd[at..]);
    out
}

fn is_word_start(prev: u8) -> bool {
    matches!(
        prev,
        b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'{' | b'}'
    )
}

/// Index of the closing `quote` (escapes honoured where bash honours them).
fn skip_until(b: &[u8], mut i: usize, quote: u8, escapes: bool) -> usize {
    while i < b.len() {
        if escapes && b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == quote {
            return i;
        }
        i += 1;
    }
    b.len()
}

fn rest_of_line_has_text(b: &[u8], from: usize) -> bool {
    for &c in &b[from.min(b.len())..] {
        match c {
            b' ' | b'\t' => continue,
            b'\n' | b'#' | b';' | b')' => return false,
            _ => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::rewrite_compound_background as rw;

    #[test]
    fn wraps_the_backgrounded_tail() {
        assert_eq!(
            rw("cd /app && node server.js &>/tmp/srv.log &"),
            "cd /app && { node server.js &>/tmp/srv.log & }"
        );
        assert_eq!(rw("make || sleep 9 &"), "make || { sleep 9 & }");
        assert_eq!(
            rw("cd x && srv & echo started"),
            "cd x && { srv & }; echo started"
        );
        assert_eq!(rw("a && b & \nc && d &"), "a && { b & } \nc && { d & }");
    }

    #[test]
    fn leaves_everything_else_alone() {
        for cmd in [
            "sleep 5 &",
            "a && b",
            "a 2>&1 | tee log",
            "cmd &> out",
            "x |& y",
            "echo 'a && b &'",
            "echo \"a && b &\"",
            "a && b # c && d &",
            "( a && b & )",
            "{ a && b & }",
            "x=$(a && b &)",
            "echo a\\&\\& b \\&",
            "a; b &",
        ] {
            assert_eq!(rw(cmd), cmd, "{cmd}");
        }
    }

    #[test]
    fn is_idempotent() {
        for cmd in ["cd /app && node server.js &", "a && b & echo x", "a || b &"] {
            let once = rw(cmd);
            assert_eq!(rw(&once), once);
        }
    }
}
