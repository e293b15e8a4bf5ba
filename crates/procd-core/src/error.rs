//! Errors the registry reports to callers; each maps to one wire code.

use procd_proto::error as code;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// -32602: a parameter is missing or wrong; the message names it.
    InvalidParams(String),
    /// -32001
    NotFound(String),
    /// -32002
    WrongState(String),
    /// -32003: carries the OS error.
    SpawnFailed(String),
    /// -32004
    LimitReached(String),
    /// -32005
    PermissionDenied(String),
    /// -32603: something procd itself failed at.
    Internal(String),
}

impl Error {
    pub fn code(&self) -> i32 {
        match self {
            Error::InvalidParams(_) => code::INVALID_PARAMS,
            Error::NotFound(_) => code::SESSION_NOT_FOUND,
            Error::WrongState(_) => code::WRONG_STATE,
            Error::SpawnFailed(_) => code::SPAWN_FAILED,
            Error::LimitReached(_) => code::LIMIT_REACHED,
            Error::PermissionDenied(_) => code::PERMISSION_DENIED,
            Error::Internal(_) => code::INTERNAL_ERROR,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Error::InvalidParams(m)
            | Error::NotFound(m)
            | Error::WrongState(m)
            | Error::SpawnFailed(m)
            | Error::LimitReached(m)
            | Error::PermissionDenied(m)
            | Error::Internal(m) => m,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}

/// A limit its controller cannot hold is the session's wrong state
/// (-32002 naming the controller); a cgroup that cannot be made, a failed
/// spawn.
impl From<procd_sys::cgroup::LimitError> for Error {
    fn from(e: procd_sys::cgroup::LimitError) -> Error {
        match e {
            procd_sys::cgroup::LimitError::Unavailable { .. } => {
                Error::WrongState(format!("limits: {e}"))
            }
            procd_sys::cgroup::LimitError::Io(_) => Error::SpawnFailed(e.to_string()),
        }
    }
}
