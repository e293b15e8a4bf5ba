//! procd's wire contract: the JSON-RPC method table (the jsonrpsee `#[rpc]`
//! trait), the result types every method returns, and the error codes.
//!
//! This crate is shared by the daemon and every Rust client. It holds no
//! logic: changing a name here changes the protocol, which other-language
//! clients are written against (see `docs/protocol.md`).
//! Beside the wire types it holds the one other shape daemon and clients
//! share, the configuration (`config`: plain data, parsed by the gateway).

mod api;
pub mod config;
mod describe;
pub mod error;
pub mod names;
pub mod params;
mod types;

pub use api::*;

/// The one byte `procd dial-stdio` sends on a fresh connection, with its
/// stdin and stdout attached (SCM_RIGHTS), to hand them to the daemon,
/// which then serves that pipe pair as the connection (docs/remote.md).
/// Not JSON-RPC: a connection that starts otherwise is an ordinary one.
pub const STDIO_HANDOVER: u8 = 0;
pub use names::{ProjectName, QueueName, SessionName};
pub use params::*;
pub use types::*;
