//! Drops what the interactive login shell prints about itself (docs/protocol.md):
//! the job-control warnings before the command's first real output, `[N]
//! PID` job notices, the `logout` line printed when the command calls
//! `exit`, and, at any time, `bash: [PID: LEVEL (FD)] tcsetattr:
//! Inappropriate ioctl for device`, which an interactive bash prints when a
//! foreground job it forked dies of a signal (it tries to restore a
//! terminal it never had; a kill makes this happen at every step). Works on whole lines; a line is held back only while it could
//! still turn out to be noise, so real output streams without delay.

const JOB_CONTROL_WARNINGS: &[&str] = &[
    "no job control in this shell",
    "cannot set terminal process group",
    "Inappropriate ioctl for device",
    // dash (`/bin/sh -lc` fallback, or $SHELL): "sh: 0: can't access tty;
    // job control turned off".
    "can't access tty; job control turned off",
];

#[derive(Debug, Default)]
pub struct NoiseFilter {
    /// "bash: ": how the shell's own warnings start.
    warning_prefix: Vec<u8>,
    /// The current line, held while it may still be noise.
    held: Vec<u8>,
    /// The current line was judged real and is being passed through.
    passing: bool,
    /// Real output has been seen (job-control warnings stop being noise).
    seen_output: bool,
    /// A complete "logout" line, dropped if nothing follows it.
    held_logout: Option<Vec<u8>>,
    /// procd is ending the session: the shell's report that its command
    /// died of the signal ("Terminated") is procd's doing, not output.
    terminating: bool,
}

/// What a non-interactive bash prints when its foreground command dies of
/// the signals a kill sends (`strsignal`).
const KILL_REPORTS: &[&[u8]] = &[b"Terminated", b"Killed", b"Hangup"];

impl NoiseFilter {
    /// A filter for output of `shell` (a path or name such as "bash").
    pub fn new(shell: &str) -> Self {
        let name = shell.rsplit('/').next().unwrap_or(shell);
        NoiseFilter {
            warning_prefix: format!("{name}: ").into_bytes(),
            ..Default::default()
        }
    }

    /// Marks that procd is ending the session (see `terminating`).
    pub fn set_terminating(&mut self, terminating: bool) {
        self.terminating = terminating;
    }

    /// Filters a chunk; appends what should be stored to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let mut rest = chunk;
        while !rest.is_empty() {
            // Real output streams through in runs of whole lines, copied
            // once: a flood of short lines must not cost a step per line.
            if self.streaming() {
                let run = self.real_run(rest);
                if run > 0 {
                    out.extend_from_slice(&rest[..run]);
                    rest = &rest[run..];
                    continue;
                }
            }
            let (line, complete) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..=i], true),
                None => (rest, false),
            };
            rest = &rest[line.len()..];
            self.push_line(line, complete, out);
        }
    }

    /// Nothing is held and real output has been seen: only lines that
    /// start like noise need a look.
    fn streaming(&self) -> bool {
        self.seen_output
            && !self.passing
            && self.held.is_empty()
            && self.held_logout.is_none()
            && !self.terminating
    }

    /// The length of the longest prefix of `bytes` made of whole lines
    /// that cannot be noise (they do not start like a job notice, `logout`
    /// or a shell warning).
    fn real_run(&self, bytes: &[u8]) -> usize {
        // One vectorised scan for the bytes noise can start with; only
        // where one begins a line does the run end (a flood of short
        // lines is not walked line by line).
        let prefix = self.warning_prefix.first().copied().unwrap_or(b'[');
        let mut from = 0;
        while let Some(i) = memchr::memchr3(b'[', b'l', prefix, &bytes[from..]) {
            let at = from + i;
            if at == 0 || bytes[at - 1] == b'\n' {
                return at;
            }
            from = at + 1;
        }
        memchr::memrchr(b'\n', bytes).map_or(0, |i| i + 1)
    }

    fn push_line(&mut self, line: &[u8], complete: bool, out: &mut Vec<u8>) {
        if self.passing {
            out.extend_from_slice(line);
        } else {
            self.held.extend_from_slice(line);
            if complete {
                let held = std::mem::take(&mut self.held);
                self.judge_line(held, out);
            } else if !self.could_be_noise(&self.held) {
                self.release_logout(out);
                out.append(&mut self.held);
                self.passing = true;
                self.seen_output = true;
            }
        }
        if complete {
            self.passing = false;
        }
    }

    /// What the filter holds (not yet judged), in order: the log stores
    /// these bytes past its end until they are decided.
    pub fn held(&self) -> [&[u8]; 2] {
        [self.held_logout.as_deref().unwrap_or_default(), &self.held]
    }

    /// End of output: a held partial line is real output; a trailing
    /// `logout` is the shell's and is dropped.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.held_logout = None;
        out.append(&mut self.held);
    }

    fn judge_line(&mut self, line: Vec<u8>, out: &mut Vec<u8>) {
        let text = trim_eol(&line);
        if is_job_notice(text) {
            return;
        }
        if !self.seen_output && is_job_control_warning(text) {
            return;
        }
        if self.is_tty_restore_warning(text) {
            return;
        }
        if self.terminating && self.is_kill_report(text) {
            return;
        }
        if text == b"logout" {
            self.release_logout(out);
            self.held_logout = Some(line);
            return;
        }
        self.release_logout(out);
        self.seen_output = true;
        out.extend_from_slice(&line);
    }

    fn release_logout(&mut self, out: &mut Vec<u8>) {
        if let Some(line) = self.held_logout.take() {
            out.extend_from_slice(&line);
        }
    }

    /// "Terminated", or "bash: line 3: 1234 Terminated   sleep 300".
    fn is_kill_report(&self, text: &[u8]) -> bool {
        let report = match text.strip_prefix(self.warning_prefix.as_slice()) {
            None => text,
            Some(rest) => {
                // "line N: PID " before the signal's name.
                let Some(rest) = rest.strip_prefix(b"line ") else {
                    return false;
                };
                let digits = |b: &[u8]| b.iter().take_while(|c| c.is_ascii_digit()).count();
                let n = digits(rest);
                let Some(rest) = rest[n..].strip_prefix(b": ") else {
                    return false;
                };
                let n = digits(rest);
                if n == 0 {
                    return false;
                }
                let rest = &rest[n..];
                let spaces = rest.iter().take_while(|c| **c == b' ').count();
                if spaces == 0 {
                    return false;
                }
                let rest = &rest[spaces..];
                let end = rest.iter().position(|c| *c == b' ').unwrap_or(rest.len());
                &rest[..end]
            }
        };
        KILL_REPORTS.contains(&report)
    }

    /// Whether a partial line may still become a noise line.
    fn could_be_noise(&self, partial: &[u8]) -> bool {
        let text = trim_eol(partial);
        if b"logout".starts_with(text) {
            return true;
        }
        if self.terminating && KILL_REPORTS.iter().any(|r| r.starts_with(text)) {
            return true;
        }
        if could_be_job_notice(text) {
            return true;
        }
        // Shell warnings look like "bash: …"; hold such a line until its
        // end (after real output, only the tty-restore warning is noise).
        if text.len() >= 200 {
            return false;
        }
        if !self.seen_output {
            return self.warning_prefix.starts_with(text) || text.starts_with(&self.warning_prefix);
        }
        let mut restore = self.warning_prefix.clone();
        restore.push(b'[');
        restore.starts_with(text) || text.starts_with(&restore)
    }

    /// `bash: [123: 2 (255)] tcsetattr: Inappropriate ioctl for device`.
    fn is_tty_restore_warning(&self, text: &[u8]) -> bool {
        let Some(rest) = text
            .strip_prefix(self.warning_prefix.as_slice())
            .and_then(|r| r.strip_prefix(b"["))
        else {
            return false;
        };
        let Some(end) = memchr::memchr(b']', rest) else {
            return false;
        };
        let inside = &rest[..end];
        inside
            .iter()
            .all(|b| b.is_ascii_digit() || matches!(b, b':' | b' ' | b'(' | b')' | b'-'))
            && &rest[end..] == b"] tcsetattr: Inappropriate ioctl for device"
    }
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let mut t = line;
    while let [rest @ .., b'\n' | b'\r'] = t {
        t = rest;
    }
    t
}

fn is_job_control_warning(text: &[u8]) -> bool {
    let text = String::from_utf8_lossy(text);
    JOB_CONTROL_WARNINGS.iter().any(|w| text.contains(w))
}

/// "[1] 12345" (also "[1]+ 12345").
fn is_job_notice(text: &[u8]) -> bool {
    let Some(rest) = text.strip_prefix(b"[") else {
        return false;
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return false;
    }
    let rest = &rest[digits..];
    let Some(rest) = rest.strip_prefix(b"]") else {
        return false;
    };
    let rest = rest
        .strip_prefix(b"+")
        .or(rest.strip_prefix(b"-"))
        .unwrap_or(rest);
    let rest = rest.trim_ascii_start();
    !rest.is_empty() && rest.iter().all(u8::is_ascii_digit)
}

fn could_be_job_notice(text: &[u8]) -> bool {
    let Some(rest) = text.strip_prefix(b"[") else {
        return text.is_empty();
    };
    rest.iter()
        .all(|b| b.is_ascii_digit() || matches!(b, b']' | b' ' | b'+' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shells_kill_report_is_dropped_only_while_procd_kills() {
        let run = |terminating: bool, chunks: &[&[u8]]| {
            let mut f = NoiseFilter::new("/usr/bin/bash");
            let mut out = Vec::new();
            f.push(b"real\n", &mut out);
            f.set_terminating(terminating);
            for c in chunks {
                f.push(c, &mut out);
            }
            f.finish(&mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(run(true, &[b"Termin", b"ated\n"]), "real\n");
        assert_eq!(
            run(
                true,
                &[b"bash: line 1: 4242 Killed                  sleep 300\n"]
            ),
            "real\n"
        );
        assert_eq!(run(false, &[b"Terminated\n"]), "real\nTerminated\n");
        assert_eq!(
            run(true, &[b"Terminated early\n"]),
            "real\nTerminated early\n"
        );
        assert_eq!(
            run(true, &[b"bash: line x: Killed\n"]),
            "real\nbash: line x: Killed\n"
        );
    }

    fn run(chunks: &[&[u8]]) -> String {
        let mut f = NoiseFilter::new("/usr/bin/bash");
        let mut out = Vec::new();
        for c in chunks {
            f.push(c, &mut out);
        }
        f.finish(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn drops_shell_noise() {
        let out = run(&[
            b"bash: cannot set terminal process group (-1): Inappropriate ioctl for device\n",
            b"bash: no job control in this shell\n",
            b"hello\n[1] 12345\nworld\n",
            b"logout\n",
        ]);
        assert_eq!(out, "hello\nworld\n");
    }

    #[test]
    fn real_output_is_kept_and_streams() {
        let mut f = NoiseFilter::new("bash");
        let mut out = Vec::new();
        f.push(b"Enter your name: ", &mut out);
        assert_eq!(out, b"Enter your name: ");
        f.push(b"x\nlogout\nmore\n[1]x\n", &mut out);
        assert_eq!(out, b"Enter your name: x\nlogout\nmore\n[1]x\n");
    }

    #[test]
    fn the_tty_restore_warning_is_noise_even_after_output() {
        let out = run(&[
            b"got ping\nbash: [2093",
            b"4: 2 (255)] tcsetattr: Inappropriate ioctl for device\n",
            b"bash: [x] tcsetattr: Inappropriate ioctl for device\n",
        ]);
        assert_eq!(
            out,
            "got ping\nbash: [x] tcsetattr: Inappropriate ioctl for device\n"
        );
    }

    #[test]
    fn runs_of_real_lines_stream_and_noise_inside_them_is_still_dropped() {
        let mut f = NoiseFilter::new("bash");
        let mut out = Vec::new();
        f.push(b"first\n", &mut out);
        f.push(
            b"y\ny\nlike [1] this\n[1] 4242\nblah\nlogout\ny\npartial",
            &mut out,
        );
        f.finish(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "first\ny\ny\nlike [1] this\nblah\nlogout\ny\npartial"
        );
    }

    #[test]
    fn warnings_after_output_are_real_and_split_lines_work() {
        let out = run(&[
            b"bash: no job",
            b" control in this shell\n",
            b"ok\n",
            b"bash: no job control in this shell\n",
        ]);
        assert_eq!(out, "ok\nbash: no job control in this shell\n");
        assert_eq!(run(&[b"[1", b"] 99\n", b"x"]), "x");
    }
}
