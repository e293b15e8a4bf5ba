//! clients/python (the `procd-client` package) against the real daemon:
//! its own tests under pytest, a strict type check, and a wheel built from
//! it, all with the project's venv (tests/mcp-venv.sh).

use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/python");

fn run(what: &str, command: &mut Command) -> String {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let out = output_within_for(child, what, Duration::from_secs(300));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

#[test]
fn the_python_client_passes_its_tests_against_the_daemon() {
    let python = mcp_python();
    let table: serde_json::Map<String, serde_json::Value> = procd_proto::METHOD_PARAMS
        .iter()
        .map(|(method, params)| (method.to_string(), serde_json::json!(params)))
        .collect();
    let report = run(
        "pytest",
        Command::new(&python)
            .args([
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/test_client.py",
            ])
            .current_dir(PACKAGE)
            .env("PYTHONPATH", Path::new(PACKAGE).join("src"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PROCD_BIN", BIN)
            .env(
                "PROCD_METHOD_PARAMS",
                serde_json::Value::Object(table).to_string(),
            )
            .env_remove("PROCD_HOME"),
    );
    assert!(
        report.contains(" passed") && !report.contains("skipped"),
        "{report}"
    );
}

#[test]
fn the_python_client_is_typed_and_builds_a_wheel() {
    let python = mcp_python();
    run(
        "mypy --strict",
        Command::new(&python)
            .args(["-m", "mypy", "--strict", "--cache-dir", "/dev/null", "src"])
            .current_dir(PACKAGE),
    );
    let out = tempfile::tempdir().expect("tempdir");
    // A copy, so the build leaves nothing in the repository.
    let tree = out.path().join("tree");
    run(
        "copy the package",
        Command::new("cp").args(["-r", PACKAGE]).arg(&tree),
    );
    let dist = out.path().join("dist");
    run(
        "python -m build",
        Command::new(&python)
            .args(["-m", "build", "--wheel", "--no-isolation", "--outdir"])
            .arg(&dist)
            .current_dir(&tree),
    );
    let wheel = dist.join("procd_client-0.1.0-py3-none-any.whl");
    let listing = run(
        "list the wheel",
        Command::new(&python)
            .args(["-m", "zipfile", "-l"])
            .arg(&wheel),
    );
    for file in [
        "procd_client/__init__.py",
        "procd_client/aio.py",
        "procd_client/py.typed",
    ] {
        assert!(
            listing.contains(file),
            "{file} not in the wheel:\n{listing}"
        );
    }
}
