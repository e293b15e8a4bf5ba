//! `procd mcp`: a Model Context Protocol server on stdio (rmcp) that lets a
//! coding agent run background processes through procd.
//!
//! Each server is one agent. It starts the daemon on demand and holds one
//! client lease for its whole life; every process it starts is owned by
//! that lease (so it ends when the agent goes away, unless started with
//! `persist`) and carries the agent's session key, so its events go to
//! this agent's `notifications`, `wait` and push, never another's.
//!
//! - `tools.rs`: the tools, one method each, forwarding to the daemon;
//! - `params.rs`: their parameters as the model sees them;
//! - `said.rs`: what the model reads (text and `structuredContent` alike);
//! - `progress.rs`: progress and cancellation of the tools that wait;
//! - `shell.rs`: the `shell` tool, the agent's own shell;
//! - `channel.rs`: pushes, with `--channel`.

mod calls;
mod channel;
mod params;
mod progress;
mod said;
mod shell;
mod tools;

use procd_client::{Launcher, Lease};
use procd_gateway::Paths;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{tool_handler, ServerHandler, ServiceExt};
use std::sync::Arc;
use std::time::Duration;

pub use progress::DEFAULT_PROGRESS_EVERY;

/// How `procd mcp` was asked to run.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// This agent's session key (`--session-key`, `PROCD_SESSION_KEY`);
    /// None: one is made.
    pub session_key: Option<String>,
    /// Keys whose events this agent also takes (`--owned-key`): its
    /// earlier keys, after a rotation.
    pub owned_keys: Vec<String>,
    /// Push events (`--channel`).
    pub channel: bool,
    /// Between two progress notes (`--progress-interval`).
    pub progress_every: Duration,
}

#[derive(Clone)]
pub struct ProcdMcp {
    /// Made again when the daemon restarts (docs/survival.md); the lease is on
    /// disk and outlives any one connection.
    client: Arc<procd_client::Reconnecting>,
    /// The lease token every started process is owned by (none over
    /// `--host`: a lease is a file of this machine's daemon).
    owner: Option<String>,
    /// This agent's key: on every spawn, and what its drains and waits ask.
    key: String,
    /// Earlier keys of this agent, whose events it takes too.
    owned_keys: Vec<String>,
    /// Pushes are on: `start` asks for a completion event by default.
    channel: bool,
    progress_every: Duration,
    /// The daemon runs on this machine: a relative cwd is taken from ours
    /// (over `--host` it is the far side's to resolve).
    local: bool,
    /// The agent's shell (`shell.rs`), opened on first use.
    shell: Arc<tokio::sync::Mutex<Option<String>>>,
    /// The one place for a `shell` call's command on its way (its
    /// `shell_run` unanswered): the shell lists it only once it starts,
    /// and a second call must not queue behind it (`shell.rs`).
    shell_sending: procd_core::admission::slot::Slots,
    /// `tools.rs`'s tools and `shell.rs`'s, served by `#[tool_handler]`.
    tool_router: ToolRouter<Self>,
}

impl ProcdMcp {
    /// `owner`: the local lease processes are owned by; None when the
    /// daemon is elsewhere (`--host`).
    fn new(
        client: procd_client::Reconnecting,
        owner: Option<String>,
        options: &McpOptions,
    ) -> Result<Self, String> {
        let key = match &options.session_key {
            Some(key) if key.is_empty() || key.len() > 256 => {
                return Err("--session-key: 1 to 256 bytes".into())
            }
            Some(key) => key.clone(),
            None => format!(
                "mcp-{}",
                procd_core::random::hex(6)
                    .map_err(|e| format!("cannot make a session key: {e}"))?
            ),
        };
        Ok(ProcdMcp {
            client: Arc::new(client),
            local: owner.is_some(),
            owner,
            key,
            owned_keys: options.owned_keys.clone(),
            channel: options.channel,
            progress_every: options.progress_every,
            shell: Arc::new(tokio::sync::Mutex::new(None)),
            shell_sending: Default::default(),
            tool_router: Self::tool_router() + Self::shell_router(),
        })
    }

    /// The daemon's client: a new connection if the daemon restarted (or
    /// the closed one, whose call then reports why, if none comes back).
    async fn client(&self) -> Arc<jsonrpsee::core::client::Client> {
        match self.client.get().await {
            Ok(client) => client,
            Err(_) => self.client.last().await,
        }
    }

    /// Serves on stdio until the client disconnects, pushing events
    /// alongside with `--channel`.
    async fn serve_stdio(self) -> Result<(), String> {
        let push = self.channel.then(|| {
            let mut keys = vec![self.key.clone()];
            keys.extend(self.owned_keys.iter().cloned());
            (self.client.clone(), keys)
        });
        let service = self
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| format!("MCP handshake failed: {e}"))?;
        let pusher = push.map(|(client, keys)| {
            tokio::spawn(channel::push(client, keys, service.peer().clone()))
        });
        let result = service.waiting().await.map(drop).map_err(|e| e.to_string());
        if let Some(pusher) = pusher {
            pusher.abort();
        }
        result
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for ProcdMcp {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder().enable_tools().build();
        if self.channel {
            capabilities.experimental = Some(
                [(channel::CAPABILITY.to_string(), Default::default())]
                    .into_iter()
                    .collect(),
            );
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("procd", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Run background processes: `start` a command (it returns early output and a session_id), \
                 `read` more output by cursor, `write` to its input, `wait` for it, `kill` it. \
                 Start dev servers with `ready` (e.g. {\"port\": 3000}) and a long yield_ms: the answer comes when they serve. \
                 When an answer says WAITING FOR INPUT (waiting_for_input: true), the process asks a question: answer it with `write`. \
                 `wait` with no session_id sleeps until the first of your processes exits, becomes ready, asks for input or (with `output`) prints a matching line: \
                 use it instead of polling. Call `notifications` between turns to learn what finished. \
                 Run one-off commands with `shell`: your own bash, where cd, exports, functions and an activated venv carry over between calls. \
                 A project with a procd.toml or Procfile starts as a whole with `up` and stops with `down`. Processes end when you disconnect \
                 unless started with persist.",
            )
    }
}

/// `procd mcp --host`: the MCP server here, the daemon elsewhere, one
/// connection made again when it drops. A lease cannot cross machines,
/// so the processes it starts are not owned: they run on there until
/// killed, as if started with persist (docs/remote.md).
pub async fn run_remote(host: &procd_client::Host, options: &McpOptions) -> Result<(), String> {
    let client = procd_client::connect_host(host)
        .await
        .map_err(|e| e.to_string())?;
    let client =
        procd_client::Reconnecting::new(procd_client::Endpoint::Host(host.clone()), client);
    ProcdMcp::new(client, None, options)?.serve_stdio().await
}

/// Runs the MCP server on stdin/stdout until the client disconnects.
pub async fn run(paths: &Paths, launcher: &Launcher, options: &McpOptions) -> Result<(), String> {
    let lease = Lease::acquire(paths, "mcp")
        .await
        .map_err(|e| format!("cannot take a client lease: {e}"))?;
    let client = procd_client::connect_or_start(paths, launcher)
        .await
        .map_err(|e| e.to_string())?;
    let client =
        procd_client::Reconnecting::new(procd_client::Endpoint::Socket(paths.socket()), client);
    let result = match ProcdMcp::new(client, Some(lease.token().to_string()), options) {
        Ok(server) => server.serve_stdio().await,
        Err(e) => Err(e),
    };
    // The agent is gone: so is its lease, and with it the processes it
    // started (the daemon ends them), unless they were started to persist.
    let _ = lease.release(false).await;
    result
}
