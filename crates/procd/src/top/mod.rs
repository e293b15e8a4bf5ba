//! `procd top`: a live view of the sessions, with keys to act on them
//! (docs/operations.md). Three parts: `connection` keeps a link to the
//! daemon and sends fresh lists (on every event, and once a second for
//! CPU, memory and uptime); the loop here feeds lists, keys and log text
//! to the model and carries out what the model asks; view.rs draws.
//! Nothing the loop awaits depends on the daemon answering, so q works
//! with a hung or lost daemon.

mod model;
mod view;

use crate::base::describe;
use crate::base::{EXIT_FAILED, EXIT_OK};
use crossterm::event::{Event as TermEvent, EventStream, KeyEventKind};
use futures::{FutureExt, StreamExt};
use jsonrpsee::core::client::Client;
use model::{Action, Link, Model};
use procd_client::{Endpoint, ProcdApiClient};
use procd_proto::ProcessEntry;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};

/// The refresh without events: CPU, memory and uptime change quietly.
const REFRESH: Duration = Duration::from_secs(1);
/// The period of the quiet list: REFRESH, or in debug builds what
/// `PROCD_TEST_TOP_REFRESH_S` says, so that the suite can show that an
/// event alone updates the screen.
fn list_refresh() -> Duration {
    #[cfg(debug_assertions)]
    if let Some(s) = std::env::var("PROCD_TEST_TOP_REFRESH_S")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return Duration::from_secs(s);
    }
    REFRESH
}

/// The shortest gap between lists that events ask for (a burst of events
/// is one list).
const EVENT_GAP: Duration = Duration::from_millis(100);
/// Reconnection: the first retry, doubled up to the last.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// The log pane starts this far before the end of the output.
const LOG_BACKLOG: u64 = 16 * 1024;

/// What the daemon's side sends the loop.
enum Msg {
    Connected(Arc<Client>),
    /// The sessions, and the jobserver's tokens (when the daemon says).
    List(Vec<ProcessEntry>, Option<procd_proto::JobserverStatus>),
    Lost,
    /// Output of the session the log pane follows, up to `next_cursor`.
    Log {
        session_id: String,
        data: String,
        next_cursor: u64,
    },
    /// The outcome of a key's action.
    Notice(String),
}

pub async fn run(endpoint: Endpoint) -> i32 {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        eprintln!("procd top: needs a terminal (procd ps prints the same as a table)");
        return EXIT_FAILED;
    }
    let restore_on_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        screen::restore();
        restore_on_panic(info)
    }));
    match Top::new(endpoint).run().await {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("procd top: {e}");
            EXIT_FAILED
        }
    }
}

/// The loop's state beside the model: the link to the daemon and the
/// tasks it started.
struct Top {
    endpoint: Endpoint,
    model: Model,
    /// The connected client, for actions (None while the daemon is away).
    client: Option<Arc<Client>>,
    msgs_tx: mpsc::Sender<Msg>,
    msgs: mpsc::Receiver<Msg>,
    /// Asks `connection` for a list now (after an action).
    refresh: Arc<Notify>,
    connection: tokio::task::JoinHandle<()>,
    /// The task following the log pane's session, and where its output
    /// seen so far ends (to go on from after a reconnection).
    log_follower: Option<tokio::task::JoinHandle<()>>,
    log_cursor: Option<u64>,
}

impl Top {
    fn new(endpoint: Endpoint) -> Top {
        let (msgs_tx, msgs) = mpsc::channel(64);
        let refresh = Arc::new(Notify::new());
        let connection = tokio::spawn(connection(
            endpoint.clone(),
            refresh.clone(),
            msgs_tx.clone(),
        ));
        Top {
            endpoint,
            model: Model::default(),
            client: None,
            msgs_tx,
            msgs,
            refresh,
            connection,
            log_follower: None,
            log_cursor: None,
        }
    }

    async fn run(mut self) -> std::io::Result<()> {
        let mut signals = screen::QuitSignals::new()?;
        let mut view = view::View::default();
        let mut screen = Some(screen::Screen::enter()?);
        // Made once: making one asks the terminal where its cursor is,
        // and an answer that a key reader took would be lost.
        let mut terminal =
            ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout()))?;
        'screen: loop {
            let _screen = match screen.take() {
                Some(screen) => screen,
                None => screen::Screen::enter()?,
            };
            terminal.clear()?;
            let mut keys = EventStream::new();
            // Redrawn at least once a second: "lost 3s ago" counts up.
            let mut redraw = tokio::time::interval(REFRESH);
            loop {
                terminal.draw(|frame| view.draw(frame, &self.model))?;
                let action = tokio::select! {
                    key = keys.next() => match key {
                        Some(Ok(TermEvent::Key(key))) if key.kind != KeyEventKind::Release => {
                            // The suite's way to prove a panic restores the
                            // terminal; debug builds only.
                            #[cfg(debug_assertions)]
                            if key.code == crossterm::event::KeyCode::Char('!')
                                && std::env::var_os("PROCD_TEST_TOP_PANIC").is_some()
                            {
                                panic!("a panic that PROCD_TEST_TOP_PANIC asked for");
                            }
                            self.model.key(key)
                        }
                        // A resize (or anything else) is a redraw.
                        Some(Ok(_)) => Action::Nothing,
                        Some(Err(e)) => return Err(e),
                        None => return Ok(()),
                    },
                    Some(msg) = self.msgs.recv() => {
                        self.apply(msg);
                        Action::Nothing
                    }
                    _ = redraw.tick() => Action::Nothing,
                    _ = signals.recv() => Action::Quit,
                };
                match action {
                    Action::Nothing => {}
                    Action::Quit => break 'screen,
                    Action::Attach(id) => {
                        // The terminal is the session's until Ctrl-]:
                        // top's screen and key reader step aside.
                        drop(keys);
                        // The dropped stream woke crossterm's reader; a
                        // wake-up left pending would end the next read
                        // of the cursor position (by `clear`) at once.
                        let _ = crossterm::event::poll(Duration::ZERO);
                        drop(_screen);
                        self.attach(id).await;
                        continue 'screen;
                    }
                    other => self.act(other),
                }
            }
        }
        self.connection.abort();
        if let Some(follower) = self.log_follower.take() {
            follower.abort();
        }
        Ok(())
    }

    fn apply(&mut self, msg: Msg) {
        match msg {
            Msg::Connected(client) => {
                self.client = Some(client);
                // Go on following from where the output seen ends.
                if let Some(id) = self.model.log.as_ref().map(|p| p.session_id.clone()) {
                    self.follow(Some(id), self.log_cursor);
                }
            }
            Msg::List(entries, jobserver) => {
                self.model.set_list(entries, Instant::now());
                self.model.jobserver = jobserver;
            }
            Msg::Lost => {
                self.client = None;
                if !matches!(self.model.link, Link::Lost { .. }) {
                    self.model.link = Link::Lost {
                        since: Instant::now(),
                    };
                }
            }
            Msg::Log {
                session_id,
                data,
                next_cursor,
            } => {
                if let Some(pane) = self.model.log.as_mut() {
                    if pane.session_id == session_id {
                        pane.push(&data);
                        self.log_cursor = Some(next_cursor);
                    }
                }
            }
            Msg::Notice(text) => self.model.notice = Some(text),
        }
    }

    /// Starts following `session_id`'s log (from `from`, else a little
    /// before its end) in place of any other; None closes the pane.
    fn follow(&mut self, session_id: Option<String>, from: Option<u64>) {
        if let Some(follower) = self.log_follower.take() {
            follower.abort();
        }
        if self.model.log.as_ref().map(|p| &p.session_id) != session_id.as_ref() {
            self.model.show_log(session_id.clone());
        }
        self.log_cursor = from;
        if let (Some(id), Some(client)) = (session_id, self.client.clone()) {
            self.log_follower = Some(tokio::spawn(follow_log(
                client,
                id,
                from,
                self.msgs_tx.clone(),
            )));
        }
    }

    /// Carries out an action; what talks to the daemon runs as a task of
    /// its own, so the screen never waits on it.
    fn act(&mut self, action: Action) {
        if let Action::FollowLog(id) = action {
            return self.follow(id, None);
        }
        let Some(client) = self.client.clone() else {
            self.model.notice = Some("the daemon is not reachable".into());
            return;
        };
        let label = |id: &str| {
            self.model
                .visible()
                .find(|r| r.entry.session_id == id)
                .map(model::Row::label)
                .unwrap_or_else(|| id.to_string())
        };
        let task: futures::future::BoxFuture<'static, String> = match action {
            Action::Kill(id) => {
                let label = label(&id);
                self.model.notice = Some(format!("killing {label}…"));
                async move {
                    match client.kill(id, None, None, Some("top".into())).await {
                        Ok(r) => crate::render::killed(&r),
                        Err(e) => format!("kill {label}: {}", describe(&e)),
                    }
                }
                .boxed()
            }
            Action::Send { session_id, text } => {
                let label = label(&session_id);
                async move {
                    match client
                        .submit_stdin(session_id, text, None, None, None)
                        .await
                    {
                        Ok(r) if r.status == procd_proto::StdinStatus::Ok => {
                            format!("sent {} bytes to {label}", r.bytes_written)
                        }
                        Ok(_) => format!("{label} has already exited"),
                        Err(e) => format!("send to {label}: {}", describe(&e)),
                    }
                }
                .boxed()
            }
            Action::Restart(id) => match self.restart_of(&id) {
                Ok((file, project, name)) => {
                    self.model.notice = Some(format!("restarting {name}…"));
                    async move { restart(&client, file, project, name).await }.boxed()
                }
                Err(why) => {
                    self.model.notice = Some(why);
                    return;
                }
            },
            Action::Nothing | Action::Quit | Action::Attach(_) | Action::FollowLog(_) => return,
        };
        let (tx, refresh) = (self.msgs_tx.clone(), self.refresh.clone());
        tokio::spawn(async move {
            let notice = task.await;
            refresh.notify_one();
            let _ = tx.send(Msg::Notice(notice)).await;
        });
    }

    /// What restarting a stack service takes: its stack file, project and
    /// name (docs/stacks.md: `down` it, then `up` it).
    fn restart_of(
        &self,
        id: &str,
    ) -> Result<(String, procd_proto::ProjectName, procd_proto::SessionName), String> {
        let row = self.model.visible().find(|r| r.entry.session_id == id);
        let Some(e) = row.map(|r| &r.entry) else {
            return Err(format!("{id} is gone"));
        };
        let (Some(file), Some(project), Some(name)) = (&e.stack_file, &e.project, &e.name) else {
            return Err(format!(
                "{}: r restarts stack services (started by procd up)",
                e.name.as_deref().unwrap_or(&e.session_id)
            ));
        };
        let project = procd_proto::ProjectName::parse(project).map_err(|e| e.to_string())?;
        let name = procd_proto::SessionName::parse(name).map_err(|e| e.to_string())?;
        Ok((file.clone(), project, name))
    }

    /// `a`: the terminal is the session's until Ctrl-] (attach.rs).
    async fn attach(&mut self, id: String) {
        let Some(client) = self.client.clone() else {
            self.model.notice = Some("the daemon is not reachable".into());
            return;
        };
        let conn = procd_client::Reconnecting::shared(self.endpoint.clone(), client);
        self.model.notice = match crate::attach::run(&conn, id).await {
            Ok(_) => None,
            Err(e) => Some(format!("attach: {}", describe(&e))),
        };
        self.refresh.notify_one();
    }
}

/// `r` on a stack service: `down` it, then `up` it from its stack file
/// (the daemon reads the file, so this works over `--host` too).
async fn restart(
    client: &Client,
    file: String,
    project: procd_proto::ProjectName,
    name: procd_proto::SessionName,
) -> String {
    if let Err(e) = client.down(project, Some(vec![name.clone()])).await {
        return format!("restart {name}: {}", describe(&e));
    }
    // A task of its own: the rows show it getting ready meanwhile.
    let started = Some(procd_proto::YieldMs::new(10_000.0));
    match client
        .up(Some(file), None, Some(vec![name.clone()]), started)
        .await
    {
        Ok(r) => match r.services.iter().find(|s| s.name == name.as_str()) {
            Some(s) => format!("restarted {name}: {}", crate::stacks::service_line(s)),
            None => format!("restarted {name}"),
        },
        Err(e) => format!("restart {name}: {}", describe(&e)),
    }
}

/// Keeps a link to the daemon: connects (retrying while it is away),
/// subscribes to its events, and sends a list on each event and once a
/// second, until the loop goes.
async fn connection(endpoint: Endpoint, refresh: Arc<Notify>, tx: mpsc::Sender<Msg>) {
    let mut pause = RETRY_FIRST;
    loop {
        let linked = async {
            let client = Arc::new(endpoint.connect().await.ok()?);
            let events = client.subscribe_events(None).await.ok()?;
            Some((client, events))
        };
        let Some((client, mut events)) = linked.await else {
            // No event announces a daemon that comes back.
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX);
            continue;
        };
        pause = RETRY_FIRST;
        if tx.send(Msg::Connected(client.clone())).await.is_err() {
            return;
        }
        let mut tick = tokio::time::interval(list_refresh());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut listed = Instant::now() - EVENT_GAP;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = refresh.notified() => {}
                event = events.next() => {
                    if event.is_none() {
                        break;
                    }
                    tokio::time::sleep_until((listed + EVENT_GAP).into()).await;
                    while let Some(Some(_)) = events.next().now_or_never() {}
                }
            }
            listed = Instant::now();
            let msg = match procd_client::list_all(&client, None, None).await {
                Ok(list) => {
                    let jobserver = client.status().await.ok().and_then(|s| s.jobserver);
                    Msg::List(list, jobserver)
                }
                Err(e) if procd_client::is_disconnect(&e) => break,
                Err(e) => Msg::Notice(format!("list: {}", describe(&e))),
            };
            if tx.send(msg).await.is_err() {
                return;
            }
        }
        if tx.send(Msg::Lost).await.is_err() {
            return;
        }
    }
}

/// Sends `session_id`'s output as it comes, from `from` (else a little
/// before its end), until it ends or the connection goes.
async fn follow_log(
    client: Arc<Client>,
    session_id: String,
    from: Option<u64>,
    tx: mpsc::Sender<Msg>,
) {
    use procd_proto::{Cursor, WaitMs};
    let mut cursor = match from {
        Some(cursor) => cursor,
        None => match procd_client::output_end(&client, &session_id).await {
            Ok(end) => end.saturating_sub(LOG_BACKLOG),
            Err(e) => {
                let _ = tx.send(Msg::Notice(format!("log: {}", describe(&e)))).await;
                return;
            }
        },
    };
    loop {
        let r = client
            .read(
                session_id.clone(),
                Some(Cursor::new(cursor)),
                None,
                Some(WaitMs::new(30_000.0)),
                None,
                None,
            )
            .await;
        let Ok(r) = r else { return };
        cursor = r.next_cursor;
        let msg = Msg::Log {
            session_id: session_id.clone(),
            data: r.data,
            next_cursor: cursor,
        };
        if tx.send(msg).await.is_err() || r.eof {
            return;
        }
    }
}

/// The terminal's modes while top draws, and their restoration on every
/// way out: a return, an error, a panic (`restore` from the panic hook)
/// and the signals that ask a program to end.
mod screen {
    use crossterm::cursor::{Hide, Show};
    use crossterm::execute;
    use crossterm::terminal::{
        disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
    };
    use tokio::signal::unix::{signal, Signal, SignalKind};

    /// Raw mode and the alternate screen, until dropped.
    pub struct Screen(());

    impl Screen {
        pub fn enter() -> std::io::Result<Screen> {
            enable_raw_mode()?;
            // Made before the alternate screen, so a failure there
            // restores raw mode too.
            let screen = Screen(());
            execute!(std::io::stdout(), EnterAlternateScreen, Hide)?;
            Ok(screen)
        }
    }

    impl Drop for Screen {
        fn drop(&mut self) {
            restore();
        }
    }

    /// The terminal as it was: safe to call twice (a panic's hook, then
    /// the unwinding drop).
    pub fn restore() {
        let _ = execute!(std::io::stdout(), LeaveAlternateScreen, Show);
        let _ = disable_raw_mode();
    }

    /// SIGTERM, SIGHUP and SIGINT (a Ctrl-C while the terminal is raw
    /// arrives as a key instead).
    pub struct QuitSignals([Signal; 3]);

    impl QuitSignals {
        pub fn new() -> std::io::Result<QuitSignals> {
            Ok(QuitSignals([
                signal(SignalKind::terminate())?,
                signal(SignalKind::hangup())?,
                signal(SignalKind::interrupt())?,
            ]))
        }

        pub async fn recv(&mut self) {
            let [a, b, c] = &mut self.0;
            tokio::select! {
                _ = a.recv() => {}
                _ = b.recv() => {}
                _ = c.recv() => {}
            }
        }
    }
}
