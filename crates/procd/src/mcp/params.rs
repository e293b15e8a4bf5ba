//! The tools' parameters as the model sees them: each field's description
//! is what the MCP client shows the model.

use rmcp::schemars;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// What every tool that returns output says of its budget.
macro_rules! budget {
    () => {
        concat!(procd_proto::describe!(max_output_chars), " Default 20000.")
    };
}

/// What every tool that takes a session says of its id: the tools take a
/// prefix or a name too (`procd_client::resolve_session`).
macro_rules! session {
    () => {
        concat!(
            procd_proto::describe!(session_id),
            " Or a unique prefix of 4+ hex characters, or the name it was started with."
        )
    };
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct StartParams {
    #[schemars(description = procd_proto::describe!(command))]
    pub command: String,
    #[schemars(description = concat!(procd_proto::describe!(cwd), " A relative path is taken from the directory procd mcp runs in (normally the project). Default: that directory."))]
    pub cwd: Option<String>,
    #[schemars(description = concat!(procd_proto::describe!(pty), " Default false."))]
    pub pty: Option<bool>,
    #[schemars(description = procd_proto::describe!(env))]
    pub env: Option<BTreeMap<String, String>>,
    #[schemars(description = concat!(procd_proto::describe!(yield_ms), " Default 10000; 0 returns at once."))]
    pub yield_ms: Option<f64>,
    #[schemars(description = concat!(procd_proto::describe!(persist), " Default false: it is ended with the agent."))]
    pub persist: Option<bool>,
    #[schemars(description = concat!(procd_proto::describe!(notify_on_complete), " See the notifications tool. Default false."))]
    pub notify: Option<bool>,
    #[schemars(description = procd_proto::describe!(watch_patterns))]
    pub watch: Option<Vec<String>>,
    #[schemars(description = procd_proto::describe!(timeout_s))]
    pub timeout_s: Option<f64>,
    #[schemars(description = budget!())]
    pub max_output_chars: Option<u64>,
    #[schemars(description = concat!(procd_proto::describe!(ready), " E.g. {\"port\": 3000} or {\"output\": \"ready in\"} or {\"http\": \"http://localhost:3000/\"}."))]
    pub ready: Option<ReadyParams>,
    #[schemars(description = concat!(procd_proto::describe!(name), " E.g. \"web\"."))]
    pub name: Option<String>,
    #[schemars(description = procd_proto::describe!(replace))]
    pub replace: Option<bool>,
    #[schemars(description = concat!(procd_proto::describe!(restart), " Same id and log; after 5 quick restarts in a row it ends as crash_loop."))]
    pub restart: Option<String>,
    #[schemars(description = concat!(procd_proto::describe!(sandbox), " A write elsewhere fails with EACCES."))]
    pub sandbox: Option<String>,
    #[schemars(description = concat!(procd_proto::describe!(junit), " Output of cargo test, nextest, pytest, jest, vitest, node --test and go test is read without it."))]
    pub junit: Option<String>,
    #[schemars(description = concat!(procd_proto::describe!(port), " With ready {\"port\": \"auto\"} it is ready once it listens there."))]
    pub port: Option<Value>,
    #[schemars(description = concat!(procd_proto::describe!(queue), " For builds and test runs that would overload the machine together."))]
    pub queue: Option<String>,
    #[schemars(description = procd_proto::describe!(jobs))]
    pub jobs: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct UpParams {
    #[schemars(
        description = "The project directory holding procd.toml (or a Procfile); a relative path is taken from the directory procd mcp runs in. Default: that directory."
    )]
    pub dir: Option<String>,
    #[schemars(description = "A stack file instead of a directory.")]
    pub file: Option<String>,
    #[schemars(description = "Only these services (and what they depend on). Default: all.")]
    pub services: Option<Vec<String>>,
    #[schemars(description = "Seconds to wait for the started services to be ready. Default 60.")]
    pub wait_s: Option<f64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct DownParams {
    #[schemars(description = "The project, as `up` named it.")]
    pub project: String,
    #[schemars(description = "Only these services. Default: all of the project.")]
    pub services: Option<Vec<String>>,
}

/// Names a model gave, checked.
pub fn service_names(
    services: Option<Vec<String>>,
) -> Result<Option<Vec<procd_proto::SessionName>>, String> {
    services
        .map(|v| {
            v.iter()
                .map(|s| procd_proto::SessionName::parse(s))
                .collect()
        })
        .transpose()
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ReadyParams {
    #[schemars(description = procd_proto::describe!(ready_output))]
    pub output: Option<String>,
    #[schemars(description = procd_proto::describe!(ready_port))]
    pub port: Option<Value>,
    #[schemars(description = procd_proto::describe!(ready_http))]
    pub http: Option<String>,
    #[schemars(description = procd_proto::describe!(ready_timeout_s))]
    pub timeout_s: Option<f64>,
}

impl ReadyParams {
    pub fn to_wire(&self) -> Result<procd_proto::ReadySpec, String> {
        let port = match &self.port {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s == "any" => {
                Some(procd_proto::ReadyPort::Any(procd_proto::AnyPort::Any))
            }
            Some(Value::String(s)) if s == "auto" => {
                Some(procd_proto::ReadyPort::Any(procd_proto::AnyPort::Auto))
            }
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Some(procd_proto::ReadyPort::Number(n)),
                None => return Err(format!("ready.port: a port number or \"any\", got {v}")),
            },
        };
        Ok(procd_proto::ReadySpec {
            output: self.output.clone(),
            port,
            http: self.http.clone(),
            timeout_s: self.timeout_s,
        })
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ReadParams {
    #[schemars(description = session!())]
    pub session_id: String,
    #[schemars(description = concat!(procd_proto::describe!(cursor), " Default 0."))]
    pub cursor: Option<u64>,
    #[schemars(description = concat!(procd_proto::describe!(wait_ms), " Default 0."))]
    pub wait_ms: Option<f64>,
    #[schemars(description = budget!())]
    pub max_output_chars: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WriteParams {
    #[schemars(description = session!())]
    pub session_id: String,
    #[schemars(description = "Text to type into the process's input.")]
    pub text: Option<String>,
    #[schemars(description = "Press Enter after the text. Default true.")]
    pub submit: Option<bool>,
    #[schemars(
        description = "Then end the input (EOF), for programs that read until end of input. Default false."
    )]
    pub close: Option<bool>,
    #[schemars(
        description = "Milliseconds to wait for the answer before returning the output produced after the write. Default 2000."
    )]
    pub yield_ms: Option<f64>,
    #[schemars(description = budget!())]
    pub max_output_chars: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WaitParams {
    #[schemars(
        description = "Session id to wait for. Without it (and without session_ids), wait on all of your running processes at once."
    )]
    pub session_id: Option<String>,
    #[schemars(
        description = "Several sessions to wait on at once: the first event of any of them ends the wait."
    )]
    pub session_ids: Option<Vec<String>>,
    #[schemars(
        description = "What to wait for, any of \"exit\", \"ready\" (a server met its ready condition), \"input\" (it asks a question), \"output\" (a line matches `output`). Default: exit only for one session_id, else exit, ready and input (and output when `output` is given)."
    )]
    pub until: Option<Vec<String>>,
    #[schemars(
        description = "Regex: wake when a new output line matches it, e.g. \"error|FAILED\" or \"listening on\"."
    )]
    pub output: Option<String>,
    #[schemars(
        description = "Output cursors per session from a previous wait's `cursors`: output is looked at from there. Default: from now."
    )]
    pub cursors: Option<BTreeMap<String, u64>>,
    #[schemars(
        description = "Seconds to wait. Default 50 (under clients' tool time limits; progress is sent while waiting), at most 600."
    )]
    pub timeout_s: Option<f64>,
    #[schemars(description = budget!())]
    pub max_output_chars: Option<u64>,
}

impl WaitParams {
    /// The conditions by name, checked.
    pub fn conditions(&self) -> Result<Option<Vec<procd_proto::WaitCondition>>, String> {
        self.until
            .as_ref()
            .map(|names| {
                names
                    .iter()
                    .map(|name| {
                        serde_json::from_value(Value::String(name.clone())).map_err(|_| {
                            format!(
                                "until: unknown condition {name:?} (exit, ready, input or output)"
                            )
                        })
                    })
                    .collect()
            })
            .transpose()
    }

    /// Whether this is a plain wait for one session's exit.
    pub fn is_one_exit(&self) -> bool {
        self.session_id.is_some()
            && self.session_ids.is_none()
            && self.output.is_none()
            && self.cursors.is_none()
            && self
                .until
                .as_ref()
                .is_none_or(|u| u.iter().all(|c| c == "exit"))
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct KillParams {
    #[schemars(description = session!())]
    pub session_id: String,
    #[schemars(description = procd_proto::describe!(signal))]
    pub signal: Option<String>,
    #[schemars(description = concat!(procd_proto::describe!(grace_s), " Default 2."))]
    pub grace_s: Option<f64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SignalParams {
    #[schemars(description = session!())]
    pub session_id: String,
    #[schemars(description = "Signal to deliver once, e.g. \"INT\" (Ctrl-C), \"TERM\", \"HUP\".")]
    pub signal: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PortParams {
    #[schemars(description = "A TCP port, 1 to 65535.")]
    pub port: u32,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ListParams {
    #[schemars(description = "\"running\", \"exited\" or \"all\" (default).")]
    pub status: Option<String>,
    #[schemars(description = "At most this many processes (1 to 10000). Default 100.")]
    pub limit: Option<u64>,
    #[schemars(
        description = "The page after this process id: the id a listing that was cut names for the next page."
    )]
    pub after: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct NotificationsParams {}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SearchParams {
    #[schemars(
        description = "Regex to find in each output line, e.g. \"error|FAILED\" or \"listening on\"."
    )]
    pub pattern: String,
    #[schemars(description = "Sessions to search (ids or names). Default: all of yours.")]
    pub session_ids: Option<Vec<String>>,
    #[schemars(description = "Match without regard to case. Default false.")]
    pub ignore_case: Option<bool>,
    #[schemars(description = "Lines of context before and after each match (0 to 20). Default 2.")]
    pub context: Option<u32>,
    #[schemars(description = "Most matches to return (all are counted). Default 50.")]
    pub max_matches: Option<u64>,
    #[schemars(
        description = "Only output written since then: a time ago (\"30s\", \"5m\", \"2h\") or an RFC 3339 time."
    )]
    pub since: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ShellParams {
    #[schemars(
        description = "The command, run in your shell (bash): `cd`, `export`, variables, functions, aliases and `source .venv/bin/activate` carry over to the next command. Leave it out with command_id to wait for, or interrupt, an earlier command."
    )]
    pub command: Option<String>,
    #[schemars(
        description = "An earlier command's id (from an answer that said it still runs): wait for it, or interrupt it."
    )]
    pub command_id: Option<u64>,
    #[schemars(
        description = "Interrupt the command named by command_id (Ctrl-C); the shell stays."
    )]
    pub interrupt: Option<bool>,
    #[schemars(
        description = "Interrupt the command after this many seconds (then kill it if it ignores that)."
    )]
    pub timeout_s: Option<f64>,
    #[schemars(
        description = "How long to wait for the command before answering that it still runs. Default 50000."
    )]
    pub yield_ms: Option<f64>,
    #[schemars(description = budget!())]
    pub max_output_chars: Option<u64>,
}
