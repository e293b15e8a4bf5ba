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
            Ok(stream) => tokio::task::spawn_blocking(move || match stdio_are_pipes() {
                true => hand_over(stream),
                false => relay(stream),
            })
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

/// Whether our stdin and stdout are pipes (ssh's, kubectl's): then the
/// daemon can take them over.
fn stdio_are_pipes() -> bool {
    use rustix::fs::{fstat, FileType};
    let fifo = |fd| fstat(fd).is_ok_and(|st| FileType::from_raw_mode(st.st_mode).is_fifo());
    let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
    fifo(stdin.as_fd()) && fifo(stdout.as_fd())
}

/// Hands our stdin and stdout to the daemon (`procd_proto::STDIO_HANDOVER`,
/// both attached: procd-server's `ends.rs`), which then reads the requests and writes
/// the answers itself: no copy and no wake-up of ours on the way. Our own
/// copies are closed (so the far side sees the daemon's close, not ours
/// held open), and we wait for the daemon to end the connection.
fn hand_over(socket: std::os::unix::net::UnixStream) -> i32 {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    // We wait on it below; tokio left it non-blocking.
    if let Err(e) = socket.set_nonblocking(false) {
        return fail(&e);
    }
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let fds = [stdin.as_fd(), stdout.as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if !ancillary.push(SendAncillaryMessage::ScmRights(&fds)) {
        return fail(&"no room for two descriptors");
    }
    let sent = sendmsg(
        &socket,
        &[std::io::IoSlice::new(&[procd_proto::STDIO_HANDOVER])],
        &mut ancillary,
        SendFlags::NOSIGNAL,
    );
    if let Err(e) = sent {
        return fail(&std::io::Error::from(e));
    }
    // /dev/null on 0 and 1 from here on: the pipes are the daemon's alone.
    let null = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        Ok(null) => null,
        Err(e) => return fail(&e),
    };
    if let Err(e) =
        rustix::stdio::dup2_stdin(&null).and_then(|()| rustix::stdio::dup2_stdout(&null))
    {
        return fail(&std::io::Error::from(e));
    }
    // The daemon ends the connection by closing the socket; our exit then
    // tells the far side (sshd ends the session when we exit).
    let mut sink = [0u8; 64];
    let mut socket = socket;
    loop {
        match socket.read(&mut sink) {
            Ok(0) => return EXIT_OK,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return EXIT_OK,
        }
    }
}

/// Copies both ways in one thread, woken by poll(2) on whichever side has
/// bytes (no hand-off between threads on the request path: measured, a
/// second thread cost a tenth of a round trip through ssh). The socket is
/// non-blocking, and what it cannot take yet waits in `pending` while
/// stdin is not read: writing to the daemon never blocks reading its
/// answers (an attach streams output while keys go the other way). Our
/// stdin's end half-closes the socket once `pending` is written (the
/// daemon answers what it was sent, then closes); the daemon's close, or a
/// reader of our stdout that went away, ends it.
fn relay(socket: std::os::unix::net::UnixStream) -> i32 {
    use rustix::event::{poll, PollFd, PollFlags};
    if let Err(e) = socket.set_nonblocking(true) {
        return fail(&e);
    }
    let stdin = std::io::stdin();
    let stdin = stdin.as_fd();
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut stdin_open = true;
    let mut half_closed = false;
    loop {
        let toward_daemon = match pending.is_empty() {
            true => PollFlags::IN,
            false => PollFlags::IN | PollFlags::OUT,
        };
        let mut fds = vec![PollFd::new(&socket, toward_daemon)];
        let reading_stdin = stdin_open && pending.is_empty();
        if reading_stdin {
            fds.push(PollFd::new(&stdin, PollFlags::IN));
        }
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return fail(&std::io::Error::from(e)),
        }
        let socket_ready = fds[0].revents();
        let stdin_ready = reading_stdin && !fds[1].revents().is_empty();
        if stdin_ready {
            match rustix::io::read(stdin, &mut buf) {
                Ok(0) | Err(_) => stdin_open = false,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
        }
        if !pending.is_empty() {
            match (&socket).write(&pending) {
                Ok(n) => drop(pending.drain(..n)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // The daemon went: what it still sends is read below.
                Err(_) => pending.clear(),
            }
        }
        if !stdin_open && pending.is_empty() && !half_closed {
            half_closed = true;
            let _ = socket.shutdown(std::net::Shutdown::Write);
        }
        if socket_ready.is_empty() {
            continue;
        }
        match (&socket).read(&mut buf) {
            Ok(0) => return EXIT_OK,
            // Straight to the descriptor: std's stdout would hold a
            // partial line back.
            Ok(n) => {
                if write_all_fd(&buf[..n]).is_err() {
                    return EXIT_OK;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
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
    Ok(())
}
