//! A session's sandbox (docs/SECURITY.md): what `spawn{sandbox}` (or the
//! configured default) asks, resolved against the session's cwd and its
//! temp dir into the rules procd-sys hands the kernel, and what `poll`
//! and `list` show. Checked at spawn, before anything starts: a sandbox
//! the kernel cannot give is -32002 naming what is missing, never a
//! weaker one.

use crate::error::Error;
use procd_proto::{NetworkSpec, Readable, SandboxInfo, SandboxProfile, SandboxSpec};
use procd_sys::sandbox::{Network, Rules};
use std::path::{Path, PathBuf};

/// The variable a sandboxed command finds its temp dir in.
pub const TMPDIR: &str = "TMPDIR";
/// How a session's temp dir is named, below the registry's `tmp_dir`.
pub const TMP_PREFIX: &str = "sandbox-";

/// A session's sandbox, fixed at its spawn (and recorded in procs.json).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxPlan {
    pub info: SandboxInfo,
    /// The session's own temp dir: writable, made at its start, removed
    /// at its end.
    pub tmp: PathBuf,
}

impl SandboxPlan {
    /// The plan for `asked` (else the configured `default`) in `cwd`;
    /// None for no sandbox. Its temp dir is named below `tmp_root`
    /// (before the session has an id). No writable path may hold, or lie
    /// in, one of procd's own (`protected`).
    pub fn new(
        asked: Option<&SandboxSpec>,
        default: SandboxProfile,
        cwd: &Path,
        tmp_root: &Path,
        protected: &[PathBuf],
    ) -> Result<Option<SandboxPlan>, Error> {
        let spec = asked.cloned().unwrap_or(SandboxSpec::Profile(default));
        if spec == SandboxSpec::Profile(SandboxProfile::Full) {
            return Ok(None);
        }
        let name = crate::random::hex(8).map_err(|e| Error::Internal(e.to_string()))?;
        let tmp = tmp_root.join(format!("{TMP_PREFIX}{name}"));
        let tmp_s = tmp.display().to_string();
        let info = match spec {
            SandboxSpec::Profile(SandboxProfile::Full) => return Ok(None),
            SandboxSpec::Profile(SandboxProfile::ReadOnly) => SandboxInfo {
                profile: "read-only".into(),
                writable: vec![tmp_s],
                readable: Readable::All,
                network: NetworkSpec::None,
            },
            SandboxSpec::Profile(SandboxProfile::WorkspaceWrite) => SandboxInfo {
                profile: "workspace-write".into(),
                writable: vec![cwd.display().to_string(), tmp_s],
                readable: Readable::All,
                network: NetworkSpec::None,
            },
            SandboxSpec::Rules(rules) => {
                let absolute = |paths: Vec<String>, what: &str| {
                    paths
                        .into_iter()
                        .map(|p| {
                            if p.is_empty() || p.contains('\0') {
                                return Err(Error::InvalidParams(format!(
                                    "sandbox.{what}: {p:?} is not a path"
                                )));
                            }
                            Ok(cwd.join(p).display().to_string())
                        })
                        .collect::<Result<Vec<_>, _>>()
                };
                let mut writable = absolute(rules.writable.unwrap_or_default(), "writable")?;
                writable.push(tmp_s);
                let readable = match rules.readable.unwrap_or(Readable::All) {
                    Readable::All => Readable::All,
                    Readable::Paths(p) => Readable::Paths(absolute(p, "readable")?),
                };
                SandboxInfo {
                    profile: "custom".into(),
                    writable,
                    readable,
                    network: rules.network.unwrap_or(NetworkSpec::None),
                }
            }
        };
        if info.writable.len() + paths(&info.readable).len() > MAX_PATHS {
            return Err(Error::InvalidParams(format!(
                "sandbox: at most {MAX_PATHS} paths"
            )));
        }
        let plan = SandboxPlan { info, tmp };
        plan.check()?;
        plan.refuse_own_paths(protected)?;
        Ok(Some(plan))
    }

    /// A plan a previous daemon recorded (its temp dir is its last
    /// writable path).
    pub fn recovered(info: SandboxInfo) -> Option<SandboxPlan> {
        let tmp = PathBuf::from(info.writable.last()?);
        Some(SandboxPlan { info, tmp })
    }

    /// What the kernel is to enforce, for a session whose terminal (if it
    /// has one) is `terminal`.
    pub fn rules(&self, terminal: Option<&Path>) -> Rules {
        Rules {
            terminal: terminal.map(Path::to_path_buf),
            readable: match &self.info.readable {
                Readable::All => None,
                Readable::Paths(p) => Some(p.iter().map(PathBuf::from).collect()),
            },
            writable: self.info.writable.iter().map(PathBuf::from).collect(),
            network: match &self.info.network {
                NetworkSpec::All => Network::All,
                NetworkSpec::None => Network::None,
                NetworkSpec::Ports { connect, bind } => Network::Ports {
                    connect: connect.clone(),
                    bind: bind.clone(),
                },
            },
        }
    }

    /// Whether its temp dir is one procd made below `root`: a recorded
    /// plan comes from procs.json, and a corrupt or planted one must not
    /// make procd create or remove a directory elsewhere.
    pub fn is_own_tmp(&self, root: &Path) -> bool {
        self.tmp.parent() == Some(root)
            && self
                .tmp
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(TMP_PREFIX) && n.len() > TMP_PREFIX.len())
    }

    /// Makes its temp dir (0700, below `root`) and what the child hands
    /// the kernel.
    pub fn enforcement(
        &self,
        root: &Path,
        terminal: Option<&Path>,
    ) -> std::io::Result<procd_sys::sandbox::Enforcement> {
        use std::os::unix::fs::DirBuilderExt;
        if !self.is_own_tmp(root) {
            return Err(std::io::Error::other(format!(
                "the sandbox's temp dir {} is not procd's",
                self.tmp.display()
            )));
        }
        match std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.tmp)
        {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        procd_sys::sandbox::prepare(&self.rules(terminal)).map_err(std::io::Error::other)
    }

    /// Removes its temp dir (its session has ended), off the event loop;
    /// only one procd made below `root`.
    pub fn remove_tmp(&self, root: &Path) {
        if !self.is_own_tmp(root) {
            return;
        }
        let tmp = self.tmp.clone();
        tokio::task::spawn_blocking(move || {
            let _ = std::fs::remove_dir_all(tmp);
        });
    }

    /// -32002 for what the kernel lacks, -32602 for a path that is not
    /// there (its temp dir is made at the start, so it is not checked).
    fn check(&self) -> Result<(), Error> {
        let mut rules = self.rules(None);
        rules.writable.retain(|p| p != &self.tmp);
        procd_sys::sandbox::check(&rules).map_err(|e| match e {
            procd_sys::sandbox::SandboxError::Missing(m) => Error::WrongState(m),
            other => Error::InvalidParams(format!("sandbox: {other}")),
        })
    }

    /// -32602 when a writable path holds one of procd's own, or lies in
    /// one: Landlock cannot take a path back out of a writable one, and a
    /// command that could write procd's state (the shell snapshot every
    /// session sources, procs.json), its socket's directory or its config
    /// could change what unsandboxed sessions run. Both sides are compared
    /// with their links resolved, as Landlock opens them.
    fn refuse_own_paths(&self, protected: &[PathBuf]) -> Result<(), Error> {
        let own: Vec<PathBuf> = protected.iter().map(|p| resolved(p)).collect();
        for writable in self.info.writable.iter().map(Path::new) {
            if writable == self.tmp {
                continue;
            }
            let writable = resolved(writable);
            if let Some(own) = own
                .iter()
                .find(|own| own.starts_with(&writable) || writable.starts_with(own))
            {
                return Err(Error::InvalidParams(format!(
                    "sandbox: writable path {} would make procd's own {} writable (its state, socket or config), through which a sandboxed command could change what other sessions run; give a writable path that neither holds nor lies in it",
                    writable.display(),
                    own.display()
                )));
            }
        }
        Ok(())
    }
}

/// `path` with its links resolved, as far as it exists (the rest kept as
/// written, for a file not made yet).
fn resolved(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => resolved(parent).join(name),
        _ => path.to_path_buf(),
    }
}

/// Paths one sandbox may name (each is a rule and an open at spawn).
const MAX_PATHS: usize = 64;

fn paths(readable: &Readable) -> &[String] {
    match readable {
        Readable::All => &[],
        Readable::Paths(p) => p,
    }
}

/// Sandboxed spawns whose child may run before its session is in the
/// table. A connection from such a child, looked at in that window, would
/// be taken for anyone's and served; so a connection waits until the
/// sandboxed spawns that began before it have their sessions in the table
/// (`settled`), and only those: a stream of later ones cannot hold it up.
#[derive(Default)]
pub struct Launches {
    /// (the next launch's number, the numbers of the ones in flight).
    state: std::sync::Mutex<(u64, std::collections::BTreeSet<u64>)>,
    changed: tokio::sync::Notify,
}

/// A sandboxed spawn in flight; dropped once its session is in the table
/// (or the spawn failed).
pub struct Launch<'a> {
    launches: &'a Launches,
    number: u64,
}

impl Launches {
    fn state(&self) -> std::sync::MutexGuard<'_, (u64, std::collections::BTreeSet<u64>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn begin(&self) -> Launch<'_> {
        let mut state = self.state();
        let number = state.0;
        state.0 += 1;
        state.1.insert(number);
        Launch {
            launches: self,
            number,
        }
    }

    /// Whether a sandboxed spawn is in flight.
    pub fn any(&self) -> bool {
        !self.state().1.is_empty()
    }

    /// Waits until every launch begun before this call is done; false
    /// when `limit` passed first.
    pub async fn settled(&self, limit: std::time::Duration) -> bool {
        let before = self.state().0;
        let done = async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.state().1.first().is_none_or(|first| *first >= before) {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(limit, done).await.is_ok()
    }
}

impl Drop for Launch<'_> {
    fn drop(&mut self) {
        self.launches.state().1.remove(&self.number);
        self.launches.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_with_tmp(tmp: &str) -> SandboxPlan {
        SandboxPlan::recovered(SandboxInfo {
            profile: "read-only".into(),
            writable: vec![tmp.into()],
            readable: Readable::All,
            network: NetworkSpec::None,
        })
        .expect("a plan")
    }

    #[test]
    fn only_a_temp_dir_procd_made_is_made_or_removed() {
        let root = Path::new("/home/u/.procd/state/tmp");
        assert!(plan_with_tmp("/home/u/.procd/state/tmp/sandbox-0a1b").is_own_tmp(root));
        // What a corrupt or planted procs.json could name instead.
        for planted in [
            "/home/u",
            "/home/u/.procd/state/tmp",
            "/home/u/.procd/state/tmp/sandbox-",
            "/home/u/.procd/state/tmp/other",
            "/home/u/.procd/state/tmp/sandbox-x/deeper",
            "/home/u/.procd/state/tmp/../../../projects",
        ] {
            let plan = plan_with_tmp(planted);
            assert!(!plan.is_own_tmp(root), "{planted}");
            assert!(plan.enforcement(root, None).is_err(), "{planted}");
        }
    }
}
