//! What a session's live tree is doing (SPEC §12): the TCP ports it
//! listens on and the resources it uses. Taken by the monitor once a tick
//! for every running session with one /proc scan (off the event loop), and
//! kept on the session, so a `poll` only reads the last observation.

use crate::kill::{KillPlan, TreeSpec};
use crate::procfs::ProcFs;
use procd_proto::Resources;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// One observation of a session's tree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    pub ports: Vec<u16>,
    pub resources: Resources,
}

/// Observes each tree (`trees[i]` gives `result[i]`). Blocking.
pub fn observe(procfs: &ProcFs, trees: &[TreeSpec]) -> Vec<Observation> {
    let page = page_size();
    let hz = crate::procfs::clock_ticks_per_second();
    // Listening sockets by inode, per network namespace (read once each).
    let mut listening_by_ns: HashMap<String, HashMap<u64, u16>> = HashMap::new();
    trees
        .iter()
        .map(|tree| {
            let plan = KillPlan::collect(tree, procfs, true);
            let mut ports = BTreeSet::new();
            let mut resources = Resources::default();
            for target in &plan.targets {
                let dir = procfs.root().join(target.pid.to_string());
                let Ok(stat) = procfs.stat(target.pid) else {
                    continue;
                };
                if stat.is_dead() || stat.start_time != target.start_time {
                    continue;
                }
                resources.procs += 1;
                resources.rss_bytes += rss_pages(&dir) * page;
                resources.cpu_seconds += stat.cpu_ticks as f64 / hz;
                let inodes = socket_inodes(&dir);
                if inodes.is_empty() {
                    continue;
                }
                let ns = std::fs::read_link(dir.join("ns/net"))
                    .map(|l| l.display().to_string())
                    .unwrap_or_default();
                let listening = listening_by_ns
                    .entry(ns)
                    .or_insert_with(|| listening_sockets(&dir));
                ports.extend(inodes.iter().filter_map(|i| listening.get(i)));
            }
            resources.cpu_seconds = (resources.cpu_seconds * 100.0).round() / 100.0;
            Observation {
                ports: ports.into_iter().collect(),
                resources,
            }
        })
        .collect()
}

fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the system; no memory is touched.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).unwrap_or(4096)
}

/// Resident pages (the second field of /proc/<pid>/statm).
fn rss_pages(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Inodes of the sockets a process holds (its fds that read "socket:[N]").
fn socket_inodes(dir: &Path) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| {
            let link = std::fs::read_link(fd.path()).ok()?;
            let text = link.to_str()?;
            text.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
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
}
