//! `up` and `down` (docs/stacks.md): a stack's services started in
//! dependency order, each once its dependencies' conditions hold, and
//! killed dependents first. Built on the registry's public calls only: a
//! service is a named session, so `up` again reuses what runs.
//!
//! Each service gets a task that waits for its dependencies and spawns
//! it; the tasks go on after `up` answers (a service waiting on a slow
//! dependency still starts), and end when their service has started or
//! been blocked.

use crate::error::Error;
use crate::observation::readiness::Readiness;
use crate::registry::Registry;
use crate::session::{Session, SessionState};
use crate::stacks::stack::{Condition, Service, Stack};
use procd_proto::{
    BlockedBy, CompletionReason, DownEntry, DownResult, KillStatus, PortInUse, ProjectName,
    ServiceState, ServiceStatus, SessionName, UpResult, YieldMs,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The most service tasks that may wait for their dependencies at once,
/// over all `up` calls: a client that calls `up` again and again on a
/// stack whose dependency never completes gets -32004, not unbounded
/// tasks.
const MAX_WAITING: usize = 4096;

/// How long `up` waits for its services when not told, and at most: a
/// ready condition's default timeout, and the longest yield.
const WAIT: Duration = Duration::from_secs(60);
const MAX_WAIT: Duration = Duration::from_secs(300);

/// Where one service of an `up` stands.
#[derive(Clone)]
enum Phase {
    Waiting,
    Started {
        session: Arc<Session>,
        reused: bool,
        port_in_use: Option<PortInUse>,
    },
    Blocked(BlockedBy),
    FailedStart(String),
}

/// Starts what is not running of `stack` (or of the `wanted` services and
/// what they need), and answers once every started service is ready,
/// exited or blocked, or when `wait` ends.
pub async fn up(
    registry: &Arc<Registry>,
    file: Option<&str>,
    dir: Option<&str>,
    wanted: &[SessionName],
    wait: Option<YieldMs>,
) -> Result<UpResult, Error> {
    let wait = wait.map_or(WAIT, |w| w.duration().min(MAX_WAIT));
    let base = registry.default_cwd().to_path_buf();
    let stack = load(file, dir, &base).await?;
    let chosen: Vec<Service> = stack
        .select(wanted)
        .map_err(Error::InvalidParams)?
        .into_iter()
        .cloned()
        .collect();
    let stack_is_up = registry
        .sessions_of(&stack.project)
        .iter()
        .any(|s| s.is_running());
    let slots = chosen
        .iter()
        .map(|_| registry.waiting_slot(MAX_WAITING))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            Error::LimitReached(format!(
                "{MAX_WAITING} services of earlier up calls are still waiting for their dependencies"
            ))
        })?;
    let mut phases: HashMap<SessionName, watch::Receiver<Phase>> = HashMap::new();
    for (service, slot) in chosen.iter().zip(slots) {
        let (tx, rx) = watch::channel(Phase::Waiting);
        let needs: Vec<(SessionName, Condition, watch::Receiver<Phase>)> = service
            .depends_on
            .iter()
            .filter_map(|(dep, cond)| phases.get(dep).map(|rx| (dep.clone(), *cond, rx.clone())))
            .collect();
        phases.insert(service.name.clone(), rx);
        let registry = registry.clone();
        let service = service.clone();
        let project = stack.project.clone();
        let file = stack.file.clone();
        tokio::spawn(async move {
            let _slot = slot;
            for (dep, cond, rx) in needs {
                if let Err(reason) = holds(rx, cond).await {
                    tx.send_replace(Phase::Blocked(BlockedBy {
                        service: dep.to_string(),
                        reason,
                    }));
                    return;
                }
            }
            tx.send_replace(start(&registry, &project, &file, &service, stack_is_up).await);
        });
    }
    let deadline = tokio::time::Instant::now() + wait;
    for service in &chosen {
        let mut rx = phases[&service.name].clone();
        let _ = tokio::time::timeout_at(deadline, settled(&mut rx)).await;
    }
    // Looked at once all have settled: a one-shot that others waited for
    // shows its completion.
    let services = chosen
        .iter()
        .map(|s| state_of(&s.name, &phases[&s.name].borrow()))
        .collect();
    Ok(UpResult {
        project: stack.project.to_string(),
        file: stack.file.display().to_string(),
        services,
    })
}

/// Reads and checks the stack file off the event loop.
async fn load(file: Option<&str>, dir: Option<&str>, base: &Path) -> Result<Stack, Error> {
    let (file, dir, base) = (
        file.map(str::to_owned),
        dir.map(str::to_owned),
        base.to_path_buf(),
    );
    tokio::task::spawn_blocking(move || Stack::load(file.as_deref(), dir.as_deref(), &base))
        .await
        .map_err(|e| Error::Internal(format!("reading the stack file: {e}")))?
        .map_err(Error::InvalidParams)
}

/// Starts one service (or finds it running, or done while its stack is
/// up).
async fn start(
    registry: &Arc<Registry>,
    project: &ProjectName,
    file: &std::path::Path,
    service: &Service,
    stack_is_up: bool,
) -> Phase {
    if stack_is_up {
        if let Some(done) = completed_run(registry, project, service) {
            return Phase::Started {
                session: done,
                reused: true,
                port_in_use: None,
            };
        }
    }
    // The ready port is looked at by the spawn itself.
    let ready_port = service
        .spawn
        .ready
        .as_ref()
        .and_then(crate::stacks::stack::ready_port);
    let declared = match service.port {
        Some(port) if ready_port != Some(port) && !running_named(registry, project, service) => {
            registry.port_in_use(port).await
        }
        _ => None,
    };
    match registry.spawn_service(service.spawn.clone(), file).await {
        Ok(result) => match registry.find(&result.session_id) {
            Ok(session) => Phase::Started {
                session,
                reused: result.reused,
                port_in_use: result.port_in_use.or(declared.filter(|_| !result.reused)),
            },
            Err(e) => Phase::FailedStart(e.message().to_string()),
        },
        Err(e) => Phase::FailedStart(e.message().to_string()),
    }
}

fn running_named(registry: &Registry, project: &ProjectName, service: &Service) -> bool {
    registry
        .find_named(service.name.as_str(), Some(project.as_str()))
        .is_ok_and(|s| s.is_running())
}

/// The last run of a one-shot service, if it completed (exit 0) with the
/// same command: while the stack is up, `up` again does not run it again.
fn completed_run(
    registry: &Registry,
    project: &ProjectName,
    service: &Service,
) -> Option<Arc<Session>> {
    let last = registry
        .find_named(service.name.as_str(), Some(project.as_str()))
        .ok()?;
    let exit = last.state().exit().cloned()?;
    let same = registry.runs_command(&last.spec, &service.spawn.command);
    (same && exit.reason == CompletionReason::Exited && exit.exit_code == Some(0)).then_some(last)
}

/// Waits until the dependency behind `rx` meets `cond`; the reason it
/// never will, if so.
async fn holds(mut rx: watch::Receiver<Phase>, cond: Condition) -> Result<(), String> {
    let phase = match rx.wait_for(|p| !matches!(p, Phase::Waiting)).await {
        Ok(p) => p.clone(),
        Err(_) => return Err("its start was abandoned".into()),
    };
    let session = match phase {
        Phase::Started { session, .. } => session,
        Phase::Blocked(by) => {
            return Err(format!("it is blocked by {} ({})", by.service, by.reason))
        }
        Phase::FailedStart(e) => return Err(format!("it failed to start: {e}")),
        Phase::Waiting => return Err("its start was abandoned".into()),
    };
    match cond {
        Condition::Started => Ok(()),
        Condition::Ready => ready(&session).await,
        Condition::Completed => match session.wait_end().await {
            Some(e) if e.reason == CompletionReason::Exited && e.exit_code == Some(0) => Ok(()),
            Some(e) => Err(format!("it did not complete: {}", ended(&e))),
            None => Err("it did not complete".into()),
        },
    }
}

/// Waits for a started session's ready condition (none: ready at once);
/// a restart before it is ready waits for its next run's.
async fn ready(session: &Session) -> Result<(), String> {
    let mut view = session.subscribe();
    loop {
        {
            let now = view.borrow_and_update();
            match now.readiness {
                Readiness::Unconditioned | Readiness::Ready { .. } => return Ok(()),
                Readiness::Pending { timed_out: true } => {
                    return Err("it missed its ready timeout".into())
                }
                Readiness::Pending { timed_out: false } => {}
            }
            if let SessionState::Exited(e) = &now.state {
                return Err(format!("it ended before it was ready: {}", ended(e)));
            }
        }
        if view.changed().await.is_err() {
            return Err("it is gone".into());
        }
    }
}

/// How a dependency ended, for a `blocked_by` reason.
fn ended(e: &crate::session::ExitRecord) -> String {
    match (e.reason, e.exit_code) {
        (CompletionReason::Exited, Some(code)) => format!("exit code {code}"),
        (CompletionReason::Exited, None) => "an unknown exit".into(),
        (CompletionReason::Killed, _) => "killed".into(),
        (CompletionReason::Timeout, _) => "its timeout".into(),
        (CompletionReason::Lost, _) => "lost".into(),
        (CompletionReason::FailedStart, _) => "a failed start".into(),
        (CompletionReason::Oom, _) => "the OOM killer".into(),
        (CompletionReason::CrashLoop, _) => "a crash loop (its restarts gave up)".into(),
    }
}

/// Waits until a service needs no more waiting for `up`'s answer: blocked,
/// failed, exited, or running and ready (or with no condition).
async fn settled(rx: &mut watch::Receiver<Phase>) {
    let phase = match rx.wait_for(|p| !matches!(p, Phase::Waiting)).await {
        Ok(phase) => phase.clone(),
        Err(_) => return,
    };
    let Phase::Started { session, .. } = phase else {
        return;
    };
    let _ = ready(&session).await;
}

fn state_of(name: &SessionName, phase: &Phase) -> ServiceState {
    let mut state = ServiceState {
        name: name.to_string(),
        session_id: None,
        status: ServiceStatus::Waiting,
        ready: None,
        reused: false,
        exit_code: None,
        blocked_by: None,
        port_in_use: None,
        port: None,
        url: None,
        error: None,
    };
    match phase {
        Phase::Waiting => {}
        Phase::Blocked(by) => {
            state.status = ServiceStatus::Blocked;
            state.blocked_by = Some(by.clone());
        }
        Phase::FailedStart(e) => {
            state.status = ServiceStatus::FailedStart;
            state.error = Some(e.clone());
        }
        Phase::Started {
            session,
            reused,
            port_in_use,
        } => {
            state.session_id = Some(session.id.clone());
            state.reused = *reused;
            state.port_in_use = port_in_use.clone();
            state.port = session.spec.port;
            state.url = session.spec.port.map(|p| format!("http://localhost:{p}/"));
            state.ready = session.readiness().flag();
            match session.state() {
                SessionState::Running => state.status = ServiceStatus::Running,
                SessionState::Exited(e) => {
                    state.status = ServiceStatus::Exited;
                    state.exit_code = e.exit_code;
                }
            }
        }
    }
    state
}

/// Kills a project's running sessions (or the named services'), the
/// last started first: a service starts only after what it depends on,
/// so this stops dependents before their dependencies.
pub async fn down(
    registry: &Arc<Registry>,
    project: &ProjectName,
    wanted: &[SessionName],
) -> Result<DownResult, Error> {
    let mut sessions: Vec<Arc<Session>> = registry
        .sessions_of(project)
        .into_iter()
        .filter(|s| s.is_running())
        .filter(|s| wanted.is_empty() || s.spec.name.as_ref().is_some_and(|n| wanted.contains(n)))
        .collect();
    sessions.reverse();
    let mut services = Vec::with_capacity(sessions.len());
    for s in sessions {
        let killed = registry.kill(&s.id, None, None, Some("down")).await?;
        services.push(DownEntry {
            name: s
                .spec
                .name
                .as_ref()
                .map(|n| n.to_string())
                .unwrap_or_default(),
            session_id: s.id.clone(),
            status: killed.status,
            error: killed.error.filter(|_| killed.status == KillStatus::Error),
        });
    }
    Ok(DownResult {
        project: project.to_string(),
        services,
    })
}
