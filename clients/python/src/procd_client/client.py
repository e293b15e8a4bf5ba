"""The blocking client: one socket, requests matched to answers by id,
a new connection when the daemon restarts (docs/survival.md)."""

import itertools
import json
import os
import socket
import subprocess
import threading
import time
from typing import Any, Dict, Iterator, List, Optional

from . import discovery
from .api import REPEATABLE, SUBSCRIPTIONS, Api, Result
from .errors import ConnectionLost, ProcdError, error_from

#: How long a broken connection is tried again before the call fails: a
#: daemon that died is back within a second (its keeper restarts it).
RECONNECT_FOR = 10.0


class _Line:
    """One connection: JSON lines out, JSON lines in."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.file = sock.makefile("rb")

    def send(self, message: Dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def receive(self) -> Dict[str, Any]:
        line = self.file.readline()
        if not line:
            raise ConnectionResetError("procd closed the connection")
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ConnectionResetError("procd sent something that is not a JSON object")
        return message

    def close(self) -> None:
        try:
            self.file.close()
        finally:
            self.sock.close()


class Client(Api[Result]):
    """A connection to procd. `home` is a `PROCD_HOME` (default: the
    user's daemon, as the CLI finds it); with `start` (the default) a
    daemon is started on demand when none answers, through the `procd`
    program (`program`, `PROCD_BIN` or PATH)."""

    def __init__(
        self,
        home: Optional[str] = None,
        *,
        socket_path: Optional[str] = None,
        start: bool = True,
        program: Optional[str] = None,
        reconnect_for: float = RECONNECT_FOR,
    ) -> None:
        self.home = home
        self.path = socket_path or discovery.socket_path(home)
        self._start = start
        self._program = program
        self._reconnect_for = reconnect_for
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._line: Optional[_Line] = None
        self._line = self._open(start)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._line is not None:
            self._line.close()
            self._line = None

    def _open(self, start: bool) -> _Line:
        try:
            return _Line(discovery.connect(self.path))
        except (FileNotFoundError, ConnectionRefusedError):
            if not start:
                raise
        discovery.start_on_demand(self.home, self._program)
        return _Line(discovery.connect(self.path))

    def _reopen(self) -> _Line:
        """A new connection to the daemon that took the old one's place."""
        deadline = time.monotonic() + self._reconnect_for
        pause = 0.02
        while True:
            try:
                return self._open(False)
            except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError) as e:
                if time.monotonic() >= deadline:
                    raise ConnectionLost(f"procd did not come back within {self._reconnect_for} s: {e}")
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    def _call(self, method: str, params: Dict[str, Any]) -> Result:
        with self._lock:
            while True:
                try:
                    if self._line is None:
                        self._line = self._reopen()
                    return self._request(self._line, method, params)
                except OSError as e:
                    if self._line is not None:
                        self._line.close()
                        self._line = None
                    if method not in REPEATABLE:
                        raise ConnectionLost(
                            f"the connection to procd broke before it answered {method} ({e}); "
                            "it may have been done: look before doing it again",
                            may_have_happened=True,
                        ) from e

    def _request(self, line: _Line, method: str, params: Dict[str, Any]) -> Result:
        id = next(self._ids)
        line.send({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        while True:
            answer = line.receive()
            if answer.get("id") != id:
                continue  # a notification, or an answer nobody waits for
            if "error" in answer:
                raise error_from(answer["error"])
            result = answer.get("result")
            if not isinstance(result, dict):
                raise ProcdError(f"procd answered {method} with no result object")
            return result

    def follow(
        self, session_id: str, cursor: int = 0, *, wait_ms: float = 30_000
    ) -> Iterator[Result]:
        """`read` results from `cursor` on, as output comes, until the
        session has exited and everything was read; a daemon restart is
        ridden through from the same cursor."""
        while True:
            chunk = self.read(session_id, cursor, wait_ms=wait_ms)
            if chunk["data"] or chunk["eof"]:
                yield chunk
            cursor = chunk["next_cursor"]
            if chunk["eof"]:
                return

    def subscribe_events(self, since: Optional[int] = None) -> "Subscription":
        """Every event as it happens; with `since`, first what came after
        that number. After a daemon's death it subscribes again from the
        last number it gave, so nothing still kept is missed."""
        return Subscription(self, "subscribe_events", {} if since is None else {"since": since})

    def subscribe_output(self, session_id: str, cursor: int = 0) -> "Subscription":
        """Output items as they come, then one exit item; resumed from the
        last cursor after a daemon's death."""
        return Subscription(self, "subscribe_output", {"session_id": session_id, "cursor": cursor})


class Subscription:
    """An iterator over a subscription's items, on a connection of its own."""

    def __init__(self, client: Client, method: str, params: Dict[str, Any]) -> None:
        self._client = client
        self._method = method
        self._params = dict(params)
        self._line: Optional[_Line] = None
        self._done = False

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        while not self._done:
            try:
                if self._line is None:
                    self._line = self._client._reopen()
                    self._line.send({"jsonrpc": "2.0", "id": 1, "method": self._method, "params": self._params})
                    answer = self._line.receive()
                    if "error" in answer:
                        raise error_from(answer["error"])
                message = self._line.receive()
            except OSError:
                if self._line is not None:
                    self._line.close()
                    self._line = None
                continue
            if message.get("method") != SUBSCRIPTIONS[self._method]:
                continue
            item = message.get("params", {}).get("result")
            if not isinstance(item, dict):
                continue
            self._advance(item)
            yield item
            if item.get("exited") is True:
                self._done = True
        self.close()

    def _advance(self, item: Dict[str, Any]) -> None:
        """Where a new subscription resumes: after the last event number,
        or from the last output cursor."""
        if "seq" in item:
            self._params["since"] = item["seq"]
        if "next_cursor" in item:
            self._params["cursor"] = item["next_cursor"]

    def close(self) -> None:
        self._done = True
        if self._line is not None:
            self._line.close()
            self._line = None


class Lease:
    """A client lease (docs/operations.md): while held, an on-demand daemon
    stays up, and sessions spawned with `owner=lease.token` live; released
    (or when the holding process dies), the daemon ends them unless they
    were spawned with `persist`. Held through the `procd` program."""

    def __init__(
        self,
        kind: str = "python",
        *,
        pid: Optional[int] = None,
        home: Optional[str] = None,
        program: Optional[str] = None,
    ) -> None:
        self._base: List[str] = [discovery.procd_binary(program)]
        if home:
            self._base += ["--home", home]
        holder = str(pid if pid is not None else os.getpid())
        done = subprocess.run(
            self._base + ["lease", "acquire", "--kind", kind, "--pid", holder],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise ProcdError(f"cannot take a lease: {done.stderr.strip()}")
        self.token = done.stdout.strip()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *_: object) -> None:
        self.release()

    def release(self) -> None:
        if not self.token:
            return
        token, self.token = self.token, ""
        subprocess.run(
            self._base + ["lease", "release", token],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
