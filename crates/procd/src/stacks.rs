//! `procd up` and `procd down` (docs/stacks.md): the daemon reads the
//! stack file and starts or stops; this prints one line per service.

use crate::base::{cwd_from_here, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use jsonrpsee::core::client::{Client, Error as ClientError};
use procd_client::ProcdApiClient;
use procd_proto::{
    DownResult, ProjectName, ServiceState, ServiceStatus, SessionName, UpResult, YieldMs,
};

/// `procd up`: exits 0 when every service asked for runs (ready, where a
/// condition is given) or completed, 1 when one is blocked, failed or
/// not ready by the end of the wait.
pub async fn up(
    json: bool,
    remote: bool,
    client: &Client,
    file: Option<String>,
    services: Vec<SessionName>,
    wait: Option<YieldMs>,
) -> Result<i32, ClientError> {
    // Paths are the far side's own through --host.
    let (file, dir) = match (remote, file) {
        (true, file) => (file, None),
        (false, Some(file)) => (cwd_from_here(Some(file)), None),
        (false, None) => (None, cwd_from_here(None)),
    };
    let services = (!services.is_empty()).then_some(services);
    let r = client.up(file, dir, services, wait).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
    } else {
        print!("{}", up_lines(&r));
    }
    let fine = r.services.iter().all(|s| match s.status {
        ServiceStatus::Running => s.ready != Some(false),
        ServiceStatus::Exited => s.exit_code == Some(0),
        _ => false,
    });
    Ok(if fine { EXIT_OK } else { EXIT_FAILED })
}

fn up_lines(r: &UpResult) -> String {
    let width = r.services.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for s in &r.services {
        out.push_str(&format!(
            "{:<width$}  {:<17}  {}\n",
            s.name,
            s.session_id.as_deref().unwrap_or("-"),
            service_line(s)
        ));
    }
    out
}

pub fn service_line(s: &ServiceState) -> String {
    let mut line = match s.status {
        ServiceStatus::Waiting => "waiting for its dependencies".to_string(),
        ServiceStatus::Blocked => match &s.blocked_by {
            Some(by) => format!("blocked by {}: {}", by.service, by.reason),
            None => "blocked".into(),
        },
        ServiceStatus::FailedStart => {
            format!("failed to start: {}", s.error.as_deref().unwrap_or("?"))
        }
        ServiceStatus::Running => match s.ready {
            Some(true) => "ready".into(),
            Some(false) => "started, not ready yet".into(),
            None => "started".into(),
        },
        ServiceStatus::Exited => match s.exit_code {
            Some(0) => "completed".into(),
            Some(code) => format!("exited with code {code}"),
            None => "ended".into(),
        },
    };
    if let (ServiceStatus::Running, Some(url)) = (s.status, &s.url) {
        line.push_str(&format!(" at {url}"));
    }
    if s.reused {
        line.push_str(match s.status {
            ServiceStatus::Running => " (already running)",
            _ => " (done before, not run again)",
        });
    }
    if let Some(p) = &s.port_in_use {
        line.push_str(&format!(
            "; port {} was already in use by {}",
            p.port,
            match (&p.session_id, p.pid, &p.command) {
                (Some(id), _, _) => id.clone(),
                (None, Some(pid), Some(cmd)) => format!("pid {pid} ({cmd})"),
                _ => "another user's process".into(),
            }
        ));
    }
    line
}

/// `procd down`: the project from `--project`, else from the stack file
/// (read here: its `project` key or its directory's name).
pub async fn down(
    json: bool,
    client: &Client,
    file: Option<String>,
    project: Option<ProjectName>,
    services: Vec<SessionName>,
) -> Result<i32, ClientError> {
    let project = match project_of(file, project) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("procd down: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let services = (!services.is_empty()).then_some(services);
    let r = client.down(project, services).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
    } else {
        print!("{}", down_lines(&r));
    }
    let fine = r
        .services
        .iter()
        .all(|s| s.status != procd_proto::KillStatus::Error);
    Ok(if fine { EXIT_OK } else { EXIT_FAILED })
}

fn project_of(file: Option<String>, project: Option<ProjectName>) -> Result<ProjectName, String> {
    if let Some(p) = project {
        return Ok(p);
    }
    let here = std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?;
    let stack = match &file {
        Some(f) => procd_core::stacks::stack::Stack::load(Some(f), None, &here),
        None => procd_core::stacks::stack::Stack::load(None, None, &here),
    }?;
    Ok(stack.project)
}

fn down_lines(r: &DownResult) -> String {
    if r.services.is_empty() {
        return format!("nothing of {} is running\n", r.project);
    }
    let width = r.services.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for s in &r.services {
        let what = match s.status {
            procd_proto::KillStatus::Killed => "stopped".to_string(),
            procd_proto::KillStatus::AlreadyExited => "had already exited".to_string(),
            procd_proto::KillStatus::Removed => "removed from its queue".to_string(),
            procd_proto::KillStatus::Error => {
                format!("not stopped: {}", s.error.as_deref().unwrap_or("?"))
            }
        };
        out.push_str(&format!("{:<width$}  {}  {what}\n", s.name, s.session_id));
    }
    out
}
