//! Docs that run: every fenced example in README.md and docs/*.md is
//! executed against a real daemon in a temp PROCD_HOME, and what it shows
//! is checked — Python and Node clients, shell lines, the README's tour,
//! and each JSON-RPC request of docs/protocol.md, whose documented answer
//! (and subscription items) must be the real one: the same keys, every
//! array element, equal values except for what differs by run.
//!
//! A comment right before a block says how it is checked:
//! - `<!-- doc: expect "a" "b" -->`: it runs, exits 0 and prints each string;
//! - `<!-- doc: session "COMMAND" [pty] -->`: (protocol.md) the session the
//!   requests' `proc_3f2a` stands for runs COMMAND;
//! - `<!-- doc: tour -->`: the README's tour (`readme_tour_runs`);
//! - `<!-- doc: skip — why -->`: not run, for the reason given.
//!
//! The only substitutions: `proc_3f2a`/`proc_9b1c` (and longer ids
//! starting so) become real session ids, `/home/me/project` and
//! `/home/u/app` a temp project directory.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output, Stdio};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[derive(Debug, Clone)]
struct Block {
    file: String,
    line: usize,
    lang: String,
    text: String,
    /// The `doc:` comment before it, without `doc:`.
    marker: Option<String>,
}

impl Block {
    fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// The strings of `expect "…" "…"` (JSON string syntax).
    fn expected(&self) -> Option<Vec<String>> {
        let rest = self.marker.as_deref()?.strip_prefix("expect")?;
        let mut out = Vec::new();
        let mut de = serde_json::Deserializer::from_str(rest).into_iter::<String>();
        for s in &mut de {
            out.push(s.unwrap_or_else(|e| panic!("{}: bad expect marker: {e}", self.place())));
        }
        Some(out)
    }
}

/// The fenced blocks of a markdown file.
fn blocks(rel: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(rel)).expect("read doc");
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    let mut marker: Option<String> = None;
    while let Some((i, line)) = lines.next() {
        if let Some(lang) = line.strip_prefix("```") {
            let mut body = String::new();
            for (_, l) in lines.by_ref() {
                if l.starts_with("```") {
                    break;
                }
                body.push_str(l);
                body.push('\n');
            }
            out.push(Block {
                file: rel.to_string(),
                line: i + 1,
                lang: lang.trim().to_string(),
                text: body,
                marker: marker.take(),
            });
        } else if let Some(m) = line
            .trim()
            .strip_prefix("<!-- doc:")
            .and_then(|m| m.strip_suffix("-->"))
        {
            marker = Some(m.trim().to_string());
        } else if !line.trim().is_empty() {
            marker = None;
        }
    }
    out
}

fn all_blocks() -> Vec<Block> {
    let mut files = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files.iter().flat_map(|f| blocks(f)).collect()
}

fn is_skipped(b: &Block) -> bool {
    b.marker.as_deref().is_some_and(|m| m.starts_with("skip"))
}

#[test]
fn every_example_is_run_or_says_why_not() {
    let mut problems = Vec::new();
    for b in all_blocks() {
        if is_skipped(&b) {
            let why = b.marker.as_deref().unwrap_or_default();
            if why
                .trim_start_matches("skip")
                .trim_matches([' ', '—', '-'])
                .len()
                < 10
            {
                problems.push(format!("{}: a skip must say why", b.place()));
            }
            continue;
        }
        let runs = match b.lang.as_str() {
            // A diagram, not code.
            "" => true,
            "python" | "js" => b.expected().is_some(),
            "sh" => b.expected().is_some() || b.marker.as_deref() == Some("tour"),
            "json" => b.file == "docs/protocol.md",
            "json response" => b.file == "docs/protocol.md",
            // Every manifest is validated (`the_cluster_manifests_…`).
            "yaml" => b.file == "docs/cluster.md",
            _ => false,
        };
        if !runs {
            problems.push(format!(
                "{}: a ```{} block that no test runs (add `<!-- doc: expect … -->` or `<!-- doc: skip — why -->`)",
                b.place(),
                b.lang
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A temp project directory with an `npm run dev` that says "ready" and
/// answers what it reads.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("project dir");
    std::fs::write(
        dir.path().join("package.json"),
        r#"{"name":"demo","version":"1.0.0","scripts":{"dev":"echo 'dev server ready on port 5173'; while read line; do echo \"got $line\"; done"}}"#,
    )
    .expect("package.json");
    dir
}

fn substitute(text: &str, project: &Path, ids: &[(&str, &str)]) -> String {
    let mut out = text
        .replace("/home/me/project", &project.display().to_string())
        .replace("/home/u/app", &project.display().to_string());
    for (placeholder, id) in ids {
        // Longer spellings of the placeholder (`proc_3f2a9b1c0d4e`) too.
        let re = regex::Regex::new(&format!("{placeholder}[0-9a-f]*")).expect("regex");
        out = re.replace_all(&out, *id).into_owned();
    }
    out
}

/// PATH with the procd under test first.
fn path_with_procd() -> String {
    let bin = Path::new(BIN).parent().expect("bin dir");
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Runs a program on a script file with the daemon's home, in `project`.
fn run_example(program: &str, script: &Path, d: &Daemon, project: &Path) -> Output {
    Command::new(program)
        .arg(script)
        .current_dir(project)
        .env("PROCD_HOME", d.home.path())
        .env("HOME", d.home.path())
        .env("PATH", path_with_procd())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"))
}

fn check_output(b: &Block, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}: exited {:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        b.place(),
        out.status
    );
    for want in b.expected().unwrap_or_default() {
        assert!(
            stdout.contains(&want),
            "{}: the output lacks {want:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            b.place()
        );
    }
}

fn run_blocks(lang: &str, program: &str, ext: &str) -> usize {
    let mut ran = 0;
    for b in all_blocks() {
        if b.lang != lang || is_skipped(&b) || b.expected().is_none() {
            continue;
        }
        let d = Daemon::start();
        let project = project();
        let script = project.path().join(format!("example.{ext}"));
        std::fs::write(&script, substitute(&b.text, project.path(), &[])).expect("script");
        let out = run_example(program, &script, &d, project.path());
        check_output(&b, &out);
        ran += 1;
    }
    ran
}

#[test]
fn python_examples_run() {
    assert!(run_blocks("python", "python3", "py") >= 1);
}

#[test]
fn node_examples_run() {
    if machine_lacks("PROCD_TEST_NO_NODE", "node") {
        return;
    }
    assert!(
        Command::new("node").arg("--version").output().is_ok(),
        "node is not installed (apt-get install nodejs), or set PROCD_TEST_NO_NODE=1"
    );
    assert!(run_blocks("js", "node", "js") >= 1);
}

#[test]
fn shell_examples_run() {
    let mut ran = 0;
    for b in all_blocks() {
        if b.lang != "sh" || is_skipped(&b) || b.expected().is_none() {
            continue;
        }
        let d = Daemon::start();
        let project = project();
        let script = project.path().join("example.sh");
        let body = format!(
            "set -euo pipefail\n{}",
            substitute(&b.text, project.path(), &[])
        );
        std::fs::write(&script, body).expect("script");
        let out = run_example("bash", &script, &d, project.path());
        check_output(&b, &out);
        ran += 1;
    }
    assert!(ran >= 3, "{ran}");
}

/// The README's tour, line by line, each with what its comment promises.
#[test]
fn readme_tour_runs() {
    if Command::new("npm").arg("--version").output().is_err() {
        eprintln!("skipped: npm is not installed (the tour's `npm run dev` needs it)");
        return;
    }
    let tour = all_blocks()
        .into_iter()
        .find(|b| b.marker.as_deref() == Some("tour"))
        .expect("the README's tour");
    let lines: Vec<&str> = tour.text.lines().collect();
    type Check = fn(&Output, &str) -> Result<(), String>;
    fn code(out: &Output, want: i32) -> Result<(), String> {
        (out.status.code() == Some(want))
            .then_some(())
            .ok_or(format!("exit {:?}, not {want}", out.status.code()))
    }
    fn has(out: &Output, what: &str) -> Result<(), String> {
        code(out, 0)?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.contains(what)
            .then_some(())
            .ok_or(format!("no {what:?} in {text:?}"))
    }
    // (the line's command, what its comment says, as a check)
    let checks: [(&str, Check); 15] = [
        ("procd spawn --ready-output ready -- npm run dev", |o, _| {
            has(o, "proc_")?;
            has(o, "\nready")
        }),
        ("procd ps", |o, id| {
            has(o, id)?;
            has(o, "running")?;
            has(o, "MEM")
        }),
        ("procd poll proc_3f2a", |o, _| has(o, "ready after")),
        ("procd logs proc_3f2a", |o, _| has(o, "dev server ready")),
        ("procd logs proc_3f2a --grep ready", |o, _| {
            has(o, ":dev server ready")
        }),
        ("procd send proc_3f2a \"rs\"", |o, _| has(o, "sent 3 bytes")),
        ("procd kill proc_3f2a", |o, id| {
            has(o, &format!("{id} killed"))
        }),
        ("procd spawn -- 'sleep 1; echo done; exit 3'", |o, _| {
            has(o, "proc_")
        }),
        // Printed a second after the spawn: only a follower sees it.
        ("procd logs -f proc_9b1c", |o, _| has(o, "done")),
        ("procd wait proc_9b1c --timeout 60", |o, _| code(o, 3)),
        // Several sessions: each line carries its session's id.
        ("procd grep -C 1 done --since 5m", |o, _| has(o, ":1:done")),
        // What it did is looked at below, once it has ended.
        (
            "procd spawn --sandbox workspace-write -- 'touch ok /etc/no'",
            |o, _| has(o, "proc_"),
        ),
        (
            "procd sh dev -- 'mkdir -p out && cd out && export MODE=fast'",
            |o, _| code(o, 0),
        ),
        ("procd sh dev -- 'echo $MODE in $PWD; exit 4'", |o, _| {
            code(o, 4)?;
            let text = String::from_utf8_lossy(&o.stdout);
            (text.starts_with("fast in /") && text.ends_with("/out\n"))
                .then_some(())
                .ok_or(format!("{text:?}"))
        }),
        ("procd status", |o, _| has(o, "running")),
    ];
    let commands: Vec<&str> = lines
        .iter()
        .map(|l| l.split("  #").next().unwrap_or(l).trim())
        .collect();
    assert_eq!(
        commands,
        checks.iter().map(|c| c.0).collect::<Vec<_>>(),
        "the tour changed: update the checks in tests/docs.rs"
    );
    let d = Daemon::start();
    let project = project();
    let mut ids: Vec<(&str, String)> = Vec::new();
    for (command, check) in checks {
        let pairs: Vec<(&str, &str)> = ids.iter().map(|(p, id)| (*p, id.as_str())).collect();
        let line = substitute(command, project.path(), &pairs);
        let out = Command::new("bash")
            .args(["-c", &line])
            .current_dir(project.path())
            .env("PROCD_HOME", d.home.path())
            .env("PATH", path_with_procd())
            .stdin(Stdio::null())
            .output()
            .expect("run a tour line");
        let first = ids.first().map(|(_, id)| id.clone()).unwrap_or_default();
        if let Err(e) = check(&out, &first) {
            panic!(
                "README tour: `{line}`: {e}\n--- stderr\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if command.starts_with("procd spawn") {
            let text = String::from_utf8_lossy(&out.stdout);
            let id = text
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            let placeholder = if ids.is_empty() {
                "proc_3f2a"
            } else {
                "proc_9b1c"
            };
            ids.push((placeholder, id));
        }
    }
    let (_, sandboxed) = ids.last().expect("the sandboxed spawn");
    let waited = d.ok("wait", json!({"session_id": sandboxed, "timeout_s": 20}));
    assert_eq!(waited["status"], "exited", "{waited}");
    let log = d.ok("log", json!({"session_id": sandboxed}));
    assert!(
        project.path().join("ok").exists() && !Path::new("/etc/no").exists(),
        "the sandboxed line: {log}"
    );
    assert!(
        log["output"].to_string().contains("Permission denied"),
        "{log}"
    );
}

/// Keys whose values differ from run to run (or machine to machine): for
/// these only the JSON type is compared.
const VARYING: &[&str] = &[
    "pid",
    "started_at",
    "exited_at",
    "uptime_seconds",
    "waited_ms",
    "seq",
    "after_ms",
    "ready_after_ms",
    "resources",
    "socket",
    "state_dir",
    "version",
    "containment",
    "containment_reason",
    "limits_available",
    "systemd_unit",
    "instance",
    // The jobserver's tokens are the machine's CPUs by default.
    "jobserver",
];

/// Whether `real` is what `documented` shows: the same keys both ways,
/// every array element, and equal values — statuses, exit codes, error
/// codes, output — except under `VARYING` keys, where the JSON type must
/// match (a documented null there stands for any value).
fn same_answer(documented: &Value, real: &Value, at: &str) -> Result<(), String> {
    let varying = at
        .split('.')
        .any(|key| VARYING.contains(&key.split('[').next().unwrap_or(key)));
    match (documented, real) {
        (Value::Object(d), Value::Object(r)) => {
            for k in d.keys() {
                if !r.contains_key(k) {
                    return Err(format!("{at}.{k}: documented, not in the real answer"));
                }
            }
            for (k, v) in r {
                match d.get(k) {
                    None => {
                        return Err(format!(
                            "{at}.{k}: in the real answer ({v}), not documented"
                        ))
                    }
                    Some(dv) => same_answer(dv, v, &format!("{at}.{k}"))?,
                }
            }
            Ok(())
        }
        (Value::Array(d), Value::Array(r)) if d.len() == r.len() => d
            .iter()
            .zip(r)
            .enumerate()
            .try_for_each(|(i, (d, r))| same_answer(d, r, &format!("{at}[{i}]"))),
        (Value::Array(d), Value::Array(r)) => Err(format!(
            "{at}: documented {} elements, real {}",
            d.len(),
            r.len()
        )),
        (Value::Null, _) if varying => Ok(()),
        (Value::Number(_), Value::Number(_))
        | (Value::String(_), Value::String(_))
        | (Value::Bool(_), Value::Bool(_))
            if varying =>
        {
            Ok(())
        }
        (d, r) if d == r => Ok(()),
        (d, r) => Err(format!("{at}: documented {d}, real {r}")),
    }
}

/// Every request line of docs/protocol.md gets an answer of the shape the
/// block after it documents. Set PROCD_DOCS_CAPTURE=1 to print the real
/// answers (to write the docs from).
#[test]
fn protocol_examples_answer_as_documented() {
    let capture = std::env::var_os("PROCD_DOCS_CAPTURE").is_some();
    let blocks = blocks("docs/protocol.md");
    let mut problems = Vec::new();
    let mut checked = 0;
    for (i, b) in blocks.iter().enumerate() {
        if b.lang != "json" || is_skipped(b) {
            continue;
        }
        let documented: Vec<Value> = match blocks.get(i + 1) {
            Some(next) if next.lang == "json response" => next
                .text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| {
                    serde_json::from_str(l)
                        .unwrap_or_else(|e| panic!("{}: not JSON: {e}: {l}", next.place()))
                })
                .collect(),
            _ if capture => Vec::new(),
            _ => {
                problems.push(format!("{}: no ```json response block after it", b.place()));
                continue;
            }
        };
        // `session "COMMAND" [pty] [notify] [exited]`
        let (command, flags) = match b.marker.as_deref().and_then(|m| m.strip_prefix("session")) {
            Some(rest) => {
                let mut de = serde_json::Deserializer::from_str(rest).into_iter::<String>();
                let command = de.next().and_then(Result::ok).expect("session command");
                (
                    command,
                    rest.rsplit('"').next().unwrap_or_default().to_string(),
                )
            }
            None => (
                "printf 'line %s\\n' $(seq 20); exec cat".to_string(),
                " pty".into(),
            ),
        };
        let pty = flags.contains("pty");
        let d = Daemon::with_config("monitor_interval_s = 0.1");
        let project = project();
        let id = d.spawn_with(json!({
            "command": command,
            "cwd": project.path(),
            "pty": pty,
            "task_id": "t1",
            "session_key": "chat-7",
            "notify_on_complete": flags.contains("notify"),
        }));
        d.read_until(&id, if pty { "line 20" } else { "" });
        if flags.contains("exited") {
            d.wait_exit(&id);
        }
        let mut conn = d.connect();
        // The real id for the placeholder, and (once answered) each
        // documented subscription id for the real one.
        let mut swaps: Vec<(String, String)> = Vec::new();
        let real_text = |text: &str, swaps: &[(String, String)]| {
            let mut out = substitute(text, project.path(), &[("proc_3f2a", &id)]);
            for (doc, real) in swaps {
                out = out.replace(doc.as_str(), real);
            }
            out
        };
        let mut notifications = Vec::new();
        // The documented answers in order, each with the count of
        // subscription items documented up to the next answer: the next
        // request is sent only once those have come, so the order is the
        // documented one (an unsubscribe never races its stream's items).
        let mut responses: Vec<(&Value, usize)> = Vec::new();
        let mut items_so_far = 0;
        for v in &documented {
            match v.get("id") {
                Some(_) => responses.push((v, items_so_far)),
                None => {
                    items_so_far += 1;
                    if let Some(last) = responses.last_mut() {
                        last.1 = items_so_far;
                    }
                }
            }
        }
        let requests: Vec<&str> = b.text.lines().filter(|l| !l.trim().is_empty()).collect();
        for (n, request) in requests.iter().enumerate() {
            let line = real_text(request, &swaps);
            let req: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}: {line}", b.place()));
            conn.send_raw(&line);
            let answer = loop {
                let v = conn.recv();
                if v.get("id") == req.get("id") {
                    break v;
                }
                notifications.push(v);
            };
            if capture {
                println!("{} {}\n{answer}", b.place(), req["method"]);
                continue;
            }
            checked += 1;
            let Some(&(doc, items_by_then)) = responses.get(n) else {
                problems.push(format!("{}: no documented answer for {line}", b.place()));
                continue;
            };
            while notifications.len() < items_by_then {
                notifications.push(conn.recv());
            }
            // A subscription id is the daemon's to pick.
            if req["method"]
                .as_str()
                .is_some_and(|m| m.starts_with("subscribe_"))
            {
                if let (Some(doc_sub), Some(sub)) =
                    (doc["result"].as_u64(), answer["result"].as_u64())
                {
                    swaps.push((doc_sub.to_string(), sub.to_string()));
                }
            }
            let mut doc: Value =
                serde_json::from_str(&real_text(&doc.to_string(), &swaps)).expect("JSON");
            if req["method"] == "spawn" && doc["result"]["session_id"].is_string() {
                // A new session: its id is the daemon's to pick.
                doc["result"]["session_id"] = answer["result"]["session_id"].clone();
            }
            if let Err(e) = same_answer(&doc, &answer, "") {
                problems.push(format!(
                    "{} ({}): {e}\n    real: {answer}",
                    b.place(),
                    req["method"]
                ));
            }
        }
        // Subscription items the block documents come in that order; an
        // item it does not document, received meanwhile, is a problem.
        let documented_items: Vec<Value> = documented
            .iter()
            .filter(|v| v.get("id").is_none())
            .map(|v| serde_json::from_str(&real_text(&v.to_string(), &swaps)).expect("JSON"))
            .collect();
        if capture {
            for item in &notifications {
                println!("{} (item)\n{item}", b.place());
            }
            continue;
        }
        if notifications.len() != documented_items.len() {
            problems.push(format!(
                "{}: {} subscription items documented, {} received: {notifications:?}",
                b.place(),
                documented_items.len(),
                notifications.len()
            ));
        }
        for (doc, real) in documented_items.iter().zip(&notifications) {
            checked += 1;
            if let Err(e) = same_answer(doc, real, "") {
                problems.push(format!("{} (item): {e}\n    real: {real}", b.place()));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(capture || checked >= 15, "{checked}");
}

/// The repository's own text files a reader might follow a reference from:
/// sources, tests, units, scripts and docs (not the build output).
fn repository_text() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let root = Path::new(ROOT);
    let mut paths = vec![root.join("README.md"), root.join(".ci/run")];
    for dir in ["crates", "tests", "docs", "systemd"] {
        walk(&root.join(dir), &mut paths);
    }
    paths
        .into_iter()
        .filter(|p| {
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
            ["rs", "md", "sh", "toml", "py", "service", "socket", ""].contains(&ext)
        })
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            let rel = p.strip_prefix(root).ok()?.to_string_lossy().into_owned();
            Some((rel, text))
        })
        .collect()
}

/// The repository stands on its own: no file points at a document it
/// lacks. The product specification and the list of numbered behaviours
/// live outside it, so the code names docs/ pages instead
/// (docs/behaviours.md restates the numbers), and every docs/ page named
/// anywhere exists.
#[test]
fn the_repository_names_no_document_it_lacks() {
    let root = Path::new(ROOT);
    // Built from parts so that this file does not name them itself.
    let outside = [
        ["SP", "EC"].concat(),
        ["../", "shared"].concat(),
        ["seed-", "behaviours"].concat(),
    ];
    let spec_word = regex::Regex::new(&format!(r"\b{}\b", outside[0])).expect("regex");
    let page = regex::Regex::new(r"docs/([A-Za-z_-]+\.md)|\]\(([A-Za-z_-]+\.md)\)").expect("regex");
    let number = regex::Regex::new(r"\b[RG][0-9]{1,2}\b").expect("regex");
    let behaviours =
        std::fs::read_to_string(root.join("docs/behaviours.md")).expect("docs/behaviours.md");
    let mut wrong = Vec::new();
    let files = repository_text();
    assert!(
        files.len() > 50,
        "the walk found only {} files",
        files.len()
    );
    for (rel, text) in &files {
        for (n, line) in text.lines().enumerate() {
            let at = format!("{rel}:{}", n + 1);
            if spec_word.is_match(line) || outside[1..].iter().any(|o| line.contains(o.as_str())) {
                wrong.push(format!(
                    "{at}: names a document outside the repository: {}",
                    line.trim()
                ));
            }
            for m in page.captures_iter(line) {
                let name = m.get(1).or(m.get(2)).map(|g| g.as_str()).unwrap_or("");
                if !root.join("docs").join(name).is_file() {
                    wrong.push(format!("{at}: docs/{name} does not exist"));
                }
            }
            if rel.ends_with(".rs") {
                for m in number.find_iter(line) {
                    if !behaviours.contains(&format!("- {} ", m.as_str())) {
                        wrong.push(format!(
                            "{at}: behaviour {} is not in docs/behaviours.md",
                            m.as_str()
                        ));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// docs/cluster.md's Kubernetes manifests are valid objects of the API
/// they name: kubernetes-validate (in the project's venv, with the
/// schemas of Kubernetes 1.37, offline) in strict mode, which also refuses
/// fields the schema does not know. No cluster runs them here.
#[test]
fn the_cluster_manifests_validate_against_the_kubernetes_schemas() {
    let python = mcp_python();
    let validate = Path::new(&python).with_file_name("kubernetes-validate");
    let dir = tempfile::tempdir().expect("dir");
    let mut checked = 0;
    for b in all_blocks().iter().filter(|b| b.lang == "yaml") {
        let file = dir.path().join(format!("manifest-{checked}.yaml"));
        std::fs::write(&file, &b.text).expect("manifest");
        let out = Command::new(&validate)
            .arg("--strict")
            .arg(&file)
            .output()
            .expect("kubernetes-validate");
        let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && said.contains("passed"),
            "{}: {out:?}",
            b.place()
        );
        checked += 1;
    }
    assert!(checked >= 1, "docs/cluster.md has a manifest");
}

/// docs/ARCHITECTURE.md's "Counted" figures hold: `scripts/house-counts.py`
/// finds no file over 800 lines and no function over 80 in crates/*/src,
/// at most 3 synchronisation primitives in a session's shared part (and in
/// the `Restarts` its runs share), no call from a session's code into
/// the registry, and one place each where a session is made, put in the
/// table and has its end recorded (issue 49). A change that breaks one
/// fails here, not at the next count.
#[test]
fn the_house_counts_hold() {
    let out = Command::new("python3")
        .arg(Path::new(ROOT).join("scripts/house-counts.py"))
        .output()
        .expect("python3");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let count = |label: &str| -> usize {
        let line = text
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} in: {text}"));
        let rest = line[label.len()..].trim_start_matches(':').trim();
        rest.split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"))
    };
    assert_eq!(count("files over 800 lines"), 0, "{text}");
    assert_eq!(count("functions over 80 lines"), 0, "{text}");
    assert!(
        count("synchronisation primitives in Session") <= 3,
        "{text}"
    );
    assert!(
        count("synchronisation primitives in Restarts") <= 3,
        "{text}"
    );
    assert!(
        count("synchronisation primitives in a session's shared part") <= 3,
        "{text}"
    );
    assert_eq!(count("files that change a session's state"), 1, "{text}");
    assert_eq!(
        count("calls from a session's code into the registry"),
        0,
        "{text}"
    );
    assert_eq!(count("places a session is made"), 1, "{text}");
    assert_eq!(count("places a session is put in the table"), 1, "{text}");
    assert_eq!(count("places a session's end is recorded"), 1, "{text}");
}
