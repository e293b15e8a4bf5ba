//! The shell snapshot (docs/operations.md): what the user's login and rc scripts set
//! up — exported variables (filtered by the environment policy like the
//! daemon's own), functions, aliases and shell options — captured once by
//! running the login shell, written to a 0600 file in the state dir, and
//! sourced by every session's non-interactive `bash -c` before its command.
//! A spawn then costs a `bash -c`, not a login: the scripts run once, and
//! again only when one of them (or HOME, or the shell) changes.
//!
//! Capturing runs the shell through the reaper (the daemon reaps every
//! child; `Command::output` would race it), off the event loop, with a
//! timeout; it writes what it captured into files the daemon created and
//! reads back. A failure is reported (`faults`) and the caller falls back
//! to the configured `-lic` launch.

use crate::env::EnvPolicy;
use crate::identity::ProcessIdentity;
use crate::procfs::ProcFs;
use crate::reaper::{ChildExit, Reaper};
use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// The snapshot file's name in the state dir.
pub const FILE_NAME: &str = "shell-snapshot.sh";
/// Set in the capturing shell's environment (scripts may test for it).
pub const CAPTURE_VAR: &str = "PROCD_SHELL_SNAPSHOT";
/// Set in a session's environment while the snapshot is sourced: the
/// variables it names keep the session's values (the caller's `env`, the
/// marker, …) instead of the ones the scripts exported.
pub const KEEP_VAR: &str = "PROCD_KEEP";

/// The scripts a bash login shell reads (the first three: only the first
/// that exists), relative to HOME unless absolute.
const SOURCES: &[&str] = &[
    "/etc/profile",
    "/etc/bash.bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".bashrc",
];

/// Variables the shell sets for itself, or procd per session: never taken
/// from a snapshot.
const NOT_CAPTURED: &[&str] = &[
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    CAPTURE_VAR,
    KEEP_VAR,
    "PROCD_SESSION_ID",
    "PROCD_INSTANCE",
];

/// What the capture runs: `$1` gets the environment (NUL-separated),
/// `$2` the functions, aliases and shell options.
const CAPTURE: &str = r#"env -0 > "$1" && { declare -f; alias -p; shopt -p; } > "$2""#;

/// A file as it was: modified (s, ns), size, inode; None when absent.
type Stamp = Option<(i64, i64, u64, u64)>;

/// What a snapshot was made from: each source's stamp and the shell's
/// (HOME is fixed for the daemon's life).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint(Vec<(PathBuf, Stamp)>);

impl Fingerprint {
    fn of(home: &Path, shell: &Path) -> Fingerprint {
        let stamp = |p: &Path| -> Stamp {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.mtime(), m.mtime_nsec(), m.len(), m.ino()))
        };
        let mut items: Vec<(PathBuf, Stamp)> = SOURCES
            .iter()
            .map(|s| home.join(s))
            .map(|p| {
                let s = stamp(&p);
                (p, s)
            })
            .collect();
        items.push((shell.to_path_buf(), stamp(shell)));
        Fingerprint(items)
    }
}

enum State {
    Unknown,
    Ready(Fingerprint),
    /// Failed for these sources: not retried until they change.
    Failed(Fingerprint, String),
}

/// The login shell a snapshot is taken from, and what it starts with.
pub struct LoginShell {
    /// A bash.
    pub shell: PathBuf,
    pub home: PathBuf,
    /// The daemon's environment; credentials are filtered out here.
    pub env: Vec<(String, String)>,
    /// The environment policy (docs/SECURITY.md), also applied to what the
    /// scripts export.
    pub policy: EnvPolicy,
}

pub struct ShellSnapshot {
    shell: PathBuf,
    home: PathBuf,
    /// What the login shell starts with: the daemon's, filtered.
    env: Vec<(String, String)>,
    policy: EnvPolicy,
    path: PathBuf,
    timeout: Duration,
    reaper: Arc<Reaper>,
    procfs: ProcFs,
    state: tokio::sync::Mutex<State>,
}

impl ShellSnapshot {
    /// A snapshot of `login`, kept in `state_dir`.
    pub fn new(
        login: LoginShell,
        state_dir: &Path,
        timeout: Duration,
        reaper: Arc<Reaper>,
        procfs: ProcFs,
    ) -> ShellSnapshot {
        let env = login
            .env
            .into_iter()
            .filter(|(k, _)| {
                !login.policy.is_blocked(k) && !k.starts_with(crate::env::FORCE_PREFIX)
            })
            .collect();
        ShellSnapshot {
            shell: login.shell,
            home: login.home,
            env,
            policy: login.policy,
            path: state_dir.join(FILE_NAME),
            timeout,
            reaper,
            procfs,
            state: tokio::sync::Mutex::new(State::Unknown),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The snapshot to source, made or remade first when its sources
    /// changed. Concurrent callers wait for one capture.
    pub async fn current(&self) -> Result<&Path, String> {
        let mut state = self.state.lock().await;
        let (home, shell) = (self.home.clone(), self.shell.clone());
        let path = self.path.clone();
        let (now, present) =
            tokio::task::spawn_blocking(move || (Fingerprint::of(&home, &shell), path.is_file()))
                .await
                .map_err(|e| e.to_string())?;
        match &*state {
            State::Ready(f) if *f == now && present => return Ok(&self.path),
            State::Failed(f, e) if *f == now => return Err(e.clone()),
            _ => {}
        }
        match self.capture().await {
            Ok(()) => {
                *state = State::Ready(now);
                Ok(&self.path)
            }
            Err(e) => {
                *state = State::Failed(now, e.clone());
                Err(e)
            }
        }
    }

    async fn capture(&self) -> Result<(), String> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let env_file = Scratch::create(dir, "env")
            .map_err(|e| format!("cannot create a scratch file: {e}"))?;
        let defs_file = Scratch::create(dir, "defs")
            .map_err(|e| format!("cannot create a scratch file: {e}"))?;
        let mut cmd = Command::new(&self.shell);
        cmd.args(["-lic", CAPTURE, "procd-snapshot"])
            .arg(&env_file.0)
            .arg(&defs_file.0)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(CAPTURE_VAR, "1")
            .current_dir(&self.home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let procfs = self.procfs.clone();
        let inspect = |pid: u32| procfs.stat(pid as i32).map(|s| s.start_time).unwrap_or(0);
        let (child, start_time, exit) = self
            .reaper
            .spawn(&mut cmd, inspect)
            .map_err(|e| format!("cannot start {}: {e}", self.shell.display()))?;
        let root = ProcessIdentity {
            pid: child.id() as i32,
            start_time,
        };
        drop(child);
        let exit = match tokio::time::timeout(self.timeout, exit).await {
            Ok(Ok(exit)) => exit,
            Ok(Err(_)) => return Err("the capturing shell was lost".into()),
            Err(_) => {
                // Its whole group: the scripts may have started more.
                let tree = crate::kill::TreeSpec {
                    root,
                    pgid: root.pid,
                    marker: Vec::new(),
                    root_pinned: true,
                    adopted: Vec::new(),
                    cgroup: None,
                };
                crate::kill::terminate(&tree, &self.procfs, true, libc::SIGKILL, Duration::ZERO)
                    .await;
                return Err(format!(
                    "`{} -lic` did not finish within {:?} (a login script waits or hangs)",
                    self.shell.display(),
                    self.timeout
                ));
            }
        };
        if exit != ChildExit::Code(0) {
            return Err(format!(
                "`{} -lic` failed ({exit:?}) while capturing the login environment",
                self.shell.display()
            ));
        }
        let (env_path, defs_path, path) =
            (env_file.0.clone(), defs_file.0.clone(), self.path.clone());
        let policy = self.policy.clone();
        tokio::task::spawn_blocking(move || {
            let vars = crate::atomic::read_private(&env_path)?;
            let defs = crate::atomic::read_private(&defs_path)?;
            let text = render(&vars, &String::from_utf8_lossy(&defs), &policy);
            crate::atomic::write_bytes(&path, text.as_bytes())
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }
}

/// The snapshot file's text.
fn render(env: &[u8], defs: &str, policy: &EnvPolicy) -> String {
    let mut out = String::from(
        "# procd shell snapshot (docs/operations.md): what the login scripts set up, sourced by\n\
         # every session before its command. Remade when they change; never edit.\n\
         __procd_set() { case \" ${PROCD_KEEP-} \" in *\" $1 \"*) ;; *) export \"$1=$2\" ;; esac; }\n",
    );
    let mut seen = BTreeSet::new();
    for entry in env.split(|b| *b == 0) {
        let entry = String::from_utf8_lossy(entry);
        let Some((name, value)) = entry.split_once('=') else {
            continue;
        };
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid
            || NOT_CAPTURED.contains(&name)
            || policy.is_blocked(name)
            || !seen.insert(name.to_string())
        {
            continue;
        }
        out.push_str(&format!("__procd_set {name} {}\n", quote(value)));
    }
    out.push_str("unset -f __procd_set; unset PROCD_KEEP\nunalias -a\n");
    // `shopt -p` lines, a run of them as one `shopt -s` and one `shopt -u`
    // made quiet: some options cannot be set in a non-interactive shell
    // (login_shell), which is not an error, and shopt goes on past one.
    // One redirection per run, not per option: each costs the session's
    // shell five syscalls, ~60 of them on every spawn.
    let mut options: [Vec<&str>; 2] = [Vec::new(), Vec::new()];
    let flush = |out: &mut String, options: &mut [Vec<&str>; 2]| {
        for (flag, names) in ["-s", "-u"].iter().zip(options.iter_mut()) {
            if !names.is_empty() {
                out.push_str(&format!("shopt {flag} {} 2>/dev/null\n", names.join(" ")));
                names.clear();
            }
        }
    };
    for line in defs.lines() {
        let option = match line.split_once(' ') {
            Some(("shopt", rest)) => rest
                .split_once(' ')
                .filter(|(flag, name)| matches!(*flag, "-s" | "-u") && !name.contains(' ')),
            _ => None,
        };
        match option {
            Some((flag, name)) => options[usize::from(flag == "-u")].push(name),
            None => {
                flush(&mut out, &mut options);
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    flush(&mut out, &mut options);
    // Aliases are expanded in the command (sourced on its own line first).
    out.push_str("shopt -s expand_aliases\n");
    out
}

/// `value` as one single-quoted shell word.
pub fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// A file the capture writes into, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn create(dir: &Path, what: &str) -> std::io::Result<Scratch> {
        let path = dir.join(format!(".shell-snapshot.{}.{what}", crate::random::hex(8)?));
        std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_filters_credentials_and_keeps_the_rest_quoted() {
        let policy = EnvPolicy::new(&["GITHUB_TOKEN".to_string()]);
        let env = b"PATH=/opt/bin:/usr/bin\0OPENAI_API_KEY=sk-secret\0GITHUB_TOKEN=ghp_x\0PWD=/x\0QUOTE=it's\0MULTI=a\nb\0BASH_FUNC_f%%=() { :; }\0";
        let text = render(
            env,
            "f () \n{ \n    :\n}\nalias ll='ls -l'\nshopt -u extglob\nshopt -s nullglob\nshopt -u globstar\n",
            &policy,
        );
        assert!(
            text.contains("__procd_set PATH '/opt/bin:/usr/bin'\n"),
            "{text}"
        );
        assert!(text.contains(r"__procd_set QUOTE 'it'\''s'"), "{text}");
        assert!(text.contains("__procd_set MULTI 'a\nb'"), "{text}");
        assert!(
            !text.contains("sk-secret") && !text.contains("ghp_x"),
            "{text}"
        );
        assert!(
            !text.contains("PWD") && !text.contains("BASH_FUNC"),
            "{text}"
        );
        assert!(text.contains("alias ll='ls -l'\n"));
        assert!(
            text.contains("shopt -s nullglob 2>/dev/null\nshopt -u extglob globstar 2>/dev/null\n"),
            "one shopt per flag: {text}"
        );
        assert!(text.ends_with("shopt -s expand_aliases\n"));
    }
}
