"""One exception class per procd error code (docs/protocol.md, Errors)."""

from typing import Any, Dict, Optional, Type


class ProcdError(Exception):
    """An error procd answered with. `code` is the JSON-RPC code."""

    code: int = 0

    def __init__(self, message: str, code: Optional[int] = None, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.data = data


class ParseError(ProcdError):
    code = -32700


class InvalidRequest(ProcdError):
    code = -32600


class MethodNotFound(ProcdError):
    code = -32601


class InvalidParams(ProcdError):
    """A parameter is missing or wrong; the message names it."""

    code = -32602


class InternalError(ProcdError):
    code = -32603


class SessionNotFound(ProcdError):
    code = -32001


class WrongState(ProcdError):
    """Not possible now: stdin closed, not a PTY, nothing to wait on, ..."""

    code = -32002


class SpawnFailed(ProcdError):
    code = -32003


class LimitReached(ProcdError):
    code = -32004


class PermissionDenied(ProcdError):
    code = -32005


class ConnectionLost(ProcdError):
    """The connection to procd broke before the answer came. For a call
    that changes something (`may_have_happened`), the daemon may have done
    it and died: look (`list`, `read`) before doing it again."""

    def __init__(self, message: str, may_have_happened: bool = False) -> None:
        super().__init__(message)
        self.may_have_happened = may_have_happened


class NotTrusted(ProcdError):
    """The socket's directory or its listener is not this user's."""


_BY_CODE: Dict[int, Type[ProcdError]] = {
    cls.code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        SessionNotFound,
        WrongState,
        SpawnFailed,
        LimitReached,
        PermissionDenied,
    )
}


def error_from(error: Dict[str, Any]) -> ProcdError:
    """The exception for a JSON-RPC error object."""
    code = int(error.get("code", 0))
    cls = _BY_CODE.get(code, ProcdError)
    return cls(str(error.get("message", "")), code, error.get("data"))
