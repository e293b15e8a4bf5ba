//! Codex's sandbox intent (`process/start{sandbox}`, a
//! `FileSystemSandboxContext`) as procd's own sandbox rules, which the
//! daemon gives with Landlock and seccomp. A policy procd cannot give
//! exactly is refused with the reason, never weakened: an unknown kind,
//! access or field included (this is Codex 0.171.0's shape; a newer
//! field may carry a restriction procd would silently drop).
//!
//! What Codex 0.171.0 sends for `sandbox_mode = "workspace-write"`:
//! `{permissions: {type: "managed", file_system: {type: "restricted",
//! entries: [{path: {type: "special", value: {kind, subpath?}}, access,
//! missing_path_behavior?}]}, network: "restricted"}, cwd, workspaceRoots,
//! windowsSandboxLevel, windowsSandboxProxySettingsMode, useLegacyLandlock}`
//! with `root` readable, `project_roots`, `slash_tmp` and `tmpdir`
//! writable, and `.git`, `.agents`, `.codex`, `.aws` under the project
//! roots read-only when present. `read-only` sends `root` readable alone.

use procd_proto::{NetworkSpec, Readable, SandboxRules};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The fields of the context this mapping knows; any other is refused.
const CONTEXT_FIELDS: &[&str] = &[
    "permissions",
    "cwd",
    "workspaceRoots",
    "windowsSandboxLevel",
    "windowsSandboxProxySettingsMode",
    "useLegacyLandlock",
    // Windows only: nothing to give on Linux.
    "windowsSandboxPrivateDesktop",
];

/// procd's rules for Codex's intent `ctx`; `env` is the environment the
/// process gets (its `TMPDIR` is Codex's `tmpdir`). The error is the
/// reason, for Codex's model to read.
pub fn rules(ctx: &Value, env: &BTreeMap<String, String>) -> Result<SandboxRules, String> {
    let ctx = object(ctx, "sandbox")?;
    only_fields(ctx, CONTEXT_FIELDS, "sandbox")?;
    let roots = ctx
        .get("workspaceRoots")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(uri_path).collect::<Result<Vec<_>, _>>())
        .transpose()?
        .unwrap_or_default();
    let (network, entries) = permissions(ctx)?;
    let mut read_all = false;
    let mut readable = Vec::new();
    let mut writable = Vec::new();
    for entry in entries {
        let entry = Entry::parse(entry, &roots, env)?;
        for path in entry.paths {
            match (entry.access, path == Path::new("/")) {
                (Access::Read, true) => read_all = true,
                (Access::Write, true) => {
                    return Err("write access to `/` is no sandbox: ask for none".into())
                }
                (Access::Read, false) => readable.push(path),
                (Access::Write, false) => writable.push(path),
            }
        }
    }
    // Landlock only adds access: what lies under a writable directory is
    // writable. A path Codex keeps read-only in there cannot be given.
    if let Some((inner, outer)) = readable
        .iter()
        .find_map(|r| writable.iter().find(|w| r.starts_with(w)).map(|w| (r, w)))
    {
        return Err(format!(
            "Codex keeps {} read-only inside the writable {}; procd's sandbox (Landlock) cannot take write access away beneath a writable directory, so it refuses rather than weaken it. Run where {} does not exist, or with sandbox_mode = \"danger-full-access\" (docs/codex.md)",
            inner.display(),
            outer.display(),
            inner.display()
        ));
    }
    let strings = |paths: Vec<PathBuf>| -> Vec<String> {
        let mut out: Vec<String> = paths
            .into_iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        out.dedup();
        out
    };
    Ok(SandboxRules {
        writable: Some(strings(writable.clone())),
        readable: Some(if read_all {
            Readable::All
        } else {
            Readable::Paths(strings([readable, writable].concat()))
        }),
        network: Some(network),
    })
}

/// The `permissions` of a context: its network rule and its file system
/// entries, each kind checked to be one procd gives.
fn permissions(ctx: &Map<String, Value>) -> Result<(NetworkSpec, &Vec<Value>), String> {
    let permissions = object(field(ctx, "permissions")?, "sandbox.permissions")?;
    only_fields(
        permissions,
        &["type", "file_system", "network"],
        "sandbox.permissions",
    )?;
    let kind = text(field(permissions, "type")?, "sandbox.permissions.type")?;
    if kind != "managed" {
        return Err(format!(
            "sandbox permissions of type `{kind}` are not supported"
        ));
    }
    let network = match text(
        field(permissions, "network")?,
        "sandbox.permissions.network",
    )? {
        "restricted" => NetworkSpec::None,
        "enabled" => NetworkSpec::All,
        other => return Err(format!("sandbox network `{other}` is not supported")),
    };
    let fs = object(
        field(permissions, "file_system")?,
        "sandbox.permissions.file_system",
    )?;
    only_fields(fs, &["type", "entries"], "sandbox.permissions.file_system")?;
    let fs_kind = text(field(fs, "type")?, "sandbox.permissions.file_system.type")?;
    if fs_kind != "restricted" {
        return Err(format!(
            "a file system sandbox of type `{fs_kind}` is not supported"
        ));
    }
    let entries = field(fs, "entries")?
        .as_array()
        .ok_or("sandbox.permissions.file_system.entries must be an array")?;

    Ok((network, entries))
}

/// What an `fs/*` call under Codex's intent `ctx` may touch, for the
/// thread that makes it (`procd_sys::sandbox::confine_this_thread`); the
/// process's own `TMPDIR` is Codex's `tmpdir`. No network rules: a file
/// call makes no socket.
pub fn confinement(ctx: &Value) -> Result<procd_sys::sandbox::Rules, String> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let r = rules(ctx, &env)?;
    let paths = |p: Vec<String>| p.into_iter().map(PathBuf::from).collect::<Vec<_>>();
    Ok(procd_sys::sandbox::Rules {
        readable: match r.readable {
            Some(Readable::Paths(p)) => Some(paths(p)),
            Some(Readable::All) | None => None,
        },
        writable: paths(r.writable.unwrap_or_default()),
        network: procd_sys::sandbox::Network::All,
        terminal: None,
    })
}

#[derive(Clone, Copy)]
enum Access {
    Read,
    Write,
}

/// One entry of the file system policy, resolved to paths.
struct Entry {
    access: Access,
    paths: Vec<PathBuf>,
}

impl Entry {
    fn parse(
        entry: &Value,
        roots: &[PathBuf],
        env: &BTreeMap<String, String>,
    ) -> Result<Entry, String> {
        let what = "a sandbox file system entry";
        let entry = object(entry, what)?;
        only_fields(entry, &["path", "access", "missing_path_behavior"], what)?;
        let access = match text(field(entry, "access")?, "access")? {
            "read" => Access::Read,
            "write" => Access::Write,
            other => return Err(format!("sandbox access `{other}` is not supported")),
        };
        let skip_missing = match entry.get("missing_path_behavior") {
            None | Some(Value::Null) => false,
            Some(Value::String(s)) if s == "skip" => true,
            Some(other) => return Err(format!("missing_path_behavior {other} is not supported")),
        };
        let path = object(field(entry, "path")?, "a sandbox entry's path")?;
        only_fields(path, &["type", "value"], "a sandbox entry's path")?;
        let path_type = text(field(path, "type")?, "a sandbox entry's path type")?;
        if path_type != "special" {
            return Err(format!(
                "sandbox paths of type `{path_type}` are not supported"
            ));
        }
        let value = object(field(path, "value")?, "a sandbox entry's path value")?;
        only_fields(value, &["kind", "subpath"], "a sandbox entry's path value")?;
        let kind = text(field(value, "kind")?, "a sandbox path kind")?;
        let bases: Vec<PathBuf> = match kind {
            "root" => vec![PathBuf::from("/")],
            "project_roots" => roots.to_vec(),
            "slash_tmp" => vec![PathBuf::from("/tmp")],
            // Unset: there is no such directory to give.
            "tmpdir" => env.get("TMPDIR").map(PathBuf::from).into_iter().collect(),
            other => return Err(format!("the sandbox path kind `{other}` is not supported")),
        };
        let paths = match value.get("subpath") {
            None | Some(Value::Null) => bases,
            Some(Value::String(sub)) => {
                let sub = Path::new(sub);
                if sub.is_absolute()
                    || sub
                        .components()
                        .any(|c| matches!(c, std::path::Component::ParentDir))
                {
                    return Err(format!(
                        "the sandbox subpath {} must stay below its base",
                        sub.display()
                    ));
                }
                bases.into_iter().map(|b| b.join(sub)).collect()
            }
            Some(other) => return Err(format!("a sandbox subpath must be a string, not {other}")),
        };
        let paths = paths
            .into_iter()
            .filter(|p| !skip_missing || std::fs::symlink_metadata(p).is_ok())
            .collect();
        Ok(Entry { access, paths })
    }
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{what} must be an object"))
}

fn field<'a>(o: &'a Map<String, Value>, name: &str) -> Result<&'a Value, String> {
    o.get(name)
        .ok_or_else(|| format!("the sandbox lacks `{name}`"))
}

fn text<'a>(v: &'a Value, what: &str) -> Result<&'a str, String> {
    v.as_str().ok_or_else(|| format!("{what} must be a string"))
}

fn only_fields(o: &Map<String, Value>, known: &[&str], what: &str) -> Result<(), String> {
    match o.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!(
            "{what} has `{k}`, which procd does not know how to enforce"
        )),
        None => Ok(()),
    }
}

fn uri_path(v: &Value) -> Result<PathBuf, String> {
    let uri = v.as_str().ok_or("a workspace root must be a file:// URI")?;
    super::path_of(uri).map_err(|e| e.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn special(kind: &str, access: &str) -> Value {
        json!({"path": {"type": "special", "value": {"kind": kind}}, "access": access})
    }

    fn ctx(entries: Vec<Value>, network: &str, root: &Path) -> Value {
        json!({
            "permissions": {"type": "managed", "file_system": {"type": "restricted", "entries": entries}, "network": network},
            "cwd": format!("file://{}", root.display()),
            "workspaceRoots": [format!("file://{}", root.display())],
            "windowsSandboxLevel": "disabled",
            "windowsSandboxProxySettingsMode": "reconcile",
            "useLegacyLandlock": false,
        })
    }

    #[test]
    fn workspace_write_gives_the_roots_and_temp_dirs_and_no_network() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut carve = special("project_roots", "read");
        carve["path"]["value"]["subpath"] = json!(".git");
        carve["missing_path_behavior"] = json!("skip");
        let env = BTreeMap::from([("TMPDIR".to_string(), "/var/tmp".to_string())]);
        let entries = vec![
            special("root", "read"),
            special("project_roots", "write"),
            special("slash_tmp", "write"),
            special("tmpdir", "write"),
            carve.clone(),
        ];
        let r = rules(&ctx(entries.clone(), "restricted", dir.path()), &env).expect("rules");
        let root = dir.path().to_string_lossy().into_owned();
        assert_eq!(
            r.writable,
            Some(vec![root, "/tmp".into(), "/var/tmp".into()])
        );
        assert_eq!(r.readable, Some(Readable::All));
        assert_eq!(r.network, Some(NetworkSpec::None));

        // The carve-out exists: Landlock cannot give it; refused.
        std::fs::create_dir(dir.path().join(".git")).expect("mkdir");
        let e = rules(&ctx(entries, "restricted", dir.path()), &env).expect_err("refused");
        assert!(e.contains(".git read-only inside the writable"), "{e}");
    }

    #[test]
    fn anything_unknown_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = BTreeMap::new();
        let cases = [
            (
                ctx(vec![special("home", "write")], "restricted", dir.path()),
                "`home`",
            ),
            (
                ctx(vec![special("root", "deny")], "restricted", dir.path()),
                "`deny`",
            ),
            (
                ctx(vec![special("root", "write")], "restricted", dir.path()),
                "no sandbox",
            ),
            (
                ctx(vec![special("root", "read")], "proxied", dir.path()),
                "`proxied`",
            ),
        ];
        for (c, says) in cases {
            let e = rules(&c, &env).expect_err("refused");
            assert!(e.contains(says), "{e}");
        }
        let mut extra = ctx(vec![special("root", "read")], "restricted", dir.path());
        extra["denyReads"] = json!(["/secret"]);
        assert!(rules(&extra, &env)
            .expect_err("refused")
            .contains("`denyReads`"));
        let mut up = special("project_roots", "write");
        up["path"]["value"]["subpath"] = json!("../..");
        let e = rules(&ctx(vec![up], "restricted", dir.path()), &env).expect_err("refused");
        assert!(e.contains("below its base"), "{e}");
    }

    #[test]
    fn read_only_reads_everything_and_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = rules(
            &ctx(vec![special("root", "read")], "restricted", dir.path()),
            &BTreeMap::new(),
        )
        .expect("rules");
        assert_eq!(r.writable, Some(vec![]));
        assert_eq!(r.readable, Some(Readable::All));
    }
}
