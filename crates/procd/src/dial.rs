//! `procd dial-stdio` (docs/remote.md): this process's stdin and stdout
//! to and from the local daemon's socket, byte for byte, until either
//! side closes — the far end of `--host`, as `docker system dial-stdio`
//! is docker's. It starts the daemon on demand, and holds a client lease
//! while it runs, as any client does.

use crate::base::{EXIT_FAILED, EXIT_OK};
use procd_client::{Launcher, Lease};
use procd_gateway::Paths;
use std::io::{Read, Write};
use std::os::fd::AsFd;

pub async fn run(paths: &Paths, launcher: &Launcher) -> i32 {
    let lease = match Lease::acquire(paths, "dial").await {
        Ok(lease) => lease,
        Err(e) => {
            eprintln!("procd dial-stdio: cannot take a client lease: {e}");
            return EXIT_FAILED;
        }
    };
    let code = match procd_client::open_or_start(paths, launcher).await {
        Ok(stream) => match stream.into_std() {
            Ok(stream) => tokio::task::spawn_blocking(move || relay(stream))
                .await
                .unwrap_or(EXIT_FAILED),
            Err(e) => fail(&e),
        },
        Err(e) => fail(&e),
    };
    let _ = lease.release(false).await;
    code
}

fn fail(e: &dyn std::fmt::Display) -> i32 {
    eprintln!("procd dial-stdio: {e}");
    EXIT_FAILED
}

/// Copies both ways. Our stdin's end half-closes the socket (the daemon
/// answers what it was sent, then closes); the daemon's close, or a
/// reader of our stdout that went away, ends it.
fn relay(socket: std::os::unix::net::UnixStream) -> i32 {
    if let Err(e) = socket.set_nonblocking(false) {
        return fail(&e);
    }
    let to_daemon = match socket.try_clone() {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    std::thread::spawn(move || {
        let mut to_daemon = to_daemon;
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_daemon);
        let _ = to_daemon.shutdown(std::net::Shutdown::Write);
    });
    let mut from_daemon = socket;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from_daemon.read(&mut buf) {
            Ok(0) => return EXIT_OK,
            Ok(n) => {
                // Straight to the descriptor: std's stdout would hold a
                // partial line back.
                if write_all_fd(&buf[..n]).is_err() {
                    return EXIT_OK;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return fail(&e),
        }
    }
}

fn write_all_fd(mut bytes: &[u8]) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    while !bytes.is_empty() {
        match rustix::io::write(stdout.as_fd(), bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let _ = std::io::stdout().flush();
    Ok(())
}
