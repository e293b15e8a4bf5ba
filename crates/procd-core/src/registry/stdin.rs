//! Writing to a session: stdin writes (with yield), EOF, resize.

use super::{yields::yield_duration, Registry};
use crate::error::Error;
use crate::session::{Session, StdinOp};
use procd_proto::{Cols, Rows, StdinMode, StdinResult, StdinStatus, YieldMs};
use tokio::sync::{mpsc, oneshot};

impl Registry {
    pub async fn write_stdin(
        &self,
        id: &str,
        data: &str,
        submit: bool,
        yield_ms: Option<YieldMs>,
        budget: Option<usize>,
    ) -> Result<StdinResult, Error> {
        let wait = yield_duration(yield_ms);
        let s = self.find(id)?;
        let from = s.output.end();
        let mut result = self.write_stdin_now(&s, data, submit).await?;
        if !wait.is_zero() && result.status == StdinStatus::Ok {
            let y = self.yield_output(&s, from, wait, budget, true).await?;
            result.output = Some(y.output);
            result.cursor = Some(y.cursor);
            result.original_chars = y.original_chars;
            result.kept_error_lines = y.kept_error_lines;
            result.session_status = Some(y.status);
            result.exit = y.exit;
            result.waiting_for_input = Some(y.waiting_for_input);
        }
        Ok(result)
    }

    pub(super) async fn write_stdin_now(
        &self,
        s: &Session,
        data: &str,
        submit: bool,
    ) -> Result<StdinResult, Error> {
        if !s.is_running() {
            return Ok(already_exited());
        }
        if s.is_detached() {
            return Err(Error::WrongState(format!(
                "session {} was recovered after a procd restart; its stdin is not available",
                s.id
            )));
        }
        if let Some(e) = between_runs(s, "reads its stdin") {
            return Err(e);
        }
        let tx = self.stdin_of(s)?;
        let mut bytes = data.as_bytes().to_vec();
        if submit {
            bytes.push(if s.pty() { b'\r' } else { b'\n' });
        }
        let n = bytes.len() as u64;
        let (reply, done) = oneshot::channel();
        if tx.send(StdinOp::Write(bytes, reply)).await.is_err() {
            return Ok(already_exited());
        }
        match done.await {
            Ok(Ok(())) => {
                s.note_input();
                Ok(stdin_result(StdinStatus::Ok, n, None))
            }
            Ok(Err(e)) if !s.is_running() || e.kind() == std::io::ErrorKind::BrokenPipe => {
                if s.is_running() {
                    Err(Error::WrongState(format!(
                        "session {} is no longer reading its stdin",
                        s.id
                    )))
                } else {
                    Ok(already_exited())
                }
            }
            Ok(Err(e)) => Err(Error::Internal(format!("writing to stdin failed: {e}"))),
            Err(_) => Ok(already_exited()),
        }
    }

    /// The session's stdin writer, or -32002 when it has none or is closed.
    pub(super) fn stdin_of(&self, s: &Session) -> Result<mpsc::Sender<StdinOp>, Error> {
        if s.spec.stdin == StdinMode::Null {
            return Err(Error::WrongState(format!(
                "session {} was spawned with stdin \"null\"",
                s.id
            )));
        }
        match s.stdin_sender() {
            Some(tx) if !s.stdin_closed() => Ok(tx),
            None if s.restarts.is_some() => Err(run_gone(s, "reads its stdin")),
            _ => Err(Error::WrongState(format!(
                "stdin of session {} is closed",
                s.id
            ))),
        }
    }

    pub async fn close_stdin(&self, id: &str) -> Result<StdinResult, Error> {
        let s = self.find(id)?;
        if !s.is_running() {
            return Ok(already_exited());
        }
        let tx = self.stdin_of(&s)?;
        if !s.mark_stdin_closed() {
            return Err(Error::WrongState(format!(
                "stdin of session {} is already closed",
                s.id
            )));
        }
        if !s.pty() {
            // The pipe's writer ends after the close; a PTY keeps its writer
            // (resize goes through it). The keeper's copy of the write end
            // goes too, or the program would never see EOF.
            s.take_stdin();
            self.keeper_closes_stdin(&s.id);
        }
        // Queued writes go first.
        let (reply, done) = oneshot::channel();
        if tx.send(StdinOp::Close(reply)).await.is_err() {
            return Ok(already_exited());
        }
        match done.await {
            Ok(Ok(message)) => Ok(stdin_result(StdinStatus::Ok, 0, Some(message))),
            Ok(Err(e)) => Err(Error::Internal(format!("closing stdin failed: {e}"))),
            Err(_) => Ok(already_exited()),
        }
    }

    pub async fn resize(&self, id: &str, rows: Rows, cols: Cols) -> Result<(), Error> {
        let (rows, cols) = (rows.get(), cols.get());
        let s = self.find(id)?;
        if !s.pty() {
            return Err(Error::WrongState(format!(
                "session {} is not a PTY session",
                s.id
            )));
        }
        // In a backoff the last run's terminal may still be open: it is
        // not the next run's.
        if let (true, Some(e)) = (s.is_running(), between_runs(&s, "has a terminal")) {
            return Err(e);
        }
        // Its run's end, before the state says so: a restarting session
        // is between runs, any other has exited.
        let ended = || match s.is_running() && s.restarts.is_some() {
            true => run_gone(&s, "has a terminal"),
            false => Error::WrongState(format!("session {} has exited", s.id)),
        };
        let Some(tx) = s.stdin_sender().filter(|_| s.is_running()) else {
            return Err(ended());
        };
        let (reply, done) = oneshot::channel();
        if tx.send(StdinOp::Resize(rows, cols, reply)).await.is_err() {
            return Err(ended());
        }
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::Internal(format!("resize failed: {e}"))),
            Err(_) => Err(ended()),
        }
    }
}

/// The refusal of what only a run can take (`what`: "reads its stdin")
/// while a restarting session waits out its backoff; None while a run is
/// there.
fn between_runs(s: &Session, what: &str) -> Option<Error> {
    let next = s.next_run()?;
    Some(Error::WrongState(format!(
        "session {} is between runs (restart backoff): no run {what} until run {} starts",
        s.id, next.count.run
    )))
}

/// The refusal of what only a run can take when a restarting session's
/// run has ended and the next has yet to be decided or started.
fn run_gone(s: &Session, what: &str) -> Error {
    between_runs(s, what).unwrap_or_else(|| {
        Error::WrongState(format!(
            "session {} is between runs: its run has ended, and no run {what} until the next starts",
            s.id
        ))
    })
}

pub(super) fn already_exited() -> StdinResult {
    stdin_result(
        StdinStatus::AlreadyExited,
        0,
        Some("the session has already exited"),
    )
}

pub(super) fn stdin_result(
    status: StdinStatus,
    bytes_written: u64,
    message: Option<&str>,
) -> StdinResult {
    StdinResult {
        status,
        bytes_written,
        message: message.map(String::from),
        output: None,
        cursor: None,
        original_chars: None,
        kept_error_lines: None,
        session_status: None,
        waiting_for_input: None,
        exit: None,
    }
}
