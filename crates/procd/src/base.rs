//! What every command module of the binary shares, and nothing else: exit
//! statuses, the one-shot async runtime, where a command runs, a time
//! given as a time ago or RFC 3339. A leaf: cli.rs, lifecycle.rs,
//! attach.rs, mcp/, events.rs, waiting.rs, grep.rs and offline.rs use
//! it; it uses none of them.

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_NOT_RUNNING: i32 = 3;
/// `procd wait` when the session is still running at the timeout.
pub const EXIT_WAIT_TIMEOUT: i32 = 124;

/// A shell-style status: the code itself, or 128+N for a death by signal N.
pub fn wait_exit_code(code: Option<i32>) -> i32 {
    match code {
        Some(c) if c >= 0 => c & 0xff,
        Some(c) => 128 + (-c & 0x7f),
        None => EXIT_FAILED,
    }
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(f),
        Err(err) => {
            eprintln!("procd: cannot start the async runtime: {err}");
            std::process::exit(EXIT_FAILED);
        }
    }
}

/// Where a command started from the CLI runs: `--cwd` taken relative to the
/// current directory, else the current directory itself, as someone typing
/// `procd spawn -- make test` in a project expects. Only when the current
/// directory is unknown (deleted, not UTF-8) is it left to the daemon's
/// default, the home directory.
pub fn cwd_from_here(cwd: Option<String>) -> Option<String> {
    let here = std::env::current_dir().ok();
    match (cwd, here) {
        (Some(dir), Some(here)) => here.join(dir).into_os_string().into_string().ok(),
        (Some(dir), None) => Some(dir),
        (None, here) => here?.into_os_string().into_string().ok(),
    }
}

/// A client error as a person reads it: the daemon's message, or what
/// went wrong with the connection.
pub fn describe(err: &jsonrpsee::core::client::Error) -> String {
    use jsonrpsee::core::client::Error as ClientError;
    match err {
        ClientError::Call(obj) => obj.message().to_string(),
        // A reconnection's own words (a sandbox gone, another instance).
        ClientError::Custom(why) => why.clone(),
        // What was asked may have been done before the daemon died (a
        // spawn is recorded before its answer waits): look, don't repeat.
        other if procd_client::is_disconnect(other) => format!(
            "the connection broke before procd answered ({other}); a daemon that died comes back by itself, and what was asked may have been done: see `procd ps` before asking again"
        ),
        other => other.to_string(),
    }
}

/// `--since 5m` or `--since 2026-12-04T10:00:00Z`, as the RFC 3339 time
/// `search` takes (a time ago is counted from this machine's clock).
pub fn time_of(text: &str) -> Result<String, String> {
    if procd_sys::clock::parse_rfc3339(text).is_some() {
        return Ok(text.to_string());
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let unit_s = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => 0,
    };
    let ago = n.parse::<u64>().ok().filter(|_| unit_s > 0);
    let Some(ago) = ago.and_then(|n| n.checked_mul(unit_s)) else {
        return Err(format!(
            "{text:?} is neither a time ago (30s, 5m, 2h, 1d) nor an RFC 3339 time"
        ));
    };
    let then = std::time::SystemTime::now()
        .checked_sub(std::time::Duration::from_secs(ago))
        .unwrap_or(std::time::UNIX_EPOCH);
    Ok(procd_sys::clock::rfc3339(then))
}
