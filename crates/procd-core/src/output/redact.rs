//! Secret redaction (docs/SECURITY.md) for everything procd returns: output,
//! commands, events — and commands in the checkpoint. It runs on the way
//! out, never on ingestion; the log files keep the raw bytes (mode 0600).
//!
//! Masks: known token prefixes, JWTs, Authorization / Proxy-Authorization
//! and x-api-key-style header values, `scheme://user:password@host`
//! passwords, PEM private keys; for env-dump commands also `NAME=value`
//! where NAME looks like a credential. A masked value keeps its first 6 and
//! last 4 characters when it is 18 or longer, else it becomes `***`.

use aho_corasick::AhoCorasick;
use regex::{Captures, Regex};
use std::borrow::Cow;
use std::sync::LazyLock;

/// Whether and how to redact.
#[derive(Debug, Clone, Copy)]
pub struct Redactor {
    pub enabled: bool,
}

struct Rules {
    pem: Regex,
    /// Every `auth_header` match holds `AUTHORIZATION`, and most text
    /// does not: one search for it (~0.3 instructions a byte) lets by
    /// text that costs the rule's own search ~16 a byte (a server's log
    /// lines: the regex finds no fast prefilter for a name in any case
    /// behind an optional `proxy-`).
    authorization: AhoCorasick,
    auth_header: Regex,
    key_header: Regex,
    url_password: Regex,
    jwt: Regex,
    prefixed: Regex,
    env_line: Regex,
    env_assignment: Regex,
    pem_marker: Regex,
}

/// The header whose value is a credential (`Proxy-Authorization` too).
/// The rule matches its name in ASCII case only (`(?-u:…)`), as the
/// search in front of it does: no other letter folds to one of its.
const AUTHORIZATION: &str = "authorization";

static RULES: LazyLock<Rules> = LazyLock::new(|| {
    Rules {
    pem: Regex::new(
        r"(?s)(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----).*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
    )
    .expect("pem"),
    authorization: AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .build([AUTHORIZATION])
        .expect("authorization"),
    auth_header: Regex::new(&format!(
        r#"(?i)\b((?:proxy-)?(?-u:{AUTHORIZATION})["']?\s*[:=]\s*["']?(?:(?:bearer|basic|token|digest|bot)\s+)?)([^\s'",;]+)"#,
    ))
    .expect("auth header"),
    key_header: Regex::new(
        r#"(?i)\b((?:x-api-key|x-goog-api-key|x-auth-token|x-access-token|api-key|apikey|x-api-token)["']?\s*[:=]\s*["']?)([^\s'",;]+)"#,
    )
    .expect("key header"),
    url_password: Regex::new(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)")
        .expect("url password"),
    jwt: Regex::new(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")
        .expect("jwt"),
    prefixed: Regex::new(concat!(
        r"\b(?:",
        r"sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}",
        r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}",
        r"|xox[baprs]-[A-Za-z0-9-]{10,}",
        r"|AIza[0-9A-Za-z_-]{30,}",
        r"|(?:AKIA|ASIA)[0-9A-Z]{16}",
        r"|hf_[A-Za-z0-9]{20,}|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_-]{20,}",
        r"|glpat-[A-Za-z0-9_-]{20,}|xai-[A-Za-z0-9_-]{20,}|gsk_[A-Za-z0-9]{20,}",
        r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",
        r"|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",
        r"|dop_v1_[a-f0-9]{40,}|shp(?:at|ss|ca)_[a-fA-F0-9]{20,}|ya29\.[A-Za-z0-9_-]{20,}",
        r")"
    ))
    .expect("prefixed tokens"),
    env_line: Regex::new(r"(?m)^(\s*(?:export\s+|declare\s+-[a-zA-Z]+\s+)?)([A-Za-z_][A-Za-z0-9_]*)=(.*?)(\r?)$")
        .expect("env line"),
    env_assignment: Regex::new(r#"\b([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|'[^']*'|[^\s;&|]+)"#)
        .expect("env assignment"),
    pem_marker: Regex::new(r"-----(?:BEGIN|END) [A-Z0-9 ]*PRIVATE KEY-----").expect("pem marker"),
}
});

/// The mask of a secret value.
pub fn mask(value: &str) -> String {
    let n = value.chars().count();
    if n >= 18 {
        let head: String = value.chars().take(6).collect();
        let tail: String = value.chars().skip(n - 4).collect();
        format!("{head}...{tail}")
    } else {
        "***".to_string()
    }
}

/// Whether a variable name looks like it holds a credential.
fn credential_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "CREDENTIAL",
        "AUTH",
    ]
    .iter()
    .any(|w| upper.contains(w))
}

/// Whether a command dumps the environment: a pipeline segment starting
/// with env, printenv, set, export or declare.
pub fn is_env_dump(command: &str) -> bool {
    command
        .split(['|', ';', '&', '\n', '(', ')', '{', '}', '`'])
        .filter_map(|segment| segment.split_whitespace().next())
        .map(|word| word.rsplit('/').next().unwrap_or(word))
        .any(|word| matches!(word, "env" | "printenv" | "set" | "export" | "declare"))
}

/// Output this long before an excerpt is enough to find the BEGIN line of a
/// private key block the excerpt starts inside (an RSA-4096 PEM is 3.3 KB).
pub const KEY_CONTEXT_BYTES: usize = 8 * 1024;

impl Redactor {
    /// Masks secrets in output text; `env_dump` adds the `NAME=value` pass.
    pub fn output<'a>(&self, text: &'a str, env_dump: bool) -> Cow<'a, str> {
        self.excerpt(text, &[], env_dump)
    }

    /// Masks secrets in text cut out of a session's output. `before` is the
    /// output just before it (up to [`KEY_CONTEXT_BYTES`]): a text that
    /// starts inside a private key block (a read window, a tail, a page of
    /// lines) is masked up to the block's end, though its BEGIN line is
    /// not in the text.
    pub fn excerpt<'a>(&self, text: &'a str, before: &[u8], env_dump: bool) -> Cow<'a, str> {
        if !self.enabled || text.is_empty() {
            return Cow::Borrowed(text);
        }
        let (masked_key, text) = key_continuation(text, inside_private_key(before));
        let mut out = common(text);
        if env_dump {
            out = replace(out, &RULES.env_line, |c| {
                if credential_name(&c[2]) {
                    let value = &c[3];
                    format!("{}{}={}{}", &c[1], &c[2], mask(trim_quotes(value)), &c[4])
                } else {
                    c[0].to_string()
                }
            });
        }
        if masked_key.is_empty() {
            out
        } else {
            Cow::Owned(masked_key + &out)
        }
    }

    /// Masks secrets in a command line (assignments to credential-looking
    /// names are masked for env-dump commands, e.g. `export X_TOKEN=…`).
    pub fn command<'a>(&self, command: &'a str) -> Cow<'a, str> {
        if !self.enabled || command.is_empty() {
            return Cow::Borrowed(command);
        }
        let mut out = common(command);
        if is_env_dump(command) {
            out = replace(out, &RULES.env_assignment, |c| {
                if credential_name(&c[1]) {
                    format!("{}={}", &c[1], mask(trim_quotes(&c[2])))
                } else {
                    c[0].to_string()
                }
            });
        }
        out
    }
}

fn trim_quotes(v: &str) -> &str {
    let v = v.trim();
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(v)
}

/// Whether output ending with `before` is inside a private key block: its
/// last key marker is a BEGIN.
fn inside_private_key(before: &[u8]) -> bool {
    // Most output holds no key at all: a SIMD scan says so without decoding.
    if memchr::memmem::rfind(before, b"PRIVATE KEY-----").is_none() {
        return false;
    }
    let text = String::from_utf8_lossy(before);
    RULES
        .pem_marker
        .find_iter(&text)
        .last()
        .is_some_and(|m| m.as_str().starts_with("-----BEGIN"))
}

/// Splits off the part of `text` that continues a private key block begun
/// before it, masked: up to and including the block's END marker. A text
/// whose first marker is an END was cut out of a block whatever `inside`
/// says (a tail); one that is `inside` with no END is masked whole.
fn key_continuation(text: &str, inside: bool) -> (String, &str) {
    match RULES.pem_marker.find(text) {
        Some(m) if m.as_str().starts_with("-----END") => {
            (format!("***\n{}", m.as_str()), &text[m.end()..])
        }
        Some(m) if inside => ("***\n".to_string(), &text[m.start()..]),
        None if inside => ("***".to_string(), ""),
        _ => (String::new(), text),
    }
}

/// The passes that apply to every text.
fn common(text: &str) -> Cow<'_, str> {
    let r = &*RULES;
    let mut out = Cow::Borrowed(text);
    out = replace(out, &r.pem, |c| format!("{}\n***\n{}", &c[1], &c[2]));
    if r.authorization.is_match(out.as_ref()) {
        out = replace(out, &r.auth_header, |c| format!("{}{}", &c[1], mask(&c[2])));
    }
    out = replace(out, &r.key_header, |c| format!("{}{}", &c[1], mask(&c[2])));
    out = replace(out, &r.url_password, |c| {
        format!("{}{}{}", &c[1], mask(&c[2]), &c[3])
    });
    out = replace(out, &r.jwt, |c| mask(&c[0]));
    out = replace(out, &r.prefixed, |c| mask(&c[0]));
    out
}

fn replace<'a>(text: Cow<'a, str>, re: &Regex, f: impl Fn(&Captures) -> String) -> Cow<'a, str> {
    if !re.is_match(&text) {
        return text;
    }
    Cow::Owned(re.replace_all(&text, |c: &Captures| f(c)).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ON: Redactor = Redactor { enabled: true };

    #[test]
    fn a_header_value_is_masked_whatever_the_case_of_its_name() {
        let title = |name: &str| {
            name.split('-')
                .map(|w| w[..1].to_uppercase() + &w[1..])
                .collect::<Vec<_>>()
                .join("-")
        };
        let names = [AUTHORIZATION, "proxy-authorization", "x-api-key", "apikey"];
        let more = [
            "x-goog-api-key",
            "x-auth-token",
            "x-access-token",
            "api-key",
        ];
        for name in names.into_iter().chain(more).chain(["x-api-token"]) {
            for shown in [name.to_string(), name.to_uppercase(), title(name)] {
                let line = format!("> {shown}: abcdefghijklmnopqrstuvwxyz\n");
                let want = format!("> {shown}: abcdef...wxyz\n");
                assert_eq!(ON.output(&line, false), want);
                let line = format!("curl -H '{shown}=abcdefghijklmnopqrstuvwxyz'");
                let want = format!("curl -H '{shown}=abcdef...wxyz'");
                assert_eq!(ON.command(&line), want);
            }
        }
        // Without a header, the text is passed by untouched.
        let log = "warning: unused variable `authorize` in src/project/auth.rs\n";
        assert!(matches!(ON.output(log, false), Cow::Borrowed(_)));
    }

    #[test]
    fn a_text_cut_out_of_a_private_key_is_masked_up_to_its_end() {
        let begin = "-----BEGIN RSA PRIVATE KEY-----";
        let end = "-----END RSA PRIVATE KEY-----";
        let body = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun";
        // A tail: the first marker is an END, whatever came before.
        assert_eq!(
            ON.output(&format!("{body}\n{end}\n$ next"), false),
            format!("***\n{end}\n$ next")
        );
        // A window starting inside a block begun before it.
        let before = format!("ok\n{begin}\n{body}\n");
        let inside = |text: &str| ON.excerpt(text, before.as_bytes(), false).into_owned();
        assert_eq!(inside(&format!("{body}\n")), "***");
        assert_eq!(
            inside(&format!("{body}\n{end}\nsk-proj-abc123def456ghi789jkl012")),
            format!("***\n{end}\nsk-pro...l012")
        );
        // Output after a complete block, or with no key at all, is untouched.
        let closed = format!("{begin}\n{body}\n{end}\n");
        assert_eq!(
            ON.excerpt("plain text", closed.as_bytes(), false),
            "plain text"
        );
        assert_eq!(ON.excerpt(body, b"no key here", false), body);
        // And redact = false passes everything through.
        let off = Redactor { enabled: false };
        assert_eq!(off.excerpt(body, before.as_bytes(), false), body);
    }

    #[test]
    fn every_pattern_is_masked() {
        let secrets = [
            "sk-proj-abc123def456ghi789jkl012",
            "sk-ant-api03-abcdefghijklmnop1234",
            "sk-abcdefghijklmnopqrstuvwx",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
            "gho_abcdefghijklmnopqrstuvwxyz012345",
            "xoxb-123456789012-abcdefghijkl",
            "AIzaSyA1234567890abcdefghijklmnopqrstu",
            "AKIAIOSFODNN7EXAMPLE",
            "hf_abcdefghijklmnopqrstuvwxyz",
            "npm_abcdefghijklmnopqrstuvwxyz0123456789",
            "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdo",
            "glpat-abcdefghijklmnopqrst",
            "xai-abcdefghijklmnopqrstuvwxyz",
            "gsk_abcdefghijklmnopqrstuvwxyz",
            "sk_live_abcdefghijklmnop1234",
            "rk_test_abcdefghijklmnop1234",
            "pk_live_abcdefghijklmnop1234",
            "ASIAIOSFODNN7EXAMPLE",
            "xoxp-123456789012-abcdefghijkl",
            "SG.abcdefghijklmnop.qrstuvwxyz0123456789",
            "dop_v1_0123456789abcdef0123456789abcdef01234567",
            "shpat_0123456789abcdef0123456789abcdef",
            "ya29.abcdefghijklmnopqrstuvwxyz",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        ];
        for secret in secrets {
            let text = format!("token: {secret} done");
            let out = ON.output(&text, false);
            assert!(!out.contains(secret), "{secret} leaked: {out}");
            assert!(
                out.starts_with("token: ") && out.ends_with(" done"),
                "{out}"
            );
        }
    }

    #[test]
    fn headers_urls_and_keys() {
        let out = ON.output(
            "curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz'",
            false,
        );
        assert_eq!(out, "curl -H 'Authorization: Bearer abcdef...wxyz'");
        let out = ON.output("Proxy-Authorization: Basic dXNlcjpwYXNz", false);
        assert_eq!(out, "Proxy-Authorization: Basic ***");
        let out = ON.output("x-api-key: short", false);
        assert_eq!(out, "x-api-key: ***");
        let out = ON.output("postgres://app:hunter2@db:5432/x", false);
        assert_eq!(out, "postgres://app:***@db:5432/x");
        let pem =
            "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\ndef\n-----END RSA PRIVATE KEY-----\nb";
        let out = ON.output(pem, false);
        assert_eq!(
            out,
            "a\n-----BEGIN RSA PRIVATE KEY-----\n***\n-----END RSA PRIVATE KEY-----\nb"
        );
    }

    #[test]
    fn env_dumps_mask_credential_assignments_only() {
        let text = "MY_SERVICE_TOKEN=abc123randomopaquetokenvalue999\nHOME=/home/u\nDB_PASSWORD=\"x\"\r\nPATH=/bin";
        let out = ON.output(text, true);
        assert!(!out.contains("abc123randomopaquetokenvalue999"));
        assert!(out.contains("MY_SERVICE_TOKEN=abc123...e999"));
        assert!(out.contains("HOME=/home/u\n"));
        assert!(out.contains("DB_PASSWORD=***\r\n"));
        assert!(out.ends_with("PATH=/bin"));
        // Not an env dump: NAME=value text is left alone.
        assert_eq!(
            ON.output("MY_TOKEN=opaquevalue", false),
            "MY_TOKEN=opaquevalue"
        );
        assert!(is_env_dump("printenv | grep X"));
        assert!(is_env_dump("cd x && env"));
        assert!(is_env_dump("/usr/bin/env"));
        assert!(!is_env_dump("python app.py --env prod"));
        let cmd = ON.command("export MY_TOKEN=opaque-value-123456789 && ./run.sh");
        assert_eq!(cmd, "export MY_TOKEN=opaque...6789 && ./run.sh");
    }

    #[test]
    fn ordinary_text_is_untouched() {
        for text in [
            "commit 3f2a9b1c0d4e5f60718293a4b5c6d7e8f9012345",
            "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "id 123e4567-e89b-12d3-a456-426614174000",
            "/home/u/project/src/tasks/risk-assessment-document.md",
            "HOME=/home/u",
            "https://example.com/path?q=1",
            "user@example.com",
            "task-123 desk-lamp sk-short",
            "Authorization header missing",
        ] {
            assert_eq!(ON.output(text, false), text, "{text}");
        }
        let off = Redactor { enabled: false };
        let raw = "sk-proj-abc123def456ghi789jkl012 MY_TOKEN=x";
        assert_eq!(off.output(raw, true), raw);
        assert_eq!(off.command(raw), raw);
    }
}
