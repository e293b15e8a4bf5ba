//! Shells that keep their state (docs/shells.md): a session whose command
//! is a bash loop (`boot.rs`) that runs commands procd sends it, one at a
//! time, in the shell itself, so `cd`, variables, functions, aliases,
//! options, an activated venv and `ulimit` carry over.
//!
//! A command's end and status come from the shell's channels (fds 3–5,
//! which the command does not have), never from its output; its output is
//! the log between two cursors, the second taken once the session's
//! supervisor has drained what the command wrote (`OutputStore::drained`).
//! Each shell has one task (`follow`) that takes its ends and its exit;
//! a run holds the shell's turn from its send to its end, so runs queue.
//!
//! What the next daemon needs is in the shell's directory (`journal.rs`,
//! the ends file the shell appends to): a command that ends while no
//! daemon runs still arrives with its exact status.

mod boot;
mod ends;
mod journal;
mod recovery;

pub use boot::Channels;

use crate::error::Error;
use crate::registry::Registry;
use crate::session::Session;
use journal::Entry;
use procd_proto::{
    CommandStatus, SandboxSpec, ShellCloseResult, ShellCommandResult, ShellCommandSummary,
    ShellCommandsResult, ShellOpenResult, SpawnParams,
};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::unix::pipe;
use tokio::sync::{watch, OwnedMutexGuard};

/// The most commands a shell remembers (and `shell_commands` lists).
const KEPT_COMMANDS: usize = 200;
/// The most runs waiting for one shell's turn; past it a run is refused.
pub const MAX_QUEUED: usize = 64;
/// The most closed shells kept for their history.
const KEPT_CLOSED: usize = 64;
/// How long an interrupted command has after SIGINT before the
/// processes of its group get SIGKILL, and then before the shell does.
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);
/// When a second SIGINT follows the first, as a user presses Ctrl-C
/// again. The shell reports a command begun just before it forks it; a
/// SIGINT that lands between that fork and the command's exec reaches a
/// child still running the shell's trap, which the exec forgets, and the
/// command runs on. The second finds the command itself.
const SECOND_INTERRUPT_AFTER: Duration = Duration::from_millis(300);
/// How long an interrupt waits for the shell to take its command up
/// before it signals anyway. A SIGINT to a shell that has not begun the
/// command is lost (an idle shell ignores it), so this is long: a loaded
/// machine can take over a second to run a continued shell and read its
/// record of the start.
const TAKE_UP_WAIT: Duration = Duration::from_secs(10);
/// The longest a command's end waits for its output to be drained (only
/// a flood hold makes it wait at all).
const DRAIN_BOUND: Duration = Duration::from_secs(5);
/// How long `shell_run` waits for the command when not told.
const DEFAULT_RUN_YIELD: Duration = Duration::from_secs(30);
/// The longest `shell_run` or `shell_wait` waits.
const MAX_WAIT: Duration = Duration::from_secs(300);
/// The most bytes of a command's output an answer reads: its last ones.
const MAX_OUTPUT_BYTES: u64 = 1 << 20;

/// Every shell of the daemon.
pub struct Shells {
    registry: Arc<Registry>,
    /// `<state>/shells`: a directory per open shell.
    dir: PathBuf,
    /// Open shells, and the last `KEPT_CLOSED` closed ones.
    table: Mutex<Vec<Arc<Shell>>>,
    /// Held by an open of a named shell, so one name opens one shell.
    naming: tokio::sync::Mutex<()>,
}

/// `shell_open`'s params, checked by the caller's types.
#[derive(Debug, Default, Clone)]
pub struct OpenAsk {
    pub name: Option<procd_proto::SessionName>,
    pub cwd: Option<String>,
    pub env: Option<BTreeMap<String, String>>,
    pub pty: Option<bool>,
    pub sandbox: Option<SandboxSpec>,
    pub owner: Option<String>,
    pub session_key: Option<String>,
    pub task_id: Option<String>,
}

/// `shell_run`'s params.
#[derive(Debug, Clone)]
pub struct RunAsk {
    pub shell_id: String,
    pub command: String,
    pub yield_for: Option<Duration>,
    pub timeout: Option<Duration>,
    pub budget: Option<usize>,
}

struct Shell {
    id: String,
    dir: PathBuf,
    name: Option<String>,
    /// How its loop reads a command's header.
    header: boot::Header,
    session: Arc<Session>,
    /// One command at a time: a run holds it from its send to its end.
    turn: Arc<tokio::sync::Mutex<()>>,
    /// Runs waiting for the turn.
    waiting: AtomicUsize,
    /// The command FIFO's write end (None once the shell is gone).
    ctl: tokio::sync::Mutex<Option<pipe::Sender>>,
    state: Mutex<State>,
    /// Bumped when a command ends, or the shell does.
    changed: watch::Sender<u64>,
    /// Bumped when the shell takes a command up: apart from `changed`,
    /// which a run waits on, so that the begun record, which only a stop
    /// waits for, wakes no run.
    begun: watch::Sender<u64>,
    /// The journal, appended to a line at a time (None once a write
    /// failed: the shell then does not outlive the daemon whole).
    journal: Mutex<Option<journal::Journal>>,
}

#[derive(Default)]
struct State {
    /// The last command number given.
    last: u64,
    commands: VecDeque<Command>,
    closed: bool,
}

struct Command {
    n: u64,
    nonce: String,
    /// As run, redacted.
    text: String,
    started_at: SystemTime,
    started: Instant,
    from: u64,
    /// The shell has said it runs it (an interrupt now reaches it).
    begun: bool,
    end: Option<End>,
    /// Why it is being stopped, and the last signal sent.
    stop: Option<(Stop, &'static str)>,
    /// The shell's turn, given back at the end.
    turn: Option<OwnedMutexGuard<()>>,
}

#[derive(Clone)]
struct End {
    status: CommandStatus,
    exit_code: Option<i32>,
    to: u64,
    cwd: Option<String>,
    duration: Duration,
    ended_by: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    Interrupt,
    Timeout,
}

impl Shells {
    pub fn new(registry: Arc<Registry>, dir: PathBuf) -> Arc<Shells> {
        Arc::new(Shells {
            registry,
            dir,
            table: Mutex::new(Vec::new()),
            naming: tokio::sync::Mutex::new(()),
        })
    }

    fn table(&self) -> MutexGuard<'_, Vec<Arc<Shell>>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn find(&self, id: &str) -> Result<Arc<Shell>, Error> {
        let id = crate::registry::normalize_id(id);
        self.table()
            .iter()
            .find(|s| s.id == id)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no shell {id} (shell_open opens one)")))
    }

    /// Opens a shell, or answers with the open one of that name.
    pub async fn open(self: &Arc<Self>, ask: OpenAsk) -> Result<ShellOpenResult, Error> {
        let _naming = match &ask.name {
            Some(_) => Some(self.naming.lock().await),
            None => None,
        };
        if let Some(name) = &ask.name {
            let open = self
                .table()
                .iter()
                .find(|s| s.name.as_deref() == Some(name.as_str()) && !s.state().closed)
                .cloned();
            if let Some(shell) = open {
                return Ok(shell.open_result(false));
            }
        }
        let dir = self.dir.join(crate::random::hex(8).map_err(internal)?);
        let made = {
            let (root, dir) = (self.dir.clone(), dir.clone());
            tokio::task::spawn_blocking(move || {
                std::fs::create_dir_all(&root)?;
                boot::make_dir(&dir)
            })
            .await
            .map_err(internal)?
        };
        made.map_err(|e| Error::SpawnFailed(format!("cannot make the shell's channels: {e}")))?;
        let pty = ask.pty.unwrap_or(false);
        let mut env = ask.env.unwrap_or_default();
        env.insert(boot::LOOP_VAR.into(), boot::LOOP.into());
        let params = SpawnParams {
            command: boot::COMMAND.into(),
            cwd: ask.cwd,
            env: Some(env),
            pty: Some(pty),
            owner: ask.owner,
            session_key: ask.session_key,
            task_id: ask.task_id,
            name: ask.name.clone(),
            sandbox: ask.sandbox,
            notify_on_complete: Some(false),
            ..SpawnParams::default()
        };
        let spawned = match self.registry.spawn_shell(params, dir.clone()).await {
            Ok(spawned) => spawned,
            Err(e) => {
                remove_dir(dir).await;
                return Err(e);
            }
        };
        let session = self.registry.find(&spawned.session_id)?;
        let file = journal::ShellFile {
            session_id: session.id.clone(),
            name: ask.name.map(|n| n.to_string()),
            fixed_header: true,
        };
        let written = {
            let (dir, file) = (dir.clone(), file.clone());
            tokio::task::spawn_blocking(move || journal::write_shell_file(&dir, &file)).await
        };
        if !matches!(written, Ok(Ok(()))) {
            tracing::warn!(shell = %session.id, "cannot record the shell: it will not outlive the daemon");
        }
        let shell = self.adopt(session, dir, file, State::default())?;
        Ok(shell.open_result(true))
    }

    /// Tracks a shell whose session runs, and starts its task.
    fn adopt(
        self: &Arc<Self>,
        session: Arc<Session>,
        dir: PathBuf,
        file: journal::ShellFile,
        state: State,
    ) -> Result<Arc<Shell>, Error> {
        let open = |name: &str| {
            pipe::OpenOptions::new()
                .read_write(true)
                .unchecked(true)
                .open_receiver(dir.join(name))
        };
        let wake = open(boot::WAKE).map_err(internal)?;
        // Read-write, as the shell holds it: a shell that is already gone
        // is found by its task, not by an open that fails.
        let ctl = pipe::OpenOptions::new()
            .read_write(true)
            .unchecked(true)
            .open_sender(dir.join(boot::CTL))
            .map_err(internal)?;
        let journal = journal::Journal::open(&dir)
            .map_err(|e| tracing::warn!(shell = %session.id, %e, "cannot open the shell's journal"))
            .ok();
        let shell = Arc::new(Shell {
            journal: Mutex::new(journal),
            id: session.id.clone(),
            name: file.name,
            header: match file.fixed_header {
                true => boot::Header::Fixed,
                false => boot::Header::Line,
            },
            session,
            dir,
            turn: Arc::new(tokio::sync::Mutex::new(())),
            waiting: AtomicUsize::new(0),
            ctl: tokio::sync::Mutex::new(Some(ctl)),
            state: Mutex::new(state),
            changed: watch::channel(0).0,
            begun: watch::channel(0).0,
        });
        {
            let mut table = self.table();
            let closed = table.iter().filter(|s| s.state().closed).count();
            if closed >= KEPT_CLOSED {
                if let Some(i) = table.iter().position(|s| s.state().closed) {
                    table.remove(i);
                }
            }
            table.push(shell.clone());
        }
        tokio::spawn(self.clone().follow(shell.clone(), wake));
        Ok(shell)
    }

    /// Runs a command in the shell, after the one running (if any); answers
    /// when it ends, asks for input, or `yield_for` passes.
    pub async fn run(self: &Arc<Self>, ask: RunAsk) -> Result<ShellCommandResult, Error> {
        check_command(&ask.command)?;
        let shell = self.find(&ask.shell_id)?;
        shell.check_open()?;
        let turn = shell.take_turn().await?;
        shell.check_open()?;
        let n = self.send(&shell, &ask.command, turn).await?;
        if let Some(limit) = ask.timeout {
            let (me, shell) = (self.clone(), shell.clone());
            tokio::spawn(async move {
                let mut changed = shell.changed.subscribe();
                let ended = changed.wait_for(|_| shell.command_ended(n));
                if tokio::time::timeout(limit, ended).await.is_err() {
                    me.stop(&shell, n, Stop::Timeout).await;
                }
            });
        }
        let wait = ask.yield_for.unwrap_or(DEFAULT_RUN_YIELD).min(MAX_WAIT);
        let waiting = self.wait_for(&shell, n, wait).await;
        self.result(&shell, n, waiting, ask.budget).await
    }

    /// Sends command `n` (recorded first, with its cursor); returns `n`.
    async fn send(
        &self,
        shell: &Arc<Shell>,
        command: &str,
        turn: OwnedMutexGuard<()>,
    ) -> Result<u64, Error> {
        let nonce = crate::random::hex(boot::NONCE_CHARS / 2).map_err(internal)?;
        let started = journal::Started {
            n: 0,
            nonce: nonce.clone(),
            command: self.registry.redact_command(command),
            from: shell.session.output.end(),
            started_at: procd_sys::clock::rfc3339(SystemTime::now()),
        };
        let n = {
            let mut state = shell.state();
            state.last += 1;
            let n = state.last;
            state.commands.push_back(Command {
                n,
                nonce: nonce.clone(),
                text: started.command.clone(),
                started_at: SystemTime::now(),
                started: Instant::now(),
                from: started.from,
                begun: false,
                end: None,
                stop: None,
                turn: Some(turn),
            });
            while state.commands.len() > KEPT_COMMANDS
                && state.commands.front().is_some_and(|c| c.end.is_some())
            {
                state.commands.pop_front();
            }
            n
        };
        let line = boot::command_line(shell.header, n, &nonce, command);
        let sent = {
            use tokio::io::AsyncWriteExt;
            let mut ctl = shell.ctl.lock().await;
            match ctl.as_mut() {
                // A shell that ends meanwhile reads no more: the write
                // would wait for ever on a full FIFO.
                Some(ctl) => tokio::select! {
                    written = ctl.write_all(&line) => written,
                    _ = shell.session.wait_end() => Err(std::io::ErrorKind::BrokenPipe.into()),
                },
                None => Err(std::io::ErrorKind::BrokenPipe.into()),
            }
        };
        shell.record(Entry::Started(journal::Started { n, ..started }));
        if let Err(e) = sent {
            tracing::warn!(shell = %shell.id, %e, "cannot send a command");
            // The shell is gone: its task ends the command as the shell's end.
        }
        Ok(n)
    }

    /// Waits until command `n` ends, asks for input (true), or `wait`
    /// passes.
    async fn wait_for(&self, shell: &Arc<Shell>, n: u64, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut changed = shell.changed.subscribe();
            let mut output = shell.session.output.subscribe();
            if shell.command_ended(n) {
                return false;
            }
            // Looked at only once the command itself has been quiet a
            // moment: the shell was idle before it, which says nothing.
            let ran_for = shell.ran_for(n);
            if ran_for >= crate::session::INPUT_QUIET
                && self.registry.input_wanted(&shell.session).await
            {
                return true;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return false;
            }
            let probe = now + crate::session::INPUT_QUIET;
            tokio::select! {
                _ = changed.changed() => {}
                _ = output.changed() => {}
                () = tokio::time::sleep_until(deadline.min(probe)) => {}
            }
        }
    }

    /// The shell and the command a call names (the last one if none).
    fn command_of(
        &self,
        shell_id: &str,
        command_id: Option<u64>,
    ) -> Result<(Arc<Shell>, u64), Error> {
        let shell = self.find(shell_id)?;
        let n = command_id.unwrap_or_else(|| shell.state().last);
        shell.command(n)?;
        Ok((shell, n))
    }

    /// Interrupts the running command (or command `n`): SIGINT to the
    /// shell's group, then SIGKILL to the command's processes, then to the
    /// shell, each after `INTERRUPT_GRACE`. Answers once it has ended.
    pub async fn interrupt(
        self: &Arc<Self>,
        shell_id: &str,
        command_id: Option<u64>,
        budget: Option<usize>,
    ) -> Result<ShellCommandResult, Error> {
        let (shell, n) = self.command_of(shell_id, command_id)?;
        self.stop(&shell, n, Stop::Interrupt).await;
        self.result(&shell, n, false, budget).await
    }

    /// Waits up to `timeout` for command `n` (the last one if not given).
    pub async fn wait(
        self: &Arc<Self>,
        shell_id: &str,
        command_id: Option<u64>,
        timeout: Duration,
        budget: Option<usize>,
    ) -> Result<ShellCommandResult, Error> {
        let (shell, n) = self.command_of(shell_id, command_id)?;
        let waiting = self.wait_for(&shell, n, timeout.min(MAX_WAIT)).await;
        self.result(&shell, n, waiting, budget).await
    }

    /// Command `n` as it stands.
    pub async fn read(
        self: &Arc<Self>,
        shell_id: &str,
        command_id: Option<u64>,
        budget: Option<usize>,
    ) -> Result<ShellCommandResult, Error> {
        self.wait(shell_id, command_id, Duration::ZERO, budget)
            .await
    }

    pub fn commands(&self, shell_id: &str) -> Result<ShellCommandsResult, Error> {
        let shell = self.find(shell_id)?;
        let state = shell.state();
        Ok(ShellCommandsResult {
            shell_id: shell.id.clone(),
            open: !state.closed,
            commands: state
                .commands
                .iter()
                .map(|c| ShellCommandSummary {
                    command_id: c.n,
                    command: c.text.clone(),
                    status: c.end.as_ref().map_or(CommandStatus::Running, |e| e.status),
                    exit_code: c.end.as_ref().and_then(|e| e.exit_code),
                    started_at: procd_sys::clock::rfc3339(c.started_at),
                    duration_ms: c.end.as_ref().map(|e| e.duration.as_millis() as u64),
                    from_cursor: c.from,
                    to_cursor: c.end.as_ref().map(|e| e.to),
                    cwd: c.end.as_ref().and_then(|e| e.cwd.clone()),
                })
                .collect(),
        })
    }

    /// Closes the shell: its session is killed (a running command with it).
    pub async fn close(&self, shell_id: &str) -> Result<ShellCloseResult, Error> {
        let shell = self.find(shell_id)?;
        let was_open = !shell.state().closed;
        self.registry
            .kill(&shell.id, None, None, Some("shell_close"))
            .await?;
        let mut changed = shell.changed.subscribe();
        let _ = changed.wait_for(|_| shell.state().closed).await;
        let exit = shell.session.wait_exited(Duration::ZERO).await;
        Ok(ShellCloseResult {
            shell_id: shell.id.clone(),
            status: if was_open { "closed" } else { "already_closed" }.into(),
            exit_code: exit.and_then(|e| e.exit_code),
        })
    }

    /// Command `n` as an answer.
    async fn result(
        &self,
        shell: &Arc<Shell>,
        n: u64,
        waiting_for_input: bool,
        budget: Option<usize>,
    ) -> Result<ShellCommandResult, Error> {
        let (text, started_at, started, from, end) = {
            let state = shell.state();
            let c = state
                .commands
                .iter()
                .find(|c| c.n == n)
                .ok_or_else(|| gone(shell, n))?;
            (
                c.text.clone(),
                c.started_at,
                c.started,
                c.from,
                c.end.clone(),
            )
        };
        let to = end
            .as_ref()
            .map_or_else(|| shell.session.output.end(), |e| e.to);
        let start = from.max(to.saturating_sub(MAX_OUTPUT_BYTES));
        let window = shell
            .session
            .output
            .range(start, to)
            .await
            .map_err(|e| Error::Internal(format!("reading the log failed: {e}")))?;
        let text_out = crate::output::text::lossy(&window.bytes);
        let data = self
            .registry
            .redact_excerpt(&shell.session, &text_out, &window.before);
        let fetch = format!("read the shell's session from cursor {from} to see all of it");
        let cut = crate::output::budget::apply(&data, budget, &fetch);
        Ok(ShellCommandResult {
            shell_id: shell.id.clone(),
            command_id: n,
            command: text,
            status: end.as_ref().map_or(CommandStatus::Running, |e| e.status),
            exit_code: end.as_ref().and_then(|e| e.exit_code),
            ended_by: end.as_ref().and_then(|e| e.ended_by.clone()),
            output: cut.text,
            original_chars: cut.original_chars.map(|c| c as usize),
            from_cursor: from,
            to_cursor: to,
            cwd: end.as_ref().and_then(|e| e.cwd.clone()),
            started_at: procd_sys::clock::rfc3339(started_at),
            duration_ms: Some(
                end.as_ref()
                    .map_or_else(|| started.elapsed(), |e| e.duration)
                    .as_millis() as u64,
            )
            .filter(|_| end.is_some()),
            waiting_for_input: waiting_for_input && end.is_none(),
        })
    }
}

impl Shell {
    /// Appends a journal entry: one write of one line, as the
    /// notification journal does (a kill leaves it whole or torn, and a
    /// torn line is skipped when read).
    fn record(&self, entry: Entry) {
        let mut journal = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Err(e)) = journal.as_mut().map(|j| j.append(&entry)) {
            tracing::warn!(shell = %self.id, %e, "cannot write the shell's journal");
            *journal = None;
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_open(&self) -> Result<(), Error> {
        // Closed, or its session ended and its task has not said so yet.
        match self.state().closed || !self.session.is_running() {
            true => Err(Error::WrongState(format!("shell {} is closed", self.id))),
            false => Ok(()),
        }
    }

    fn command(&self, n: u64) -> Result<(), Error> {
        match self.state().commands.iter().any(|c| c.n == n) {
            true => Ok(()),
            false => Err(gone(self, n)),
        }
    }

    /// How long command `n` has run.
    fn ran_for(&self, n: u64) -> Duration {
        let state = self.state();
        let c = state.commands.iter().find(|c| c.n == n);
        c.map_or(Duration::ZERO, |c| c.started.elapsed())
    }

    /// Whether command `n` has begun in the shell, or has ended.
    fn command_begun(&self, n: u64) -> bool {
        let state = self.state();
        let c = state.commands.iter().find(|c| c.n == n);
        c.is_none_or(|c| c.begun || c.end.is_some())
    }

    fn command_ended(&self, n: u64) -> bool {
        self.state()
            .commands
            .iter()
            .find(|c| c.n == n)
            .is_none_or(|c| c.end.is_some())
    }

    /// Waits for the shell's turn (runs queue in order), at most
    /// `MAX_QUEUED` waiting.
    async fn take_turn(&self) -> Result<OwnedMutexGuard<()>, Error> {
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_QUEUED {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::WrongState(format!(
                "shell {} is busy: {MAX_QUEUED} commands wait for it already",
                self.id
            )));
        }
        let _waiting = Waiting(&self.waiting);
        let mut changed = self.changed.subscribe();
        tokio::select! {
            turn = self.turn.clone().lock_owned() => Ok(turn),
            _ = changed.wait_for(|_| self.state().closed) => {
                Err(Error::WrongState(format!("shell {} is closed", self.id)))
            }
        }
    }

    /// A recovered shell's running command holds the turn again.
    fn retake_turn(&self) {
        let mut state = self.state();
        if let Some(c) = state.commands.iter_mut().find(|c| c.end.is_none()) {
            c.turn = self.turn.clone().try_lock_owned().ok();
        }
    }

    fn open_result(&self, opened: bool) -> ShellOpenResult {
        let state = self.state();
        let cwd = state
            .commands
            .iter()
            .rev()
            .find_map(|c| c.end.as_ref()?.cwd.clone())
            .unwrap_or_else(|| self.session.spec.cwd.display().to_string());
        ShellOpenResult {
            shell_id: self.id.clone(),
            name: self.name.clone(),
            pid: self.session.pid(),
            pty: self.session.pty(),
            opened,
            cwd,
        }
    }
}

async fn remove_dir(dir: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
}

/// As `spawn` checks a command, and not only blanks.
fn check_command(command: &str) -> Result<(), Error> {
    crate::registry::check_command(command)?;
    if command.trim().is_empty() {
        return Err(Error::InvalidParams("command: only blanks".into()));
    }
    Ok(())
}

fn gone(shell: &Shell, n: u64) -> Error {
    Error::NotFound(format!(
        "shell {} has no command {n} (shell_commands lists them)",
        shell.id
    ))
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::Internal(e.to_string())
}
