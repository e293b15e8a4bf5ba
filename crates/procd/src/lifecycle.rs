//! `procd start|stop|restart|status|lease`: the daemon's lifecycle from
//! the outside (docs/operations.md). The work is procd-gateway's; this file
//! words the outcomes and picks the exit codes.

use crate::base::{EXIT_FAILED, EXIT_NOT_RUNNING, EXIT_OK};
use clap::Subcommand;
use procd_gateway::control::{self, ControlError, Launcher, Started, Stopped};
use procd_gateway::lease;
use procd_gateway::state::Liveness;
use procd_gateway::Paths;
use procd_proto::ProcdApiClient;
use serde_json::json;
use std::time::Duration;

fn say(json: bool, value: serde_json::Value, text: &str) {
    if json {
        println!("{value}");
    } else {
        println!("{text}");
    }
}

fn fail(json: bool, err: &ControlError) -> i32 {
    let reason = match err {
        ControlError::IdentityUnavailable(_) => "identity_unavailable",
        ControlError::StopTimeout(_) => "stop_timeout",
        ControlError::NotRunning => "not_running",
        ControlError::Foreground(_) => "foreground",
        ControlError::Io(_) => "error",
    };
    if json {
        println!(
            "{}",
            json!({"ok": false, "reason": reason, "message": err.to_string()})
        );
    } else {
        eprintln!("procd: {err}");
    }
    EXIT_FAILED
}

pub fn start(paths: &Paths, launcher: &Launcher, as_json: bool) -> i32 {
    match control::start_background(paths, launcher) {
        Ok(Started::Started(pid)) => {
            say(
                as_json,
                json!({"ok": true, "status": "started", "pid": pid}),
                &format!("procd started (pid {pid})"),
            );
            EXIT_OK
        }
        Ok(Started::AlreadyRunning(pid)) => {
            say(
                as_json,
                json!({"ok": true, "status": "already_running", "pid": pid}),
                &format!("procd is already running (pid {pid})"),
            );
            EXIT_OK
        }
        Ok(Started::Promoted(pid)) => {
            say(
                as_json,
                json!({"ok": true, "status": "already_running", "promoted": true, "pid": pid}),
                &format!("procd is already running (pid {pid}); it now stays up until stopped"),
            );
            EXIT_OK
        }
        Err(err) => fail(as_json, &err),
    }
}

pub fn stop(paths: &Paths, timeout: Duration, as_json: bool) -> i32 {
    match control::stop(paths, timeout) {
        Ok(Stopped::NotRunning) => {
            say(
                as_json,
                json!({"ok": true, "status": "not_running"}),
                "procd is not running",
            );
            EXIT_OK
        }
        Ok(Stopped::Stopped(pid)) => {
            say(
                as_json,
                json!({"ok": true, "status": "stopped", "pid": pid}),
                &format!("procd stopped (pid {pid})"),
            );
            EXIT_OK
        }
        Err(err) => fail(as_json, &err),
    }
}

pub fn restart(paths: &Paths, launcher: &Launcher, timeout: Duration, as_json: bool) -> i32 {
    match control::restart(paths, launcher, timeout) {
        Ok(Started::Started(pid)) => {
            say(
                as_json,
                json!({"ok": true, "status": "restarted", "pid": pid}),
                &format!("procd restarted (pid {pid})"),
            );
            EXIT_OK
        }
        Ok(other) => {
            say(
                as_json,
                json!({"ok": true, "status": format!("{other:?}")}),
                &format!("{other:?}"),
            );
            EXIT_OK
        }
        Err(err) => fail(as_json, &err),
    }
}

/// Exit 0 when running, 3 when not (as `systemctl status`).
pub fn status(paths: &Paths, as_json: bool) -> i32 {
    let liveness = control::status(paths);
    let record = match &liveness {
        Liveness::NotStarted | Liveness::Stale(_) => {
            // Something listens on the socket with no daemon recorded:
            // systemd's socket unit, which starts procd on the first
            // connection (so it is looked up, not connected to).
            let socket_active = is_listening(&paths.socket());
            say(
                as_json,
                json!({"running": false, "reason": liveness.reason(),
                       "socket": paths.socket().display().to_string(),
                       "socket_active": socket_active}),
                if socket_active {
                    "procd is not running; its socket is active: the service starts on the first request"
                } else {
                    "procd is not running"
                },
            );
            return EXIT_NOT_RUNNING;
        }
        Liveness::Running(s) | Liveness::IdentityUnavailable(s) | Liveness::Restarting(s) => {
            s.clone()
        }
    };
    // While a keeper restarts the daemon, the socket (which the keeper
    // holds) answers as soon as the new one serves.
    // Why it does not answer is kept for the message: a socket that
    // refuses this process (a sandbox without network) reads differently
    // from a daemon that hangs.
    let answer = crate::base::block_on(async {
        let client = procd_client::connect(&paths.socket())
            .await
            .map_err(|e| format!("connect: {e}"))?;
        match tokio::time::timeout(Duration::from_secs(5), client.status()).await {
            Ok(status) => status.map_err(|e| e.to_string()),
            Err(_) => Err("no answer within 5 s".to_string()),
        }
    });
    let (live, why_not) = match answer {
        Ok(status) => (Some(status), None),
        Err(why) => (None, Some(why)),
    };
    let mut value = match &live {
        Some(s) => serde_json::to_value(s).unwrap_or_default(),
        None => json!({"pid": record.pid, "launch_mode": record.launch_mode,
                       "started_at": record.started_at, "socket": record.socket}),
    };
    value["running"] = json!(true);
    value["reason"] = json!(match (&live, &liveness) {
        (Some(_), Liveness::Restarting(_)) => "running",
        _ => liveness.reason(),
    });
    let text = match &live {
        Some(s) => crate::render::status(s),
        None => format!(
            "procd is running (pid {}, {}), but its socket does not answer ({}): {}",
            record.pid,
            record.launch_mode,
            liveness.reason(),
            why_not.unwrap_or_default()
        ),
    };
    say(as_json, value, &text);
    EXIT_OK
}

/// Whether a Unix socket bound to `path` is listening in this network
/// namespace (`/proc/net/unix`: the listening flag `__SO_ACCEPTCON`).
fn is_listening(path: &std::path::Path) -> bool {
    const ACCEPTING: u32 = 1 << 16;
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return false;
    };
    let want = path.as_os_str().to_string_lossy();
    table.lines().skip(1).any(|line| {
        // Num RefCount Protocol Flags Type St Inode Path
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() >= 8
            && fields[7] == want
            && u32::from_str_radix(fields[3], 16).is_ok_and(|flags| flags & ACCEPTING != 0)
    })
}

pub fn lease(paths: &Paths, cmd: LeaseCommand, as_json: bool) -> i32 {
    let result = match cmd {
        LeaseCommand::Acquire {
            kind,
            pid,
            ephemeral,
        } => {
            let pid = pid.unwrap_or_else(|| nix::unistd::getppid().as_raw());
            lease::acquire(paths, &kind, pid).and_then(|token| {
                if ephemeral {
                    lease::mark_ephemeral(paths)?;
                }
                say(
                    as_json,
                    json!({"token": token, "pid": pid, "kind": kind}),
                    &token,
                );
                Ok(())
            })
        }
        LeaseCommand::Release { token, no_wait } => {
            procd_gateway::control::release(paths, &token, !no_wait, Duration::from_secs(20)).map(
                |r| {
                    let (status, text) = match &r {
                        lease::Released::Kept => ("released", "lease released".to_string()),
                        lease::Released::Stopped => (
                            "stopped",
                            "lease released; the on-demand daemon stopped".to_string(),
                        ),
                        lease::Released::LeftToMonitor => (
                            "left_to_monitor",
                            "lease released; the daemon stops itself when idle".to_string(),
                        ),
                        lease::Released::StopFailed(e) => (
                            "stop_failed",
                            format!("lease released, but stopping the daemon failed: {e}"),
                        ),
                    };
                    say(as_json, json!({"status": status}), &text);
                },
            )
        }
        LeaseCommand::Ephemeral => lease::mark_ephemeral(paths).map(|()| {
            say(
                as_json,
                json!({"auto_stop": true}),
                "the daemon's lifetime is on-demand",
            );
        }),
        LeaseCommand::Snapshot => lease::snapshot(paths).map(|s| {
            let text = format!(
                "{} client(s), auto_stop {}, stopping {}",
                s.clients, s.auto_stop, s.stopping
            );
            say(as_json, serde_json::to_value(&s).unwrap_or_default(), &text);
        }),
    };
    match result {
        Ok(()) => EXIT_OK,
        Err(err) => {
            eprintln!("procd: {err}");
            EXIT_FAILED
        }
    }
}

// Made when run, as the other subcommands are (`cli/args.rs`).
#[derive(Subcommand, Debug)]
#[command(defer = true)]
pub enum LeaseCommand {
    /// Record a lease for a process; prints its token.
    Acquire {
        /// What kind of client holds it (e.g. "agent").
        #[arg(long, default_value = "client")]
        kind: String,
        /// The process that holds it (default: the parent of this command).
        #[arg(long)]
        pid: Option<i32>,
        /// Also mark the daemon's lifetime on-demand.
        #[arg(long)]
        ephemeral: bool,
    },
    /// End a lease; the last client of an on-demand daemon stops it.
    Release {
        token: String,
        /// Leave the stop to the daemon's monitor instead of waiting for it.
        #[arg(long)]
        no_wait: bool,
    },
    /// Mark the daemon's lifetime on-demand (it stops when nothing is left).
    Ephemeral,
    /// Show the leases (dead or recycled holders are pruned first).
    Snapshot,
}
