//! Starting a program without copying the daemon.
//!
//! `fork` copies the page tables of a large multi-threaded daemon for a child
//! that only calls exec; std's `Command` forks whenever a `pre_exec` hook is
//! set, and a session needs setsid, a controlling terminal and its cgroups
//! before exec. So this does what glibc's `posix_spawn` does, with the steps
//! a session needs: `clone(CLONE_VM | CLONE_VFORK)` runs the
//! child on a stack of its own in the parent's memory until it execs, the
//! parent's thread suspended meanwhile. The child calls raw syscalls only
//! (no allocation, no lock, nothing that could have been held by another
//! thread of the daemon), in this order:
//!
//! 1. every signal back to its default action (the daemon's handlers are
//!    not the program's; SIGPIPE ignored by Rust's runtime neither);
//! 2. join the session's cgroups (`0` into each `cgroup.procs`: the writer
//!    itself), before anything of the program runs, so nothing it starts
//!    can be outside them. The cgroup2 one is not joined but born into:
//!    on x86_64 the child is made by `clone3(CLONE_INTO_CGROUP)`, because
//!    a write to `cgroup.procs` takes the kernel's global threadgroup
//!    rwsem for writing, which waits an RCU grace period (0.2 to over 1 ms,
//!    the largest part of a spawn). Where clone3 fails (an older kernel, a
//!    seccomp filter, another architecture) the child writes it instead;
//! 3. `setsid`, and for a PTY session `TIOCSCTTY` on its terminal;
//! 4. a descriptor table of its own, then stdio onto fds 0–2 and the
//!    descriptors it inherits onto 3 and up (every other descriptor of the
//!    daemon is close-on-exec). The child is cloned sharing the daemon's
//!    table (`CLONE_FILES`) and takes a private copy of its low end only
//!    (`close_range(CLOSE_RANGE_UNSHARE)`): its sources wait there in
//!    slots reserved for them (`Slots`). A copy of the whole table would
//!    have every file of every session closed again at exec, one by one:
//!    at 2000 sessions (9000 descriptors) that was a fifth of the
//!    daemon's CPU per spawn and 2 ms before the program ran. (Where
//!    clone3 is refused, as under valgrind, a plain clone copies it.)
//!    What no child may hold even until its exec, the daemon's listening
//!    socket, sits above the slots (`above_slots`);
//! 5. `chdir`, the descriptor limit the daemon started with;
//! 6. for a sandboxed session (`sandbox.rs`), `no_new_privs`, its Landlock
//!    ruleset and its seccomp filter, made by the parent;
//! 7. an empty signal mask, and `execve`.
//!
//! Nothing else: no subreaper bit, no procd-only attribute (docs/containment.md; see
//! docs/containment.md). A step that fails is reported to the parent
//! through memory they share, and the child `_exit`s; `spawn` then returns
//! that step's OS error.
//!
//! (No `CLONE_PIDFD`: the child is unreaped until the caller's reaper
//! takes it, so its pid names it, and the identity guard opens a pidfd
//! where one is needed.)

use std::ffi::{c_int, c_void, CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

mod slots;
use slots::Slots;
pub use slots::{above_slots, reserve_slots};

/// What to start, prepared entirely before the clone.
pub struct Launch<'a> {
    /// The file to execute (a path; no PATH search happens in the child).
    pub program: &'a CStr,
    pub argv: &'a [CString],
    /// `NAME=value` entries: the program's whole environment.
    pub envp: &'a [CString],
    pub cwd: &'a CStr,
    /// What becomes fds 0, 1 and 2.
    pub stdio: [BorrowedFd<'a>; 3],
    /// What becomes fds 3, 4, … in order (a shell's channels: at most
    /// `MAX_INHERITED`).
    pub inherit: &'a [BorrowedFd<'a>],
    /// Make stdin (a terminal) the controlling terminal of the new session.
    pub controlling_terminal: bool,
    /// The session's cgroups, which the child is in before it execs.
    pub cgroups: Option<&'a Join<'a>>,
    /// The soft RLIMIT_NOFILE to restore (the daemon raised its own).
    pub nofile: Option<u64>,
    /// The sandbox the child enters just before exec.
    pub sandbox: Option<&'a crate::sandbox::Enforcement>,
}

/// A session's cgroups, as the child enters them.
pub struct Join<'a> {
    /// The cgroup2 directory (opened O_DIRECTORY): the child is created in
    /// it where the kernel can (CLONE_INTO_CGROUP).
    pub dir: BorrowedFd<'a>,
    /// Its `cgroup.procs` (opened for writing): written by the child where
    /// it could not be created in the cgroup.
    pub procs: BorrowedFd<'a>,
    /// The v1 hierarchies' `cgroup.procs` (limits on a hybrid host).
    pub v1: Vec<BorrowedFd<'a>>,
}

/// The most descriptors a child inherits beyond stdio.
pub const MAX_INHERITED: usize = 4;

/// The steps of the child's setup, for a failure's message (the child
/// reports the index of the one that failed, plus one).
const STEPS: [&str; 10] = [
    "join the session's cgroup",
    "setsid",
    "take the terminal",
    "set up stdio",
    "change to the working directory",
    "restore the descriptor limit",
    "set no_new_privs",
    "enter the Landlock sandbox",
    "install the seccomp filter",
    "exec",
];
const CGROUP: usize = 1;
const SETSID: usize = 2;
const TERMINAL: usize = 3;
const STDIO: usize = 4;
const CHDIR: usize = 5;
const RLIMIT: usize = 6;
const NO_NEW_PRIVS: usize = 7;
const LANDLOCK: usize = 8;
const SECCOMP: usize = 9;
const EXEC: usize = 10;

/// Everything the child reads, as raw pointers into memory the parent keeps
/// alive (and unchanged) until the clone returns; and where it reports.
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdio: [RawFd; 3],
    /// Sources for fds 3.. (the first `inherit_len` of them).
    inherit: [RawFd; MAX_INHERITED],
    inherit_len: usize,
    /// The child's own table is a copy of the shared one below this
    /// (every source is there, in its slot); -1: the child was cloned
    /// with a table of its own.
    own_table_below: RawFd,
    controlling_terminal: bool,
    /// `cgroup.procs` files to write, in order (the cgroup2 one first,
    /// unless the child was created in it).
    cgroups: *const RawFd,
    cgroups_len: usize,
    /// The first of them to write: 1 when the child was created in the
    /// cgroup2 one (set by the parent before the clone, never after).
    cgroups_from: usize,
    nofile: Option<u64>,
    /// The Landlock ruleset to enter, or -1.
    ruleset: RawFd,
    /// The seccomp filter (`sock_fprog`'s parts), or a null pointer.
    filter_len: u16,
    filter: *const libc::sock_filter,
    /// 0, or the failed step of `STEPS` plus one.
    failed_step: AtomicUsize,
    errno: AtomicI32,
}

/// The child's stack. glibc's posix_spawn uses a few pages; the child's
/// frame here is one small function.
const STACK_BYTES: usize = 64 * 1024;

/// Starts `launch` and returns the child's pid (not yet reaped, so it
/// cannot be recycled). The caller must hold whatever lock keeps the
/// reaper from reaping the child before it is registered.
pub fn spawn(launch: &Launch<'_>) -> io::Result<i32> {
    let argv = null_terminated(launch.argv);
    let envp = null_terminated(launch.envp);
    if launch.inherit.len() > MAX_INHERITED {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many inherited descriptors",
        ));
    }
    let mut held = Slots::lock();
    let slots = Slots::reserved(&mut held)?;
    let sources = launch.stdio.iter().chain(launch.inherit).copied();
    let ruleset = launch.sandbox.map(|s| s.ruleset()).filter(|&fd| fd >= 0);
    // SAFETY: the ruleset is a descriptor the sandbox owns, open for the
    // whole of this call (`launch` borrows it).
    let ruleset = ruleset.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) });
    let placed = slots.place(sources.chain(ruleset))?;
    // In the order placed: stdio, what it inherits, then the ruleset.
    let (placed_stdio, rest) = placed.fds.split_at(3);
    let (placed_inherit, placed_ruleset) = rest.split_at(launch.inherit.len());
    let mut stdio = [0; 3];
    stdio.copy_from_slice(placed_stdio);
    let mut inherit = [-1; MAX_INHERITED];
    inherit[..placed_inherit.len()].copy_from_slice(placed_inherit);
    let mut cgroups: Vec<RawFd> = Vec::new();
    if let Some(join) = launch.cgroups {
        cgroups.push(join.procs.as_raw_fd());
        cgroups.extend(join.v1.iter().map(AsRawFd::as_raw_fd));
    }
    let mut args = ChildArgs {
        program: launch.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: launch.cwd.as_ptr(),
        stdio,
        inherit,
        inherit_len: launch.inherit.len(),
        own_table_below: placed.end,
        controlling_terminal: launch.controlling_terminal,
        cgroups: cgroups.as_ptr(),
        cgroups_len: cgroups.len(),
        cgroups_from: 0,
        nofile: launch.nofile,
        ruleset: placed_ruleset.first().copied().unwrap_or(-1),
        filter_len: launch.sandbox.and_then(|s| s.filter()).map_or(0, |f| f.0),
        filter: launch
            .sandbox
            .and_then(|s| s.filter())
            .map_or(std::ptr::null(), |f| f.1),
        failed_step: AtomicUsize::new(0),
        errno: AtomicI32::new(0),
    };
    let pid = clone_child(launch.cgroups.map(|join| join.dir), &mut args);
    // The child has its own table now (or is gone): the slots let go of
    // its files, so that the daemon holds no end of its pipes.
    drop(placed);
    let pid = pid?;
    let step = args.failed_step.load(Ordering::Acquire);
    if step != 0 {
        // The child has exited: the reaper collects it like any orphan.
        let os = io::Error::from_raw_os_error(args.errno.load(Ordering::Acquire));
        let what = STEPS.get(step - 1).unwrap_or(&"start");
        return Err(io::Error::new(os.kind(), format!("cannot {what}: {os}")));
    }
    Ok(pid)
}

/// Clones the child (into `cgroup` where the kernel can) with every signal
/// blocked in this thread, and returns its pid once it has exec'd or
/// failed (CLONE_VFORK).
fn clone_child(cgroup: Option<BorrowedFd<'_>>, args: &mut ChildArgs) -> io::Result<i32> {
    let mut stack = vec![0u8; STACK_BYTES];

    // Block every signal in this thread across the clone: a handler of the
    // daemon must never run in the child (it shares our memory), and the
    // child restores an empty mask itself right before exec.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigfillset/pthread_sigmask only write the two local sets.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let pid = match clone3_child(cgroup, &mut stack, args) {
        Some(pid) => Ok(pid),
        None => {
            // A plain clone copies the table: the child has its own
            // already. (Not CLONE_FILES here: valgrind, which refuses
            // clone3, ends a process that asks it for that clone.)
            args.own_table_below = -1;
            // SAFETY: as in `clone3_child`: the stack top is inside
            // `stack` and 16-byte aligned; `args` and everything it points
            // to outlive the call, because CLONE_VFORK suspends this thread
            // until the child has exec'd or exited, and the child only
            // reads them (its reports are atomics). `child_main` calls
            // async-signal-safe raw syscalls only.
            let pid = unsafe {
                libc::clone(
                    child_main,
                    stack_top(&mut stack).cast::<c_void>(),
                    libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                    (&*args as *const ChildArgs).cast_mut().cast::<c_void>(),
                )
            };
            if pid == -1 {
                Err(io::Error::last_os_error())
            } else {
                Ok(pid)
            }
        }
    };
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    pid
}

/// The 16-byte aligned top of a child's stack (it grows down).
fn stack_top(stack: &mut [u8]) -> *mut u8 {
    let end = stack.as_mut_ptr_range().end;
    end.wrapping_sub(end as usize % 16)
}

/// clone3's arguments (`struct clone_args`, up to `cgroup`: version 2).
#[cfg(target_arch = "x86_64")]
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

#[cfg(target_arch = "x86_64")]
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Creates the child sharing this process's descriptor table, in the
/// cgroup `dir` if given, with clone3(CLONE_VM | CLONE_VFORK |
/// CLONE_FILES [| CLONE_INTO_CGROUP]): its pid, or None where the kernel
/// will not (the caller then clones a child with a table of its own that
/// joins by writing, which reports any error the cgroup itself causes).
/// Called with every signal blocked.
#[cfg(target_arch = "x86_64")]
fn clone3_child(
    dir: Option<BorrowedFd<'_>>,
    stack: &mut [u8],
    args: &mut ChildArgs,
) -> Option<i32> {
    use std::sync::atomic::AtomicBool;
    // A kernel without clone3 or CLONE_INTO_CGROUP (or a seccomp filter
    // that refuses it) will not change its mind: asked once.
    static UNAVAILABLE: AtomicBool = AtomicBool::new(false);
    if UNAVAILABLE.load(Ordering::Relaxed) {
        return None;
    }
    let base = stack.as_mut_ptr();
    let top = stack_top(stack);
    let clone = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES) as u64
            | dir.map_or(0, |_| CLONE_INTO_CGROUP),
        exit_signal: libc::SIGCHLD as u64,
        stack: base as u64,
        stack_size: (top as usize - base as usize) as u64,
        cgroup: dir.map_or(0, |dir| dir.as_raw_fd() as u64),
        ..CloneArgs::default()
    };
    args.cgroups_from = usize::from(dir.is_some());
    let arg = (args as *const ChildArgs).cast_mut().cast::<c_void>();
    let ret: isize;
    // SAFETY: clone3 returns twice. In this thread (rax = the pid or
    // -errno) nothing but rax, rcx and r11 changes and no stack is used.
    // In the child (rax = 0) every register is this thread's, except the
    // stack pointer, which the kernel sets to the top of `stack` (base +
    // size, 16-byte aligned, so `call` leaves the ABI's alignment): it
    // calls `child_entry(arg)`, which never returns (exec or _exit).
    // CLONE_VFORK suspends this thread until then, so `stack`, `clone`,
    // `args` and all they point to stay alive and unchanged while the
    // child runs on them, as for libc::clone in `spawn`.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 as isize => ret,
            in("rdi") &clone as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") child_entry as extern "C" fn(*mut c_void) -> !,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if ret < 0 {
        args.cgroups_from = 0;
        let errno = -ret as c_int;
        if matches!(errno, libc::ENOSYS | libc::E2BIG | libc::EINVAL) {
            UNAVAILABLE.store(true, Ordering::Relaxed);
        }
        return None;
    }
    Some(ret as i32)
}

#[cfg(not(target_arch = "x86_64"))]
fn clone3_child(_: Option<BorrowedFd<'_>>, _: &mut [u8], _: &mut ChildArgs) -> Option<i32> {
    None
}

/// The child made by clone3: `child_main`, which execs or `_exit`s.
#[cfg(target_arch = "x86_64")]
extern "C" fn child_entry(arg: *mut c_void) -> ! {
    child_main(arg);
    // SAFETY: _exit ends the child without running the parent's handlers
    // (child_main does not return; this is for the type).
    unsafe { libc::_exit(127) }
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    let mut v: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    v.push(std::ptr::null());
    v
}

/// The child, from the clone to exec. Raw syscalls only.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive and unchanged while
    // the parent is suspended by CLONE_VFORK; the child only reads it and
    // writes its atomics.
    let args = unsafe { &*(arg as *const ChildArgs) };
    let fail = |step: usize| -> c_int {
        // SAFETY: __errno_location is this thread's errno (the parent's,
        // which is suspended); _exit ends the child without running any of
        // the parent's exit handlers.
        unsafe {
            args.errno
                .store(*libc::__errno_location(), Ordering::Release);
            args.failed_step.store(step, Ordering::Release);
            libc::_exit(127)
        }
    };
    // SAFETY (the whole block): each call is a raw, async-signal-safe
    // syscall on descriptors, strings and the seccomp program the parent
    // prepared (the `sock_fprog` is on this child's own stack); none
    // allocates or takes a lock.
    unsafe {
        for sig in 1..=libc::SIGRTMAX() {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                // EINVAL for the signals glibc reserves: nothing to reset.
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        for i in args.cgroups_from..args.cgroups_len {
            let fd = *args.cgroups.add(i);
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return fail(CGROUP);
            }
        }
        if libc::setsid() == -1 {
            return fail(SETSID);
        }
        if args.controlling_terminal && libc::ioctl(args.stdio[0], libc::TIOCSCTTY, 0) == -1 {
            return fail(TERMINAL);
        }
        // Up to here the table is the daemon's: nothing above changed it.
        if args.own_table_below >= 0 && !own_table(args.own_table_below) {
            return fail(STDIO);
        }
        for (target, &source) in args.stdio.iter().enumerate() {
            if libc::dup2(source, target as c_int) == -1 {
                return fail(STDIO);
            }
        }
        for i in 0..args.inherit_len {
            if libc::dup2(args.inherit[i], (3 + i) as c_int) == -1 {
                return fail(STDIO);
            }
        }
        if libc::chdir(args.cwd) == -1 {
            return fail(CHDIR);
        }
        if let Err(step) = limit_and_confine(args) {
            return fail(step);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(args.program, args.argv, args.envp);
    }
    fail(EXEC)
}

/// Gives the child a descriptor table of its own: a copy of the shared
/// one's descriptors below `below` (Linux 5.9), or else of all of them.
///
/// # Safety
/// Only in the child `spawn` cloned: raw syscalls only.
unsafe fn own_table(below: RawFd) -> bool {
    const CLOSE_RANGE_UNSHARE: libc::c_uint = 1 << 1;
    libc::syscall(
        libc::SYS_close_range,
        below as libc::c_uint,
        libc::c_uint::MAX,
        CLOSE_RANGE_UNSHARE,
    ) == 0
        || libc::unshare(libc::CLONE_FILES) == 0
}

/// The child's descriptor limit and sandbox (no_new_privs, the Landlock
/// ruleset, the seccomp filter); the error is the step that failed.
///
/// # Safety
/// Only in the child `spawn` cloned, with the `args` it prepared: raw,
/// async-signal-safe syscalls only, nothing allocated, no lock taken.
unsafe fn limit_and_confine(args: &ChildArgs) -> Result<(), usize> {
    if let Some(soft) = args.nofile {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == -1 {
            return Err(RLIMIT);
        }
        limit.rlim_cur = soft.min(limit.rlim_max);
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == -1 {
            return Err(RLIMIT);
        }
    }
    if args.ruleset >= 0 {
        // Landlock needs no_new_privs (without CAP_SYS_ADMIN), and it
        // keeps a setuid program from shedding the sandbox.
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1 {
            return Err(NO_NEW_PRIVS);
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, args.ruleset, 0) == -1 {
            return Err(LANDLOCK);
        }
        if !args.filter.is_null() {
            let program = libc::sock_fprog {
                len: args.filter_len,
                filter: args.filter.cast_mut(),
            };
            let program: *const libc::sock_fprog = &program;
            if libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, program) == -1 {
                return Err(SECCOMP);
            }
        }
    }
    Ok(())
}

/// Finds `program` the way a shell would: a name with a slash as it is,
/// else the first executable file of that name in `path` (a PATH value).
pub fn resolve(program: &str, path: Option<&str>) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return Some(program.into());
    }
    let path = path.unwrap_or("/usr/local/bin:/usr/bin:/bin");
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| std::path::Path::new(dir).join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn cstrings(v: &[&str]) -> Vec<CString> {
        v.iter().map(|s| CString::new(*s).unwrap()).collect()
    }

    #[test]
    fn a_child_runs_in_its_own_session_with_its_stdio() {
        let (r, w) = std::io::pipe().unwrap();
        let devnull = std::fs::File::open("/dev/null").unwrap();
        let argv = cstrings(&["sh", "-c", "echo $$ $(ps -o sid= -p $$) $PWD; exit 3"]);
        let envp = cstrings(&["PATH=/usr/bin:/bin"]);
        let program = CString::new("/bin/sh").unwrap();
        let cwd = CString::new("/tmp").unwrap();
        let w2 = w.try_clone().unwrap();
        let launch = Launch {
            program: &program,
            argv: &argv,
            envp: &envp,
            cwd: &cwd,
            stdio: [devnull.as_fd(), w.as_fd(), w2.as_fd()],
            inherit: &[],
            controlling_terminal: false,
            cgroups: None,
            nofile: None,
            sandbox: None,
        };
        let pid = spawn(&launch).unwrap();
        drop((w, w2));
        let mut out = String::new();
        std::io::Read::read_to_string(&mut &r, &mut out).unwrap();
        let fields: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(fields[0], pid.to_string(), "{out}");
        assert_eq!(fields[1], pid.to_string(), "session leader: {out}");
        assert_eq!(fields[2], "/tmp");
        let pid = nix::unistd::Pid::from_raw(pid);
        let status = nix::sys::wait::waitpid(pid, None).unwrap();
        assert_eq!(status, nix::sys::wait::WaitStatus::Exited(pid, 3));
    }

    #[test]
    fn a_child_inherits_its_descriptors_at_3_and_up() {
        // Sources at 3 and 4 themselves would be overwritten by a naive
        // dup2 order: the inherited ones must come through crossed.
        let (r, w) = std::io::pipe().unwrap();
        let devnull = std::fs::File::open("/dev/null").unwrap();
        let (a_r, a_w) = std::io::pipe().unwrap();
        let (b_r, b_w) = std::io::pipe().unwrap();
        let argv = cstrings(&["sh", "-c", "echo a >&3; echo b >&4"]);
        let envp = cstrings(&["PATH=/usr/bin:/bin"]);
        let program = CString::new("/bin/sh").unwrap();
        let cwd = CString::new("/").unwrap();
        let launch = Launch {
            program: &program,
            argv: &argv,
            envp: &envp,
            cwd: &cwd,
            stdio: [devnull.as_fd(), w.as_fd(), w.as_fd()],
            inherit: &[b_w.as_fd(), a_w.as_fd()],
            controlling_terminal: false,
            cgroups: None,
            nofile: None,
            sandbox: None,
        };
        let pid = spawn(&launch).unwrap();
        drop((w, a_w, b_w));
        let read = |mut p: std::io::PipeReader| {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut p, &mut s).unwrap();
            s
        };
        assert_eq!(read(b_r), "a\n", "fd 3 is the first inherited");
        assert_eq!(read(a_r), "b\n", "fd 4 is the second");
        assert_eq!(read(r), "");
        let pid = nix::unistd::Pid::from_raw(pid);
        nix::sys::wait::waitpid(pid, None).unwrap();
    }

    /// `cat FILE`, its output on the descriptor `launch` is given.
    struct Cat {
        argv: Vec<CString>,
        program: CString,
        cwd: CString,
    }

    impl Cat {
        fn of(file: &str) -> Cat {
            Cat {
                argv: cstrings(&["cat", file]),
                program: CString::new("/bin/cat").unwrap(),
                cwd: CString::new("/").unwrap(),
            }
        }

        fn launch<'a>(
            &'a self,
            stdin: BorrowedFd<'a>,
            out: BorrowedFd<'a>,
            cgroups: Option<&'a Join<'a>>,
        ) -> Launch<'a> {
            Launch {
                program: &self.program,
                argv: &self.argv,
                envp: &[],
                cwd: &self.cwd,
                stdio: [stdin, out, out],
                inherit: &[],
                controlling_terminal: false,
                cgroups,
                nofile: None,
                sandbox: None,
            }
        }
    }

    /// The files of the process's own descriptors naming `inode`.
    fn held_of(inode: u64) -> usize {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
            .filter(|m| m.ino() == inode)
            .count()
    }

    #[test]
    fn a_child_copies_only_the_low_end_of_the_table_and_we_keep_none_of_its_files() {
        use std::os::unix::fs::MetadataExt;
        reserve_slots().unwrap();
        // A daemon's many sessions, opened after the slots were reserved.
        let devnull = std::fs::File::open("/dev/null").unwrap();
        let many: Vec<_> = (0..900).map(|_| devnull.try_clone().unwrap()).collect();
        let (r, w) = std::io::pipe().unwrap();
        let pipe = std::fs::metadata(format!("/proc/self/fd/{}", r.as_raw_fd()))
            .unwrap()
            .ino();
        let cat = Cat::of("/proc/self/status");
        let pid = spawn(&cat.launch(devnull.as_fd(), w.as_fd(), None)).unwrap();
        assert_eq!(held_of(pipe), 2, "our two ends, no slot's copy");
        drop(w);
        let mut out = String::new();
        std::io::Read::read_to_string(&mut &r, &mut out).unwrap();
        nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        let size: usize = out
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("FDSize in {out}"));
        assert!(
            size < 256,
            "the child's table has room for {size}, not the {} below our top",
            many.len()
        );
    }

    #[test]
    fn a_child_is_born_in_its_cgroup_without_writing_to_it() {
        // docs/containment.md: the child is in the session's cgroup before it execs.
        // `procs` is /dev/null here, so a child that wrote to join would
        // land nowhere: it is in the cgroup only if clone3 made it there.
        if std::env::var_os("PROCD_TEST_NO_CGROUP").is_some() {
            return; // documented in README: the machine has no cgroup2
        }
        let tree = crate::cgroup::CgroupTree::find(&format!("spawn-test-{}", std::process::id()))
            .expect("a writable cgroup2 here (else set PROCD_TEST_NO_CGROUP=1)");
        let cgroup = tree
            .create("proc_0123456789ab", &Default::default())
            .unwrap();
        let entry = cgroup.entry().unwrap();
        let sink = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        let join = Join {
            procs: sink.as_fd(),
            ..entry.join()
        };
        let (r, w) = std::io::pipe().unwrap();
        let devnull = std::fs::File::open("/dev/null").unwrap();
        let cat = Cat::of("/proc/self/cgroup");
        let pid = spawn(&cat.launch(devnull.as_fd(), w.as_fd(), Some(&join))).unwrap();
        drop(w);
        let mut out = String::new();
        std::io::Read::read_to_string(&mut &r, &mut out).unwrap();
        let pid = nix::unistd::Pid::from_raw(pid);
        nix::sys::wait::waitpid(pid, None).unwrap();
        drop(entry);
        let removed = cgroup.remove();
        tree.remove();
        let v2 = out
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or("");
        assert!(
            v2.ends_with("/proc_0123456789ab"),
            "born in the session's cgroup: {out}"
        );
        assert!(removed, "the cgroup is empty once the child is reaped");
    }

    #[test]
    fn a_failed_step_is_an_error_naming_it() {
        let devnull = std::fs::File::open("/dev/null").unwrap();
        let argv = cstrings(&["true"]);
        let program = CString::new("/bin/true").unwrap();
        let cwd = CString::new("/no/such/dir").unwrap();
        let launch = Launch {
            program: &program,
            argv: &argv,
            envp: &[],
            cwd: &cwd,
            stdio: [devnull.as_fd(), devnull.as_fd(), devnull.as_fd()],
            inherit: &[],
            controlling_terminal: false,
            cgroups: None,
            nofile: None,
            sandbox: None,
        };
        let err = spawn(&launch).unwrap_err();
        assert_eq!(err.raw_os_error(), None);
        assert!(err.to_string().contains("working directory"), "{err}");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let program = CString::new("/no/such/program").unwrap();
        let cwd = CString::new("/").unwrap();
        let err = spawn(&Launch {
            program: &program,
            cwd: &cwd,
            ..launch
        })
        .unwrap_err();
        assert!(err.to_string().contains("exec"), "{err}");
        // The failed children stay zombies of this test process until it
        // ends: a wait for any child would race the other tests'.
    }
}
