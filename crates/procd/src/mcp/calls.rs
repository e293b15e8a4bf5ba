//! What the tools ask of the daemon beyond a single call: a spawn's
//! params checked, a write and what it brings, the check that sessions
//! are this agent's, and a wait over several sessions.

use super::params::{ReadyParams, StartParams, WaitParams, WriteParams};
use super::progress::{Awaited, Waited};
use super::said::{answer, change_error, exit_words, failed, tool_error, Now};
use super::tools::{cancelled, DEFAULT_BUDGET, DEFAULT_START_YIELD_MS, DEFAULT_WRITE_YIELD_MS};
use super::ProcdMcp;
use procd_client::ProcdApiClient;
use procd_proto::{MaxOutputChars, StdinMode, TimeoutS, YieldMs};
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

impl ProcdMcp {
    /// `start`'s params as the daemon takes them, checked.
    pub(super) fn spawn_params(&self, p: StartParams) -> Result<procd_proto::SpawnParams, String> {
        let budget = p.max_output_chars.unwrap_or(DEFAULT_BUDGET);
        let ready = p.ready.as_ref().map(ReadyParams::to_wire).transpose()?;
        let name = p
            .name
            .as_deref()
            .map(procd_proto::SessionName::parse)
            .transpose()?;
        let restart = match p.restart.as_deref().map(procd_proto::RestartPolicy::parse) {
            None => None,
            Some(Ok(policy)) => Some(procd_proto::RestartSpec {
                policy,
                max_restarts: None,
                backoff_s: None,
                reset_after_s: None,
            }),
            Some(Err(e)) => return Err(format!("restart: {e}")),
        };
        let sandbox = match p.sandbox.as_deref().map(procd_proto::SandboxProfile::parse) {
            None => None,
            Some(Ok(profile)) => Some(procd_proto::SandboxSpec::Profile(profile)),
            Some(Err(e)) => return Err(format!("sandbox: {e}")),
        };
        Ok(procd_proto::SpawnParams {
            name,
            restart,
            sandbox,
            junit: p.junit,
            replace: p.replace,
            command: p.command,
            cwd: match self.local {
                true => crate::base::cwd_from_here(p.cwd),
                false => p.cwd,
            },
            env: p.env,
            pty: p.pty,
            owner: self.owner.clone(),
            session_key: Some(self.key.clone()),
            persist: p.persist,
            // With pushes on, an agent hears of every end by default.
            notify_on_complete: p.notify.or(self.channel.then_some(true)),
            watch_patterns: p.watch,
            timeout_s: p.timeout_s.map(TimeoutS::new),
            stdin: Some(StdinMode::Pipe).filter(|_| p.pty != Some(true)),
            yield_ms: Some(YieldMs::new(p.yield_ms.unwrap_or(DEFAULT_START_YIELD_MS))),
            max_output_chars: Some(MaxOutputChars::new(budget)),
            ready,
            port: p
                .port
                .map(serde_json::from_value::<procd_proto::PortAsk>)
                .transpose()
                .map_err(|e| e.to_string())?,
            queue: p
                .queue
                .as_deref()
                .map(procd_proto::QueueName::parse)
                .transpose()?,
            jobs: p.jobs,
            ..Default::default()
        })
    }

    /// `write`'s calls: the text (and Enter), then, with `close`, the end
    /// of input and what it brings. Errors are the tool's answer.
    pub(super) async fn type_in(
        &self,
        id: &str,
        p: &WriteParams,
    ) -> Result<procd_proto::StdinResult, CallToolResult> {
        let budget = Some(MaxOutputChars::new(
            p.max_output_chars.unwrap_or(DEFAULT_BUDGET),
        ));
        let yield_ms = Some(YieldMs::new(p.yield_ms.unwrap_or(DEFAULT_WRITE_YIELD_MS)));
        let text = p.text.clone().unwrap_or_default();
        let close = p.close.unwrap_or(false);
        // When the input is closed next, the answer is awaited after that.
        let first_yield = if close { None } else { yield_ms };
        let client = self.client().await;
        let written = if p.submit.unwrap_or(true) {
            client
                .submit_stdin(id.to_string(), text, first_yield, budget, None)
                .await
        } else {
            client
                .write_stdin(id.to_string(), text, first_yield, budget, None)
                .await
        };
        let mut r = written.map_err(|e| {
            change_error(
                e,
                "The input may have been written: `read` the output before writing it again.",
            )
        })?;
        if close && r.status == procd_proto::StdinStatus::Ok {
            client
                .close_stdin(id.to_string())
                .await
                .map_err(tool_error)?;
            // Then wait for what the end of input brings.
            if let Ok(more) = client
                .write_stdin(id.to_string(), String::new(), yield_ms, budget, None)
                .await
            {
                r = more;
            }
        }
        Ok(r)
    }

    /// A refusal if one of `ids` is another agent's (its session key is
    /// neither this agent's nor one it owns); sessions without a key (the
    /// CLI's, a script's) are anyone's to wait on.
    pub(super) async fn others(&self, ids: &[String]) -> Option<CallToolResult> {
        if ids.is_empty() {
            return None;
        }
        let client = self.client().await;
        let all = match procd_client::list_all(&client, None, None).await {
            Ok(all) => all,
            Err(e) => return Some(tool_error(e)),
        };
        let theirs = all.iter().find(|e| {
            ids.contains(&e.session_id)
                && e.session_key
                    .as_ref()
                    .is_some_and(|k| *k != self.key && !self.owned_keys.contains(k))
        })?;
        Some(failed(format!(
            "Invalid arguments: session_ids: {} is another agent's process; wait on your own (`list` shows them).",
            theirs.session_id
        )))
    }

    /// `wait` over several sessions (or all of this agent's) and
    /// conditions: the daemon's `wait_any`.
    pub(super) async fn wait_any(
        &self,
        p: WaitParams,
        timeout: Option<TimeoutS>,
        budget: Option<MaxOutputChars>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let until = match p.conditions() {
            Ok(until) => until,
            Err(e) => return Ok(failed(format!("Invalid arguments: {e}"))),
        };
        let mut ids = Vec::new();
        for arg in p.session_id.iter().chain(p.session_ids.iter().flatten()) {
            match self.id_of(arg).await {
                Ok(id) => ids.push(id),
                Err(e) => return Ok(tool_error(e)),
            }
        }
        if let Some(refusal) = self.others(&ids).await {
            return Ok(refusal);
        }
        let key = ids.is_empty().then(|| self.key.clone());
        let what = match (&key, p.output.as_deref()) {
            (Some(_), None) => "any of your processes to exit, be ready or ask for input".into(),
            (Some(_), Some(re)) => format!("any of your processes to print a line matching {re:?}, exit, be ready or ask for input"),
            (None, _) => format!("{} to exit, be ready, ask for input or print a match", ids.join(", ")),
        };
        let client = self.client().await;
        let call = client.wait_any(
            Some(ids.clone()).filter(|i| !i.is_empty()),
            key,
            until,
            p.output.clone(),
            p.cursors.clone(),
            timeout,
            budget,
            None,
        );
        let awaited = Awaited {
            what,
            sessions: &ids,
        };
        let r = match self.awaiting(ctx, awaited, call).await {
            Waited::Done(Ok(r)) => r,
            Waited::Done(Err(e)) => return Ok(tool_error(e)),
            Waited::Cancelled => return Ok(cancelled("waiting")),
        };
        let id = r.session_id.clone().unwrap_or_default();
        let now = match r.status {
            Some(procd_proto::SessionStatus::Running) => self.now(&id).await,
            _ => None,
        };
        let words = now.as_ref().map(Now::words).unwrap_or_default();
        let happened = match r.condition {
            procd_proto::WaitAnyOutcome::Timeout => format!(
                "Nothing happened within the timeout ({} s); waited on {}.",
                r.waited_ms / 1000,
                r.cursors.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
            procd_proto::WaitAnyOutcome::Exit => format!("{id} {}.", exit_words(&r.exit)),
            procd_proto::WaitAnyOutcome::Ready => format!("{id} is ready{words}."),
            procd_proto::WaitAnyOutcome::Input => format!(
                "{id} is WAITING FOR INPUT at {:?}: answer with `write`{words}.",
                r.prompt.as_deref().unwrap_or_default()
            ),
            procd_proto::WaitAnyOutcome::Output => format!(
                "{id} printed a matching line: {:?}{words}.",
                r.line.as_deref().unwrap_or_default()
            ),
        };
        let summary = match r.next_cursor {
            Some(next) => {
                format!("{happened} Its output since the last look (next cursor {next}):")
            }
            None => happened,
        };
        let body = (!r.output.is_empty()).then_some(r.output.as_str());
        Ok(answer(summary, body, &r, now.as_ref()))
    }
}
