//! `procd sh NAME -- 'cmd'`: a command run in the shell NAME, opened on
//! first use in the current directory (docs/shells.md). Its output is
//! printed as it comes and procd exits with the command's exit code, as
//! `procd wait` does. Ctrl-C interrupts the command, not the shell.

use crate::base::EXIT_FAILED;
use jsonrpsee::core::client::Error as ClientError;
use procd_client::ProcdApiClient;
use procd_proto::{CommandStatus, MaxBytes, ShellCommandResult, WaitMs, YieldMs};

#[derive(clap::Args, Debug)]
pub struct ShArgs {
    /// The shell's name: opened on first use, then reused.
    pub name: String,
    /// The command (its words joined with spaces, as ssh does).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Interrupt the command after this many seconds (SIGINT, then
    /// SIGKILL to its processes).
    #[arg(long, value_name = "SECONDS", value_parser = procd_proto::parse_param::<procd_proto::TimeoutS>)]
    pub timeout: Option<procd_proto::TimeoutS>,
    /// Open the shell on a terminal (only when it is opened).
    #[arg(long)]
    pub pty: bool,
}

pub async fn run(
    args: &ShArgs,
    json: bool,
    conn: &procd_client::Reconnecting,
) -> Result<i32, ClientError> {
    let client = conn
        .get()
        .await
        .map_err(|e| ClientError::Transport(e.into()))?;
    let name = procd_proto::SessionName::parse(&args.name)
        .map_err(|e| ClientError::Custom(format!("procd sh: {e}")))?;
    let cwd = std::env::current_dir()
        .ok()
        .map(|d| d.display().to_string());
    let shell = client
        .shell_open(
            Some(name),
            cwd,
            None,
            Some(args.pty),
            None,
            None,
            None,
            None,
        )
        .await?;
    let id = shell.shell_id;
    // Sent once: a run is not asked again after a reconnect.
    let started = client
        .shell_run(
            id.clone(),
            args.command.join(" "),
            Some(YieldMs::new(0.0)),
            args.timeout,
            None,
            None,
        )
        .await?;
    let end = tokio::select! {
        end = follow(conn, &id, &started, !json) => end?,
        _ = tokio::signal::ctrl_c() => {
            conn.call(|c| {
                let id = id.clone();
                async move { c.shell_interrupt(id, Some(started.command_id), None, None).await }
            })
            .await?
        }
    };
    if json {
        println!("{}", serde_json::to_string(&end).unwrap_or_default());
    }
    Ok(exit_code_of(&end))
}

/// Prints the command's output (when `print`) until it has ended and all
/// of it is printed; returns its end. Reads only: a daemon's restart is
/// ridden through.
async fn follow(
    conn: &procd_client::Reconnecting,
    id: &str,
    started: &ShellCommandResult,
    print: bool,
) -> Result<ShellCommandResult, ClientError> {
    use std::io::Write;
    let n = started.command_id;
    let mut cursor = started.from_cursor;
    loop {
        let now = conn
            .call(|c| {
                let id = id.to_string();
                async move { c.shell_read(id, Some(n), None, None).await }
            })
            .await?;
        let ended = now.status != CommandStatus::Running;
        let stop = if ended { now.to_cursor } else { u64::MAX };
        while cursor < stop {
            let want = (stop - cursor).min(1 << 20);
            let r = conn
                .call(|c| {
                    let id = id.to_string();
                    let wait = (!ended).then(|| WaitMs::new(500.0));
                    async move {
                        c.read(
                            id,
                            Some(procd_proto::Cursor::new(cursor)),
                            Some(MaxBytes::new(want)),
                            wait,
                            None,
                            None,
                        )
                        .await
                    }
                })
                .await?;
            if print && !r.data.is_empty() {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(r.data.as_bytes());
                let _ = out.flush();
            }
            let moved = r.next_cursor > cursor;
            cursor = r.next_cursor.max(cursor);
            if !moved {
                break;
            }
        }
        if ended {
            return Ok(now);
        }
    }
}

/// The command's exit code as procd's; a shell that ended with no code
/// of its own is a failure.
fn exit_code_of(end: &ShellCommandResult) -> i32 {
    match end.exit_code {
        Some(code) => crate::base::wait_exit_code(Some(code)),
        None => EXIT_FAILED,
    }
}
