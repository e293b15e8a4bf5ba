//! Blocking tools keep the client informed: while a call waits (a start
//! that yields, `wait`, a long `read`, a `write` that yields, `up`), a
//! request that carries a `progressToken` gets `notifications/progress`
//! every interval, saying what is awaited and the last output line, so a
//! client that resets its timeout on progress (the TypeScript SDK's
//! `resetTimeoutOnProgress`, Claude Code) does not give up. A
//! `notifications/cancelled` ends the wait at once; the process runs on.

use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use std::future::Future;
use std::time::Duration;

/// What a tool waits on, for its progress messages.
pub struct Awaited<'a> {
    /// "proc_x to exit", "proc_x to be ready", …
    pub what: String,
    /// The sessions whose last line each message quotes.
    pub sessions: &'a [String],
}

/// How a wait ended.
pub enum Waited<T> {
    Done(T),
    /// The client cancelled the request.
    Cancelled,
}

impl super::ProcdMcp {
    /// Runs `work`, sending progress every `self.progress_every` while it
    /// runs if the request asked for progress, and stopping at a
    /// cancellation.
    pub(super) async fn awaiting<T>(
        &self,
        ctx: &RequestContext<RoleServer>,
        awaited: Awaited<'_>,
        work: impl Future<Output = T>,
    ) -> Waited<T> {
        let token = ctx.meta.get_progress_token();
        let begun = tokio::time::Instant::now();
        let mut ticks = tokio::time::interval_at(begun + self.progress_every, self.progress_every);
        tokio::pin!(work);
        let mut sent = 0u32;
        loop {
            tokio::select! {
                done = &mut work => return Waited::Done(done),
                _ = ctx.ct.cancelled() => return Waited::Cancelled,
                _ = ticks.tick(), if token.is_some() => {
                    let Some(token) = token.clone() else { continue };
                    sent += 1;
                    let message = self.progress_message(&awaited, begun.elapsed()).await;
                    let mut note = ProgressNotificationParam::new(token, f64::from(sent));
                    note.message = Some(message);
                    // A client that stopped listening only loses the note.
                    let _ = ctx.peer.notify_progress(note).await;
                }
            }
        }
    }

    /// "waiting 12 s for proc_x to exit; last line: …".
    async fn progress_message(&self, awaited: &Awaited<'_>, waited: Duration) -> String {
        let mut message = format!("waiting {} s for {}", waited.as_secs(), awaited.what);
        for id in awaited.sessions.iter().take(4) {
            if let Some(line) = self.last_line(id).await {
                message.push_str(&format!("; {id} last printed: {line}"));
            }
        }
        message
    }

    /// A session's last non-empty output line (escapes stripped, at most
    /// 200 characters), if it printed one.
    async fn last_line(&self, id: &str) -> Option<String> {
        use procd_client::ProcdApiClient;
        let budget = Some(procd_proto::MaxOutputChars::new(400));
        let p = self
            .client()
            .await
            .poll(id.to_string(), budget, None)
            .await
            .ok()?;
        let plain = procd_core::output::text::strip_ansi(&p.output_preview);
        let line = plain.lines().rev().find(|l| !l.trim().is_empty())?;
        Some(procd_core::output::text::last_chars(line.trim_end(), 200).to_string())
    }
}

/// The interval between two progress notes: `--progress-interval`,
/// default 5 s.
pub const DEFAULT_PROGRESS_EVERY: Duration = Duration::from_secs(5);
