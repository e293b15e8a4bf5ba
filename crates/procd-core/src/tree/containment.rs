//! Which containment holds sessions' trees (docs/containment.md): a cgroup
//! per session where one can be had, else a systemd scope per session when
//! the daemon runs under systemd, else the process group and the marker.

use procd_sys::cgroup::{instance_tag, CgroupTree};
use std::path::Path;
use std::sync::Arc;

/// The containment in force, carrying what it needs.
#[derive(Debug, Clone)]
pub enum Containment {
    /// A cgroup per session below this tree.
    Cgroup(Arc<CgroupTree>),
    /// A systemd scope per session (systemd started procd).
    Scope,
    /// The process group and the marker only, and why.
    Group { why: String },
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
        let group = |why: &str| Containment::Group { why: why.into() };
        match wanted {
            "group" => return Ok(group("containment = \"group\" in the config")),
            "scope" if under_systemd => return Ok(Containment::Scope),
            "scope" => {
                return Ok(group(
                    "containment = \"scope\", but systemd did not start procd",
                ))
            }
            _ => {}
        }
        match CgroupTree::find(&instance_tag(instance)) {
            Ok(tree) => Ok(Containment::Cgroup(Arc::new(tree))),
            Err(why) if wanted == "cgroup" => Err(format!(
                "containment = \"cgroup\", but no cgroup can be had: {why}"
            )),
            Err(_) if under_systemd => Ok(Containment::Scope),
            Err(why) => Ok(group(&format!("no cgroup to manage ({why})"))),
        }
    }

    /// As `status` names it: "cgroup", "scope" or "group".
    pub fn kind(&self) -> &'static str {
        match self {
            Containment::Cgroup(_) => "cgroup",
            Containment::Scope => "scope",
            Containment::Group { .. } => "group",
        }
    }

    /// Where, or why, for `status`.
    pub fn reason(&self) -> String {
        match self {
            Containment::Cgroup(tree) => {
                format!("a cgroup per session under {}", tree.base().display())
            }
            Containment::Scope => "a systemd scope per session (systemd-run --user --scope)".into(),
            Containment::Group { why } => format!("process group and marker: {why}"),
        }
    }

    /// Each controller a limit cannot use here, and why (`status`).
    pub fn limits_unavailable(&self) -> std::collections::BTreeMap<String, String> {
        use procd_sys::cgroup::Controller;
        match self {
            Containment::Cgroup(tree) => tree
                .unavailable()
                .map(|(c, why)| (c.name().to_string(), why.to_string()))
                .collect(),
            _ => Controller::ALL
                .iter()
                .map(|c| {
                    let why = format!("sessions get no cgroup here (containment: {})", self.kind());
                    (c.name().to_string(), why)
                })
                .collect(),
        }
    }

    /// The cgroup tree, with "cgroup".
    pub fn cgroups(&self) -> Option<Arc<CgroupTree>> {
        match self {
            Containment::Cgroup(tree) => Some(tree.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_and_scope_are_chosen_as_asked() {
        let g = Containment::choose("group", true, Path::new("/x")).unwrap();
        assert_eq!((g.kind(), g.cgroups().is_none()), ("group", true));
        let s = Containment::choose("scope", true, Path::new("/x")).unwrap();
        assert_eq!(s.kind(), "scope");
        let s = Containment::choose("scope", false, Path::new("/x")).unwrap();
        assert_eq!(s.kind(), "group");
        assert!(
            s.reason().contains("systemd did not start procd"),
            "{}",
            s.reason()
        );
    }
}
