//! `update`: what a caller may change of a running session after its
//! spawn (hermes-agent sets its completion wish and watch patterns on the
//! session it just started): the completion event, the watch patterns
//! (the supervisor matches the new ones from its next read) and `meta`.
//! In the checkpoint before the answer, so the next daemon keeps them.

use super::checks::{check_meta, check_watch_patterns};
use super::Registry;
use crate::error::Error;
use procd_proto::UpdateResult;

impl Registry {
    pub async fn update(
        &self,
        id: &str,
        notify_on_complete: Option<bool>,
        watch_patterns: Option<Vec<String>>,
        meta: Option<serde_json::Value>,
    ) -> Result<UpdateResult, Error> {
        if let Some(patterns) = &watch_patterns {
            check_watch_patterns(patterns)?;
        }
        let meta = meta.map(check_meta).transpose()?;
        let s = self.find(id)?;
        if !s.is_running() {
            return Err(Error::WrongState(format!(
                "update: session {} has exited",
                s.id
            )));
        }
        if let Some(on) = notify_on_complete {
            s.set_notify_on_complete(on);
        }
        if watch_patterns.is_some() || meta.is_some() {
            s.change_asks(|asks| {
                if let Some(patterns) = watch_patterns {
                    asks.watch_patterns = patterns.into();
                }
                if let Some(meta) = meta {
                    asks.meta = Some(meta);
                }
            });
        }
        // On disk before the answer: a daemon killed right after keeps it.
        self.write_running_checkpoint()
            .await
            .map_err(|e| Error::Internal(format!("the change is made but not saved: {e}")))?;
        Ok(UpdateResult {
            session_id: s.id.clone(),
            notify_on_complete: s.notify_on_complete(),
            watch_patterns: s.asks().watch_patterns.to_vec(),
            meta: s.meta(),
        })
    }
}
