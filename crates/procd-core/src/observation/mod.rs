//! What procd learns of a running session from outside it: its tree's
//! ports, resources and input (`observe`, `sockdiag`), whether it is ready
//! (`readiness`), output lines that match a watch pattern (`watch`), and
//! files changed under it since it started (`stale`).

pub mod observe;
pub mod readiness;
pub mod sockdiag;
pub mod stale;
pub mod watch;
