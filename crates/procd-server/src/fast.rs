//! The fast path for `poll` and `read`, agents' most frequent calls
//! (issue "the request path at socket speed"). Through jsonrpsee a poll
//! costs ~39k instructions, most of them around the 2.5 µs poll itself:
//! the request parsed into raw values and again into typed params, the
//! answer written piece by piece through a bounded writer and then
//! re-parsed into a `RawValue` — for a 4 KiB `read`, that re-parse of the
//! escaped output is a third of the call. Here a request in the shape
//! agents send — `{"jsonrpc":"2.0","id":N,"method":"poll","params":{"session_id":"…"}}`,
//! or `read` with `session_id` and, optionally, `cursor` and `max_bytes` —
//! any key order and whitespace, starting with `{`, is read in one pass
//! by a scanner that knows only this shape (`Scan`), and answered with
//! one serialization, by `json.rs`'s writer.
//!
//! Anything else goes the general way, untouched: another method, another
//! param, a duplicate or unknown key, an id that is not a plain number or
//! an escape-free string, any escape at all, a line that does not start
//! with `{`, an error
//! from the call, a read that cannot answer at once (from the log file
//! rather than memory): the general path then answers it, so every error
//! is jsonrpsee's own. The answer is byte for byte what jsonrpsee writes:
//! `tests/protocol.rs` sends 10 000 generated requests of each method both
//! ways and compares every byte (docs/decisions.md).

use futures::FutureExt;
use procd_core::registry::Registry;
use procd_proto::{Cursor, MaxBytes};
use std::sync::Arc;

/// Answers the common `poll` and `read` requests without jsonrpsee.
pub struct FastPath {
    registry: Arc<Registry>,
    max_response_bytes: usize,
}

/// A poll or read in the fast path's shape, borrowed from its line.
struct Request<'a> {
    /// As it came: written back as it is.
    id: &'a str,
    method: &'a str,
    params: Params<'a>,
}

/// Reads a request line in the one pass that the fast path affords: an
/// object of `jsonrpc`, `id`, `method` and `params`, in any order, with
/// any JSON whitespace, each key once. It reads only what serde_json
/// would read to the same values: a string without escapes or control
/// characters, an unsigned integer as JSON writes one (no sign, fraction,
/// exponent or leading zero), `null`. Anything else, or an unknown key,
/// is None, and the line goes the general way.
struct Scan<'a> {
    line: &'a str,
    at: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.line.as_bytes().get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// `byte`, after any whitespace.
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.skip_whitespace();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// A string's contents (between its quotes).
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let rest = &self.line.as_bytes()[self.at..];
        let len = crate::json::plain_prefix(rest);
        (rest.get(len) == Some(&b'"')).then_some(())?;
        let text = &self.line[self.at..self.at + len];
        self.at += len + 1;
        Some(text)
    }

    /// An unsigned integer that fits u64, as written.
    fn whole(&mut self) -> Option<&'a str> {
        self.skip_whitespace();
        let rest = &self.line.as_bytes()[self.at..];
        let len = rest
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(rest.len());
        let plain = len == 1 || (len > 1 && rest[0] != b'0');
        let more = matches!(rest.get(len), Some(b'.' | b'e' | b'E'));
        let text = &self.line[self.at..self.at + len];
        (plain && !more && text.parse::<u64>().is_ok()).then_some(())?;
        self.at += len;
        Some(text)
    }

    /// An id jsonrpsee writes back exactly as it came: a whole number or
    /// a plain string; its text, quotes and all.
    fn id(&mut self) -> Option<&'a str> {
        self.skip_whitespace();
        let start = self.at;
        match self.peek()? {
            b'"' => self.string()?,
            _ => self.whole()?,
        };
        Some(&self.line[start..self.at])
    }

    /// `null`, or a count as the parameter's own type reads it.
    fn count<T: serde::de::DeserializeOwned>(&mut self) -> Option<Option<T>> {
        self.skip_whitespace();
        if self.line[self.at..].starts_with("null") {
            self.at += 4;
            return Some(None);
        }
        serde_json::from_str(self.whole()?).ok().map(Some)
    }

    /// `{ "key": value, … }`, each value read by `value`; None ends it.
    fn object(&mut self, mut value: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            value(self, key)?;
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

impl<'a> Request<'a> {
    /// The request on `line` if it is in the fast path's shape.
    fn parse(line: &'a str) -> Option<Request<'a>> {
        let mut scan = Scan { line, at: 0 };
        let (mut jsonrpc, mut id, mut method) = (None, None, None);
        let mut params = None;
        scan.object(|scan, key| {
            match key {
                "jsonrpc" if jsonrpc.is_none() => jsonrpc = Some(scan.string()?),
                "id" if id.is_none() => id = Some(scan.id()?),
                "method" if method.is_none() => {
                    let name = scan.string()?;
                    // Another method: no need to read on.
                    (name == "poll" || name == "read").then_some(())?;
                    method = Some(name);
                }
                "params" if params.is_none() => params = Some(Params::scan(scan)?),
                _ => return None,
            }
            Some(())
        })?;
        scan.skip_whitespace();
        (scan.at == line.len() && jsonrpc? == "2.0").then_some(())?;
        Some(Request {
            id: id?,
            method: method?,
            params: params?,
        })
    }
}

/// The params of a poll or a read: an object, each key once, no other
/// key. The outer `Option` of `cursor` and `max_bytes` says whether the
/// key was there at all (poll takes neither), the inner one whether it
/// was `null`.
#[derive(Default)]
struct Params<'a> {
    session_id: Option<&'a str>,
    cursor: Option<Option<Cursor>>,
    max_bytes: Option<Option<MaxBytes>>,
}

impl<'a> Params<'a> {
    fn scan(scan: &mut Scan<'a>) -> Option<Params<'a>> {
        let mut params = Params::default();
        scan.object(|scan, key| {
            match key {
                "session_id" if params.session_id.is_none() => {
                    params.session_id = Some(scan.string()?)
                }
                "cursor" if params.cursor.is_none() => params.cursor = Some(scan.count()?),
                "max_bytes" if params.max_bytes.is_none() => params.max_bytes = Some(scan.count()?),
                _ => return None,
            }
            Some(())
        })?;
        Some(params)
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
        // A line that starts otherwise (with a space, say) goes the
        // general way whatever it holds: tests/protocol.rs sends each
        // request both ways.
        if !line.starts_with('{') {
            return None;
        }
        let Request {
            id,
            method,
            params:
                Params {
                    session_id,
                    cursor,
                    max_bytes,
                },
        } = Request::parse(line)?;
        let session_id = session_id?;
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(b",\"result\":");
        match method {
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

#[cfg(test)]
mod tests {
    use super::{FastPath, Request, Scan};
    use procd_core::{Registry, RegistryOptions};
    use serde_json::Value;

    /// tests/protocol.rs holds the fast path's answers to jsonrpsee's byte
    /// for byte, which a fast path that answered nothing would pass too:
    /// here a real session's common poll and read are answered by it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_common_poll_and_read_are_answered_here_and_others_not() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new(RegistryOptions::isolated(dir.path())).unwrap();
        let spawned = registry
            .spawn(procd_proto::SpawnParams {
                command: "echo fast".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let id = spawned.session_id;
        // Ended: its output is all in memory, and the answers are fixed.
        registry.wait(&id, None, None).await.unwrap();
        let fast = FastPath::new(registry.clone(), 1 << 20);
        let answered = |line: &str| -> Option<Value> {
            let bytes = fast.answer(line)?;
            Some(serde_json::from_slice(&bytes).expect("JSON"))
        };
        let poll = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"poll","params":{{"session_id":"{id}"}}}}"#
        );
        let answer = answered(&poll).expect("the poll answered here");
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["result"]["output_preview"], "fast\n");
        assert_eq!(answer["result"]["exit_code"], 0);
        let read = format!(
            r#"{{"jsonrpc":"2.0","id":"r","method":"read","params":{{"session_id":"{id}","cursor":0}}}}"#
        );
        let answer = answered(&read).expect("the read answered here");
        assert_eq!(answer["id"], "r");
        assert_eq!(answer["result"]["data"], "fast\n");
        // An error is jsonrpsee's to answer, and so is another shape.
        assert_eq!(answered(&poll.replace(&id, "proc_000000000000")), None);
        assert_eq!(answered(&format!(" {poll}")), None);
        assert_eq!(answered(&poll.replace("\"poll\"", "\"list\"")), None);
    }

    #[test]
    fn only_ids_written_back_unchanged_are_read() {
        for id in ["0", "1", "18446744073709551615", "\"a\"", "\"\"", "\"é ü\""] {
            let mut scan = Scan { line: id, at: 0 };
            assert_eq!(scan.id(), Some(id));
            assert_eq!(scan.at, id.len(), "{id}");
        }
        for id in [
            "-1",
            "01",
            "1.0",
            "1e3",
            "1E3",
            "18446744073709551616",
            "null",
            "\"a\\\"b\"",
            "\"\\u0041\"",
            "\"tab\there\"",
            "[1]",
            "{}",
            "true",
        ] {
            assert_eq!(Scan { line: id, at: 0 }.id(), None, "{id}");
        }
    }

    #[test]
    fn requests_in_the_common_shape_are_read_and_no_others() {
        /// What a request was read as: id, method, session, and cursor
        /// and max_bytes (absent, null, or a count).
        type Read<'a> = (
            &'a str,
            &'a str,
            &'a str,
            Option<Option<u64>>,
            Option<Option<u64>>,
        );
        fn read(line: &str) -> Option<Read<'_>> {
            let r = Request::parse(line)?;
            let cursor = r.params.cursor.map(|c| c.map(|c| c.get()));
            let max_bytes = r.params.max_bytes.map(|m| m.map(|m| m.get()));
            Some((r.id, r.method, r.params.session_id?, cursor, max_bytes))
        }
        let poll = r#"{"jsonrpc":"2.0","id":7,"method":"poll","params":{"session_id":"proc_1"}}"#;
        assert_eq!(read(poll), Some(("7", "poll", "proc_1", None, None)));
        let spaced = "{ \"params\" : { \"session_id\" : \"s\" } ,\t\"method\": \"read\",\r\n \"id\": \"x\", \"jsonrpc\": \"2.0\" } ";
        assert_eq!(read(spaced), Some(("\"x\"", "read", "s", None, None)));
        let counted = r#"{"jsonrpc":"2.0","id":1,"method":"read","params":{"session_id":"s","cursor":null,"max_bytes":4096}}"#;
        let (.., cursor, max_bytes) = read(counted).expect("a read");
        assert_eq!(cursor, Some(None));
        assert_eq!(max_bytes, Some(Some(4096)));
        for bad in [
            // another method, version, key or value
            r#"{"jsonrpc":"2.0","id":1,"method":"kill","params":{"session_id":"s"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"poll","params":{"session_id":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"poll","params":{"session_id":"s","wait_ms":0}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"poll","params":{"session_id":"s"},"x":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"read","params":{"session_id":"s","cursor":-1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"read","params":{"session_id":"s","cursor":1.0}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"read","params":{"session_id":"s","cursor":9007199254740993}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"read","params":{"session_id":"s","max_bytes":nul}}"#,
            // a key twice, or missing
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"poll","params":{"session_id":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"poll","params":{"session_id":"s","session_id":"t"}}"#,
            r#"{"jsonrpc":"2.0","method":"poll","params":{"session_id":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"poll","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"poll"}"#,
            // escapes, which serde_json would decode
            r#"{"jsonrpc":"2.0","id":1,"method":"p\u006fll","params":{"session_id":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"poll","params":{"session_id":"s\"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"poll","params":{"session\u005fid":"s"}}"#,
            // not one whole object
            r#"{"jsonrpc":"2.0","id":1,"method":"poll","params":{"session_id":"s"}} x"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"poll","params":{"session_id":"s"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"poll","params":{"session_id":"s"},}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"poll","params":["s"]}"#,
            "",
        ] {
            assert!(read(bad).is_none(), "{bad}");
        }
    }
}
