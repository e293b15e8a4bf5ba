//! The fast path for `poll`, agents' most frequent call (issue "the
//! request path at socket speed"). Through jsonrpsee a poll costs ~39k
//! instructions, most of them around the 2.5 µs poll itself: the request
//! parsed into raw values and again into typed params, the answer written
//! piece by piece through a bounded writer and then re-parsed into a
//! `RawValue`. Here a request in the one shape agents send —
//! `{"jsonrpc":"2.0","id":N,"method":"poll","params":{"session_id":"…"}}`,
//! any key order, starting with `{` — is parsed once into borrowed fields
//! and answered with one serialization.
//!
//! Anything else goes the general way, untouched: another method, another
//! param, a duplicate or unknown key, an id that is not a plain number or
//! an escape-free string, a line that does not start with `{`, an error
//! from the poll (the general path then answers it, so every error is
//! jsonrpsee's own). The answer is byte for byte what jsonrpsee writes:
//! `tests/protocol.rs` sends 10 000 generated requests both ways and
//! compares every byte (docs/decisions.md).

use procd_core::registry::Registry;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::sync::Arc;

/// Answers the common `poll` request without jsonrpsee.
pub struct FastPoll {
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
    params: Params<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params<'a> {
    session_id: &'a str,
}

impl FastPoll {
    pub fn new(registry: Arc<Registry>, max_response_bytes: usize) -> FastPoll {
        FastPoll {
            registry,
            max_response_bytes,
        }
    }

    /// The answer to `line` if it is a poll in the common shape that the
    /// poll answers without an error; None sends it the general way.
    pub fn answer(&self, line: &str) -> Option<String> {
        if !line.starts_with('{') || !line.contains("\"poll\"") {
            return None;
        }
        let request: Request = serde_json::from_str(line).ok()?;
        if request.jsonrpc != "2.0" || request.method != "poll" || !plain_id(request.id.get()) {
            return None;
        }
        let result = self.registry.poll(request.params.session_id, None).ok()?;
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        out.extend_from_slice(request.id.get().as_bytes());
        out.extend_from_slice(b",\"result\":");
        serde_json::to_writer(&mut out, &result).ok()?;
        out.push(b'}');
        if out.len() > self.max_response_bytes {
            return None;
        }
        String::from_utf8(out).ok()
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
    use super::plain_id;

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
