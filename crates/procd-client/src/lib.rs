//! procd-client: talk to a procd daemon from Rust.
//!
//! `connect` opens the Unix socket and returns a jsonrpsee client whose
//! typed methods come from `procd_proto::ProcdApiClient` (bring the trait
//! into scope). `connect_or_start` additionally starts a daemon when none
//! answers, and waits until its socket accepts.

use jsonrpsee::core::client::{
    Client, ClientBuilder, ReceivedMessage, TransportReceiverT, TransportSenderT,
};
use procd_gateway::Paths;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

pub use procd_proto::ProcdApiClient;

/// How long a request may take before the client gives up; long enough for
/// the longest `wait` (600 s) and `read` long-poll (300 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long a started daemon may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(5);

struct LineSender(OwnedWriteHalf);
struct LineReceiver(Lines<BufReader<OwnedReadHalf>>);

impl TransportSenderT for LineSender {
    type Error = io::Error;

    async fn send(&mut self, mut msg: String) -> Result<(), io::Error> {
        msg.push('\n');
        self.0.write_all(msg.as_bytes()).await
    }
}

impl TransportReceiverT for LineReceiver {
    type Error = io::Error;

    async fn receive(&mut self) -> Result<ReceivedMessage, io::Error> {
        match self.0.next_line().await? {
            Some(line) => Ok(ReceivedMessage::Text(line)),
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "procd closed the connection",
            )),
        }
    }
}

/// Connects to the daemon listening on `socket`.
pub async fn connect(socket: &Path) -> io::Result<Client> {
    let stream = UnixStream::connect(socket).await?;
    let (read, write) = stream.into_split();
    Ok(ClientBuilder::default()
        .request_timeout(REQUEST_TIMEOUT)
        .max_buffer_capacity_per_subscription(4096)
        .build_with_tokio(
            LineSender(write),
            LineReceiver(BufReader::new(read).lines()),
        ))
}

/// How to start a daemon when none answers.
#[derive(Debug, Clone)]
pub struct Starter {
    /// The procd executable.
    pub exe: PathBuf,
    /// Passed as `--home` (None: the daemon resolves its own paths).
    pub home: Option<PathBuf>,
    /// Passed as `--config`.
    pub config: Option<PathBuf>,
}

/// Connects, starting an on-demand daemon first if none answers.
pub async fn connect_or_start(paths: &Paths, starter: &Starter) -> Result<Client, String> {
    if let Ok(client) = connect(&paths.socket()).await {
        return Ok(client);
    }
    start_detached(paths, starter)?;
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    let mut pause = Duration::from_millis(5);
    loop {
        match connect(&paths.socket()).await {
            Ok(client) => return Ok(client),
            Err(err) if tokio::time::Instant::now() >= deadline => {
                return Err(format!(
                    "started procd, but its socket {} did not accept within {}s ({err}); see {}",
                    paths.socket().display(),
                    START_TIMEOUT.as_secs(),
                    paths.daemon_log().display()
                ))
            }
            // No event tells us when another process starts listening:
            // retry with a short, growing pause until the deadline.
            Err(_) => tokio::time::sleep(pause).await,
        }
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Starts `procd daemon --on-demand` in a new session with its output in
/// procd.log. A shell in between exits at once, so the daemon is not our
/// child (nothing to reap, it outlives us).
fn start_detached(paths: &Paths, starter: &Starter) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    paths
        .create_dirs()
        .map_err(|e| format!("cannot create {}: {e}", paths.state_dir.display()))?;
    let mut args: Vec<std::ffi::OsString> = vec!["daemon".into(), "--on-demand".into()];
    if let Some(home) = &starter.home {
        args.push("--home".into());
        args.push(home.into());
    }
    if let Some(config) = &starter.config {
        args.push("--config".into());
        args.push(config.into());
    }
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("\"$0\" \"$@\" </dev/null >>\"$PROCD_DAEMON_LOG\" 2>&1 &")
        .arg(&starter.exe)
        .args(&args)
        .env("PROCD_DAEMON_LOG", paths.daemon_log())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: runs in the forked child before exec; setsid(2) is
    // async-signal-safe and touches no shared memory.
    unsafe {
        cmd.pre_exec(|| nix::unistd::setsid().map(drop).map_err(io::Error::from));
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start procd ({}): {e}", starter.exe.display()))?;
    if !status.success() {
        return Err(format!("starting procd failed ({status})"));
    }
    Ok(())
}
