//! One client connection: line-delimited JSON-RPC 2.0.
//!
//! jsonrpsee's `Methods::raw_json_request` executes one request; framing,
//! batches and notifications are handled here (jsonrpsee parses a single
//! request only). Requests on one connection run concurrently, so a long
//! `wait` does not hold up a `poll`; responses carry their ids and are
//! written as they complete.
//!
//! A connection with 64 requests in flight stops reading requests but
//! keeps writing answers; every write also watches the shutdown; a client
//! that closed altogether has its waits cancelled; at 512 connections the
//! longest idle one is closed; stopping aborts what is left after 2 s.

use crate::ends::{Reader, Writer};
use crate::lines::{LineCodec, LineError};
use crate::request::{error_response, handle_line, request_id, Notifications};
use futures::{FutureExt, StreamExt};
use jsonrpsee::types::Id;
use jsonrpsee::Methods;
use procd_proto::error::{INVALID_REQUEST, PARSE_ERROR, PERMISSION_DENIED};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

/// Requests of one connection that may run at once.
const MAX_IN_FLIGHT: usize = 64;
/// How long in-flight requests may take to finish when the daemon stops.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a refused connection's remaining input is discarded.
const DISCARD_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

/// What the listener knows of a live connection: when it was last used,
/// whether it has work in flight, and how to close it (to make room).
#[derive(Debug)]
pub struct ConnectionHandle {
    /// Milliseconds since `EPOCH` of the last request read or answer written.
    last_active: std::sync::atomic::AtomicU64,
    /// Requests in flight plus subscriptions being forwarded.
    work: std::sync::atomic::AtomicUsize,
    pub close: CancellationToken,
}

static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

fn now_ms() -> u64 {
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

impl ConnectionHandle {
    pub fn new() -> Arc<ConnectionHandle> {
        Arc::new(ConnectionHandle {
            last_active: now_ms().into(),
            work: 0.into(),
            close: CancellationToken::new(),
        })
    }

    fn touch(&self) {
        self.last_active
            .store(now_ms(), std::sync::atomic::Ordering::Relaxed);
    }

    /// (has work, last active): the listener closes the connection with
    /// no work that has been idle the longest first.
    pub fn idleness(&self) -> (bool, u64) {
        (
            self.work.load(std::sync::atomic::Ordering::Relaxed) > 0,
            self.last_active.load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

/// How the read loop ended.
enum End {
    /// The client sent EOF (it may still read what it asked for).
    Eof,
    /// The daemon is stopping.
    Stopped,
    /// Writing failed, or the listener closed the connection to make room.
    Broken,
    /// An over-long line: answered, then the connection is closed.
    Refused,
}

/// Serves one connection until the client leaves, the daemon stops, or the
/// listener evicts it. `peer_pid` is the connecting process's (from its
/// credentials): one of a sandboxed session's has every request refused.
///
/// The loop never blocks on one thing while another needs it: answers are
/// written as they come (a write that the client does not read blocks only
/// until the daemon stops or the client goes), and when 64 requests are in
/// flight the loop stops *reading* requests (backpressure) but keeps
/// writing answers, which is what frees in-flight slots. A request whose
/// answer is ready at once is answered inline, without a task hand-off.
pub async fn serve(
    stream: UnixStream,
    peer_pid: Option<i32>,
    protocol: Protocol,
    mut shutdown: watch::Receiver<bool>,
    handle: Arc<ConnectionHandle>,
) {
    let refusal =
        crate::peer::refusal(&stream, peer_pid, protocol.dispatch.registry.as_ref()).await;
    // The socket's two halves, or the pipes a dial-stdio handed over. The
    // first byte may be long in coming: the connection can be evicted or
    // the daemon stop meanwhile.
    let (read_half, writer) = tokio::select! {
        ends = crate::ends::open(stream) => ends,
        _ = handle.close.cancelled() => return,
        _ = crate::stopped(&mut shutdown) => return,
    };
    // Framed on bytes, not str: a line that is not UTF-8 gets a parse
    // error and the connection carries on (a str codec would end it).
    let mut lines = FramedRead::new(read_half, LineCodec::new(protocol.max_request_bytes));
    let (out_tx, out_rx) = mpsc::channel::<String>(MAX_IN_FLIGHT);
    let mut conn = Connection {
        writer,
        protocol,
        shutdown,
        handle,
        out_tx,
        out_rx,
        in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        tasks: JoinSet::new(),
        client_gone: CancellationToken::new(),
        refusal,
    };
    let end = conn.read_requests(&mut lines).await;
    conn.finish(end, lines).await;
}

/// How every connection answers: the same for all of them, cloned into
/// each (the listener hands it on).
#[derive(Clone)]
pub struct Protocol {
    pub dispatch: Dispatch,
    /// Agents' most frequent call, in its common shape.
    pub fast: Arc<crate::fast::FastPath>,
    pub max_request_bytes: usize,
    pub max_response_bytes: usize,
}

/// What runs a request: the method table, and the registry that names
/// resolve in (docs/stacks.md; None in unit tests).
#[derive(Clone)]
pub struct Dispatch {
    pub methods: Methods,
    pub registry: Option<Arc<procd_core::registry::Registry>>,
}

/// One connection's state while it is served.
struct Connection {
    writer: Writer,
    protocol: Protocol,
    shutdown: watch::Receiver<bool>,
    handle: Arc<ConnectionHandle>,
    /// Answers of requests that had to wait, and subscription items.
    out_tx: mpsc::Sender<String>,
    out_rx: mpsc::Receiver<String>,
    in_flight: Arc<Semaphore>,
    tasks: JoinSet<()>,
    /// Cancelled when the client stops sending: its subscriptions end
    /// (their receivers drop, which frees the subscription tasks in
    /// jsonrpsee).
    client_gone: CancellationToken,
    /// Set for a peer that is not served (`peer.rs`): every request gets
    /// this as its -32005 answer, and nothing runs.
    refusal: Option<String>,
}

/// What became of one request line.
enum Taken {
    /// Answered, handed to a task, or nothing to answer: read on.
    Done,
    /// It waits for an in-flight slot; no further line is read until it
    /// has one.
    Queued(PendingRequest),
    /// Writing failed: the connection is over.
    Broken,
}

impl Connection {
    /// Reads and answers requests until the client, the daemon or the
    /// listener ends the connection; says which.
    async fn read_requests(&mut self, lines: &mut Lines) -> End {
        let mut queued: Option<PendingRequest> = None;
        // The two ends that stop the loop wait once, across requests:
        // made afresh on every turn, each would join and leave its waiter
        // list per request (a lock each time).
        let handle = self.handle.clone();
        let mut shutdown = self.shutdown.clone();
        let stop_signal = self.shutdown.clone();
        let closed = handle.close.cancelled();
        // Unconstrained: a watch wait that found the task's budget spent
        // would return without polling its `Notified`, which `Gated` would
        // then not poll again (a token's wait has no budget).
        let stopped = tokio::task::unconstrained(crate::stopped(&mut shutdown));
        tokio::pin!(closed, stopped);
        let mut first = true;
        let end = loop {
            self.handle
                .work
                .store(self.tasks.len(), std::sync::atomic::Ordering::Relaxed);
            // The first turn polls both ends, which puts this task's waker
            // in their lists; later turns only once a flag moved.
            let first_turn = std::mem::take(&mut first);
            let stop_due = || first_turn || stop_signal.has_changed().unwrap_or(true);
            let close_due = || first_turn || handle.close.is_cancelled();
            tokio::select! {
                // An end first; then answers and finished tasks, so that a
                // client that keeps sending cannot hold them back.
                biased;
                _ = Gated { future: stopped.as_mut(), due: stop_due } => break End::Stopped,
                _ = Gated { future: closed.as_mut(), due: close_due } => break End::Broken,
                // Only a task sends here (each has the one clone of
                // `out_tx` it was given): with none and nothing queued,
                // this branch is not even polled, one registration less
                // per request.
                Some(answer) = self.out_rx.recv(), if !self.tasks.is_empty() || !self.out_rx.is_empty() => {
                    self.handle.touch();
                    if !self.write(answer).await { break End::Broken }
                }
                permit = self.in_flight.clone().acquire_owned(), if queued.is_some() => {
                    let (Ok(permit), Some(request)) = (permit, queued.take()) else { break End::Broken };
                    self.tasks.spawn(run_waiting(request, permit, self.out_tx.clone(), self.client_gone.clone()));
                }
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
                next = lines.next(), if queued.is_none() => match next {
                    None => break End::Eof,
                    Some(Ok(bytes)) => {
                        self.handle.touch();
                        match self.take(bytes).await {
                            Taken::Done => {}
                            Taken::Queued(request) => queued = Some(request),
                            Taken::Broken => break End::Broken,
                        }
                    }
                    Some(Err(LineError::TooLong)) => {
                        let msg = format!("request line exceeds max_request_bytes ({}); closing the connection", self.protocol.max_request_bytes);
                        let _ = self.write(error_response(Id::Null, INVALID_REQUEST, &msg)).await;
                        break End::Refused;
                    }
                    Some(Err(LineError::Io)) => break End::Eof,
                },
            }
        };
        self.client_gone.cancel();
        drop(queued);
        // A client that closed its socket altogether (it exited, say) reads
        // no answer: its waits are cancelled at once. One that only stopped
        // sending (a half-close) still gets the answers to what it asked.
        match end {
            End::Eof if peer_gone(self.writer.as_fd()) => End::Broken,
            other => other,
        }
    }

    /// One request line: answered at once when it can be, else left to run
    /// on its own (a long poll, `wait`, a full stdin pipe) while the
    /// connection reads on.
    async fn take(&mut self, bytes: Vec<u8>) -> Taken {
        let Ok(line) = String::from_utf8(bytes) else {
            let msg = "Parse error: the request is not valid UTF-8";
            return self
                .written(error_response(Id::Null, PARSE_ERROR, msg))
                .await;
        };
        if let Some(why) = &self.refusal {
            let id = request_id(&line).unwrap_or(Id::Null);
            return self
                .written(error_response(id, PERMISSION_DENIED, why))
                .await;
        }
        if let Some(answer) = self.protocol.fast.answer(&line) {
            return self.written(answer).await;
        }
        let dispatch = self.protocol.dispatch.clone();
        let max_response_bytes = self.protocol.max_response_bytes;
        let mut request: PendingRequest =
            Box::pin(async move { handle_line(&line, &dispatch, max_response_bytes).await });
        // Most requests finish at once: answer them right here, without
        // handing them to another task (and thread).
        if let Some((answer, notifications)) = (&mut request).now_or_never() {
            if let Some(answer) = answer {
                if !self.write(answer).await {
                    return Taken::Broken;
                }
            }
            if let Some(rx) = notifications.filter(|rx| !rx.is_closed() || !rx.is_empty()) {
                self.tasks
                    .spawn(forward(rx, self.out_tx.clone(), self.client_gone.clone()));
            }
            return Taken::Done;
        }
        match self.in_flight.clone().try_acquire_owned() {
            Ok(permit) => {
                self.tasks.spawn(run_waiting(
                    request,
                    permit,
                    self.out_tx.clone(),
                    self.client_gone.clone(),
                ));
                Taken::Done
            }
            Err(_) => Taken::Queued(request),
        }
    }

    /// Writes one answer line; false when the connection is over.
    async fn write(&mut self, answer: impl Into<Vec<u8>>) -> bool {
        write_or_stop(
            &mut self.writer,
            answer.into(),
            &mut self.shutdown,
            &self.handle,
        )
        .await
    }

    async fn written(&mut self, answer: impl Into<Vec<u8>>) -> Taken {
        match self.write(answer).await {
            true => Taken::Done,
            false => Taken::Broken,
        }
    }

    /// Ends the connection as `end` requires: in-flight requests are
    /// cancelled (the client left), given a bound (the daemon stops), or
    /// answered (EOF); then FIN after the last answer.
    async fn finish(mut self, end: End, lines: Lines) {
        match end {
            End::Broken => {
                // Count only what is still in flight.
                while self.tasks.try_join_next().is_some() {}
                if !self.tasks.is_empty() {
                    tracing::info!(
                        cancelled = self.tasks.len(),
                        "a client left with requests in flight; they are cancelled"
                    );
                }
                self.tasks.abort_all();
            }
            End::Stopped => {
                // The daemon is stopping: requests already taken get their
                // answers (a `kill` that just ended the last session, say),
                // within a bound; long waits and streams are cut off.
                let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
                    while let Some(Ok(())) = self.tasks.join_next().await {}
                })
                .await;
                if drained.is_err() {
                    self.tasks.abort_all();
                }
            }
            End::Eof | End::Refused => {}
        }
        // Answers still due are written; a stopping daemon gives them a bound.
        let Connection {
            mut writer,
            mut shutdown,
            handle,
            out_tx,
            mut out_rx,
            mut tasks,
            ..
        } = self;
        drop(out_tx);
        if !matches!(end, End::Broken) {
            let stopping = matches!(end, End::Stopped);
            let drain = async {
                loop {
                    tokio::select! {
                        _ = crate::stopped(&mut shutdown), if !stopping => break,
                        _ = handle.close.cancelled() => break,
                        answer = out_rx.recv() => match answer {
                            Some(answer) => if write_line(&mut writer, answer.into_bytes()).await.is_err() { break },
                            None => break,
                        },
                    }
                }
            };
            if stopping {
                let _ = tokio::time::timeout(SHUTDOWN_GRACE, drain).await;
            } else {
                drain.await;
            }
            tasks.abort_all();
        }
        // FIN after the last answer, so the peer sees them and then EOF.
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, writer.shutdown()).await;
        if matches!(end, End::Refused) {
            // Closing with unread input would reset the connection and
            // destroy the error answer in flight: discard what the peer
            // still sends, briefly, then close.
            let mut rest = lines.into_inner();
            let mut sink = [0u8; 8192];
            let _ = tokio::time::timeout(DISCARD_WINDOW, async {
                while matches!(rest.read(&mut sink).await, Ok(n) if n > 0) {}
            })
            .await;
        }
    }
}

/// A connection's request lines.
type Lines = FramedRead<Reader, LineCodec>;

/// A future polled only when `due()` says it may be ready. The ends a
/// connection waits on are `Notified`s: a first poll leaves this task's
/// waker in their waiter list, where it stays, so skipping later polls
/// loses no wakeup and spares taking that list's lock on every turn of
/// the read loop (two ends, twice per request).
struct Gated<'a, F, D> {
    future: std::pin::Pin<&'a mut F>,
    due: D,
}

impl<F: std::future::Future, D: Fn() -> bool + Unpin> std::future::Future for Gated<'_, F, D> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = &mut *self;
        if (this.due)() {
            return this.future.as_mut().poll(cx);
        }
        std::task::Poll::Pending
    }
}

type PendingRequest = std::pin::Pin<
    Box<dyn std::future::Future<Output = (Option<String>, Option<Notifications>)> + Send>,
>;

/// Finishes a request that had to wait, holding one in-flight slot until
/// its answer is queued for writing.
async fn run_waiting(
    request: PendingRequest,
    permit: tokio::sync::OwnedSemaphorePermit,
    out: mpsc::Sender<String>,
    gone: CancellationToken,
) {
    let (answer, notifications) = request.await;
    if let Some(answer) = answer {
        let _ = out.send(answer).await;
    }
    drop(permit);
    if let Some(rx) = notifications {
        forward(rx, out, gone).await;
    }
}

/// Writes one answer unless the daemon stops or the connection is closed
/// first (a client that does not read must not hold up a shutdown).
/// False when the connection is done for.
async fn write_or_stop(
    writer: &mut Writer,
    line: Vec<u8>,
    shutdown: &mut watch::Receiver<bool>,
    handle: &ConnectionHandle,
) -> bool {
    tokio::select! {
        // A write that can go at once always goes (the answer to
        // `shutdown` itself is written after the stop was requested).
        biased;
        written = write_line(writer, line) => written.is_ok(),
        _ = crate::stopped(shutdown) => false,
        _ = handle.close.cancelled() => false,
    }
}

/// Whether the peer has closed its end altogether (POLLHUP: it can read
/// nothing more), as opposed to a half-close (it only stopped sending).
fn peer_gone(writer: std::os::fd::BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(writer, PollFlags::POLLOUT)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
}

async fn write_line(writer: &mut Writer, mut line: Vec<u8>) -> std::io::Result<()> {
    line.push(b'\n');
    writer.write_all(&line).await
}

/// Streams a subscription's items until it ends or the client goes away.
async fn forward(mut rx: Notifications, out: mpsc::Sender<String>, gone: CancellationToken) {
    loop {
        tokio::select! {
            item = rx.recv() => match item {
                Some(item) => if out.send(item.get().to_string()).await.is_err() { return },
                None => return,
            },
            _ = gone.cancelled() => return,
        }
    }
}
