//! JSON-RPC error codes (docs/protocol.md) and constructors for the procd-specific ones.

use jsonrpsee::types::ErrorObjectOwned;

pub const PARSE_ERROR: i32 = -32700;
pub const INVALID_REQUEST: i32 = -32600;
pub const METHOD_NOT_FOUND: i32 = -32601;
pub const INVALID_PARAMS: i32 = -32602;
pub const INTERNAL_ERROR: i32 = -32603;
/// No session matches the id (or an ambiguous prefix).
pub const SESSION_NOT_FOUND: i32 = -32001;
/// The session is in the wrong state for the request (stdin closed, not a PTY…).
pub const WRONG_STATE: i32 = -32002;
/// The OS refused to start the process; the message carries the OS error.
pub const SPAWN_FAILED: i32 = -32003;
/// A configured limit (running sessions, request size…) was reached.
pub const LIMIT_REACHED: i32 = -32004;
/// The caller is not allowed to do this.
pub const PERMISSION_DENIED: i32 = -32005;

/// An error a method returns: a code from this module and a human sentence.
pub fn rpc_error(code: i32, message: impl Into<String>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(code, message.into(), None::<()>)
}

pub fn invalid_params(message: impl Into<String>) -> ErrorObjectOwned {
    rpc_error(INVALID_PARAMS, message)
}
