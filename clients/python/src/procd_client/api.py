"""procd's methods, written once for both clients: `Api[R]` calls
`self._call(method, params)`, which returns a result (`Client`) or an
awaitable of one (`AsyncClient`). Parameters are procd's, by name
(docs/protocol.md); those left as None are not sent, so the daemon's
defaults apply."""

from typing import Any, Dict, Generic, List, Optional, TypeVar, Union

R = TypeVar("R")
Result = Dict[str, Any]


def _params(given: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in given.items() if k != "self" and v is not None}


class Api(Generic[R]):
    def _call(self, method: str, params: Dict[str, Any]) -> R:
        raise NotImplementedError

    def spawn(
        self,
        command: str,
        *,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        pty: Optional[bool] = None,
        rows: Optional[int] = None,
        cols: Optional[int] = None,
        task_id: Optional[str] = None,
        session_key: Optional[str] = None,
        owner: Optional[str] = None,
        persist: Optional[bool] = None,
        notify_on_complete: Optional[bool] = None,
        watch_patterns: Optional[List[str]] = None,
        timeout_s: Optional[float] = None,
        stdin: Optional[str] = None,
        yield_ms: Optional[float] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
        ready: Optional[Dict[str, Any]] = None,
        limits: Optional[Dict[str, Any]] = None,
        name: Optional[str] = None,
        project: Optional[str] = None,
        replace: Optional[bool] = None,
        restart: Optional[Dict[str, Any]] = None,
        sandbox: Optional[Any] = None,
        meta: Optional[Dict[str, Any]] = None,
        junit: Optional[str] = None,
        port: Optional[Union[int, str]] = None,
        ports: Optional[Dict[str, Union[int, str]]] = None,
        watch: Optional[Dict[str, Any]] = None,
        queue: Optional[str] = None,
        jobs: Optional[bool] = None,
    ) -> R:
        return self._call("spawn", _params(locals()))

    def poll(
        self,
        session_id: str,
        *,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        return self._call("poll", _params(locals()))

    def read(
        self,
        session_id: str,
        cursor: Optional[int] = None,
        *,
        max_bytes: Optional[int] = None,
        wait_ms: Optional[float] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        return self._call("read", _params(locals()))

    def log(
        self,
        session_id: str,
        *,
        offset: Optional[int] = None,
        limit: Optional[int] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        return self._call("log", _params(locals()))

    def wait(
        self,
        session_id: str,
        *,
        timeout_s: Optional[float] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        return self._call("wait", _params(locals()))

    def wait_any(
        self,
        *,
        session_ids: Optional[List[str]] = None,
        session_key: Optional[str] = None,
        until: Optional[List[str]] = None,
        output: Optional[str] = None,
        cursors: Optional[Dict[str, int]] = None,
        timeout_s: Optional[float] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        return self._call("wait_any", _params(locals()))

    def search(
        self,
        pattern: str,
        *,
        session_ids: Optional[List[str]] = None,
        session_key: Optional[str] = None,
        ignore_case: Optional[bool] = None,
        before: Optional[int] = None,
        after: Optional[int] = None,
        from_cursor: Optional[int] = None,
        to_cursor: Optional[int] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
        max_matches: Optional[int] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        """`since`/`until`: RFC 3339 times (only output written then)."""
        return self._call("search", _params(locals()))

    def kill(
        self,
        session_id: str,
        *,
        signal: Optional[str] = None,
        grace_s: Optional[float] = None,
        source: Optional[str] = None,
    ) -> R:
        return self._call("kill", _params(locals()))

    def update(
        self,
        session_id: str,
        *,
        notify_on_complete: Optional[bool] = None,
        watch_patterns: Optional[List[str]] = None,
        meta: Optional[Dict[str, Any]] = None,
    ) -> R:
        return self._call("update", _params(locals()))

    def signal(self, session_id: str, signal: str) -> R:
        return self._call("signal", _params(locals()))

    def write_stdin(
        self,
        session_id: str,
        data: str,
        *,
        yield_ms: Optional[float] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        return self._call("write_stdin", _params(locals()))

    def submit_stdin(
        self,
        session_id: str,
        data: str = "",
        *,
        yield_ms: Optional[float] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        return self._call("submit_stdin", _params(locals()))

    def close_stdin(self, session_id: str) -> R:
        return self._call("close_stdin", _params(locals()))

    def resize(self, session_id: str, rows: int, cols: int) -> R:
        return self._call("resize", _params(locals()))

    def close_terminal(self, session_id: str) -> R:
        return self._call("close_terminal", _params(locals()))

    def list(
        self,
        *,
        task_id: Optional[str] = None,
        session_key: Optional[str] = None,
        status: Optional[str] = None,
        owner: Optional[str] = None,
        limit: Optional[int] = None,
        after: Optional[str] = None,
    ) -> R:
        return self._call("list", _params(locals()))

    def has_active(
        self,
        *,
        task_id: Optional[str] = None,
        session_key: Optional[str] = None,
        max_active_age_s: Optional[float] = None,
        owner: Optional[str] = None,
    ) -> R:
        return self._call("has_active", _params(locals()))

    def snapshot_running(self, task_id: str) -> R:
        return self._call("snapshot_running", _params(locals()))

    def kill_all(
        self,
        *,
        task_id: Optional[str] = None,
        exclude_ids: Optional[List[str]] = None,
        source: Optional[str] = None,
        session_key: Optional[str] = None,
        owner: Optional[str] = None,
    ) -> R:
        return self._call("kill_all", _params(locals()))

    def kill_started_since(
        self, task_id: str, baseline: List[str], *, source: Optional[str] = None
    ) -> R:
        return self._call("kill_started_since", _params(locals()))

    def drain_notifications(
        self,
        *,
        session_key: Optional[str] = None,
        owned_keys: Optional[List[str]] = None,
    ) -> R:
        return self._call("drain_notifications", _params(locals()))

    def up(
        self,
        *,
        file: Optional[str] = None,
        dir: Optional[str] = None,
        services: Optional[List[str]] = None,
        yield_ms: Optional[float] = None,
    ) -> R:
        return self._call("up", _params(locals()))

    def down(self, project: str, *, services: Optional[List[str]] = None) -> R:
        return self._call("down", _params(locals()))

    def shell_open(
        self,
        *,
        name: Optional[str] = None,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        pty: Optional[bool] = None,
        sandbox: Optional[Any] = None,
        owner: Optional[str] = None,
        session_key: Optional[str] = None,
        task_id: Optional[str] = None,
    ) -> R:
        """A shell that keeps its state across commands; the open one of
        that `name` if there is one (docs/shells.md)."""
        return self._call("shell_open", _params(locals()))

    def shell_run(
        self,
        shell_id: str,
        command: str,
        *,
        yield_ms: Optional[float] = None,
        timeout_s: Optional[float] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        """Runs `command` in the shell after the one running; answers at
        its end, when it asks for input, or after `yield_ms`."""
        return self._call("shell_run", _params(locals()))

    def shell_wait(
        self,
        shell_id: str,
        *,
        command_id: Optional[int] = None,
        timeout_s: Optional[float] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        return self._call("shell_wait", _params(locals()))

    def shell_read(
        self,
        shell_id: str,
        *,
        command_id: Optional[int] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        return self._call("shell_read", _params(locals()))

    def shell_interrupt(
        self,
        shell_id: str,
        *,
        command_id: Optional[int] = None,
        max_output_chars: Optional[int] = None,
        max_output_tokens: Optional[int] = None,
    ) -> R:
        return self._call("shell_interrupt", _params(locals()))

    def shell_commands(self, shell_id: str) -> R:
        return self._call("shell_commands", _params(locals()))

    def shell_close(self, shell_id: str) -> R:
        return self._call("shell_close", _params(locals()))

    def port(self, port: int) -> R:
        return self._call("port", _params(locals()))

    def status(self) -> R:
        return self._call("status", {})

    def shutdown(self, *, timeout_s: Optional[float] = None) -> R:
        return self._call("shutdown", _params(locals()))


#: Methods that change nothing: repeated as they are after a reconnect.
#: The others, cut by a daemon's death, raise `ConnectionLost` with
#: `may_have_happened`, since the daemon may have done them.
REPEATABLE = frozenset(
    {
        "poll",
        "read",
        "log",
        "wait",
        "wait_any",
        "search",
        "shell_wait",
        "shell_read",
        "shell_commands",
        "list",
        "has_active",
        "snapshot_running",
        "port",
        "status",
    }
)

#: Subscriptions, served by `subscribe_output` / `subscribe_events`.
SUBSCRIPTIONS = {"subscribe_output": "output", "subscribe_events": "event"}
