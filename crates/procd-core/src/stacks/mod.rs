//! Sessions that make up a project and start again: stack files and
//! `up`/`down` over the registry's public calls, restart policies (the
//! decisions), and restart on change (`spawn{watch}` checked into a plan).

pub mod onchange;
pub mod restart;
pub mod stack;
pub mod up;
