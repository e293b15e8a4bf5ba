//! The parsers on what real runners printed (fixtures/, captured from
//! cargo 1.9x, cargo-nextest, pytest 9.2 and node 20), and on the shapes
//! jest, vitest and go document; then cut short and interleaved.

use super::*;

/// Feeds `text` in chunks of `chunk` bytes and returns the final summary.
fn run(command: &str, text: &str, chunk: usize) -> Option<TestSummary> {
    let mut run = TestRun::for_command(command, 0).expect("a test command");
    let mut end = 0u64;
    for piece in text.as_bytes().chunks(chunk.max(1)) {
        end += piece.len() as u64;
        run.feed(piece, end);
    }
    run.finish()
}

fn counts_of(s: &TestSummary) -> (u64, u64, u64) {
    (s.passed, s.failed, s.skipped)
}

const CARGO: &str = include_str!("fixtures/cargo-test.txt");
const NEXTEST: &str = include_str!("fixtures/nextest.txt");
const PYTEST: &str = include_str!("fixtures/pytest.txt");
const NODE_TAP: &str = include_str!("fixtures/node-tap.txt");
const NODE_SPEC: &str = include_str!("fixtures/node-spec.txt");

#[test]
fn cargo_test_counts_and_failures() {
    for chunk in [1, 7, 4096] {
        let s = run("cargo test", CARGO, chunk).expect("a summary");
        assert_eq!(counts_of(&s), (1, 2, 2), "chunk {chunk}");
        assert!(s.finished);
        assert_eq!(s.runner, "cargo test");
        let names: Vec<&str> = s.failures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["tests::panics", "tests::fails"]);
        let fails = &s.failures[1];
        assert_eq!(fails.location.as_deref(), Some("src/lib.rs:4:26"));
        assert!(
            fails.message.contains("one is not two"),
            "{}",
            fails.message
        );
        assert!(
            !fails.message.contains("stack backtrace"),
            "{}",
            fails.message
        );
        let at = fails.cursor.expect("a cursor") as usize;
        assert!(CARGO[at..].starts_with("test tests::fails ... FAILED"));
        assert_eq!(s.duration, Some(0.1));
    }
}

#[test]
fn nextest_counts_and_failures() {
    let s = run("cargo nextest run", NEXTEST, 5).expect("a summary");
    assert_eq!(counts_of(&s), (0, 2, 2));
    let names: Vec<&str> = s.failures.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["tally tests::panics", "tally tests::fails"]);
    assert_eq!(s.failures[0].message, "boom at the end");
    assert_eq!(s.failures[1].location.as_deref(), Some("src/lib.rs:4:26"));
    assert!(s.failures[1]
        .message
        .starts_with("assertion `left == right` failed: one is not two"));
    assert_eq!(s.duration, Some(0.137));
}

#[test]
fn pytest_counts_and_failures() {
    let s = run("pytest -q", PYTEST, 3).expect("a summary");
    // 2 failed + 1 error; 1 passed; 1 skipped + 1 xfailed.
    assert_eq!(counts_of(&s), (1, 3, 2));
    let names: Vec<&str> = s.failures.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "test_a.py::test_five",
            "test_a.py::test_two",
            "test_a.py::TestK::test_six"
        ]
    );
    assert_eq!(s.failures[1].location.as_deref(), Some("test_a.py:5"));
    assert_eq!(
        s.failures[1].message,
        "AssertionError: x is not two\nassert 1 == 2"
    );
    assert_eq!(s.failures[0].message, "RuntimeError: fixture boom");
    assert_eq!(s.duration, Some(0.02));
}

#[test]
fn pytest_counts_while_it_runs() {
    let head = PYTEST.split("=== ERRORS").next().expect("the head");
    let mut r = TestRun::for_command("python -m pytest", 0).expect("a test command");
    r.feed(head.as_bytes(), head.len() as u64);
    let live = r.live().expect("live counts");
    // ".FsxEF": E (an error) counts as failed, x (xfail) as skipped.
    assert_eq!(counts_of(&live), (1, 3, 2));
    assert!(!live.finished);
    // Cut there, it has no totals: no summary at the end.
    assert_eq!(r.finish(), None);
}

#[test]
fn node_tap_counts_and_failures() {
    let s = run("node --test", NODE_TAP, 11).expect("a summary");
    // tests 8: pass 4, fail 2, skipped 1 + todo 1.
    assert_eq!(counts_of(&s), (4, 2, 2));
    let names: Vec<&str> = s.failures.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["fails", "inner fails"]);
    assert_eq!(
        s.failures[0].location.as_deref(),
        Some("/w/node/t.test.js:4:1")
    );
    assert!(s.failures[0].message.contains("1 !== 2"));
    assert_eq!(s.failures[1].message, "inner boom");
}

#[test]
fn node_spec_counts_and_failures() {
    let s = run("node --test", NODE_SPEC, 64).expect("a summary");
    assert_eq!(counts_of(&s), (4, 2, 2));
    assert_eq!(s.failures[0].name, "fails");
    assert_eq!(s.failures[0].location.as_deref(), Some("t.test.js:4:1"));
    assert!(
        s.failures[0].message.contains("1 !== 2"),
        "{}",
        s.failures[0].message
    );
}

const JEST: &str = "PASS ./sum.test.js
FAIL ./b.test.js
  \u{25cf} math \u{203a} adds

    expect(received).toBe(expected) // Object.is equality

    Expected: 3
    Received: 4

      3 | describe('math', () => {
      4 |   test('adds', () => {
    > 5 |     expect(1 + 3).toBe(3);
        |                   ^
      6 |   });

      at Object.toBe (b.test.js:5:19)

Test Suites: 1 failed, 1 passed, 2 total
Tests:       1 failed, 1 skipped, 2 passed, 4 total
Snapshots:   0 total
Time:        0.412 s
Ran all test suites.
";

#[test]
fn jest_counts_and_failures() {
    let s = run("npx jest", JEST, 9).expect("a summary");
    assert_eq!(counts_of(&s), (2, 1, 1));
    assert_eq!(s.failures[0].name, "math \u{203a} adds");
    assert_eq!(s.failures[0].location.as_deref(), Some("b.test.js:5:19"));
    assert_eq!(
        s.failures[0].message,
        "expect(received).toBe(expected) // Object.is equality\n\nExpected: 3\nReceived: 4"
    );
    assert_eq!(s.duration, Some(0.412));
}

const VITEST: &str = " RUN  v3.0.0 /w

 \u{2713} a.test.ts (2 tests) 2ms
 \u{276f} b.test.ts (2 tests | 1 failed) 5ms
   \u{d7} math > adds 3ms
     \u{2192} expected 4 to be 3 // Object.is equality

\u{23af}\u{23af}\u{23af} Failed Tests 1 \u{23af}\u{23af}\u{23af}

 FAIL  b.test.ts > math > adds
AssertionError: expected 4 to be 3 // Object.is equality
 \u{276f} b.test.ts:5:19
      3| describe('math', () => {

\u{23af}\u{23af}\u{23af}[1/1]\u{23af}

 Test Files  1 failed | 1 passed (2)
      Tests  1 failed | 3 passed (4)
   Start at  12:00:00
   Duration  300ms (transform 20ms, setup 0ms)
";

#[test]
fn vitest_counts_and_failures() {
    let s = run("npx vitest run", VITEST, 13).expect("a summary");
    assert_eq!(counts_of(&s), (3, 1, 0));
    assert_eq!(s.failures[0].name, "b.test.ts > math > adds");
    assert_eq!(s.failures[0].location.as_deref(), Some("b.test.ts:5:19"));
    assert_eq!(
        s.failures[0].message,
        "AssertionError: expected 4 to be 3 // Object.is equality"
    );
    assert_eq!(s.duration, Some(0.3));
}

const GO_VERBOSE: &str = "=== RUN   TestA
--- PASS: TestA (0.00s)
=== RUN   TestB
    a_test.go:10: want 1, got 2
--- FAIL: TestB (0.00s)
=== RUN   TestC
    a_test.go:14: later
--- SKIP: TestC (0.00s)
FAIL
FAIL\texample.com/m\t0.002s
=== RUN   TestD
--- PASS: TestD (0.00s)
PASS
ok  \texample.com/m2\t0.003s
?   \texample.com/m3\t[no test files]
";

#[test]
fn go_verbose_counts_and_failures() {
    let s = run("go test -v ./...", GO_VERBOSE, 6).expect("a summary");
    assert_eq!(counts_of(&s), (2, 1, 1));
    assert_eq!(s.failures[0].name, "TestB");
    assert_eq!(s.failures[0].location.as_deref(), Some("a_test.go:10"));
    assert_eq!(s.failures[0].message, "a_test.go:10: want 1, got 2");
    assert_eq!(s.duration, Some(0.005));
}

#[test]
fn go_without_v_names_no_passing_tests_so_gets_no_summary() {
    let quiet = "--- FAIL: TestB (0.00s)\n    a_test.go:10: want 1, got 2\nFAIL\nFAIL\texample.com/m\t0.002s\nok  \texample.com/m2\t0.003s\n";
    assert_eq!(run("go test ./...", quiet, 4096), None);
}

const GO_JSON: &str = r#"{"Action":"start","Package":"m"}
{"Action":"run","Package":"m","Test":"TestA"}
{"Action":"output","Package":"m","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Package":"m","Test":"TestA","Elapsed":0}
{"Action":"run","Package":"m","Test":"TestB"}
{"Action":"output","Package":"m","Test":"TestB","Output":"    a_test.go:10: want 1, got 2\n"}
{"Action":"output","Package":"m","Test":"TestB","Output":"--- FAIL: TestB (0.00s)\n"}
{"Action":"fail","Package":"m","Test":"TestB","Elapsed":0}
{"Action":"skip","Package":"m","Test":"TestC","Elapsed":0}
{"Action":"fail","Package":"m","Elapsed":0.004}
"#;

#[test]
fn go_json_counts_and_failures() {
    let s = run("go test -json ./...", GO_JSON, 17).expect("a summary");
    assert_eq!(counts_of(&s), (1, 1, 1));
    assert_eq!(s.failures[0].name, "TestB");
    assert_eq!(s.failures[0].location.as_deref(), Some("a_test.go:10"));
    assert_eq!(s.failures[0].message, "a_test.go:10: want 1, got 2");
    // A package that started and never ended: the run is not whole.
    let cut = GO_JSON.replace(r#"{"Action":"fail","Package":"m","Elapsed":0.004}"#, "");
    assert_eq!(run("go test -json", &cut, 64), None);
}

#[test]
fn junit_reports() {
    let xml = r#"<?xml version="1.0"?>
<testsuites time="1.5" tests="4">
  <testsuite name="s" tests="4">
    <testcase classname="a.B" name="passes" time="0.1"/>
    <testcase classname="a.B" name="fails" file="a/B.java" line="12">
      <failure message="expected &lt;1&gt; but was &lt;2&gt;"><![CDATA[at a.B.fails(B.java:12)]]></failure>
    </testcase>
    <testcase classname="a.B" name="errs"><error message="boom"/></testcase>
    <testcase classname="a.B" name="skips"><skipped/></testcase>
  </testsuite>
</testsuites>"#;
    let s = junit::parse(xml).expect("a summary");
    assert_eq!((s.runner.as_str(), counts_of(&s)), ("junit", (1, 2, 1)));
    assert_eq!(s.failures[0].name, "a.B.fails");
    assert_eq!(s.failures[0].location.as_deref(), Some("a/B.java:12"));
    assert_eq!(
        s.failures[0].message,
        "expected <1> but was <2>\nat a.B.fails(B.java:12)"
    );
    assert_eq!(s.failures[1].message, "boom");
    assert_eq!(s.duration, Some(1.5));
    assert_eq!(junit::parse("<html>no</html>"), None);
    assert_eq!(junit::parse("<testsuite><testcase name=\"x\">"), None);
}

/// Every fixture cut short at many points: each cut gives no summary at
/// all or the whole one (a cut after the totals), never other counts.
#[test]
fn a_run_cut_short_never_gets_wrong_counts() {
    let cases = [
        ("cargo test", CARGO),
        ("cargo nextest run", NEXTEST),
        ("pytest", PYTEST),
        ("node --test", NODE_TAP),
        ("node --test", NODE_SPEC),
        ("npx jest", JEST),
        ("npx vitest run", VITEST),
        ("go test -v", GO_VERBOSE),
        ("go test -json", GO_JSON),
    ];
    for (command, text) in cases {
        let whole = run(command, text, 4096).expect("the whole run");
        for cut in (0..text.len())
            .step_by(3)
            .filter(|c| text.is_char_boundary(*c))
        {
            let head = &text[..cut];
            // go prints no totals: output that stops right after a
            // package's verdict is a whole run of fewer packages, and its
            // counts are those packages' (docs/agents.md).
            let last_line = head.rsplit_once('\n').map(|(h, _)| h.rsplit('\n').next());
            if command == "go test -v" && last_line.flatten().is_some_and(|l| l.contains('\t')) {
                continue;
            }
            if let Some(s) = run(command, head, 4096) {
                assert_eq!(counts_of(&s), counts_of(&whole), "{command} cut at {cut}");
            }
        }
    }
}

/// Two runs of one runner interleaved line by line (as two test commands
/// writing to one terminal): no summary, or the counts of a whole run.
#[test]
fn interleaved_runs_never_get_wrong_counts() {
    let cargo_b = CARGO.replace("tests::", "other::");
    let lines_a: Vec<&str> = CARGO.lines().collect();
    let lines_b: Vec<&str> = cargo_b.lines().collect();
    let mut mixed = String::new();
    for i in 0..lines_a.len().max(lines_b.len()) {
        for lines in [&lines_a, &lines_b] {
            if let Some(l) = lines.get(i) {
                mixed.push_str(l);
                mixed.push('\n');
            }
        }
    }
    assert_eq!(run("cargo test", &mixed, 4096), None);
    // A totals line torn by another writer's bytes.
    let torn = PYTEST.replace(" 1 passed,", " 1 pas\nthread 'x' panicked\nsed,");
    assert_eq!(run("pytest", &torn, 4096), None);
    let torn = CARGO.replace("1 passed; 2 failed", "1 passed; 2 fa\n...\niled");
    assert_eq!(run("cargo test", &torn, 4096), None);
}

#[test]
fn commands_that_are_not_test_runs_are_not_read() {
    assert!(candidates("npm run dev").is_none());
    assert!(candidates("python -m http.server").is_none());
    assert_eq!(candidates("cargo test -p x"), Some(&[Runner::Libtest][..]));
    assert_eq!(candidates("cd app && npm test"), Some(ANY));
    assert_eq!(
        candidates("/usr/bin/pytest -x"),
        Some(&[Runner::Pytest][..])
    );
}

#[test]
fn a_flood_of_long_lines_is_skipped_whole() {
    let long = "x".repeat(MAX_LINE * 3);
    let text = format!("running 1 test\n{long}\ntest a ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n");
    let s = run("cargo test", &text, 1000).expect("a summary");
    assert_eq!(counts_of(&s), (1, 0, 0));
}

#[test]
fn failures_past_the_cap_are_counted_not_kept() {
    let mut text = String::from("running 60 tests\n");
    for i in 0..60 {
        text.push_str(&format!("test t{i} ... FAILED\n"));
    }
    text.push_str("test result: FAILED. 0 passed; 60 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n");
    let s = run("cargo test", &text, 4096).expect("a summary");
    assert_eq!(s.failed, 60);
    assert_eq!(s.failures.len(), MAX_FAILURES);
}

#[test]
fn pytest_progress_counts_before_its_line_ends() {
    let head = "============================= test session starts ==============================\ncollected 4 items\n\ntest_a.py .F";
    let mut r = TestRun::for_command("pytest", 0).expect("a test command");
    r.feed(head.as_bytes(), head.len() as u64);
    assert!(r.take_changed());
    assert_eq!(counts_of(&r.live().expect("live")), (1, 1, 0));
    r.feed(b"s", head.len() as u64 + 1);
    assert_eq!(counts_of(&r.live().expect("live")), (1, 1, 1));
}
