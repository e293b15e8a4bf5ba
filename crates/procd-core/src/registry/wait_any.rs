//! `wait_any`: one blocking wait over several sessions and conditions,
//! so an agent with a server, a watcher and a test run sleeps on all of
//! them at once instead of polling each.
//!
//! Each round subscribes to every watched session's output, state and
//! readiness (and to the event stream, which carries the monitor's
//! "waiting for input"), then looks, then sleeps until one of them
//! changes: a change between the look and the sleep is never lost.

use super::present::{exit_info, status_of};
use super::{Registry, MAX_READ_BYTES};
use crate::error::Error;
use crate::session::Session;
use procd_proto::{TimeoutS, WaitAnyOutcome, WaitAnyResult, WaitCondition, WaitMs};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Sessions one call may wait on: each costs three watch subscriptions
/// per round.
pub const MAX_WAIT_ANY_SESSIONS: usize = 64;
/// Output scanned for the regex per read of the log.
const SCAN_BYTES: u64 = 1 << 20;

/// What a `wait_any` asks, as the wire gave it.
pub struct WaitAnyAsk {
    pub session_ids: Option<Vec<String>>,
    pub session_key: Option<String>,
    pub until: Option<Vec<WaitCondition>>,
    pub output: Option<String>,
    pub cursors: Option<BTreeMap<String, u64>>,
    pub timeout_s: Option<TimeoutS>,
    pub budget: Option<usize>,
}

/// One watched session: where the caller's view of its output starts,
/// how far the regex has looked, and whether it was ready at the call.
struct Watched {
    session: Arc<Session>,
    from: u64,
    scanned: u64,
    was_ready: bool,
}

/// What happened to one session.
struct Hit {
    outcome: WaitAnyOutcome,
    line: Option<String>,
}

impl Registry {
    pub async fn wait_any(&self, ask: WaitAnyAsk) -> Result<WaitAnyResult, Error> {
        let begun = Instant::now();
        let regex = ask.output.as_deref().map(compile).transpose()?;
        let until = conditions(ask.until, regex.is_some())?;
        let longest = Duration::from_secs_f64(self.config.max_wait_s);
        let timeout = ask.timeout_s.map_or(longest, |t| t.duration().min(longest));
        let deadline = begun + timeout;
        let mut watched = self.watched(ask.session_ids, ask.session_key.as_deref())?;
        let mut cursors = ask.cursors.unwrap_or_default();
        for w in &mut watched {
            if let Some(cursor) = cursors.remove(&w.session.id) {
                (w.from, w.scanned) = (cursor, cursor);
            }
        }
        if let Some(stray) = cursors.keys().next() {
            return Err(Error::InvalidParams(format!(
                "cursors: {stray:?} is not one of the sessions waited on"
            )));
        }
        loop {
            // Subscribe before looking, so no change between the two is lost.
            let mut wakes = Wakes::subscribe(self, &mut watched);
            let mut wake = deadline;
            for i in 0..watched.len() {
                let (hit, partial) = self.look(&mut watched[i], &until, regex.as_ref()).await?;
                if let Some(hit) = hit {
                    return self
                        .wait_any_answer(&watched, i, hit, ask.budget, begun)
                        .await;
                }
                if partial {
                    let s = &watched[i].session;
                    let soon = s
                        .output
                        .partial_line_ready_in()
                        .max(Duration::from_millis(1));
                    wake = wake.min(Instant::now() + soon);
                }
            }
            if Instant::now() >= deadline {
                return Ok(timed_out(&watched, begun));
            }
            wakes.any(wake).await;
        }
    }

    /// The sessions a call names: its ids (any state), or every running
    /// session of its key.
    fn watched(&self, ids: Option<Vec<String>>, key: Option<&str>) -> Result<Vec<Watched>, Error> {
        let mut sessions: Vec<Arc<Session>> = Vec::new();
        for id in ids.iter().flatten() {
            let s = self.find(id)?;
            if !sessions.iter().any(|x| x.id == s.id) {
                sessions.push(s);
            }
        }
        if let Some(key) = key {
            for s in self.all_sessions() {
                let mine = s.spec.session_key.as_deref() == Some(key);
                if mine && s.is_running() && !sessions.iter().any(|x| x.id == s.id) {
                    sessions.push(s);
                }
            }
        }
        if ids.is_none() && key.is_none() {
            return Err(Error::InvalidParams(
                "session_ids or session_key: name the sessions to wait on".into(),
            ));
        }
        if sessions.is_empty() {
            return Err(Error::WrongState(match key {
                Some(key) => format!("nothing to wait on: no session of session_key {key:?} runs"),
                None => "session_ids: no session named".into(),
            }));
        }
        if sessions.len() > MAX_WAIT_ANY_SESSIONS {
            return Err(Error::LimitReached(format!(
                "wait_any waits on at most {MAX_WAIT_ANY_SESSIONS} sessions, asked for {}",
                sessions.len()
            )));
        }
        Ok(sessions
            .into_iter()
            .map(|s| {
                let end = s.output.end();
                Watched {
                    was_ready: s.readiness().flag() == Some(true),
                    session: s,
                    from: end,
                    scanned: end,
                }
            })
            .collect())
    }

    /// Whether a condition holds for one session now (the output first:
    /// the line that matched says the most), and whether a partial line
    /// waits to be judged.
    async fn look(
        &self,
        w: &mut Watched,
        until: &[WaitCondition],
        regex: Option<&regex::Regex>,
    ) -> Result<(Option<Hit>, bool), Error> {
        let s = w.session.clone();
        let mut partial = false;
        if let Some(regex) = regex {
            loop {
                let window = s
                    .output
                    .window(w.scanned, SCAN_BYTES)
                    .await
                    .map_err(|e| Error::Internal(format!("reading the log failed: {e}")))?;
                partial = window.partial_pending;
                if window.bytes.is_empty() {
                    break;
                }
                w.scanned = window.end();
                // Up to 1 MiB matched: off the event loop, as search does.
                let (bytes, re) = (window.bytes, regex.clone());
                let matched = tokio::task::spawn_blocking(move || {
                    let text = crate::output::text::lossy(&bytes);
                    text.lines().find(|l| re.is_match(l)).map(str::to_string)
                })
                .await
                .map_err(|e| Error::Internal(format!("matching failed: {e}")))?;
                if let Some(line) = matched {
                    let line = self.redactor.output(&line, s.env_dump).into_owned();
                    let hit = Hit {
                        outcome: WaitAnyOutcome::Output,
                        line: Some(crate::output::text::first_chars(&line, 2000).to_string()),
                    };
                    return Ok((Some(hit), partial));
                }
            }
        }
        let wants = |c| until.contains(&c);
        let hit = |outcome| {
            Some(Hit {
                outcome,
                line: None,
            })
        };
        if wants(WaitCondition::Ready) && !w.was_ready && s.readiness().flag() == Some(true) {
            return Ok((hit(WaitAnyOutcome::Ready), partial));
        }
        if wants(WaitCondition::Input) && s.is_running() && s.waiting_for_input() {
            return Ok((hit(WaitAnyOutcome::Input), partial));
        }
        if wants(WaitCondition::Exit) && s.state().exit().is_some() {
            return Ok((hit(WaitAnyOutcome::Exit), partial));
        }
        Ok((None, partial))
    }

    /// The answer for what happened to `watched[i]`: its state and its
    /// output since the caller's cursor (the last 1 MiB of it at most).
    async fn wait_any_answer(
        &self,
        watched: &[Watched],
        i: usize,
        hit: Hit,
        budget: Option<usize>,
        begun: Instant,
    ) -> Result<WaitAnyResult, Error> {
        let s = &watched[i].session;
        let from = watched[i]
            .from
            .max(s.output.end().saturating_sub(MAX_READ_BYTES));
        let read = self
            .read(
                &s.id,
                Some(from),
                Some(MAX_READ_BYTES),
                Some(WaitMs::new(0.0)),
                budget,
            )
            .await?;
        let state = s.state();
        let mut cursors: BTreeMap<String, u64> = watched
            .iter()
            .map(|w| (w.session.id.clone(), w.from))
            .collect();
        cursors.insert(s.id.clone(), read.next_cursor);
        let prompt = (hit.outcome == WaitAnyOutcome::Input).then(|| self.prompt_of(s));
        Ok(WaitAnyResult {
            condition: hit.outcome,
            session_id: Some(s.id.clone()),
            command: Some(s.shown_command().to_string()),
            status: Some(status_of(&state)),
            line: hit.line,
            prompt,
            ports: s.observed().ports,
            output: read.data,
            cursor: Some(read.cursor),
            next_cursor: Some(read.next_cursor),
            cursors,
            waited_ms: begun.elapsed().as_millis() as u64,
            original_chars: read.original_chars,
            kept_error_lines: read.kept_error_lines,
            exit: exit_info(&state),
        })
    }
}

/// What wakes a round: every watched session's output, state and
/// readiness, and the event stream (the monitor's "waiting for input").
struct Wakes {
    outputs: Vec<tokio::sync::watch::Receiver<u64>>,
    /// Each session's view: its state and readiness.
    views: Vec<tokio::sync::watch::Receiver<crate::session::SessionView>>,
    events: crate::notify::Live,
}

impl Wakes {
    /// Subscribes to all of it.
    fn subscribe(registry: &Registry, watched: &mut [Watched]) -> Wakes {
        let events = registry.notifications.subscribe();
        let mut wakes = Wakes {
            outputs: Vec::with_capacity(watched.len()),
            views: Vec::with_capacity(watched.len()),
            events,
        };
        for w in watched {
            wakes.outputs.push(w.session.output.subscribe());
            wakes.views.push(w.session.subscribe());
        }
        wakes
    }

    /// Sleeps until any of it changes, or until `wake`.
    async fn any(&mut self, wake: Instant) {
        let mut futures: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = Vec::new();
        for rx in &mut self.outputs {
            futures.push(Box::pin(async move {
                changed_or_never(rx.changed().await).await
            }));
        }
        for rx in &mut self.views {
            futures.push(Box::pin(async move {
                changed_or_never(rx.changed().await).await
            }));
        }
        let events = &mut self.events;
        futures.push(Box::pin(async move {
            if let Err(tokio::sync::broadcast::error::RecvError::Closed) = events.recv().await {
                std::future::pending::<()>().await
            }
        }));
        futures.push(Box::pin(tokio::time::sleep_until(wake)));
        futures::future::select_all(futures).await;
    }
}

/// The answer when nothing happened in time: every cursor as given.
fn timed_out(watched: &[Watched], begun: Instant) -> WaitAnyResult {
    WaitAnyResult {
        condition: WaitAnyOutcome::Timeout,
        session_id: None,
        command: None,
        status: None,
        line: None,
        prompt: None,
        ports: Vec::new(),
        output: String::new(),
        cursor: None,
        next_cursor: None,
        cursors: watched
            .iter()
            .map(|w| (w.session.id.clone(), w.from))
            .collect(),
        waited_ms: begun.elapsed().as_millis() as u64,
        original_chars: None,
        kept_error_lines: None,
        exit: None,
    }
}

/// The conditions asked for, checked: default every one but output, and
/// output too when a regex is given.
fn conditions(
    until: Option<Vec<WaitCondition>>,
    has_regex: bool,
) -> Result<Vec<WaitCondition>, Error> {
    use WaitCondition::*;
    let until = match until {
        None if has_regex => vec![Exit, Ready, Input, Output],
        None => vec![Exit, Ready, Input],
        Some(u) if u.is_empty() => {
            return Err(Error::InvalidParams(
                "until: name at least one of exit, ready, input, output".into(),
            ))
        }
        Some(u) => u,
    };
    match (until.contains(&Output), has_regex) {
        (true, false) => Err(Error::InvalidParams(
            "output: until names \"output\", so give the regex to wait for".into(),
        )),
        (false, true) => Err(Error::InvalidParams(
            "output: a regex is given, but until does not name \"output\"".into(),
        )),
        _ => Ok(until),
    }
}

/// The `output` regex (`text::bounded_regex`).
fn compile(re: &str) -> Result<regex::Regex, Error> {
    crate::output::text::bounded_regex(re, false)
        .map_err(|e| Error::InvalidParams(format!("output: {e}")))
}

/// A watch that says it changed, or, once its sender is gone, never wakes
/// again (so a closed one cannot spin the loop).
async fn changed_or_never<E>(changed: Result<(), E>) {
    if changed.is_err() {
        std::future::pending::<()>().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_are_checked_by_name() {
        use WaitCondition::*;
        assert_eq!(conditions(None, false).unwrap(), [Exit, Ready, Input]);
        assert!(conditions(None, true).unwrap().contains(&Output));
        assert!(conditions(Some(vec![]), false).is_err());
        let e = conditions(Some(vec![Output]), false).unwrap_err();
        assert!(e.message().starts_with("output:"), "{}", e.message());
        assert!(conditions(Some(vec![Exit]), true).is_err());
        assert!(compile("(").unwrap_err().message().starts_with("output:"));
        assert!(compile(&"a".repeat(crate::output::text::MAX_REGEX_CHARS + 1)).is_err());
        // A regex whose compiled form would be huge is refused, not built.
        assert!(compile("\\w{1000}{1000}").is_err());
    }
}
