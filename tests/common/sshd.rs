//! A real OpenSSH server on a loopback port, for one test (docs/remote.md):
//! Debian's sshd with a config, host key and authorized key of its own in
//! a temp dir, root login by that key only. Its sessions get `PATH` with
//! the procd under test first and a `PROCD_HOME` of their own (`SetEnv`),
//! so `procd dial-stdio` there runs a daemon in the test's temp dir.
//! Dropping it stops that daemon and the server, and removes the dir.

use super::*;

/// The environment variable that says the machine has no sshd.
pub const NO_SSHD: &str = "PROCD_TEST_NO_SSHD";
const SSHD: &str = "/usr/sbin/sshd";

pub struct Sshd {
    child: Child,
    dir: tempfile::TempDir,
    pub port: u16,
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
        if machine_lacks(NO_SSHD, "an OpenSSH server") {
            return None;
        }
        assert!(
            Path::new(SSHD).exists(),
            "{SSHD} is missing: install openssh-server (tests/system-deps.sh does), or set {NO_SSHD}=1 where the machine cannot have it"
        );
        let dir = short_tempdir();
        let d = dir.path();
        for key in ["host", "id"] {
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(key))
                .output()
                .expect("ssh-keygen");
            assert!(out.status.success(), "ssh-keygen: {out:?}");
        }
        std::fs::copy(d.join("id.pub"), d.join("authorized_keys")).expect("authorized key");
        // sshd refuses to start without its privilege separation dir.
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        let bin_dir = match with_procd {
            true => Path::new(BIN).parent().expect("procd's dir"),
            false => Path::new("/usr/local/bin"),
        };
        std::fs::create_dir(d.join("remote")).expect("remote home");
        let port = free_port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host\n\
             AuthorizedKeysFile {dir}/authorized_keys\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
             StrictModes no\nPidFile {dir}/sshd.pid\n\
             SetEnv PATH={bin}:/usr/bin:/bin PROCD_HOME={dir}/remote\n",
            dir = d.display(),
            bin = bin_dir.display(),
        );
        std::fs::write(d.join("sshd_config"), config).expect("sshd_config");
        let child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("sshd.log")).expect("log"))
            .spawn()
            .expect("start sshd");
        let s = Sshd { child, dir, port };
        wait_until("sshd accepts connections", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Some(s)
    }

    /// `ssh://root@127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("ssh://root@127.0.0.1:{}", self.port)
    }

    /// The ssh command (`PROCD_SSH`): this server's key and a known_hosts
    /// file of the test's own; no user config.
    pub fn ssh_command(&self) -> String {
        let d = self.dir.path().display();
        format!(
            "ssh -F /dev/null -i {d}/id -o IdentitiesOnly=yes -o UserKnownHostsFile={d}/known_hosts -o StrictHostKeyChecking=accept-new"
        )
    }

    /// The far side's PROCD_HOME.
    pub fn remote_home(&self) -> PathBuf {
        self.dir.path().join("remote")
    }

    /// Drops the authorized key: every later login is refused.
    pub fn refuse_logins(&self) {
        std::fs::write(self.dir.path().join("authorized_keys"), "").expect("authorized_keys");
    }

    /// The procd CLI here, talking to the far side through `--host`.
    pub fn procd(&self, args: &[&str]) -> Output {
        let child = Command::new(BIN)
            .arg("--host")
            .arg(self.url())
            .args(args)
            .env("PROCD_SSH", self.ssh_command())
            .env("PROCD_HOME", self.dir.path().join("local"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("procd");
        output_within(child, &format!("procd --host {}", args.join(" ")))
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // The daemon `dial-stdio` started on the far side, then the server.
        let _ = Command::new(BIN)
            .arg("stop")
            .env("PROCD_HOME", self.remote_home())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
