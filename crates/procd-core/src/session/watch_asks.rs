//! A supervisor's watch patterns (`watch_patterns`): matched in its
//! output, and made again when `update` changes them.

use super::supervise::Reports;
use super::{Session, SessionView};
use crate::observation::watch::WatchMatcher;
use std::time::Duration;
use tokio::sync::watch;

/// Watch patterns of a session: the matcher (None while there are no
/// patterns), where its outcomes are reported, and how to make it again when
/// `update` changes the patterns.
pub struct Watch {
    pub matcher: Option<WatchMatcher>,
    pub reports: Reports,
    /// The session's view, whose `asks` the matcher was made from.
    view: watch::Receiver<SessionView>,
    /// The `asks_version` the matcher was made from.
    asks_version: u64,
    pub min_interval: Duration,
    pub max_deliveries: u32,
}

impl Watch {
    /// The watch of `session`'s patterns as they are now.
    pub fn new(
        session: &Session,
        reports: Reports,
        min_interval: Duration,
        max_deliveries: u32,
    ) -> Watch {
        let mut watch = Watch {
            matcher: None,
            reports,
            view: session.subscribe(),
            asks_version: 0,
            min_interval,
            max_deliveries,
        };
        watch.renew();
        watch
    }

    /// Resolves when the session's asks change (never once it is gone).
    pub(super) async fn changed(watch: &mut Option<Watch>) {
        let Some(w) = watch else {
            return std::future::pending().await;
        };
        let version = w.asks_version;
        if w.view
            .wait_for(|v| v.asks_version != version)
            .await
            .is_err()
        {
            std::future::pending::<()>().await
        }
    }

    /// Matches the patterns asked for now (their counts start again).
    pub(super) fn renew(&mut self) {
        let view = self.view.borrow_and_update();
        let patterns = view.asks.watch_patterns.clone();
        self.asks_version = view.asks_version;
        drop(view);
        self.matcher = WatchMatcher::new(&patterns, self.min_interval, self.max_deliveries);
    }
}
