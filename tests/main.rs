//! procd's integration suite, one test binary with a module per area (as
//! ripgrep and pueue lay theirs out): `tests/common` is compiled once, not
//! once per area. Every test drives a real `procd daemon` in a temp
//! PROCD_HOME through the socket or the CLI; nextest runs each test in a
//! process of its own.

// Each area takes the whole fixture, `common`, as its prelude; production
// code names every import (the workspace denies glob imports elsewhere).
#![allow(clippy::wildcard_imports)]

mod common;

mod agents;
mod blind_spots;
mod cli;
mod cluster;
mod codex;
mod containment;
mod docs;
mod hermes;
mod interactive;
mod jobserver;
mod killing;
mod lifecycle;
mod mcp;
mod protocol;
mod python_client;
mod queues;
mod readiness;
mod remote;
mod restarts;
mod safety;
mod sandbox;
mod search;
mod sessions;
mod shells;
mod snapshot;
mod stacks;
mod survival;
mod systemd;
mod testruns;
mod top;
mod watching;
