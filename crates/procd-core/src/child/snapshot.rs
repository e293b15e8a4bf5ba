//! The shell snapshot (docs/operations.md): what the user's login and rc scripts set
//! up — exported variables (filtered by the environment policy like the
//! daemon's own), functions, aliases and shell options — captured once by
//! running the login shell, written to a 0600 file in the state dir, and
//! sourced by every session's non-interactive `bash -c` before its command.
//! A spawn then costs a `bash -c`, not a login: the scripts run once, and
//! again only when one of them (or HOME, or the shell) changes.
//!
//! What a session's shell would spend time on is left out of what it
//! sources: the exported variables go into its environment at exec (the
//! daemon keeps them in memory), and only the shell options that differ
//! from a plain `bash -c`'s are set. A snapshot with no functions, aliases
//! or such options is not sourced at all, and one of functions and
//! aliases only is not sourced for a command that cannot reach them
//! (`reach.rs`).
//!
//! Capturing runs the shell through the reaper (the daemon reaps every
//! child; `Command::output` would race it), off the event loop, with a
//! timeout; it writes what it captured into files the daemon created and
//! reads back. A failure is reported (`faults`) and the caller falls back
//! to the configured `-lic` launch.

use crate::child::env::EnvPolicy;
use crate::identity::ProcessIdentity;
use crate::procfs::ProcFs;
use crate::tree::reaper::{ChildExit, Reaper};
use procd_sys::inotify::ClosedOffTheLoop;
use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

mod reach;

/// The snapshot file's name in the state dir: what a session sources.
pub const FILE_NAME: &str = "shell-snapshot.sh";
/// Beside it, the variables the scripts exported (NUL-separated
/// `NAME=value`, as /proc/<pid>/environ), for a person to read: sessions
/// get them from the daemon, not from this file.
pub const ENV_FILE_NAME: &str = "shell-snapshot.env";
/// Set in the capturing shell's environment (scripts may test for it).
pub const CAPTURE_VAR: &str = "PROCD_SHELL_SNAPSHOT";
/// Set in a session's environment while the snapshot is sourced, when it
/// sets variables itself (`SHELL_VARS`): the variables it names keep the
/// session's values (the caller's `env`, the marker, …) instead of the
/// ones the scripts exported.
pub const KEEP_VAR: &str = "PROCD_KEEP";

/// Variables bash reads as it starts (BASH_ENV is sourced, SHELLOPTS sets
/// options, …): given at exec they would act before the command, which an
/// export from the scripts never did. The snapshot exports these itself.
fn is_shell_var(name: &str) -> bool {
    name.starts_with("BASH")
        || [
            "ENV",
            "SHELLOPTS",
            "IFS",
            "POSIXLY_CORRECT",
            "GLOBIGNORE",
            "PS4",
        ]
        .contains(&name)
}

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
/// `$2` the functions, aliases and shell options, `$3` the options a plain
/// `bash -c` of the same shell starts with (what a session's shell has
/// before it sources anything).
const CAPTURE: &str = r#"env -0 > "$1" && { declare -f; alias -p; shopt -p; } > "$2" && env -i "$BASH" -c 'shopt -p' > "$3""#;

/// A file as it was: modified (s, ns), size, inode; None when absent.
type Stamp = Option<(i64, i64, u64, u64)>;

/// What a snapshot was made from: each source's stamp and the shell's
/// (HOME is fixed for the daemon's life).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint(Vec<(PathBuf, Stamp)>);

impl Fingerprint {
    fn of(sources: &[PathBuf]) -> Fingerprint {
        let stamp = |p: &Path| -> Stamp {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.mtime(), m.mtime_nsec(), m.len(), m.ino()))
        };
        Fingerprint(sources.iter().map(|p| (p.clone(), stamp(p))).collect())
    }
}

/// A snapshot as sessions use it.
#[derive(Debug)]
pub struct Snapshot {
    /// The variables the scripts exported (filtered), for the session's
    /// environment at exec.
    pub vars: Vec<(String, String)>,
    /// The file to source first, when there is something to run in it
    /// (`script_for` says for which commands).
    pub script: Option<PathBuf>,
    /// The names its functions and aliases define, unless every command
    /// needs it.
    names: reach::Names,
    /// Whether it sets variables itself (`is_shell_var`), so that the
    /// session's `KEEP_VAR` must name what it keeps.
    pub sets_vars: bool,
}

impl Snapshot {
    /// The file `command`'s shell sources first: none when the snapshot
    /// runs nothing, or only defines functions and aliases the command
    /// cannot reach (`reach`). A function exported in its environment
    /// `env` may call them under names the command does not show.
    pub fn script_for(
        &self,
        command: &str,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Option<&Path> {
        let script = self.script.as_deref()?;
        let exported_functions = env.keys().any(|k| k.starts_with("BASH_FUNC_"));
        (exported_functions || self.names.reached_by(command)).then_some(script)
    }
}

enum State {
    Unknown,
    Ready(Fingerprint, Arc<Snapshot>),
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
    /// What a snapshot is made from: the login scripts and the shell.
    sources: Vec<PathBuf>,
    /// Says when a source may have changed, so that a spawn looks at
    /// them only then.
    watch: SourcesWatch,
}

/// Whether the snapshot's sources (or the file itself) may have changed
/// since they were last looked at: inotify on the directories they are in,
/// by name, so that a spawn stats none of them while nothing changed. The
/// kernel queues an event as the change is made, and the queue is read at
/// each look (no reader task that could lag behind a spawn). Without
/// inotify (or after a read fails) every spawn looks, as before.
struct SourcesWatch {
    /// The watched files: the sources and the snapshot file.
    files: Vec<PathBuf>,
    /// The inotify descriptor and the file names each watch is for; None
    /// when there is no watch.
    watch: std::sync::Mutex<Option<Watch>>,
}

/// Its instance is closed off the event loop, however it ends (made
/// again, a failed read, a failed start): the close waits for the
/// kernel's grace period.
struct Watch {
    fd: ClosedOffTheLoop,
    names: std::collections::HashMap<i32, Vec<std::ffi::OsString>>,
}

impl SourcesWatch {
    fn new(files: Vec<PathBuf>) -> SourcesWatch {
        let watch = Watch::start(&files)
            .inspect_err(|e| {
                tracing::warn!(error = %e, "cannot watch the login scripts; every spawn looks at them")
            })
            .ok();
        SourcesWatch {
            files,
            watch: std::sync::Mutex::new(watch),
        }
    }

    /// True when the watch runs and saw no change to its files since the
    /// last call.
    fn unchanged(&self) -> bool {
        use rustix::fs::inotify::{self, ReadFlags};
        use std::os::unix::ffi::OsStrExt;
        let mut watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        let Some(w) = watch.as_ref() else {
            return false;
        };
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut events = inotify::Reader::new(&w.fd, &mut buf);
        let mut changed = false;
        loop {
            match events.next() {
                Ok(e) => {
                    let named = e.file_name().is_some_and(|n| {
                        let n = std::ffi::OsStr::from_bytes(n.to_bytes());
                        w.names
                            .get(&e.wd())
                            .is_some_and(|all| all.iter().any(|f| f == n))
                    });
                    // A watched directory's own end, or events lost.
                    changed |= named
                        || e.file_name().is_none()
                        || e.events().contains(ReadFlags::QUEUE_OVERFLOW);
                }
                Err(rustix::io::Errno::AGAIN) if changed => {
                    // Made again: a source that is a symlink may point
                    // elsewhere now.
                    *watch = Watch::start(&self.files).ok();
                    return false;
                }
                Err(rustix::io::Errno::AGAIN) => return true,
                Err(_) => {
                    *watch = None;
                    return false;
                }
            }
        }
    }
}

impl Watch {
    fn start(files: &[PathBuf]) -> std::io::Result<Watch> {
        use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
        let fd =
            ClosedOffTheLoop::new(inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?);
        let flags = WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MODIFY
            | WatchFlags::ATTRIB
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF;
        let mut names: std::collections::HashMap<i32, Vec<std::ffi::OsString>> = Default::default();
        // A source that is a symlink (dotfiles kept elsewhere) changes
        // where it points: watched there too.
        let targets = files
            .iter()
            .filter_map(|f| std::fs::canonicalize(f).ok().filter(|t| t != f));
        for file in files.iter().cloned().chain(targets) {
            let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
                continue;
            };
            // A directory that does not exist cannot hold a source yet,
            // but could appear: then there is no watch at all.
            let wd = inotify::add_watch(&fd, dir, flags)?;
            names.entry(wd).or_default().push(name.to_owned());
        }
        Ok(Watch { fd, names })
    }
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
                !login.policy.is_blocked(k) && !k.starts_with(crate::child::env::FORCE_PREFIX)
            })
            .collect();
        // The login scripts a bash login shell reads, and the shell itself.
        let sources: Vec<PathBuf> = SOURCES
            .iter()
            .map(|s| login.home.join(s))
            .chain([login.shell.clone()])
            .collect();
        let path = state_dir.join(FILE_NAME);
        ShellSnapshot {
            shell: login.shell,
            home: login.home,
            env,
            policy: login.policy,
            timeout,
            reaper,
            procfs,
            state: tokio::sync::Mutex::new(State::Unknown),
            watch: SourcesWatch::new(sources.iter().cloned().chain([path.clone()]).collect()),
            sources,
            path,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The snapshot, made or remade first when its sources changed.
    /// Concurrent callers wait for one capture.
    pub async fn current(&self) -> Result<Arc<Snapshot>, String> {
        let mut state = self.state.lock().await;
        if self.watch.unchanged() {
            match &*state {
                State::Ready(_, snapshot) => return Ok(snapshot.clone()),
                State::Failed(_, e) => return Err(e.clone()),
                State::Unknown => {}
            }
        }
        let (sources, path) = (self.sources.clone(), self.path.clone());
        let (now, present) =
            tokio::task::spawn_blocking(move || (Fingerprint::of(&sources), path.is_file()))
                .await
                .map_err(|e| e.to_string())?;
        match &*state {
            State::Ready(f, snapshot) if *f == now && present => return Ok(snapshot.clone()),
            State::Failed(f, e) if *f == now => return Err(e.clone()),
            _ => {}
        }
        match self.capture().await {
            Ok(snapshot) => {
                let snapshot = Arc::new(snapshot);
                *state = State::Ready(now, snapshot.clone());
                Ok(snapshot)
            }
            Err(e) => {
                *state = State::Failed(now, e.clone());
                Err(e)
            }
        }
    }

    async fn capture(&self) -> Result<Snapshot, String> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let env_file = Scratch::create(dir, "env")
            .map_err(|e| format!("cannot create a scratch file: {e}"))?;
        let defs_file = Scratch::create(dir, "defs")
            .map_err(|e| format!("cannot create a scratch file: {e}"))?;
        let defaults_file = Scratch::create(dir, "defaults")
            .map_err(|e| format!("cannot create a scratch file: {e}"))?;
        let mut cmd = Command::new(&self.shell);
        cmd.args(["-lic", CAPTURE, "procd-snapshot"])
            .arg(&env_file.0)
            .arg(&defs_file.0)
            .arg(&defaults_file.0)
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
        let exit = self.wait_capture(root, exit).await?;
        if exit != ChildExit::Code(0) {
            return Err(format!(
                "`{} -lic` failed ({exit:?}) while capturing the login environment",
                self.shell.display()
            ));
        }
        let (env_path, defs_path, defaults_path, path) = (
            env_file.0.clone(),
            defs_file.0.clone(),
            defaults_file.0.clone(),
            self.path.clone(),
        );
        let policy = self.policy.clone();
        tokio::task::spawn_blocking(move || {
            write_snapshot([&env_path, &defs_path, &defaults_path], path, &policy)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e: std::io::Error| format!("cannot write {}: {e}", self.path.display()))
    }

    /// The capturing shell's exit, or why there is none: a shell still
    /// running after the timeout is killed with its whole group.
    async fn wait_capture(
        &self,
        root: ProcessIdentity,
        exit: tokio::sync::oneshot::Receiver<ChildExit>,
    ) -> Result<ChildExit, String> {
        match tokio::time::timeout(self.timeout, exit).await {
            Ok(Ok(exit)) => Ok(exit),
            Ok(Err(_)) => Err("the capturing shell was lost".into()),
            Err(_) => {
                // Its whole group: the scripts may have started more.
                let tree = crate::tree::kill::TreeSpec {
                    root,
                    pgid: root.pid,
                    marker: Vec::new(),
                    root_pinned: true,
                    adopted: Vec::new(),
                    cgroup: None,
                };
                crate::tree::kill::terminate(
                    &tree,
                    &self.procfs,
                    true,
                    libc::SIGKILL,
                    Duration::ZERO,
                )
                .await;
                Err(format!(
                    "`{} -lic` did not finish within {:?} (a login script waits or hangs)",
                    self.shell.display(),
                    self.timeout
                ))
            }
        }
    }
}

/// Reads the capture's three files, renders them, and writes the snapshot
/// and its variables (blocking).
fn write_snapshot(
    [env, defs, defaults]: [&Path; 3],
    path: PathBuf,
    policy: &EnvPolicy,
) -> std::io::Result<Snapshot> {
    let env = crate::atomic::read_private(env)?;
    let defs = crate::atomic::read_private(defs)?;
    let defaults = crate::atomic::read_private(defaults)?;
    let rendered = render(
        &env,
        &String::from_utf8_lossy(&defs),
        &String::from_utf8_lossy(&defaults),
        policy,
    );
    let mut listed = Vec::new();
    for (name, value) in &rendered.vars {
        listed.extend_from_slice(format!("{name}={value}\0").as_bytes());
    }
    crate::atomic::write_bytes(&path.with_file_name(ENV_FILE_NAME), &listed)?;
    crate::atomic::write_bytes(&path, rendered.text.as_bytes())?;
    Ok(Snapshot {
        vars: rendered.vars,
        script: rendered.runs.then_some(path),
        names: rendered.names,
        sets_vars: rendered.sets_vars,
    })
}

/// What a capture gives: the variables for the environment, and the text
/// of the file sessions source.
struct Rendered {
    vars: Vec<(String, String)>,
    text: String,
    /// Whether the text does anything (else it is not sourced).
    runs: bool,
    /// What it defines, for `Snapshot::script_for`.
    names: reach::Names,
    sets_vars: bool,
}

/// The capture's output made into a snapshot: `env` as `env -0` wrote it,
/// `defs` the functions, aliases and `shopt -p` of the login shell,
/// `defaults` the `shopt -p` of a plain `bash -c`.
fn render(env: &[u8], defs: &str, defaults: &str, policy: &EnvPolicy) -> Rendered {
    let (vars, shell_vars) = split_env(env, policy);
    let mut body = String::new();
    let sets_vars = !shell_vars.is_empty();
    if sets_vars {
        body.push_str("__procd_set() { case \" ${PROCD_KEEP-} \" in *\" $1 \"*) ;; *) export \"$1=$2\" ;; esac; }\n");
        body.push_str(&shell_vars);
        body.push_str("unset -f __procd_set; unset PROCD_KEEP\n");
    }
    let mut names = reach::Names::new();
    if sets_vars {
        names.every();
    }
    let (aliases, expand_aliases) = push_defs(&mut body, defs, defaults, &mut names);
    if aliases && expand_aliases {
        // Aliases are expanded in the command (sourced on its own line first).
        body.push_str("shopt -s expand_aliases\n");
    }
    let runs = !body.is_empty();
    let mut text = String::from(
        "# procd shell snapshot (docs/operations.md): what the login scripts set up, sourced by\n\
         # every session before its command (their exported variables are in\n\
         # shell-snapshot.env and reach sessions at exec). Remade when they change; never edit.\n",
    );
    if !runs {
        text.push_str("# Nothing to run: sessions do not source it.\n");
    }
    text.push_str(&body);
    Rendered {
        vars,
        text,
        runs,
        names,
        sets_vars,
    }
}

/// `env -0`'s entries a session may get: the variables for its
/// environment, and the shell's own (`is_shell_var`) as `__procd_set`
/// lines of the snapshot.
fn split_env(env: &[u8], policy: &EnvPolicy) -> (Vec<(String, String)>, String) {
    let mut vars = Vec::new();
    let mut shell_vars = String::new();
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
        if is_shell_var(name) {
            shell_vars.push_str(&format!("__procd_set {name} {}\n", quote(value)));
        } else {
            vars.push((name.to_string(), value.to_string()));
        }
    }
    (vars, shell_vars)
}

/// Appends `defs` to `body`: functions and aliases as they are, `shopt -p`
/// lines that differ from a plain `bash -c` (`defaults`) as runs of `shopt
/// -s`/`-u`, noting in `names` what they define (an option acts on every
/// command). Returns whether there were aliases and whether the login
/// shell expanded them.
fn push_defs(
    body: &mut String,
    defs: &str,
    defaults: &str,
    names: &mut reach::Names,
) -> (bool, bool) {
    let defaults: BTreeSet<&str> = defaults.lines().collect();
    // `shopt -p` lines that differ from a plain `bash -c`, a run of them as
    // one `shopt -s` and one `shopt -u` made quiet: some options cannot be
    // set in a non-interactive shell (login_shell), which is not an error,
    // and shopt goes on past one. One redirection per run, not per option:
    // each costs the session's shell five syscalls.
    let mut options: [Vec<&str>; 2] = [Vec::new(), Vec::new()];
    let flush = |out: &mut String, options: &mut [Vec<&str>; 2]| {
        for (flag, run) in ["-s", "-u"].iter().zip(options.iter_mut()) {
            if !run.is_empty() {
                out.push_str(&format!("shopt {flag} {} 2>/dev/null\n", run.join(" ")));
                run.clear();
            }
        }
    };
    let (mut aliases, mut expand_aliases) = (false, false);
    for line in defs.lines() {
        let option = match line.split_once(' ') {
            Some(("shopt", rest)) => rest
                .split_once(' ')
                .filter(|(flag, name)| matches!(*flag, "-s" | "-u") && !name.contains(' ')),
            _ => None,
        };
        match option {
            // Set only where there are aliases to expand (below); and a
            // login shell's mark, which no shell can set.
            Some((flag, "expand_aliases")) => expand_aliases = flag == "-s",
            Some((_, "login_shell")) => {}
            Some(_) if defaults.contains(line) => {}
            Some((flag, name)) => {
                names.every();
                options[usize::from(flag == "-u")].push(name)
            }
            None => {
                aliases |= line.starts_with("alias ");
                names.note(line);
                flush(body, &mut options);
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    flush(body, &mut options);
    (aliases, expand_aliases)
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
    fn the_snapshot_filters_credentials_and_keeps_the_rest() {
        let policy = EnvPolicy::new(&["GITHUB_TOKEN".to_string()]);
        let env = b"PATH=/opt/bin:/usr/bin\0OPENAI_API_KEY=sk-secret\0GITHUB_TOKEN=ghp_x\0PWD=/x\0QUOTE=it's\0MULTI=a\nb\0BASH_FUNC_f%%=() { :; }\0BASH_ENV=/x/env.sh\0";
        let defaults = "shopt -u extglob\nshopt -u nullglob\nshopt -s globstar\nshopt -s cmdhist\n";
        let r = render(
            env,
            "f () \n{ \n    :\n}\nalias ll='ls -l'\nshopt -u extglob\nshopt -s expand_aliases\nshopt -s login_shell\nshopt -s nullglob\nshopt -u globstar\nshopt -s cmdhist\n",
            defaults,
            &policy,
        );
        let var = |name: &str| {
            r.vars
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(var("PATH"), Some("/opt/bin:/usr/bin"));
        assert_eq!(var("QUOTE"), Some("it's"));
        assert_eq!(var("MULTI"), Some("a\nb"));
        for gone in [
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "PWD",
            "BASH_FUNC_f%%",
            "BASH_ENV",
        ] {
            assert_eq!(var(gone), None, "{gone}: {:?}", r.vars);
        }
        let text = &r.text;
        assert!(
            !text.contains("sk-secret") && !text.contains("ghp_x"),
            "{text}"
        );
        assert!(
            !text.contains("PATH") && !text.contains("BASH_FUNC"),
            "{text}"
        );
        // A variable bash reads at start is exported by the file, after.
        assert!(
            text.contains("__procd_set BASH_ENV '/x/env.sh'\n"),
            "{text}"
        );
        assert!(r.sets_vars && r.runs);
        assert!(text.contains("alias ll='ls -l'\n"));
        // Only what differs from a plain `bash -c`, one shopt per flag.
        assert!(
            text.contains("shopt -s nullglob 2>/dev/null\nshopt -u globstar 2>/dev/null\n"),
            "{text}"
        );
        assert!(
            !text.contains("extglob") && !text.contains("cmdhist"),
            "{text}"
        );
        assert!(text.ends_with("shopt -s expand_aliases\n"));
    }

    /// Functions and aliases are sourced for the commands that may reach
    /// them; an option or a variable the file sets, for every command.
    #[test]
    fn what_the_file_sets_decides_which_commands_source_it() {
        let policy = EnvPolicy::new(&[]);
        let defaults = "shopt -u extglob\n";
        let defs = "f () \n{ \n    :\n}\nalias ll='ls -l'\n";
        let r = render(b"PLAIN=1\0", defs, defaults, &policy);
        assert!(r.runs);
        assert!(!r.names.reached_by("true") && r.names.reached_by("f; ll"));
        let with_option = format!("{defs}shopt -s extglob\n");
        let r = render(b"PLAIN=1\0", &with_option, defaults, &policy);
        assert!(r.names.reached_by("true"));
        let r = render(b"BASH_ENV=/x\0", defs, defaults, &policy);
        assert!(r.names.reached_by("true"));
    }

    #[test]
    fn a_snapshot_of_only_variables_and_default_options_is_not_sourced() {
        let policy = EnvPolicy::new(&[]);
        let r = render(
            b"PLAIN=1\0",
            "shopt -u extglob\nshopt -s cmdhist\nshopt -s expand_aliases\nshopt -s login_shell\n",
            "shopt -u extglob\nshopt -s cmdhist\nshopt -u expand_aliases\nshopt -u login_shell\n",
            &policy,
        );
        assert_eq!(r.vars, vec![("PLAIN".to_string(), "1".to_string())]);
        assert!(!r.runs && !r.sets_vars, "{}", r.text);
        assert!(
            !r.text.contains("shopt") && !r.text.contains("PLAIN"),
            "{}",
            r.text
        );
    }
}
