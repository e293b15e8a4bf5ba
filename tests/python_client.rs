//! clients/python (the `procd-client` package) against the real daemon:
//! its own tests under pytest, a strict type check, and a wheel built from
//! it, all with the project's venv (tests/mcp-venv.sh).

use crate::common::*;
use std::process::Command;

#[test]
fn the_python_client_passes_its_tests_against_the_daemon() {
    let python = mcp_python();
    let table: serde_json::Map<String, serde_json::Value> = procd_proto::METHOD_PARAMS
        .iter()
        .map(|(method, params)| (method.to_string(), serde_json::json!(params)))
        .collect();
    let table = serde_json::Value::Object(table).to_string();
    let report = run_ok(
        "pytest",
        python_package_tests(&python, "tests/test_client.py").env("PROCD_METHOD_PARAMS", table),
    );
    assert!(
        report.contains(" passed") && !report.contains("skipped"),
        "{report}"
    );
}

#[test]
fn the_python_client_is_typed_and_builds_a_wheel() {
    let python = mcp_python();
    run_ok(
        "mypy --strict",
        Command::new(&python)
            .args(["-m", "mypy", "--strict", "--cache-dir", "/dev/null", "src"])
            .current_dir(PYTHON_PACKAGE),
    );
    let out = tempfile::tempdir().expect("tempdir");
    // A copy, so the build leaves nothing in the repository.
    let tree = out.path().join("tree");
    run_ok(
        "copy the package",
        Command::new("cp").args(["-r", PYTHON_PACKAGE]).arg(&tree),
    );
    let dist = out.path().join("dist");
    run_ok(
        "python -m build",
        Command::new(&python)
            .args(["-m", "build", "--wheel", "--no-isolation", "--outdir"])
            .arg(&dist)
            .current_dir(&tree),
    );
    let wheel = dist.join("procd_client-0.1.0-py3-none-any.whl");
    let listing = run_ok(
        "list the wheel",
        Command::new(&python)
            .args(["-m", "zipfile", "-l"])
            .arg(&wheel),
    );
    for file in [
        "procd_client/__init__.py",
        "procd_client/aio.py",
        "procd_client/hermes.py",
        "procd_client/py.typed",
    ] {
        assert!(
            listing.contains(file),
            "{file} not in the wheel:\n{listing}"
        );
    }
}
