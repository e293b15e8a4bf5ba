//! hermes-agent 0.19.0 (from PyPI, in target/hermes-venv) runs its own
//! terminal and process tools on procd through `procd_client.hermes`
//! (clients/python/tests/hermes): the same answers' shapes as its native
//! registry, the processes procd's, completions in hermes's own queue and
//! texts, `kill_all` sparing other clients, and a hermes SIGKILLed
//! mid-run finding its process again with the output and exit code.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/python");

#[test]
fn hermes_agents_own_tools_run_on_procd() {
    let python = prepared("hermes-venv.sh", "the hermes-agent venv");
    let child = Command::new(python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/hermes",
        ])
        .current_dir(PACKAGE)
        .env("PYTHONPATH", Path::new(PACKAGE).join("src"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PROCD_BIN", BIN)
        .env_remove("PROCD_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pytest");
    let out = output_within_for(child, "hermes's tests", Duration::from_secs(300));
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "hermes's tests failed:\n{report}");
    assert!(
        report.contains("3 passed") && !report.contains("skipped"),
        "{report}"
    );
}
