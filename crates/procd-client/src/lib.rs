//! procd-client: talk to a procd daemon from Rust.
//!
//! `connect` opens the Unix socket and returns a jsonrpsee client whose
//! typed methods come from `procd_proto::ProcdApiClient` (bring the trait
//! into scope). `connect_or_start` additionally starts a daemon when none
//! answers, and waits until its socket accepts. `connect_host` reaches a
//! daemon elsewhere (`--host`, docs/remote.md).
//!
//! Also: `Lease`; riding through a daemon's restart (`reconnect`,
//! `Reconnecting`, `is_disconnect`: the CLI's followers, waits, events and
//! attach, and the MCP server), refused when it reaches another
//! `status.instance`; `resolve_session` (an id, a prefix or a name to a
//! session id, for the CLI and the MCP tools alike); `remote.rs`, a daemon
//! elsewhere (`Host`, through ssh, `docker exec`, `kubectl exec` or a
//! `--connect` command; its first `status` checks the protocol; errors are
//! explained from the transport's exit and stderr; a sandbox that is gone is
//! told apart, `is_gone`).

use jsonrpsee::core::client::{
    Client, ClientBuilder, ReceivedMessage, TransportReceiverT, TransportSenderT,
};
use procd_gateway::Paths;
use std::io;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, Lines};
use tokio::net::UnixStream;

mod remote;

pub use procd_proto::{ProcdApiClient, SpawnParams};
pub use remote::{is_gone, Host};

/// `spawn` (the one method outside `ProcdApiClient`: its params are one
/// struct). Build them with `SpawnParams { command, ..Default::default() }`.
pub async fn spawn(
    client: &Client,
    params: SpawnParams,
) -> Result<procd_proto::SpawnResult, jsonrpsee::core::client::Error> {
    use jsonrpsee::core::client::{ClientT, Error};
    // Sent as named params (jsonrpsee sends a JSON object map as is).
    match serde_json::to_value(params).map_err(Error::ParseError)? {
        serde_json::Value::Object(named) => client.request("spawn", named).await,
        other => Err(Error::Custom(format!(
            "spawn params are not an object: {other}"
        ))),
    }
}

/// How long a request may take before the client gives up; long enough for
/// the longest `wait` (600 s) and `read` long-poll (300 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3600);

type Reader = Box<dyn AsyncRead + Send + Unpin>;

struct LineSender(Box<dyn AsyncWrite + Send + Unpin>);

struct LineReceiver {
    lines: Lines<BufReader<Reader>>,
    /// A transport process (`--host`): kept alive with the connection,
    /// and asked why when the connection ends.
    transport: Option<(remote::Running, Host)>,
}

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
        match self.lines.next_line().await? {
            Some(line) => Ok(ReceivedMessage::Text(line)),
            None => Err(match &mut self.transport {
                Some((t, host)) => t.why_ended(host).await,
                None => io::Error::new(io::ErrorKind::UnexpectedEof, "procd closed the connection"),
            }),
        }
    }
}

fn client_over(
    lines: Lines<BufReader<Reader>>,
    write: Box<dyn AsyncWrite + Send + Unpin>,
    transport: Option<(remote::Running, Host)>,
) -> Client {
    ClientBuilder::default()
        .request_timeout(REQUEST_TIMEOUT)
        .max_buffer_capacity_per_subscription(4096)
        .build_with_tokio(LineSender(write), LineReceiver { lines, transport })
}

/// Opens the daemon's socket — after checking that its directory can be
/// trusted and, before sending a byte, that the listener runs as this
/// user (or root): docs/SECURITY.md. A refusal is `PermissionDenied`.
pub async fn open_socket(socket: &Path) -> io::Result<UnixStream> {
    if let Some(dir) = socket.parent().filter(|d| d.exists()) {
        procd_gateway::paths::check_trusted_dir(dir)?;
    }
    let stream = UnixStream::connect(socket).await?;
    let me = nix::unistd::getuid().as_raw();
    let peer = stream.peer_cred()?.uid();
    if peer != me && peer != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing to talk to {}: the process listening there runs as uid {peer}, not as you (uid {me})",
                socket.display()
            ),
        ));
    }
    Ok(stream)
}

/// Where a session's output ends now: the cursor after its last byte
/// (`procd attach` and `procd top`'s log pane start a little before it).
pub async fn output_end(
    client: &Client,
    session_id: &str,
) -> Result<u64, jsonrpsee::core::client::Error> {
    let end = Some(procd_proto::Cursor::new(procd_proto::MAX_COUNT));
    let one = Some(procd_proto::MaxBytes::new(1));
    Ok(client
        .read(session_id.to_string(), end, one, None, None, None)
        .await?
        .next_cursor)
}

/// How many entries one `list` page asks for in `list_all`: a few hundred
/// KB of JSON, not the 10 MB line 10 000 sessions make in one answer.
pub const LIST_PAGE: u32 = 1000;

/// Every entry `list` shows for `task_id` and `filter`, page by page.
pub async fn list_all(
    client: &Client,
    task_id: Option<String>,
    filter: Option<procd_proto::ListFilter>,
) -> Result<Vec<procd_proto::ProcessEntry>, jsonrpsee::core::client::Error> {
    let limit = Some(procd_proto::ListLimit::new(LIST_PAGE));
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = client
            .list(task_id.clone(), None, filter, None, limit, after)
            .await?;
        all.extend(page.processes);
        match page.next_after {
            Some(next) => after = Some(next),
            None => return Ok(all),
        }
    }
}

/// The session id `arg` stands for: a full id as given (no round trip);
/// else an id prefix, a name (`NAME`) or `PROJECT/NAME`, looked up once
/// with `poll` (docs/stacks.md). An argument that is both a hex prefix and
/// a name is tried as an id first; anything else is passed on for the
/// daemon to judge.
pub async fn resolve_session(
    client: &Client,
    arg: &str,
) -> Result<String, jsonrpsee::core::client::Error> {
    use jsonrpsee::core::client::ClientT;
    let (project, name) = match arg.split_once('/') {
        Some((project, name)) => (Some(project), name),
        None => (None, arg),
    };
    let hex = arg.strip_prefix("proc_");
    if hex.is_some_and(|h| h.len() == 12 && h.bytes().all(|b| b.is_ascii_hexdigit())) {
        return Ok(arg.to_string());
    }
    if !procd_proto::names::is_name(name) {
        return Ok(arg.to_string());
    }
    let digits = hex.unwrap_or(arg);
    let id_like =
        project.is_none() && digits.len() >= 4 && digits.bytes().all(|b| b.is_ascii_hexdigit());
    let mut as_id = None;
    if id_like {
        let mut by_id = serde_json::Map::new();
        by_id.insert("session_id".into(), arg.into());
        match client
            .request::<procd_proto::PollResult, _>("poll", by_id)
            .await
        {
            Ok(p) => return Ok(p.session_id),
            Err(e) if !is_not_found(&e) || hex.is_some() => return Err(e),
            Err(e) => as_id = Some(e),
        }
    }
    let mut by_name = serde_json::Map::new();
    by_name.insert("name".into(), name.into());
    if let Some(project) = project {
        by_name.insert("project".into(), project.into());
    }
    match client
        .request::<procd_proto::PollResult, _>("poll", by_name)
        .await
    {
        Ok(p) => Ok(p.session_id),
        Err(e) => Err(as_id.unwrap_or(e)),
    }
}

fn is_not_found(e: &jsonrpsee::core::client::Error) -> bool {
    matches!(e, jsonrpsee::core::client::Error::Call(obj)
        if obj.code() == procd_proto::error::SESSION_NOT_FOUND)
}

/// Connects to the daemon listening on `socket` (checked as `open_socket`
/// says).
pub async fn connect(socket: &Path) -> io::Result<Client> {
    Ok(client_over_socket(open_socket(socket).await?))
}

/// A client on an open socket.
fn client_over_socket(stream: UnixStream) -> Client {
    let (read, write) = stream.into_split();
    let reader: Reader = Box::new(read);
    client_over(BufReader::new(reader).lines(), Box::new(write), None)
}

/// Connects to the daemon `host` names. Through a transport command, one
/// `status` is asked first: it proves the transport reaches a procd (or
/// says, from the transport's exit and stderr, why not) and that the
/// procd there speaks this one's protocol.
pub async fn connect_host(host: &Host) -> io::Result<Client> {
    if let Host::Unix(path) = host {
        return connect(path).await;
    }
    let (mut t, mut stdin, stdout) = remote::start(host)?;
    let reader: Reader = Box::new(stdout);
    let mut lines = BufReader::new(reader).lines();
    let hello = "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"status\"}\n";
    let answer = match stdin.write_all(hello.as_bytes()).await {
        Ok(()) => tokio::time::timeout(HELLO_TIMEOUT, lines.next_line()).await,
        Err(_) => Ok(Ok(None)),
    };
    let line = match answer {
        Ok(Ok(Some(line))) => line,
        Ok(_) => return Err(t.why_ended(host).await),
        Err(_) => {
            return Err(io::Error::other(format!(
                "{} did not answer within {HELLO_TIMEOUT:?}",
                host.describe()
            )))
        }
    };
    remote::check_version(host, &line)?;
    Ok(client_over(lines, Box::new(stdin), Some((t, host.clone()))))
}

/// How long the first answer through a transport may take (an ssh login,
/// a daemon started on demand there).
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);

pub use procd_gateway::control::Launcher;
pub use procd_gateway::lease::Released;

/// Why no daemon could be reached or started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The socket is not ours to use (docs/SECURITY.md: another user's).
    #[error("{0}")]
    Refused(io::Error),
    #[error("{0}")]
    Start(#[from] procd_gateway::control::ControlError),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("procd started but {} refused: {source}", socket.display())]
    Connect {
        socket: std::path::PathBuf,
        source: io::Error,
    },
}

/// Connects, starting an on-demand daemon first if none answers. Call it
/// while holding a `Lease`: a daemon with no lease and no session may stop
/// itself at any moment.
pub async fn connect_or_start(paths: &Paths, launcher: &Launcher) -> Result<Client, StartError> {
    Ok(client_over_socket(open_or_start(paths, launcher).await?))
}

/// The daemon's socket, opened as `open_socket` does, after starting an
/// on-demand daemon if none answers (`connect_or_start`'s rules).
pub async fn open_or_start(paths: &Paths, launcher: &Launcher) -> Result<UnixStream, StartError> {
    match open_socket(&paths.socket()).await {
        Ok(stream) => return Ok(stream),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(StartError::Refused(e))
        }
        Err(_) => {}
    }
    let (p, l) = (paths.clone(), launcher.clone());
    tokio::task::spawn_blocking(move || {
        let t = procd_gateway::lease::Transition::begin(&p)?;
        procd_gateway::lease::wait_out_stopping(&p, &t)?;
        procd_gateway::control::start_on_demand(&p, &t, &l).map_err(StartError::from)
    })
    .await
    .map_err(io::Error::other)??;
    open_socket(&paths.socket())
        .await
        .map_err(|source| StartError::Connect {
            socket: paths.socket(),
            source,
        })
}

/// A client lease (docs/operations.md): while it is held, an on-demand daemon stays
/// up and sessions spawned with `owner = lease.token()` live; when it is
/// released (or this process dies) the daemon ends those sessions unless
/// they were spawned with `persist`.
#[derive(Debug)]
pub struct Lease {
    paths: Paths,
    token: String,
}

impl Lease {
    /// Records a lease for this process (waits out a stopping daemon).
    pub async fn acquire(paths: &Paths, kind: &str) -> io::Result<Lease> {
        let p = paths.clone();
        let kind = kind.to_string();
        let pid = std::process::id() as i32;
        let token =
            tokio::task::spawn_blocking(move || procd_gateway::lease::acquire(&p, &kind, pid))
                .await
                .map_err(io::Error::other)??;
        Ok(Lease {
            paths: paths.clone(),
            token,
        })
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// Ends the lease. As the last client of an on-demand daemon it stops
    /// the daemon when `wait_for_stop`, else leaves that to its monitor.
    pub async fn release(self, wait_for_stop: bool) -> io::Result<Released> {
        let Lease { paths, token } = self;
        tokio::task::spawn_blocking(move || {
            procd_gateway::control::release(&paths, &token, wait_for_stop, STOP_TIMEOUT)
        })
        .await
        .map_err(io::Error::other)?
    }
}

/// How long a last client's release waits for the daemon to stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a client keeps trying to reach a daemon that went away: its
/// keeper holds the socket and starts the next one within this (docs/survival.md).
pub const RECONNECT_FOR: Duration = Duration::from_secs(10);

/// Whether a call failed because the connection went (the daemon died or
/// restarted), not because the daemon answered with an error.
pub fn is_disconnect(err: &jsonrpsee::core::client::Error) -> bool {
    use jsonrpsee::core::client::Error;
    matches!(err, Error::RestartNeeded(_) | Error::Transport(_))
}

/// A connection that is made again when the daemon went away (docs/survival.md:
/// clients ride through a daemon's restart). `get` hands out the current
/// client, connecting anew (for up to `RECONNECT_FOR`) once the old one is
/// closed; a caller whose call failed with `is_disconnect` calls `get`
/// and repeats it (from its cursor, for reads).
///
/// A reconnection must reach the same procd: `status.instance` is learnt
/// on the first `call`, and a connection that finds another instance (a
/// sandbox its orchestrator replaced, a machine rebooted) is refused with
/// an error that says so, as is a sandbox that is gone (`is_gone`),
/// at once rather than after `RECONNECT_FOR`.
pub struct Reconnecting {
    endpoint: Endpoint,
    current: tokio::sync::Mutex<std::sync::Arc<Client>>,
    /// The instance first reached, learnt once (None inside: a daemon
    /// too old to say; then nothing is compared).
    instance: std::sync::OnceLock<Option<String>>,
}

/// Where a client connects: this machine's socket, or `--host`.
#[derive(Debug, Clone)]
pub enum Endpoint {
    Socket(std::path::PathBuf),
    Host(Host),
}

impl Endpoint {
    /// How errors name it.
    pub fn describe(&self) -> String {
        match self {
            Endpoint::Socket(socket) => socket.display().to_string(),
            Endpoint::Host(host) => host.describe(),
        }
    }

    pub async fn connect(&self) -> io::Result<Client> {
        match self {
            Endpoint::Socket(socket) => connect(socket).await,
            Endpoint::Host(host) => connect_host(host).await,
        }
    }
}

impl Reconnecting {
    pub fn new(endpoint: Endpoint, client: Client) -> Reconnecting {
        Reconnecting::shared(endpoint, std::sync::Arc::new(client))
    }

    /// One on a client that others hold too (`procd top`'s, for attach).
    pub fn shared(endpoint: Endpoint, client: std::sync::Arc<Client>) -> Reconnecting {
        Reconnecting {
            endpoint,
            current: tokio::sync::Mutex::new(client),
            instance: std::sync::OnceLock::new(),
        }
    }

    /// The instance of the procd `client` reaches: Err when it did not
    /// answer, None when it is too old to say.
    async fn instance_of(client: &Client) -> Result<Option<String>, ()> {
        let status = client.status().await.map_err(|_| ())?;
        Ok((!status.instance.is_empty()).then_some(status.instance))
    }

    /// The current client, connected or not (a call on a closed one fails
    /// with `RestartNeeded`, which says what happened).
    pub async fn last(&self) -> std::sync::Arc<Client> {
        self.current.lock().await.clone()
    }

    /// Runs `call` with the current client; when it fails because the
    /// connection went (`is_disconnect`), connects again and runs it
    /// again — for up to `RECONNECT_FOR` after the first such failure, then
    /// that failure is returned. `call` must be safe to repeat (a read from
    /// the same cursor, a wait).
    pub async fn call<T, F, Fut>(&self, mut call: F) -> Result<T, jsonrpsee::core::client::Error>
    where
        F: FnMut(std::sync::Arc<Client>) -> Fut,
        Fut: std::future::Future<Output = Result<T, jsonrpsee::core::client::Error>>,
    {
        if self.instance.get().is_none() {
            if let Ok(seen) = Reconnecting::instance_of(&*self.last().await).await {
                let _ = self.instance.set(seen);
            }
        }
        let mut gone_since = None;
        loop {
            match call(self.last().await).await {
                Err(e) if is_disconnect(&e) => {
                    let since = *gone_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() > RECONNECT_FOR {
                        return Err(e);
                    }
                    match self.get().await {
                        Ok(_) => {}
                        Err(why) if is_gone(&why) => {
                            return Err(jsonrpsee::core::client::Error::Custom(why.to_string()))
                        }
                        Err(_) => return Err(e),
                    }
                }
                other => return other,
            }
        }
    }

    /// The client to call with: the current one while it is connected,
    /// else a new connection (an error if none could be made in time).
    pub async fn get(&self) -> io::Result<std::sync::Arc<Client>> {
        let mut current = self.current.lock().await;
        if !current.is_connected() {
            let client = reconnect(&self.endpoint).await?;
            if let Some(Some(was)) = self.instance.get() {
                match Reconnecting::instance_of(&client).await {
                    Ok(Some(now)) if &now != was => {
                        return Err(remote::gone(format!(
                            "{} is another procd now (instance {now}; it was {was}): it was replaced or restarted afresh, and the sessions of the one before are gone",
                            self.endpoint.describe()
                        )))
                    }
                    _ => {}
                }
            }
            *current = std::sync::Arc::new(client);
        }
        Ok(current.clone())
    }
}

/// Connects to a daemon that went away, trying for up to `RECONNECT_FOR`
/// (its keeper holds the socket, so a connection made while it restarts
/// the daemon waits for the next one; a dropped transport is started
/// again).
pub async fn reconnect(endpoint: &Endpoint) -> io::Result<Client> {
    let deadline = tokio::time::Instant::now() + RECONNECT_FOR;
    let mut pause = Duration::from_millis(10);
    loop {
        match endpoint.connect().await {
            Ok(client) => return Ok(client),
            Err(e) if is_gone(&e) || tokio::time::Instant::now() + pause > deadline => {
                return Err(e)
            }
            // No event announces a socket that comes back.
            Err(_) => tokio::time::sleep(pause).await,
        }
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}
