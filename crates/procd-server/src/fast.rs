//! The fast path for `poll` and `read`, agents' most frequent calls
//! (issue "the request path at socket speed"). Through jsonrpsee a poll
//! costs ~39k instructions, most of them around the 2.5 µs poll itself:
//! the request parsed into raw values and again into typed params, the
//! answer written piece by piece through a bounded writer and then
//! re-parsed into a `RawValue` — for a 4 KiB `read`, that re-parse of the
//! escaped output is a third of the call. Here a request in the shape
//! agents send — `{"jsonrpc":"2.0","id":N,"method":"poll","params":{"session_id":"…"}}`,
//! or `read` with `session_id` and, optionally, `cursor` and `max_bytes` —
//! any key order, starting with `{`, is parsed once into borrowed fields
//! and answered with one serialization (a read's output escaped by
//! `escape_into`, the rest by serde).
//!
//! Anything else goes the general way, untouched: another method, another
//! param, a duplicate or unknown key, an id that is not a plain number or
//! an escape-free string, a line that does not start with `{`, an error
//! from the call, a read that cannot answer at once (from the log file
//! rather than memory): the general path then answers it, so every error
//! is jsonrpsee's own. The answer is byte for byte what jsonrpsee writes:
//! `tests/protocol.rs` sends 10 000 generated requests of each method both
//! ways and compares every byte (docs/decisions.md).

use futures::FutureExt;
use procd_core::registry::Registry;
use procd_proto::{Cursor, MaxBytes};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::sync::Arc;

/// Answers the common `poll` and `read` requests without jsonrpsee.
pub struct FastPath {
    registry: Arc<Registry>,
    max_response_bytes: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request<'a> {
    jsonrpc: &'a str,
    #[serde(borrow)]
    id: &'a RawValue,
    method: &'a str,
    #[serde(borrow)]
    params: &'a RawValue,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PollParams<'a> {
    session_id: &'a str,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadParams<'a> {
    session_id: &'a str,
    #[serde(default)]
    cursor: Option<Cursor>,
    #[serde(default)]
    max_bytes: Option<MaxBytes>,
}

impl FastPath {
    pub fn new(registry: Arc<Registry>, max_response_bytes: usize) -> FastPath {
        FastPath {
            registry,
            max_response_bytes,
        }
    }

    /// The answer to `line` if it is a poll or read in the common shape
    /// that is answered at once without an error; None sends it the
    /// general way.
    pub fn answer(&self, line: &str) -> Option<String> {
        if !line.starts_with('{') || !(line.contains("\"poll\"") || line.contains("\"read\"")) {
            return None;
        }
        let request: Request = serde_json::from_str(line).ok()?;
        // Named params only: serde would take an array for a struct too.
        if request.jsonrpc != "2.0"
            || !plain_id(request.id.get())
            || !request.params.get().starts_with('{')
        {
            return None;
        }
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        out.extend_from_slice(request.id.get().as_bytes());
        out.extend_from_slice(b",\"result\":");
        match request.method {
            "poll" => {
                let params: PollParams = serde_json::from_str(request.params.get()).ok()?;
                let result = self.registry.poll(params.session_id, None).ok()?;
                serde_json::to_writer(&mut out, &result).ok()?;
            }
            "read" => {
                let params: ReadParams = serde_json::from_str(request.params.get()).ok()?;
                // No wait was asked for, so only a read from the log file
                // (off the event loop) is not ready at once.
                let result = self
                    .registry
                    .read(
                        params.session_id,
                        params.cursor.map(Cursor::get),
                        params.max_bytes.map(MaxBytes::get),
                        None,
                        None,
                    )
                    .now_or_never()?
                    .ok()?;
                write_read_result(&mut out, result)?;
            }
            _ => return None,
        }
        out.push(b'}');
        if out.len() > self.max_response_bytes {
            return None;
        }
        String::from_utf8(out).ok()
    }
}

/// Writes `result` as serde_json does, but its `data` (up to a window of
/// output, a newline every few bytes) through `escape_into`: serde_json's
/// escaper hands every piece between two escapes to the writer on its
/// own, ~18 instructions a byte of `seq` output, half a 4 KiB read.
/// `data` is the struct's first field, so the rest is serialized with it
/// empty and spliced in after.
fn write_read_result(out: &mut Vec<u8>, mut result: procd_proto::ReadResult) -> Option<()> {
    const EMPTY: &[u8] = b"{\"data\":\"\"";
    let data = std::mem::take(&mut result.data);
    let rest = serde_json::to_vec(&result).ok()?;
    let rest = rest.strip_prefix(EMPTY)?;
    out.extend_from_slice(b"{\"data\":\"");
    escape_into(out, &data);
    out.push(b'"');
    out.extend_from_slice(rest);
    Some(())
}

/// Appends `text` escaped as serde_json escapes a string's contents: `"`
/// and `\\` and the control characters below 0x20 (`\b \t \n \f \r`
/// short, the others `\u00xx` in lower case), everything else as it is.
fn escape_into(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    /// What follows the backslash for each byte; 0 for one written as it is.
    const ESCAPE: [u8; 256] = {
        let mut table = [0u8; 256];
        let mut b = 0;
        while b < 0x20 {
            table[b] = b'u';
            b += 1;
        }
        table[0x08] = b'b';
        table[0x09] = b't';
        table[0x0a] = b'n';
        table[0x0c] = b'f';
        table[0x0d] = b'r';
        table[b'"' as usize] = b'"';
        table[b'\\' as usize] = b'\\';
        table
    };
    // Escaped a piece at a time into a buffer on the stack, then copied
    // out: a byte pushed onto `out` itself makes the compiler reload the
    // Vec's length and pointer (a u8 store may alias them), three times
    // the cost. A byte becomes at most 6, so every write is in bounds.
    const PIECE: usize = 256;
    let mut buf = [0u8; 6 * PIECE];
    for piece in text.as_bytes().chunks(PIECE) {
        let mut n = 0;
        for &b in piece {
            match ESCAPE[usize::from(b)] {
                0 => {
                    buf[n] = b;
                    n += 1;
                }
                b'u' => {
                    buf[n..n + 6].copy_from_slice(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[usize::from(b >> 4)],
                        HEX[usize::from(b & 0xf)],
                    ]);
                    n += 6;
                }
                short => {
                    buf[n] = b'\\';
                    buf[n + 1] = short;
                    n += 2;
                }
            }
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// An id jsonrpsee writes back exactly as it came: an unsigned integer
/// that fits u64, or a string with no escapes and no control characters.
fn plain_id(raw: &str) -> bool {
    match raw.as_bytes() {
        [b'"', inner @ .., b'"'] => inner.iter().all(|b| *b >= 0x20 && *b != b'\\'),
        digits => {
            !digits.is_empty()
                && digits.iter().all(u8::is_ascii_digit)
                && raw.parse::<u64>().is_ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{escape_into, plain_id};

    #[test]
    fn escapes_as_serde_json_does() {
        let mut texts: Vec<String> = (0u32..0x80)
            .filter_map(char::from_u32)
            .map(|c| format!("a{c}b{c}{c}"))
            .collect();
        texts.extend(["".into(), "héllo \u{2028} \u{1F600} \"q\" \\".into()]);
        texts.push((0u8..0x80).map(char::from).cycle().take(5000).collect());
        for text in texts {
            let mut ours = b"prefix".to_vec();
            escape_into(&mut ours, &text);
            let theirs = serde_json::to_string(&text).expect("a string");
            assert_eq!(
                String::from_utf8_lossy(&ours),
                format!("prefix{}", &theirs[1..theirs.len() - 1]),
                "{text:?}"
            );
        }
    }

    #[test]
    fn only_ids_written_back_unchanged_are_plain() {
        for id in ["0", "1", "18446744073709551615", "\"a\"", "\"\"", "\"é ü\""] {
            assert!(plain_id(id), "{id}");
        }
        for id in [
            "-1",
            "1.0",
            "1e3",
            "18446744073709551616",
            "null",
            "\"a\\\"b\"",
            "\"\\u0041\"",
            "[1]",
            "{}",
            "true",
        ] {
            assert!(!plain_id(id), "{id}");
        }
    }
}
