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
    let report = run_ok(
        "hermes's tests",
        &mut python_package_tests(&python, "tests/hermes"),
    );
    assert!(
        report.contains("3 passed") && !report.contains("skipped"),
        "{report}"
    );
}
