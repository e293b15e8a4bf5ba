//! The `shell` tool: the agent's own shell (docs/shells.md), opened on
//! first use where `procd mcp` runs, owned by its lease. Commands run in
//! it one after another and keep its cwd, variables, functions, aliases
//! and an activated venv; each answer is the command's own output and
//! exact exit code.

use super::params::ShellParams;
use super::said::{answer, failed, tool_error};
use super::ProcdMcp;
use jsonrpsee::core::client::Error as ClientError;
use procd_client::ProcdApiClient;
use procd_proto::{CommandStatus, MaxOutputChars, ShellCommandResult, TimeoutS, YieldMs};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router, ErrorData};

/// How long a command is waited for before the answer says it runs on:
/// under the 60 s after which clients that ignore progress give up.
const DEFAULT_YIELD_MS: f64 = 50_000.0;

#[tool_router(router = shell_router, vis = "pub(super)")]
impl ProcdMcp {
    #[tool(
        description = "Run a command in your own persistent bash shell, like a terminal that stays open: cd, exported and plain variables, functions, aliases, set -o options and an activated venv carry over between calls. Returns the command's own output, its exact exit code and the shell's cwd after it. One command runs at a time. A command that asks for input says WAITING FOR INPUT: answer with `write` on the shell's session_id. For dev servers and other processes that keep running, use `start` instead.",
        annotations(destructive_hint = true, open_world_hint = true)
    )]
    async fn shell(
        &self,
        Parameters(p): Parameters<ShellParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let budget = Some(MaxOutputChars::new(
            p.max_output_chars.unwrap_or(super::tools::DEFAULT_BUDGET),
        ));
        let (shell_id, running) = match self.own_shell().await {
            Ok(shell) => shell,
            Err(e) => return Ok(tool_error(e)),
        };
        let client = self.client().await;
        let r = match (&p.command, p.command_id, p.interrupt.unwrap_or(false), running) {
            // Not queued behind it: a command waiting for input may never
            // end, and the call would then never be answered.
            (Some(_), None, false, Some(n)) => return Ok(failed(busy(&shell_id, n))),
            (Some(command), None, false, None) => {
                // Nor behind one another call is sending (parallel calls).
                let Some(_sending) = self.shell_sending.try_take(1) else {
                    return Ok(failed(SENDING.into()));
                };
                let timeout = p.timeout_s.map(TimeoutS::new);
                let wait = YieldMs::new(p.yield_ms.unwrap_or(DEFAULT_YIELD_MS));
                client.shell_run(shell_id, command.clone(), Some(wait), timeout, budget, None).await
            }
            (None, Some(n), true, _) => client.shell_interrupt(shell_id, Some(n), budget, None).await,
            (None, Some(n), false, _) => {
                let wait = TimeoutS::new(p.yield_ms.unwrap_or(DEFAULT_YIELD_MS) / 1000.0);
                client.shell_wait(shell_id, Some(n), Some(wait), budget, None).await
            }
            _ => {
                return Ok(failed(
                    "Invalid arguments: give `command` to run one, or `command_id` (with `interrupt: true` to stop it) for an earlier one.".into(),
                ))
            }
        };
        Ok(match r {
            Ok(r) => answer(summary(&r), Some(&r.output), &r, None),
            Err(e) => tool_error(e),
        })
    }
}

impl ProcdMcp {
    /// This agent's shell: the one it opened, or a new one when that one
    /// has ended (an `exit`); with the command still running in it, if
    /// one is.
    async fn own_shell(&self) -> Result<(String, Option<u64>), ClientError> {
        let mut shell = self.shell.lock().await;
        let client = self.client().await;
        if let Some(id) = shell.as_ref() {
            if let Ok(listed) = client.shell_commands(id.clone()).await {
                if listed.open {
                    let running = listed
                        .commands
                        .iter()
                        .rev()
                        .find(|c| c.status == CommandStatus::Running)
                        .map(|c| c.command_id);
                    return Ok((id.clone(), running));
                }
            }
        }
        let cwd = match self.local {
            true => crate::base::cwd_from_here(None),
            false => None,
        };
        let opened = client
            .shell_open(
                None,
                cwd,
                None,
                None,
                None,
                self.owner.clone(),
                Some(self.key.clone()),
                None,
            )
            .await?;
        *shell = Some(opened.shell_id.clone());
        Ok((opened.shell_id, None))
    }
}

/// What a command sent while another call's command is on its way is told.
const SENDING: &str = "Not run: another `shell` call's command is on its way to your shell, and one command runs at a time. Send this command again once that call has answered.";

/// What a command sent while command `n` still runs is told.
fn busy(shell_id: &str, n: u64) -> String {
    format!(
        "Not run: command {n} still runs in your shell, and one command runs at a time. If it is WAITING FOR INPUT, answer with `write` on session_id {shell_id}; call `shell` with command_id {n} to wait for it, or with command_id {n} and interrupt: true to stop it; then send this command again."
    )
}

/// The answer's sentence.
fn summary(r: &ShellCommandResult) -> String {
    let n = r.command_id;
    let cwd = r
        .cwd
        .as_deref()
        .map(|c| format!(" (cwd {c})"))
        .unwrap_or_default();
    let took = r
        .duration_ms
        .map(|ms| format!(" in {ms} ms"))
        .unwrap_or_default();
    let code = r.exit_code.map_or("unknown".to_string(), |c| c.to_string());
    match r.status {
        CommandStatus::Running if r.waiting_for_input => format!(
            "Command {n} is WAITING FOR INPUT: answer with `write` on session_id {}, then call `shell` with command_id {n}. Output so far:",
            r.shell_id
        ),
        CommandStatus::Running => format!(
            "Command {n} still runs: call `shell` with command_id {n} to wait for it (interrupt: true to stop it). Output so far:"
        ),
        CommandStatus::Exited => format!("Command {n} exited with code {code}{took}{cwd}. Output:"),
        CommandStatus::Interrupted => format!(
            "Command {n} was interrupted ({}), exit code {code}{took}{cwd}; the shell stays. Output:",
            r.ended_by.as_deref().unwrap_or("SIGINT")
        ),
        CommandStatus::TimedOut => format!(
            "Command {n} ran past its timeout and was stopped ({}), exit code {code}{took}{cwd}; the shell stays. Output:",
            r.ended_by.as_deref().unwrap_or("SIGINT")
        ),
        CommandStatus::ShellExited => format!(
            "The shell ended during command {n} (exit code {code}); the next command opens a new shell, without the old one's state. Output:"
        ),
    }
}
