//! procd beside its peers (`procd-bench --only peers`): Desktop Commander
//! through the same MCP client as `procd mcp`; pueue, pm2 and supervisor
//! through their CLIs beside procd's; Codex's exec-server beside `procd
//! exec-server`, over the same stdio protocol. `install-peers.sh` puts pinned versions of them in
//! `target/peers/`; `peers.py` measures, alternating procd and the peer,
//! and prints figures that become rows here. A row is met when procd is at
//! least as good as the peer; where a peer wins, the row says NO.

use crate::Row;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Command;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

#[derive(Deserialize)]
struct PeerFigure {
    metric: String,
    unit: String,
    procd: f64,
    peer: f64,
    peer_name: String,
    /// "lower" or "higher": which way is better.
    better: String,
    detail: String,
}

/// The `procd` program beside this bench (the same build profile).
fn procd_program() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    let procd = exe.with_file_name("procd");
    assert!(
        procd.is_file(),
        "the peers group drives the `procd` CLI and `procd mcp`, and {} is missing: build the workspace (cargo build --release --workspace)",
        procd.display()
    );
    procd
}

/// Runs `program args`, failing with its stderr; returns stdout.
fn run(program: &Path, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `relative` under the installed peers (target/peers), once
/// install-peers.sh has run (it is idempotent).
pub(crate) fn installed(relative: &str) -> std::path::PathBuf {
    let procd = procd_program();
    let peers = procd
        .parent()
        .and_then(Path::parent)
        .expect("a target directory")
        .join("peers");
    run(
        &Path::new(DIR).join("install-peers.sh"),
        &[&peers.display().to_string()],
    );
    let path = peers.join(relative);
    assert!(
        path.exists(),
        "{} is missing after install-peers.sh",
        path.display()
    );
    path
}

pub fn peer_rows(rounds: usize) -> Vec<Row> {
    let procd = procd_program();
    // target/<profile>/procd-bench → target/peers
    let target = procd
        .parent()
        .and_then(Path::parent)
        .expect("a target directory");
    let peers = target.join("peers");
    let peers_str = peers.display().to_string();
    run(&Path::new(DIR).join("install-peers.sh"), &[&peers_str]);
    // Codex's CLI, whose exec-server is procd exec-server's peer.
    let codex = Command::new(Path::new(DIR).join("../../tests/codex-cli.sh"))
        .env("PROCD_CODEX_DIR", peers.join("codex"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("tests/codex-cli.sh");
    assert!(codex.success(), "tests/codex-cli.sh failed: {codex}");
    let python = run(&Path::new(DIR).join("../../tests/mcp-venv.sh"), &[]);
    let script = Path::new(DIR).join("peers.py").display().to_string();
    let out = run(
        Path::new(python.trim()),
        &[
            &script,
            &procd.display().to_string(),
            &peers_str,
            &rounds.to_string(),
        ],
    );
    let figures: Vec<PeerFigure> = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("peers.py printed no figures ({e}): {out}"));
    figures
        .into_iter()
        .map(|f| {
            Row::beside(
                f.metric,
                f.procd,
                f.peer,
                f.peer_name,
                &f.unit,
                f.better == "higher",
                f.detail,
            )
        })
        .collect()
}
