//! procd-bench: measures procd against its baselines in one run.
//!
//! Each figure is measured together with its baseline, alternating them
//! over several rounds, and reported as median/p99 and a ratio. The daemon
//! is this very binary re-executed as `--daemon-child HOME` (it links the
//! same daemon library as `procd`), so `cargo run --release -p procd-bench`
//! needs nothing else. Sessions and baselines run with a temp HOME so that
//! no dotfiles shape either (one row adds slow ones on purpose).
//!
//! Usage: procd-bench [--quick] [--json] [--only WORD] [--repeat N]
//!        procd-bench --reliability [--quick] [--json]   (fuzz, chaos, load)
//!
//! `--only WORD` runs just the figures whose group name contains WORD
//! (spawn, poll, exit, ingest, latency, idle, many, scale, kill, flood, observe;
//! and `peers`, `systemd` and `remote`, which run only when named: they
//! install or run other programs):
//! for profiling one. `--repeat N` runs the table N times and reports, per
//! figure, the run with the median ratio (or value) and the min–max
//! spread; a target is met when that median run meets it.

mod instructions;
mod jobs;
mod peers;
mod reliability;
mod remote;
mod scale;
mod search;
mod shells;
mod survival;
mod systemd;
mod watch;

use serde::Serialize;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Serialize)]
struct Row {
    metric: String,
    /// procd's figure.
    value: f64,
    /// The baseline measured in the same run (when there is one).
    baseline: Option<f64>,
    /// The peer the baseline is (Desktop Commander, pueue, …), if one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_name: Option<String>,
    ratio: Option<f64>,
    unit: String,
    target: String,
    met: bool,
    /// How the figure was taken (median, p99, rounds…).
    detail: String,
    /// With `--repeat`: min, median, max of the ratio (or of the value
    /// when there is no baseline) over the runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    spread: Option<[f64; 3]>,
}

/// How a figure compared with its baseline must come out.
enum Ratio {
    AtMost(f64),
    AtLeast(f64),
}

impl Row {
    /// A figure judged by its ratio to a baseline measured alongside it.
    fn against(
        metric: String,
        value: f64,
        baseline: f64,
        unit: &str,
        goal: Ratio,
        detail: String,
    ) -> Row {
        let ratio = value / baseline;
        let (target, met) = match goal {
            Ratio::AtMost(x) => (format!("<= {x}x"), ratio <= x),
            Ratio::AtLeast(x) => (format!(">= {x}x"), ratio >= x),
        };
        Row {
            metric,
            value,
            baseline: Some(baseline),
            baseline_name: None,
            ratio: Some(ratio),
            unit: unit.into(),
            target,
            met,
            detail,
            spread: None,
        }
    }

    /// A figure judged on its own: at most `limit`, in its own unit.
    fn at_most(metric: String, value: f64, unit: &str, limit: f64, detail: String) -> Row {
        Row {
            metric,
            value,
            baseline: None,
            baseline_name: None,
            ratio: None,
            unit: unit.into(),
            target: format!("<= {limit} {unit}"),
            met: value <= limit,
            detail,
            spread: None,
        }
    }

    /// A figure beside a peer's, taken in the same run: met when procd's
    /// is at least as good (lower, or higher when `higher_is_better`).
    fn beside(
        metric: String,
        value: f64,
        peer: f64,
        peer_name: String,
        unit: &str,
        higher_is_better: bool,
        detail: String,
    ) -> Row {
        let (target, met) = match higher_is_better {
            true => (format!(">= {peer_name}"), value >= peer),
            false => (format!("<= {peer_name}"), value <= peer),
        };
        Row {
            metric,
            value,
            baseline: Some(peer),
            baseline_name: Some(peer_name),
            ratio: (value > 0.0 && peer > 0.0).then(|| value / peer),
            unit: unit.into(),
            target,
            met,
            detail,
            spread: None,
        }
    }

    /// What the spread is taken over: the ratio, or the value.
    fn figure(&self) -> f64 {
        self.ratio.unwrap_or(self.value)
    }
}

/// One row per figure from `runs` of the whole table: the run whose
/// figure is the median (the lower middle for an even count) stands for
/// it, with the min, median and max over all runs.
fn combine(runs: Vec<Vec<Row>>) -> Vec<Row> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            let mut rows: Vec<&Row> = runs.iter().filter_map(|run| run.get(i)).collect();
            rows.sort_by(|a, b| a.figure().total_cmp(&b.figure()));
            let mid = rows[(rows.len() - 1) / 2];
            let mut row = mid.clone();
            row.spread = Some([
                rows[0].figure(),
                mid.figure(),
                rows[rows.len() - 1].figure(),
            ]);
            row.detail = format!("{} (the median of {} runs)", row.detail, rows.len());
            row
        })
        .collect()
}

struct Sizes {
    rounds: usize,
    polls: usize,
    ingest_bytes: u64,
    ingest_rounds: usize,
    latency_lines: usize,
    idle: Duration,
    many: usize,
    /// Live sessions the scale rows ask for (docs/decisions.md).
    scale: usize,
    /// SIGKILLs of the daemon for the survival rows (docs/survival.md).
    kills: usize,
    /// Requests counted under callgrind, the difference of two runs: as
    /// many as quick mode affords, so that a one-time cost that falls in
    /// one run and not the other is shared by many requests.
    counted: instructions::Counted,
    /// Rounds of each timed figure beside a peer.
    peer_rounds: usize,
    /// How long each side of the spawn-throughput row spawns for.
    throughput: Duration,
}

const QUICK: Sizes = Sizes {
    rounds: 8,
    polls: 300,
    ingest_bytes: 32 << 20,
    ingest_rounds: 1,
    latency_lines: 20,
    idle: Duration::from_secs(2),
    many: 40,
    scale: 100,
    kills: 4,
    counted: instructions::Counted {
        polls: (20, 1020),
        with_output: (20, 320),
    },
    peer_rounds: 3,
    throughput: Duration::from_secs(1),
};

const FULL: Sizes = Sizes {
    rounds: 60,
    polls: 5000,
    ingest_bytes: 1 << 30,
    ingest_rounds: 3,
    latency_lines: 200,
    idle: Duration::from_secs(10),
    many: 500,
    scale: scale::SCALE_ASKED,
    kills: 20,
    counted: instructions::Counted {
        polls: (100, 1100),
        with_output: (100, 1100),
    },
    peer_rounds: 15,
    throughput: Duration::from_secs(10),
};

/// Measures procd against baselines in the same run (README: Performance,
/// Reliability).
#[derive(clap::Parser, Debug)]
#[command(name = "procd-bench")]
struct Args {
    /// Small sizes: a smoke run (figures not for comparison).
    #[arg(long)]
    quick: bool,
    /// Print the rows as JSON.
    #[arg(long)]
    json: bool,
    /// Run only the groups whose name contains WORD (spawn, poll, exit,
    /// ingest, latency, idle, many, scale, kill, flood, observe, search, survival,
    /// instructions).
    #[arg(long, value_name = "WORD")]
    only: Option<String>,
    /// Run the table N times; report the median run and the spread.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// The fuzzer, chaos and load runs instead of the table.
    #[arg(long)]
    reliability: bool,
    /// Internal: run as the daemon under test for HOME.
    #[arg(long, value_name = "HOME", hide = true)]
    daemon_child: Option<PathBuf>,
    /// Internal: run the line echo server on SOCKET (one connection).
    #[arg(long, value_name = "SOCKET", hide = true)]
    echo_child: Option<PathBuf>,
    /// Internal: the same echo on a multi-thread Tokio runtime.
    #[arg(long, value_name = "SOCKET", hide = true)]
    tokio_echo_child: Option<PathBuf>,
    /// Internal: answer polls and reads as cheaply as serde_json can, on
    /// SOCKET.
    #[arg(long, value_name = "SOCKET", hide = true)]
    floor_child: Option<PathBuf>,
}

fn main() {
    use clap::Parser;
    let args = Args::parse();
    if let Some(home) = &args.daemon_child {
        std::process::exit(run_daemon(home));
    }
    if let Some(socket) = &args.echo_child {
        std::process::exit(instructions::run_echo(socket));
    }
    if let Some(socket) = &args.tokio_echo_child {
        std::process::exit(instructions::run_tokio_echo(socket));
    }
    if let Some(socket) = &args.floor_child {
        std::process::exit(instructions::run_floor(socket));
    }
    let (quick, as_json) = (args.quick, args.json);
    if args.reliability {
        let sizes = if quick {
            reliability::QUICK
        } else {
            reliability::FULL
        };
        let figures = reliability::run(&sizes);
        if as_json {
            println!(
                "{}",
                serde_json::to_string_pretty(&figures).unwrap_or_default()
            );
        } else {
            reliability::print(&figures);
        }
        return;
    }
    let sizes = if quick { QUICK } else { FULL };
    let only = args.only.as_deref();
    let repeat = args.repeat as usize;
    let rows = if repeat == 1 {
        run_all(&sizes, only)
    } else {
        combine((0..repeat).map(|_| run_all(&sizes, only)).collect())
    };
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
    } else {
        print_table(&rows, quick);
    }
}

fn run_daemon(home: &Path) -> i32 {
    let paths = procd_gateway::Paths::resolve(Some(home));
    let config = match procd_gateway::config::load(&paths.config_file, false) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("procd-bench daemon: {e}");
            return 2;
        }
    };
    procd_server::run(procd_server::DaemonOptions {
        paths,
        config,
        mode: procd_server::LaunchMode::Foreground,
        command_line: "procd-bench --daemon-child".into(),
    })
}

// ----- the daemon under test ------------------------------------------------------

/// A temp home under /tmp (removed when dropped) holding `config` as its
/// config.toml.
pub(crate) fn temp_home(prefix: &str, config: &str) -> tempfile::TempDir {
    let home = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .expect("temp home");
    std::fs::write(home.path().join("config.toml"), config).expect("config");
    home
}

pub(crate) struct Daemon {
    /// The temp home this daemon owns (None: a home the caller keeps).
    _owned: Option<tempfile::TempDir>,
    home: PathBuf,
    child: Child,
}

impl Daemon {
    fn start() -> Daemon {
        Daemon::with_config("")
    }

    pub(crate) fn with_config(extra: &str) -> Daemon {
        // Room for what a benchmark starts, unless `extra` says otherwise.
        let mut config: String = [
            "max_running = 2000",
            "max_sessions = 4000",
            "finished_ttl_s = 3600",
        ]
        .iter()
        .filter(|line| !extra.contains(line.split(' ').next().unwrap_or("")))
        .map(|line| format!("{line}\n"))
        .collect();
        config.push_str(extra);
        let home = temp_home("pb", &config);
        let mut d = Daemon::in_home(home.path());
        d._owned = Some(home);
        d
    }

    /// A daemon on a home the caller keeps (e.g. across crashes).
    pub(crate) fn in_home(home: &Path) -> Daemon {
        let exe = std::env::current_exe().expect("own path");
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(home.join("daemon.err"))
            .expect("stderr file");
        let child = Command::new(exe)
            .arg("--daemon-child")
            .arg(home)
            .env("HOME", home)
            .env("PROCD_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("start the daemon");
        let d = Daemon {
            _owned: None,
            home: home.to_path_buf(),
            child,
        };
        let mut d = d;
        // Until its daemon answers: accepting a connection is not enough
        // right after a crash of the keeper and the daemon both, when the
        // kernel may still hold the dead daemon's listening socket (it was
        // in flight between them) and reset what it accepted.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let pid = d.pid();
            let answered = Line::try_open(&d.socket())
                .and_then(|mut c| c.try_call("status", json!({})))
                .is_ok_and(|s| pid != 0 && s["pid"].as_i64() == Some(i64::from(pid)));
            if answered {
                break;
            }
            assert!(
                Instant::now() < deadline && d.is_alive(),
                "the daemon did not start: {}\n{}",
                d.stderr(),
                describe_recorded(home)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        d
    }

    pub(crate) fn socket(&self) -> PathBuf {
        self.home.join("run/procd.sock")
    }

    /// The daemon that serves: the keeper's child running this program
    /// (docs/survival.md); 0 while none does.
    /// The keeper: the process this helper started.
    pub(crate) fn keeper_pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub(crate) fn pid(&self) -> i32 {
        let keeper = self.child.id();
        std::fs::read_to_string(format!("/proc/{keeper}/task/{keeper}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .find(|pid| {
                std::fs::read_link(format!("/proc/{pid}/exe")).ok() == std::env::current_exe().ok()
            })
            .unwrap_or(0)
    }

    pub(crate) fn connect(&self) -> Line {
        Line::open(&self.socket())
    }

    /// SIGKILL of the keeper and then the daemon: both gone, as after a
    /// crash nothing survives (the sessions are recovered detached or lost).
    pub(crate) fn crash(mut self) {
        let daemon = self.pid();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if daemon > 0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(daemon),
                nix::sys::signal::Signal::SIGKILL,
            );
            // Until it is dead it still listens: a daemon started now would
            // find it running, and a client would reach it as it dies.
            wait_dead(daemon);
        }
        // Drop finds the keeper reaped: nothing more to do.
    }

    pub(crate) fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(self.home.join("daemon.err")).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // The keeper tells its daemon to end every session, then exits.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = self.child.wait();
        }
        remove_cgroups(&self.home);
    }
}

/// What `run/gateway.json` names, and what /proc says of those processes:
/// why a daemon found another one running.
fn describe_recorded(home: &Path) -> String {
    let record = std::fs::read_to_string(home.join("run/gateway.json")).unwrap_or_default();
    let mut out = format!("gateway.json: {record}");
    let named: Value = serde_json::from_str(&record).unwrap_or_default();
    for key in ["pid", "keeper_pid"] {
        let Some(pid) = named[key].as_i64() else {
            continue;
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let keep = |l: &&str| {
            ["State:", "PPid:", "Threads:"]
                .iter()
                .any(|k| l.starts_with(k))
        };
        let status: Vec<&str> = status.lines().filter(keep).collect();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        out += &format!(
            "\n{key} {pid}: {} {:?}",
            status.join(", "),
            String::from_utf8_lossy(&cmdline).replace('\0', " ")
        );
    }
    out
}

/// Removes what a daemon on `home` left empty in its cgroup tree (a
/// crashed one cannot; docs/containment.md). Never ends anything: a
/// crashed daemon's sessions are the next daemon's on the same home.
pub(crate) fn remove_cgroups(home: &Path) {
    let Ok(tree) = procd_sys::cgroup::CgroupTree::locate_instance(&home.join("state")) else {
        return;
    };
    // remove() leaves a populated cgroup alone.
    for cgroup in tree.sessions() {
        cgroup.remove();
    }
    tree.remove();
}

/// The `procd` built beside this program (the units and sshd run it).
pub(crate) fn procd_beside_us() -> PathBuf {
    let own = std::env::current_exe().expect("own path");
    let procd = own.with_file_name("procd");
    assert!(
        procd.exists(),
        "{} is missing: build it first (cargo build --release --workspace)",
        procd.display()
    );
    procd
}

/// A minimal line client: the same code talks to procd and to the echo
/// baseline, so the ratio measures the servers, not the clients.
pub(crate) struct Line {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    buf: String,
}

impl Line {
    pub(crate) fn open(socket: &Path) -> Line {
        Line::try_open(socket).expect("connect")
    }

    pub(crate) fn try_open(socket: &Path) -> std::io::Result<Line> {
        let s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Line {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
            buf: String::new(),
        })
    }

    /// The whole answer, or an I/O error (the daemon went away).
    pub(crate) fn try_call(&mut self, method: &str, params: Value) -> std::io::Result<Value> {
        let req = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            .to_string()
            + "\n";
        self.writer.write_all(req.as_bytes())?;
        self.buf.clear();
        if self.reader.read_line(&mut self.buf)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let v: Value = serde_json::from_str(&self.buf).map_err(std::io::Error::other)?;
        Ok(v.get("result").cloned().unwrap_or(v))
    }

    /// The result, or the whole answer when it is an error.
    pub(crate) fn result(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let req = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            .to_string()
            + "\n";
        let resp: Value = match serde_json::from_str(self.round_trip(&req)) {
            Ok(v) => v,
            Err(e) => return Err(json!(e.to_string())),
        };
        match resp.get("result") {
            Some(r) => Ok(r.clone()),
            None => Err(resp),
        }
    }

    fn round_trip(&mut self, line: &str) -> &str {
        self.writer.write_all(line.as_bytes()).expect("write");
        self.buf.clear();
        self.reader.read_line(&mut self.buf).expect("read");
        &self.buf
    }

    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        let req = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            .to_string()
            + "\n";
        let resp: Value = serde_json::from_str(self.round_trip(&req)).expect("JSON answer");
        match resp.get("result") {
            Some(r) => r.clone(),
            None => panic!("{method} failed: {resp}"),
        }
    }
}

/// Waits (at most 20 s) until a SIGKILLed `pid` has exited: gone, or a
/// zombie with no thread left. Its descriptor table empties earlier, but
/// its files (a listening socket) are let go of only after that, while it
/// still shows `R` or `D`.
pub(crate) fn wait_dead(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let exited = || {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return true;
        };
        let zombie = procd_sys::procfs::parse_stat(&stat).is_some_and(|s| s.is_dead());
        let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count);
        zombie && threads <= 1
    };
    while !exited() {
        assert!(Instant::now() < deadline, "pid {pid} survived SIGKILL");
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ----- statistics ----------------------------------------------------------------

fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let idx = ((v.len() - 1) as f64 * p).round() as usize;
    v[idx]
}

fn median(samples: &[f64]) -> f64 {
    percentile(samples, 0.5)
}

/// `rounds` samples of each of two measures taken in turn, each going
/// first every other round, so that neither always runs warm.
fn in_turn(
    rounds: usize,
    mut ours: impl FnMut() -> f64,
    mut base: impl FnMut() -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let (mut a, mut b) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for round in 0..rounds {
        if round % 2 == 0 {
            a.push(ours());
            b.push(base());
        } else {
            b.push(base());
            a.push(ours());
        }
    }
    (a, b)
}

fn now_epoch() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

// ----- the measurements ------------------------------------------------------------

fn run_all(s: &Sizes, only: Option<&str>) -> Vec<Row> {
    // The daemon the shared groups measure, started by the first of them
    // that runs (none of `--only peers`, say).
    let shared = std::cell::OnceCell::new();
    let d = || shared.get_or_init(Daemon::start);
    let groups: [(&str, &dyn Fn() -> Vec<Row>); 20] = [
        ("spawn", &|| {
            let mut rows = vec![spawn_wait(d(), s), spawn_wait_sandboxed(d(), s)];
            rows.extend(spawn_wait_slow_rc(s));
            rows.push(spawn_throughput(s));
            rows
        }),
        ("poll", &|| vec![poll_round_trip(d(), s)]),
        ("exit", &|| vec![exit_to_wait(d(), s)]),
        ("ingest", &|| vec![ingest(d(), s)]),
        ("latency", &|| vec![output_to_read(d(), s)]),
        ("idle", &|| idle(d(), s)),
        ("many", &|| many_sessions(s)),
        ("scale", &|| scale::scale_rows(s.scale, s.rounds)),
        ("kill", &|| kill_rows(s)),
        ("flood", &|| flood_rows(s)),
        ("observe", &|| vec![observe_tree(s)]),
        ("search", &|| {
            search::search_rows(s.ingest_bytes, s.peer_rounds)
        }),
        ("shell", &|| shells::shell_rows(d(), s.rounds)),
        ("watch", &|| watch::watch_rows(d(), s.rounds, s.idle)),
        ("jobs", &|| jobs::jobs_rows(d(), s.rounds)),
        ("survival", &|| survival::survival_rows(s.kills)),
        ("instructions", &|| {
            instructions::instruction_rows(s.counted)
        }),
        // Only when asked for: they install and run other programs (the
        // peers; a systemd user manager and the `procd` built beside us).
        ("peers", &|| peers::peer_rows(s.peer_rounds)),
        ("systemd", &|| systemd::containment_rows(s.rounds)),
        ("remote", &|| remote::remote_rows(s.polls)),
    ];
    groups
        .iter()
        .filter(|(name, _)| match only {
            None => !["peers", "systemd", "remote"].contains(name),
            Some(w) => name.contains(w),
        })
        .flat_map(|(_, run)| run())
        .collect()
}

fn spawn_wait(d: &Daemon, s: &Sizes) -> Row {
    spawn_wait_row(
        d,
        s,
        "spawn + wait of `true` (2 RPCs)",
        "no login scripts (an empty HOME)",
        &["-c", "true"],
        Ratio::AtMost(1.2),
    )
}

/// docs/SECURITY.md: a sandbox (the Landlock ruleset made per spawn, the
/// child entering it) costs little beside the same spawn without one.
fn spawn_wait_sandboxed(d: &Daemon, s: &Sizes) -> Row {
    let mut c = d.connect();
    let dir = d.home.join("sandboxed");
    std::fs::create_dir_all(&dir).expect("cwd");
    let cwd = dir.to_str().expect("utf-8").to_string();
    let mut one = |sandbox: Option<&str>| {
        let mut params = json!({"command": "true", "cwd": cwd});
        if let Some(profile) = sandbox {
            params["sandbox"] = json!(profile);
        }
        let t = Instant::now();
        let id = c.call("spawn", params)["session_id"].clone();
        let w = c.call("wait", json!({"session_id": id, "timeout_s": 30}));
        assert_eq!(w["status"], "exited", "{w}");
        assert_eq!(w["exit_code"], 0, "{w}");
        t.elapsed().as_secs_f64() * 1e3
    };
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for round in 0..s.rounds {
        if round % 2 == 0 {
            ours.push(one(Some("workspace-write")));
            base.push(one(None));
        } else {
            base.push(one(None));
            ours.push(one(Some("workspace-write")));
        }
    }
    Row::against(
        "spawn + wait of `true` under workspace-write".into(),
        median(&ours),
        median(&base),
        "ms",
        Ratio::AtMost(1.2),
        format!(
            "median of {} rounds, alternating; baseline: the same spawn + wait without a sandbox",
            s.rounds
        ),
    )
}

/// docs/operations.md: with login scripts that take ~100 ms (`sleep 0.1` in
/// ~/.bashrc, read through ~/.bash_profile), a spawn must not pay them.
fn spawn_wait_slow_rc(s: &Sizes) -> Vec<Row> {
    let d = Daemon::start();
    std::fs::write(d.home.join(".bash_profile"), ". ~/.bashrc\n").expect("rc");
    std::fs::write(
        d.home.join(".bashrc"),
        "sleep 0.1\nexport FROM_RC=1\nalias ll='ls -l'\n",
    )
    .expect("rc");
    let mut c = d.connect();
    // The first spawn after a change makes the snapshot (and pays the rc).
    let id = c.call(
        "spawn",
        json!({"command": "echo $FROM_RC", "yield_ms": 30000}),
    );
    assert_eq!(
        id["output"], "1\n",
        "the snapshot carries the rc's export: {id}"
    );
    let what = "~/.bashrc runs `sleep 0.1` and defines an alias (procd made the shell snapshot once; `true` names no alias, so it is not sourced)";
    vec![
        spawn_wait_row(
            &d,
            s,
            "spawn + wait of `true`, login scripts taking 100 ms",
            what,
            &["-c", "true"],
            Ratio::AtMost(1.2),
        ),
        // What a login shell per command would pay: the rc, every time.
        spawn_wait_row(
            &d,
            s,
            "spawn + wait of `true` beside `bash -lic true`, login scripts taking 100 ms",
            what,
            &["-lic", "true"],
            Ratio::AtMost(0.5),
        ),
    ]
}

/// How many clients spawn at once in the throughput row.
const SPAWNERS: usize = 4;

/// Sessions per second when `SPAWNERS` clients each spawn `true` and wait
/// for it, over and over, against the same number of threads each
/// starting `bash -c true` (std's `Command`, which is `posix_spawn` here:
/// no `pre_exec`, no group, null stdio) and waiting for it. Each side runs
/// alone for `s.throughput`, procd's first half and last half around the
/// baseline, so a drift in the machine's speed falls on both.
fn spawn_throughput(s: &Sizes) -> Row {
    // A daemon of its own: the thousands of sessions this leaves in the
    // table are not the other rows' to carry.
    let d = Daemon::start();
    let bash = ["/usr/bin/bash", "/bin/bash"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("bash");
    let home = d.home.as_path();
    let procd = |for_: Duration| {
        per_second(for_, || {
            let mut c = d.connect();
            move || {
                let id = c.call("spawn", json!({"command": "true"}))["session_id"].clone();
                let w = c.call("wait", json!({"session_id": id, "timeout_s": 30}));
                assert_eq!(w["exit_code"], 0, "{w}");
            }
        })
    };
    let baseline = |for_: Duration| {
        per_second(for_, || {
            move || {
                let status = Command::new(bash)
                    .args(["-c", "true"])
                    .env("HOME", home)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .expect("baseline spawn");
                assert!(status.success());
            }
        })
    };
    let half = s.throughput / 2;
    let first = procd(half);
    let base = baseline(s.throughput);
    let ours = (first + procd(half)) / 2.0;
    Row::against(
        format!("spawn throughput, {SPAWNERS} clients spawning `true` and waiting"),
        ours,
        base,
        "sessions/s",
        Ratio::AtLeast(0.8),
        format!(
            "{SPAWNERS} connections, each spawn + wait in a loop, for {:.0} s; baseline: {SPAWNERS} threads each starting `bash -c true` (posix_spawn, null stdio) and waiting for it, for as long; {} cores",
            s.throughput.as_secs_f64(),
            online_cpus()
        ),
    )
}

/// `SPAWNERS` threads, each calling its own `one` (made by `worker`) over
/// and over for `for_`: the calls per second of all of them.
fn per_second<W, F>(for_: Duration, worker: W) -> f64
where
    W: Fn() -> F,
    F: FnMut() + Send,
{
    let calls: u64 = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..SPAWNERS)
            .map(|_| {
                let mut one = worker();
                scope.spawn(move || {
                    let (until, mut n) = (Instant::now() + for_, 0u64);
                    while Instant::now() < until {
                        one();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("spawner"))
            .sum()
    });
    calls as f64 / for_.as_secs_f64()
}

/// spawn + wait of `true` through procd against `bash -c true` spawned
/// and waited for directly (tokio), alternating which goes first.
fn spawn_wait_row(
    d: &Daemon,
    s: &Sizes,
    metric: &str,
    what: &str,
    baseline_args: &[&str],
    goal: Ratio,
) -> Row {
    let mut c = d.connect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let bash = ["/usr/bin/bash", "/bin/bash"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("bash");
    let procd = || {
        let t = Instant::now();
        let id = c.call("spawn", json!({"command": "true"}))["session_id"].clone();
        let w = c.call("wait", json!({"session_id": id, "timeout_s": 30}));
        assert_eq!(w["status"], "exited");
        t.elapsed().as_secs_f64() * 1e3
    };
    let baseline = || {
        let t = Instant::now();
        rt.block_on(async {
            let mut child = tokio::process::Command::new(bash)
                .args(baseline_args)
                .env("HOME", d.home.as_path())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0)
                .spawn()
                .expect("baseline spawn");
            let mut out = child.stdout.take().expect("stdout");
            let mut sink = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut out, &mut sink).await;
            child.wait().await.expect("baseline wait")
        });
        t.elapsed().as_secs_f64() * 1e3
    };
    let (ours, base) = in_turn(s.rounds, procd, baseline);
    Row::against(
        metric.into(),
        median(&ours),
        median(&base),
        "ms",
        goal,
        format!(
            "{what}; median of {} rounds, alternating which runs first; baseline: `bash {}` spawned and waited for directly (tokio, piped output)",
            s.rounds,
            baseline_args.join(" ")
        ),
    )
}

/// A line echo server: the floor for a request/response over a Unix socket.
/// A line server on a Unix socket (a thread per connection, blocking
/// reads) that answers every line with `answer`.
fn echo_server(dir: &Path, answer: &str) -> PathBuf {
    let path = dir.join("echo.sock");
    let listener = UnixListener::bind(&path).expect("echo socket");
    let answer = answer.to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || answer_lines(stream, &answer));
        }
    });
    path
}

/// Answers every line read from `stream` with `answer`, until EOF.
fn answer_lines(stream: std::os::unix::net::UnixStream, answer: &str) {
    let Ok(mut w) = stream.try_clone() else {
        return;
    };
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    while r.read_line(&mut line).is_ok_and(|n| n > 0) {
        if w.write_all(answer.as_bytes()).is_err() {
            return;
        }
        line.clear();
    }
}

/// A JSON-RPC-looking line of exactly `len` bytes (newline included).
fn line_of_len(len: usize, key: &str) -> String {
    let shell = format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"{key}\":\"\"}}\n");
    let pad = len.saturating_sub(shell.len());
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"{key}\":\"{}\"}}\n",
        "x".repeat(pad)
    )
}

/// The line echo on a multi-thread Tokio runtime, as the daemon runs.
fn tokio_echo_server(dir: &Path, answer: &str) -> PathBuf {
    let path = dir.join("tokio-echo.sock");
    let answer: std::sync::Arc<str> = answer.into();
    let std_listener = UnixListener::bind(&path).expect("tokio echo socket");
    std_listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::UnixListener::from_std(std_listener).expect("listener");
            while let Ok((stream, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move { echo_lines(stream, &answer).await });
            }
        });
    });
    path
}

/// Answers every line read from `stream` with `answer`, until EOF: the
/// Tokio echo's connection (here and under callgrind).
async fn echo_lines(stream: tokio::net::UnixStream, answer: &str) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (r, mut w) = stream.into_split();
    let mut lines = tokio::io::BufReader::new(r).lines();
    while let Ok(Some(_)) = lines.next_line().await {
        if w.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Round trips on each connection in turn, in microseconds: `rounds`
/// turns after 50 unrecorded warm-up turns; one sample list per connection.
fn alternate(rounds: usize, conns: &mut [(&mut Line, &str)]) -> Vec<Vec<f64>> {
    let mut samples = vec![Vec::with_capacity(rounds); conns.len()];
    for i in 0..rounds + 50 {
        for ((conn, line), out) in conns.iter_mut().zip(&mut samples) {
            let t = Instant::now();
            conn.round_trip(line);
            if i >= 50 {
                out.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    samples
}

/// CPUs online (not this thread's affinity, which `pin` changes).
fn online_cpus() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN)
        .ok()
        .flatten()
        .map(|n| n as usize)
        .unwrap_or(1)
}

/// Pins this thread and every thread of `pid` to one CPU (or back to all):
/// round trips then measure the servers plus a context switch, not the
/// VM's cross-CPU wake-up latency (which varies 10x between runs here).
fn pin(pid: i32, cpu: Option<usize>) {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    let cpus = online_cpus();
    for c in 0..cpus {
        if cpu.is_none_or(|only| only == c) {
            let _ = set.set(c);
        }
    }
    let _ = sched_setaffinity(Pid::from_raw(0), &set);
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Some(tid) = t.file_name().to_str().and_then(|s| s.parse().ok()) {
                let _ = sched_setaffinity(Pid::from_raw(tid), &set);
            }
        }
    }
}

fn poll_round_trip(d: &Daemon, s: &Sizes) -> Row {
    let mut c = d.connect();
    let id = c.call("spawn", json!({"command": "sleep 600"}))["session_id"].clone();
    pin(d.pid(), Some(0));
    let poll = json!({"jsonrpc": "2.0", "id": 1, "method": "poll", "params": {"session_id": id}})
        .to_string()
        + "\n";
    // The baseline moves as many bytes each way as a poll does: a request
    // the size of poll's, an answer the size of poll's answer.
    let answer_len = c.round_trip(&poll).len();
    let answer = line_of_len(answer_len, "result");
    let ping = line_of_len(poll.len(), "method");
    let mut echo = Line::open(&echo_server(d.home.as_path(), &answer));
    // Not the baseline, but it splits the gap: the same echo served by a
    // Tokio runtime shaped like the daemon's (epoll, task wake-ups).
    let mut tokio_echo = Line::open(&tokio_echo_server(d.home.as_path(), &answer));
    let [ours, base, runtime] = <[Vec<f64>; 3]>::try_from(alternate(
        s.polls,
        &mut [
            (&mut c, &poll),
            (&mut echo, &ping),
            (&mut tokio_echo, &ping),
        ],
    ))
    .expect("three sample lists");
    pin(d.pid(), None);
    c.call("kill", json!({"session_id": id}));
    Row::against(
        "poll round trip, p50".into(),
        median(&ours),
        median(&base),
        "us",
        Ratio::AtMost(1.3),
        format!(
            "{} alternating round trips, client and servers pinned to one CPU; p99 {:.0} us vs {:.0} us; baseline: a line server on a Unix socket (threads, blocking reads) answering a {}-byte request with a {}-byte line, as poll does; the same server on a Tokio runtime: p50 {:.2} us",
            s.polls,
            percentile(&ours, 0.99),
            percentile(&base, 0.99),
            poll.len(),
            answer_len,
            median(&runtime)
        ),
    )
}

fn exit_to_wait(d: &Daemon, s: &Sizes) -> Row {
    let mut c = d.connect();
    let mut lat = Vec::new();
    for _ in 0..s.rounds {
        // The last thing the child does is print the time; then it exits.
        // LC_ALL=C: $EPOCHREALTIME follows the locale's decimal separator.
        let id = c.call(
            "spawn",
            json!({"command": "sleep 0.02; echo $EPOCHREALTIME", "env": {"LC_ALL": "C"}}),
        )["session_id"]
            .clone();
        let w = c.call("wait", json!({"session_id": id, "timeout_s": 30}));
        let got = now_epoch();
        let text = w["output"].as_str().unwrap_or("").trim().to_string();
        // A figure that cannot be measured fails loudly, never reads 0.
        let printed: f64 = text.parse().unwrap_or_else(|_| {
            panic!("exit -> wait: cannot read the child's timestamp from {text:?}")
        });
        lat.push((got - printed) * 1e3);
    }
    Row::at_most(
        "child exit -> wait returns, p99".into(),
        percentile(&lat, 0.99),
        "ms",
        5.0,
        format!(
            "{} rounds, median {:.2} ms; from the child's last output to the answer",
            s.rounds,
            median(&lat)
        ),
    )
}

fn ingest(d: &Daemon, s: &Sizes) -> Row {
    let mut c = d.connect();
    let size = s.ingest_bytes;
    let logs = d.home.join("state/logs");
    let fs = filesystem_of(&logs);
    let command = format!("head -c {size} /dev/zero");
    let bash = ["/usr/bin/bash", "/bin/bash"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("bash");
    // The baselines run what procd runs, as procd runs it: bash -c, a
    // pipe of the size procd asks for, 64 KiB reads; into a file in the
    // logs directory (procd's destination), or into nothing.
    let direct = |to_file: bool| {
        let t = Instant::now();
        let mut child = Command::new(bash)
            .args(["-c", &command])
            .stdout(Stdio::piped())
            .spawn()
            .expect("baseline");
        let mut out = child.stdout.take().expect("stdout");
        let _ = nix::fcntl::fcntl(&out, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
        let path = logs.join("baseline.bin");
        let mut file = to_file.then(|| std::fs::File::create(&path).expect("baseline file"));
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            if let Some(f) = file.as_mut() {
                f.write_all(&buf[..n]).expect("baseline write");
            }
        }
        child.wait().expect("baseline wait");
        drop(file);
        let _ = std::fs::remove_file(&path);
        size as f64 / t.elapsed().as_secs_f64() / 1e6
    };
    let (mut ours, mut to_file, mut discard) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..s.ingest_rounds {
        let mut procd = || {
            let t = Instant::now();
            let id = c.call("spawn", json!({ "command": command }))["session_id"].clone();
            let w = c.call("wait", json!({"session_id": id, "timeout_s": 600}));
            assert_eq!(w["status"], "exited");
            size as f64 / t.elapsed().as_secs_f64() / 1e6
        };
        if round % 2 == 0 {
            ours.push(procd());
            to_file.push(direct(true));
        } else {
            to_file.push(direct(true));
            ours.push(procd());
        }
        discard.push(direct(false));
    }
    Row::against(
        format!("output ingest ({} MiB, one session)", size >> 20),
        median(&ours),
        median(&to_file),
        "MB/s",
        Ratio::AtLeast(0.7),
        format!(
            "median of {} rounds, alternating; logs on {fs}. procd: spawn + wait RPCs, `bash -c` (snapshot sourced), 1 MiB pipe, output stored in its log (capped at max_log_bytes: the head is punched out as it grows). Baseline: `bash -c '{command}'` spawned directly, the same pipe size and reads, written to a file in the same directory; discarding the bytes instead: {:.0} MB/s",
            s.ingest_rounds,
            median(&discard)
        ),
    )
}

/// The type of the filesystem holding `path` (longest mount point of
/// /proc/self/mounts that contains it).
fn filesystem_of(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((*f.get(1)?, *f.get(2)?))
        })
        .filter(|(mount, _)| path.starts_with(mount))
        .max_by_key(|(mount, _)| mount.len())
        .map(|(_, fs)| fs.to_string())
        .unwrap_or_else(|| "an unknown filesystem".into())
}

fn output_to_read(d: &Daemon, s: &Sizes) -> Row {
    let mut c = d.connect();
    let id = c.call(
        "spawn",
        json!({"command": format!("for i in $(seq {}); do echo $EPOCHREALTIME; sleep 0.02; done", s.latency_lines)}),
    )["session_id"]
        .clone();
    let mut cursor = 0u64;
    let mut lat = Vec::new();
    loop {
        let r = c.call(
            "read",
            json!({"session_id": id, "cursor": cursor, "wait_ms": 5000}),
        );
        let got = now_epoch();
        for line in r["data"].as_str().unwrap_or("").lines() {
            if let Ok(t) = line.trim().parse::<f64>() {
                lat.push((got - t) * 1e3);
            }
        }
        cursor = r["next_cursor"].as_u64().unwrap_or(cursor);
        if r["eof"] == true {
            break;
        }
    }
    Row::at_most(
        "output appears -> read{wait_ms} returns, p99".into(),
        percentile(&lat, 0.99),
        "ms",
        5.0,
        format!("{} lines, median {:.2} ms", lat.len(), median(&lat)),
    )
}

/// Context switches per thread of `pid` so far.
fn context_switches(pid: i32) -> std::collections::HashMap<String, u64> {
    let mut per_thread = std::collections::HashMap::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(status) = std::fs::read_to_string(t.path().join("status")) {
                let n: u64 = status
                    .lines()
                    .filter_map(|line| {
                        line.strip_prefix("voluntary_ctxt_switches:")
                            .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                    })
                    .filter_map(|v| v.trim().parse::<u64>().ok())
                    .sum();
                per_thread.insert(t.file_name().to_string_lossy().into_owned(), n);
            }
        }
    }
    per_thread
}

/// Switches between two snapshots, thread by thread: new threads count
/// from zero, and a thread that exited in between (its last switches are
/// not visible any more) counts as one switch at least — a thread coming
/// or going is a wake-up, never nothing.
fn switches_between(
    before: &std::collections::HashMap<String, u64>,
    after: &std::collections::HashMap<String, u64>,
) -> u64 {
    let survivors: u64 = after
        .iter()
        .map(|(tid, n)| n.saturating_sub(*before.get(tid).unwrap_or(&0)))
        .sum();
    let exited = before
        .keys()
        .filter(|tid| !after.contains_key(*tid))
        .count() as u64;
    survivors + exited
}

/// A number field of /proc/<pid>/status ("Threads:", "VmRSS:" in kB).
pub(crate) fn status_field(pid: i32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn rss_mib(pid: i32) -> f64 {
    status_field(pid, "VmRSS:").map_or(f64::NAN, |kb| kb as f64 / 1024.0)
}

fn idle(d: &Daemon, s: &Sizes) -> Vec<Row> {
    let mut c = d.connect();
    c.call("kill_all", json!({}));
    drop(c);
    std::thread::sleep(Duration::from_millis(1500)); // let the last work settle
    let before = context_switches(d.pid());
    std::thread::sleep(s.idle);
    let after = context_switches(d.pid());
    let per_second = switches_between(&before, &after) as f64 / s.idle.as_secs_f64();
    let loaded_rss = rss_mib(d.pid());
    // The same idle daemon with its monitor slowed to once an hour: what
    // is left is every other source of wake-ups (there should be none).
    let quiet = Daemon::with_config("monitor_interval_s = 3600\n");
    std::thread::sleep(Duration::from_millis(1500));
    let q0 = context_switches(quiet.pid());
    std::thread::sleep(s.idle);
    let q1 = context_switches(quiet.pid());
    let quiet_switches = switches_between(&q0, &q1);
    let others = quiet_switches as f64 / s.idle.as_secs_f64();
    let rss = rss_mib(quiet.pid());
    drop(quiet);
    vec![
        Row {
            spread: None,
            metric: format!("idle daemon, wakeups besides the 1 Hz monitor ({} s)", s.idle.as_secs()),
            value: others,
            baseline: None,
            baseline_name: None,
            ratio: None,
            unit: "switches/s".into(),
            target: "none".into(),
            met: others <= 0.5,
            detail: format!(
                "context switches of all daemon threads with the monitor at 1/hour: {} in {} s; with the 1 Hz monitor: {:.1}/s (one tick = a timer wake-up, retention, and the runtime's thread hand-offs)",
                quiet_switches,
                s.idle.as_secs(),
                per_second
            ),
        },
        Row::at_most(
            "idle daemon, RSS".into(),
            rss,
            "MiB",
            10.0,
            format!("VmRSS of a freshly started idle daemon; the daemon that ran the measurements above (the ingest rows included) holds {loaded_rss:.1} MiB"),
        ),
    ]
}

/// Polls a session of a daemon holding `many` live sessions, alternating
/// with polls of a daemon holding one (the baseline, measured in step).
fn many_sessions(s: &Sizes) -> Vec<Row> {
    let crowded = Daemon::start();
    let mut c = crowded.connect();
    let mut ids = Vec::new();
    for _ in 0..s.many {
        ids.push(c.call("spawn", json!({"command": "sleep 600"}))["session_id"].clone());
    }
    // The baseline daemon is as fresh as the crowded one: one session, no
    // history (the shared daemon has ingested gigabytes by now).
    let fresh = Daemon::start();
    let mut lone = fresh.connect();
    let lone_id = lone.call("spawn", json!({"command": "sleep 600"}))["session_id"].clone();
    let poll = |id: &Value| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "poll", "params": {"session_id": id}})
            .to_string()
            + "\n"
    };
    let (crowded_poll, lone_poll) = (poll(&ids[s.many / 2]), poll(&lone_id));
    pin(fresh.pid(), Some(0));
    pin(crowded.pid(), Some(0));
    let [many, one] = <[Vec<f64>; 2]>::try_from(alternate(
        s.polls,
        &mut [(&mut c, &crowded_poll), (&mut lone, &lone_poll)],
    ))
    .expect("two sample lists");
    pin(fresh.pid(), None);
    pin(crowded.pid(), None);
    let rss = rss_mib(crowded.pid());
    c.call("kill_all", json!({}));
    lone.call("kill_all", json!({}));
    vec![
        Row::against(
            format!("poll p50 with {} live sessions", s.many),
            median(&many),
            median(&one),
            "us",
            Ratio::AtMost(1.2),
            "alternating with polls of a fresh daemon holding one session; pinned as above".into(),
        ),
        Row::at_most(
            format!("daemon RSS with {} live sessions", s.many),
            rss,
            "MiB",
            100.0,
            "VmRSS".into(),
        ),
    ]
}

/// CPU time (user + system) a process has used, in seconds.
fn cpu_seconds(pid: i32) -> f64 {
    let stat = procd_core::procfs::ProcFs::default()
        .stat(pid)
        .expect("the daemon's /proc/<pid>/stat");
    stat.cpu_ticks as f64 / procd_core::procfs::clock_ticks_per_second()
}

/// Poll latency and daemon CPU while four sessions flood their output.
fn flood_rows(s: &Sizes) -> Vec<Row> {
    let d = Daemon::start();
    let mut c = d.connect();
    let target = c.call("spawn", json!({"command": "sleep 600"}))["session_id"].clone();
    let poll =
        json!({"jsonrpc": "2.0", "id": 1, "method": "poll", "params": {"session_id": target}})
            .to_string()
            + "\n";
    let sample = |c: &mut Line| -> Vec<f64> {
        (0..s.polls)
            .map(|_| {
                let t = Instant::now();
                c.round_trip(&poll);
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect()
    };
    let quiet = sample(&mut c);
    for _ in 0..4 {
        c.call("spawn", json!({"command": "yes"}));
    }
    // Let the floods reach full speed; then the daemon's CPU with the
    // floods alone (no polls to serve), then the polls.
    std::thread::sleep(Duration::from_millis(300));
    let (cpu0, t0) = (cpu_seconds(d.pid()), Instant::now());
    std::thread::sleep(s.idle.min(Duration::from_secs(3)));
    let window = t0.elapsed().as_secs_f64();
    let cores = (cpu_seconds(d.pid()) - cpu0) / window;
    let flooded = sample(&mut c);
    c.call("kill_all", json!({}));
    vec![
        Row::against(
            "poll p99 with four `yes` floods".into(),
            percentile(&flooded, 0.99),
            percentile(&quiet, 0.99),
            "us",
            Ratio::AtMost(3.0),
            format!(
                "{} polls during the floods against {} just before them (the baseline), unpinned; p50 {:.1} vs {:.1} us",
                s.polls,
                s.polls,
                median(&flooded),
                median(&quiet)
            ),
        ),
        Row::at_most(
            "daemon CPU with four `yes` floods".into(),
            cores,
            "cores",
            0.5,
            format!("utime+stime of the daemon over {window:.1} s of the floods (no polls meanwhile)"),
        ),
    ]
}

/// Threads of a process (from /proc/<pid>/status).
fn threads(pid: i32) -> i64 {
    status_field(pid, "Threads:").expect("the daemon's thread count") as i64
}

/// Whether the session's shell has forked its first `sleep` (so its traps
/// are set: during the login scripts an interactive bash ignores SIGTERM).
fn runs_sleep(pid: i64) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        let p = e.path();
        std::fs::read_to_string(p.join("comm")).is_ok_and(|c| c.trim() == "sleep")
            && std::fs::read_to_string(p.join("stat")).is_ok_and(|s| {
                s.rfind(')')
                    .and_then(|i| s[i + 2..].split(' ').nth(1)?.parse::<i64>().ok())
                    == Some(pid)
            })
    })
}

/// Kill of a compound command, and the threads a bulk kill adds.
fn kill_rows(s: &Sizes) -> Vec<Row> {
    let d = Daemon::start();
    let mut c = d.connect();
    let mut lat = Vec::new();
    for _ in 0..s.rounds {
        let r = c.call(
            "spawn",
            json!({"command": "sleep 300; echo after; sleep 300"}),
        );
        let pid = r["pid"].as_i64().expect("pid");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !runs_sleep(pid) {
            assert!(Instant::now() < deadline, "the session never ran sleep");
            std::thread::sleep(Duration::from_millis(2));
        }
        let t = Instant::now();
        let k = c.call("kill", json!({"session_id": r["session_id"]}));
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(k["status"], "killed", "{k}");
    }
    let many = s.many.min(256);
    let crowd: Vec<Value> = (0..many)
        .map(|_| c.call("spawn", json!({"command": "sleep 300; echo after"}))["session_id"].clone())
        .collect();
    for id in &crowd {
        let pid = c.call("poll", json!({"session_id": id}))["pid"]
            .as_i64()
            .expect("pid");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !runs_sleep(pid) {
            assert!(Instant::now() < deadline, "a session never ran sleep");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let before = threads(d.pid());
    let killed = c.call("kill_all", json!({}))["killed"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(killed as usize, many, "kill_all ended every session");
    // Blocking threads linger ~10 s after their work: still counted here.
    let added = threads(d.pid()) - before;
    let (fork_loop_ms, fork_loop_left) = kill_fork_loop(&d, &mut c, s);
    let zombies = zombies_after_double_forks(&mut c);
    vec![
        Row::at_most(
            "kill of a tree forking in a loop, p50".into(),
            fork_loop_ms,
            "ms",
            100.0,
            format!(
                "`while :; do (sleep 30 &); done` under pids=256, grace 0.2 s (its shell honours TERM; the forks do not matter); {fork_loop_left} processes left over {} rounds",
                s.rounds.min(5)
            ),
        ),
        Row::at_most(
            "zombies left after 100 double-fork orphans under an exec'd root".into(),
            zombies as f64,
            "zombies",
            0.0,
            "python exec'd as the root forks 100 children that each fork an orphan and exit; orphans not yet reaped (still in /proc) after up to 2 s".into(),
        ),
        Row::at_most(
            "kill of a compound command, answered, p99".into(),
            percentile(&lat, 0.99),
            "ms",
            100.0,
            format!(
                "`sleep 300; echo after; sleep 300`, default grace 2 s; {} rounds, median {:.2} ms",
                s.rounds,
                median(&lat)
            ),
        ),
        Row::at_most(
            format!("threads added by kill_all of {many} sessions"),
            added as f64,
            "threads",
            8.0,
            "daemon's Threads before the call and right after its answer".into(),
        ),
    ]
}

/// Kills a session that forks in a loop; (median ms, processes left).
fn kill_fork_loop(d: &Daemon, c: &mut Line, s: &Sizes) -> (f64, usize) {
    let processes_of = |id: &str| {
        reliability::session_processes(&d.home)
            .iter()
            .filter(|(_, of)| of == id)
            .count()
    };
    let mut lat = Vec::new();
    let mut left = 0;
    for _ in 0..s.rounds.min(5) {
        let r = c.call(
            "spawn",
            json!({"command": "while :; do (sleep 30 &) ; done", "limits": {"pids": 256}}),
        );
        let id = r["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("spawn failed: {r}"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while processes_of(id) < 50 {
            assert!(Instant::now() < deadline, "the loop never forked");
            std::thread::sleep(Duration::from_millis(2));
        }
        let t = Instant::now();
        let k = c.call("kill", json!({"session_id": id, "grace_s": 0.2}));
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(k["status"], "killed", "{k}");
        left += processes_of(id);
    }
    (median(&lat), left)
}

/// Of 100 orphans a double fork under an exec'd root leaves (each reports
/// its pid, then exits), how many are still not reaped after 2 s.
fn zombies_after_double_forks(c: &mut Line) -> usize {
    // The parent prints its orphan's pid before it exits, so every pid is
    // in the output before "forked".
    let script = "import os, time\nfor _ in range(100):\n    r, w = os.pipe()\n    pid = os.fork()\n    if pid == 0:\n        if os.fork() == 0:\n            os.write(w, b'%d\\n' % os.getpid())\n            os._exit(0)\n        os.write(1, b'orphan ' + os.read(r, 32))\n        os._exit(0)\n    os.close(r)\n    os.close(w)\n    os.waitpid(pid, 0)\nprint('forked', flush=True)\ntime.sleep(300)";
    let r = c.call(
        "spawn",
        json!({"command": format!("exec python3 -c \"{script}\""), "yield_ms": 20000, "ready": {"output": "forked"}}),
    );
    let output = r["output"].as_str().unwrap_or("");
    assert!(output.contains("forked"), "{r}");
    let orphans: Vec<i32> = output
        .lines()
        .filter_map(|l| l.strip_prefix("orphan ")?.trim().parse().ok())
        .collect();
    assert_eq!(orphans.len(), 100, "{r}");
    // Reaped = gone from /proc; a zombie (or one not yet exited) is not.
    let unreaped = || {
        orphans
            .iter()
            .filter(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while unreaped() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    c.call("kill", json!({"session_id": r["session_id"]}));
    unreaped()
}

/// What the monitor (and a waiting yield) pays per session per look: one
/// observation of a 50-process tree — a /proc scan, then ports, resources
/// and input reads of each process (docs/agents.md asks ≤ 1 ms). Measured in
/// process on a tree this program starts (its own process group).
fn observe_tree(s: &Sizes) -> Row {
    use procd_core::observation::observe::{observe, InputId, Watched};
    let server = "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen()\nprint(1, flush=True)\ntime.sleep(300)";
    let script =
        format!("for i in $(seq 48); do sleep 300 & done; python3 -c \"{server}\" & read x; wait");
    // The tree in a cgroup of its own, as procd's sessions are (docs/
    // containment.md); without one, the /proc-scanning path is measured.
    let cgroups =
        procd_sys::cgroup::CgroupTree::find(&format!("bench-{}", std::process::id())).ok();
    let cgroup = cgroups
        .as_ref()
        .and_then(|t| t.create("tree", &Default::default()).ok())
        .map(std::sync::Arc::new);
    let mut child = start_tree(&script, cgroup.as_deref());
    let procfs = procd_core::procfs::ProcFs::default();
    let root = child.id() as i32; // the leader of its own group

    let tree = procd_core::tree::kill::TreeSpec {
        root: procd_core::identity::ProcessIdentity::of(&procfs, root).expect("identity"),
        pgid: root,
        marker: b"PROCD_BENCH_NO_MARKER=1".to_vec(),
        root_pinned: false,
        adopted: Vec::new(),
        cgroup: cgroup.clone(),
    };
    let watched = [Watched {
        input: InputId::of_fd(&procfs, root, 0),
        tree,
    }];
    let mut seen = observe(&procfs, &watched);
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen[0].resources.procs < 50 || seen[0].ports.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the tree never had 50 processes: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
        seen = observe(&procfs, &watched);
    }
    let mut lat = Vec::new();
    for _ in 0..s.rounds * 5 {
        let t = Instant::now();
        seen = observe(&procfs, &watched);
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    assert!(seen[0].reading_input, "the root reads its stdin: {seen:?}");
    let mut scan = Vec::new();
    for _ in 0..s.rounds * 5 {
        let t = Instant::now();
        let _ = procfs.all();
        scan.push(t.elapsed().as_secs_f64() * 1e3);
    }
    drop(child.stdin.take()); // `read` returns, `wait` waits for the rest
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(root),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = child.wait(); // its pid is ours until now: the group was too
    let how = match (&cgroup, &cgroups) {
        (Some(cgroup), Some(cgroups)) => {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !cgroup.remove() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            cgroups.remove();
            "the tree's cgroup.procs (no /proc scan)".to_string()
        }
        _ => format!(
            "no cgroup here: one /proc scan of all {} processes",
            procfs.all().map(|t| t.len()).unwrap_or(0)
        ),
    };
    Row::at_most(
        "observing a 50-process tree (ports, resources, input), p50".into(),
        median(&lat),
        "ms",
        0.3,
        format!(
            "{how} (a /proc scan alone: {:.2} ms), then each process's stat and, asleep, its syscall file, and the listening sockets (one netlink dump, matched by cgroup id; without a cgroup, by each process's fds); {} rounds, p99 {:.2} ms",
            median(&scan),
            lat.len(),
            percentile(&lat, 0.99)
        ),
    )
}

/// Starts `script` in a process group of its own, in `cgroup` if given,
/// and waits for its first output (the tree is then being built).
fn start_tree(
    script: &str,
    cgroup: Option<&procd_sys::cgroup::SessionCgroup>,
) -> std::process::Child {
    let mut cmd = Command::new("bash");
    cmd.args(["-c", script])
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let entry = cgroup.map(|c| c.entry().expect("the tree's cgroup.procs"));
    if let Some(join) = entry.as_ref().map(|e| e.join()) {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&join.procs);
        // SAFETY: write(2) is async-signal-safe; `entry` outlives the spawn.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                if nix::libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().expect("start a 50-process tree");
    drop(entry);
    let mut first = [0u8; 2];
    child
        .stdout
        .as_mut()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("the server's line");
    child
}

fn print_table(rows: &[Row], quick: bool) {
    println!(
        "procd-bench{} — {} cores, {}",
        if quick {
            " --quick (sizes reduced; not for comparison)"
        } else {
            ""
        },
        online_cpus(),
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| c
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string()))
            .unwrap_or_default()
    );
    println!("| metric | procd | baseline | ratio | target | met? |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        let base = match (r.baseline, &r.baseline_name) {
            (Some(b), Some(name)) => format!("{name}: {b:.2} {}", r.unit),
            (Some(b), None) => format!("{b:.2} {}", r.unit),
            (None, _) => "—".into(),
        };
        let ratio = match (r.ratio, r.spread) {
            (Some(x), Some([lo, _, hi])) => format!("{x:.2}x ({lo:.2}–{hi:.2})"),
            (Some(x), None) => format!("{x:.2}x"),
            (None, _) => "—".into(),
        };
        let value = match (r.ratio, r.spread) {
            (None, Some([lo, _, hi])) => format!("{:.2} {} ({lo:.2}–{hi:.2})", r.value, r.unit),
            _ => format!("{:.2} {}", r.value, r.unit),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            r.metric,
            value,
            base,
            ratio,
            r.target,
            if r.met { "yes" } else { "NO" }
        );
    }
    println!();
    for r in rows {
        println!("- {}: {}", r.metric, r.detail);
    }
}
