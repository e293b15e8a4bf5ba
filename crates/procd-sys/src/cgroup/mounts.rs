//! Where the cgroup hierarchies are mounted, and where the daemon sits in
//! each (/proc/self/mountinfo and /proc/self/cgroup).

use super::Controller;
use std::path::PathBuf;

/// Where a hierarchy is mounted and where the daemon sits in it.
#[derive(Debug, Clone)]
pub(super) struct Hierarchy {
    pub(super) mount: PathBuf,
    pub(super) own: PathBuf,
}

impl Hierarchy {
    /// `<mount><own>/procd-<tag>`.
    pub(super) fn base(&self, tag: &str) -> PathBuf {
        let own = self.own.strip_prefix("/").unwrap_or(&self.own);
        self.mount.join(own).join(format!("procd-{tag}"))
    }
}

/// The cgroup2 hierarchy and the v1 hierarchies of memory, cpu, pids and
/// blkio from /proc/self/mountinfo, each with the daemon's own path in it from
/// /proc/self/cgroup.
pub(super) fn hierarchies(
    mountinfo: &str,
    own: &str,
) -> (Option<Hierarchy>, Vec<(Controller, Hierarchy)>) {
    let mut own_v2 = None;
    let mut own_v1: Vec<(Vec<&str>, &str)> = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            own_v2 = Some(path);
        } else {
            own_v1.push((controllers.split(',').collect(), path));
        }
    }
    let mut v2 = None;
    let mut v1 = Vec::new();
    for line in mountinfo.lines() {
        // "<id> <parent> <dev> <root> <mount point> <opts> [optional…] - <type> <source> <super opts>"
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.split(' ').collect();
        let theirs: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(point), Some(fstype)) =
            (fields.get(3), fields.get(4), theirs.first())
        else {
            continue;
        };
        // Only a mount of the hierarchy's root maps paths one to one.
        if *root != "/" {
            continue;
        }
        let point = PathBuf::from(unescape(point));
        match *fstype {
            "cgroup2" if v2.is_none() => {
                if let Some(own) = own_v2 {
                    v2 = Some(Hierarchy {
                        mount: point,
                        own: own.into(),
                    });
                }
            }
            "cgroup" => {
                let opts: Vec<&str> = theirs.get(2).map_or(vec![], |o| o.split(',').collect());
                for c in Controller::ALL {
                    if !opts.contains(&c.v1_name()) || v1.iter().any(|(have, _)| *have == c) {
                        continue;
                    }
                    if let Some((_, own)) = own_v1.iter().find(|(cs, _)| cs.contains(&c.v1_name()))
                    {
                        v1.push((
                            c,
                            Hierarchy {
                                mount: point.clone(),
                                own: (*own).into(),
                            },
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    (v2, v1)
}

/// mountinfo escapes space, tab, newline and backslash as octal.
pub(super) fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(c as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}
