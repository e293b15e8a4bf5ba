//! Which containment holds sessions' trees (docs/containment.md): a cgroup
//! per session where one can be had, else a systemd scope per session when
//! the daemon runs under systemd, else the process group and the marker.

use procd_sys::cgroup::CgroupTree;
use std::path::Path;
use std::sync::Arc;

/// The containment in force, and why.
#[derive(Debug, Clone)]
pub struct Containment {
    /// "cgroup", "scope" or "group" (as `status` says it).
    pub kind: &'static str,
    pub reason: String,
    /// With "cgroup": where sessions' cgroups are made.
    pub cgroups: Option<Arc<CgroupTree>>,
}

impl Containment {
    /// Chooses per the config key `containment` ("auto", "cgroup",
    /// "scope", "group"). `under_systemd`: systemd started the daemon.
    /// `instance` names the instance (its state dir), so that each has a
    /// cgroup subtree of its own. "cgroup" that cannot be had is an error.
    pub fn choose(
        wanted: &str,
        under_systemd: bool,
        instance: &Path,
    ) -> Result<Containment, String> {
        let group = |reason: String| Containment {
            kind: "group",
            reason,
            cgroups: None,
        };
        let scope = || Containment {
            kind: "scope",
            reason: "a systemd scope per session (systemd-run --user --scope)".into(),
            cgroups: None,
        };
        if wanted == "group" {
            return Ok(group("containment = \"group\" in the config".into()));
        }
        if wanted == "scope" {
            return Ok(if under_systemd {
                scope()
            } else {
                group("containment = \"scope\", but systemd did not start procd".into())
            });
        }
        match CgroupTree::find(&instance_tag(instance)) {
            Ok(tree) => Ok(Containment {
                kind: "cgroup",
                reason: format!("a cgroup per session under {}", tree.base().display()),
                cgroups: Some(Arc::new(tree)),
            }),
            Err(why) if wanted == "cgroup" => Err(format!(
                "containment = \"cgroup\", but no cgroup can be had: {why}"
            )),
            Err(_) if under_systemd => Ok(scope()),
            Err(why) => Ok(group(format!(
                "no cgroup to manage ({why}): process group and marker"
            ))),
        }
    }
}

/// 16 hex digits naming the instance: FNV-1a of its state dir's path, so
/// that a daemon started again for the same instance finds the same tree.
pub fn instance_tag(instance: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in instance.as_os_str().as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_differ_per_instance_and_are_stable() {
        let a = instance_tag(Path::new("/tmp/a/state"));
        assert_eq!(a, instance_tag(Path::new("/tmp/a/state")));
        assert_ne!(a, instance_tag(Path::new("/tmp/b/state")));
        assert_eq!(a.len(), 16);
    }

    #[test]
    fn group_and_scope_are_chosen_as_asked() {
        let g = Containment::choose("group", true, Path::new("/x")).unwrap();
        assert_eq!((g.kind, g.cgroups.is_none()), ("group", true));
        let s = Containment::choose("scope", true, Path::new("/x")).unwrap();
        assert_eq!(s.kind, "scope");
        let s = Containment::choose("scope", false, Path::new("/x")).unwrap();
        assert_eq!(s.kind, "group");
    }
}
