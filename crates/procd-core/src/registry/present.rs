//! Building the wire results and events from sessions (redacted).
//!
//! Every text a result or event carries goes through the `Redactor` here
//! (and in `reading.rs`, `exit.rs`, `ready.rs`, and the prompt of
//! `input_wanted`): a session's shown command is redacted once and kept,
//! its preview once per output end (`OutputStore::tail_text`); `procs.json`
//! stores redacted commands; the log files keep raw bytes.

use super::{Registry, LIST_PREVIEW_CHARS, PREVIEW_CHARS, WAIT_OUTPUT_CHARS};
use crate::clock::rfc3339;
use crate::observation::watch::WatchOutcome;
use crate::output::redact::Redactor;
use crate::output::text::{first_chars, last_chars};
use crate::session::{self, ExitRecord, Run, Session, SessionState};
use crate::tree::kill::signal_name;
use procd_proto::{
    About, Activity, CompletionReason, Event, ExitInfo, PollResult, ProcessEntry, QueueInfo,
    RestartInfo, SessionStatus, SpawnResult, TestSummary,
};
use std::time::Instant;

/// How long a session that went through a queue waited there.
fn queue_info(s: &Session) -> Option<QueueInfo> {
    s.spec.queue.as_ref().map(|q| QueueInfo {
        name: q.to_string(),
        position: None,
        queued_ms: s.spec.queued_for.as_millis() as u64,
        waiting: None,
    })
}

pub(super) fn status_of(state: &session::SessionState) -> SessionStatus {
    match state {
        session::SessionState::Running => SessionStatus::Running,
        session::SessionState::Exited(_) => SessionStatus::Exited,
    }
}

pub(super) fn exit_info(state: &session::SessionState) -> Option<ExitInfo> {
    state.exit().map(|e| exit_info_of(e))
}

pub(super) fn exit_info_of(e: &ExitRecord) -> ExitInfo {
    ExitInfo {
        exit_code: e.exit_code,
        signal: e.signal.map(signal_name),
        completion_reason: e.reason,
        termination_source: e.source.clone(),
        exited_at: rfc3339(e.exited_at),
    }
}

/// A restarting session's runs, for poll and list.
fn restart_info(s: &Session) -> Option<RestartInfo> {
    s.restarts.as_ref()?;
    let (count, last) = s.run_history();
    Some(RestartInfo {
        restarts: count.run.saturating_sub(1),
        last_exit: last.as_deref().map(exit_info_of),
        restarting: s.is_restarting() && s.is_running(),
    })
}

fn uptime(state: &SessionState, run: &Run) -> f64 {
    let end = state
        .exit()
        .map(|e| e.exited_instant)
        .unwrap_or_else(Instant::now);
    let secs = end
        .saturating_duration_since(run.started_instant())
        .as_secs_f64();
    (secs * 1000.0).round() / 1000.0
}

/// The last `chars` characters of a session's output, redacted.
pub(super) fn redacted_tail(r: &Redactor, s: &Session, chars: usize) -> String {
    s.output.tail_text(chars, |tail| {
        r.excerpt(&tail.text, &tail.before, s.env_dump).into_owned()
    })
}

/// Ports, resources, readiness and waiting-for-input (with the prompt),
/// for poll and list.
fn activity(r: &Redactor, s: &Session) -> Activity {
    let (observed, stale) = s.observed_and_stale();
    let readiness = s.readiness();
    let waiting = s.waiting_for_input();
    Activity {
        port: s.spec.port,
        named_ports: s.spec.named_ports.clone(),
        ports: observed.ports,
        stale: stale.map(|stale| procd_proto::StaleInfo {
            since: crate::clock::rfc3339(stale.since),
            files: stale.files,
        }),
        resources: observed.resources,
        ready: readiness.flag(),
        ready_after_ms: readiness.after_ms(),
        waiting_for_input: waiting,
        prompt: waiting.then(|| prompt(r, s)),
    }
}

/// The last unfinished line of a session's output (redacted, ANSI
/// stripped, at most 200 chars): what it asks.
pub(super) fn prompt(r: &Redactor, s: &Session) -> String {
    // The poll's length: the text made for a poll is reused.
    let tail = redacted_tail(r, s, PREVIEW_CHARS);
    let tail = crate::output::text::strip_ansi(&tail);
    let line = tail
        .trim_end()
        .rsplit(['\n', '\r'])
        .next()
        .unwrap_or_default();
    last_chars(line, 200).to_string()
}

/// A running session as `spawn` answers it (no yield, not reused).
pub(super) fn spawn_result(s: &Session) -> SpawnResult {
    SpawnResult {
        session_id: s.id.clone(),
        pid: s.pid(),
        pty: s.pty(),
        status: SessionStatus::Running,
        command: s.shown_command().to_string(),
        started_at: s.started_at_text(),
        reused: false,
        port_in_use: None,
        port: s.spec.port,
        named_ports: s.spec.named_ports.clone(),
        output: None,
        cursor: None,
        original_chars: None,
        kept_error_lines: None,
        ready: s.readiness().flag(),
        waiting_for_input: None,
        exit: None,
        queue: queue_info(s),
    }
}

pub(super) fn poll_result(r: &Redactor, s: &Session) -> PollResult {
    let (state, run) = s.state_and_run();
    PollResult {
        session_id: s.id.clone(),
        name: s.spec.name.as_ref().map(|n| n.to_string()),
        project: s.spec.project.as_ref().map(|p| p.to_string()),
        command: s.shown_command().to_string(),
        status: status_of(&state),
        pid: run.pid(),
        started_at: run.started_at_text().to_string(),
        uptime_seconds: uptime(&state, &run),
        output_preview: redacted_tail(r, s, PREVIEW_CHARS),
        activity: activity(r, s),
        note: run.note.clone(),
        original_chars: None,
        kept_error_lines: None,
        exit: exit_info(&state),
        restart: restart_info(s),
        sandbox: s.spec.sandbox.as_ref().map(|p| p.info.clone()),
        meta: s.meta(),
        tests: tests(r, s),
        queue: queue_info(s),
    }
}

/// The session's test run (testrun.rs), its names and messages redacted.
pub(super) fn tests(r: &Redactor, s: &Session) -> Option<TestSummary> {
    let mut t = TestSummary::clone(&*s.output.tests()?);
    for f in &mut t.failures {
        f.name = r.output(&f.name, s.env_dump).into_owned();
        f.message = r.output(&f.message, s.env_dump).into_owned();
    }
    Some(t)
}

pub(super) fn process_entry(r: &Redactor, s: &Session, session_scoped: bool) -> ProcessEntry {
    let (state, run) = s.state_and_run();
    ProcessEntry {
        session_id: s.id.clone(),
        name: s.spec.name.as_ref().map(|n| n.to_string()),
        project: s.spec.project.as_ref().map(|p| p.to_string()),
        stack_file: s.spec.stack_file.as_ref().map(|f| f.display().to_string()),
        command: first_chars(s.shown_command(), 200).to_string(),
        cwd: s.spec.cwd.display().to_string(),
        pid: run.pid(),
        status: status_of(&state),
        exit_code: state.exit().and_then(|e| e.exit_code),
        started_at: run.started_at_text().to_string(),
        uptime_seconds: uptime(&state, &run),
        output_preview: redacted_tail(r, s, LIST_PREVIEW_CHARS),
        task_id: s.spec.task_id.clone(),
        session_key: s.spec.session_key.clone(),
        pty: run.pty,
        persist: s.spec.persist,
        notify_on_complete: s.notify_on_complete(),
        watch_patterns: s.asks().watch_patterns.to_vec(),
        activity: activity(r, s),
        session_scoped,
        note: run.note.clone(),
        restart: restart_info(s),
        sandbox: s.spec.sandbox.as_ref().map(|p| p.info.clone()),
        meta: s.meta(),
        queue: queue_info(s),
    }
}

pub(super) fn completion_event(r: &Redactor, s: &Session, e: &ExitRecord) -> Event {
    let output = redacted_tail(r, s, WAIT_OUTPUT_CHARS);
    let command = s.shown_command().to_string();
    let tests = tests(r, s);
    // A test run's counts and failures say what its output's tail would.
    let said = match &tests {
        Some(t) => crate::testrun::text(t),
        None => format!("Output: {}", last_chars(&output, 500)),
    };
    let text = format!(
        "Background process {} {}. Command: {}. {said}",
        s.id,
        ending(e),
        first_chars(&command, 200),
    );
    Event::Completion {
        about: About {
            session_id: s.id.clone(),
            session_key: s.spec.session_key.clone(),
            task_id: s.spec.task_id.clone(),
            command,
            text,
            meta: s.meta(),
        },
        exit_code: e.exit_code,
        completion_reason: e.reason,
        termination_source: e.source.clone(),
        output,
        started_at: s.started_at_text(),
        exited_at: rfc3339(e.exited_at),
        tests,
    }
}

/// How a run ended, in words that say exactly what the record's fields
/// say (a test holds each reason to its fields): the reason, then the
/// exit code, the signal and who ended it, or that the status is unknown
/// only when neither code nor signal is known.
pub(crate) fn ending(e: &ExitRecord) -> String {
    let how = match (e.reason, e.exit_code) {
        (CompletionReason::Exited, Some(0)) => "completed normally",
        (CompletionReason::Exited, _) if e.signal.is_some() => "was killed by a signal",
        (CompletionReason::Exited, _) => "failed",
        (CompletionReason::Killed, _) => "was killed",
        (CompletionReason::Timeout, _) => "timed out and was killed",
        (CompletionReason::Oom, _) => {
            "was ended by the kernel's OOM killer (it exceeded its memory limit)"
        }
        (CompletionReason::CrashLoop, _) => {
            "kept failing, and its restart policy gave up (crash_loop)"
        }
        (CompletionReason::Lost, _) => "ended while no procd watched it",
        (CompletionReason::FailedStart, _) => "failed to start",
    };
    let mut facts = Vec::new();
    if let Some(code) = e.exit_code {
        facts.push(format!("exit code {code}"));
    }
    if let Some(signal) = e.signal {
        facts.push(format!("signal {}", signal_name(signal)));
    }
    if facts.is_empty() {
        facts.push("exit status unknown".into());
    }
    match e.source.as_deref() {
        Some(source) if e.reason != CompletionReason::Exited => {
            facts.push(format!("ended by {source}"))
        }
        _ => {}
    }
    format!("{how} ({})", facts.join(", "))
}

/// Event text: what an agent reads about a session.
impl Registry {
    /// Queues a watch event (a match, or watching stopped at the delivery
    /// cap: the session notifies on completion instead, which the one
    /// who took the report has switched on).
    pub(super) fn deliver_watch(&self, s: &Session, outcome: WatchOutcome) {
        let event = match outcome {
            WatchOutcome::Match {
                pattern,
                output,
                suppressed,
            } => {
                let breaker = self
                    .watch_breaker
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .admit(std::time::Instant::now());
                let Some(held) = breaker else {
                    return; // held by the breaker, and counted
                };
                let output = self.redactor.output(&output, s.env_dump).into_owned();
                let mut said = Vec::new();
                if suppressed > 0 {
                    said.push(format!("{suppressed} more matches suppressed"));
                }
                if held > 0 {
                    said.push(format!(
                        "{held} matches of all sessions held while too many came at once"
                    ));
                }
                let text = format!(
                    "Background process {} printed a line matching {pattern:?}{}: {}",
                    s.id,
                    match said.is_empty() {
                        true => String::new(),
                        false => format!(" ({})", said.join("; ")),
                    },
                    first_chars(&output, 300)
                );
                let suppressed = suppressed + held;
                Event::WatchMatch {
                    about: self.about(s, text),
                    pattern,
                    output,
                    suppressed,
                }
            }
            WatchOutcome::Disabled { deliveries } => {
                let text = format!(
                    "Background process {}: watch patterns matched {deliveries} times, so watching stopped; you will be notified when it completes.",
                    s.id
                );
                Event::WatchDisabled {
                    about: self.about(s, text),
                    deliveries,
                }
            }
        };
        self.notifications.push(event);
    }

    /// Whose an event is, with its summary (`text` as an agent reads it).
    pub(super) fn about(&self, s: &Session, text: String) -> About {
        About {
            session_id: s.id.clone(),
            session_key: s.spec.session_key.clone(),
            task_id: s.spec.task_id.clone(),
            command: s.shown_command().to_string(),
            text,
            meta: s.meta(),
        }
    }

    /// `About` for an agent event (docs/agents.md): `what` completes "Background process ID …".
    pub(super) fn about_event(&self, s: &Session, what: &str) -> About {
        let command = s.shown_command().to_string();
        let text = format!(
            "Background process {} {what}. Command: {}",
            s.id,
            first_chars(&command, 200)
        );
        self.about(s, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    /// Every reason, with every kind of exit it can carry: the words say
    /// what the fields say, and nothing they do not.
    #[test]
    fn an_ending_says_what_its_fields_say() {
        let reasons = [
            (
                CompletionReason::Exited,
                "completed normally|failed|killed by a signal",
            ),
            (CompletionReason::Killed, "was killed"),
            (CompletionReason::Timeout, "timed out"),
            (CompletionReason::Oom, "OOM killer"),
            (CompletionReason::CrashLoop, "crash_loop"),
            (CompletionReason::Lost, "no procd watched"),
            (CompletionReason::FailedStart, "failed to start"),
        ];
        let exits = [
            (Some(0), None),
            (Some(2), None),
            (Some(137), None),
            (Some(143), Some(15)),
            (Some(-9), Some(9)),
            (None, Some(9)),
            (None, None),
        ];
        for (reason, words) in reasons {
            for (exit_code, signal) in exits {
                for source in [None, Some("kill"), Some("timeout"), Some("kill_all")] {
                    let e = ExitRecord {
                        exit_code,
                        signal,
                        reason,
                        source: source.map(String::from),
                        exited_at: SystemTime::now(),
                        exited_instant: Instant::now(),
                    };
                    let text = ending(&e);
                    let case = format!("{reason:?} {exit_code:?} {signal:?} {source:?}: {text}");
                    assert!(
                        words.split('|').any(|w| text.contains(w)),
                        "the reason is said: {case}"
                    );
                    match exit_code {
                        Some(c) => assert!(
                            text.contains(&format!("exit code {c})"))
                                || text.contains(&format!("exit code {c},")),
                            "{case}"
                        ),
                        None => assert!(!text.contains("exit code"), "{case}"),
                    }
                    match signal {
                        Some(n) => assert!(text.contains(&signal_name(n)), "{case}"),
                        None => assert!(!text.contains("signal SIG"), "{case}"),
                    }
                    assert_eq!(
                        text.contains("unknown"),
                        exit_code.is_none() && signal.is_none(),
                        "{case}"
                    );
                    assert_eq!(
                        text.contains("completed normally"),
                        reason == CompletionReason::Exited && exit_code == Some(0),
                        "{case}"
                    );
                    if let (Some(source), false) = (source, reason == CompletionReason::Exited) {
                        assert!(text.contains(&format!("ended by {source}")), "{case}");
                    }
                }
            }
        }
    }
}
