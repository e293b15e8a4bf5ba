"""A client for procd, the process supervisor for AI coding agents
(standard library only). `Client` blocks, `AsyncClient` is for asyncio;
both have one method per procd method (docs/protocol.md)."""

from .aio import AsyncClient
from .client import Client, Lease, Subscription
from .discovery import socket_path
from .errors import (
    ConnectionLost,
    InternalError,
    InvalidParams,
    InvalidRequest,
    LimitReached,
    MethodNotFound,
    NotTrusted,
    ParseError,
    PermissionDenied,
    ProcdError,
    SessionNotFound,
    SpawnFailed,
    WrongState,
)

__all__ = [
    "AsyncClient",
    "Client",
    "ConnectionLost",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "Lease",
    "LimitReached",
    "MethodNotFound",
    "NotTrusted",
    "ParseError",
    "PermissionDenied",
    "ProcdError",
    "SessionNotFound",
    "SpawnFailed",
    "Subscription",
    "WrongState",
    "socket_path",
]
