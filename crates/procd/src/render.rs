//! Human-readable renderings of results (the `--json` form is the result).

use procd_proto::{
    CompletionReason, ExitInfo, KillResult, KillStatus, ListResult, PollResult, SessionStatus,
    SpawnResult, StatusResult, WaitResult, WaitStatus,
};

fn exit_summary(exit: &Option<ExitInfo>) -> String {
    match exit {
        None => String::new(),
        Some(e) => ended(e.exit_code, e.signal.as_deref(), e.completion_reason),
    }
}

/// How a session ended, in the same words wherever it is shown (poll,
/// kill, spawn, events): "exit code 3 (exited)", "signal SIGKILL
/// (killed)", "exit code unknown (lost)".
fn ended(exit_code: Option<i32>, signal: Option<&str>, reason: CompletionReason) -> String {
    let reason = serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    match (signal, exit_code) {
        (Some(signal), _) => format!("signal {signal} ({reason})"),
        (None, Some(code)) => format!("exit code {code} ({reason})"),
        (None, None) => format!("exit code unknown ({reason})"),
    }
}

/// `ended` in a table column: "exit 3", "SIGKILL" (a list's exit code is
/// -N for a death by signal N), "exited".
fn ended_short(exit_code: Option<i32>) -> String {
    match exit_code {
        Some(code) if code < 0 => nix::sys::signal::Signal::try_from(-code)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| format!("signal {}", -code)),
        Some(code) => format!("exit {code}"),
        None => "exited".to_string(),
    }
}

pub fn spawned(r: &SpawnResult) -> String {
    let mut out = match (&r.status, &r.queue) {
        (SessionStatus::Queued, Some(q)) => {
            format!("{}  {}  {}", r.session_id, queued(q), r.command)
        }
        _ => format!("{}  pid {}  {}", r.session_id, r.pid, r.command),
    };
    if r.reused {
        out.push_str("\nalready running under this name: nothing started");
    }
    if let Some(p) = &r.port_in_use {
        out.push_str(&format!(
            "\nport {} was already in use (pid {}{})",
            p.port,
            p.pid.map_or("unknown".to_string(), |pid| pid.to_string()),
            p.session_id
                .as_deref()
                .map(|id| format!(", session {id}"))
                .unwrap_or_default()
        ));
    }
    if let Some(e) = &r.exit {
        out.push_str(&format!("\nexited: {}", exit_summary(&Some(e.clone()))));
    } else if let Some(ready) = r.ready {
        out.push_str(if ready { "\nready" } else { "\nnot ready yet" });
    }
    out
}

/// A queued spawn's place: "queued in build (2nd, 3.1s: 2 of 2 slots taken)".
pub fn queued(q: &procd_proto::QueueInfo) -> String {
    let place = q.position.map(|p| format!("#{p}, ")).unwrap_or_default();
    let why = q
        .waiting
        .as_deref()
        .map(|w| format!(": {w}"))
        .unwrap_or_default();
    format!(
        "queued in {} ({place}{:.1}s{why})",
        q.name,
        q.queued_ms as f64 / 1000.0
    )
}

pub fn poll(r: &PollResult) -> String {
    let status = match r.status {
        SessionStatus::Queued => r.queue.as_ref().map_or_else(|| "queued".into(), queued),
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
    if let Some(stale) = &r.activity.stale {
        out.push_str(&format!(
            "stale since {}: {} changed after it started\n",
            stale.since,
            stale.files.join(", ")
        ));
    }
    if r.activity.waiting_for_input {
        out.push_str("waiting for input\n");
    }
    if let Some(restart) = &r.restart {
        if restart.restarts > 0 {
            out.push_str(&format!(
                "restarted {} time(s); the last run ended: {}\n",
                restart.restarts,
                exit_summary(&restart.last_exit)
            ));
        }
        if restart.restarting {
            out.push_str("restarting (its next run waits out the backoff)\n");
        }
    }
    if let Some(s) = &r.sandbox {
        let network = match &s.network {
            procd_proto::NetworkSpec::All => "all".to_string(),
            procd_proto::NetworkSpec::None => "none".to_string(),
            procd_proto::NetworkSpec::Ports { connect, bind } => {
                format!("connect {connect:?}, bind {bind:?}")
            }
        };
        out.push_str(&format!(
            "sandbox {}: writes only under {}; network {network}\n",
            s.profile,
            s.writable.join(", ")
        ));
    }
    if let Some(t) = &r.tests {
        out.push_str(&procd_core::testrun::text(t));
        out.push('\n');
    }
    if !r.output_preview.is_empty() {
        out.push_str(&r.output_preview);
    }
    out
}

pub fn waited(r: &WaitResult) -> String {
    let said = match r.status {
        WaitStatus::Exited => format!("{} exited: {}", r.session_id, exit_summary(&r.exit)),
        _ => format!("{} is still running (timed out waiting)", r.session_id),
    };
    match &r.tests {
        Some(t) => format!("{said}\n{}", procd_core::testrun::text(t)),
        None => said,
    }
}

/// `procd port`: who listens there, in one line.
pub fn port_owner(r: &procd_proto::PortResult) -> String {
    use procd_proto::PortOwner;
    let port = r.port;
    let unknown = || "?".to_string();
    let pid = r.pid.map_or_else(unknown, |p| p.to_string());
    let command = r.command.clone().unwrap_or_else(unknown);
    let cwd = r.cwd.clone().unwrap_or_else(unknown);
    match r.owner {
        PortOwner::None => format!("nothing listens on port {port}"),
        PortOwner::Session => {
            let id = r.session_id.clone().unwrap_or_default();
            let named = match (&r.name, &r.project) {
                (Some(name), Some(project)) => format!(" ({project}/{name})"),
                (Some(name), None) => format!(" ({name})"),
                _ => String::new(),
            };
            format!("port {port}: session {id}{named}, pid {pid}, in {cwd}: {command}")
        }
        PortOwner::Process => format!("port {port}: pid {pid} (not procd's), in {cwd}: {command}"),
        PortOwner::OtherUser => {
            let uid = r.uid.map_or_else(unknown, |u| u.to_string());
            format!("port {port}: another user's (uid {uid}); not shown")
        }
    }
}

pub fn killed(r: &KillResult) -> String {
    match r.status {
        KillStatus::Killed => format!("{} killed ({})", r.session_id, exit_summary(&r.exit)),
        KillStatus::Removed => format!("{} removed from its queue: it never ran", r.session_id),
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
    let unit = r
        .systemd_unit
        .as_ref()
        .map(|u| format!(", systemd unit {u}"))
        .unwrap_or_default();
    format!(
        "procd {} running (pid {}, {} {}{unit}, instance {}), up {:.0}s\nsessions: {} running, {} finished\nsocket: {}\ncontainment: {} ({})",
        r.version,
        r.pid,
        r.launch_mode,
        r.lifetime,
        r.instance,
        r.uptime_seconds,
        r.running,
        r.finished,
        r.socket,
        r.containment,
        r.containment_reason
    ) + &unavailable(r)
        + &jobserver(r.jobserver.as_ref())
}

/// `status`'s lines for the limits a cgroup here cannot carry, with why
/// (without cgroups, the containment line says it for all).
fn unavailable(r: &StatusResult) -> String {
    if r.containment != "cgroup" {
        return String::new();
    }
    r.limits_unavailable
        .iter()
        .map(|(controller, why)| format!("\nno {controller} limits: {why}"))
        .collect()
}

/// `status`'s jobserver line: its tokens, and who holds how many.
fn jobserver(js: Option<&procd_proto::JobserverStatus>) -> String {
    let Some(js) = js else {
        return String::new();
    };
    let holders: Vec<String> = js
        .sessions
        .iter()
        .map(|s| format!("{} {}", s.session_id, s.tokens))
        .collect();
    let held = match holders.is_empty() {
        true => String::new(),
        false => format!(": {}", holders.join(", ")),
    };
    format!(
        "\njobserver: {} of {} tokens in use{held}",
        js.in_use, js.tokens
    )
}

pub fn table(r: &ListResult) -> String {
    if r.processes.is_empty() {
        return "no sessions".into();
    }
    let mut out = format!(
        "{:<17} {:<14} {:<8} {:>8} {:>9} {:>7} {:>8} {:<12}  {}\n",
        "ID", "NAME", "STATUS", "PID", "UPTIME", "CPU", "MEM", "PORTS", "COMMAND"
    );
    // Grouped by project (docs/stacks.md): the unprojected first, then
    // each project under its name, each in start order.
    let mut projects: Vec<Option<&str>> =
        r.processes.iter().map(|p| p.project.as_deref()).collect();
    projects.sort();
    projects.dedup();
    for project in projects {
        if let Some(project) = project {
            out.push_str(&format!("[{project}]\n"));
        }
        for p in r
            .processes
            .iter()
            .filter(|p| p.project.as_deref() == project)
        {
            out.push_str(&row(p));
        }
    }
    out
}

/// A session's state in a table column: "running", "backoff" (between
/// two runs), or how it ended ("exit 3", "SIGKILL").
pub fn state(p: &procd_proto::ProcessEntry) -> String {
    match (p.status, p.exit_code) {
        (SessionStatus::Running, _) if p.restart.as_ref().is_some_and(|r| r.restarting) => {
            "backoff".to_string()
        }
        (SessionStatus::Running, _) if p.activity.stale.is_some() => "stale".to_string(),
        (SessionStatus::Running, _) => "running".to_string(),
        (SessionStatus::Queued, _) => match p.queue.as_ref().and_then(|q| q.position) {
            Some(at) => format!("queued #{at}"),
            None => "queued".to_string(),
        },
        (SessionStatus::Exited, code) => ended_short(code),
    }
}

fn row(p: &procd_proto::ProcessEntry) -> String {
    let status = state(p);
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
    // The ports it listens on; the one it was given, in parentheses,
    // while it does not listen there yet.
    let mut ports: Vec<String> = p.activity.ports.iter().map(u16::to_string).collect();
    if let Some(given) = p.activity.port.filter(|g| !p.activity.ports.contains(g)) {
        ports.push(format!("({given})"));
    }
    let ports = match ports.is_empty() {
        true => "-".to_string(),
        false => ports.join(","),
    };
    format!(
        "{:<17} {:<14} {:<8} {:>8} {:>8.1}s {:>7} {:>8} {:<12}  {}\n",
        p.session_id,
        p.name.as_deref().unwrap_or("-"),
        status,
        p.pid,
        p.uptime_seconds,
        cpu,
        mem,
        ports,
        command
    )
}

/// The result as `grep -n` prints it; `one`: a single session, so no
/// session prefix; `context`: context was asked for, so groups that do
/// not touch are set apart by `--`.
pub fn as_grep(r: &procd_proto::SearchResult, one: bool, context: bool) -> String {
    // Each session's lines to print, by number: (text, matched).
    type Lines<'a> = std::collections::BTreeMap<u64, (&'a str, bool)>;
    let mut sessions: Vec<(&str, Lines)> = Vec::new();
    for m in &r.matches {
        if sessions.last().is_none_or(|(id, _)| *id != m.session_id) {
            sessions.push((&m.session_id, std::collections::BTreeMap::new()));
        }
        let Some((_, lines)) = sessions.last_mut() else {
            continue;
        };
        let first = m.line.saturating_sub(m.before.len() as u64);
        for (i, text) in m.before.iter().enumerate() {
            lines.entry(first + i as u64).or_insert((text, false));
        }
        lines.insert(m.line, (&m.text, true));
        for (i, text) in m.after.iter().enumerate() {
            lines.entry(m.line + 1 + i as u64).or_insert((text, false));
        }
    }
    let mut out = String::new();
    let mut printed_any = false;
    for (id, lines) in sessions {
        let mut last: Option<u64> = None;
        for (n, (text, matched)) in lines {
            let adjacent = last.is_some_and(|l| l + 1 == n);
            if context && printed_any && !adjacent {
                out.push_str("--\n");
            }
            let mark = if matched { ':' } else { '-' };
            if !one {
                out.push_str(&format!("{id}{mark}"));
            }
            out.push_str(&format!("{n}{mark}{text}\n"));
            last = Some(n);
            printed_any = true;
        }
    }
    out
}
