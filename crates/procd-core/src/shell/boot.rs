//! The shell's side: the bash loop a shell session runs, the line a
//! command is sent as, and the records of its ends.
//!
//! The loop reads a line `<n> <nonce> <length>` and the command's bytes
//! from fd 3 (the command FIFO), runs each command in the shell itself
//! (`.` of fd 6, a sealed memfd that holds `builtin eval "$__procd_cmd"`,
//! so `cd`, variables, functions, aliases and options stay, and a trap
//! can `return` from the command), with fds 3–5 closed for the command,
//! then appends `E <n> <nonce>
//! <status> <cwd>` NUL-terminated to fd 4 (the file of ends, for the next
//! daemon) and writes the same record to fd 5 (the FIFO the daemon reads),
//! where `S <n> <nonce>` said before that the command has begun. The command's output is never parsed: nothing it
//! prints can end it, fake its status or reach the next command.
//!
//! Interrupts: SIGINT to the shell's process group (as a terminal's
//! Ctrl-C). The loop's INT trap arms a DEBUG trap that returns from the
//! command at its next step, so a loop of the command stops too and the
//! shell lives on. (A `return` from the INT trap itself would leave bash's
//! SIGCHLD blocked when it arrives while a child is waited for.)
//!
//! `set -e` is kept as an option: a failing command ends the command
//! (the ERR trap returns from it), not the shell. `set -E` stays on so
//! that this holds inside functions too.

use std::os::fd::OwnedFd;
use std::path::Path;

/// The loop, run as the session's command through `eval` of an
/// environment variable (`LOOP_VAR`), which it unsets first.
pub const LOOP: &str = r#"unset PROCD_SHELL_LOOP
shopt -s expand_aliases
__procd_last=0 __procd_busy= __procd_intr= __procd_e= __procd_e_hit= __procd_x= __procd_T= __procd_rc=0 __procd_st=0
__procd_on_int='[[ -n $__procd_busy ]] && { __procd_intr=1; set -T; trap "(( \${#BASH_SOURCE[@]} )) && builtin return 130" DEBUG; }'
__procd_on_err='__procd_st=$?; if [[ $- == *e* ]]; then if (( ${#BASH_SOURCE[@]} )); then builtin return $__procd_st; else set +e; __procd_e_hit=1; fi; fi'
builtin trap -- "$__procd_on_int" INT
set -E
while IFS=' ' builtin read -r -u 3 __procd_n __procd_nonce __procd_len; do
  [[ $__procd_n && $__procd_n != *[!0-9]* && $__procd_len && $__procd_len != *[!0-9]* ]] || continue
  __procd_cmd=
  (( __procd_len == 0 )) || LC_ALL=C IFS= builtin read -r -N "$__procd_len" -u 3 __procd_cmd
  (( __procd_n > __procd_last )) || continue
  __procd_last=$__procd_n
  [[ $__procd_x == *x* ]] && __procd_cmd="set -x; $__procd_cmd"
  builtin trap -- "$__procd_on_int" INT
  builtin trap -- "$__procd_on_err" ERR
  __procd_T=$- __procd_intr= __procd_e_hit=
  [[ -n $__procd_e ]] && set -e
  __procd_busy=1
  builtin printf 'S %s %s\0' "$__procd_n" "$__procd_nonce" >&5
  builtin . /dev/fd/6 3<&- 4>&- 5>&-
  __procd_rc=$? __procd_busy= __procd_x=
  [[ $- == *x* ]] && { __procd_x=x; set +x; } 2>/dev/null
  builtin trap - DEBUG
  [[ -n $__procd_intr && $__procd_T != *T* ]] && set +T
  if [[ $- == *e* || -n $__procd_e_hit ]]; then set +e; __procd_e=1; else __procd_e=; fi
  builtin printf -v __procd_end 'E %s %s %s %s' "$__procd_n" "$__procd_nonce" "$__procd_rc" "$PWD"
  builtin printf '%s\0' "$__procd_end" >&4
  builtin printf '%s\0' "$__procd_end" >&5
done"#;

/// The variable the loop is handed in.
pub const LOOP_VAR: &str = "PROCD_SHELL_LOOP";

/// The session's command: what `list` and `poll` show of a shell.
pub const COMMAND: &str = r#": procd shell; eval "$PROCD_SHELL_LOOP""#;

/// What fd 6 holds, the file the loop sources for each command. A file
/// and not `eval` alone: `return` (of the INT and ERR traps) needs a
/// sourced file to return from. A memfd and not a here-string: the
/// here-string's pipe costs bash a fifth of its time per command.
pub const SOURCE: &str = "builtin eval \"$__procd_cmd\"\n";

/// The channel files in a shell's directory.
pub const CTL: &str = "ctl";
pub const ENDS: &str = "ends";
pub const WAKE: &str = "wake";

/// What sends command `n`: a line `N NONCE LEN`, then the command's LEN
/// bytes as they are. bash reads a FIFO a byte at a time for a line, but
/// `read -N` takes the LEN bytes in one read (in the C locale, where a
/// character is a byte).
pub fn command_line(n: u64, nonce: &str, command: &str) -> Vec<u8> {
    let mut line = format!("{n} {nonce} {}\n", command.len()).into_bytes();
    line.extend_from_slice(command.as_bytes());
    line
}

/// What the shell says of a command: it has begun (on the FIFO only,
/// once an interrupt would reach it), or it has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Begun { n: u64, nonce: String },
    Ended(EndRecord),
}

/// A command's end as the shell recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndRecord {
    pub n: u64,
    pub nonce: String,
    pub status: i32,
    pub cwd: String,
}

/// The longest record read (a cwd is at most PATH_MAX).
const MAX_RECORD: usize = 8192;

/// Parses the complete records in `bytes`; returns them and how many
/// bytes they took (a partial record at the end waits for the rest).
/// A record that is not one of the shell's is skipped.
pub fn parse_ends(bytes: &[u8]) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut used = 0;
    while let Some(len) = memchr::memchr(0, &bytes[used..]) {
        let record = &bytes[used..used + len];
        used += len + 1;
        if record.len() > MAX_RECORD {
            continue;
        }
        if let Some(r) = parse_record(record) {
            records.push(r);
        }
    }
    // A record that never ends is not waited for past its bound.
    if bytes.len() - used > MAX_RECORD {
        used = bytes.len();
    }
    (records, used)
}

fn parse_record(record: &[u8]) -> Option<Record> {
    let text = std::str::from_utf8(record).ok()?;
    if let Some(rest) = text.strip_prefix("S ") {
        let (n, nonce) = rest.split_once(' ')?;
        let (n, nonce) = (n.parse().ok()?, nonce.to_string());
        return Some(Record::Begun { n, nonce });
    }
    let rest = text.strip_prefix("E ")?;
    let mut fields = rest.splitn(4, ' ');
    let n = fields.next()?.parse().ok()?;
    let nonce = fields.next()?.to_string();
    let status = fields.next()?.parse().ok()?;
    let cwd = fields.next()?.to_string();
    Some(Record::Ended(EndRecord {
        n,
        nonce,
        status,
        cwd,
    }))
}

/// The channels a shell inherits, opened by the daemon (outside any
/// sandbox): the command FIFO to read, the file of ends to append to,
/// the wake FIFO to write (both FIFOs read-write, so neither open nor
/// write ever waits for, or fails without, the daemon).
pub struct Channels {
    ctl: OwnedFd,
    ends: OwnedFd,
    wake: OwnedFd,
    source: OwnedFd,
}

impl Channels {
    pub fn open(dir: &Path) -> std::io::Result<Channels> {
        use rustix::fs::{open, Mode, OFlags};
        let flags = OFlags::CLOEXEC | OFlags::NOFOLLOW;
        Ok(Channels {
            ctl: open(dir.join(CTL), flags | OFlags::RDWR, Mode::empty())?,
            ends: open(
                dir.join(ENDS),
                flags | OFlags::WRONLY | OFlags::APPEND,
                Mode::empty(),
            )?,
            wake: open(dir.join(WAKE), flags | OFlags::RDWR, Mode::empty())?,
            source: procd_sys::memfd::sealed("procd-shell", SOURCE.as_bytes())?,
        })
    }

    /// fds 3, 4, 5 and 6 of the shell, in order.
    pub fn fds(self) -> Vec<OwnedFd> {
        vec![self.ctl, self.ends, self.wake, self.source]
    }
}

/// Makes a shell's directory: the two FIFOs and the empty file of ends.
pub fn make_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    for fifo in [CTL, WAKE] {
        nix::unistd::mkfifo(
            &dir.join(fifo),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .map_err(std::io::Error::from)?;
    }
    std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(dir.join(ENDS))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_reads_a_command_back_byte_for_byte_in_any_locale() {
        let command = "echo 'a b'\n\\x41 \u{e9}\u{20ac}\t\\c  ";
        let mut sent = command_line(7, "ab12", command);
        sent.extend_from_slice(b"8 cd34 2\nls");
        let out = std::process::Command::new("bash")
            .args(["-c", "IFS=' ' read -r n nonce len; LC_ALL=C IFS= read -r -N $len cmd; printf '%s|%s|%s' \"$n\" \"$cmd\" \"$(head -c 8)\""])
            .env("LC_ALL", "C.UTF-8")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(&sent)?;
                child.wait_with_output()
            })
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("7|{command}|8 cd34 2")
        );
    }

    #[test]
    fn ends_are_parsed_whole_and_a_partial_one_waits() {
        let bytes = b"E 1 n1 0 /tmp\0S 2 n2\0E 2 n2 130 /a b\0junk\0E 3 n3 1 /x";
        let (records, used) = parse_ends(bytes);
        assert_eq!(records.len(), 3);
        let begun = Record::Begun {
            n: 2,
            nonce: "n2".into(),
        };
        assert_eq!(records[1], begun);
        let Record::Ended(end) = &records[2] else {
            panic!("{records:?}")
        };
        assert_eq!((end.cwd.as_str(), end.status), ("/a b", 130));
        assert_eq!(used, bytes.len() - "E 3 n3 1 /x".len());
    }
}
