//! What a session signals an agent can act on (docs/agents.md): the readiness
//! task of a session spawned with `ready`, the probe of one session's tree
//! a waiting yield or that task takes, and the events `ready`,
//! `ready_timeout` and `input_wanted`.

use super::{reading::next_change, Registry};
use crate::observation::observe::{Observation, Watched};
use crate::observation::readiness::{LineMatcher, Readiness, ReadyCheck};
use crate::session::{Run, Session};
use crate::tree::kill;
use procd_proto::Event;
use std::sync::Arc;
use std::time::Duration;

/// How often port and HTTP conditions are probed: often while a server
/// is likely to come up, then less (there is no event for "now listening").
fn probe_interval(age: Duration) -> Duration {
    match age.as_secs() {
        0..=1 => Duration::from_millis(100),
        2..=9 => Duration::from_millis(250),
        _ => Duration::from_secs(1),
    }
}

impl Registry {
    /// The task that decides when `s`'s run (its run now) is ready
    /// (spawned at each run's start), matching the run's own output
    /// (`Run::output_from`). Ends when the run is ready or over; past
    /// the timeout it reports `ready_timeout` once and keeps checking,
    /// less often.
    pub(super) fn watch_readiness(
        &self,
        s: Arc<Session>,
        check: ReadyCheck,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (me, run) = (self.me.clone(), s.run());
        async move {
            let deadline = tokio::time::Instant::from_std(run.started_instant() + check.timeout);
            let mut output_met = check.output.is_none();
            let mut port_met = check.port.is_none();
            let mut http_met = check.http.is_none();
            let mut lines = LineMatcher::default();
            let mut cursor = run.output_from;
            let mut output_rx = s.output.subscribe();
            let mut state_rx = s.subscribe();
            let mut timed_out = false;
            let mut next_probe = tokio::time::Instant::now();
            loop {
                if !s.is_current_run(&run) {
                    return;
                }
                let mut partial_in = None;
                if let (Some(re), false) = (&check.output, output_met) {
                    while let Ok(w) = s.output.window(cursor, 64 * 1024).await {
                        if w.start > cursor {
                            lines.reset(); // lost to the log cap
                        }
                        cursor = w.start + w.bytes.len() as u64;
                        if w.partial_pending {
                            partial_in = Some(s.output.partial_line_ready_in());
                        }
                        if w.bytes.is_empty() {
                            break;
                        }
                        if lines.feed(&w.bytes, re) {
                            output_met = true;
                            break;
                        }
                    }
                }
                let Some(reg) = me.upgrade() else { return };
                let mut ports = s.observed().ports;
                let probing = !port_met || !http_met;
                if probing && tokio::time::Instant::now() >= next_probe {
                    if !port_met {
                        ports = reg.probe(&s).await.ports;
                        port_met = check.port_met(&ports);
                    }
                    if let (Some(http), false) = (&check.http, http_met) {
                        http_met = http.probe().await;
                    }
                    next_probe = tokio::time::Instant::now()
                        + probe_interval(run.started_instant().elapsed());
                }
                if output_met && port_met && http_met && s.is_current_run(&run) {
                    reg.became_ready(&s, &run, ports);
                    return;
                }
                let now = tokio::time::Instant::now();
                if !timed_out && now >= deadline {
                    timed_out = true;
                    reg.ready_timed_out(&s, &run, check.timeout);
                }
                drop(reg);
                let mut wake = if timed_out {
                    now + Duration::from_secs(3600)
                } else {
                    deadline
                };
                if !port_met || !http_met {
                    wake = wake.min(next_probe);
                }
                if let Some(p) = partial_in {
                    wake = wake.min(now + p);
                }
                next_change(&mut output_rx, &mut state_rx, wake).await;
            }
        }
    }

    /// The session met its ready condition: recorded, and queued once as a
    /// `ready` event.
    fn became_ready(&self, s: &Arc<Session>, run: &Arc<Run>, ports: Vec<u16>) {
        let after_ms = run.started_instant().elapsed().as_millis() as u64;
        if !s.set_readiness(run, Readiness::Ready { after_ms }) {
            return; // its run ended meanwhile
        }
        let text = match ports.as_slice() {
            [] => format!("is ready after {after_ms} ms"),
            ports => format!("is ready after {after_ms} ms, listening on {ports:?}"),
        };
        let about = self.about_event(s, &text);
        self.notifications.push_once(
            Some(format!("ready {}", s.run_key())),
            Event::Ready {
                about,
                after_ms,
                ports,
            },
        );
        // A daemon that takes the session over finds it ready.
        self.checkpoint_soon();
    }

    /// The ready condition's time passed: recorded, and queued once as a
    /// `ready_timeout` event; the session runs on.
    fn ready_timed_out(&self, s: &Arc<Session>, run: &Arc<Run>, timeout: Duration) {
        if !s.set_readiness(run, Readiness::Pending { timed_out: true }) {
            return;
        }
        let secs = timeout.as_secs_f64();
        let text = format!("is not ready after {secs} s; it is still running");
        let about = self.about_event(s, &text);
        self.notifications.push_once(
            Some(format!("ready_timeout {}", s.run_key())),
            Event::ReadyTimeout {
                about,
                timeout_s: secs,
            },
        );
    }

    /// Observes one running session's tree now, as the monitor's tick does
    /// for all, and returns what it saw (the last observation if /proc
    /// could not be scanned).
    pub(super) async fn probe(&self, s: &Session) -> Observation {
        self.observe_and_record(&[s]).await;
        s.observed()
    }

    /// Observes these sessions' trees with one /proc scan (off the event
    /// loop) and records what each shows (`record_observation`).
    pub(super) async fn observe_and_record(&self, sessions: &[&Session]) {
        let watched: Vec<Watched> = sessions
            .iter()
            .map(|s| Watched {
                tree: s.tree(),
                input: s.run().input.clone(),
            })
            .collect();
        let procfs = self.procfs.clone();
        let scanned =
            kill::scan_blocking(move || crate::observation::observe::observe(&procfs, &watched));
        let Ok(seen) = scanned.await else {
            return;
        };
        for (s, observation) in sessions.iter().zip(seen) {
            self.record_observation(s, observation);
        }
    }

    /// Keeps an observation on the session and sends what it newly shows:
    /// `port` for each new port, `input_wanted` once per prompt.
    pub(super) fn record_observation(&self, s: &Session, o: Observation) {
        for port in s.set_observed(o) {
            self.notifications.publish(Event::Port {
                session_id: s.id.clone(),
                port,
            });
        }
        if s.take_input_wanted() {
            let prompt = self.prompt_of(s);
            let about = self.about_event(s, &format!("is waiting for input: {prompt:?}"));
            // Once per prompt: the same output end is the same prompt, also
            // to a daemon that finds the session waiting after a crash.
            let key = format!("input_wanted {} {}", s.id, s.output.end());
            self.notifications
                .push_once(Some(key), Event::InputWanted { about, prompt });
        }
    }

    /// The last unfinished line of a session's output (redacted, ANSI
    /// stripped, at most 200 chars): what it asks.
    pub(super) fn prompt_of(&self, s: &Session) -> String {
        super::present::prompt(&self.redactor, s)
    }
}
