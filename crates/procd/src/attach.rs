//! `procd attach ID`: this terminal becomes the session's terminal. The
//! local tty goes raw; keystrokes are written to the session, its output is
//! streamed through `subscribe_output`, the window size follows SIGWINCH.
//! Ctrl-] detaches and leaves the session running.

use crate::base::{EXIT_FAILED, EXIT_OK};
use jsonrpsee::core::client::{Client, Error as ClientError};
use nix::sys::termios::{self, SetArg, Termios};
use procd_client::ProcdApiClient;
use procd_proto::OutputItem;
use procd_proto::{Cols, Cursor, MaxBytes, Rows};
use std::io::{Read, Write};
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
    let end = client
        .read(
            id.clone(),
            Some(Cursor::new(procd_proto::MAX_COUNT)),
            Some(MaxBytes::new(1)),
            None,
            None,
            None,
        )
        .await?
        .next_cursor;
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

    let mut keys = keystrokes();

    let mut stdout = std::io::stdout();
    // Where the output seen so far ends, to go on from after a restart.
    let mut cursor = start;
    let code = loop {
        // A connection made again after the daemon restarted (docs/survival.md).
        let client = conn.last().await;
        tokio::select! {
            item = output.next() => match item {
                Some(Ok(OutputItem::Output { data, next_cursor, .. })) => {
                    let _ = stdout.write_all(data.as_bytes());
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
                None => {
                    let from = Some(Cursor::new(cursor));
                    let resubscribe = |c: std::sync::Arc<Client>| {
                        let id = id.clone();
                        async move { c.subscribe_output(id, from).await }
                    };
                    match conn.call(resubscribe).await {
                        Ok(more) => output = more,
                        Err(_) => break EXIT_FAILED,
                    }
                }
            },
            keys = keys.recv() => match keys {
                Some(bytes) => {
                    let (send, detach) = match bytes.iter().position(|b| *b == DETACH) {
                        Some(i) => (&bytes[..i], true),
                        None => (&bytes[..], false),
                    };
                    if !send.is_empty() {
                        let text = String::from_utf8_lossy(send).into_owned();
                        let _ = client.write_stdin(id.clone(), text, None, None, None).await;
                    }
                    if detach {
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

/// Keystrokes, read by a thread of their own: stdin reads block.
fn keystrokes() -> tokio::sync::mpsc::Receiver<Vec<u8>> {
    let (keys_tx, keys) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if keys_tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    keys
}
