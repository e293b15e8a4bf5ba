//! `procd wait --any`: one wait over several sessions (or every running
//! one of a session key) for the first exit, readiness, prompt or output
//! line that matches, through the daemon's `wait_any`. Exits as the
//! session did for an exit, 0 for the others, 124 at the timeout.

use crate::base::{wait_exit_code, EXIT_OK, EXIT_USAGE, EXIT_WAIT_TIMEOUT};
use jsonrpsee::core::client::{Client, Error as ClientError};
use procd_client::ProcdApiClient;
use procd_proto::{parse_param, TimeoutS, WaitAnyOutcome, WaitAnyResult, WaitCondition};
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    /// The session to wait for (an id, a prefix or a name); with --any,
    /// any number of them.
    #[arg(required_unless_present = "key")]
    pub ids: Vec<String>,
    /// Give up after this many seconds (default: the daemon's max_wait_s).
    #[arg(long, value_parser = parse_param::<TimeoutS>, value_name = "S")]
    pub timeout: Option<TimeoutS>,
    /// Wait for the first of several events over several sessions.
    #[arg(long)]
    pub any: bool,
    /// With --any: every running session started with this session key.
    #[arg(long, value_name = "KEY", requires = "any")]
    pub key: Option<String>,
    /// With --any: what to wait for, comma-separated: exit, ready, input,
    /// output (default: exit, ready, input; and output with --output).
    #[arg(long, value_delimiter = ',', value_name = "WHAT", requires = "any")]
    pub until: Vec<String>,
    /// With --any: a regex; a new output line that matches ends the wait.
    #[arg(long, value_name = "REGEX", requires = "any")]
    pub output: Option<String>,
}

pub async fn wait_any(
    args: &WaitArgs,
    json: bool,
    conn: &procd_client::Reconnecting,
) -> Result<i32, ClientError> {
    let mut until = Vec::new();
    for name in &args.until {
        match serde_json::from_value::<WaitCondition>(serde_json::json!(name)) {
            Ok(c) => until.push(c),
            Err(_) => {
                eprintln!("procd wait: --until: unknown condition {name:?} (exit, ready, input or output)");
                return Ok(EXIT_USAGE);
            }
        }
    }
    let client = conn
        .get()
        .await
        .map_err(|e| ClientError::Transport(e.into()))?;
    let mut ids = Vec::new();
    for arg in &args.ids {
        ids.push(procd_client::resolve_session(&client, arg).await?);
    }
    // A call repeated after a reconnect asks for what is left of the
    // timeout, so that --timeout bounds the whole command.
    let began = tokio::time::Instant::now();
    let r = conn
        .call(|c: Arc<Client>| {
            let ids = Some(ids.clone()).filter(|i| !i.is_empty());
            let until = Some(until.clone()).filter(|u| !u.is_empty());
            let timeout = args.timeout.map(|t| {
                let rest = t.duration().saturating_sub(began.elapsed());
                TimeoutS::new(rest.as_secs_f64().max(0.001))
            });
            let (key, output) = (args.key.clone(), args.output.clone());
            async move {
                c.wait_any(ids, key, until, output, None, timeout, None, None)
                    .await
            }
        })
        .await?;
    match json {
        true => println!("{}", serde_json::to_string(&r).unwrap_or_default()),
        false => print!("{}", said(&r)),
    }
    Ok(match r.condition {
        WaitAnyOutcome::Exit => wait_exit_code(r.exit.as_ref().and_then(|e| e.exit_code)),
        WaitAnyOutcome::Timeout => EXIT_WAIT_TIMEOUT,
        _ => EXIT_OK,
    })
}

/// What happened, on one line, then the session's output since the wait
/// began.
fn said(r: &WaitAnyResult) -> String {
    let id = r.session_id.as_deref().unwrap_or("-");
    let line = match r.condition {
        WaitAnyOutcome::Exit => match r.exit.as_ref().and_then(|e| e.exit_code) {
            Some(code) => format!("{id}: exited with code {code}"),
            None => format!("{id}: exited"),
        },
        WaitAnyOutcome::Ready => format!("{id}: ready, listening on {:?}", r.ports),
        WaitAnyOutcome::Input => format!(
            "{id}: waiting for input: {:?}",
            r.prompt.as_deref().unwrap_or_default()
        ),
        WaitAnyOutcome::Output => format!(
            "{id}: output matched: {}",
            r.line.as_deref().unwrap_or_default()
        ),
        WaitAnyOutcome::Timeout => format!(
            "timeout: nothing happened to {} in {} ms",
            r.cursors.keys().cloned().collect::<Vec<_>>().join(", "),
            r.waited_ms
        ),
    };
    let mut out = format!("{line}\n");
    out.push_str(&r.output);
    if !r.output.is_empty() && !r.output.ends_with('\n') {
        out.push('\n');
    }
    out
}
