//! What a session's live tree is doing (docs/agents.md): the TCP ports it
//! listens on, the resources it uses, and whether one of its processes is
//! blocked reading the session's input. Taken by the monitor once a tick
//! for every running session with one /proc scan (off the event loop), and
//! kept on the session. A `poll` of a session with a cgroup reads its
//! resources again when the last read is over 100 ms old
//! (`resources_now`: a few reads of kernel memory, on the event loop,
//! at most 256 members); a yield that waits on a quiet session takes its
//! own observation (`Registry::probe`).

use crate::procfs::ProcFs;
use crate::tree::kill::{KillPlan, TreeSpec};
use procd_proto::Resources;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Instant;

/// One observation of a session's tree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    pub ports: Vec<u16>,
    pub resources: Resources,
    /// A process of the tree was blocked reading the session's input.
    pub reading_input: bool,
    /// When it was taken (None: never observed).
    pub taken: Option<Instant>,
    /// When the observations began to see it blocked reading its input,
    /// with nothing happening on its terminal or pipes since (kept across
    /// observations by `Session::set_observed`).
    pub reading_since: Option<Instant>,
}

/// What a session's input is: the link of its stdin pipe or terminal as
/// /proc/<pid>/fd/N reads ("pipe:[123]", "/dev/pts/4"), unique while open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputId(pub std::path::PathBuf);

impl InputId {
    /// What the process's descriptor `fd` refers to.
    pub fn of_fd(procfs: &ProcFs, pid: i32, fd: u64) -> Option<InputId> {
        std::fs::read_link(procfs.root().join(format!("{pid}/fd/{fd}")))
            .ok()
            .map(InputId)
    }
}

/// A tree to observe, and the input its processes might wait on.
pub struct Watched {
    pub tree: TreeSpec,
    pub input: Option<InputId>,
}

/// Observes each tree (`trees[i]` gives `result[i]`). Blocking. A tree
/// with a cgroup is what its `cgroup.procs` lists, with the CPU time of
/// its `cpu.stat`: no scan of /proc. Without one, the trees come from one
/// /proc scan as the root's descendants and its group (the marker search
/// of a kill plan, every process's environ for each session, is left out:
/// a look once a tick must stay cheap).
/// The live processes of a tree: with a cgroup, its members (each
/// one's memory from `statm`, cheap, when the cgroup gives the CPU time;
/// else from its `stat`); without one, found through the /proc table.
fn members_of(
    tree: &TreeSpec,
    cgroup_cpu: bool,
    procfs: &ProcFs,
    table: &[crate::procfs::ProcStat],
    by_pid: &HashMap<i32, &crate::procfs::ProcStat>,
) -> Vec<Member> {
    match tree.cgroup.as_ref().and_then(|c| c.procs().ok()) {
        Some(pids) if cgroup_cpu => by_statm(procfs, pids),
        Some(pids) => pids
            .into_iter()
            .filter_map(|p| procfs.stat(p).ok())
            .filter(|s| !s.is_dead())
            .map(Member::from)
            .collect(),
        None => {
            let tree = TreeSpec {
                marker: Vec::new(),
                cgroup: None,
                ..tree.clone()
            };
            KillPlan::from_table(&tree, procfs, table, true)
                .targets
                .iter()
                .filter_map(|t| by_pid.get(&t.pid).filter(|s| s.start_time == t.start_time))
                .filter(|s| !s.is_dead())
                .map(|s| Member::from(**s))
                .collect()
        }
    }
}

pub fn observe(procfs: &ProcFs, trees: &[Watched]) -> Vec<Observation> {
    let page = crate::procfs::page_size();
    let hz = crate::procfs::clock_ticks_per_second();
    let table = if trees.iter().any(|w| w.tree.cgroup.is_none()) {
        procfs.all().unwrap_or_default()
    } else {
        Vec::new()
    };
    let by_pid: HashMap<i32, &crate::procfs::ProcStat> = table.iter().map(|s| (s.pid, s)).collect();
    let mut listeners = Listeners::default();
    trees
        .iter()
        .map(|Watched { tree, input }| {
            // With a cgroup, its members and its CPU time come from it,
            // and each member's memory from `statm` (cheap); otherwise
            // from each process's `stat`, found through the table.
            let cgroup_cpu = tree.cgroup.as_ref().and_then(|c| c.cpu_seconds());
            let members = members_of(tree, cgroup_cpu.is_some(), procfs, &table, &by_pid);
            // A cgroup's listening sockets are the ones made in it, as the
            // kernel tags them: no process's descriptors need be listed.
            let cgroup_ports = tree
                .cgroup
                .as_ref()
                .and_then(|c| listeners.in_cgroup(c.inode()?));
            let by_descriptors = cgroup_ports.is_none();
            let mut ports = cgroup_ports.unwrap_or_default();
            let resources = summed(&members, cgroup_cpu, page, hz);
            let mut reading_input = false;
            for member in &members {
                let dir = procfs.root().join(member.pid.to_string());
                // Only a sleeping process can be blocked reading its input
                // (where the state is unknown, its syscall file says).
                if let Some(input) = input {
                    if !reading_input && member.state.is_none_or(|s| matches!(s, 'S' | 'D')) {
                        reading_input = blocked_on(&dir, &|fd| {
                            std::fs::read_link(dir.join(format!("fd/{fd}")))
                                .is_ok_and(|link| link == input.0)
                        });
                    }
                }
                if by_descriptors {
                    ports.extend(listeners.of_process(procfs, &dir));
                }
            }
            Observation {
                ports: ports.into_iter().collect(),
                resources,
                reading_input,
                taken: Some(Instant::now()),
                reading_since: None,
            }
        })
        .collect()
}

/// The most members `resources_now` reads (a `statm` each, ~2 µs).
const MAX_FRESH_MEMBERS: usize = 256;

/// The resources of a tree with a cgroup that counts its CPU time, as
/// they are now: its members' memory and the cgroup's CPU time, a few
/// reads of kernel memory (no /proc scan), for a `poll` that should not
/// report the monitor's last tick (up to a second old, and nothing at all
/// right after the spawn). None without such a cgroup.
pub fn resources_now(procfs: &ProcFs, tree: &TreeSpec) -> Option<Resources> {
    let cgroup = tree.cgroup.as_ref()?;
    let cpu = cgroup.cpu_seconds()?;
    let pids = cgroup.procs().ok()?;
    // A read per member, on the poll's thread: past this many, the
    // tick's figure stands.
    if pids.len() > MAX_FRESH_MEMBERS {
        return None;
    }
    let members = by_statm(procfs, pids);
    let hz = crate::procfs::clock_ticks_per_second();
    Some(summed(&members, Some(cpu), crate::procfs::page_size(), hz))
}

/// The live ones of `pids`, each with its memory from `statm`.
fn by_statm(procfs: &ProcFs, pids: Vec<i32>) -> Vec<Member> {
    pids.into_iter()
        .filter_map(|pid| match procfs.resident_pages(pid) {
            Ok(Some(rss_pages)) => Some(Member {
                pid,
                rss_pages,
                cpu_ticks: 0,
                state: None,
            }),
            // A zombie, or gone meanwhile.
            _ => None,
        })
        .collect()
}

/// What `members` use, summed; the cgroup's CPU time where it counts it.
fn summed(members: &[Member], cgroup_cpu: Option<f64>, page: u64, hz: f64) -> Resources {
    let mut resources = Resources::default();
    for member in members {
        resources.procs += 1;
        resources.rss_bytes += member.rss_pages * page;
        resources.cpu_seconds += member.cpu_ticks as f64 / hz;
    }
    if let Some(cpu) = cgroup_cpu {
        resources.cpu_seconds = cpu;
    }
    resources.cpu_seconds = (resources.cpu_seconds * 100.0).round() / 100.0;
    resources
}

/// A live process of an observed tree, with what an observation needs.
struct Member {
    pid: i32,
    rss_pages: u64,
    /// 0 where the cgroup counts CPU time for the whole tree.
    cpu_ticks: u64,
    /// None where it was not read (the cgroup path).
    state: Option<char>,
}

impl From<crate::procfs::ProcStat> for Member {
    fn from(s: crate::procfs::ProcStat) -> Member {
        Member {
            pid: s.pid,
            rss_pages: s.rss_pages,
            cpu_ticks: s.cpu_ticks,
            state: Some(s.state),
        }
    }
}

/// The listening TCP sockets, each table read at most once per
/// observation: the daemon's own network namespace through netlink (with
/// the cgroup each socket was made in), another one (rare) through a
/// process's /proc/net tables.
#[derive(Default)]
struct Listeners {
    /// Ours (None: not read yet; Some(None): netlink failed).
    ours: Option<Option<HashMap<u64, crate::observation::sockdiag::Listening>>>,
    /// Our namespace's link (`net:[N]`), read once.
    own_ns: Option<String>,
    /// Other namespaces', inode → port.
    others: HashMap<String, HashMap<u64, u16>>,
}

impl Listeners {
    fn ours(&mut self) -> Option<&HashMap<u64, crate::observation::sockdiag::Listening>> {
        self.ours
            .get_or_insert_with(|| crate::observation::sockdiag::listening_tcp().ok())
            .as_ref()
    }

    /// The ports of the sockets made in the cgroup whose id is `id`; None
    /// where they cannot be told (no netlink, or a kernel that does not
    /// tag sockets with their cgroup).
    fn in_cgroup(&mut self, id: u64) -> Option<BTreeSet<u16>> {
        let ours = self.ours()?;
        if ours.values().any(|l| l.cgroup.is_none()) {
            return None;
        }
        Some(
            ours.values()
                .filter(|l| l.cgroup == Some(id))
                .map(|l| l.port)
                .collect(),
        )
    }

    /// The ports the process `dir` listens on, found through its
    /// descriptors (a tree without a cgroup, or untagged sockets).
    fn of_process(&mut self, procfs: &ProcFs, dir: &Path) -> Vec<u16> {
        let inodes: Vec<u64> = fd_links(dir)
            .iter()
            .filter_map(|(_, l)| socket_inode(l))
            .collect();
        if inodes.is_empty() {
            return Vec::new();
        }
        let ns = std::fs::read_link(dir.join("ns/net"))
            .map(|l| l.display().to_string())
            .unwrap_or_default();
        let own_ns = self.own_ns.get_or_insert_with(|| {
            std::fs::read_link(procfs.root().join("self/ns/net"))
                .map(|l| l.display().to_string())
                .unwrap_or_default()
        });
        if !ns.is_empty() && *own_ns == ns {
            if let Some(ours) = self.ours() {
                return inodes
                    .iter()
                    .filter_map(|i| ours.get(i))
                    .map(|l| l.port)
                    .collect();
            }
        }
        let theirs = self
            .others
            .entry(ns)
            .or_insert_with(|| listening_sockets(dir));
        inodes
            .iter()
            .filter_map(|i| theirs.get(i))
            .copied()
            .collect()
    }
}

/// Whether the process's main thread is blocked reading `input`: in a
/// read on it, in a select whose only descriptor is fd 0 and fd 0 is it
/// (readline), or in an epoll wait whose set watches it (node, libuv).
/// /proc/<pid>/syscall names the call and its arguments, the epoll set is
/// listed in /proc/<pid>/fdinfo/<epfd>. A sleeping process shows its sleep
/// call and a computing one "running", so neither is ever taken for a
/// reader. poll(2) keeps its descriptors in the process's memory and is
/// not recognised (a missed prompt, never a false one).
///
/// The call is read first, and only the descriptors it names are then
/// looked at (`is_input`): a process asleep in anything else costs one
/// read, not a listing of its descriptors.
fn blocked_on(dir: &Path, is_input: &dyn Fn(u64) -> bool) -> bool {
    let Ok(text) = crate::procfs::read_small(&dir.join("syscall")) else {
        return false;
    };
    let Some((nr, args)) = parse_syscall(&text) else {
        return false;
    };
    match nr {
        libc::SYS_read | libc::SYS_readv | libc::SYS_pread64 => is_input(args[0]),
        libc::SYS_pselect6 => args[0] == 1 && is_input(0),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_select => args[0] == 1 && is_input(0),
        libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2 => epoll_watches(dir, args[0], is_input),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_epoll_wait => epoll_watches(dir, args[0], is_input),
        _ => false,
    }
}

/// The syscall number and first argument of /proc/<pid>/syscall ("running"
/// or a negative number when in none).
fn parse_syscall(text: &str) -> Option<(libc::c_long, [u64; 1])> {
    let mut fields = text.split_whitespace();
    let nr = fields.next()?.parse::<libc::c_long>().ok()?;
    let arg = fields.next()?.strip_prefix("0x")?;
    Some((nr, [u64::from_str_radix(arg, 16).ok()?]))
}

/// Whether the epoll set `epfd` watches a descriptor `is_input` accepts
/// ("tfd: N" lines of its fdinfo).
fn epoll_watches(dir: &Path, epfd: u64, is_input: &dyn Fn(u64) -> bool) -> bool {
    let Ok(info) = std::fs::read_to_string(dir.join(format!("fdinfo/{epfd}"))) else {
        return false;
    };
    info.lines()
        .filter_map(|l| {
            l.strip_prefix("tfd:")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .any(is_input)
}

/// A process's descriptors and what each links to.
fn fd_links(dir: &Path) -> Vec<(u64, std::path::PathBuf)> {
    let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| {
            let n = fd.file_name().to_str()?.parse().ok()?;
            Some((n, std::fs::read_link(fd.path()).ok()?))
        })
        .collect()
}

/// The inode of a "socket:[N]" link.
fn socket_inode(link: &Path) -> Option<u64> {
    link.to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// TCP sockets in LISTEN state seen from the process's network namespace:
/// inode → local port (/proc/<pid>/net/tcp and tcp6, state 0A).
fn listening_sockets(dir: &Path) -> HashMap<u64, u16> {
    let mut out = HashMap::new();
    for table in ["net/tcp", "net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(dir.join(table)) else {
            continue;
        };
        out.extend(parse_listening(&text));
    }
    out
}

fn parse_listening(table: &str) -> Vec<(u64, u16)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.get(3) != Some(&"0A") {
                return None;
            }
            let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let inode = f.get(9)?.parse().ok()?;
            Some((inode, port))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_entries_are_parsed_from_net_tcp() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:A1B2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 67890 1 0000000000000000 20 4 30 10 -1\n";
        assert_eq!(parse_listening(table), vec![(12345, 8080)]);
    }

    #[test]
    fn syscall_lines_give_the_call_and_its_first_argument() {
        assert_eq!(
            parse_syscall("0 0x0 0x7ffd70dd4676 0x1 0x0 0x7f16c1acac68 0x0 0x7ffd 0x7f16\n"),
            Some((0, [0]))
        );
        assert_eq!(
            parse_syscall("281 0xe 0x7ffc666b0650 0x400 0xffffffff 0x0 0x8 0x7ffc 0x7f17"),
            Some((281, [14]))
        );
        assert_eq!(parse_syscall("running\n"), None);
        // Blocked outside a syscall: a number no read matches.
        assert_eq!(parse_syscall("-1 0x7ffc 0x7f17\n").map(|c| c.0), Some(-1));
    }
}
