//! `procd attach ID`: this terminal becomes the session's terminal. The
//! local tty goes raw; keystrokes are written to the session, its output is
//! streamed through `subscribe_output`, the window size follows SIGWINCH.
//! Ctrl-] detaches and leaves the session running.

use crate::base::{EXIT_FAILED, EXIT_OK};
use jsonrpsee::core::client::{Client, Error as ClientError};
use nix::sys::termios::{self, SetArg, Termios};
use procd_client::ProcdApiClient;
use procd_proto::OutputItem;
use procd_proto::{Cols, Cursor, Rows};
use std::io::Write;
use std::os::fd::AsFd;

/// Ctrl-] (0x1d), as telnet and docker use.
const DETACH: u8 = 0x1d;
/// Recent output replayed on attach.
const REPLAY_BYTES: u64 = 8 * 1024;

/// Restores the terminal's settings when dropped.
struct RawMode(Termios);

impl RawMode {
    fn enter() -> Option<RawMode> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).ok()?;
        Some(RawMode(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.0);
    }
}

fn window_size() -> Option<(u16, u16)> {
    // A non-tty stdin fails with ENOTTY: no size.
    let ws = rustix::termios::tcgetwinsize(std::io::stdin()).ok()?;
    (ws.ws_row > 0 && ws.ws_col > 0).then_some((ws.ws_row, ws.ws_col))
}

pub async fn run(conn: &procd_client::Reconnecting, id: String) -> Result<i32, ClientError> {
    let client = conn.last().await;
    let polled = client.poll(id.clone(), None, None).await?;
    let id = polled.session_id.clone();
    if polled.exit.is_some() {
        eprintln!("procd: {id} has already exited");
        return Ok(EXIT_FAILED);
    }
    // Start a little before the end, so the screen has some context.
    let end = procd_client::output_end(&client, &id).await?;
    let start = end.saturating_sub(REPLAY_BYTES);
    let mut output = client
        .subscribe_output(id.clone(), Some(Cursor::new(start)))
        .await?;
    if let Some((rows, cols)) = window_size() {
        let _ = client
            .resize(id.clone(), Rows::new(rows), Cols::new(cols))
            .await;
    }
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
        .map_err(|e| ClientError::Custom(e.to_string()))?;

    let raw = RawMode::enter();
    eprint!("[procd: attached to {id}; Ctrl-] detaches]\r\n");

    let mut keys = Keystrokes::start().map_err(|e| ClientError::Custom(e.to_string()))?;

    let mut stdout = std::io::stdout();
    // Where the output seen so far ends, to go on from after a restart.
    let mut cursor = start;
    let code = loop {
        // A connection made again after the daemon restarted (docs/survival.md).
        let client = conn.last().await;
        tokio::select! {
            item = output.next() => match item {
                Some(Ok(OutputItem::Output { data, next_cursor, .. })) => {
                    let _ = stdout.write_all(crlf(&data).as_bytes());
                    let _ = stdout.flush();
                    cursor = next_cursor;
                }
                Some(Ok(OutputItem::Exit { exit_code, .. })) => {
                    drop(raw);
                    let code = exit_code.map(|c| c.to_string()).unwrap_or_else(|| "unknown".into());
                    eprintln!("\r\n[procd: {id} exited with code {code}]");
                    return Ok(EXIT_OK);
                }
                Some(Err(_)) => continue,
                // The daemon went away: ride through its restart, from
                // the cursor reached.
                None => match resubscribe(conn, &id, cursor).await {
                    Ok(more) => output = more,
                    Err(_) => break EXIT_FAILED,
                },
            },
            keys = keys.recv() => match keys {
                Some(bytes) => {
                    if typed(&client, &id, &bytes).await {
                        break EXIT_OK;
                    }
                }
                None => break EXIT_OK,
            },
            _ = winch.recv() => {
                if let Some((rows, cols)) = window_size() {
                    let _ = client.resize(id.clone(), Rows::new(rows), Cols::new(cols)).await;
                }
            }
        }
    };
    drop(raw);
    eprintln!("\r\n[procd: detached from {id}; it keeps running]");
    Ok(code)
}

/// Sends what was typed to the session, up to the detach key; returns
/// whether it was there.
async fn typed(client: &Client, id: &str, bytes: &[u8]) -> bool {
    let (send, detach) = match bytes.iter().position(|b| *b == DETACH) {
        Some(i) => (&bytes[..i], true),
        None => (bytes, false),
    };
    if !send.is_empty() {
        let text = String::from_utf8_lossy(send).into_owned();
        let _ = client
            .write_stdin(id.to_string(), text, None, None, None)
            .await;
    }
    detach
}

/// The session's output from `cursor` on, subscribed again once the
/// daemon is back.
async fn resubscribe(
    conn: &procd_client::Reconnecting,
    id: &str,
    cursor: u64,
) -> Result<jsonrpsee::core::client::Subscription<OutputItem>, ClientError> {
    let from = Some(Cursor::new(cursor));
    let subscribe = |c: std::sync::Arc<Client>| {
        let id = id.to_string();
        async move { c.subscribe_output(id, from).await }
    };
    conn.call(subscribe).await
}

/// A pipe's lines end in a bare \n, which a raw terminal does not take
/// back to the line's start; a terminal's own lines already end in \r\n.
fn crlf(data: &str) -> std::borrow::Cow<'_, str> {
    if !data.contains('\n') {
        return data.into();
    }
    let mut out = String::with_capacity(data.len() + data.len() / 16);
    let mut after_cr = false;
    for c in data.chars() {
        if c == '\n' && !after_cr {
            out.push('\r');
        }
        after_cr = c == '\r';
        out.push(c);
    }
    out.into()
}

/// Keystrokes, read by a thread of their own (stdin reads block) until
/// dropped. The drop wakes the thread through a pipe and joins it, so no
/// read of the terminal outlives the attach: `procd top` reads it next.
struct Keystrokes {
    keys: tokio::sync::mpsc::Receiver<Vec<u8>>,
    /// The pipe's write end: closing it wakes the reader.
    stop: Option<std::os::fd::OwnedFd>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Keystrokes {
    fn start() -> std::io::Result<Keystrokes> {
        let (stop_rx, stop) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (keys_tx, keys) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
        let reader = std::thread::spawn(move || read_keys(stop_rx, keys_tx));
        Ok(Keystrokes {
            keys,
            stop: Some(stop),
            reader: Some(reader),
        })
    }

    async fn recv(&mut self) -> Option<Vec<u8>> {
        self.keys.recv().await
    }
}

impl Drop for Keystrokes {
    fn drop(&mut self) {
        // A reader blocked on a full channel gets an error, not a wait.
        self.keys.close();
        drop(self.stop.take());
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// Reads stdin until it ends or `stop` is closed (it reads as ready then).
fn read_keys(stop: std::os::fd::OwnedFd, keys: tokio::sync::mpsc::Sender<Vec<u8>>) {
    use rustix::event::{poll, PollFd, PollFlags};
    let stdin = std::io::stdin();
    let mut buf = [0u8; 1024];
    loop {
        let mut fds = [
            PollFd::new(&stdin, PollFlags::IN),
            PollFd::new(&stop, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        if fds[0].revents().is_empty() {
            continue;
        }
        // Straight from the descriptor: a buffered reader could keep
        // bytes that the next reader of the terminal should get.
        match rustix::io::read(&stdin, &mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if keys.blocking_send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => continue,
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bare_newlines_get_a_carriage_return() {
        assert_eq!(super::crlf("a\nb\r\nc"), "a\r\nb\r\nc");
        assert_eq!(super::crlf("plain"), "plain");
    }
}
