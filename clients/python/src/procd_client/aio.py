"""The asyncio client: one connection, a reader task that hands each
answer to the request with its id (any number may be in flight) and each
subscription item to its iterator; a new connection when the daemon
restarts."""

import asyncio
import itertools
import json
from typing import Any, AsyncIterator, Awaitable, Dict, Optional

from . import discovery
from .api import REPEATABLE, SUBSCRIPTIONS, Api, Result
from .client import RECONNECT_FOR
from .errors import ConnectionLost, ProcdError, error_from


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: Dict[int, "asyncio.Future[Dict[str, Any]]"] = {}
        self.task: Optional["asyncio.Task[None]"] = None

    async def pump(self) -> None:
        """Hands out what the daemon sends until it closes the connection."""
        try:
            while True:
                line = await self.reader.readline()
                if not line:
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(message, dict):
                    continue
                id = message.get("id")
                future = self.pending.pop(id, None) if isinstance(id, int) else None
                if future is not None and not future.done():
                    future.set_result(message)
        finally:
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(ConnectionResetError("procd closed the connection"))
            self.pending.clear()

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.writer.close()


class AsyncClient(Api[Awaitable[Result]]):
    """`Client`, for asyncio. Make it with `await AsyncClient.connect()`."""

    def __init__(self, home: Optional[str], path: str, start: bool, program: Optional[str]) -> None:
        self.home = home
        self.path = path
        self._start = start
        self._program = program
        self._ids = itertools.count(1)
        self._conn: Optional[_Connection] = None

    @classmethod
    async def connect(
        cls,
        home: Optional[str] = None,
        *,
        socket_path: Optional[str] = None,
        start: bool = True,
        program: Optional[str] = None,
    ) -> "AsyncClient":
        client = cls(home, socket_path or discovery.socket_path(home), start, program)
        client._conn = await client._open(start)
        return client

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def _open(self, start: bool) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            sock = await loop.run_in_executor(None, discovery.connect, self.path)
        except (FileNotFoundError, ConnectionRefusedError):
            if not start:
                raise
            await loop.run_in_executor(None, discovery.start_on_demand, self.home, self._program)
            sock = await loop.run_in_executor(None, discovery.connect, self.path)
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=64 << 20)
        conn = _Connection(reader, writer)
        conn.task = asyncio.ensure_future(conn.pump())
        return conn

    async def _reopen(self) -> _Connection:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RECONNECT_FOR
        pause = 0.02
        while True:
            try:
                return await self._open(False)
            except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError) as e:
                if loop.time() >= deadline:
                    raise ConnectionLost(f"procd did not come back within {RECONNECT_FOR} s: {e}")
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.5)

    async def _call(self, method: str, params: Dict[str, Any]) -> Result:
        while True:
            if self._conn is None or self._conn.task is None or self._conn.task.done():
                self._conn = await self._reopen()
            conn = self._conn
            id = next(self._ids)
            future: "asyncio.Future[Dict[str, Any]]" = asyncio.get_running_loop().create_future()
            conn.pending[id] = future
            try:
                line = json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
                conn.writer.write(line.encode() + b"\n")
                await conn.writer.drain()
                answer = await future
            except (ConnectionError, OSError) as e:
                conn.pending.pop(id, None)
                conn.close()
                self._conn = None
                if method not in REPEATABLE:
                    raise ConnectionLost(
                        f"the connection to procd broke before it answered {method} ({e}); "
                        "it may have been done: look before doing it again",
                        may_have_happened=True,
                    ) from e
                continue
            if "error" in answer:
                raise error_from(answer["error"])
            result = answer.get("result")
            if not isinstance(result, dict):
                raise ProcdError(f"procd answered {method} with no result object")
            return result

    async def follow(
        self, session_id: str, cursor: int = 0, *, wait_ms: float = 30_000
    ) -> AsyncIterator[Result]:
        """`Client.follow`, for asyncio."""
        while True:
            chunk = await self.read(session_id, cursor, wait_ms=wait_ms)
            if chunk["data"] or chunk["eof"]:
                yield chunk
            cursor = chunk["next_cursor"]
            if chunk["eof"]:
                return

    async def subscribe_events(self, since: Optional[int] = None) -> AsyncIterator[Dict[str, Any]]:
        """`Client.subscribe_events`, for asyncio."""
        params: Dict[str, Any] = {} if since is None else {"since": since}
        async for item in self._subscription("subscribe_events", params):
            yield item

    async def subscribe_output(self, session_id: str, cursor: int = 0) -> AsyncIterator[Dict[str, Any]]:
        """`Client.subscribe_output`, for asyncio."""
        async for item in self._subscription("subscribe_output", {"session_id": session_id, "cursor": cursor}):
            yield item

    async def _subscription(self, method: str, params: Dict[str, Any]) -> AsyncIterator[Dict[str, Any]]:
        """Items of a subscription on a connection of its own, resumed after
        a daemon's death from the last event number or output cursor."""
        params = dict(params)
        while True:
            loop = asyncio.get_running_loop()
            sock = await self._reopen_socket(loop)
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=64 << 20)
            try:
                writer.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode() + b"\n")
                await writer.drain()
                while True:
                    line = await reader.readline()
                    if not line:
                        break
                    message = json.loads(line)
                    if not isinstance(message, dict):
                        continue
                    if message.get("id") == 1 and "error" in message:
                        raise error_from(message["error"])
                    if message.get("method") != SUBSCRIPTIONS[method]:
                        continue
                    item = message.get("params", {}).get("result")
                    if not isinstance(item, dict):
                        continue
                    if "seq" in item:
                        params["since"] = item["seq"]
                    if "next_cursor" in item:
                        params["cursor"] = item["next_cursor"]
                    yield item
                    if item.get("exited") is True:
                        return
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

    async def _reopen_socket(self, loop: asyncio.AbstractEventLoop) -> Any:
        deadline = loop.time() + RECONNECT_FOR
        pause = 0.02
        while True:
            try:
                return await loop.run_in_executor(None, discovery.connect, self.path)
            except (FileNotFoundError, ConnectionRefusedError) as e:
                if loop.time() >= deadline:
                    raise ConnectionLost(f"procd did not come back within {RECONNECT_FOR} s: {e}")
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.5)
