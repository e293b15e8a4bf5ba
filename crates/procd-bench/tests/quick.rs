//! Keeps the benchmark working: `--quick --json` runs every measurement
//! against a real daemon and reports each row's fields. No timing is
//! asserted here — the numbers belong in the README, not in a test — but
//! the rows that count losses are: a lost byte or exit code is a defect,
//! not a slow machine. So are instruction counts, which do not depend on
//! the machine's load: against `instructions-baseline.json`.

use serde_json::Value;

/// The rows `procd-bench ARGS` prints, which must succeed.
fn bench_rows(args: &[&str]) -> Vec<Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_procd-bench"))
        .args(args)
        .output()
        .expect("run procd-bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON list")
}

#[test]
fn quick_mode_reports_every_metric() {
    let rows = bench_rows(&["--quick", "--json"]);
    assert_eq!(rows.len(), 43, "{rows:#?}");
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
    // Instruction counts do not follow the machine's load as times do
    // (the baseline file's `why` has what was measured): a request path
    // that grew more than 20 % over its figure fails here.
    let kept: Value = serde_json::from_str(include_str!("../instructions-baseline.json"))
        .expect("instructions-baseline.json");
    for (metric, figure) in kept["rows"].as_object().expect("rows") {
        let figure = figure.as_f64().expect("a number");
        let row = rows
            .iter()
            .find(|r| r["metric"] == metric.as_str())
            .unwrap_or_else(|| panic!("no row {metric:?}"));
        let value = row["value"].as_f64().unwrap_or(f64::INFINITY);
        // In the test's output, so a CI log shows what a run measured.
        eprintln!("{metric}: {value:.0} (kept: {figure:.0})");
        assert!(
            value <= figure * 1.2,
            "{metric}: {value:.0} instructions, more than 20 % over the kept {figure:.0} (crates/procd-bench/instructions-baseline.json)"
        );
    }
    // Nor does a footprint (issue 56: 256 MiB at 10 000 sessions, which
    // this machine cannot hold): the figure projected from the quick
    // run's 100, with the same 20 % margin. It read 190 to 248 MiB here.
    let projected = "daemon + keeper PSS projected to 10000 live sessions";
    let row = rows
        .iter()
        .find(|r| r["metric"] == projected)
        .unwrap_or_else(|| panic!("no row {projected:?}"));
    let mib = row["value"].as_f64().unwrap_or(f64::INFINITY);
    eprintln!("{projected}: {mib:.1} MiB ({})", row["detail"]);
    assert!(
        mib <= 256.0 * 1.2,
        "{projected}: {mib:.1} MiB, more than 20 % over 256 MiB: {row}"
    );
    let with_baseline = rows.iter().filter(|r| r["baseline"].is_number()).count();
    assert!(
        with_baseline >= 4,
        "figures are measured against baselines in the same run"
    );
}

/// `--only peers` installs the peers and measures each beside procd. Their
/// timings are not asserted (the README has them), but what procd claims
/// over them is: nothing survives a kill, nothing is lost when the manager
/// is SIGKILLed, a prompt is seen and progress dots are not one.
#[test]
fn peers_are_measured_beside_procd() {
    let rows = bench_rows(&["--quick", "--only", "peers", "--json"]);
    for (peer, at_least) in [
        ("Desktop Commander", 5),
        ("pueue", 5),
        ("pm2", 5),
        ("supervisor", 5),
        ("Codex's exec-server 0.171.0", 1),
    ] {
        let of_peer: Vec<&Value> = rows.iter().filter(|r| r["baseline_name"] == peer).collect();
        assert!(of_peer.len() >= at_least, "{peer}: {rows:#?}");
        for row in of_peer {
            assert!(row["value"].as_f64().is_some_and(f64::is_finite), "{row}");
            assert!(
                row["baseline"].as_f64().is_some_and(f64::is_finite),
                "{row}"
            );
        }
    }
    // procd's own figure, not only "as good as the peer".
    let claims = [
        ("survivors of a 20-process tree", 0.0),
        ("lost when the manager is SIGKILLed", 0.0),
        ("prompt detected", 1.0),
        ("false prompt alarms", 0.0),
    ];
    let mut judged = 0;
    for row in &rows {
        let metric = row["metric"].as_str().unwrap_or_default();
        if let Some((_, want)) = claims.iter().find(|(c, _)| metric.contains(c)) {
            judged += 1;
            assert_eq!(row["value"].as_f64(), Some(*want), "{row:#}");
        }
    }
    assert!(judged >= 11, "{rows:#?}");
}

/// `--only systemd` brings up a real user manager and measures spawns
/// under procd's units both ways; the bench itself checks that each
/// daemon contained its sessions as configured. The timing is not
/// asserted (the README has it), only that both were measured.
#[test]
fn systemd_delegated_cgroups_are_measured_beside_scopes() {
    group_measures_one_row("systemd", "PROCD_TEST_NO_SYSTEMD");
}

/// `--only remote` runs a real sshd and polls through `--host ssh://`
/// beside `ssh … cat`; the bench checks the far side's procd is the one
/// it started. The timing is not asserted (the README has it).
#[test]
fn remote_polls_are_measured_beside_a_plain_ssh_echo() {
    group_measures_one_row("remote", "PROCD_TEST_NO_SSHD");
}

/// `--quick --only GROUP` gives one row, with a positive figure for procd
/// and for its baseline — unless `lacks` says the machine cannot run it
/// (as in the suite, docs/testing.md: only that variable skips it).
fn group_measures_one_row(group: &str, lacks: &str) {
    if std::env::var_os(lacks).is_some() {
        eprintln!("{lacks} is set: this machine lacks what `--only {group}` needs; not run");
        return;
    }
    let rows = bench_rows(&["--quick", "--only", group, "--json"]);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    for figure in ["value", "baseline"] {
        assert!(
            rows[0][figure]
                .as_f64()
                .is_some_and(|v| v.is_finite() && v > 0.0),
            "{}",
            rows[0]
        );
    }
}
