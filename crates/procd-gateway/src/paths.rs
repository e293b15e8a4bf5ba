//! Every path of an instance, derived from one root (docs/operations.md).

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// `$PROCD_HOME` when set.
    pub home: Option<PathBuf>,
    pub runtime_dir: PathBuf,
    pub state_dir: PathBuf,
    pub config_file: PathBuf,
}

impl Paths {
    /// Paths for `home` (the `--home` flag or `PROCD_HOME`), else the XDG
    /// directories with their fallbacks.
    pub fn resolve(home: Option<&Path>) -> Paths {
        let home = home.map(Path::to_path_buf).or_else(|| {
            std::env::var_os("PROCD_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        if let Some(home) = home {
            let home = absolute(&home);
            return Paths {
                runtime_dir: home.join("run"),
                state_dir: home.join("state"),
                config_file: home.join("config.toml"),
                home: Some(home),
            };
        }
        let uid = nix::unistd::getuid().as_raw();
        let runtime_dir = dirs::runtime_dir()
            .map(|d| d.join("procd"))
            .unwrap_or_else(|| PathBuf::from(format!("/tmp/procd-{uid}")));
        let state_dir = dirs::state_dir()
            .or_else(|| dirs::home_dir().map(|h| h.join(".local/state")))
            .unwrap_or_else(|| PathBuf::from(format!("/tmp/procd-{uid}-state")))
            .join("procd");
        let config_file = dirs::config_dir()
            .or_else(|| dirs::home_dir().map(|h| h.join(".config")))
            .unwrap_or_else(|| PathBuf::from("/etc"))
            .join("procd/config.toml");
        Paths {
            home: None,
            runtime_dir,
            state_dir,
            config_file,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.runtime_dir.join("procd.sock")
    }
    pub fn gateway_json(&self) -> PathBuf {
        self.runtime_dir.join("gateway.json")
    }
    pub fn clients_json(&self) -> PathBuf {
        self.runtime_dir.join("gateway.clients.json")
    }
    pub fn lifecycle_lock(&self) -> PathBuf {
        self.runtime_dir.join("gateway.json.lock")
    }
    pub fn transition_lock(&self) -> PathBuf {
        self.runtime_dir.join("gateway.json.transition.lock")
    }
    pub fn clients_lock(&self) -> PathBuf {
        self.runtime_dir.join("gateway.clients.json.lock")
    }
    pub fn procs_json(&self) -> PathBuf {
        self.state_dir.join("procs.json")
    }
    /// The notification queue's journal (queued and drained events).
    pub fn notifications_journal(&self) -> PathBuf {
        self.state_dir.join("notifications.jsonl")
    }
    pub fn logs_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }
    pub fn daemon_log(&self) -> PathBuf {
        self.state_dir.join("procd.log")
    }

    /// Creates the runtime and state directories (mode 0700) and checks
    /// that both can be trusted (`check_trusted_dir`). Everything that
    /// writes into them goes through here first.
    pub fn create_dirs(&self) -> io::Result<()> {
        for dir in [&self.runtime_dir, &self.state_dir] {
            create_private_dir(dir)?;
            check_trusted_dir(dir)?;
        }
        Ok(())
    }

    /// Checks the runtime dir before a client connects to its socket (when
    /// it exists; a missing one simply means no daemon).
    pub fn check_runtime_dir(&self) -> io::Result<()> {
        match std::fs::symlink_metadata(&self.runtime_dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            _ => check_trusted_dir(&self.runtime_dir),
        }
    }

    /// Makes both directories private to the user (the daemon does this
    /// once when it claims the instance).
    pub fn restrict_dirs(&self) -> io::Result<()> {
        for dir in [&self.runtime_dir, &self.state_dir] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(())
    }
}

/// Creates `dir` (and parents), mode 0700 for what it creates; an existing
/// directory's mode is left alone (the daemon restricts its own at claim).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// docs/SECURITY.md: a directory procd writes into or connects through must be a
/// real directory (not a symlink), owned by the current user, and not
/// writable by group or others. Otherwise another local user could have
/// placed it (e.g. `/tmp/procd-<uid>` when XDG_RUNTIME_DIR is unset) to
/// read requests, plant files or impersonate the daemon. The error names
/// the path and what is wrong; nothing is written there.
pub fn check_trusted_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let refuse = |what: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refusing to use {}: {what}", dir.display()),
        ))
    };
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return refuse("it is a symbolic link".into());
    }
    if !meta.is_dir() {
        return refuse("it is not a directory".into());
    }
    let me = nix::unistd::getuid().as_raw();
    if meta.uid() != me {
        return refuse(format!(
            "it is owned by uid {}, not by you (uid {me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(format!(
            "it is writable by group or others (mode {:o}; chmod 700 it)",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untrusted_directories_are_refused_with_the_reason() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let ok = tmp.path().join("ok");
        create_private_dir(&ok).unwrap();
        check_trusted_dir(&ok).unwrap();
        let open = tmp.path().join("open");
        create_private_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_trusted_dir(&open).unwrap_err().to_string();
        assert!(
            e.contains("open") && e.contains("writable by group or others"),
            "{e}"
        );
        let link = tmp.path().join("link");
        symlink(&ok, &link).unwrap();
        let e = check_trusted_dir(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(check_trusted_dir(&file)
            .unwrap_err()
            .to_string()
            .contains("not a directory"));
    }

    #[test]
    fn a_home_isolates_every_path() {
        let a = Paths::resolve(Some(Path::new("/tmp/a")));
        let b = Paths::resolve(Some(Path::new("/tmp/b")));
        assert_eq!(a.socket(), PathBuf::from("/tmp/a/run/procd.sock"));
        assert_eq!(a.gateway_json(), PathBuf::from("/tmp/a/run/gateway.json"));
        assert_eq!(a.logs_dir(), PathBuf::from("/tmp/a/state/logs"));
        assert_eq!(a.config_file, PathBuf::from("/tmp/a/config.toml"));
        assert_ne!(a.socket(), b.socket());
        assert_ne!(a.daemon_log(), b.daemon_log());
    }
}
