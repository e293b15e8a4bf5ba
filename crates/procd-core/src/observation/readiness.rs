//! Readiness (docs/agents.md): when a session counts as ready — an output line
//! matches, its tree listens on a port, a loopback URL answers — checked
//! for each session that asked (`spawn{ready}`) by one task
//! (`Registry::watch_readiness`) and reported once. This module holds the
//! parts that need no registry: parsing the condition, matching lines, and
//! the HTTP probe.

use procd_proto::{ReadyPort, ReadySpec};
use regex::Regex;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `ready.timeout_s` when not given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest `ready.timeout_s` accepted (a day).
const MAX_TIMEOUT_S: f64 = 86_400.0;
/// Compiled size limit of `ready.output` (a hostile pattern cannot make
/// the daemon build a huge automaton).
/// How long one HTTP probe may take, connect to status line.
const HTTP_PROBE_LIMIT: Duration = Duration::from_secs(2);

/// Where a session stands against its ready condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// No condition was given (`ready` is null).
    Unconditioned,
    /// Not met yet; `timed_out` once `timeout_s` passed (checks go on).
    Pending { timed_out: bool },
    /// Met, this long after the start.
    Ready { after_ms: u64 },
}

impl Readiness {
    /// The wire's `ready`: null, false or true.
    pub fn flag(self) -> Option<bool> {
        match self {
            Readiness::Unconditioned => None,
            Readiness::Pending { .. } => Some(false),
            Readiness::Ready { .. } => Some(true),
        }
    }

    pub fn after_ms(self) -> Option<u64> {
        match self {
            Readiness::Ready { after_ms } => Some(after_ms),
            _ => None,
        }
    }

    /// Still worth waiting for: a yield holds on instead of returning at
    /// the first quiet moment.
    pub fn awaited(self) -> bool {
        matches!(self, Readiness::Pending { timed_out: false })
    }
}

/// A parsed ready condition.
#[derive(Debug, Clone)]
pub struct ReadyCheck {
    /// As the caller gave it (kept in the checkpoint, docs/survival.md).
    pub spec: ReadySpec,
    pub output: Option<Regex>,
    /// `Some(None)`: any port.
    pub port: Option<Option<u16>>,
    pub http: Option<HttpTarget>,
    pub timeout: Duration,
}

impl ReadyCheck {
    /// Validates `spawn{ready}`; the error names the key at fault.
    pub fn parse(spec: &ReadySpec) -> Result<ReadyCheck, String> {
        let output = match &spec.output {
            None => None,
            Some(p) => Some(
                crate::output::text::bounded_regex(p, false)
                    .map_err(|e| format!("ready.output: {e}"))?,
            ),
        };
        let port = match spec.port {
            None => None,
            // "auto": the spawn's port, put in by `resolve_auto_port`.
            Some(ReadyPort::Any(_)) => Some(None),
            Some(ReadyPort::Number(n)) => match u16::try_from(n) {
                Ok(p) if p > 0 => Some(Some(p)),
                _ => {
                    return Err(format!(
                        "ready.port: must be 1 to 65535 or \"any\", got {n}"
                    ))
                }
            },
        };
        let http = spec.http.as_deref().map(HttpTarget::parse).transpose()?;
        let timeout = match spec.timeout_s {
            None => DEFAULT_TIMEOUT,
            Some(t) if t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT_S => Duration::from_secs_f64(t),
            Some(t) => {
                return Err(format!(
                "ready.timeout_s: must be more than 0 and at most {MAX_TIMEOUT_S} seconds, got {t}"
            ))
            }
        };
        if output.is_none() && port.is_none() && http.is_none() {
            return Err("ready: give at least one of output, port, http".into());
        }
        Ok(ReadyCheck {
            spec: spec.clone(),
            output,
            port,
            http,
            timeout,
        })
    }

    /// Whether `ready.port` is `"auto"`: the port spawn's `port` gives.
    pub fn wants_auto_port(&self) -> bool {
        self.spec.port == Some(ReadyPort::Any(procd_proto::AnyPort::Auto))
    }

    /// `ready.port: "auto"` made the session's `port` (also as the
    /// checkpoint keeps it).
    pub fn resolve_auto_port(&mut self, port: u16) {
        if self.wants_auto_port() {
            self.port = Some(Some(port));
            self.spec.port = Some(ReadyPort::Number(u32::from(port)));
        }
    }

    /// Whether the ports the tree listens on satisfy `port`.
    pub fn port_met(&self, ports: &[u16]) -> bool {
        match self.port {
            None => true,
            Some(None) => !ports.is_empty(),
            Some(Some(p)) => ports.contains(&p),
        }
    }
}

/// Finds whole lines in output that arrives in pieces. A line split
/// across pieces is matched once it is whole; a trailing partial line
/// (a prompt, shown only once quiet) is matched as far as it goes.
#[derive(Debug, Default)]
pub struct LineMatcher {
    carry: Vec<u8>,
}

impl LineMatcher {
    /// Feeds the next piece; true when a line matches `re`.
    pub fn feed(&mut self, piece: &[u8], re: &Regex) -> bool {
        self.carry.extend_from_slice(piece);
        let complete = self
            .carry
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        let found = self.carry[..complete]
            .split(|b| *b == b'\n')
            .chain(std::iter::once(&self.carry[complete..]))
            .any(|line| matches_line(line, re));
        self.carry.drain(..complete);
        // A partial line longer than this is no line a server prints.
        if self.carry.len() > 64 * 1024 {
            self.carry.clear();
        }
        found
    }

    /// Output was lost in between: what was carried no longer continues.
    pub fn reset(&mut self) {
        self.carry.clear();
    }
}

fn matches_line(line: &[u8], re: &Regex) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return false;
    }
    let text = String::from_utf8_lossy(line);
    re.is_match(&crate::output::text::strip_ansi(&text))
}

/// A loopback URL to probe: `http://127.0.0.1|localhost|[::1][:port]/path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    /// Where to connect: "localhost" is tried as 127.0.0.1, then ::1
    /// (never resolved, so no name service can point it elsewhere).
    pub addrs: Vec<SocketAddr>,
    /// The Host header.
    pub host: String,
    /// Path and query.
    pub path: String,
}

impl HttpTarget {
    pub fn parse(url: &str) -> Result<HttpTarget, String> {
        let bad = || {
            format!(
                "ready.http: must be an http:// URL on the loopback (127.0.0.1, localhost or [::1]), got {url:?}"
            )
        };
        let rest = url.strip_prefix("http://").ok_or_else(bad)?;
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        if path.chars().any(|c| c.is_ascii_control() || c == ' ') {
            return Err(bad());
        }
        // "host", "host:port", "[v6]" or "[v6]:port".
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (h, after) = v6.split_once(']').ok_or_else(bad)?;
                match after {
                    "" => (h, None),
                    p => (h, Some(p.strip_prefix(':').ok_or_else(bad)?)),
                }
            }
            None => match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            },
        };
        let port: u16 = match port {
            None => 80,
            Some(p) => p.parse().ok().filter(|p| *p > 0).ok_or_else(bad)?,
        };
        let ips: Vec<IpAddr> = match host.to_ascii_lowercase().as_str() {
            "localhost" => vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()],
            h => match h.parse::<IpAddr>() {
                Ok(ip) if ip.is_loopback() => vec![ip],
                _ => return Err(bad()),
            },
        };
        Ok(HttpTarget {
            addrs: ips
                .into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect(),
            host: authority.to_string(),
            path,
        })
    }

    /// One GET: true on a status of 200 to 399. Any failure (refused,
    /// slow, not HTTP) is "not yet".
    pub async fn probe(&self) -> bool {
        for addr in &self.addrs {
            if let Ok(Ok(status)) = tokio::time::timeout(HTTP_PROBE_LIMIT, self.get(*addr)).await {
                return (200..400).contains(&status);
            }
        }
        false
    }

    async fn get(&self, addr: SocketAddr) -> std::io::Result<u16> {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!(
            "GET {} HTTP/1.0\r\nHost: {}\r\nUser-Agent: procd-ready\r\nConnection: close\r\n\r\n",
            self.path, self.host
        );
        stream.write_all(request.as_bytes()).await?;
        // The status line is all that is read: "HTTP/1.x NNN ...".
        let mut head = [0u8; 64];
        let mut got = 0;
        while got < 12 {
            let n = stream.read(&mut head[got..]).await?;
            if n == 0 {
                break;
            }
            got += n;
        }
        let line = String::from_utf8_lossy(&head[..got]);
        line.strip_prefix("HTTP/1.")
            .and_then(|r| r.get(2..5))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("not an HTTP answer"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_urls_are_accepted_and_others_refused() {
        let t = HttpTarget::parse("http://127.0.0.1:3000/health?x=1").unwrap();
        assert_eq!(t.addrs, vec!["127.0.0.1:3000".parse().unwrap()]);
        assert_eq!(t.path, "/health?x=1");
        let t = HttpTarget::parse("http://localhost:8080").unwrap();
        assert_eq!(t.addrs.len(), 2);
        assert_eq!(t.path, "/");
        assert_eq!(t.host, "localhost:8080");
        let t = HttpTarget::parse("http://[::1]:9/").unwrap();
        assert_eq!(t.addrs, vec!["[::1]:9".parse().unwrap()]);
        let t = HttpTarget::parse("http://127.0.0.2/").unwrap();
        assert_eq!(t.addrs[0].port(), 80);
        for bad in [
            "https://127.0.0.1/",
            "http://10.0.0.1:80/",
            "http://example.com/",
            "http://127.0.0.1:0/",
            "http://127.0.0.1:99999/",
            "http://127.0.0.1:80x/",
            "http://[::2]:80/",
            "http://127.0.0.1/a b",
            "http://localhost.evil.com/",
        ] {
            assert!(HttpTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lines_match_whole_even_when_split() {
        let re = Regex::new(r"^listening on 3000$").unwrap();
        let mut m = LineMatcher::default();
        assert!(!m.feed(b"starting\nlisten", &re));
        assert!(!m.feed(b"ing on 30", &re));
        assert!(m.feed(b"00\n", &re));
        let mut m = LineMatcher::default();
        assert!(m.feed(b"\x1b[32mlistening on 3000\x1b[0m\r\n", &re));
        m.reset();
        assert!(!m.feed(b"xlistening on 3000\n", &re));
        // A partial line (a prompt) is matched as far as it goes.
        let prompt = Regex::new(r"ready> $").unwrap();
        assert!(LineMatcher::default().feed(b"boot\nready> ", &prompt));
    }

    #[test]
    fn conditions_are_validated_naming_the_key() {
        let parse = |v: serde_json::Value| {
            ReadyCheck::parse(&serde_json::from_value::<ReadySpec>(v).unwrap())
        };
        assert!(parse(serde_json::json!({"port": 0}))
            .unwrap_err()
            .contains("ready.port"));
        assert!(parse(serde_json::json!({"port": 70000}))
            .unwrap_err()
            .contains("ready.port"));
        assert!(parse(serde_json::json!({"output": "("}))
            .unwrap_err()
            .contains("ready.output"));
        assert!(parse(serde_json::json!({"timeout_s": 5}))
            .unwrap_err()
            .contains("at least one"));
        assert!(parse(serde_json::json!({"port": 1, "timeout_s": -1}))
            .unwrap_err()
            .contains("ready.timeout_s"));
        let c = parse(serde_json::json!({"port": "any", "output": "up"})).unwrap();
        assert!(c.port_met(&[1234]) && !c.port_met(&[]));
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
    }
}
