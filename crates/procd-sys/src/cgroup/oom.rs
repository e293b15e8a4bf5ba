//! The two ways a cgroup tells of OOM kills (v1 eventfd, v2 file), behind one wait.

use crate::file_watch::FileWatch;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use tokio::io::unix::AsyncFd;

/// What tells of a cgroup's OOM kills (see `SessionCgroup::oom_watch`).
#[derive(Debug)]
pub enum OomWatch {
    EventFd(AsyncFd<OwnedFd>),
    File(FileWatch),
}

impl OomWatch {
    /// Until it signals (an error: it never will again).
    pub async fn signalled(&mut self) -> io::Result<()> {
        match self {
            OomWatch::EventFd(fd) => {
                let mut ready = fd.readable().await?;
                super::drain(ready.get_inner().as_fd());
                ready.clear_ready();
            }
            OomWatch::File(watch) => watch.changed().await?,
        }
        Ok(())
    }
}
