//! The jobserver's rows (docs/jobserver.md): four `cargo build -j8` of one
//! throwaway crate (separate target dirs) as `jobs` sessions of procd,
//! beside the same four run unmanaged, in turn in one run. What counts is
//! the wall time of all four, and the most rustc processes at once, read
//! from marks a RUSTC_WRAPPER writes around each compile.

use crate::{in_turn, median, Daemon, Row};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Generic functions per dependency: enough that compiling, not cargo's
/// own steps, is most of a build, as in a real one.
const FNS: usize = 300;

/// Builds run at once.
const BUILDS: usize = 4;

pub(crate) fn jobs_rows(d: &Daemon, rounds: usize) -> Vec<Row> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let krate = Crate::new(dir.path());
    let tokens = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut c = d.connect();
    // Each build a round of its own (its target dirs, its marks).
    let round = std::cell::Cell::new(0);
    let peaks = std::cell::Cell::new((0, 0));
    let next = || {
        round.set(round.get() + 1);
        round.get()
    };
    let (ours, theirs) = in_turn(
        rounds.clamp(2, 4),
        || {
            let (ms, peak) = krate.managed(&mut c, next());
            peaks.set((peaks.get().0.max(peak), peaks.get().1));
            ms
        },
        || {
            let (ms, peak) = krate.unmanaged(next());
            peaks.set((peaks.get().0, peaks.get().1.max(peak)));
            ms
        },
    );
    let peaks = peaks.get();
    let mut wall = Row::beside(
        format!("{BUILDS} cargo builds under the shared jobserver, wall time"),
        median(&ours),
        median(&theirs),
        format!("the same {BUILDS} unmanaged"),
        "ms",
        false,
        format!(
            "median of {} rounds, in turn: {BUILDS} `cargo build -j8` of a crate of six path dependencies, fresh target dirs, as `jobs` sessions of a daemon with {tokens} tokens (its CPUs) beside the same {BUILDS} as plain processes; most rustc at once {} vs {}",
            ours.len(),
            peaks.0,
            peaks.1
        ),
    );
    wall.target = "<= 1.05x unmanaged".into();
    wall.met = wall.ratio.is_some_and(|r| r <= 1.05);
    let limit = (tokens + BUILDS) as f64;
    let peak = Row::at_most(
        format!("{BUILDS} cargo builds under the shared jobserver, most rustc at once"),
        peaks.0 as f64,
        "processes",
        limit,
        format!(
            "the most compiles running at once in any round, from a RUSTC_WRAPPER's marks; the {BUILDS} unmanaged builds reached {}; the bound is the {tokens} tokens + one per cargo",
            peaks.1
        ),
    );
    vec![wall, peak]
}

/// The crate and the wrapper that marks compiles.
struct Crate {
    dir: PathBuf,
}

impl Crate {
    fn new(dir: &Path) -> Crate {
        let deps: Vec<String> = (1..=6).map(|n| format!("dep{n}")).collect();
        let mut manifest = "[package]\nname = \"top\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[workspace]\n[dependencies]\n".to_string();
        for dep in &deps {
            manifest += &format!("{dep} = {{ path = \"{dep}\" }}\n");
            let at = dir.join(dep).join("src");
            std::fs::create_dir_all(&at).expect("dep dir");
            std::fs::write(
                dir.join(dep).join("Cargo.toml"),
                format!("[package]\nname = \"{dep}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
            )
            .expect("dep manifest");
            // Some work for each compile: a few generic instantiations.
            let body: String = (0..FNS)
                .map(|i| format!("pub fn f{i}<T: Clone + std::fmt::Debug>(t: T) -> String {{ format!(\"{{:?}}{i}\", t.clone()) }}\n"))
                .collect();
            std::fs::write(at.join("lib.rs"), body).expect("dep lib");
        }
        std::fs::create_dir_all(dir.join("src")).expect("src");
        std::fs::write(dir.join("Cargo.toml"), manifest).expect("manifest");
        let calls: Vec<String> = deps.iter().map(|d| format!("{d}::f0(1)")).collect();
        std::fs::write(
            dir.join("src/lib.rs"),
            format!(
                "pub fn all() -> Vec<String> {{ vec![{}] }}\n",
                calls.join(", ")
            ),
        )
        .expect("lib");
        let wrapper = dir.join("rustc-wrapper");
        std::fs::write(
            &wrapper,
            "#!/bin/sh\nname= prev=\nfor a do [ \"$prev\" = --crate-name ] && name=$a; prev=$a; done\ncase $name in ''|___) exec \"$@\" ;; esac\necho start >> \"$MARKS\"; \"$@\"; s=$?; echo end >> \"$MARKS\"; exit $s\n",
        )
        .expect("wrapper");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Crate {
            dir: dir.to_path_buf(),
        }
    }

    /// The environment of build `n` of `round`: the toolchain as the bench
    /// runs under it, a target dir of its own, the wrapper and its marks.
    fn env(&self, round: usize, n: usize) -> Vec<(String, String)> {
        let home = std::env::var("HOME").unwrap_or_default();
        let var = |k: &str, default: String| std::env::var(k).unwrap_or(default);
        vec![
            ("PATH".into(), var("PATH", String::new())),
            (
                "CARGO_HOME".into(),
                var("CARGO_HOME", format!("{home}/.cargo")),
            ),
            (
                "RUSTUP_HOME".into(),
                var("RUSTUP_HOME", format!("{home}/.rustup")),
            ),
            (
                "CARGO_TARGET_DIR".into(),
                self.dir
                    .join(format!("target-{round}-{n}"))
                    .display()
                    .to_string(),
            ),
            (
                "RUSTC_WRAPPER".into(),
                self.dir.join("rustc-wrapper").display().to_string(),
            ),
            ("MARKS".into(), self.marks(round).display().to_string()),
        ]
    }

    fn marks(&self, round: usize) -> PathBuf {
        self.dir.join(format!("marks-{round}"))
    }

    /// The most compiles at once in `round`, from the order of its marks.
    fn peak(&self, round: usize) -> usize {
        let text = std::fs::read_to_string(self.marks(round)).unwrap_or_default();
        let (mut now, mut most) = (0usize, 0usize);
        for line in text.lines() {
            match line {
                "start" => {
                    now += 1;
                    most = most.max(now);
                }
                _ => now = now.saturating_sub(1),
            }
        }
        most
    }

    const COMMAND: &'static str = "cargo build -j8 --offline -q";

    fn managed(&self, c: &mut crate::Line, round: usize) -> (f64, usize) {
        let t = Instant::now();
        let ids: Vec<serde_json::Value> = (0..BUILDS)
            .map(|n| {
                let env: serde_json::Map<String, serde_json::Value> = self
                    .env(round, n)
                    .into_iter()
                    .map(|(k, v)| (k, json!(v)))
                    .collect();
                let r = c.call(
                    "spawn",
                    json!({"command": Self::COMMAND, "cwd": self.dir, "env": env, "jobs": true}),
                );
                r["session_id"].clone()
            })
            .collect();
        for id in ids {
            let w = c.call("wait", json!({"session_id": id, "timeout_s": 600}));
            assert_eq!(w["exit_code"], 0, "a managed build failed: {w}");
        }
        (t.elapsed().as_secs_f64() * 1e3, self.peak(round))
    }

    fn unmanaged(&self, round: usize) -> (f64, usize) {
        let t = Instant::now();
        let children: Vec<std::process::Child> = (0..BUILDS)
            .map(|n| {
                Command::new("sh")
                    .args(["-c", Self::COMMAND])
                    .current_dir(&self.dir)
                    .envs(self.env(round, n))
                    .env_remove("MAKEFLAGS")
                    .env_remove("CARGO_MAKEFLAGS")
                    .stdin(Stdio::null())
                    .spawn()
                    .expect("cargo")
            })
            .collect();
        for mut child in children {
            let status = child.wait().expect("wait");
            assert!(status.success(), "an unmanaged build failed: {status}");
        }
        (t.elapsed().as_secs_f64() * 1e3, self.peak(round))
    }
}
