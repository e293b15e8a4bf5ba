//! What the shell layer (`shell/`) asks of the registry: a shell's
//! session started with its channels, a command's processes ended, input
//! wanted, text redacted. Routing only: a shell's commands are `shell/`'s.

use super::Registry;
use crate::error::Error;
use crate::session::{self, Session};
use crate::tree::kill::{self, KillPlan};
use procd_proto::{SpawnParams, SpawnResult};
use std::path::PathBuf;

impl Registry {
    /// Starts a shell's session: `params` as `spawn` takes them, with the
    /// channels in `dir` inherited as fds 3, 4 and 5.
    pub async fn spawn_shell(
        &self,
        params: SpawnParams,
        dir: PathBuf,
    ) -> Result<SpawnResult, Error> {
        self.spawn_from(params, None, Some(dir)).await
    }

    /// SIGKILL to the processes in the session's process group but its
    /// root (a shell's command, not the shell); how many were signalled.
    pub async fn kill_group_but_root(&self, s: &Session) -> usize {
        let tree = s.tree();
        let (tree2, procfs) = (tree.clone(), self.procfs.clone());
        let Ok(mut plan) = kill::scan_blocking(move || KillPlan::group(&tree2, &procfs)).await
        else {
            return 0;
        };
        plan.targets.retain(|t| t.pid != tree.root.pid);
        kill::signal_targets(&tree, &plan.targets, &self.procfs, libc::SIGKILL)
    }

    /// Whether the session is blocked reading its input now (looked at
    /// afresh once it has been idle a moment, as a yield does).
    pub async fn input_wanted(&self, s: &Session) -> bool {
        if !s.takes_input() || s.idle_for() < session::INPUT_QUIET {
            return false;
        }
        self.probe(s).await;
        s.waiting_for_input()
    }

    /// A session's output text as `read` gives it: secrets masked.
    pub fn redact_excerpt(&self, s: &Session, text: &str, before: &[u8]) -> String {
        self.redactor.excerpt(text, before, s.env_dump).into_owned()
    }

    /// A command as `list` and `poll` show commands: secrets masked.
    pub fn redact_command(&self, command: &str) -> String {
        self.redactor.command(command).into_owned()
    }
}
