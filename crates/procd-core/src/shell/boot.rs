//! The shell's side: the bash loop a shell session runs, the line a
//! command is sent as, and the records of its ends.
//!
//! The loop reads a header of fixed width (`Header::Fixed`) and the
//! command's bytes from fd 3 (the command FIFO), runs each command in the shell itself
//! (`.` of fd 6, a sealed memfd that holds `builtin eval "$__procd_cmd"`,
//! so `cd`, variables, functions, aliases and options stay, and a trap
//! can `return` from the command), with fds 3–5 closed for the command,
//! then appends `E <n> <nonce>
//! <status> <cwd>` NUL-terminated to fd 4 (the file of ends, for the next
//! daemon) and writes the same record to fd 5 (the FIFO the daemon reads).
//! Before the command it appends `S <n> <nonce>` (begun) to fd 4 only: the
//! daemon looks for it there when it stops the command, and is not woken
//! for it otherwise. The command's output is never parsed: nothing it
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
while IFS= builtin read -r -N 61 -u 3 __procd_h; do
  __procd_n=${__procd_h:0:20} __procd_nonce=${__procd_h:21:16} __procd_len=${__procd_h:38:20}
  [[ ${#__procd_h} == 61 && $__procd_n != *[!0-9]* && $__procd_len != *[!0-9]* ]] || continue
  __procd_n=$((10#$__procd_n)) __procd_len=$((10#$__procd_len)) __procd_cmd=
  if (( __procd_len == 0 )); then :
  elif [[ ${__procd_h:59:1} == a ]]; then IFS= builtin read -r -N "$__procd_len" -u 3 __procd_cmd
  else LC_ALL=C IFS= builtin read -r -N "$__procd_len" -u 3 __procd_cmd; fi
  (( __procd_n > __procd_last )) || continue
  __procd_last=$__procd_n
  [[ $__procd_x == *x* ]] && __procd_cmd="set -x; $__procd_cmd"
  builtin trap -- "$__procd_on_int" INT
  builtin trap -- "$__procd_on_err" ERR
  __procd_T=$- __procd_intr= __procd_e_hit=
  [[ -n $__procd_e ]] && set -e
  __procd_busy=1
  builtin printf 'S %s %s\0' "$__procd_n" "$__procd_nonce" >&4
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

/// How many characters a command's nonce has.
pub const NONCE_CHARS: usize = 16;

/// How a shell's loop reads a command's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// `N NONCE LEN A\n`, 61 bytes: the numbers zero-padded to 20
    /// digits, the nonce `NONCE_CHARS`, `A` is `a` when the command is
    /// ASCII. bash reads a FIFO a byte at a time for a line, but `read -N`
    /// takes a count in one read: two reads a command, not sixty. An ASCII
    /// command has as many characters as bytes in any locale, so it is
    /// read without switching bash to the C locale and back, which costs
    /// a fifth of the loop's time under a UTF-8 `LANG`; another one is
    /// read in the C locale, where a character is a byte.
    Fixed,
    /// `N NONCE LEN\n`, what the loop of a daemon before read (a shell
    /// it started may be taken over by this one).
    Line,
}

/// What sends command `n`: its header, then the command's LEN bytes as
/// they are.
pub fn command_line(header: Header, n: u64, nonce: &str, command: &str) -> Vec<u8> {
    let len = command.len();
    let mut line = match header {
        Header::Fixed => {
            debug_assert_eq!(nonce.len(), NONCE_CHARS);
            let ascii = if command.is_ascii() { 'a' } else { 'u' };
            format!("{n:020} {nonce} {len:020} {ascii}\n")
        }
        Header::Line => format!("{n} {nonce} {len}\n"),
    }
    .into_bytes();
    line.extend_from_slice(command.as_bytes());
    line
}

/// What the shell says of a command: it has begun (in the file; on the
/// FIFO from a shell a daemon before this one started), once an interrupt
/// would reach it, or it has ended.
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

    /// Runs the loop in bash, in `locale`, on the channels of a fresh
    /// directory, sends it `commands`, and returns each one's output and
    /// end record.
    fn run_loop(locale: &str, commands: &[&str]) -> Vec<(String, EndRecord)> {
        let dir = tempfile::tempdir().unwrap();
        let shell = dir.path().join("shell");
        make_dir(&shell).unwrap();
        std::fs::write(shell.join("source"), SOURCE).unwrap();
        let mut sent = Vec::new();
        for (i, command) in commands.iter().enumerate() {
            let n = i as u64 + 1;
            let nonce = format!("{n:016x}");
            // Each output ends at a mark of its own, on stdout, and the
            // command's status stays (a `return` from the sourced file).
            let marked = format!("{command}\ns=$?; printf '<%s>' {n}; return $s");
            sent.extend(command_line(Header::Fixed, n, &nonce, &marked));
        }
        let ctl = shell.join(CTL);
        // The FIFO holds them all (a few hundred bytes) until the loop reads.
        let wire = format!(
            "exec 3<>{ctl:?} 4>>{:?} 5>/dev/null 6<{:?}; eval \"$PROCD_SHELL_LOOP\"",
            shell.join(ENDS),
            shell.join("source"),
        );
        // Bounded: a loop that waits for bytes that never come fails the
        // test (its stdout ends) instead of hanging it.
        let mut child = std::process::Command::new("timeout")
            .args(["30", "bash", "-c", &wire])
            .env(LOOP_VAR, LOOP)
            .env("LC_ALL", locale)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut fifo = std::fs::OpenOptions::new().write(true).open(&ctl).unwrap();
            fifo.write_all(&sent).unwrap();
        }
        let mut out = Vec::new();
        let mut stdout = child.stdout.take().unwrap();
        let last = format!("<{}>", commands.len());
        while !String::from_utf8_lossy(&out).ends_with(&last) {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            let n = stdout.read(&mut buf).unwrap();
            assert!(n > 0, "the loop ended: {}", String::from_utf8_lossy(&out));
            out.extend_from_slice(&buf[..n]);
        }
        // The last end is written after its mark: wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let records = loop {
            let (records, _) = parse_ends(&std::fs::read(shell.join(ENDS)).unwrap());
            if records.len() == 2 * commands.len() || std::time::Instant::now() > deadline {
                break records;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        // SIGTERM, which `timeout` passes on to bash (a SIGKILL would end
        // `timeout` alone and leave bash running).
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        child.wait().unwrap();
        let text = String::from_utf8(out).unwrap();
        // Each command's begin record, then its end, in the file.
        let mut ends = Vec::new();
        for (i, pair) in records.chunks(2).enumerate() {
            let (n, nonce) = (i as u64 + 1, format!("{:016x}", i + 1));
            match pair {
                [Record::Begun { n: b, nonce: bn }, Record::Ended(end)]
                    if *b == n && *bn == nonce && end.n == n && end.nonce == nonce =>
                {
                    ends.push(end.clone())
                }
                other => panic!("command {n}: {other:?}"),
            }
        }
        let outputs = (1..=commands.len()).scan(text.as_str(), |rest, n| {
            let (output, after) = rest.split_once(&format!("<{n}>"))?;
            *rest = after;
            Some(output.to_string())
        });
        outputs.zip(ends).collect()
    }

    #[test]
    fn the_loop_reads_each_command_byte_for_byte_in_any_locale() {
        let commands = [
            "x='caf\u{e9} \u{20ac}'; printf '%s|' \"$x\" \"${#x}\"",
            "printf '%s|' \"$x\" 'a b' '\\x41' \"$LC_ALL\"",
            "printf '\u{6f22}\u{5b57}\\t|'; false",
        ];
        for locale in ["C.UTF-8", "C"] {
            let ran = run_loop(locale, &commands);
            let outputs: Vec<_> = ran.iter().map(|(o, _)| o.as_str()).collect();
            let length = if locale == "C" { 9 } else { 6 };
            assert_eq!(
                outputs,
                [
                    format!("caf\u{e9} \u{20ac}|{length}|"),
                    format!("caf\u{e9} \u{20ac}|a b|\\x41|{locale}|"),
                    "\u{6f22}\u{5b57}\t|".to_string(),
                ],
                "in {locale}"
            );
            let ends: Vec<_> = ran.iter().map(|(_, e)| (e.n, e.status)).collect();
            assert_eq!(ends, [(1, 0), (2, 0), (3, 1)], "in {locale}");
        }
    }

    #[test]
    fn a_line_header_reads_as_the_loop_before_read_it() {
        let command = "echo 'a b'\n\\x41 \u{e9}\u{20ac}\t\\c  ";
        let mut sent = command_line(Header::Line, 7, "ab12", command);
        sent.extend_from_slice(b"8 cd34 2\nls");
        // The reads of the loop before the fixed header.
        let read = r#"IFS=' ' read -r n nonce len; LC_ALL=C IFS= read -r -N $len cmd; printf '%s|%s|%s' "$n" "$cmd" "$(head -c 8)""#;
        let out = std::process::Command::new("bash")
            .args(["-c", read])
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
