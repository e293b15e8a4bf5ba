//! Which commands need the snapshot's functions and aliases. Bash parses
//! every definition it sources, and that is the snapshot's cost (pyenv's
//! three functions double a `bash -c true`'s instructions; a hundred of
//! 33 lines add 7 ms). A definition acts only when its name is
//! called or looked at, and the snapshot's functions are not exported, so
//! no child sees them: a command that names none of them, and has no way
//! to reach a name that is not in its text, starts without them.
//!
//! The check errs one way only: what it cannot see through (an expansion,
//! a glob, `eval`, a sourced file, a listing of functions) counts as
//! reaching every name.

use std::collections::BTreeSet;

/// Characters through which a command can make a word its text does not
/// hold: an expansion (`$`, a backquote), a brace expansion, a glob.
const OPAQUE: &[char] = &['$', '`', '{', '}', '*', '?', '[', '~'];

/// Words that run code the command's text does not show (`eval`,
/// `source`, `.`), list what is defined (`declare`, `typeset`, `set`,
/// `compgen`, `alias`), or show the option aliases need (`shopt`).
const OPAQUE_WORDS: &[&str] = &[
    "eval", "source", ".", "declare", "typeset", "set", "compgen", "alias", "shopt",
];

/// Bash calls this one by itself, for a command it does not find.
const CALLED_BY_BASH: &str = "command_not_found_handle";

/// The names a snapshot's definitions give, or `None` when some command
/// may need it whatever it names.
#[derive(Debug)]
pub(super) struct Names(Option<BTreeSet<String>>);

impl Names {
    /// None yet: a snapshot of no definitions is needed by no command.
    pub(super) fn new() -> Names {
        Names(Some(BTreeSet::new()))
    }

    /// Every command needs it (it sets options or variables).
    pub(super) fn every(&mut self) {
        self.0 = None;
    }

    /// Notes what a line of `declare -f` or `alias -p` defines: a
    /// function's header (`name () `, at the line's start) or an alias.
    /// A line that only looks like one (in a here-document) adds a name
    /// no command needs, which costs a source, never a miss.
    pub(super) fn note(&mut self, line: &str) {
        let name = match line.strip_prefix("alias ") {
            Some(rest) => rest.split_once('=').map(|(name, _)| name),
            None => line
                .trim_end()
                .strip_suffix(" ()")
                .filter(|name| !name.starts_with(char::is_whitespace)),
        };
        let Some(name) = name else {
            return;
        };
        let plain = !name.is_empty()
            && name != CALLED_BY_BASH
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.:+@%,".contains(c));
        match (&mut self.0, plain) {
            (Some(names), true) => {
                names.insert(name.to_string());
            }
            _ => self.every(),
        }
    }

    /// Whether `command` may need what these names define.
    pub(super) fn reached_by(&self, command: &str) -> bool {
        let Some(names) = &self.0 else {
            return true;
        };
        if command.contains(OPAQUE) {
            return true;
        }
        // Quotes and backslashes removed, as bash removes them from a word
        // (`'py'env` is `pyenv`); splitting inside a quoted string only
        // makes more words, so more matches.
        let plain: String = command
            .chars()
            .filter(|c| !matches!(c, '\'' | '"' | '\\'))
            .collect();
        plain
            .split(|c: char| c.is_whitespace() || ";&|()<>".contains(c))
            .filter(|word| !word.is_empty())
            .any(|word| OPAQUE_WORDS.contains(&word) || names.contains(word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(lines: &str) -> Names {
        let mut names = Names::new();
        lines.lines().for_each(|line| names.note(line));
        names
    }

    #[test]
    fn a_command_that_names_no_definition_does_not_need_them() {
        let n = names("pyenv () \n{ \n    command pyenv \"$@\"\n}\nalias ll='ls -l'\n");
        for command in [
            "true",
            "npm run dev",
            "cargo test -p x --lib",
            "python3 -m pytest -x tests/",
            "ls -l && cd ../app; make 2>&1 | tee out",
            "./configure --prefix=/opt",
        ] {
            assert!(!n.reached_by(command), "{command}");
        }
    }

    #[test]
    fn a_command_that_may_reach_a_definition_needs_them() {
        let n = names("pyenv () \n{ \n    :\n}\nalias ll='ls -l'\n");
        for command in [
            "pyenv versions",
            "ll",
            "cd x && ll",
            "'py'env root",
            "p\\yenv root",
            "(pyenv)",
            "x|pyenv",
            "echo \"$(pyenv root)\"",
            "$TOOL versions",
            "`echo pyenv`",
            "{py,}env",
            "pyen?",
            "pye[n]v",
            "eval 'p''yenv'",
            "source .venv/bin/activate",
            ". ./env.sh",
            "declare -F",
            "set",
            "compgen -A function",
            "alias",
            "shopt expand_aliases",
            "~/bin/x",
        ] {
            assert!(n.reached_by(command), "{command}");
        }
    }

    #[test]
    fn some_definitions_are_needed_by_every_command() {
        for defs in [
            "command_not_found_handle () \n{ \n    :\n}\n",
            "a/b () \n{ \n    :\n}\n",
            "alias x$y='z'\n",
        ] {
            assert!(names(defs).reached_by("true"), "{defs}");
        }
        let mut n = names("f () \n{ \n    :\n}\n");
        n.every();
        assert!(n.reached_by("true"));
    }
}
