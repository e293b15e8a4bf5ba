//! A real OpenSSH server on a loopback port for one test
//! (`procd-sshd`), and the procd CLI pointed at it through `--host`.

use super::*;

/// The environment variable that says the machine has no sshd.
pub const NO_SSHD: &str = "PROCD_TEST_NO_SSHD";

pub struct Sshd(procd_sshd::Sshd);

impl std::ops::Deref for Sshd {
    type Target = procd_sshd::Sshd;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Sshd {
    /// A running server whose sessions find the procd under test on their
    /// PATH, or None when the suite is told the machine has no sshd.
    /// Panics with the reason otherwise.
    pub fn start() -> Option<Sshd> {
        Sshd::start_with(true)
    }

    /// `start`; `with_procd`: whether its sessions' PATH has procd.
    pub fn start_with(with_procd: bool) -> Option<Sshd> {
        Sshd::start_as(with_procd, "root")
    }

    /// `start`, logging in as `user`.
    pub fn start_as(with_procd: bool, user: &str) -> Option<Sshd> {
        if machine_lacks(NO_SSHD, "an OpenSSH server") {
            return None;
        }
        let sshd =
            procd_sshd::Sshd::start_as(Path::new(BIN), with_procd, user).unwrap_or_else(|e| {
                panic!("{e} (or set {NO_SSHD}=1 where the machine cannot have it)")
            });
        Some(Sshd(sshd))
    }

    /// `cmd` set up to reach this server: its ssh command (`PROCD_SSH`), a
    /// local PROCD_HOME of the test's own, stdin closed, output piped.
    pub fn through<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env("PROCD_SSH", self.ssh_command())
            .env("PROCD_HOME", self.local_home())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
    }

    /// The procd CLI here, talking to the far side through `--host`.
    pub fn procd(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(BIN);
        let child = self
            .through(cmd.arg("--host").arg(self.url()).args(args))
            .spawn()
            .expect("procd");
        output_within(child, &format!("procd --host {}", args.join(" ")))
    }
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    procd_sshd::free_port().expect("a free port")
}

/// A local user made for one test (the far side's account), removed when
/// dropped.
pub struct LocalUser {
    pub name: String,
    pub uid: u32,
}

impl LocalUser {
    pub fn create() -> LocalUser {
        let name = format!("pdt{}", std::process::id());
        // HOME /tmp: a directory it may use (the far daemon runs sessions
        // there by default). `*`, not useradd's locked `!`: sshd refuses
        // a locked account's key logins; `*` matches no password.
        let out = Command::new("useradd")
            .args(["-M", "-d", "/tmp", "-s", "/bin/sh", "-p", "*", &name])
            .output()
            .expect("useradd");
        assert!(out.status.success(), "useradd: {out:?}");
        let id = Command::new("id").args(["-u", &name]).output().expect("id");
        let uid = String::from_utf8_lossy(&id.stdout)
            .trim()
            .parse()
            .expect("a uid");
        LocalUser { name, uid }
    }
}

impl Drop for LocalUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}
