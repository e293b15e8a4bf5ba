//! Reading a session: poll, read (windows and long-polls), log, wait.

use super::{
    present::{poll_result, redacted_tail, status_of},
    Registry, DEFAULT_READ_BYTES, MAX_READ_BYTES, MAX_READ_WAIT, WAIT_OUTPUT_CHARS,
};
use crate::error::Error;
use crate::output::text::strip_ansi;
use crate::session;
use procd_proto::{LogResult, PollResult, ReadResult, TimeoutS, WaitMs, WaitResult, WaitStatus};
use std::time::Duration;

/// How old the resources a `poll` reports may be. Older ones (the
/// monitor's tick is a second apart) are read again at the poll, where the
/// session has a cgroup to read them from cheaply; a burst of polls reads
/// them once.
const FRESH_RESOURCES: Duration = Duration::from_millis(100);

impl Registry {
    pub fn poll(&self, id: &str, budget: Option<usize>) -> Result<PollResult, Error> {
        let s = match self.find(id) {
            Ok(s) => s,
            Err(e) => match self.find_queued(id) {
                Some(entry) => return Ok(self.poll_queued(&entry)),
                None => return Err(e),
            },
        };
        if s.run().cgroup.is_some() && s.is_running() && s.resources_older_than(FRESH_RESOURCES) {
            if let Some(now) = crate::observation::observe::resources_now(&self.procfs, &s.tree()) {
                s.set_resources(now);
            }
        }
        let mut r = poll_result(&self.redactor, &s);
        let cut = crate::output::budget::apply(
            &r.output_preview,
            budget,
            "use log (offset/limit) or read with a cursor for all of it",
        );
        r.output_preview = cut.text;
        r.original_chars = cut.original_chars;
        r.kept_error_lines = cut.kept_error_lines;
        Ok(r)
    }

    pub async fn read(
        &self,
        id: &str,
        cursor: Option<u64>,
        max_bytes: Option<u64>,
        wait_ms: Option<WaitMs>,
        budget: Option<usize>,
    ) -> Result<ReadResult, Error> {
        let cursor = cursor.unwrap_or(0);
        let max_bytes = max_bytes
            .unwrap_or(DEFAULT_READ_BYTES)
            .clamp(1, MAX_READ_BYTES.min(self.config.max_response_bytes as u64));
        let wait = wait_ms.map_or(Duration::ZERO, |w| w.duration().min(MAX_READ_WAIT));
        let deadline = tokio::time::Instant::now() + wait;
        let s = match self.find(id) {
            Ok(s) => s,
            // Queued: no output yet; a long poll waits for its start too.
            Err(e) => match self.find_queued(id) {
                None => return Err(e),
                Some(entry) => match self.until_started(&entry, wait).await? {
                    Some(s) => s,
                    None => return Ok(queued_read(cursor)),
                },
            },
        };
        loop {
            // Subscribe before looking, so no change between the two is lost.
            let mut output_changed = s.output.subscribe();
            let mut state_changed = s.subscribe();
            let state = s.state();
            let window = s
                .output
                .window(cursor, max_bytes)
                .await
                .map_err(|e| Error::Internal(format!("reading the log failed: {e}")))?;
            let exited = state.exit().is_some();
            let eof = exited && window.end() >= s.output.end();
            let now = tokio::time::Instant::now();
            if !window.bytes.is_empty() || eof || now >= deadline {
                let text = crate::output::text::lossy(&window.bytes);
                let data = self.redactor.excerpt(&text, &window.before, s.env_dump);
                let fetch = format!(
                    "read from cursor {} with a smaller max_bytes to see all of it",
                    window.start
                );
                let cut = crate::output::budget::apply(&data, budget, &fetch);
                return Ok(ReadResult {
                    original_chars: cut.original_chars,
                    kept_error_lines: cut.kept_error_lines,
                    data: cut.text,
                    cursor: window.start,
                    next_cursor: window.end(),
                    eof,
                    status: status_of(&state),
                    exit_code: state.exit().and_then(|e| e.exit_code),
                    dropped: window.dropped,
                });
            }
            let wake = if window.partial_pending {
                deadline.min(
                    now + s
                        .output
                        .partial_line_ready_in()
                        .max(Duration::from_millis(1)),
                )
            } else {
                deadline
            };
            next_change(&mut output_changed, &mut state_changed, wake).await;
        }
    }

    pub async fn log(
        &self,
        id: &str,
        offset: Option<u64>,
        limit: Option<u64>,
        budget: Option<usize>,
    ) -> Result<LogResult, Error> {
        let s = self.find(id)?;
        let limit = limit.unwrap_or(200).min(100_000);
        let crate::output::store::Lines {
            lines,
            first,
            total,
            before,
            truncated,
        } = s
            .output
            .lines(offset, limit, self.config.max_response_bytes)
            .await
            .map_err(|e| Error::Internal(format!("reading the log failed: {e}")))?;
        let n = lines.len() as u64;
        let showing = if n == 0 {
            format!("0 lines (of {total})")
        } else {
            format!("{n} lines ({}-{} of {total})", first, first + n - 1)
        };
        let mut output = strip_ansi(&lines.join("\n"));
        if n > 0 {
            output.push('\n');
        }
        let output = self.redactor.excerpt(&output, &before, s.env_dump);
        let cut = crate::output::budget::apply(
            &output,
            budget,
            &format!("use log with offset {first} and a smaller limit to see all of it"),
        );
        let output = cut.text;
        Ok(LogResult {
            original_chars: cut.original_chars,
            kept_error_lines: cut.kept_error_lines,
            session_id: s.id.clone(),
            command: s.shown_command().to_string(),
            status: status_of(&s.state()),
            output,
            total_lines: total,
            showing,
            truncated,
            next_offset: truncated.then_some(first + n),
        })
    }

    pub async fn wait(
        &self,
        id: &str,
        timeout_s: Option<TimeoutS>,
        budget: Option<usize>,
    ) -> Result<WaitResult, Error> {
        let longest = Duration::from_secs_f64(self.config.max_wait_s);
        let timeout = timeout_s.map_or(longest, |t| t.duration().min(longest));
        let began = tokio::time::Instant::now();
        let s = match self.find(id) {
            Ok(s) => s,
            Err(e) => {
                let Some(entry) = self.find_queued(id) else {
                    return Err(e);
                };
                match self.wait_queued(&entry, timeout).await? {
                    Ok(started) => started,
                    Err(still_queued) => return Ok(still_queued),
                }
            }
        };
        let exited = s.wait_exited(timeout.saturating_sub(began.elapsed())).await;
        let poll = poll_result(&self.redactor, &s);
        let output = redacted_tail(&self.redactor, &s, WAIT_OUTPUT_CHARS);
        let cut = crate::output::budget::apply(
            &output,
            budget,
            "use log (offset/limit) or read with a cursor for all of it",
        );
        let (output, original_chars, kept_error_lines) =
            (cut.text, cut.original_chars, cut.kept_error_lines);
        Ok(WaitResult {
            kept_error_lines,
            session_id: poll.session_id,
            command: poll.command,
            status: if exited.is_some() {
                WaitStatus::Exited
            } else {
                WaitStatus::Timeout
            },
            pid: poll.pid,
            started_at: poll.started_at,
            uptime_seconds: poll.uptime_seconds,
            output_preview: poll.output_preview,
            output,
            original_chars,
            process_running: exited.is_none().then_some(true),
            exit: poll.exit,
            restart: poll.restart,
            tests: poll.tests,
            queue: poll.queue,
        })
    }
}

/// A read of a spawn still queued: nothing yet, from where it was asked.
fn queued_read(cursor: u64) -> ReadResult {
    ReadResult {
        data: String::new(),
        cursor,
        next_cursor: cursor,
        eof: false,
        status: procd_proto::SessionStatus::Queued,
        exit_code: None,
        dropped: 0,
        original_chars: None,
        kept_error_lines: None,
    }
}

/// Sleeps until a session's output or state changes, or until `wake`.
/// The receivers are subscribed before the caller looked, so no change
/// between that look and this wait is lost.
pub(super) async fn next_change(
    output: &mut tokio::sync::watch::Receiver<u64>,
    state: &mut tokio::sync::watch::Receiver<session::SessionView>,
    wake: tokio::time::Instant,
) {
    tokio::select! {
        _ = output.changed() => {}
        _ = state.changed() => {}
        _ = tokio::time::sleep_until(wake) => {}
    }
}
