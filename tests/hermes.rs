//! hermes-agent 0.19.0 (from PyPI, in target/hermes-venv) runs its own
//! terminal and process tools on procd through `procd_client.hermes`
//! (clients/python/tests/hermes): the same answers' shapes as its native
//! registry, the processes procd's, completions in hermes's own queue and
//! texts, `kill_all` sparing other clients, and a hermes SIGKILLed
//! mid-run finding its process again with the output and exit code.

use crate::common::*;

#[test]
fn hermes_agents_own_tools_run_on_procd() {
    let python = prepared("hermes-venv.sh", "the hermes-agent venv");
    // hermes keeps its shell snapshot in TMPDIR (else /tmp), and the one
    // the SIGKILLed hermes made is never removed by it: a TMPDIR of the
    // test's own keeps it out of /tmp, and goes with the test.
    let tmp = tempfile::tempdir().expect("a TMPDIR for hermes");
    let in_tmp = || -> Vec<std::path::PathBuf> {
        let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().contains("hermes-snap-"))
            .collect()
    };
    let before = in_tmp();
    let report = run_ok(
        "hermes's tests",
        python_package_tests(&python, "tests/hermes").env("TMPDIR", tmp.path()),
    );
    assert!(
        report.contains("3 passed") && !report.contains("skipped"),
        "{report}"
    );
    let left: Vec<_> = in_tmp()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert!(left.is_empty(), "hermes left {left:?}");
}
