//! docs/SECURITY.md's evidence, run by CI: the protocol fuzzer (100 000 inputs),
//! the chaos run (the daemon SIGKILLed 20+ times amid traffic) and the load
//! run (64 clients for 30 s), each against real daemons. The same code
//! prints README's Reliability table (`procd-bench --reliability`); here
//! every figure must meet its target.

use serde_json::Value;

#[test]
fn fuzz_chaos_and_load_meet_their_targets() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_procd-bench"))
        .args(["--reliability", "--json"])
        .output()
        .expect("run procd-bench --reliability");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let figures: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON list");
    assert_eq!(figures.len(), 3, "{figures:#?}");
    for f in &figures {
        println!("{}: {} ({})", f["check"], f["value"], f["detail"]);
        assert_eq!(f["met"], true, "{f:#}");
    }
}
