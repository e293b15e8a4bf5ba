//! A session's sandbox as the kernel enforces it (docs/SECURITY.md): a
//! Landlock ruleset for the file system and TCP, a seccomp filter for the
//! socket families Landlock does not cover (unless `network: "all"`), and
//! `no_new_privs`. Both are made here, by the daemon, before the clone;
//! the child only hands them to the kernel (`spawn.rs`), so it stays raw
//! syscalls, and every process the command starts inherits them.

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// What a sandbox lets the command touch.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// Where it may read and execute; None: everywhere.
    pub readable: Option<Vec<PathBuf>>,
    /// Where it may also write, create and remove (directories or files).
    pub writable: Vec<PathBuf>,
    pub network: Network,
    /// The session's own terminal (its PTY's slave): the one entry of
    /// `/dev/pts` it may open. Another session's would let it write into
    /// that session's output, and (as root) TIOCSTI into its input.
    pub terminal: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Network {
    All,
    /// No TCP (Landlock), no `socket` of any family and no `socketpair`
    /// but AF_UNIX's (seccomp).
    None,
    /// TCP connect and bind to these ports only (Landlock); UDP not
    /// restricted (a name lookup needs it); no `socket` of another family
    /// and no `socketpair` but AF_UNIX's (seccomp).
    Ports {
        connect: Vec<u16>,
        bind: Vec<u16>,
    },
}

/// Why a sandbox cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel lacks what it needs (the spawn is -32002).
    #[error("{0}")]
    Missing(String),
    /// A path in it cannot be opened.
    #[error("{0}")]
    Path(String),
    #[error("{0}")]
    Other(String),
}

/// Devices every sandboxed command may write (a shell redirects to
/// /dev/null; a terminal program opens /dev/tty, which is its own
/// terminal or none), where they exist.
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// A sandbox ready for the child: the ruleset's descriptor and the filter.
pub struct Enforcement {
    ruleset: OwnedFd,
    filter: Option<seccompiler::BpfProgram>,
}

impl Enforcement {
    pub(crate) fn ruleset(&self) -> RawFd {
        self.ruleset.as_raw_fd()
    }

    /// The filter as the kernel takes it (`sock_fprog`'s length and
    /// instructions); seccompiler's `sock_filter` is the kernel's layout.
    pub(crate) fn filter(&self) -> Option<(u16, *const libc::sock_filter)> {
        let program = self.filter.as_ref()?;
        Some((program.len() as u16, program.as_ptr().cast()))
    }
}

/// The Landlock ABI of the running kernel (0: none). A debug build takes
/// `PROCD_TEST_LANDLOCK_ABI` instead, the suite's way to be a kernel that
/// lacks a feature.
pub fn landlock_abi() -> i32 {
    #[cfg(debug_assertions)]
    if let Some(abi) = std::env::var("PROCD_TEST_LANDLOCK_ABI")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return abi;
    }
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // reads nothing and returns the ABI version (or -1 with ENOSYS or
    // EOPNOTSUPP); no memory is passed.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    v.max(0) as i32
}

/// What `rules` needs of the kernel, or what is missing (checked before
/// anything starts).
pub fn check(rules: &Rules) -> Result<(), SandboxError> {
    kernel_has(rules, landlock_abi())?;
    for path in rules.writable.iter().chain(rules.readable.iter().flatten()) {
        if let Err(e) = std::fs::metadata(path) {
            return Err(SandboxError::Path(format!("{}: {e}", path.display())));
        }
    }
    Ok(())
}

/// Whether a kernel of Landlock ABI `abi` can enforce `rules`.
fn kernel_has(rules: &Rules, abi: i32) -> Result<(), SandboxError> {
    if abi < 1 {
        return Err(SandboxError::Missing(
            "Landlock is needed for a sandbox; this kernel has none (or it is not enabled)".into(),
        ));
    }
    if rules.network != Network::All && abi < 4 {
        return Err(SandboxError::Missing(format!(
            "Landlock ABI 4 needed for network rules, kernel has {abi}"
        )));
    }
    Ok(())
}

/// Makes the ruleset and the filter for `rules`.
/// The paths were checked when the plan was (`check`); one gone since
/// fails its open below, with the same kind of error.
pub fn prepare(rules: &Rules) -> Result<Enforcement, SandboxError> {
    let ruleset: Option<OwnedFd> = ruleset(rules)?.into();
    let ruleset = ruleset.ok_or_else(|| SandboxError::Missing("Landlock ruleset".into()))?;
    let filter = match rules.network {
        Network::All => None,
        Network::None => Some(socket_filter(&[])?),
        Network::Ports { .. } => Some(socket_filter(&[libc::AF_INET, libc::AF_INET6])?),
    };
    Ok(Enforcement { ruleset, filter })
}

/// Confines the calling thread, and only it (a Landlock domain is a
/// thread's), to `rules`' file system access, for file work done in this
/// process on a caller's behalf (`procd exec-server`'s `fs/*` calls under
/// a Codex sandbox). It cannot be undone: the thread must be one made for
/// that work, ended after it. It gets no_new_privs, as Landlock requires.
/// No seccomp filter: the work makes no socket.
pub fn confine_this_thread(rules: &Rules) -> Result<(), SandboxError> {
    let landlock = |e: landlock::RulesetError| SandboxError::Other(format!("Landlock: {e}"));
    // HardRequirement: anything the kernel cannot give fails here.
    ruleset(rules)?.restrict_self().map_err(landlock)?;
    Ok(())
}

/// The Landlock ruleset for `rules` (file system, and TCP unless
/// `network: "all"`).
fn ruleset(rules: &Rules) -> Result<landlock::RulesetCreated, SandboxError> {
    let kernel_abi = landlock_abi();
    kernel_has(rules, kernel_abi)?;
    let abi = ABI::from(kernel_abi);
    let fs_all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let file = AccessFs::from_file(abi) & !AccessFs::Execute;
    let landlock = |e: landlock::RulesetError| SandboxError::Other(format!("Landlock: {e}"));
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(fs_all)
        .map_err(landlock)?;
    if rules.network != Network::All {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(landlock)?;
    }
    let scopes = scopes(kernel_abi);
    if !scopes.is_empty() {
        ruleset = ruleset.scope(scopes).map_err(landlock)?;
    }
    let mut created = ruleset.create().map_err(landlock)?;
    let open = |path: &std::path::Path| {
        PathFd::new(path).map_err(|e| SandboxError::Path(format!("{}: {e}", path.display())))
    };
    let beneath = |path: &std::path::Path, access| -> Result<_, SandboxError> {
        // A file takes only the rights a file has.
        let access = match path.is_dir() {
            true => access,
            false => access & AccessFs::from_file(abi),
        };
        Ok(PathBeneath::new(open(path)?, access))
    };
    match &rules.readable {
        None => {
            created = created
                .add_rule(beneath("/".as_ref(), read)?)
                .map_err(landlock)?
        }
        Some(paths) => {
            for path in paths {
                created = created.add_rule(beneath(path, read)?).map_err(landlock)?;
            }
        }
    }
    for path in &rules.writable {
        created = created.add_rule(beneath(path, fs_all)?).map_err(landlock)?;
    }
    for device in DEVICES.iter().map(std::path::Path::new) {
        if device.exists() {
            created = created.add_rule(beneath(device, file)?).map_err(landlock)?;
        }
    }
    if let Some(terminal) = &rules.terminal {
        created = created
            .add_rule(beneath(terminal, file)?)
            .map_err(landlock)?;
    }
    if let Network::Ports { connect, bind } = &rules.network {
        for port in connect {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                .map_err(landlock)?;
        }
        for port in bind {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::BindTcp))
                .map_err(landlock)?;
        }
    }
    Ok(created)
}

/// What the domain is scoped to, where the kernel can (Landlock ABI 6):
/// no signal to a process outside the session, whatever the rules. An
/// older kernel does not give it; the spec's sandbox does not need it, so
/// the spawn is not refused for it (docs/SECURITY.md says so). Abstract
/// unix sockets are not scoped: unless `network: "all"` no unix socket
/// can be made at all (`socket_filter`), and "all" keeps them.
fn scopes(abi: i32) -> BitFlags<Scope> {
    if abi < 6 {
        return BitFlags::empty();
    }
    Scope::Signal.into()
}

/// Unless `network: "all"`: `socket` fails with EACCES for every family
/// but `allowed` (none under `network: none`; under port rules IPv4 and
/// IPv6, whose TCP Landlock checks). Refused are raw, netlink, … which
/// Landlock does not see, and AF_UNIX: a connect to a socket's path is
/// not checked by Landlock, and the D-Bus session bus, the user's
/// systemd, an agent's or docker's socket listen on one. `socketpair` of
/// any family but AF_UNIX fails too (a connected pair reaches nothing
/// outside), and so does `io_uring_setup` (its requests would bypass
/// this filter).
fn socket_filter(allowed: &[libc::c_int]) -> Result<seccompiler::BpfProgram, SandboxError> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    let seccomp = |e: seccompiler::BackendError| SandboxError::Other(format!("seccomp: {e}"));
    // A rule matches (and the call is refused) when the family is none
    // of `families`; no families: every call is refused.
    let family_not_in = |families: &[libc::c_int]| -> Result<Vec<SeccompRule>, SandboxError> {
        if families.is_empty() {
            return Ok(Vec::new());
        }
        let conditions = families
            .iter()
            .map(|&family| {
                SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, family as u64)
                    .map_err(seccomp)
            })
            .collect::<Result<_, _>>()?;
        Ok(vec![SeccompRule::new(conditions).map_err(seccomp)?])
    };
    let rules = [
        (libc::SYS_socket, family_not_in(allowed)?),
        (libc::SYS_socketpair, family_not_in(&[libc::AF_UNIX])?),
        (libc::SYS_io_uring_setup, Vec::new()),
    ]
    .into_iter()
    .collect();
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| seccomp(e))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(seccomp)?;
    filter.try_into().map_err(seccomp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_is_named_before_anything_is_made() {
        let rules = Rules {
            readable: None,
            writable: vec!["/no/such/dir".into()],
            network: Network::All,
            terminal: None,
        };
        let err = check(&rules)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("/no/such/dir"), "{err}");
    }

    #[test]
    fn the_socket_filters_compile() {
        for allowed in [&[][..], &[libc::AF_INET, libc::AF_INET6]] {
            let program = socket_filter(allowed).expect("filter");
            assert!(!program.is_empty());
        }
    }
}
