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
//! and answered with one serialization, by `json.rs`'s writer.
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
    params: Params<'a>,
}

/// The params of a poll or a read, parsed in the same pass as the rest
/// of the line: an object (serde's derive would take an array for a
/// struct too), each key once, no other key. The outer `Option` of
/// `cursor` and `max_bytes` says whether the key was there at all (poll
/// takes neither), the inner one whether it was `null`.
#[derive(Default)]
struct Params<'a> {
    session_id: Option<&'a str>,
    cursor: Option<Option<Cursor>>,
    max_bytes: Option<Option<MaxBytes>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Params<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Params<'a>, D::Error> {
        struct Named<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Named<'a> {
            type Value = Params<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("named params")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Params<'a>, A::Error> {
                let mut params = Params::default();
                while let Some(key) = map.next_key::<&str>()? {
                    match key {
                        "session_id" if params.session_id.is_none() => {
                            params.session_id = Some(map.next_value()?)
                        }
                        "cursor" if params.cursor.is_none() => {
                            params.cursor = Some(map.next_value()?)
                        }
                        "max_bytes" if params.max_bytes.is_none() => {
                            params.max_bytes = Some(map.next_value()?)
                        }
                        _ => return Err(serde::de::Error::custom("not the fast path's")),
                    }
                }
                Ok(params)
            }
        }
        d.deserialize_map(Named(std::marker::PhantomData))
    }
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
    pub fn answer(&self, line: &str) -> Option<Vec<u8>> {
        if !line.starts_with('{') || !(line.contains("\"poll\"") || line.contains("\"read\"")) {
            return None;
        }
        let request: Request = serde_json::from_str(line).ok()?;
        let Params {
            session_id: Some(session_id),
            cursor,
            max_bytes,
        } = request.params
        else {
            return None;
        };
        if request.jsonrpc != "2.0" || !plain_id(request.id.get()) {
            return None;
        }
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        out.extend_from_slice(request.id.get().as_bytes());
        out.extend_from_slice(b",\"result\":");
        match request.method {
            "poll" if cursor.is_none() && max_bytes.is_none() => {
                let result = self.registry.poll(session_id, None).ok()?;
                crate::json::write(&mut out, &result).ok()?;
            }
            "read" => {
                // No wait was asked for, so only a read from the log file
                // (off the event loop) is not ready at once.
                let result = self
                    .registry
                    .read(
                        session_id,
                        cursor.flatten().map(Cursor::get),
                        max_bytes.flatten().map(MaxBytes::get),
                        None,
                        None,
                    )
                    .now_or_never()?
                    .ok()?;
                crate::json::write(&mut out, &result).ok()?;
            }
            _ => return None,
        }
        out.push(b'}');
        if out.len() > self.max_response_bytes {
            return None;
        }
        Some(out)
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
