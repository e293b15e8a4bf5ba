"""hermes-agent's process registry, on procd (hermes-agent 0.19.0).

`install()` swaps hermes's `tools.process_registry.process_registry` (and
every module-level reference to it) for a `ProcdProcessRegistry`: hermes's
own `terminal(background=true)` and `process` tools then run their
processes as procd sessions. They are contained and killed as a tree,
their output is kept on disk, and they outlive a hermes crash: a
restarted hermes finds them again (`recover_from_checkpoint`), reads the
output written while it was down, and gets the real exit code, where
hermes alone could only report them "detached", with no output and no
exit code.

The registry keeps hermes's own bookkeeping (its session objects, its
completion queue, its notification texts and routing): each session is a
`ProcdSession`, a hermes `ProcessSession` whose state is read from procd,
and whose wishes set after the spawn (`notify_on_complete`,
`watch_patterns`, the watcher's routing fields) are sent to procd
(`update`), so they survive hermes and the daemon. A thread follows
procd's events and feeds hermes's `completion_queue` as hermes's own
reader would. Only this hermes's sessions are listed or killed; other
clients' sessions and persistent services are never touched. Non-local
environments (docker, ssh, modal) stay on hermes's native path.

This module imports hermes (`tools.process_registry`); the rest of
procd_client does not.
"""

import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from tools import process_registry as _hermes  # type: ignore[import-not-found]

from .client import Client
from .errors import ProcdError, SessionNotFound

#: The marker in `meta` of the sessions this adapter starts.
CLIENT = "hermes"
#: The routing fields hermes sets on a session after the spawn, kept in
#: procd's `meta` so a restarted hermes routes the completion as before.
WATCHER_FIELDS = (
    "watcher_platform",
    "watcher_chat_id",
    "watcher_user_id",
    "watcher_user_name",
    "watcher_thread_id",
    "watcher_message_id",
    "watcher_interval",
)
#: The most output kept as `output_buffer` (hermes's own cap).
TAIL_BYTES = 200_000


class ProcdSession(_hermes.ProcessSession):  # type: ignore[misc]
    """A hermes `ProcessSession` backed by a procd session: its output is
    procd's log, and what hermes sets on it after the spawn goes to procd."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        registry = self.__dict__.get("_procd_registry")
        if registry is None:
            return  # still being made
        if name == "notify_on_complete":
            registry._update(self, notify_on_complete=bool(value))
        elif name == "watch_patterns":
            registry._update(self, watch_patterns=list(value or []))
        elif name in WATCHER_FIELDS:
            registry._update(self, meta=registry._meta_of(self))

    @property
    def output_buffer(self) -> str:
        registry = self.__dict__.get("_procd_registry")
        if registry is None:
            return str(self.__dict__.get("_output_buffer", ""))
        return str(registry._tail(self.id))

    @output_buffer.setter
    def output_buffer(self, value: str) -> None:
        self.__dict__["_output_buffer"] = value


class ProcdProcessRegistry(_hermes.ProcessRegistry):  # type: ignore[misc]
    """hermes's `ProcessRegistry`, its local processes run by procd."""

    def __init__(self, client: Optional[Client] = None, *, home: Optional[str] = None) -> None:
        super().__init__()
        self.procd = client or Client(home)
        #: Sessions of this hermes home, told apart from another hermes's.
        self.hermes_home = os.environ.get("HERMES_HOME") or os.path.expanduser("~/.hermes")
        self._pump = threading.Thread(target=self._follow_events, daemon=True, name="procd-events")
        self._pump.start()

    # ----- spawning -------------------------------------------------------

    def spawn_local(
        self,
        command: str,
        cwd: Optional[str] = None,
        task_id: str = "",
        session_key: str = "",
        env_vars: Optional[Dict[str, str]] = None,
        use_pty: bool = False,
    ) -> ProcdSession:
        cwd = _hermes._resolve_safe_cwd(cwd or os.getcwd())
        env = dict(env_vars or {})
        env.setdefault("PYTHONUNBUFFERED", "1")
        r = self.procd.spawn(
            command,
            cwd=cwd,
            env=env,
            pty=use_pty,
            task_id=task_id or None,
            session_key=session_key or None,
            # Outlives a hermes crash; this registry kills its own.
            persist=True,
            meta={"client": CLIENT, "hermes_home": self.hermes_home},
        )
        session = self._adopt(
            {
                "session_id": r["session_id"],
                "command": command,
                "task_id": task_id,
                "session_key": session_key,
                "pid": r["pid"],
                "cwd": cwd,
                "status": "running",
            }
        )
        return session

    def _adopt(self, entry: Dict[str, Any]) -> ProcdSession:
        """A hermes session for a procd session (a new one, or one found
        again after a restart), tracked as running or finished."""
        meta = entry.get("meta") or {}
        session = ProcdSession(
            id=entry["session_id"],
            command=entry.get("command", ""),
            task_id=entry.get("task_id") or "",
            session_key=entry.get("session_key") or "",
            pid=entry.get("pid"),
            cwd=entry.get("cwd"),
            started_at=_epoch(entry.get("started_at")),
            notify_on_complete=bool(entry.get("notify_on_complete", False)),
            watch_patterns=list(entry.get("watch_patterns") or []),
            **{f: meta[f] for f in WATCHER_FIELDS if f in meta},
        )
        if entry.get("status") == "exited":
            self._finish_fields(session, entry)
        object.__setattr__(session, "_procd_registry", self)
        with self._lock:
            if session.exited:
                self._finished[session.id] = session
            else:
                self._prune_if_needed()
                self._running[session.id] = session
        return session

    def _meta_of(self, session: ProcdSession) -> Dict[str, Any]:
        meta: Dict[str, Any] = {"client": CLIENT, "hermes_home": self.hermes_home}
        for f in WATCHER_FIELDS:
            value = getattr(session, f, None)
            if value:
                meta[f] = value
        return meta

    def _update(self, session: ProcdSession, **changes: Any) -> None:
        if session.exited:
            return
        try:
            self.procd.update(session.id, **changes)
        except ProcdError:
            pass  # it ended meanwhile: nothing left to change

    # ----- state from procd --------------------------------------------------

    def _tail(self, session_id: str) -> str:
        """The last `TAIL_BYTES` of a session's output."""
        try:
            # The end: a read from past it (2**53, the largest cursor) says where it is.
            end = self.procd.read(session_id, 2**53, max_bytes=1)["next_cursor"]
            chunk = self.procd.read(session_id, max(0, end - TAIL_BYTES), max_bytes=TAIL_BYTES)
        except ProcdError:
            return ""
        return str(chunk.get("data", ""))

    @staticmethod
    def _finish_fields(session: ProcdSession, state: Dict[str, Any]) -> None:
        object.__setattr__(session, "exited", True)
        object.__setattr__(session, "exit_code", state.get("exit_code"))
        object.__setattr__(session, "completion_reason", state.get("completion_reason") or "exited")
        object.__setattr__(session, "termination_source", state.get("termination_source") or "")

    def _refresh_detached_session(self, session: Any) -> Any:
        """hermes refreshes a session before it reads it: a procd session's
        end is read from procd, and moves it to finished (which queues its
        completion the way hermes's own reader does)."""
        if not isinstance(session, ProcdSession):
            return super()._refresh_detached_session(session)
        if session.exited:
            return session
        try:
            state = self.procd.poll(session.id, max_output_chars=0)
        except SessionNotFound:
            state = {"status": "exited", "completion_reason": "lost"}
        if state.get("status") == "exited":
            self._finish_fields(session, state)
            self._move_to_finished(session)
        return session

    def _write_checkpoint(self) -> None:
        """procd keeps the sessions (procs.json); hermes's own checkpoint
        holds only the sessions it runs natively."""
        native = [s for s in list(self._running.values()) if not isinstance(s, ProcdSession)]
        if native:
            super()._write_checkpoint()

    # ----- the process tool's actions ----------------------------------------

    def wait(self, session_id: str, timeout: Optional[int] = None) -> Dict[str, Any]:
        session = self.get(session_id)
        if not isinstance(session, ProcdSession):
            return dict(super().wait(session_id, timeout))
        from tools.interrupt import is_interrupted  # type: ignore[import-not-found]

        try:
            limit = int(os.getenv("TERMINAL_TIMEOUT", "180"))
        except ValueError:
            limit = 180
        effective = min(timeout, limit) if timeout else limit
        note = (
            f"Requested wait of {timeout}s was clamped to configured limit of {limit}s"
            if timeout and timeout > limit
            else None
        )
        deadline = time.monotonic() + effective
        # Woken by procd at the exit; slices of a second keep hermes's
        # interrupt (a new user message) as prompt as its own loop does.
        interrupted = False
        while not session.exited and time.monotonic() < deadline:
            if is_interrupted():
                interrupted = True
                break
            left = max(0.001, min(1.0, deadline - time.monotonic()))
            r = self.procd.wait(session.id, timeout_s=left, max_output_chars=0)
            if r.get("status") == "exited":
                self._refresh_detached_session(session)
        if session.exited:
            # hermes's own answer, from the state now known.
            return dict(super().wait(session_id, timeout))
        if interrupted:
            result: Dict[str, Any] = {
                "status": "interrupted",
                "command": session.command,
                "output": _hermes_strip(session.output_buffer[-1000:]),
                "note": "User sent a new message -- wait interrupted",
            }
        else:
            result = {
                "status": "timeout",
                "command": session.command,
                "output": _hermes_strip(session.output_buffer[-1000:]),
            }
            note = note or f"Waited {effective}s, process still running"
        if note:
            result["timeout_note"] = note
        return result

    def kill_process(
        self, session_id: str, *, source: str = "process.kill", consume_output: bool = True
    ) -> Dict[str, Any]:
        session = self.get(session_id)
        if not isinstance(session, ProcdSession):
            return dict(super().kill_process(session_id, source=source, consume_output=consume_output))
        if session.exited:
            return dict(super().kill_process(session_id, source=source, consume_output=consume_output))
        r = self.procd.kill(session.id, source=source)
        if r.get("status") == "error":
            return {"status": "error", "error": r.get("error", "kill incomplete")}
        output = _hermes_strip(session.output_buffer[-2000:])
        if consume_output:
            self._completion_consumed.add(session_id)
        self._finish_fields(session, r)
        self._move_to_finished(session)
        return {
            "status": "killed",
            "session_id": session.id,
            "completion_reason": session.completion_reason,
            "termination_source": session.termination_source,
            "output": output,
        }

    def write_stdin(self, session_id: str, data: str) -> Dict[str, Any]:
        if not isinstance(self.get(session_id), ProcdSession):
            return dict(super().write_stdin(session_id, data))
        return self._stdin(session_id, lambda: self.procd.write_stdin(session_id, data))

    def submit_stdin(self, session_id: str, data: str = "") -> Dict[str, Any]:
        if not isinstance(self.get(session_id), ProcdSession):
            return dict(super().submit_stdin(session_id, data))
        # procd presses Enter as the terminal expects it ("\r" on a PTY).
        return self._stdin(session_id, lambda: self.procd.submit_stdin(session_id, data))

    def close_stdin(self, session_id: str) -> Dict[str, Any]:
        if not isinstance(self.get(session_id), ProcdSession):
            return dict(super().close_stdin(session_id))
        return self._stdin(session_id, lambda: self.procd.close_stdin(session_id), close=True)

    def _stdin(self, session_id: str, call: Any, close: bool = False) -> Dict[str, Any]:
        session = self.get(session_id)
        if session is None or session.exited:
            return {"status": "already_exited", "error": "Process has already finished"}
        try:
            r = call()
        except ProcdError as e:
            return {"status": "error", "error": e.message}
        if r.get("status") == "already_exited":
            return {"status": "already_exited", "error": "Process has already finished"}
        if close:
            return {"status": "ok", "message": r.get("message", "stdin closed")}
        return {"status": "ok", "bytes_written": r.get("bytes_written", 0)}

    # ----- after a restart -----------------------------------------------------

    def recover_from_checkpoint(self) -> int:
        """Finds this hermes home's procd sessions again (running or ended),
        with their output and real exit codes; then hermes's own checkpoint
        for what it ran natively."""
        found = 0
        entries = self.procd.list().get("processes", [])
        for entry in entries:
            meta = entry.get("meta") or {}
            ours = meta.get("client") == CLIENT and meta.get("hermes_home") == self.hermes_home
            if not ours or self.get(entry["session_id"]) is not None:
                continue
            self._adopt(entry)
            found += 1
        return found + int(super().recover_from_checkpoint() or 0)

    # ----- events --------------------------------------------------------------

    def _follow_events(self) -> None:
        """Feeds hermes's completion queue from procd's events, as hermes's
        reader thread would: an exit moves the session to finished (hermes
        queues its completion, with its text and routing); a watch match or
        a disabled watch is queued in hermes's shape."""
        while True:
            try:
                for event in self.procd.subscribe_events(since=None):
                    self._on_event(event)
            except Exception:  # the daemon went and did not come back yet
                time.sleep(1.0)

    def _on_event(self, event: Dict[str, Any]) -> None:
        session = self.get(str(event.get("session_id", "")))
        if not isinstance(session, ProcdSession):
            return
        kind = event.get("type")
        if kind == "exited":
            self._refresh_detached_session(session)
        elif kind == "watch_match":
            self.completion_queue.put(
                {
                    "type": "watch_match",
                    "session_id": session.id,
                    "session_key": session.session_key,
                    "command": session.command,
                    "pattern": event.get("pattern", ""),
                    "output": event.get("output", ""),
                    "suppressed": event.get("suppressed", 0),
                }
            )
            object.__setattr__(session, "_watch_hits", session._watch_hits + 1)
        elif kind == "watch_disabled":
            object.__setattr__(session, "_watch_disabled", True)
            self.completion_queue.put(
                {
                    "type": "watch_disabled",
                    "session_id": session.id,
                    "session_key": session.session_key,
                    "command": session.command,
                    "message": event.get("text", ""),
                }
            )


def _epoch(rfc3339: Optional[str]) -> float:
    if not rfc3339:
        return time.time()
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _hermes_strip(text: str) -> str:
    from tools.ansi_strip import strip_ansi  # type: ignore[import-not-found]

    return str(strip_ansi(text))


def install(client: Optional[Client] = None, *, home: Optional[str] = None) -> ProcdProcessRegistry:
    """Switches a running hermes to procd: `tools.process_registry.
    process_registry`, and every module-level name bound to it, becomes a
    `ProcdProcessRegistry`. Returns it."""
    old = _hermes.process_registry
    registry = ProcdProcessRegistry(client, home=home)
    for module in list(sys.modules.values()):
        try:
            if getattr(module, "process_registry", None) is old:
                setattr(module, "process_registry", registry)
        except Exception:
            continue
    _hermes.process_registry = registry
    return registry


__all__: List[str] = ["ProcdProcessRegistry", "ProcdSession", "install"]
