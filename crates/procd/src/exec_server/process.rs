//! One Codex process: a procd session, its output numbered as Codex
//! numbers it (one `seq` per process, shared by `process/output`,
//! `process/exited` and `process/closed`), and the chunks kept for
//! `process/read`.

use super::{notification, Line, Outbox, RpcError};
use base64::Engine as _;
use procd_proto::{Cursor, OutputItem, ProcdApiClient};
use serde_json::{json, Value};
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{error::TrySendError, Permit};
use tokio::sync::watch;

/// The output a running process keeps for `process/read` (the log keeps
/// it all).
const KEPT_BYTES: usize = 8 << 20;
/// What a closed one keeps: as much as Codex's own server keeps. Codex
/// has had every byte pushed; a long session's hundreds of ended
/// commands would otherwise hold 8 MiB each for the server's life.
const CLOSED_KEPT_BYTES: usize = 1 << 20;
/// The `writeId`s remembered to drop a repeated write.
const KEPT_WRITE_IDS: usize = 4096;

pub struct Process {
    /// Codex's name for it.
    pub id: String,
    /// procd's.
    pub session_id: String,
    pub tty: bool,
    /// Whether `process/write` may reach its stdin.
    pub stdin: bool,
    /// Whether it runs in a sandbox (Codex's intent, given by procd).
    pub sandboxed: bool,
    /// Everything `process/read` answers from; readers wait on it.
    state: watch::Sender<Output>,
    writes: Mutex<WriteIds>,
}

#[derive(Default)]
struct WriteIds {
    seen: HashSet<String>,
    order: VecDeque<String>,
}

#[derive(Default, Clone)]
pub struct Output {
    chunks: VecDeque<(u64, Arc<Vec<u8>>)>,
    kept: usize,
    /// The last seq given.
    seq: u64,
    exit_code: Option<i32>,
    closed: bool,
}

impl Output {
    /// Drops the oldest chunks until at most `bytes` are kept.
    fn keep_at_most(&mut self, bytes: usize) {
        while self.kept > bytes {
            match self.chunks.pop_front() {
                Some((_, c)) => self.kept -= c.len(),
                None => break,
            }
        }
    }
}

impl Process {
    pub fn new(
        id: String,
        session_id: String,
        tty: bool,
        stdin: bool,
        sandboxed: bool,
    ) -> Arc<Process> {
        Arc::new(Process {
            id,
            session_id,
            tty,
            stdin,
            sandboxed,
            state: watch::Sender::new(Output::default()),
            writes: Mutex::new(WriteIds::default()),
        })
    }

    fn stream(&self) -> &'static str {
        if self.tty {
            "pty"
        } else {
            "stdout"
        }
    }

    /// Whether the process still runs (no exit seen yet).
    pub fn running(&self) -> bool {
        self.state.borrow().exit_code.is_none()
    }

    /// False when `write_id` was seen before: the write is dropped.
    pub fn first_write(&self, write_id: &str) -> bool {
        let mut w = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        if !w.seen.insert(write_id.to_string()) {
            return false;
        }
        w.order.push_back(write_id.to_string());
        if w.order.len() > KEPT_WRITE_IDS {
            if let Some(old) = w.order.pop_front() {
                w.seen.remove(&old);
            }
        }
        true
    }

    /// Streams the session's output and exit to Codex, numbering each, until
    /// it is closed; rides through a daemon restart from the cursor reached.
    ///
    /// Output is taken from the subscription only while the outbox has
    /// room. When it has none (Codex is not reading), the subscription is
    /// dropped rather than left to fill the client's buffer of
    /// notifications; once there is room, it is taken again from the
    /// cursor reached, so nothing is lost and nothing piles up here.
    pub async fn pump(self: Arc<Self>, conn: Arc<procd_client::Reconnecting>, out: Outbox) {
        let mut cursor = 0u64;
        loop {
            let id = self.session_id.clone();
            let from = Some(Cursor::new(cursor));
            let subscribed = conn
                .call(|c| {
                    let id = id.clone();
                    async move { c.subscribe_output(id, from).await }
                })
                .await;
            let Ok(mut items) = subscribed else {
                // No daemon comes back: the process is lost to us.
                return self.exited(&out, -1).await;
            };
            while let Some(item) = items.next().await {
                match item {
                    Ok(OutputItem::Output {
                        data, next_cursor, ..
                    }) => {
                        if !data.is_empty() {
                            let place = match out.0.try_reserve() {
                                Ok(place) => place,
                                Err(TrySendError::Full(())) => {
                                    drop(items);
                                    let Ok(place) = out.0.reserve().await else {
                                        return; // Codex is gone
                                    };
                                    self.output(place, data.into_bytes());
                                    cursor = next_cursor;
                                    break;
                                }
                                Err(TrySendError::Closed(())) => return,
                            };
                            self.output(place, data.into_bytes());
                        }
                        cursor = next_cursor;
                    }
                    Ok(OutputItem::Exit {
                        exit_code, signal, ..
                    }) => {
                        let code = exit_status(exit_code, signal.as_deref());
                        return self.exited(&out, code).await;
                    }
                    Err(_) => continue,
                }
            }
        }
    }

    /// Numbers `bytes` and sends them through `place`.
    fn output(&self, place: Permit<'_, Line>, bytes: Vec<u8>) {
        let chunk = base64::engine::general_purpose::STANDARD.encode(&bytes);
        self.state.send_modify(|o| {
            o.seq += 1;
            o.kept += bytes.len();
            o.chunks.push_back((o.seq, Arc::new(bytes)));
            o.keep_at_most(KEPT_BYTES);
            // Sent while the seq is taken: notifications leave in seq order.
            place.send(notification(
                "process/output",
                json!({"processId": self.id, "seq": o.seq, "stream": self.stream(), "chunk": chunk}),
            ));
        });
    }

    /// The end, recorded for `process/read` and told to Codex (when it
    /// still reads).
    async fn exited(&self, out: &Outbox, code: i32) {
        let mut places = out.0.reserve_many(2).await.ok();
        let mut send = |line: Line| {
            if let Some(place) = places.as_mut().and_then(Iterator::next) {
                place.send(line);
            }
        };
        self.state.send_modify(|o| {
            o.seq += 1;
            o.exit_code = Some(code);
            let denied = self.sandbox_denied(o);
            send(notification(
                "process/exited",
                json!({"processId": self.id, "seq": o.seq, "exitCode": code, "sandboxDenied": denied}),
            ));
            o.seq += 1;
            o.closed = true;
            o.keep_at_most(CLOSED_KEPT_BYTES);
            send(notification(
                "process/closed",
                json!({"processId": self.id, "seq": o.seq}),
            ));
        });
    }

    /// Whether a sandboxed process that failed said what a refused
    /// file or socket call says (Codex tells its model so, and may offer
    /// to run it again outside the sandbox). Its last 64 KiB are read.
    fn sandbox_denied(&self, o: &Output) -> bool {
        const SIGNS: [&[u8]; 3] = [
            b"Permission denied",
            b"Operation not permitted",
            b"Read-only file system",
        ];
        if !self.sandboxed || o.exit_code == Some(0) {
            return false;
        }
        let mut tail = Vec::new();
        for (_, c) in o.chunks.iter().rev() {
            tail.splice(0..0, c.iter().copied());
            if tail.len() >= 64 << 10 {
                break;
            }
        }
        SIGNS
            .iter()
            .any(|sign| tail.windows(sign.len()).any(|w| w == *sign))
    }

    /// `process/read`: the chunks after `after_seq` (up to `max_bytes`,
    /// at least one), waiting up to `wait_ms` for one or for the end.
    pub async fn read(&self, after_seq: u64, max_bytes: Option<usize>, wait_ms: u64) -> Value {
        let mut rx = self.state.subscribe();
        let has_news = |o: &Output| o.seq > after_seq || o.closed;
        if wait_ms > 0 {
            let wait = rx.wait_for(has_news);
            let _ = tokio::time::timeout(std::time::Duration::from_millis(wait_ms), wait).await;
        }
        let o = rx.borrow().clone();
        let mut chunks = Vec::new();
        let mut size = 0usize;
        let mut next_seq = after_seq + 1;
        for (seq, bytes) in o.chunks.iter().filter(|(s, _)| *s > after_seq) {
            if !chunks.is_empty() && max_bytes.is_some_and(|m| size + bytes.len() > m) {
                break;
            }
            size += bytes.len();
            next_seq = seq + 1;
            chunks.push(json!({
                "seq": seq,
                "stream": self.stream(),
                "chunk": base64::engine::general_purpose::STANDARD.encode(&**bytes),
            }));
        }
        // With every chunk read, the next seq is the one after the last
        // given (output, exit or close), also for an `afterSeq` past it,
        // as Codex's server answers.
        let all_read = next_seq > o.chunks.back().map_or(0, |(s, _)| *s);
        if all_read {
            next_seq = o.seq + 1;
        }
        json!({
            "chunks": chunks,
            "nextSeq": next_seq,
            "exited": o.exit_code.is_some(),
            "exitCode": o.exit_code,
            "closed": o.closed,
            "failure": null,
            "sandboxDenied": o.exit_code.is_some() && self.sandbox_denied(&o),
        })
    }
}

/// A shell's exit status: the code, or 128 plus the signal that ended it.
fn exit_status(code: Option<i32>, signal: Option<&str>) -> i32 {
    match code {
        // procd says -N for "killed by signal N".
        Some(code) if code < 0 => return 128 - code,
        Some(code) => return code,
        None => {}
    }
    signal
        .and_then(|s| s.parse::<nix::sys::signal::Signal>().ok())
        .map_or(-1, |s| 128 + s as i32)
}

/// An unknown `processId`, as Codex's server says it.
pub fn unknown(id: &str) -> RpcError {
    RpcError::new(-32600, format!("unknown process id {id}"))
}
