//! A connection's two ends: the accepted socket's, or a pair of pipes that
//! `procd dial-stdio` handed over on it (docs/remote.md). A dial-stdio
//! whose stdin and stdout are pipes (ssh's, kubectl's) sends one byte,
//! `procd_proto::STDIO_HANDOVER`, with both attached (SCM_RIGHTS), as the
//! only thing on its connection;
//! the daemon then reads requests from that pipe and writes answers into
//! the other itself, so no process relays the bytes in between. Anything
//! else — a first read that is not that lone byte with exactly two pipes —
//! is the start of an ordinary connection, and is read as part of it.

use std::io::Cursor;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::unix::{pipe, OwnedWriteHalf};
use tokio::net::UnixStream;

pub type Reader = Box<dyn AsyncRead + Send + Unpin>;

/// Where answers go.
pub enum Writer {
    Socket(OwnedWriteHalf),
    /// The handed-over stdout, and the socket it came on (kept open until
    /// the connection ends: dial-stdio waits for its close).
    Pipe {
        tx: pipe::Sender,
        _socket: UnixStream,
    },
}

/// The most the first read takes: an ordinary client's first request
/// usually arrives whole in it, so it costs no extra system call. What it
/// read is kept (shrunk to fit) in front of the socket's reader.
const FIRST_READ: usize = 4096;

/// Reads the connection's first bytes (with room for two descriptors) and
/// returns its two ends: the handed-over pipes when the first read is the
/// lone `STDIO_HANDOVER` byte carrying a pipe's two ends, else the socket,
/// with what was read put back in front.
pub async fn open(stream: UnixStream) -> (Reader, Writer) {
    let (first, fds) = first_read(&stream).await.unwrap_or_default();
    if first == [procd_proto::STDIO_HANDOVER] && fds.len() == 2 {
        let mut fds = fds.into_iter();
        if let Some((rx, tx)) = fds.next().zip(fds.next()).and_then(|(i, o)| pipes(i, o)) {
            let writer = Writer::Pipe {
                tx,
                _socket: stream,
            };
            return (Box::new(rx), writer);
        }
    }
    let (read, write) = stream.into_split();
    (
        Box::new(Cursor::new(first).chain(read)),
        Writer::Socket(write),
    )
}

/// The first bytes from the socket (none at EOF) and the descriptors that
/// came with them (closed by the caller unless they are the handover's).
async fn first_read(stream: &UnixStream) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut bytes = vec![0u8; FIRST_READ];
    loop {
        stream.readable().await?;
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let got = stream.try_io(tokio::io::Interest::READABLE, || {
            recvmsg(
                stream,
                &mut [std::io::IoSliceMut::new(&mut bytes)],
                &mut ancillary,
                RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
            )
            .map_err(std::io::Error::from)
        });
        let received = match got {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        let mut fds = Vec::new();
        for message in ancillary.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = message {
                fds.extend(rights);
            }
        }
        bytes.truncate(received.bytes);
        bytes.shrink_to_fit();
        return Ok((bytes, fds));
    }
}

/// The handed-over descriptors as an async pipe pair, if they are a
/// pipe's read end and a pipe's write end.
fn pipes(input: OwnedFd, output: OwnedFd) -> Option<(pipe::Receiver, pipe::Sender)> {
    use rustix::fs::{fcntl_getfl, fstat, FileType, OFlags};
    let fifo =
        |fd: &OwnedFd| fstat(fd).is_ok_and(|st| FileType::from_raw_mode(st.st_mode).is_fifo());
    let mode = |fd: &OwnedFd| fcntl_getfl(fd).ok().map(|f| f & OFlags::RWMODE);
    let usable = fifo(&input)
        && fifo(&output)
        && mode(&input) == Some(OFlags::RDONLY)
        && mode(&output) == Some(OFlags::WRONLY);
    if !usable {
        return None;
    }
    let rx = pipe::Receiver::from_owned_fd(input).ok()?;
    let tx = pipe::Sender::from_owned_fd(output).ok()?;
    Some((rx, tx))
}

impl Writer {
    /// The descriptor the peer's going away shows on.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Writer::Socket(w) => w.as_ref().as_fd(),
            Writer::Pipe { tx, .. } => tx.as_fd(),
        }
    }
}

impl AsyncWrite for Writer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Writer::Socket(w) => Pin::new(w).poll_write(cx, buf),
            Writer::Pipe { tx, .. } => Pin::new(tx).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Writer::Socket(w) => Pin::new(w).poll_flush(cx),
            Writer::Pipe { tx, .. } => Pin::new(tx).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Writer::Socket(w) => Pin::new(w).poll_shutdown(cx),
            Writer::Pipe { tx, .. } => Pin::new(tx).poll_shutdown(cx),
        }
    }
}
