//! A session's input: the requests its stdin writer takes, and the
//! writer, which owns the pipe's write end or the terminal's master.

use tokio::sync::{mpsc, oneshot};

/// A request to the session's stdin writer.
pub enum StdinOp {
    Write(Vec<u8>, oneshot::Sender<std::io::Result<()>>),
    /// Pipe: close the pipe. PTY: type the terminal's EOF character at the
    /// start of a line. Answers with the message for the caller.
    Close(oneshot::Sender<std::io::Result<&'static str>>),
    /// PTY only: set the window size (the child gets SIGWINCH).
    Resize(u16, u16, oneshot::Sender<std::io::Result<()>>),
}

/// Where a session's input goes.
pub enum StdinSink {
    Pipe(tokio::net::unix::pipe::Sender),
    /// The master's write half, and a duplicate of the master descriptor
    /// for reading the terminal's settings (the half does not expose it).
    Pty(pty_process::OwnedWritePty, std::os::fd::OwnedFd),
}

/// Owns the write end of a session's stdin; one write at a time, so a full
/// pipe blocks only this session's writers, never the daemon.
pub async fn stdin_writer(mut sink: StdinSink, mut ops: mpsc::Receiver<StdinOp>) {
    use tokio::io::AsyncWriteExt;
    // Whether the cursor is at the start of a line (for the PTY EOF rule).
    let mut at_line_start = true;
    while let Some(op) = ops.recv().await {
        match op {
            StdinOp::Write(bytes, reply) => {
                let result = match &mut sink {
                    StdinSink::Pipe(p) => p.write_all(&bytes).await,
                    StdinSink::Pty(p, _) => p.write_all(&bytes).await,
                };
                if let Some(last) = bytes.last() {
                    at_line_start = matches!(last, b'\n' | b'\r');
                }
                let _ = reply.send(result);
            }
            StdinOp::Close(reply) => match sink {
                StdinSink::Pipe(pipe) => {
                    drop(pipe);
                    let _ = reply.send(Ok("stdin closed"));
                    return;
                }
                StdinSink::Pty(ref mut pty, ref master) => {
                    let eof = pty_eof_char(master);
                    // At a line start one EOF ends input; mid-line the first
                    // one only submits the pending text.
                    let bytes: &[u8] = if at_line_start { &[eof] } else { &[eof, eof] };
                    let result = pty.write_all(bytes).await.map(|()| "EOF sent");
                    at_line_start = true;
                    let _ = reply.send(result);
                }
            },
            StdinOp::Resize(rows, cols, reply) => {
                let result = match &sink {
                    StdinSink::Pty(p, _) => p
                        .resize(pty_process::Size::new(rows, cols))
                        .map_err(std::io::Error::other),
                    StdinSink::Pipe(_) => Err(std::io::Error::other("not a PTY session")),
                };
                let _ = reply.send(result);
            }
        }
    }
}

/// The terminal's EOF character (VEOF), ^D unless the child changed it.
fn pty_eof_char(master: &std::os::fd::OwnedFd) -> u8 {
    match nix::sys::termios::tcgetattr(master) {
        Ok(t) => t.control_chars[nix::sys::termios::SpecialCharacterIndices::VEOF as usize],
        Err(_) => 4,
    }
}
