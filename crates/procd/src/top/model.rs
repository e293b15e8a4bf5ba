//! What `procd top` shows and what a key asks for, without a terminal or
//! a daemon: the loop (mod.rs) feeds it lists, log text and keys, and
//! carries out the `Action`s it returns; view.rs draws it.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use procd_proto::{ProcessEntry, SessionStatus};
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// Lines the log pane keeps of the session it follows.
pub const LOG_LINES: usize = 500;
/// Characters of a prompt's text (a line to send, a filter).
const PROMPT_CHARS: usize = 4096;

/// One session as a row: its list entry and the CPU share since the last
/// list (None for the first sighting or a finished session).
pub struct Row {
    pub entry: ProcessEntry,
    pub cpu_percent: Option<f64>,
}

impl Row {
    pub fn running(&self) -> bool {
        self.entry.status == SessionStatus::Running
    }

    /// What a person calls it: its name, else its id.
    pub fn label(&self) -> String {
        self.entry
            .name
            .clone()
            .unwrap_or_else(|| self.entry.session_id.clone())
    }

    /// The last non-empty line of its output, control characters gone.
    pub fn last_line(&self) -> String {
        let text = procd_core::output::text::strip_ansi(&self.entry.output_preview);
        text.lines()
            .rev()
            .map(|l| l.trim_end_matches('\r'))
            .find(|l| !l.trim().is_empty())
            .map(printable)
            .unwrap_or_default()
    }

    fn matches(&self, filter: &str) -> bool {
        if filter.is_empty() {
            return true;
        }
        let needle = filter.to_lowercase();
        let e = &self.entry;
        [
            Some(e.session_id.as_str()),
            e.name.as_deref(),
            e.project.as_deref(),
            Some(e.command.as_str()),
        ]
        .into_iter()
        .flatten()
        .any(|field| field.to_lowercase().contains(&needle))
    }
}

/// Text as a terminal cell shows it: tabs as spaces, other controls gone.
pub fn printable(text: &str) -> String {
    text.chars()
        .filter_map(|c| match c {
            '\t' => Some(' '),
            c if c.is_control() => None,
            c => Some(c),
        })
        .collect()
}

/// The bottom line's mode: the key help, or a question being answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    None,
    /// `/`: the filter being typed (applied as it is typed).
    Filter,
    /// `s`: a line to type into the session.
    Send {
        session_id: String,
        text: String,
    },
    /// `k`: "kill it?" until y or another key.
    ConfirmKill {
        session_id: String,
        label: String,
    },
}

/// The selected session's output, followed live.
pub struct LogPane {
    pub session_id: String,
    pub lines: VecDeque<String>,
    /// The last line, not yet ended by a newline.
    partial: String,
}

impl LogPane {
    fn new(session_id: String) -> LogPane {
        LogPane {
            session_id,
            lines: VecDeque::new(),
            partial: String::new(),
        }
    }

    /// Adds output as it came (any split); keeps the last `LOG_LINES`.
    pub fn push(&mut self, data: &str) {
        let text = procd_core::output::text::strip_ansi(data);
        for piece in text.split_inclusive('\n') {
            match piece.strip_suffix('\n') {
                Some(line) => {
                    self.partial.push_str(line);
                    let line = std::mem::take(&mut self.partial);
                    // A carriage return rewrites the line (a progress bar):
                    // what follows the last one is what a terminal shows.
                    let shown = line.trim_end_matches('\r').rsplit('\r').next();
                    self.lines.push_back(printable(shown.unwrap_or("")));
                    if self.lines.len() > LOG_LINES {
                        self.lines.pop_front();
                    }
                }
                None => self.partial.push_str(piece),
            }
        }
    }

    /// The lines to show, the unfinished last one included.
    pub fn shown(&self) -> impl Iterator<Item = String> + '_ {
        let partial = (!self.partial.is_empty()).then(|| printable(&self.partial));
        self.lines.iter().cloned().chain(partial)
    }
}

/// Whether the daemon is reachable.
#[derive(Debug, Clone, PartialEq)]
pub enum Link {
    /// Not yet connected (top has just started).
    Connecting,
    Up,
    /// The connection went; top keeps trying.
    Lost {
        since: Instant,
    },
}

/// What a key asks the loop to do.
#[derive(Debug, PartialEq)]
pub enum Action {
    Nothing,
    Quit,
    /// Follow this session's log in the pane (None: close the pane).
    FollowLog(Option<String>),
    Attach(String),
    Send {
        session_id: String,
        text: String,
    },
    Kill(String),
    Restart(String),
}

/// Everything top shows.
pub struct Model {
    rows: Vec<Row>,
    /// The selected session, by id, so that it stays selected as rows
    /// come and go.
    selected: Option<String>,
    pub filter: String,
    pub prompt: Prompt,
    pub log: Option<LogPane>,
    /// The last action's outcome (or error), shown until the next.
    pub notice: Option<String>,
    pub link: Link,
    /// Each session's CPU seconds when last listed, for the CPU column.
    cpu_seen: HashMap<String, (f64, Instant)>,
    /// The jobserver's tokens and who holds them (`status.jobserver`).
    pub jobserver: Option<procd_proto::JobserverStatus>,
}

impl Default for Model {
    fn default() -> Model {
        Model {
            rows: Vec::new(),
            selected: None,
            filter: String::new(),
            prompt: Prompt::None,
            log: None,
            notice: None,
            link: Link::Connecting,
            cpu_seen: HashMap::new(),
            jobserver: None,
        }
    }
}

impl Model {
    /// A fresh list from the daemon, listed at `now`.
    pub fn set_list(&mut self, entries: Vec<ProcessEntry>, now: Instant) {
        let mut seen = HashMap::with_capacity(entries.len());
        let mut rows: Vec<Row> = entries
            .into_iter()
            .map(|entry| {
                let cpu = entry.activity.resources.cpu_seconds;
                let cpu_percent = match self.cpu_seen.get(&entry.session_id) {
                    Some((before, at)) if entry.status == SessionStatus::Running => {
                        let wall = now.duration_since(*at).as_secs_f64();
                        (wall > 0.0).then(|| ((cpu - before).max(0.0) / wall) * 100.0)
                    }
                    _ => None,
                };
                seen.insert(entry.session_id.clone(), (cpu, now));
                Row { entry, cpu_percent }
            })
            .collect();
        // Grouped by project as `procd ps` does, the unprojected first,
        // each group in start order; running ones before finished ones.
        rows.sort_by(|a, b| {
            (!a.running(), &a.entry.project, &a.entry.started_at).cmp(&(
                !b.running(),
                &b.entry.project,
                &b.entry.started_at,
            ))
        });
        self.cpu_seen = seen;
        self.rows = rows;
        self.link = Link::Up;
        if self.selected_row().is_none() {
            self.selected = self.first_visible();
        }
    }

    /// The rows the filter lets through, in order.
    pub fn visible(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| r.matches(&self.filter))
    }

    fn first_visible(&self) -> Option<String> {
        self.visible().next().map(|r| r.entry.session_id.clone())
    }

    pub fn counts(&self) -> (usize, usize) {
        let running = self.rows.iter().filter(|r| r.running()).count();
        (running, self.rows.len() - running)
    }

    pub fn selected_row(&self) -> Option<&Row> {
        let id = self.selected.as_deref()?;
        self.visible().find(|r| r.entry.session_id == id)
    }

    /// The selected row's position among the visible ones.
    pub fn selected_index(&self) -> Option<usize> {
        let id = self.selected.as_deref()?;
        self.visible().position(|r| r.entry.session_id == id)
    }

    fn move_selection(&mut self, by: isize) -> Action {
        let ids: Vec<String> = self.visible().map(|r| r.entry.session_id.clone()).collect();
        if ids.is_empty() {
            self.selected = None;
            return Action::Nothing;
        }
        let at = self.selected_index().unwrap_or(0) as isize;
        let to = (at + by).clamp(0, ids.len() as isize - 1) as usize;
        self.selected = Some(ids[to].clone());
        self.follow_selection()
    }

    /// The log pane, when open, follows the selection.
    fn follow_selection(&mut self) -> Action {
        match (&self.log, &self.selected) {
            (Some(pane), Some(id)) if &pane.session_id != id => Action::FollowLog(Some(id.clone())),
            _ => Action::Nothing,
        }
    }

    /// Opens (or closes, with None) the log pane; the loop calls this as
    /// it starts (or stops) following.
    pub fn show_log(&mut self, session_id: Option<String>) {
        self.log = session_id.map(LogPane::new);
    }

    /// What a key asks for; edits a prompt in place.
    pub fn key(&mut self, key: KeyEvent) -> Action {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        match std::mem::replace(&mut self.prompt, Prompt::None) {
            Prompt::None => self.command_key(key),
            Prompt::Filter => {
                match key.code {
                    KeyCode::Enter => {}
                    KeyCode::Esc => self.filter.clear(),
                    KeyCode::Backspace => {
                        self.filter.pop();
                        self.prompt = Prompt::Filter;
                    }
                    KeyCode::Char(c) if !ctrl => {
                        if self.filter.chars().count() < PROMPT_CHARS {
                            self.filter.push(c);
                        }
                        self.prompt = Prompt::Filter;
                    }
                    _ => self.prompt = Prompt::Filter,
                }
                if self.selected_row().is_none() {
                    self.selected = self.first_visible();
                }
                self.follow_selection()
            }
            Prompt::Send {
                session_id,
                mut text,
            } => match key.code {
                KeyCode::Enter => Action::Send { session_id, text },
                KeyCode::Esc => Action::Nothing,
                code => {
                    match code {
                        KeyCode::Backspace => {
                            text.pop();
                        }
                        KeyCode::Char(c) if !ctrl && text.chars().count() < PROMPT_CHARS => {
                            text.push(c)
                        }
                        _ => {}
                    }
                    self.prompt = Prompt::Send { session_id, text };
                    Action::Nothing
                }
            },
            Prompt::ConfirmKill { session_id, .. } => match key.code {
                KeyCode::Char('y') | KeyCode::Char('Y') => Action::Kill(session_id),
                _ => {
                    self.notice = Some("not killed".into());
                    Action::Nothing
                }
            },
        }
    }

    fn command_key(&mut self, key: KeyEvent) -> Action {
        let selected = self.selected_row().map(|r| {
            (
                r.entry.session_id.clone(),
                r.label(),
                r.running(),
                r.entry.name.is_some(),
            )
        });
        match key.code {
            KeyCode::Char('q') => Action::Quit,
            KeyCode::Up => self.move_selection(-1),
            KeyCode::Down => self.move_selection(1),
            KeyCode::PageUp => self.move_selection(-10),
            KeyCode::PageDown => self.move_selection(10),
            KeyCode::Home => self.move_selection(isize::MIN / 2),
            KeyCode::End => self.move_selection(isize::MAX / 2),
            KeyCode::Char('/') => {
                self.prompt = Prompt::Filter;
                Action::Nothing
            }
            KeyCode::Esc if self.log.is_some() => Action::FollowLog(None),
            KeyCode::Esc => {
                self.filter.clear();
                Action::Nothing
            }
            KeyCode::Char('l') => match (&self.log, selected) {
                (Some(_), _) => Action::FollowLog(None),
                (None, Some((id, ..))) => Action::FollowLog(Some(id)),
                (None, None) => Action::Nothing,
            },
            KeyCode::Char(c @ ('a' | 's' | 'k' | 'r')) => {
                let Some((id, label, running, named)) = selected else {
                    self.notice = Some("no session selected".into());
                    return Action::Nothing;
                };
                match c {
                    _ if !running && c != 'r' => {
                        self.notice = Some(format!("{label} has ended"));
                        Action::Nothing
                    }
                    'a' => Action::Attach(id),
                    's' => {
                        self.prompt = Prompt::Send {
                            session_id: id,
                            text: String::new(),
                        };
                        Action::Nothing
                    }
                    'k' => {
                        self.prompt = Prompt::ConfirmKill {
                            session_id: id,
                            label,
                        };
                        Action::Nothing
                    }
                    _ if !named => {
                        self.notice =
                            Some(format!("{label}: r restarts stack services (procd up)"));
                        Action::Nothing
                    }
                    _ => Action::Restart(id),
                }
            }
            _ => Action::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyEventKind;

    fn entry(id: &str, name: Option<&str>, running: bool, cpu: f64) -> ProcessEntry {
        serde_json::from_value(serde_json::json!({
            "session_id": id, "name": name, "command": format!("run {id}"), "cwd": "/",
            "pid": 10, "status": if running { "running" } else { "exited" },
            "exit_code": if running { None } else { Some(3) },
            "started_at": format!("2026-01-01T00:00:0{}Z", id.len() % 10),
            "uptime_seconds": 1.0, "output_preview": "one\n\x1b[31mtwo\x1b[0m\n\n",
            "task_id": null, "session_key": null, "pty": false, "persist": false,
            "notify_on_complete": false, "watch_patterns": [],
            "ports": [], "resources": {"procs": 1, "rss_bytes": 0, "cpu_seconds": cpu},
            "ready": null, "ready_after_ms": null, "waiting_for_input": false
        }))
        .expect("entry")
    }

    fn press(code: KeyCode) -> KeyEvent {
        KeyEvent {
            code,
            modifiers: KeyModifiers::NONE,
            kind: KeyEventKind::Press,
            state: crossterm::event::KeyEventState::NONE,
        }
    }

    #[test]
    fn cpu_share_comes_from_two_lists() {
        let mut m = Model::default();
        let t0 = Instant::now();
        m.set_list(vec![entry("proc_a", None, true, 1.0)], t0);
        assert_eq!(m.selected_row().map(|r| r.cpu_percent), Some(None));
        let t1 = t0 + std::time::Duration::from_secs(2);
        m.set_list(vec![entry("proc_a", None, true, 2.0)], t1);
        let share = m.selected_row().and_then(|r| r.cpu_percent);
        assert!(share.is_some_and(|p| (p - 50.0).abs() < 1e-6), "{share:?}");
        assert_eq!(m.selected_row().map(Row::last_line).as_deref(), Some("two"));
    }

    #[test]
    fn selection_stays_on_its_session_and_kill_asks_first() {
        let mut m = Model::default();
        let now = Instant::now();
        m.set_list(
            vec![
                entry("proc_a", Some("web"), true, 0.0),
                entry("proc_bb", None, true, 0.0),
            ],
            now,
        );
        assert_eq!(m.key(press(KeyCode::Down)), Action::Nothing);
        assert_eq!(m.selected_row().map(Row::label).as_deref(), Some("proc_bb"));
        // A new first row does not move the selection.
        m.set_list(
            vec![
                entry("proc_c", None, true, 0.0),
                entry("proc_a", Some("web"), true, 0.0),
                entry("proc_bb", None, true, 0.0),
            ],
            now,
        );
        assert_eq!(m.selected_row().map(Row::label).as_deref(), Some("proc_bb"));
        assert_eq!(m.key(press(KeyCode::Char('k'))), Action::Nothing);
        assert!(matches!(m.prompt, Prompt::ConfirmKill { .. }));
        assert_eq!(m.key(press(KeyCode::Char('n'))), Action::Nothing);
        assert_eq!(m.key(press(KeyCode::Char('k'))), Action::Nothing);
        assert_eq!(
            m.key(press(KeyCode::Char('y'))),
            Action::Kill("proc_bb".into())
        );
        // r is for stack services (named ones).
        assert_eq!(m.key(press(KeyCode::Char('r'))), Action::Nothing);
        m.key(press(KeyCode::Up));
        assert_eq!(
            m.key(press(KeyCode::Char('r'))),
            Action::Restart("proc_a".into())
        );
    }

    #[test]
    fn filter_send_and_finished_rows() {
        let mut m = Model::default();
        let now = Instant::now();
        m.set_list(
            vec![
                entry("proc_a", Some("web"), true, 0.0),
                entry("proc_bb", Some("db"), false, 0.0),
            ],
            now,
        );
        m.key(press(KeyCode::Char('/')));
        for c in "DB".chars() {
            m.key(press(KeyCode::Char(c)));
        }
        assert_eq!(m.visible().count(), 1);
        assert_eq!(m.selected_row().map(Row::label).as_deref(), Some("db"));
        m.key(press(KeyCode::Enter));
        // An ended session takes no input.
        assert_eq!(m.key(press(KeyCode::Char('s'))), Action::Nothing);
        assert_eq!(m.notice.as_deref(), Some("db has ended"));
        m.key(press(KeyCode::Esc));
        assert_eq!(m.visible().count(), 2);
        m.key(press(KeyCode::Home));
        m.key(press(KeyCode::Char('s')));
        for c in "hi".chars() {
            m.key(press(KeyCode::Char(c)));
        }
        assert_eq!(
            m.key(press(KeyCode::Enter)),
            Action::Send {
                session_id: "proc_a".into(),
                text: "hi".into()
            }
        );
    }

    #[test]
    fn log_pane_keeps_lines_across_splits() {
        let mut pane = LogPane::new("proc_a".into());
        pane.push("one\ntw");
        pane.push("o\r\n\x1b[1mthree");
        let shown: Vec<String> = pane.shown().collect();
        assert_eq!(shown, ["one", "two", "three"]);
        for i in 0..LOG_LINES + 10 {
            pane.push(&format!("{i}\n"));
        }
        assert_eq!(pane.lines.len(), LOG_LINES);
    }
}
