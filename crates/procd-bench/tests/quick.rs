//! Keeps the benchmark working: `--quick --json` runs every measurement
//! against a real daemon and reports each row's fields. No timing is
//! asserted here — the numbers belong in the README, not in a test — but
//! the rows that count losses are: a lost byte or exit code is a defect,
//! not a slow machine.

use serde_json::Value;

#[test]
fn quick_mode_reports_every_metric() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_procd-bench"))
        .args(["--quick", "--json"])
        .output()
        .expect("run procd-bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON list");
    assert_eq!(rows.len(), 21, "{rows:#?}");
    for row in &rows {
        assert!(row["metric"].is_string(), "{row}");
        assert!(row["value"].as_f64().is_some_and(f64::is_finite), "{row}");
        assert!(row["target"].is_string(), "{row}");
        assert!(row["met"].is_boolean(), "{row}");
        assert!(
            row.get("baseline").is_some() && row.get("ratio").is_some(),
            "{row}"
        );
    }
    for lost in [
        "output bytes lost or repeated across the kills",
        "exit codes lost across the kills",
    ] {
        let row = rows
            .iter()
            .find(|r| r["metric"] == lost)
            .unwrap_or_else(|| panic!("no row {lost:?}: {rows:#?}"));
        assert_eq!(row["value"].as_f64(), Some(0.0), "{row}");
        assert_eq!(row["met"], true, "{row}");
    }
    let with_baseline = rows.iter().filter(|r| r["baseline"].is_number()).count();
    assert!(
        with_baseline >= 4,
        "figures are measured against baselines in the same run"
    );
}
