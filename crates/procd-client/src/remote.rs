//! Reaching a daemon on another machine (docs/remote.md): through a
//! command whose stdin and stdout reach a `procd dial-stdio` there — the
//! system's OpenSSH client for `ssh://`, or any command (`kubectl exec -i
//! POD -- procd dial-stdio`) — or through another socket (`unix://`).
//! `docker://` and `kubectl://` name a sandbox (a container, a pod) and
//! wrap `docker exec -i` and `kubectl exec -i` (docs/cluster.md).
//! procd never listens on a network port: the transport authenticates.

use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use tokio::io::AsyncReadExt;

/// Where `--host` says procd is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// `unix:///path`: a daemon's socket on this machine.
    Unix(PathBuf),
    /// `ssh://[user@]host[:port]`.
    Ssh {
        user: Option<String>,
        host: String,
        port: Option<u16>,
    },
    /// `--connect 'CMD'`: a shell command whose stdio reaches a
    /// `procd dial-stdio`.
    Command(String),
    /// `docker://CONTAINER`: `docker exec -i CONTAINER procd dial-stdio`
    /// (`PROCD_DOCKER` replaces `docker`, e.g. with `-H` for one node).
    Docker { container: String },
    /// `kubectl://[NS/]POD[/CONTAINER]`: `kubectl exec -i` into the pod
    /// (`PROCD_KUBECTL` replaces `kubectl`).
    Kubectl {
        namespace: Option<String>,
        pod: String,
        container: Option<String>,
    },
}

/// Whether `name` can be given to docker or kubectl as one argument: a
/// container, pod or namespace name (letters, digits, `_.-`), never one
/// that reads as an option.
fn sandbox_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && !name.starts_with(['-', '.'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

impl Host {
    /// Reads a `--host` URL.
    pub fn parse(url: &str) -> Result<Host, String> {
        if let Some(path) = url.strip_prefix("unix://") {
            return match path.starts_with('/') {
                true => Ok(Host::Unix(PathBuf::from(path))),
                false => Err(format!(
                    "{url}: a unix:// URL names an absolute path (unix:///run/…)"
                )),
            };
        }
        if let Some(name) = url.strip_prefix("docker://") {
            return match sandbox_name(name) {
                true => Ok(Host::Docker {
                    container: name.to_string(),
                }),
                false => Err(format!("{url}: not a container name docker can be given")),
            };
        }
        if let Some(path) = url.strip_prefix("kubectl://") {
            let parts: Vec<&str> = path.split('/').collect();
            if !parts.iter().all(|p| sandbox_name(p)) {
                return Err(format!("{url}: not a pod kubectl can be given"));
            }
            let owned = |s: &&str| s.to_string();
            return match parts.as_slice() {
                [pod] => Ok((None, pod, None)),
                [ns, pod] => Ok((Some(ns), pod, None)),
                [ns, pod, c] => Ok((Some(ns), pod, Some(c))),
                _ => Err(format!(
                    "{url}: kubectl:// takes [NAMESPACE/]POD[/CONTAINER]"
                )),
            }
            .map(|(namespace, pod, container)| Host::Kubectl {
                namespace: namespace.map(owned),
                pod: owned(pod),
                container: container.map(owned),
            });
        }
        let Some(rest) = url.strip_prefix("ssh://") else {
            return Err(format!(
                "{url}: --host takes ssh://[user@]host[:port], docker://CONTAINER, kubectl://[NS/]POD[/CONTAINER] or unix:///path"
            ));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (user, at) = match rest.rsplit_once('@') {
            Some((user, at)) => (Some(user.to_string()), at),
            None => (None, rest),
        };
        let (host, port) = match at.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') || host.starts_with('[') => {
                let port = port
                    .parse::<u16>()
                    .map_err(|_| format!("{url}: {port:?} is not a port"))?;
                (
                    host.trim_start_matches('[').trim_end_matches(']'),
                    Some(port),
                )
            }
            _ => (at, None),
        };
        // Each part goes to ssh as one argument: none may read as an option.
        let plain = |s: &str| {
            !s.is_empty()
                && !s.starts_with('-')
                && s.bytes()
                    .all(|b| b.is_ascii_graphic() && !b"/@'\"\\`$".contains(&b))
        };
        if !plain(host) || user.as_deref().is_some_and(|u| !plain(u)) {
            return Err(format!("{url}: not a host name ssh can be given"));
        }
        Ok(Host::Ssh {
            user,
            host: host.to_string(),
            port,
        })
    }

    /// How errors name it.
    pub fn describe(&self) -> String {
        match self {
            Host::Unix(path) => format!("unix://{}", path.display()),
            Host::Ssh { host, .. } => host.clone(),
            Host::Command(cmd) => format!("`{cmd}`"),
            Host::Docker { container } => format!("docker://{container}"),
            Host::Kubectl {
                namespace,
                pod,
                container,
            } => {
                let ns = namespace.as_ref().map(|n| format!("{n}/"));
                let c = container.as_ref().map(|c| format!("/{c}"));
                format!(
                    "kubectl://{}{pod}{}",
                    ns.unwrap_or_default(),
                    c.unwrap_or_default()
                )
            }
        }
    }

    /// A sandbox that an orchestrator may remove or replace.
    fn is_sandbox(&self) -> bool {
        matches!(self, Host::Docker { .. } | Host::Kubectl { .. })
    }

    /// The transport command: `ssh … procd dial-stdio` (`PROCD_SSH`, split
    /// as a shell would, replaces `ssh`), or the `--connect` command.
    fn command(&self) -> Option<tokio::process::Command> {
        let mut cmd = tokio::process::Command::new("sh");
        match self {
            Host::Unix(_) => return None,
            Host::Command(line) => {
                cmd.args(["-c", line]);
            }
            Host::Ssh { user, host, port } => {
                let target = match user {
                    Some(user) => format!("{user}@{host}"),
                    None => host.clone(),
                };
                // BatchMode: ssh's prompts would read the protocol's stdin
                // or hang; a refused login is an error to report instead.
                tool(&mut cmd, "PROCD_SSH", "ssh")
                    .args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"])
                    .args(
                        port.map(|p| vec!["-p".to_string(), p.to_string()])
                            .unwrap_or_default(),
                    )
                    .args(["--", &target, "procd", "dial-stdio"]);
            }
            Host::Docker { container } => {
                tool(&mut cmd, "PROCD_DOCKER", "docker").args([
                    "exec",
                    "-i",
                    container,
                    "procd",
                    "dial-stdio",
                ]);
            }
            Host::Kubectl {
                namespace,
                pod,
                container,
            } => {
                tool(&mut cmd, "PROCD_KUBECTL", "kubectl").args(["exec", "-i"]);
                if let Some(ns) = namespace {
                    cmd.args(["-n", ns]);
                }
                cmd.arg(pod);
                if let Some(c) = container {
                    cmd.args(["-c", c]);
                }
                cmd.args(["--", "procd", "dial-stdio"]);
            }
        }
        Some(cmd)
    }
}

/// `sh -c 'exec TOOL "$@"' sh`: the transport's tool, which the variable
/// `var` replaces, split as a shell would (`PROCD_SSH='ssh -F cfg'`); the
/// arguments added after this reach it one by one, never re-split.
fn tool<'a>(
    cmd: &'a mut tokio::process::Command,
    var: &str,
    default: &str,
) -> &'a mut tokio::process::Command {
    let tool = std::env::var(var).unwrap_or_else(|_| default.into());
    cmd.args(["-c", &format!("exec {tool} \"$@\""), "sh"])
}

/// A running transport: the process (kept for the life of the
/// connection; dropping it kills it) and the task collecting what it says
/// on stderr (up to `STDERR_KEPT`), which ends when the process does.
pub(crate) struct Running {
    child: tokio::process::Child,
    stderr: Option<tokio::task::JoinHandle<Vec<u8>>>,
}

impl Running {
    /// Why the connection through it ended, once it has exited (waited
    /// for a moment: its stdout closes just before it does). A sandbox
    /// that is gone says so (`is_gone`).
    pub async fn why_ended(&mut self, host: &Host) -> io::Error {
        let limit = std::time::Duration::from_secs(5);
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .ok()
            .and_then(Result::ok);
        let said = match self.stderr.take() {
            Some(read) => tokio::time::timeout(limit, read)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => Vec::new(),
        };
        explain(host, status, &said)
    }
}

/// Whether connecting failed because the sandbox `--host` names is gone
/// (removed, stopped or replaced by its orchestrator): trying again
/// cannot reach it.
pub fn is_gone(err: &io::Error) -> bool {
    err.get_ref().is_some_and(|e| e.is::<Gone>())
}

/// What `is_gone` recognises: the words of a procd that cannot be reached
/// again (a removed sandbox, another instance where one was).
#[derive(Debug)]
struct Gone(String);

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Gone {}

/// An error `is_gone` recognises.
pub(crate) fn gone(words: String) -> io::Error {
    io::Error::other(Gone(words))
}

/// Refuses a daemon of another protocol: one whose version differs from
/// this procd's in its major number (its minor, before 1.0). `answer` is
/// the daemon's answer to `status`.
pub(crate) fn check_version(host: &Host, answer: &str) -> io::Result<()> {
    let theirs = serde_json::from_str::<serde_json::Value>(answer)
        .ok()
        .and_then(|v| v["result"]["version"].as_str().map(String::from));
    let Some(theirs) = theirs else {
        return Err(io::Error::other(format!(
            "{} answered, but not as procd does: {}",
            host.describe(),
            answer.chars().take(200).collect::<String>()
        )));
    };
    let ours = env!("CARGO_PKG_VERSION");
    if protocol_of(&theirs) != protocol_of(ours) {
        return Err(io::Error::other(format!(
            "the procd on {} is version {theirs}, of another protocol than this one ({ours}): install the same version on both sides",
            host.describe()
        )));
    }
    Ok(())
}

/// The part of a version that names its protocol: "1" of 1.4.2, "0.3" of
/// 0.3.1.
fn protocol_of(version: &str) -> String {
    let mut parts = version.split('.');
    match (parts.next(), parts.next()) {
        (Some("0"), Some(minor)) => format!("0.{minor}"),
        (Some(major), _) => major.to_string(),
        _ => version.to_string(),
    }
}

/// At most this much of a transport's stderr is kept for its error.
const STDERR_KEPT: usize = 16 * 1024;

/// Starts the transport to `host` (`ssh`, or the `--connect` command; a
/// `unix://` host has none): the process, its stdin and its stdout.
pub(crate) fn start(
    host: &Host,
) -> io::Result<(
    Running,
    tokio::process::ChildStdin,
    tokio::process::ChildStdout,
)> {
    let mut cmd = host
        .command()
        .ok_or_else(|| io::Error::other("a unix:// host has no transport"))?;
    let mut child = match cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(io::Error::other(
                "sh is not installed: no transport can run",
            ))
        }
        Err(e) => return Err(e),
    };
    let (Some(stdin), Some(stdout), Some(mut err)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(io::Error::other("the transport's stdio is missing"));
    };
    let stderr = tokio::spawn(async move {
        let (mut kept, mut buf) = (Vec::new(), [0u8; 4096]);
        while let Ok(n @ 1..) = err.read(&mut buf).await {
            let room = STDERR_KEPT.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        kept
    });
    let running = Running {
        child,
        stderr: Some(stderr),
    };
    Ok((running, stdin, stdout))
}

/// What went wrong with a transport that ended (or never answered), in
/// words a person can act on, from its exit status and stderr; `gone`
/// when a sandbox is.
pub(crate) fn explain(
    host: &Host,
    status: Option<std::process::ExitStatus>,
    stderr: &[u8],
) -> io::Error {
    let said = String::from_utf8_lossy(stderr).trim().to_string();
    let has = |needles: &[&str]| needles.iter().any(|n| said.contains(n));
    let procd_missing = has(&["executable file not found"]) && said.contains("procd");
    // docker: "No such container", "Container … is not running"; kubectl:
    // "(NotFound): pods … not found", "container not found".
    if host.is_sandbox()
        && !procd_missing
        && has(&[
            "No such container",
            "is not running",
            "is restarting",
            "NotFound",
            "container not found",
        ])
    {
        return gone(format!(
            "the sandbox {} is gone (its orchestrator removed or replaced it; its sessions are gone with it): {said}",
            host.describe()
        ));
    }
    io::Error::other(explain_words(host, status, &said, procd_missing))
}

/// `explain`'s words for a transport that is not a gone sandbox.
fn explain_words(
    host: &Host,
    status: Option<std::process::ExitStatus>,
    said: &str,
    procd_missing: bool,
) -> String {
    let name = host.describe();
    let is_ssh = matches!(host, Host::Ssh { .. });
    let has = |needles: &[&str]| needles.iter().any(|n| said.contains(n));
    let code = status.and_then(|s| s.code());
    if is_ssh && code == Some(127) && !has(&["procd"]) {
        return format!("ssh is not installed here (or PROCD_SSH names a missing program): {said}");
    }
    if procd_missing
        || has(&["procd: command not found", "procd: not found"])
        || (code == Some(127) && said.contains("procd"))
    {
        return format!("procd is not on {name}'s PATH (install it there): {said}");
    }
    if !is_ssh && code == Some(127) {
        return format!("{name} could not be run: {said}");
    }
    if is_ssh
        && has(&[
            "Permission denied",
            "Too many authentication failures",
            "Host key verification failed",
        ])
    {
        return format!("{name} refused the login: {said}");
    }
    if is_ssh && code == Some(255) {
        return format!("cannot reach {name}: {said}");
    }
    match said.is_empty() {
        true => format!(
            "the connection to {name} closed ({})",
            describe_status(status)
        ),
        false => format!("the connection to {name} closed: {said}"),
    }
}

fn describe_status(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) if s.code().is_some() => format!("exit code {}", s.code().unwrap_or(0)),
        Some(s) => format!("signal {}", s.signal().unwrap_or(0)),
        None => "still running".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_urls_are_read_and_nothing_reads_as_an_option() {
        let ssh = |user: Option<&str>, host: &str, port| Host::Ssh {
            user: user.map(String::from),
            host: host.into(),
            port,
        };
        assert_eq!(Host::parse("ssh://box"), Ok(ssh(None, "box", None)));
        assert_eq!(
            Host::parse("ssh://me@box:2222"),
            Ok(ssh(Some("me"), "box", Some(2222)))
        );
        assert_eq!(
            Host::parse("ssh://[::1]:22"),
            Ok(ssh(None, "::1", Some(22)))
        );
        assert_eq!(
            Host::parse("unix:///run/p.sock"),
            Ok(Host::Unix("/run/p.sock".into()))
        );
        assert_eq!(protocol_of("0.1.0"), protocol_of("0.1.7"));
        assert_ne!(protocol_of("0.1.0"), protocol_of("0.2.0"));
        assert_eq!(protocol_of("2.0.0"), protocol_of("2.5.1"));
        for bad in [
            "box",
            "http://box",
            "ssh://",
            "ssh://-oProxyCommand=x",
            "ssh://-l@box",
            "ssh://box:port",
            "ssh://a b",
            "ssh://box$(x)",
            "unix://relative",
            "docker://",
            "docker://-it",
            "docker://a b",
            "docker://a/b",
            "kubectl://",
            "kubectl://ns//pod",
            "kubectl://a/b/c/d",
            "kubectl://ns/-n",
            "kubectl://pod;rm",
        ] {
            assert!(Host::parse(bad).is_err(), "{bad}");
        }
    }

    /// The argv a sandbox host runs (after `sh -c 'exec $TOOL "$@"' sh`).
    fn argv(url: &str) -> Vec<String> {
        let host = Host::parse(url).expect(url);
        let cmd = host.command().expect("a transport");
        cmd.as_std()
            .get_args()
            .skip(3)
            .map(|a| a.to_string_lossy().to_string())
            .collect()
    }

    #[test]
    fn sandbox_hosts_wrap_docker_and_kubectl_exec() {
        assert_eq!(
            argv("docker://sbx.1.abc"),
            ["exec", "-i", "sbx.1.abc", "procd", "dial-stdio"]
        );
        assert_eq!(
            argv("kubectl://agent-42"),
            ["exec", "-i", "agent-42", "--", "procd", "dial-stdio"]
        );
        assert_eq!(
            argv("kubectl://team/agent-42/procd"),
            [
                "exec",
                "-i",
                "-n",
                "team",
                "agent-42",
                "-c",
                "procd",
                "--",
                "procd",
                "dial-stdio"
            ]
        );
        for url in ["docker://sbx.1.abc", "kubectl://team/agent-42/procd"] {
            assert_eq!(Host::parse(url).expect(url).describe(), url);
        }
    }

    #[test]
    fn a_sandbox_that_is_gone_says_so_and_nothing_else_does() {
        let docker = Host::parse("docker://sbx").expect("docker");
        let pod = Host::parse("kubectl://ns/pod").expect("kubectl");
        for (host, said) in [
            (&docker, "Error: No such container: sbx"),
            (
                &docker,
                "Error response from daemon: Container 3f2a is not running",
            ),
            (&pod, "Error from server (NotFound): pods \"pod\" not found"),
        ] {
            let err = explain(host, None, said.as_bytes());
            assert!(is_gone(&err), "{said}");
            assert!(err.to_string().contains("is gone"), "{err}");
        }
        let missing = "OCI runtime exec failed: exec failed: unable to start container process: exec: \"procd\": executable file not found in $PATH: unknown";
        for (host, said) in [(&docker, missing), (&docker, "permission denied")] {
            assert!(!is_gone(&explain(host, None, said.as_bytes())), "{said}");
        }
        assert!(explain(&docker, None, missing.as_bytes())
            .to_string()
            .contains("procd is not on"));
        // Words like a gone sandbox's from ssh are ssh's own failure.
        let ssh = Host::parse("ssh://box").expect("ssh");
        assert!(!is_gone(&explain(&ssh, None, b"No such container")));
    }
}
