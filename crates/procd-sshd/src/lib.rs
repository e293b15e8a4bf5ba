//! A real OpenSSH server on a loopback port (docs/remote.md), for one
//! test or one benchmark run: Debian's sshd with a config, host key and
//! authorized key of its own in a temp dir, root login by that key only.
//! Its sessions get a `PATH` (with or without the procd under test) and a
//! `PROCD_HOME` of their own (`SetEnv`), so `procd dial-stdio` there runs
//! a daemon in the temp dir. Dropping it stops that daemon and the
//! server, and removes the dir.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const SSHD: &str = "/usr/sbin/sshd";

pub struct Sshd {
    child: Child,
    dir: tempfile::TempDir,
    procd: PathBuf,
    /// Who logs in (root, or a user the caller made).
    user: String,
    pub port: u16,
}

impl Sshd {
    /// A running server whose sessions find `procd` on their PATH (or,
    /// `with_procd` false, do not). An error says what is missing.
    pub fn start(procd: &Path, with_procd: bool) -> Result<Sshd, String> {
        Sshd::start_as(procd, with_procd, "root")
    }

    /// `start`, logging in as `user` (an account that exists, with an
    /// unlocked password field): the far daemon then runs as that user,
    /// in a home of its own here.
    pub fn start_as(procd: &Path, with_procd: bool, user: &str) -> Result<Sshd, String> {
        if !Path::new(SSHD).exists() {
            return Err(format!(
                "{SSHD} is missing: install openssh-server (tests/system-deps.sh does)"
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("pd")
            .tempdir_in("/tmp")
            .map_err(|e| format!("a temp dir: {e}"))?;
        let d = dir.path();
        prepare(d, user)?;
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        let bin_dir = match with_procd {
            true => procd.parent().unwrap_or(Path::new("/")),
            false => Path::new("/usr/local/bin"),
        };
        let port = free_port().map_err(|e| io("a free port", e))?;
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host\n\
             AuthorizedKeysFile {dir}/authorized_keys\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
             StrictModes no\nPidFile {dir}/sshd.pid\n\
             SetEnv PATH={bin}:/usr/bin:/bin PROCD_HOME={dir}/remote\n",
            dir = d.display(),
            bin = bin_dir.display(),
        );
        std::fs::write(d.join("sshd_config"), config).map_err(|e| io("sshd_config", e))?;
        let log = std::fs::File::create(d.join("sshd.log")).map_err(|e| io("sshd.log", e))?;
        let child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| io("start sshd", e))?;
        let s = Sshd {
            child,
            dir,
            procd: procd.to_path_buf(),
            user: user.to_string(),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err("sshd did not accept connections within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(s)
    }

    /// `ssh://USER@127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("ssh://{}@127.0.0.1:{}", self.user, self.port)
    }

    /// The ssh command (`PROCD_SSH`): this server's key and a known_hosts
    /// file of its own; no user config.
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

    /// A directory for the local side's own files.
    pub fn local_home(&self) -> PathBuf {
        self.dir.path().join("local")
    }

    /// Drops the authorized key: every later login is refused.
    pub fn refuse_logins(&self) -> std::io::Result<()> {
        std::fs::write(self.dir.path().join("authorized_keys"), "")
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // The daemon `dial-stdio` started on the far side (as its user),
        // then the server.
        let _ = Command::new("runuser")
            .args(["-u", &self.user, "--", "env"])
            .arg(format!("PROCD_HOME={}", self.remote_home().display()))
            .arg(&self.procd)
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on now.
pub fn free_port() -> std::io::Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
}

/// Fills the server's dir `d`: a host key, the client's key as the only
/// authorized one, and the far daemon's home, owned by `user`.
fn prepare(d: &Path, user: &str) -> Result<(), String> {
    for key in ["host", "id"] {
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(d.join(key))
            .output()
            .map_err(|e| format!("ssh-keygen: {e}"))?;
        if !out.status.success() {
            return Err(format!("ssh-keygen: {out:?}"));
        }
    }
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    std::fs::copy(d.join("id.pub"), d.join("authorized_keys"))
        .map_err(|e| io("authorized_keys", e))?;
    // Another user's login reads the key and reaches its home through
    // this dir; the host key and the client's key stay root's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode =
        |path: &Path, mode| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
    mode(d, 0o711).map_err(|e| io("chmod", e))?;
    mode(&d.join("authorized_keys"), 0o644).map_err(|e| io("chmod", e))?;
    // sshd refuses to start without its privilege separation dir.
    std::fs::create_dir_all("/run/sshd").map_err(|e| io("/run/sshd", e))?;
    std::fs::create_dir(d.join("remote")).map_err(|e| io("the remote home", e))?;
    if user != "root" {
        let out = Command::new("chown")
            .args([&format!("{user}:"), &d.join("remote").display().to_string()])
            .output()
            .map_err(|e| io("chown", e))?;
        if !out.status.success() {
            return Err(format!("chown {user}: {out:?}"));
        }
        mode(&d.join("remote"), 0o700).map_err(|e| io("chmod", e))?;
    }
    Ok(())
}
