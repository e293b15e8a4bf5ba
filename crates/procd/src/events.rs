//! `procd events`: the daemon's events as a watcher's stream, one line
//! each, flushed as it comes, for a tool that turns each line into a
//! message to a model (Claude Code's Monitor) and for agent hooks
//! (`--pending`). docs/agents.md has the recipes.
//!
//! A line is `SEQ KIND SESSION TEXT`: the event's number (`-` for the
//! few without one), its kind, its session, and its text with escape
//! sequences and line breaks taken out, at most `--max-chars` long. After
//! a daemon's death the stream subscribes again from the last number it
//! printed, so nothing still kept (the last 1000 events) is lost;
//! `--since SEQ` does the same across runs of the command.

use crate::base::{EXIT_OK, EXIT_USAGE};
use jsonrpsee::core::client::{Client, Error as ClientError};
use procd_client::ProcdApiClient;
use procd_proto::{Event, StreamedEvent};
use std::collections::HashSet;
use std::io::Write;
use std::sync::Arc;

/// The kinds a line can be of, as `--kinds` names them.
pub const KINDS: &[&str] = &[
    "completed",
    "exited",
    "started",
    "ready",
    "ready_timeout",
    "input_wanted",
    "watch",
    "oom",
    "restarted",
    "port",
    "close_terminal",
    "lagged",
];

const DEFAULT_MAX_CHARS: usize = 400;

#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    /// Only this session's events (an id, a prefix or a name; repeatable).
    #[arg(long = "session", value_name = "ID")]
    sessions: Vec<String>,
    /// Only the events of the session of this name (`project/name` for a
    /// stack's service; repeatable), as it is when the stream starts.
    #[arg(long = "name", value_name = "NAME")]
    names: Vec<String>,
    /// Only the events of sessions started with this session key (repeatable).
    #[arg(long = "key", value_name = "KEY")]
    keys: Vec<String>,
    /// Only these kinds, comma-separated: completed, exited, started,
    /// ready, ready_timeout, input_wanted, watch, oom, restarted, port.
    #[arg(long, value_delimiter = ',', value_name = "KINDS")]
    kinds: Vec<String>,
    /// Start after this sequence number (a line's first field): what came
    /// after it and is still kept is printed first.
    #[arg(long, value_name = "SEQ")]
    since: Option<u64>,
    /// Take the queued events of --key (as drain_notifications does),
    /// print them and exit 0, printing nothing when there are none: for
    /// agent hooks.
    #[arg(long, requires = "keys", conflicts_with_all = ["since", "sessions", "names"])]
    pending: bool,
    /// The longest line, in characters.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CHARS)]
    max_chars: usize,
}

/// What a line must be about to be printed.
struct Filter {
    sessions: HashSet<String>,
    keys: HashSet<String>,
    kinds: HashSet<String>,
}

impl Filter {
    fn admits(&self, e: &Event) -> bool {
        let id = e.session_id().unwrap_or_default();
        let key = match e {
            Event::Started { session_key, .. } | Event::Exited { session_key, .. } => {
                session_key.as_deref()
            }
            other => other.session_key(),
        };
        (self.sessions.is_empty() || self.sessions.contains(id))
            && (self.keys.is_empty() || key.is_some_and(|k| self.keys.contains(k)))
            && (self.kinds.is_empty() || self.kinds.contains(kind_of(e)))
    }
}

/// `procd events`, to its exit status.
pub async fn run(
    args: &EventsArgs,
    json: bool,
    conn: &procd_client::Reconnecting,
) -> Result<i32, ClientError> {
    if let Some(bad) = args.kinds.iter().find(|k| !KINDS.contains(&k.as_str())) {
        eprintln!(
            "procd events: --kinds: unknown kind {bad:?} (one of {})",
            KINDS.join(", ")
        );
        return Ok(EXIT_USAGE);
    }
    if args.max_chars < 40 {
        eprintln!("procd events: --max-chars: at least 40");
        return Ok(EXIT_USAGE);
    }
    let client = conn
        .get()
        .await
        .map_err(|e| ClientError::Transport(e.into()))?;
    let mut sessions = HashSet::new();
    for arg in args.sessions.iter().chain(&args.names) {
        sessions.insert(procd_client::resolve_session(&client, arg).await?);
    }
    let filter = Filter {
        sessions,
        keys: args.keys.iter().cloned().collect(),
        kinds: args.kinds.iter().cloned().collect(),
    };
    let print = |streamed: &StreamedEvent| {
        if !filter.admits(&streamed.event) {
            return true;
        }
        let line = match json {
            true => serde_json::to_string(streamed).unwrap_or_default(),
            false => line_of(streamed, args.max_chars),
        };
        let mut out = std::io::stdout().lock();
        // A reader that went away ends the stream.
        writeln!(out, "{line}").and_then(|_| out.flush()).is_ok()
    };
    if args.pending {
        return pending(&client, args, print).await;
    }
    follow(conn, args.since, print).await
}

/// `--pending`: what is queued for the keys, taken and printed.
async fn pending(
    client: &Client,
    args: &EventsArgs,
    print: impl Fn(&StreamedEvent) -> bool,
) -> Result<i32, ClientError> {
    // clap makes --pending require --key: there is a first one.
    let Some((first, owned)) = args.keys.split_first() else {
        return Ok(EXIT_USAGE);
    };
    let owned = Some(owned.to_vec()).filter(|o| !o.is_empty());
    let drained = client
        .drain_notifications(Some(first.clone()), owned)
        .await?;
    for event in drained.events {
        print(&StreamedEvent { seq: None, event });
    }
    Ok(EXIT_OK)
}

/// The stream, riding through daemon restarts from the last number seen.
/// It ends when the daemon ends the subscription (it is stopping).
async fn follow(
    conn: &procd_client::Reconnecting,
    since: Option<u64>,
    print: impl Fn(&StreamedEvent) -> bool,
) -> Result<i32, ClientError> {
    let mut last = since;
    let mut gone = reader_gone();
    loop {
        let from = last;
        let subscribe = move |c: Arc<Client>| async move { c.subscribe_events(from).await };
        let mut events = conn.call(subscribe).await?;
        loop {
            let streamed = tokio::select! {
                streamed = events.next() => streamed,
                _ = &mut gone => return Ok(EXIT_OK),
            };
            let Some(streamed) = streamed else { break };
            let Ok(streamed) = streamed else { continue };
            last = streamed.seq.or(last);
            if !print(&streamed) {
                return Ok(EXIT_OK);
            }
        }
        if conn.last().await.is_connected() {
            return Ok(EXIT_OK);
        }
        if last.is_none() {
            eprintln!("procd events: procd restarted before any event came; events of the restart itself may be missed");
        }
    }
}

/// Resolves when the reader of our stdout is gone (a pipe whose other
/// end closed), so `procd events | head -n 1` ends after its line instead
/// of at the next event's write. A terminal or a file never resolves it.
fn reader_gone() -> tokio::sync::oneshot::Receiver<()> {
    use rustix::event::{poll, PollFd, PollFlags};
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let stdout = std::io::stdout();
        let stdout = std::os::fd::AsFd::as_fd(&stdout);
        loop {
            // No events asked: poll reports only an error or a hang-up.
            let mut fds = [PollFd::new(&stdout, PollFlags::empty())];
            match poll(&mut fds, None) {
                Ok(_) if fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP) => {
                    let _ = tx.send(());
                    return;
                }
                // Nothing to watch (NVAL: no stdout at all): stop looking.
                Ok(_) if !fds[0].revents().is_empty() => return,
                Ok(_) | Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return,
            }
        }
    });
    rx
}

/// The kind a line says.
fn kind_of(e: &Event) -> &'static str {
    match e {
        Event::Completion { .. } => "completed",
        Event::Exited { .. } => "exited",
        Event::Started { .. } => "started",
        Event::Ready { .. } => "ready",
        Event::ReadyTimeout { .. } => "ready_timeout",
        Event::InputWanted { .. } => "input_wanted",
        Event::WatchMatch { .. } | Event::WatchDisabled { .. } => "watch",
        Event::Oom { .. } => "oom",
        Event::Restarted { .. } => "restarted",
        Event::Port { .. } => "port",
        Event::CloseTerminal { .. } => "close_terminal",
        Event::Lagged { .. } => "lagged",
    }
}

/// One event as one line: `SEQ KIND SESSION TEXT`.
pub fn line_of(streamed: &StreamedEvent, max_chars: usize) -> String {
    let e = &streamed.event;
    let text = match e {
        Event::Started { pid, command, .. } => format!("started (pid {pid}): {command}"),
        Event::Exited {
            exit_code,
            signal,
            completion_reason,
            command,
            ..
        } => {
            let how = match (exit_code, signal) {
                (Some(code), _) => format!("exit code {code}"),
                (None, Some(signal)) => signal.clone(),
                (None, None) => "exit status unknown".into(),
            };
            let reason = serde_json::to_value(completion_reason).unwrap_or_default();
            let reason = reason.as_str().unwrap_or_default();
            format!("exited ({how}, {reason}): {command}")
        }
        Event::Port { port, .. } => format!("listening on port {port}"),
        Event::CloseTerminal { .. } => "a UI closed its view".to_string(),
        Event::Lagged { missed } => {
            format!("{missed} event(s) were missed (no longer kept, or this reader fell behind)")
        }
        other => other.text().unwrap_or_default().to_string(),
    };
    let seq = streamed.seq.map_or("-".to_string(), |s| s.to_string());
    let line = format!(
        "{seq} {} {} {}",
        kind_of(e),
        e.session_id().unwrap_or("-"),
        one_line(&text)
    );
    match line.char_indices().nth(max_chars.saturating_sub(1)) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

/// Text on one line: escape sequences and control characters out, line
/// breaks as " ⏎ ", runs of blanks as one.
fn one_line(text: &str) -> String {
    let plain = procd_core::output::text::strip_ansi(text);
    let mut out = String::with_capacity(plain.len());
    for (i, line) in plain.trim_end().split('\n').enumerate() {
        if i > 0 {
            out.push_str(" ⏎ ");
        }
        let mut blank = false;
        for c in line.chars() {
            let c = if c.is_control() { ' ' } else { c };
            if c == ' ' && blank {
                continue;
            }
            blank = c == ' ';
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(command: &str) -> StreamedEvent {
        StreamedEvent {
            seq: Some(7),
            event: Event::Started {
                session_id: "proc_1".into(),
                pid: 42,
                command: command.into(),
                task_id: None,
                session_key: Some("k".into()),
                pty: false,
                started_at: String::new(),
                meta: None,
            },
        }
    }

    #[test]
    fn an_event_is_one_bounded_line_without_escapes() {
        let line = line_of(
            &started("printf '\x1b[31mred\x1b[0m\\n'\nsecond\tline\r"),
            400,
        );
        assert_eq!(
            line,
            "7 started proc_1 started (pid 42): printf 'red\\n' ⏎ second line"
        );
        let long = line_of(&started(&"x".repeat(1000)), 100);
        assert_eq!(long.chars().count(), 100);
        assert!(long.ends_with('…'));
        assert!(!long.contains('\n'));
    }

    #[test]
    fn the_filter_takes_sessions_keys_and_kinds() {
        let e = started("true").event;
        let f = |s: &[&str], k: &[&str], kinds: &[&str]| Filter {
            sessions: s.iter().map(|x| x.to_string()).collect(),
            keys: k.iter().map(|x| x.to_string()).collect(),
            kinds: kinds.iter().map(|x| x.to_string()).collect(),
        };
        assert!(f(&[], &[], &[]).admits(&e));
        assert!(f(&["proc_1"], &["k"], &["started"]).admits(&e));
        assert!(!f(&["proc_2"], &[], &[]).admits(&e));
        assert!(!f(&[], &["other"], &[]).admits(&e));
        assert!(!f(&[], &[], &["completed"]).admits(&e));
        for kind in KINDS {
            assert!(!kind.contains(' '));
        }
    }
}
