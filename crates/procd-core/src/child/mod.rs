//! What a session's command starts with: its environment (credentials
//! left out), the command line as rewritten, the shell snapshot instead of
//! login scripts, the sandbox the kernel enforces, and the descriptor
//! limit restored. All of it is decided before the fork.

pub mod env;
pub mod limits;
pub mod rewrite;
pub mod sandbox;
pub mod snapshot;
