//! Session and project names (docs/stacks.md), validated where they are
//! parsed: `[a-z][a-z0-9_.-]{0,62}`, so a name is safe in a path, a unit
//! name and a terminal, and never mistaken for a session id.

use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

/// The longest name: 63 characters.
pub const MAX_NAME_CHARS: usize = 63;

/// Whether `s` is a valid session or project name.
pub fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME_CHARS
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_.-".contains(c))
}

macro_rules! name_type {
    ($(#[$doc:meta])* $ty:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $ty(String);

        /// As the string itself, quoted: messages show `"web"`.
        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl $ty {
            /// A checked name; the error names the field and the rule.
            pub fn parse(s: &str) -> Result<$ty, String> {
                if is_name(s) {
                    Ok($ty(s.to_string()))
                } else {
                    Err(format!(
                        concat!($field, ": expected a lowercase letter, then up to 62 of a-z 0-9 _ . -, got {:?}"),
                        s
                    ))
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                let s = String::deserialize(d)?;
                $ty::parse(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}

name_type!(
    /// `spawn{name}`: unique among the running sessions of its project.
    SessionName,
    "name"
);
name_type!(
    /// `spawn{project}`, `down{project}`: the stack a session belongs to.
    ProjectName,
    "project"
);

name_type!(
    /// `spawn{queue}`, `[queue.NAME]`: a queue of spawns that run a few at
    /// a time (docs/queues.md).
    QueueName,
    "queue"
);

impl ProjectName {
    /// A project name made from a directory's name: lowercased, every
    /// other character a `-`, and `p-` in front when it does not start
    /// with a letter ("My App" → "my-app", "2024" → "p-2024").
    pub fn from_dir_name(dir: &str) -> ProjectName {
        let mut s: String = dir
            .chars()
            .map(|c| {
                let c = c.to_ascii_lowercase();
                if c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        if !s.starts_with(|c: char| c.is_ascii_lowercase()) {
            s.insert_str(0, "p-");
        }
        s.truncate(MAX_NAME_CHARS);
        ProjectName(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        for good in ["a", "web", "db-1", "x.y_z", &"a".repeat(63)] {
            assert!(is_name(good), "{good}");
        }
        for bad in [
            "",
            "Web",
            "1db",
            "-a",
            "a b",
            "a/b",
            "proc_é",
            &"a".repeat(64),
        ] {
            assert!(!is_name(bad), "{bad}");
        }
        assert!(SessionName::parse("Web").unwrap_err().starts_with("name: "));
    }

    #[test]
    fn project_names_come_from_any_directory_name() {
        assert_eq!(ProjectName::from_dir_name("My App").as_str(), "my-app");
        assert_eq!(ProjectName::from_dir_name("2024").as_str(), "p-2024");
        assert_eq!(ProjectName::from_dir_name("").as_str(), "p-");
        assert!(is_name(
            ProjectName::from_dir_name(&"é".repeat(100)).as_str()
        ));
    }
}
