//! The child environment (docs/SECURITY.md, R16): credentials are not inherited.

use std::collections::BTreeMap;

const CREDENTIAL_SUFFIXES: &[&str] = &[
    "_API_KEY",
    "_APIKEY",
    "_TOKEN",
    "_SECRET",
    "_SECRET_KEY",
    "_PASSWORD",
    "_PASSWD",
    "_CREDENTIALS",
    "_PRIVATE_KEY",
];

/// The prefix a caller uses to pass a blocked variable on purpose.
pub const FORCE_PREFIX: &str = "PROCD_FORCE_";

/// Decides which variable names may reach a child.
#[derive(Debug, Clone)]
pub struct EnvPolicy {
    blocklist: Vec<String>,
}

impl EnvPolicy {
    pub fn new(blocklist: &[String]) -> Self {
        EnvPolicy {
            blocklist: blocklist.to_vec(),
        }
    }

    /// Whether `name` carries a credential and must not be passed on.
    pub fn is_blocked(&self, name: &str) -> bool {
        if self.blocklist.iter().any(|b| b == name) {
            return true;
        }
        if name.starts_with("AWS_") {
            return false;
        }
        CREDENTIAL_SUFFIXES.iter().any(|s| name.ends_with(s))
    }

    /// The child's environment: the daemon's own (sanitised), then the
    /// caller's (sanitised, `PROCD_FORCE_<NAME>` setting `<NAME>` regardless),
    /// then procd's own variables.
    pub fn build(
        &self,
        inherited: impl IntoIterator<Item = (String, String)>,
        caller: &BTreeMap<String, String>,
        session_id: &str,
    ) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = inherited
            .into_iter()
            .filter(|(k, _)| !self.is_blocked(k) && !k.starts_with(FORCE_PREFIX))
            .collect();
        for (k, v) in caller {
            if k.starts_with(FORCE_PREFIX) || self.is_blocked(k) {
                continue;
            }
            env.insert(k.clone(), v.clone());
        }
        for (k, v) in caller {
            if let Some(name) = k.strip_prefix(FORCE_PREFIX) {
                if !name.is_empty() {
                    env.insert(name.to_string(), v.clone());
                }
            }
        }
        env.insert("PYTHONUNBUFFERED".into(), "1".into());
        env.insert("PROCD_SESSION_ID".into(), session_id.into());
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_dropped_unless_forced() {
        let policy = EnvPolicy::new(&["GH_TOKEN".to_string(), "AWS_SECRET_THING".to_string()]);
        let inherited = [
            ("OPENAI_API_KEY", "sk-1"),
            ("PATH", "/bin"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("AWS_SECRET_THING", "listed"),
            ("PROCD_FORCE_X", "leak"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let caller: BTreeMap<String, String> = [
            ("MY_VAR", "kept"),
            ("GH_TOKEN", "dropped"),
            ("PROCD_FORCE_STRIPE_SECRET", "forced"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let env = policy.build(inherited, &caller, "proc_abc");
        assert!(!env.contains_key("OPENAI_API_KEY"));
        assert_eq!(env["PATH"], "/bin");
        assert_eq!(env["AWS_SECRET_ACCESS_KEY"], "aws");
        assert!(!env.contains_key("AWS_SECRET_THING"));
        assert_eq!(env["MY_VAR"], "kept");
        assert!(!env.contains_key("GH_TOKEN"));
        assert_eq!(env["STRIPE_SECRET"], "forced");
        assert!(env.keys().all(|k| !k.starts_with(FORCE_PREFIX)));
        assert_eq!(env["PYTHONUNBUFFERED"], "1");
        assert_eq!(env["PROCD_SESSION_ID"], "proc_abc");
    }
}
