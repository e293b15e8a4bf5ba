//! Path URIs as Codex's server reads and writes them: a `file://` URI's
//! path (`path_of`) and a path's URI (`uri_of`).

use super::RpcError;

/// A `file://` URI's path, read as Codex's server reads one (the `url`
/// crate's parse, then its Linux file path): any scheme but `file`, a
/// query, a fragment or a host other than `localhost` is refused with
/// Codex's words; `file:/p` is `file:///p`; a `%` escape that is not
/// two hex digits stays as written.
pub fn path_of(uri: &str) -> Result<std::path::PathBuf, RpcError> {
    let scheme_end = uri.find(':').filter(|&at| {
        let scheme = &uri[..at];
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    let Some(at) = scheme_end else {
        return Err(RpcError::invalid(
            "invalid URI: relative URL without a base",
        ));
    };
    let (scheme, rest) = (&uri[..at], &uri[at + 1..]);
    if !scheme.eq_ignore_ascii_case("file") {
        let scheme = scheme.to_ascii_lowercase();
        return Err(RpcError::invalid(format!(
            "unsupported path URI scheme `{scheme}`"
        )));
    }
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, _)) => (rest, true),
        None => (rest, false),
    };
    if rest.contains('?') {
        return Err(RpcError::invalid(
            "query parameters are not allowed in path URIs",
        ));
    }
    if fragment {
        return Err(RpcError::invalid("fragments are not allowed in path URIs"));
    }
    let path = match rest.strip_prefix("//") {
        None => rest,
        Some(after) => {
            let (host, path) = after.split_at(after.find('/').unwrap_or(after.len()));
            if !(host.is_empty() || host.eq_ignore_ascii_case("localhost")) {
                return Err(RpcError::new(
                    -32600,
                    format!("'{uri}' is invalid on 'linux'"),
                ));
            }
            path
        }
    };
    // Dot segments go as the URL parser removes them, by name, before
    // any look at the disk: `/a/link/..` is `/a`, whatever `link` is.
    let mut segments: Vec<&str> = Vec::new();
    let mut trailing = false;
    for segment in path.strip_prefix('/').unwrap_or(path).split('/') {
        let dots = segment.replace("%2e", ".").replace("%2E", ".");
        trailing = matches!(dots.as_str(), "." | "..");
        match dots.as_str() {
            "." => {}
            ".." => {
                segments.pop();
            }
            _ => segments.push(segment),
        }
    }
    let mut bytes = Vec::with_capacity(path.len() + 1);
    for segment in &segments {
        bytes.push(b'/');
        percent_decode_into(&mut bytes, segment);
    }
    if bytes.is_empty() || trailing {
        bytes.push(b'/');
    }
    use std::os::unix::ffi::OsStringExt;
    Ok(std::path::PathBuf::from(std::ffi::OsString::from_vec(
        bytes,
    )))
}

/// Appends `segment` with its `%` escapes decoded; a `%` not followed by
/// two hex digits stays as written.
fn percent_decode_into(bytes: &mut Vec<u8>, segment: &str) {
    let raw = segment.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut i = 0;
    while i < raw.len() {
        let escape = (
            raw[i],
            raw.get(i + 1).copied().and_then(hex),
            raw.get(i + 2).copied().and_then(hex),
        );
        match escape {
            (b'%', Some(h), Some(l)) => {
                bytes.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                bytes.push(b);
                i += 1;
            }
        }
    }
}

/// A path as a `file://` URI.
pub fn uri_of(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut s = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}
