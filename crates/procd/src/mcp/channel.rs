//! `procd mcp --channel`: push, for clients that listen. The server
//! declares `experimental: {"claude/channel": {}}` and sends
//! `notifications/claude/channel` `{content, meta}` when one of its
//! agent's sessions completes, becomes ready (or not in time), wants
//! input, matches a watch pattern, is OOM-killed or restarted.
//!
//! Every push starts a model turn, so pushes are paced (as hermes-agent
//! paces its watch notifications): a session pushes at most once per
//! cooldown, except its completion, its last word; past a global rate the
//! breaker pauses all pushes, says so once, and the first push after the
//! pause counts what it held. Held events stay queued for `notifications`.

use procd_core::observation::watch::{Breaker, Verdict};
use procd_proto::Event;
use rmcp::model::{CustomNotification, ServerNotification};
use rmcp::{Peer, RoleServer};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

pub const METHOD: &str = "notifications/claude/channel";
pub const CAPABILITY: &str = "claude/channel";

/// At most one push per session per this long (completions excepted).
const SESSION_COOLDOWN: Duration = Duration::from_secs(10);
/// More pushes than this within `BREAKER_WINDOW` trip the breaker…
const BREAKER_MAX: usize = 15;
const BREAKER_WINDOW: Duration = Duration::from_secs(10);
/// …which holds every push for this long.
const BREAKER_PAUSE: Duration = Duration::from_secs(30);
/// The longest content pushed; the rest is in `notifications`.
const MAX_CONTENT_CHARS: usize = 2000;

/// What to do with one event.
#[derive(Debug, PartialEq)]
pub enum Pace {
    /// Push it, with this said first (what was held before it), if any.
    Push(Option<String>),
    /// Hold it (counted; it stays queued for `notifications`).
    Hold,
    /// The breaker tripped on it: push this notice instead, then hold.
    Trip(String),
}

/// The pacing state: per-session cooldowns and the global breaker (the
/// watch breaker's kind, at the push's numbers).
pub struct Pacing {
    sessions: HashMap<String, (Instant, u32)>,
    breaker: Breaker,
}

impl Default for Pacing {
    fn default() -> Pacing {
        Pacing {
            sessions: HashMap::new(),
            breaker: Breaker::new(BREAKER_MAX, BREAKER_WINDOW, BREAKER_PAUSE),
        }
    }
}

impl Pacing {
    pub fn admit(&mut self, session: &str, completion: bool, now: Instant) -> Pace {
        // Within its cooldown a session's push is held before the breaker
        // counts it (a completion never is).
        if let Some((last, held)) = self.sessions.get_mut(session) {
            if !completion && now.duration_since(*last) < SESSION_COOLDOWN {
                *held += 1;
                return Pace::Hold;
            }
        }
        let held_in_pause = match self.breaker.judge(now.into_std()) {
            Verdict::Hold => return Pace::Hold,
            Verdict::Trip => {
                return Pace::Trip(format!(
                    "procd: {BREAKER_MAX} events in {} s, so pushes pause for {} s. Call `notifications` to read what is held.",
                    BREAKER_WINDOW.as_secs(),
                    BREAKER_PAUSE.as_secs()
                ))
            }
            Verdict::Pass { held } => held,
        };
        let held_here = self
            .sessions
            .insert(session.to_string(), (now, 0))
            .map_or(0, |(_, held)| held);
        let mut said = Vec::new();
        if held_in_pause > 0 {
            said.push(format!(
                "procd held {held_in_pause} event(s) while pushes were paused; call `notifications` for them."
            ));
        }
        if held_here > 0 {
            said.push(format!(
                "({held_here} earlier event(s) of {session} were held; call `notifications` for them.)"
            ));
        }
        Pace::Push((!said.is_empty()).then(|| said.join(" ")))
    }
}

/// Follows the daemon's events and pushes this agent's to the client
/// until the client goes away. Rides through a daemon restart.
pub async fn push(
    client: Arc<procd_client::Reconnecting>,
    keys: Vec<String>,
    peer: Peer<RoleServer>,
) {
    let mut pacing = Pacing::default();
    // The last event number seen: a new daemon is asked for what came
    // after it, so a restart loses no push.
    let mut last: Option<u64> = None;
    loop {
        let since = last;
        let subscribe = move |c: Arc<jsonrpsee::core::client::Client>| async move {
            procd_client::ProcdApiClient::subscribe_events(&*c, since).await
        };
        let Ok(mut events) = client.call(subscribe).await else {
            return;
        };
        while let Some(streamed) = events.next().await {
            let Ok(streamed) = streamed else { break };
            last = streamed.seq.or(last);
            let event = streamed.event;
            let Some(about) = event.about() else { continue };
            let mine = about.session_key.as_ref().is_some_and(|k| keys.contains(k));
            if !mine {
                continue;
            }
            let completion = matches!(event, Event::Completion { .. });
            let content = match pacing.admit(&about.session_id, completion, Instant::now()) {
                Pace::Hold => continue,
                Pace::Trip(notice) => notice,
                Pace::Push(None) => about.text.clone(),
                Pace::Push(Some(before)) => format!("{before}\n{}", about.text),
            };
            if send(&peer, content, meta_of(&event)).await.is_err() {
                return; // the client is gone
            }
        }
    }
}

/// The pushed `meta`: strings only, as the channel's clients take them.
fn meta_of(event: &Event) -> serde_json::Value {
    let kind = serde_json::to_value(event)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(String::from))
        .unwrap_or_default();
    let mut meta = json!({ "source": "procd", "type": kind });
    if let Some(id) = event.session_id() {
        meta["session_id"] = json!(id);
    }
    if let Event::Completion {
        exit_code,
        completion_reason,
        ..
    } = event
    {
        meta["exit_code"] = json!(exit_code.map_or("unknown".into(), |c| c.to_string()));
        meta["completion_reason"] = json!(format!("{completion_reason:?}").to_lowercase());
    }
    meta
}

async fn send(
    peer: &Peer<RoleServer>,
    content: String,
    meta: serde_json::Value,
) -> Result<(), rmcp::ServiceError> {
    let plain = procd_core::output::text::strip_ansi(&content);
    let content: String = plain.chars().take(MAX_CONTENT_CHARS).collect();
    let note = CustomNotification::new(METHOD, Some(json!({ "content": content, "meta": meta })));
    peer.send_notification(ServerNotification::CustomNotification(note))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_are_paced_per_session_and_by_a_breaker() {
        let mut p = Pacing::default();
        let t0 = Instant::now();
        assert_eq!(p.admit("a", false, t0), Pace::Push(None));
        // The same session again within its cooldown: held…
        assert_eq!(p.admit("a", false, t0 + Duration::from_secs(1)), Pace::Hold);
        // …but not its completion, which says what was held.
        match p.admit("a", true, t0 + Duration::from_secs(2)) {
            Pace::Push(Some(said)) => assert!(said.contains("1 earlier event"), "{said}"),
            other => panic!("{other:?}"),
        }
        // Many sessions at once trip the breaker once, then hold.
        let t1 = t0 + Duration::from_secs(20);
        let mut pushed = 0;
        let mut trips = 0;
        for i in 0..40 {
            match p.admit(&format!("s{i}"), false, t1) {
                Pace::Push(_) => pushed += 1,
                Pace::Trip(_) => trips += 1,
                Pace::Hold => {}
            }
        }
        assert_eq!((pushed, trips), (BREAKER_MAX, 1));
        // After the pause, the next push counts what was held.
        match p.admit("late", false, t1 + BREAKER_PAUSE) {
            Pace::Push(Some(said)) => assert!(said.contains("held 25 event(s)"), "{said}"),
            other => panic!("{other:?}"),
        }
    }
}
