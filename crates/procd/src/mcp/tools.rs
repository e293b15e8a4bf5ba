//! The tools: one method each, forwarding to the daemon and saying what
//! came back (`said.rs`). The tools that wait send progress and stop at a
//! cancellation (`progress.rs`).

use super::params::{
    service_names, DownParams, KillParams, ListParams, NotificationsParams, PortParams, ReadParams,
    SearchParams, SignalParams, StartParams, UpParams, WaitParams, WriteParams,
};
use super::progress::{Awaited, Waited};
use super::said::{answer, change_error, exit_words, failed, tool_error, Now};
use super::ProcdMcp;
use jsonrpsee::core::client::Error as ClientError;
use procd_client::ProcdApiClient;
use procd_proto::{
    Cursor, GraceS, ListFilter, ListLimit, MaxOutputChars, SignalSpec, TimeoutS, WaitMs, YieldMs,
};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, ErrorData, RoleServer};
use serde_json::json;

/// Output returned to the model is cut (head + tail) past this many chars
/// unless the call asks for another budget.
pub(super) const DEFAULT_BUDGET: u64 = 20_000;
/// How many processes one `list` answer names unless the call asks for
/// another page size: more would crowd the model's context.
pub(super) const MCP_LIST_PAGE: u32 = 100;
/// How long `start` waits for the process to finish or go quiet.
pub(super) const DEFAULT_START_YIELD_MS: f64 = 10_000.0;
/// How long `write` waits for the answer to the input.
pub(super) const DEFAULT_WRITE_YIELD_MS: f64 = 2_000.0;
/// How long `wait` waits by default: under the 60 s after which clients
/// that ignore progress give up on a call.
pub(super) const DEFAULT_WAIT_S: f64 = 50.0;

/// What a tool says when its client cancelled it.
pub(super) fn cancelled(what: &str) -> CallToolResult {
    failed(format!(
        "Cancelled while {what}; the process runs on (`list` shows it)."
    ))
}

#[tool_router(vis = "pub(super)")]
impl ProcdMcp {
    /// A session's state now (None when it cannot be polled).
    pub(super) async fn now(&self, session_id: &str) -> Option<Now> {
        let budget = Some(MaxOutputChars::new(400));
        let client = self.client().await;
        let p = client.poll(session_id.to_string(), budget, None).await;
        p.ok().map(|p| Now::of(&p))
    }

    /// The session id a tool's `session_id` stands for: an id, a prefix,
    /// or a name `start` gave (docs/stacks.md).
    pub(super) async fn id_of(&self, arg: &str) -> Result<String, ClientError> {
        procd_client::resolve_session(&*self.client().await, arg).await
    }

    #[tool(
        description = "Start a shell command as a background process (dev server, test run, build, REPL). Waits up to yield_ms for it to finish, go quiet, ask for input, or (with `ready`) become ready; then returns its output so far, its status, and a session_id and cursor for later `read`, `write`, `wait` and `kill` calls. For a dev server pass ready (e.g. {\"port\": 3000}) and a yield_ms long enough to start (e.g. 60000): the answer comes as soon as it serves, with its ports. If the answer says WAITING FOR INPUT, the program asks something (a [y/N] question, a prompt): answer with `write`. Processes end when this agent disconnects unless persist is true.",
        annotations(destructive_hint = false, open_world_hint = true)
    )]
    async fn start(
        &self,
        Parameters(p): Parameters<StartParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let params = match self.spawn_params(p) {
            Ok(params) => params,
            Err(e) => return Ok(failed(format!("Invalid arguments: {e}"))),
        };
        let client = self.client().await;
        let awaited = Awaited {
            what: "the command to finish, go quiet, ask for input or be ready".into(),
            sessions: &[],
        };
        let r = match self
            .awaiting(&ctx, awaited, procd_client::spawn(&client, params))
            .await
        {
            Waited::Done(r) => r,
            Waited::Cancelled => return Ok(cancelled("starting it")),
        };
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                return Ok(change_error(
                    e,
                    "The command may have started: call `list` before starting it again.",
                ))
            }
        };
        let now = self.now(&r.session_id).await;
        let words = now.as_ref().map(Now::words).unwrap_or_default();
        let mut fields = serde_json::to_value(&r).unwrap_or_default();
        if let Some(cursor) = r.cursor {
            fields["next_cursor"] = json!(cursor);
        }
        Ok(
            if let (procd_proto::SessionStatus::Queued, Some(q)) = (r.status, &r.queue) {
                let summary = format!(
                "{} is {}: it starts by itself when a slot frees. `wait` on it, `poll` it, or `kill` it to take it out of the queue.",
                r.session_id,
                crate::render::queued(q),
            );
                answer(summary, None, &fields, None)
            } else if r.reused {
                let summary = format!(
                "{} (pid {}) already runs this command under this name: nothing was started.{words}",
                r.session_id, r.pid,
            );
                answer(summary, None, &fields, now.as_ref())
            } else {
                let url = r
                    .port
                    .map(|p| format!(" It was given port {p} (PORT): http://localhost:{p}/"))
                    .unwrap_or_default();
                let summary = format!(
                    "Started {} (pid {}): {}{words}.{url} Output so far (next cursor {}):",
                    r.session_id,
                    r.pid,
                    exit_words(&r.exit),
                    r.cursor.unwrap_or(0),
                );
                answer(summary, r.output.as_deref(), &fields, now.as_ref())
            },
        )
    }

    #[tool(
        description = "Read a process's output from a byte cursor (0 = from the start; pass the next_cursor of the previous answer to get only new output). wait_ms long-polls for new output. Reading does not consume anything.",
        annotations(read_only_hint = true)
    )]
    async fn read(
        &self,
        Parameters(p): Parameters<ReadParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match self.id_of(&p.session_id).await {
            Ok(id) => id,
            Err(e) => return Ok(tool_error(e)),
        };
        let budget = Some(MaxOutputChars::new(
            p.max_output_chars.unwrap_or(DEFAULT_BUDGET),
        ));
        let client = self.client().await;
        let call = client.read(
            id.clone(),
            p.cursor.map(Cursor::new),
            None,
            p.wait_ms.map(WaitMs::new),
            budget,
            None,
        );
        let ids = [id.clone()];
        let awaited = Awaited {
            what: format!("new output of {id}"),
            sessions: &ids,
        };
        let r = match self.awaiting(&ctx, awaited, call).await {
            Waited::Done(Ok(r)) => r,
            Waited::Done(Err(e)) => return Ok(tool_error(e)),
            Waited::Cancelled => return Ok(cancelled("reading")),
        };
        let now = match r.status {
            procd_proto::SessionStatus::Running => self.now(&id).await,
            procd_proto::SessionStatus::Exited | procd_proto::SessionStatus::Queued => None,
        };
        let state = match (r.eof, r.status) {
            (true, _) => format!(
                "exited with code {} and everything was read",
                r.exit_code.map_or("unknown".into(), |c| c.to_string())
            ),
            (false, procd_proto::SessionStatus::Exited) => "exited; more output remains".into(),
            (false, procd_proto::SessionStatus::Queued) => {
                "queued: it has not started, so there is no output yet".into()
            }
            (false, procd_proto::SessionStatus::Running) => format!(
                "running{}",
                now.as_ref().map(Now::words).unwrap_or_default()
            ),
        };
        let summary = format!(
            "{id}: {state}. Output from cursor {} (next cursor {}):",
            r.cursor, r.next_cursor
        );
        Ok(answer(summary, Some(&r.data), &r, now.as_ref()))
    }

    #[tool(
        description = "Type into a running process's input (stdin or terminal): text, then Enter unless submit is false; close ends the input (EOF). Use it to answer a process that is WAITING FOR INPUT (a question, a password prompt, a REPL). Returns the output produced after the write, waiting up to yield_ms for it (less when the process asks for input again).",
        annotations(destructive_hint = false)
    )]
    async fn write(
        &self,
        Parameters(p): Parameters<WriteParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match self.id_of(&p.session_id).await {
            Ok(id) => id,
            Err(e) => return Ok(tool_error(e)),
        };
        let ids = [id.clone()];
        let awaited = Awaited {
            what: format!("{id} to answer the input"),
            sessions: &ids,
        };
        let r = match self.awaiting(&ctx, awaited, self.type_in(&id, &p)).await {
            Waited::Done(Ok(r)) => r,
            Waited::Done(Err(e)) => return Ok(e),
            Waited::Cancelled => return Ok(cancelled("waiting for the answer")),
        };
        let now = match r.status {
            procd_proto::StdinStatus::Ok if r.exit.is_none() => self.now(&id).await,
            _ => None,
        };
        let status = match r.status {
            procd_proto::StdinStatus::AlreadyExited => {
                "had already exited; nothing was written".to_string()
            }
            procd_proto::StdinStatus::Ok => format!(
                "{} bytes written; {}{}",
                r.bytes_written,
                exit_words(&r.exit),
                now.as_ref().map(Now::words).unwrap_or_default()
            ),
        };
        let summary = format!(
            "{id}: {status}. Output since the write (next cursor {}):",
            r.cursor.map_or("-".into(), |c| c.to_string()),
        );
        let mut fields = serde_json::to_value(&r).unwrap_or_default();
        if let Some(cursor) = r.cursor {
            fields["next_cursor"] = json!(cursor);
        }
        Ok(answer(summary, r.output.as_deref(), &fields, now.as_ref()))
    }

    #[tool(
        description = "Wait without polling. With a session_id: until it exits (its exit code and the end of its output). Without one (or with session_ids): until the first of your processes exits, becomes ready, asks for input, or (with `output`) prints a line matching the regex; the answer says which happened, to which process, with its output since the last wait (pass `cursors` back to go on from there).",
        annotations(read_only_hint = true)
    )]
    async fn wait(
        &self,
        Parameters(p): Parameters<WaitParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let timeout = Some(TimeoutS::new(p.timeout_s.unwrap_or(DEFAULT_WAIT_S)));
        let budget = Some(MaxOutputChars::new(
            p.max_output_chars.unwrap_or(DEFAULT_BUDGET),
        ));
        if p.is_one_exit() {
            let id = match self
                .id_of(p.session_id.as_deref().unwrap_or_default())
                .await
            {
                Ok(id) => id,
                Err(e) => return Ok(tool_error(e)),
            };
            let client = self.client().await;
            let ids = [id.clone()];
            let awaited = Awaited {
                what: format!("{id} to exit"),
                sessions: &ids,
            };
            let call = client.wait(id.clone(), timeout, budget, None);
            return Ok(match self.awaiting(&ctx, awaited, call).await {
                Waited::Done(Ok(r)) => {
                    let (state, now) = match r.status {
                        procd_proto::WaitStatus::Timeout => {
                            let now = self.now(&id).await;
                            let words = now.as_ref().map(Now::words).unwrap_or_default();
                            (format!("still running after the timeout{words}"), now)
                        }
                        _ => (exit_words(&r.exit), None),
                    };
                    let summary = format!("{}: {state}. Last output:", r.session_id);
                    answer(summary, Some(&r.output), &r, now.as_ref())
                }
                Waited::Done(Err(e)) => tool_error(e),
                Waited::Cancelled => cancelled("waiting"),
            });
        }
        self.wait_any(p, timeout, budget, &ctx).await
    }

    #[tool(
        description = "Find a regex in your processes' output without reading all of it: the matching lines with their line numbers, context lines, and the cursor to `read` from. Use it to find the error, the URL, the failing test in a long log.",
        annotations(read_only_hint = true)
    )]
    async fn search(
        &self,
        Parameters(p): Parameters<SearchParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut ids = Vec::new();
        for arg in p.session_ids.iter().flatten() {
            match self.id_of(arg).await {
                Ok(id) => ids.push(id),
                Err(e) => return Ok(tool_error(e)),
            }
        }
        let key = ids.is_empty().then(|| self.key.clone());
        let context = Some(p.context.unwrap_or(2));
        let since = match p.since.as_deref().map(crate::base::time_of).transpose() {
            Ok(since) => since,
            Err(e) => return Ok(failed(format!("since: {e}"))),
        };
        let r = self
            .client()
            .await
            .search(
                p.pattern,
                Some(ids).filter(|i| !i.is_empty()),
                key,
                p.ignore_case,
                context,
                context,
                None,
                None,
                since,
                None,
                Some(p.max_matches.unwrap_or(50)),
                None,
                None,
            )
            .await;
        Ok(match r {
            Ok(r) => {
                let summary = format!(
                    "{} match(es) in {} process(es) ({} bytes searched){}:",
                    r.total,
                    r.sessions_searched,
                    r.bytes_scanned,
                    match r.truncated {
                        true => format!("; the first {} shown", r.matches.len()),
                        false => String::new(),
                    }
                );
                let body = crate::render::as_grep(&r, false, true);
                answer(
                    summary,
                    Some(&body).filter(|b| !b.is_empty()).map(|b| b.as_str()),
                    &r,
                    None,
                )
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Stop a process and everything it started (SIGTERM, then SIGKILL after grace_s).",
        annotations(destructive_hint = true)
    )]
    async fn kill(
        &self,
        Parameters(p): Parameters<KillParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match self.id_of(&p.session_id).await {
            Ok(id) => id,
            Err(e) => return Ok(tool_error(e)),
        };
        let signal = p.signal.map(SignalSpec::Name);
        let r = self
            .client()
            .await
            .kill(
                id,
                signal,
                p.grace_s.map(GraceS::new),
                Some("mcp.kill".into()),
            )
            .await;
        Ok(match r {
            Ok(r) => {
                let summary = match r.status {
                    procd_proto::KillStatus::Killed => {
                        format!("{}: killed ({}).", r.session_id, exit_words(&r.exit))
                    }
                    procd_proto::KillStatus::Removed => {
                        format!("{}: removed from its queue; it never ran.", r.session_id)
                    }
                    procd_proto::KillStatus::AlreadyExited => format!(
                        "{}: had already exited ({}).",
                        r.session_id,
                        exit_words(&r.exit)
                    ),
                    procd_proto::KillStatus::Error => format!(
                        "{}: {} — still alive: {:?}. Try again with signal \"KILL\".",
                        r.session_id,
                        r.error.clone().unwrap_or_default(),
                        r.survivors
                    ),
                };
                answer(summary, None, &r, None)
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Send one signal to a process's group without killing it, e.g. \"INT\" to interrupt like Ctrl-C.",
        annotations(destructive_hint = true)
    )]
    async fn signal(
        &self,
        Parameters(p): Parameters<SignalParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match self.id_of(&p.session_id).await {
            Ok(id) => id,
            Err(e) => return Ok(tool_error(e)),
        };
        let r = self
            .client()
            .await
            .signal(id, SignalSpec::Name(p.signal))
            .await;
        Ok(match r {
            Ok(r) => {
                let summary = format!(
                    "{}: sent {} to {} process(es).",
                    r.session_id, r.signal, r.delivered
                );
                answer(summary, None, &r, None)
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Who listens on a TCP port: a process procd runs (its id, name, cwd and command), another process of this user's (pid, command, cwd), or another user's. Ask before starting a server on a port, or before trusting that the server answering there runs your code.",
        annotations(read_only_hint = true)
    )]
    async fn port(
        &self,
        Parameters(p): Parameters<PortParams>,
    ) -> Result<CallToolResult, ErrorData> {
        // Checked by the wire's own rule (procd_proto::Port), as the
        // daemon checks it.
        let port = match serde_json::from_value::<procd_proto::Port>(json!(p.port)) {
            Ok(port) => port,
            Err(e) => return Ok(failed(e.to_string())),
        };
        let r = match self.client().await.port(port).await {
            Ok(r) => r,
            Err(e) => return Ok(tool_error(e)),
        };
        let summary = match r.owner {
            procd_proto::PortOwner::Session => format!(
                "{}. Use that session (read or restart it) rather than starting another server there.",
                crate::render::port_owner(&r)
            ),
            _ => format!("{}.", crate::render::port_owner(&r)),
        };
        Ok(answer(summary, None, &r, None))
    }

    #[tool(
        description = "List background processes: id, status, exit code, command, ports, readiness, whether it waits for input, and the last lines of output.",
        annotations(read_only_hint = true)
    )]
    async fn list(
        &self,
        Parameters(p): Parameters<ListParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let filter = match p.status.as_deref() {
            Some("running") => Some(ListFilter::Running),
            Some("exited") => Some(ListFilter::Exited),
            _ => None,
        };
        // A page, so that a daemon with thousands of sessions does not
        // fill the model's context.
        let limit = p
            .limit
            .map_or(MCP_LIST_PAGE, |l| u32::try_from(l).unwrap_or(u32::MAX));
        let client = self.client().await;
        let call = client.list(
            None,
            None,
            filter,
            None,
            Some(ListLimit::new(limit)),
            p.after,
        );
        let r = match call.await {
            Ok(r) => r,
            Err(e) => return Ok(tool_error(e)),
        };
        let mut lines = Vec::new();
        for e in &r.processes {
            let status = match (e.status, e.exit_code, &e.queue) {
                (procd_proto::SessionStatus::Running, _, _) => "running".to_string(),
                (procd_proto::SessionStatus::Queued, _, Some(q)) => crate::render::queued(q),
                (_, Some(c), _) => format!("exited {c}"),
                _ => "exited".to_string(),
            };
            let mut extra = String::new();
            if !e.activity.ports.is_empty() {
                extra.push_str(&format!("  ports {:?}", e.activity.ports));
            }
            if e.activity.ready == Some(true) {
                extra.push_str("  ready");
            }
            if e.activity.waiting_for_input {
                let prompt = e.activity.prompt.as_deref().unwrap_or_default();
                extra.push_str(&format!("  WAITING FOR INPUT at {prompt:?}"));
            }
            lines.push(format!("{}  {status}{extra}  {}", e.session_id, e.command));
        }
        let summary = match &r.next_after {
            Some(next) => format!(
                "{} process(es); more follow: call list with after={next:?} for the next page.",
                r.processes.len()
            ),
            None => format!("{} process(es).", r.processes.len()),
        };
        Ok(answer(summary, Some(&lines.join("\n")), &r, None))
    }

    #[tool(
        description = "Start a project's dev stack from its procd.toml (or Procfile): every service that is not running yet, in dependency order, each once what it depends on is started, ready or completed. Services already running are left alone, so calling it again is safe. Returns when the started services are ready (or wait_s ends), with one line per service. The services keep running after this agent disconnects; stop them with `down`.",
        annotations(destructive_hint = false)
    )]
    async fn up(
        &self,
        Parameters(p): Parameters<UpParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let services = match service_names(p.services) {
            Ok(s) => s,
            Err(e) => return Ok(failed(format!("Invalid arguments: {e}"))),
        };
        let (file, dir) = match (self.local, p.file) {
            (false, file) => (file, p.dir),
            (true, Some(file)) => (crate::base::cwd_from_here(Some(file)), None),
            (true, None) => (None, crate::base::cwd_from_here(p.dir)),
        };
        // Without wait_s the daemon's default applies.
        let wait = p.wait_s.map(|s| YieldMs::new(s.max(0.0) * 1000.0));
        let client = self.client().await;
        let awaited = Awaited {
            what: "the stack's services to be ready".into(),
            sessions: &[],
        };
        let call = client.up(file, dir, services, wait);
        Ok(match self.awaiting(&ctx, awaited, call).await {
            Waited::Done(Ok(r)) => {
                let lines: Vec<String> = r
                    .services
                    .iter()
                    .map(|s| {
                        format!(
                            "{}: {}",
                            s.name,
                            serde_json::to_string(s).unwrap_or_default()
                        )
                    })
                    .collect();
                let summary = format!("Project {} ({}):", r.project, r.file);
                answer(summary, Some(&lines.join("\n")), &r, None)
            }
            Waited::Done(Err(e)) => tool_error(e),
            Waited::Cancelled => cancelled("starting the stack"),
        })
    }

    #[tool(
        description = "Stop a project's services (all, or the named ones), dependents first.",
        annotations(destructive_hint = true)
    )]
    async fn down(
        &self,
        Parameters(p): Parameters<DownParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let (project, services) = match (
            procd_proto::ProjectName::parse(&p.project),
            service_names(p.services),
        ) {
            (Ok(project), Ok(services)) => (project, services),
            (Err(e), _) | (_, Err(e)) => return Ok(failed(format!("Invalid arguments: {e}"))),
        };
        Ok(match self.client().await.down(project, services).await {
            Ok(r) => {
                let summary = if r.services.is_empty() {
                    format!("Nothing of {} was running.", r.project)
                } else {
                    let stopped: Vec<String> = r
                        .services
                        .iter()
                        .map(|s| format!("{} ({}): {:?}", s.name, s.session_id, s.status))
                        .collect();
                    format!("Stopped {}: {}", r.project, stopped.join(", "))
                };
                answer(summary, None, &r, None)
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Take your queued notifications: your processes that finished (those started with notify), watch-pattern matches, servers that became ready (or did not in time), and processes waiting for input. Another agent's are never shown to you. Call between turns.",
        annotations(read_only_hint = true)
    )]
    async fn notifications(
        &self,
        Parameters(_p): Parameters<NotificationsParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let owned = Some(self.owned_keys.clone()).filter(|k| !k.is_empty());
        let drained = self
            .client()
            .await
            .drain_notifications(Some(self.key.clone()), owned)
            .await;
        Ok(match drained {
            Ok(r) => {
                let texts: Vec<&str> = r.events.iter().filter_map(|e| e.text()).collect();
                let summary = match texts.len() {
                    0 => "No notifications.".to_string(),
                    n => format!("{n} notification(s):"),
                };
                let body = texts.join("\n");
                answer(
                    summary,
                    Some(&body).filter(|b| !b.is_empty()).map(|b| b.as_str()),
                    &r,
                    None,
                )
            }
            Err(e) => change_error(
                e,
                "The notifications it took may be lost: call `list` to see which processes ended.",
            ),
        })
    }
}
