//! The client's dependency boundary (the house issue): a Rust client links
//! the wire types, the gateway and the OS layer, never the registry, the
//! PTY crate or the regex engine. Checked on the manifests of every procd
//! crate the client reaches.

use std::path::Path;

const CRATES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The `[dependencies]` names of a workspace crate's manifest.
fn dependencies(krate: &str) -> Vec<String> {
    let manifest = std::fs::read_to_string(Path::new(CRATES).join(krate).join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("{krate}/Cargo.toml: {e}"));
    manifest
        .split("\n[")
        .find(|section| section.starts_with("dependencies]"))
        .map(|section| {
            section
                .lines()
                .skip(1)
                .filter_map(|l| l.split(['=', '.', ' ']).next())
                .filter(|name| !name.is_empty() && !name.starts_with('#'))
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_client_links_neither_the_registry_nor_pty_process_nor_regex() {
    let mut seen = vec!["procd-client".to_string()];
    let mut todo = vec!["procd-client".to_string()];
    while let Some(krate) = todo.pop() {
        for dep in dependencies(&krate) {
            assert!(
                !["procd-core", "procd-server", "pty-process", "regex"].contains(&dep.as_str()),
                "{krate} depends on {dep}: the client would link it"
            );
            if dep.starts_with("procd-") && !seen.contains(&dep) {
                seen.push(dep.clone());
                todo.push(dep);
            }
        }
    }
    assert!(seen.contains(&"procd-sys".to_string()), "{seen:?}");
}
