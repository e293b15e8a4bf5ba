//! Human-readable renderings of results (the `--json` form is the result).

use procd_proto::*;

fn exit_summary(exit: &Option<ExitInfo>) -> String {
    match exit {
        None => String::new(),
        Some(e) => {
            let code = e
                .exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "unknown".into());
            let reason = serde_json::to_value(e.completion_reason)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            format!("exit code {code} ({reason})")
        }
    }
}

pub fn spawned(r: &SpawnResult) -> String {
    let mut out = format!("{}  pid {}  {}", r.session_id, r.pid, r.command);
    if let Some(e) = &r.exit {
        out.push_str(&format!("\nexited: {}", exit_summary(&Some(e.clone()))));
    } else if let Some(ready) = r.ready {
        out.push_str(if ready { "\nready" } else { "\nnot ready yet" });
    }
    out
}

pub fn poll(r: &PollResult) -> String {
    let status = match r.status {
        SessionStatus::Running => format!("running for {:.1}s", r.uptime_seconds),
        SessionStatus::Exited => format!("exited: {}", exit_summary(&r.exit)),
    };
    let mut out = format!(
        "{}  pid {}  {status}\n$ {}\n",
        r.session_id, r.pid, r.command
    );
    match (r.activity.ready, r.activity.ready_after_ms) {
        (Some(true), Some(ms)) => out.push_str(&format!("ready after {ms} ms\n")),
        (Some(_), _) => out.push_str("not ready yet\n"),
        (None, _) => {}
    }
    if !r.activity.ports.is_empty() {
        out.push_str(&format!("listening on {:?}\n", r.activity.ports));
    }
    if r.activity.waiting_for_input {
        out.push_str("waiting for input\n");
    }
    if !r.output_preview.is_empty() {
        out.push_str(&r.output_preview);
    }
    out
}

pub fn waited(r: &WaitResult) -> String {
    match r.status {
        WaitStatus::Exited => format!("{} exited: {}", r.session_id, exit_summary(&r.exit)),
        _ => format!("{} is still running (timed out waiting)", r.session_id),
    }
}

pub fn killed(r: &KillResult) -> String {
    match r.status {
        KillStatus::Killed => format!("{} killed ({})", r.session_id, exit_summary(&r.exit)),
        KillStatus::AlreadyExited if r.orphans_killed > 0 => format!(
            "{} had already exited; ended {} leftover process(es)",
            r.session_id, r.orphans_killed
        ),
        KillStatus::AlreadyExited => format!("{} had already exited", r.session_id),
        KillStatus::Error => format!(
            "{}: {} (pids {:?})",
            r.session_id,
            r.error.clone().unwrap_or_default(),
            r.survivors
        ),
    }
}

pub fn status(r: &StatusResult) -> String {
    format!(
        "procd {} running (pid {}, {} {}), up {:.0}s\nsessions: {} running, {} finished\nsocket: {}",
        r.version,
        r.pid,
        r.launch_mode,
        r.lifetime,
        r.uptime_seconds,
        r.running,
        r.finished,
        r.socket
    )
}

pub fn table(r: &ListResult) -> String {
    if r.processes.is_empty() {
        return "no sessions".into();
    }
    let mut out = format!(
        "{:<17} {:<8} {:>8} {:>9} {:>7} {:>8} {:<12}  {}\n",
        "ID", "STATUS", "PID", "UPTIME", "CPU", "MEM", "PORTS", "COMMAND"
    );
    for p in &r.processes {
        let status = match (p.status, p.exit_code) {
            (SessionStatus::Running, _) => "running".to_string(),
            (SessionStatus::Exited, Some(c)) => format!("exit {c}"),
            (SessionStatus::Exited, None) => "exited".to_string(),
        };
        let command: String = p.command.chars().take(60).collect();
        let running = p.status == SessionStatus::Running;
        let (cpu, mem) = if running {
            (
                format!("{:.1}s", p.activity.resources.cpu_seconds),
                format!(
                    "{:.1}M",
                    p.activity.resources.rss_bytes as f64 / (1024.0 * 1024.0)
                ),
            )
        } else {
            ("-".into(), "-".into())
        };
        let ports = if p.activity.ports.is_empty() {
            "-".to_string()
        } else {
            p.activity
                .ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        out.push_str(&format!(
            "{:<17} {:<8} {:>8} {:>8.1}s {:>7} {:>8} {:<12}  {}\n",
            p.session_id, status, p.pid, p.uptime_seconds, cpu, mem, ports, command
        ));
    }
    out
}

pub fn event(e: &Event) -> String {
    let kind = serde_json::to_value(e)
        .ok()
        .and_then(|v| v["type"].as_str().map(String::from))
        .unwrap_or_else(|| "event".into());
    if let Some(text) = e.text() {
        return format!("{kind:<14} {text}");
    }
    let detail = match e {
        Event::Started { pid, command, .. } => format!("pid {pid}  {command}"),
        Event::Exited {
            exit_code,
            completion_reason,
            ..
        } => format!(
            "exit code {} ({})",
            exit_code.map_or("unknown".into(), |c| c.to_string()),
            serde_json::to_value(completion_reason)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        ),
        Event::Port { port, .. } => format!("listening on {port}"),
        Event::Lagged { missed } => format!("{missed} events missed (this client fell behind)"),
        _ => String::new(),
    };
    format!("{kind:<14} {}  {detail}", e.session_id().unwrap_or(""))
}
