//! A Codex process's environment and the command line that gives it
//! exactly that (docs/codex.md).
//!
//! Codex sends `env` and, optionally, an `envPolicy`. Without a policy
//! the process gets `env` and nothing else; with one, this server's own
//! environment filtered by the policy, then `set`, then `env`. procd
//! starts every session in its own sanitised environment, so the command
//! line begins with `env -i`, keeping only procd's markers
//! (`PROCD_SESSION_ID`, `PROCD_INSTANCE`): a tree kill finds every
//! descendant by them.

use serde::Deserialize;
use std::collections::BTreeMap;

/// Codex's `envPolicy` (its `ShellEnvironmentPolicy` on the wire).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvPolicy {
    pub inherit: Inherit,
    #[serde(default)]
    pub ignore_default_excludes: bool,
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    #[serde(default)]
    pub include_only: Vec<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Inherit {
    /// This server's whole environment.
    All,
    /// Only HOME, LOGNAME, PATH, SHELL, USER (and their kin).
    Core,
    None,
}

/// What Codex leaves out unless `ignoreDefaultExcludes`: names that look
/// like credentials.
const DEFAULT_EXCLUDES: &[&str] = &["*KEY*", "*SECRET*", "*TOKEN*"];

/// The variables `Inherit::Core` keeps: Codex 0.171.0's on Linux, as its
/// server was seen to keep them (the locale's three, not `USERNAME`).
const CORE: &[&str] = &[
    "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "PATH", "SHELL", "TEMP", "TMP", "TMPDIR",
    "USER",
];

/// The environment a process gets: `env` alone without a policy.
pub fn resolve(
    policy: Option<&EnvPolicy>,
    own: impl Iterator<Item = (String, String)>,
    env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(p) = policy {
        out = own
            .filter(|(k, _)| match p.inherit {
                Inherit::All => true,
                Inherit::Core => CORE.contains(&k.as_str()),
                Inherit::None => false,
            })
            .filter(|(k, _)| p.ignore_default_excludes || !matches_any(DEFAULT_EXCLUDES, k))
            .filter(|(k, _)| !matches_any(&p.exclude, k))
            .collect();
        out.extend(p.set.clone());
        if !p.include_only.is_empty() {
            out.retain(|k, _| matches_any(&p.include_only, k));
        }
    }
    out.extend(env.clone());
    out
}

/// Whether `name` matches one of `patterns` (`*` any run, `?` one
/// character; case-insensitive, as Codex matches them).
fn matches_any<S: AsRef<str>>(patterns: &[S], name: &str) -> bool {
    let name: Vec<char> = name.to_ascii_uppercase().chars().collect();
    patterns.iter().any(|p| {
        let p: Vec<char> = p.as_ref().to_ascii_uppercase().chars().collect();
        glob(&p, &name)
    })
}

fn glob(p: &[char], s: &[char]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some(('*', rest)) => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        Some(('?', rest)) => !s.is_empty() && glob(rest, &s[1..]),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

/// A shell word that is `s` exactly.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The bash command line that runs `argv` (as `arg0`, if given) with
/// exactly `env` and procd's markers.
pub fn command_line(argv: &[String], arg0: Option<&str>, env: &BTreeMap<String, String>) -> String {
    let mut line = String::from(
        "exec env -i PROCD_SESSION_ID=\"$PROCD_SESSION_ID\" ${PROCD_INSTANCE+\"PROCD_INSTANCE=$PROCD_INSTANCE\"}",
    );
    for (k, v) in env {
        line.push(' ');
        line.push_str(&quote(&format!("{k}={v}")));
    }
    // bash's exec -a names argv[0], which env cannot; and env would take
    // a program named NAME=VALUE for a variable.
    match arg0 {
        Some(arg0) => {
            line.push_str(" /bin/bash -c 'exec -a \"$0\" \"$@\"' ");
            line.push_str(&quote(arg0));
        }
        None if argv.first().is_some_and(|a| a.contains('=')) => {
            line.push_str(" /bin/bash -c 'exec \"$@\"' bash");
        }
        None => {}
    }
    for a in argv {
        line.push(' ');
        line.push_str(&quote(a));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_inherits_filters_sets_and_env_wins() {
        let own = [
            ("PATH", "/bin"),
            ("API_KEY", "x"),
            ("GH_TOKEN", "y"),
            ("LANG", "C"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let policy: EnvPolicy = serde_json::from_value(serde_json::json!({
            "inherit": "all", "ignoreDefaultExcludes": false, "exclude": ["LA*"],
            "set": {"X": "1"}, "includeOnly": []
        }))
        .unwrap();
        let env = BTreeMap::from([("X".to_string(), "2".to_string())]);
        let got = resolve(Some(&policy), own.clone().into_iter(), &env);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            [("PATH", "/bin"), ("X", "2")].map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert!(resolve(None, own.into_iter(), &BTreeMap::new()).is_empty());
    }

    #[test]
    fn words_are_quoted_whatever_they_hold() {
        assert_eq!(quote("it's $HOME"), r"'it'\''s $HOME'");
        let line = command_line(&["A=b".into(), "c".into()], None, &BTreeMap::new());
        assert!(line.ends_with(" bash 'A=b' 'c'"), "{line}");
    }
}
