use super::mounts::unescape;
use super::*;

const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
const OWN: &str = "\
8:pids:/
4:memory:/sandbox/abc
1:cpu:/
0::/user.slice/procd.service
";

#[test]
fn a_hybrid_host_has_v2_and_v1_controllers() {
    let (v2, v1) = hierarchies(MOUNTINFO, OWN);
    let v2 = v2.unwrap();
    assert_eq!(
        v2.base("t"),
        PathBuf::from("/sys/fs/cgroup/unified/user.slice/procd.service/procd-t")
    );
    let memory = v1.iter().find(|(c, _)| *c == Controller::Memory).unwrap();
    assert_eq!(
        memory.1.base("t"),
        PathBuf::from("/sys/fs/cgroup/memory/sandbox/abc/procd-t")
    );
    assert_eq!(v1.len(), 3);
}

#[test]
fn a_pure_v2_host_has_no_v1() {
    let mounts = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
    let (v2, v1) = hierarchies(mounts, "0::/\n");
    assert_eq!(
        v2.unwrap().base("x"),
        PathBuf::from("/sys/fs/cgroup/procd-x")
    );
    assert!(v1.is_empty());
}

#[test]
fn a_recorded_cgroup_not_on_a_cgroup_filesystem_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let planted = dir.path().join("procd-0123456789abcdef/proc_0123456789ab");
    std::fs::create_dir_all(&planted).unwrap();
    // The right shape, but a plain directory: not a cgroup.
    assert!(SessionCgroup::recorded("proc_0123456789ab", &planted, &[]).is_none());
    // Not procd's shape, wherever it is.
    for path in [
        "/sys/fs/cgroup/unified/proc_0123456789ab",
        "/sys/fs/cgroup/unified/procd-x/../proc_0123456789ab",
        "/sys/fs/cgroup/unified/procd-x/proc_ffffffffffff",
        "relative/procd-x/proc_0123456789ab",
    ] {
        assert!(
            SessionCgroup::recorded("proc_0123456789ab", Path::new(path), &[]).is_none(),
            "{path}"
        );
    }
}

#[test]
fn tags_differ_per_instance_and_are_stable() {
    let a = instance_tag(Path::new("/tmp/a/state"));
    assert_eq!(a, instance_tag(Path::new("/tmp/a/state")));
    assert_ne!(a, instance_tag(Path::new("/tmp/b/state")));
    assert_eq!(a.len(), 16);
}

#[test]
fn keyed_files_parse() {
    assert_eq!(keyed("populated 0\nfrozen 0\n", "populated"), Some(0));
    assert_eq!(
        keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "oom_kill"),
        Some(2)
    );
    assert_eq!(keyed("usage_usec 12\n", "user_usec"), None);
    assert_eq!(unescape("/a\\040b"), "/a b");
}

/// An I/O weight goes to whichever weight file the disks' scheduler
/// gives the session's cgroup, in that file's scale; with none, it is an
/// error naming the io controller. (Files stand in for the kernel's: no
/// disk here has a scheduler that reads weights.)
#[test]
fn an_io_weight_goes_to_the_file_the_scheduler_reads() {
    let limits = Limits {
        io_weight: Some(50),
        ..Limits::default()
    };
    for (file, v1, written) in [
        ("io.weight", false, "50"),
        ("io.bfq.weight", false, "50"),
        ("blkio.weight", true, "250"),
        ("blkio.bfq.weight", true, "50"),
    ] {
        let v2 = tempfile::tempdir().unwrap();
        let blkio = tempfile::tempdir().unwrap();
        let (dir, v1) = match v1 {
            true => (blkio.path(), vec![(Controller::Io, blkio.path().into())]),
            false => (v2.path(), vec![]),
        };
        std::fs::write(dir.join(file), "").unwrap();
        let cgroup = SessionCgroup::new(v2.path().into(), v1);
        cgroup.write_limits(&limits).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join(file)).unwrap(), written);
    }
    let bare = tempfile::tempdir().unwrap();
    let err = SessionCgroup::new(bare.path().into(), vec![])
        .write_limits(&limits)
        .unwrap_err()
        .to_string();
    assert!(err.contains("the io controller"), "{err}");
}

#[test]
fn blkio_is_the_io_controller_on_v1() {
    let mounts =
        format!("{MOUNTINFO}45 31 0:40 / /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio\n");
    let (_, v1) = hierarchies(&mounts, &format!("9:blkio:/x\n{OWN}"));
    let io = v1.iter().find(|(c, _)| *c == Controller::Io).unwrap();
    assert_eq!(
        io.1.base("t"),
        PathBuf::from("/sys/fs/cgroup/blkio/x/procd-t")
    );
}
