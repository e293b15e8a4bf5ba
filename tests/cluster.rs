//! procd as the supervisor inside each sandbox of a real cluster
//! (docs/cluster.md): a two-node Docker Swarm (`common::swarm`) runs a
//! service of procd sandboxes, each container's PID 1 `procd daemon`, and
//! the procd CLI here reaches each one through `--host docker://TASK`.

use crate::common::swarm::{Swarm, Task, IMAGE};
use crate::common::*;
use serde_json::Value;
use std::process::Output;
use std::time::{Duration, Instant};

const SERVICE: &str = "procd-sbx";

/// How long Swarm may take to place, replace or move a task here.
const CONVERGE: Duration = Duration::from_secs(90);

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `procd --host docker://TASK ARGS`, which must succeed; its stdout.
fn procd_ok(swarm: &Swarm, task: &Task, args: &[&str]) -> String {
    let out = swarm.procd(task, args);
    assert!(out.status.success(), "procd {args:?} on {task:?}: {out:?}");
    stdout(&out)
}

/// The `status` of the procd in `task`.
fn status(swarm: &Swarm, task: &Task) -> Value {
    let text = procd_ok(swarm, task, &["rpc", "status"]);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("status {text:?}: {e}"))
}

fn instance(swarm: &Swarm, task: &Task) -> String {
    let id = status(swarm, task)["instance"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(id.len(), 16, "an instance id of 16 hex digits: {id:?}");
    id
}

/// A spawn's session id (the first word `procd spawn` prints).
fn spawn(swarm: &Swarm, task: &Task, args: &[&str]) -> String {
    let mut all = vec!["spawn"];
    all.extend_from_slice(args);
    let text = procd_ok(swarm, task, &all);
    text.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Waits until the service's running tasks satisfy `want`.
fn tasks_until(swarm: &Swarm, what: &str, want: impl Fn(&[Task]) -> bool) -> Vec<Task> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let tasks = swarm.tasks(SERVICE);
        if want(&tasks) {
            return tasks;
        }
        assert!(
            Instant::now() < deadline,
            "not within {CONVERGE:?}: {what}; the tasks: {tasks:?}\n{}",
            swarm.ok(0, &format!("service ps --no-trunc {SERVICE}"))
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until the procd in `task` answers (its container may be up
/// before its socket is).
fn answering(swarm: &Swarm, task: &Task) {
    let deadline = Instant::now() + CONVERGE;
    while !swarm.procd(task, &["rpc", "status"]).status.success() {
        assert!(Instant::now() < deadline, "{task:?} never answered");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until Swarm's health check (`procd status`) passes in `task`.
fn healthy(swarm: &Swarm, task: &Task) {
    let ask = format!("inspect -f {{{{.State.Health.Status}}}} {}", task.container);
    let deadline = Instant::now() + CONVERGE;
    loop {
        let health = swarm.ok(task.node, &ask);
        if health.trim() == "healthy" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{task:?} is {health:?}, not healthy"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The command lines of the processes in `task`'s container.
fn processes(swarm: &Swarm, task: &Task) -> String {
    let out = swarm.exec(
        task,
        r#"for p in /proc/[0-9]*; do echo "${p#/proc/} $(tr '\0' ' ' < $p/cmdline 2>/dev/null)"; done"#,
    );
    stdout(&out)
}

/// Spawn, `logs -f`, kill and a PTY session, through `docker exec`.
fn serves(swarm: &Swarm, task: &Task) {
    let ticks = spawn(
        swarm,
        task,
        &["--", "for i in 1 2 3; do echo tick $i; sleep 0.2; done"],
    );
    let followed = procd_ok(swarm, task, &["logs", "-f", &ticks]);
    assert!(
        followed.contains("tick 1") && followed.contains("tick 3"),
        "logs -f on {task:?}: {followed:?}"
    );

    let sleeper = spawn(swarm, task, &["--", "sleep 300.5"]);
    let is_there = |swarm: &Swarm| processes(swarm, task).contains("sleep 300.5");
    wait_until("the sleeper runs in the sandbox", || is_there(swarm));
    procd_ok(swarm, task, &["kill", &sleeper]);
    wait_until("the sleeper is gone from the sandbox", || !is_there(swarm));

    let pty = spawn(
        swarm,
        task,
        &["--pty", "--", "read -r line; echo \"got $line on $(tty)\""],
    );
    procd_ok(swarm, task, &["send", &pty, "hello"]);
    procd_ok(swarm, task, &["wait", &pty]);
    let said = procd_ok(swarm, task, &["logs", &pty]);
    assert!(
        said.contains("got hello on /dev/pts/"),
        "the PTY session on {task:?}: {said:?}"
    );
}

/// PID 1 reaps an orphan that is not procd's: a process left by a
/// `docker exec` whose parent is outside the container.
fn reaps_orphans(swarm: &Swarm, task: &Task) {
    let out = swarm.exec(task, "sleep 1 </dev/null >/dev/null 2>&1 & echo $!");
    let pid: i32 = stdout(&out)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("an orphan's pid: {out:?}"));
    let stat = stdout(&swarm.exec(task, &format!("cat /proc/{pid}/stat")));
    let ppid = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        ppid, "1",
        "the orphan's parent is the container's PID 1: {stat}"
    );
    let gone = |swarm: &Swarm| {
        swarm
            .exec(task, &format!("test -e /proc/{pid}"))
            .status
            .code()
            == Some(1)
    };
    let deadline = Instant::now() + PATIENCE;
    while !gone(swarm) {
        let stat = stdout(&swarm.exec(task, &format!("cat /proc/{pid}/stat")));
        assert!(
            Instant::now() < deadline,
            "PID 1 did not reap the orphan: {stat}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The daemon inside (PID 1's child) is SIGKILLed; PID 1 starts the next,
/// which takes the sessions back: the same instance, the same session.
fn daemon_killed_sessions_survive(swarm: &Swarm, task: &Task) {
    let survivor = spawn(swarm, task, &["--", "echo before; sleep 301.5"]);
    let before = status(swarm, task);
    let daemon = before["pid"].as_i64().expect("the daemon's pid");
    assert_ne!(daemon, 1, "PID 1 is the keeper, the daemon its child");
    let out = swarm.exec(task, &format!("kill -9 {daemon}"));
    assert!(out.status.success(), "kill -9 the daemon: {out:?}");
    let deadline = Instant::now() + PATIENCE;
    let after = loop {
        let out = swarm.procd(task, &["rpc", "status"]);
        if out.status.success() {
            let now: Value = serde_json::from_str(stdout(&out).trim()).expect("status");
            if now["pid"].as_i64() != Some(daemon) {
                break now;
            }
        }
        assert!(Instant::now() < deadline, "no new daemon in {task:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(after["instance"], before["instance"], "the same procd");
    let poll = procd_ok(swarm, task, &["poll", &survivor, "--json"]);
    let poll: Value = serde_json::from_str(poll.trim()).expect("poll");
    assert_eq!(poll["status"], "running", "{poll}");
    assert!(
        processes(swarm, task).contains("sleep 301.5"),
        "the session's process lives on"
    );
    let said = procd_ok(swarm, task, &["logs", &survivor]);
    assert!(said.contains("before"), "{said:?}");
}

/// SIGTERM to the container (`docker stop`) is a graceful stop: each
/// session gets its TERM and its grace, procd exits 0, and what a session
/// wrote under PROCD_HOME is on the task's volume.
fn stops_gracefully(swarm: &Swarm, task: &Task) {
    spawn(
        swarm,
        task,
        &[
            "--",
            "trap 'echo got-term > /var/lib/procd/term-marker; exit 0' TERM; while :; do sleep 0.1; done",
        ],
    );
    swarm.ok(task.node, &format!("stop -t 20 {}", task.container));
    let code = swarm.ok(
        task.node,
        &format!("inspect -f {{{{.State.ExitCode}}}} {}", task.container),
    );
    assert_eq!(code.trim(), "0", "procd's exit after a graceful stop");
    let copied = tempfile::tempdir().expect("tempdir");
    swarm.ok(
        task.node,
        &format!(
            "cp {}:/var/lib/procd/term-marker {}",
            task.container,
            copied.path().display()
        ),
    );
    let marker = std::fs::read_to_string(copied.path().join("term-marker")).unwrap_or_default();
    assert_eq!(marker.trim(), "got-term", "the session's TERM trap ran");
}

#[test]
fn procd_sandboxes_on_a_real_swarm_serve_survive_and_move() {
    let Some(swarm) = Swarm::start() else {
        return;
    };
    let create: Vec<String> = [
        "service",
        "create",
        "--detach",
        "--name",
        SERVICE,
        "--no-resolve-image",
        "--replicas",
        "3",
        "--mount",
        "type=volume,source=procd-state-{{.Task.Slot}},target=/var/lib/procd",
        "--health-cmd",
        "procd status",
        "--health-interval",
        "2s",
        "--stop-grace-period",
        "20s",
        IMAGE,
    ]
    .map(String::from)
    .to_vec();
    swarm.ok_argv(0, &create);
    let tasks = tasks_until(&swarm, "3 tasks run, one on the worker", |t| {
        t.len() == 3 && t.iter().any(|t| t.node == 1)
    });
    for task in &tasks {
        answering(&swarm, task);
        healthy(&swarm, task);
        serves(&swarm, task);
    }
    reaps_orphans(&swarm, &tasks[0]);
    daemon_killed_sessions_survive(&swarm, &tasks[1]);

    // The whole task is killed: a follower is told the sandbox is gone,
    // Swarm starts a replacement, and it is another procd.
    let lost = &tasks[2];
    let old = instance(&swarm, lost);
    let sleeper = spawn(&swarm, lost, &["--", "sleep 302.5"]);
    let follower = swarm
        .procd_command(lost, &["logs", "-f", &sleeper])
        .spawn()
        .expect("logs -f");
    wait_until("the follower is connected", || {
        processes(&swarm, lost).contains("dial-stdio")
    });
    swarm.ok(lost.node, &format!("kill {}", lost.container));
    let out = output_within(follower, "logs -f on a killed sandbox");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        said.contains(&format!("the sandbox docker://{} is gone", lost.container)),
        "the follower is told the sandbox is gone: {said}"
    );
    let tasks = tasks_until(&swarm, "the killed task is replaced", |t| {
        t.len() == 3
            && t.iter()
                .any(|t| t.slot == lost.slot && t.container != lost.container)
    });
    let replacement = tasks
        .iter()
        .find(|t| t.slot == lost.slot)
        .expect("the replacement")
        .clone();
    answering(&swarm, &replacement);
    assert_ne!(instance(&swarm, &replacement), old, "a new procd");
    serves(&swarm, &replacement);
    let again = swarm.procd(lost, &["ps"]);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("is gone"),
        "the old sandbox is gone: {again:?}"
    );

    stops_gracefully(&swarm, &tasks[0]);

    // The worker is drained: its tasks move to the manager and serve there.
    let tasks = tasks_until(&swarm, "3 tasks run again", |t| t.len() == 3);
    let before: Vec<(Task, String)> = tasks
        .iter()
        .filter(|t| t.node == 1)
        .map(|t| (t.clone(), instance(&swarm, t)))
        .collect();
    assert!(!before.is_empty(), "a task on the worker: {tasks:?}");
    swarm.ok(
        0,
        &format!("node update --availability drain {}", swarm.node_ids[1]),
    );
    let moved = tasks_until(&swarm, "every task runs on the manager", |t| {
        t.len() == 3 && t.iter().all(|t| t.node == 0)
    });
    for (old, id) in &before {
        let new = moved
            .iter()
            .find(|t| t.slot == old.slot)
            .expect("the moved task");
        answering(&swarm, new);
        assert_ne!(&instance(&swarm, new), id, "a new procd on the manager");
        serves(&swarm, new);
    }
}
