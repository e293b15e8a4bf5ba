//! A real two-node Docker Swarm for one test (docs/cluster.md): two
//! network namespaces of the test's own joined by a veth pair (private
//! addresses inside them only), one `dockerd` in each with its own data
//! and exec roots, containerd namespace and cgroup parent, the manager's
//! `swarm init` and the worker's `swarm join`, and the procd image built
//! on each node by deploy/container/build-image.sh (no registry).
//!
//! Dropped, it removes everything it made: the service and containers,
//! the swarm, both dockerds (and what they started, by pid), mounts under
//! its directory, the namespaces, the cgroup parents, the directory.

use super::*;

/// The environment variable that says the machine cannot run docker.
pub const NO_DOCKER: &str = "PROCD_TEST_NO_DOCKER";

/// Debian's docker.io (tests/system-deps.sh installs it): its client
/// matches its daemon, unlike another `docker` earlier on PATH.
const DOCKER: &str = "/usr/bin/docker";
const DOCKERD: &str = "/usr/sbin/dockerd";

pub const IMAGE: &str = "procd-sandbox:test";

pub struct Node {
    netns: String,
    dockerd: Option<Child>,
    socket: PathBuf,
    /// The docker client for this node, as one shell word list.
    pub docker: String,
}

pub struct Swarm {
    dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
    cgroup: String,
    /// The node ids of the manager and the worker.
    pub node_ids: Vec<String>,
}

/// One running task of a service: its container and the node it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub slot: String,
    pub container: String,
    pub node: usize,
}

impl Swarm {
    /// A two-node swarm with the procd image on both nodes, or None when
    /// the suite is told this machine cannot run docker.
    pub fn start() -> Option<Swarm> {
        if machine_lacks(NO_DOCKER, "docker (Debian's docker.io)") {
            return None;
        }
        assert!(
            Path::new(DOCKERD).exists(),
            "{DOCKERD} is missing: apt-get install docker.io (tests/system-deps.sh does), or set {NO_DOCKER}=1"
        );
        let rootfs = prepared(
            "container-rootfs.sh",
            &format!("the image's root filesystem (or set {NO_DOCKER}=1)"),
        );
        let tag = std::process::id() % 100_000;
        let dir = short_tempdir();
        let mut swarm = Swarm {
            dir,
            nodes: Vec::new(),
            cgroup: format!("pdswarm-{tag}"),
            node_ids: Vec::new(),
        };
        for (n, end) in ["a", "b"].iter().enumerate() {
            let node = swarm.start_node(n, &format!("pd{tag}{end}"));
            swarm.nodes.push(node);
        }
        swarm.join_nets(tag);
        for n in 0..2 {
            swarm.wait_dockerd(n);
        }
        swarm.build_images(&rootfs);
        swarm.form();
        Some(swarm)
    }

    fn start_node(&self, n: usize, netns: &str) -> Node {
        let root = self.dir.path().join(format!("n{n}"));
        std::fs::create_dir_all(&root).expect("node dir");
        let ok = Command::new("ip")
            .args(["netns", "add", netns])
            .status()
            .expect("ip (iproute2)");
        assert!(ok.success(), "ip netns add {netns}");
        let socket = root.join("docker.sock");
        let log = std::fs::File::create(root.join("dockerd.log")).expect("log");
        // `ip netns exec` remounts /sys, which dockerd then finds without
        // a devices cgroup; nsenter enters the network namespace only.
        let dockerd = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{netns}"))
            .arg(DOCKERD)
            .arg("--data-root")
            .arg(root.join("data"))
            .arg("--exec-root")
            .arg(root.join("exec"))
            .arg("--pidfile")
            .arg(root.join("dockerd.pid"))
            .arg("-H")
            .arg(format!("unix://{}", socket.display()))
            .args(["--bip", &format!("172.{}.0.1/24", 31 + n)])
            .args(["--containerd-namespace", netns])
            .args(["--containerd-plugins-namespace", &format!("{netns}p")])
            .args(["--cgroup-parent", &format!("/{}-{n}", self.cgroup)])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("nsenter dockerd");
        Node {
            netns: netns.to_string(),
            dockerd: Some(dockerd),
            docker: format!("{DOCKER} -H unix://{}", socket.display()),
            socket,
        }
    }

    /// The veth pair between the two namespaces: 10.123.0.1 and .2.
    fn join_nets(&self, tag: u32) {
        let (a, b) = (&self.nodes[0].netns, &self.nodes[1].netns);
        let (va, vb) = (format!("pdv{tag}a"), format!("pdv{tag}b"));
        let steps: Vec<Vec<String>> = vec![
            vec![
                "link", "add", &va, "netns", a, "type", "veth", "peer", "name", &vb, "netns", b,
            ]
            .into_iter()
            .map(String::from)
            .collect(),
            split(&format!("-n {a} addr add 10.123.0.1/24 dev {va}")),
            split(&format!("-n {b} addr add 10.123.0.2/24 dev {vb}")),
            split(&format!("-n {a} link set {va} up")),
            split(&format!("-n {b} link set {vb} up")),
            split(&format!("-n {a} link set lo up")),
            split(&format!("-n {b} link set lo up")),
        ];
        for step in steps {
            let out = Command::new("ip").args(&step).output().expect("ip");
            assert!(out.status.success(), "ip {step:?}: {out:?}");
        }
    }

    fn wait_dockerd(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self
            .docker(n, "version --format {{.Server.Version}}")
            .status
            .success()
        {
            let log = std::fs::read_to_string(self.dir.path().join(format!("n{n}/dockerd.log")))
                .unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "dockerd of node {n} did not answer; its log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The image on both nodes at once (each imports the tar itself).
    fn build_images(&self, rootfs: &str) {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/container/build-image.sh");
        std::thread::scope(|s| {
            for node in &self.nodes {
                let mut build = Command::new(&script);
                build.args([rootfs, BIN, IMAGE]).env("DOCKER", &node.docker);
                s.spawn(move || run_ok("build-image.sh", &mut build));
            }
        });
    }

    /// `swarm init` on node 0, `swarm join` from node 1.
    fn form(&mut self) {
        self.ok(
            0,
            "swarm init --advertise-addr 10.123.0.1 --listen-addr 10.123.0.1:2377 --default-addr-pool 10.124.0.0/16",
        );
        let token = self.ok(0, "swarm join-token -q worker");
        self.ok(
            1,
            &format!(
                "swarm join --advertise-addr 10.123.0.2 --token {} 10.123.0.1:2377",
                token.trim()
            ),
        );
        let ids = self.ok(0, "node ls --format {{.ID}}:{{.ManagerStatus}}");
        let (mut manager, mut worker) = (None, None);
        for line in ids.lines() {
            match line.split_once(':') {
                Some((id, "")) => worker = Some(id.to_string()),
                Some((id, _)) => manager = Some(id.to_string()),
                None => {}
            }
        }
        self.node_ids = vec![
            manager.expect("the manager node"),
            worker.expect("the worker node"),
        ];
    }

    /// Runs the docker client of node `n` with `args` (split on spaces).
    pub fn docker(&self, n: usize, args: &str) -> Output {
        self.docker_argv(n, &split(args))
    }

    pub fn docker_argv(&self, n: usize, args: &[String]) -> Output {
        let child = Command::new(DOCKER)
            .arg("-H")
            .arg(format!("unix://{}", self.nodes[n].socket.display()))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("docker");
        output_within(child, &format!("docker {args:?}"))
    }

    /// `docker`, which must succeed; its stdout.
    pub fn ok(&self, n: usize, args: &str) -> String {
        self.ok_argv(n, &split(args))
    }

    pub fn ok_argv(&self, n: usize, args: &[String]) -> String {
        let out = self.docker_argv(n, args);
        assert!(out.status.success(), "docker {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// The running tasks of `service`, on both nodes, by slot.
    pub fn tasks(&self, service: &str) -> Vec<Task> {
        let mut tasks = Vec::new();
        for n in 0..self.nodes.len() {
            let filter = format!("label=com.docker.swarm.service.name={service}");
            let names = self.ok_argv(
                n,
                &[
                    "ps".into(),
                    "--filter".into(),
                    filter,
                    "--filter".into(),
                    "status=running".into(),
                    "--format".into(),
                    "{{.Names}}".into(),
                ],
            );
            for name in names.lines().filter(|l| !l.is_empty()) {
                let slot = name.split('.').nth(1).unwrap_or_default().to_string();
                tasks.push(Task {
                    slot,
                    container: name.to_string(),
                    node: n,
                });
            }
        }
        tasks.sort_by(|a, b| a.slot.cmp(&b.slot));
        tasks
    }

    /// Runs `bash -c script` inside `task`'s container; its output.
    pub fn exec(&self, task: &Task, script: &str) -> Output {
        self.docker_argv(
            task.node,
            &[
                "exec".into(),
                task.container.clone(),
                "bash".into(),
                "-c".into(),
                script.into(),
            ],
        )
    }

    /// The procd CLI here, reaching `task`'s procd through
    /// `--host docker://CONTAINER` (PROCD_DOCKER names the task's node).
    pub fn procd(&self, task: &Task, args: &[&str]) -> Output {
        let child = self.procd_command(task, args).spawn().expect("procd");
        output_within_for(
            child,
            &format!("procd --host docker://{} {args:?}", task.container),
            Duration::from_secs(60),
        )
    }

    pub fn procd_command(&self, task: &Task, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("--host")
            .arg(format!("docker://{}", task.container))
            .args(args)
            .env("PROCD_DOCKER", &self.nodes[task.node].docker)
            .env("PROCD_HOME", self.dir.path().join("client"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn stop_node(&mut self, n: usize) {
        let ids = self.docker(n, "ps -aq");
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            let _ = self.docker(n, &format!("rm -f {id}"));
        }
        let _ = self.docker(n, "swarm leave --force");
        let Some(mut dockerd) = self.nodes[n].dockerd.take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(dockerd.id() as i32);
        // nsenter execs dockerd: this pid is dockerd's.
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while dockerd.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = dockerd.kill();
                let _ = dockerd.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn split(args: &str) -> Vec<String> {
    args.split(' ').map(String::from).collect()
}

/// The pids of processes whose command line names `dir` (what a dockerd
/// of ours started and left: its containerd, shims).
fn started_under(dir: &Path) -> Vec<i32> {
    let needle = dir.to_string_lossy().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&needle))
                .unwrap_or(false)
        })
        .collect()
}

impl Drop for Swarm {
    fn drop(&mut self) {
        if self.nodes.len() == 2 && self.node_ids.len() == 2 {
            let _ = self.docker(0, "service rm procd-sbx");
        }
        for n in (0..self.nodes.len()).rev() {
            self.stop_node(n);
        }
        for pid in started_under(self.dir.path()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // Mounts a dockerd left under our directory, deepest first.
        let prefix = self.dir.path().to_string_lossy().to_string();
        let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(String::from))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").args(["-l", &m]).status();
        }
        for node in &self.nodes {
            let _ = Command::new("ip")
                .args(["netns", "del", &node.netns])
                .status();
        }
        for n in 0..2 {
            for controller in std::fs::read_dir("/sys/fs/cgroup")
                .into_iter()
                .flatten()
                .flatten()
            {
                let _ = std::fs::remove_dir(controller.path().join(format!("{}-{n}", self.cgroup)));
            }
        }
    }
}
