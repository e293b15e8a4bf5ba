//! A real terminal for the tests: a tmux server of the test's own, its
//! socket in a temp dir of its own (so nothing is left in
//! /tmp/tmux-UID), driven by `send-keys` and read by `capture-pane`,
//! killed when dropped.

use super::short_tempdir;
use std::process::{Command, Output};

pub struct Tmux {
    dir: tempfile::TempDir,
}

impl Tmux {
    /// Runs `command` (through sh) in a detached `cols`×`rows` window.
    pub fn start(command: &str, cols: u16, rows: u16) -> Tmux {
        let t = Tmux {
            dir: short_tempdir(),
        };
        let (cols, rows) = (cols.to_string(), rows.to_string());
        let out = t.run(&["new-session", "-d", "-x", &cols, "-y", &rows, command]);
        assert!(out.status.success(), "tmux (apt-get install tmux): {out:?}");
        t
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(self.dir.path().join("tmux.sock"))
            .args(["-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux")
    }

    /// What the window shows now, one line per row.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-J"]).stdout).to_string()
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys"];
        args.extend_from_slice(keys);
        let out = self.run(&args);
        assert!(out.status.success(), "tmux send-keys {keys:?}: {out:?}");
    }

    pub fn wait_for(&self, text: &str) {
        self.wait_until(&format!("tmux shows {text:?}"), |screen| {
            screen.contains(text)
        });
    }

    /// Waits until `cond` holds for the screen; the last screen is in
    /// the failure.
    pub fn wait_until(&self, what: &str, mut cond: impl FnMut(&str) -> bool) {
        let deadline = std::time::Instant::now() + super::PATIENCE;
        loop {
            let last = self.screen();
            if cond(&last) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: not within {:?}; the screen:\n{last}",
                super::PATIENCE
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}
