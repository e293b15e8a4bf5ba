//! `procd grep` and `procd logs ID --grep`: the daemon's `search`, printed
//! as `grep -n` prints a file — `LINE:text` for a match, `LINE-text` for a
//! context line, `--` between groups that do not touch — with `SESSION:`
//! before each line when several sessions are searched. Exits 0 when
//! something matched, 1 when nothing did, as grep does. `procd logs -f
//! --grep` follows one session's output and prints its matching lines the
//! same way as they come.

use crate::base::{EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use jsonrpsee::core::client::Error as ClientError;
use procd_client::ProcdApiClient;

#[derive(clap::Args, Debug)]
pub struct GrepArgs {
    /// The regex to look for, in each output line.
    pub pattern: String,
    /// Sessions to search (ids, prefixes or names; default: all).
    pub ids: Vec<String>,
    /// Only the sessions of this session key.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Match without regard to case.
    #[arg(short = 'i', long)]
    pub ignore_case: bool,
    /// Lines of context before and after each match.
    #[arg(short = 'C', long, value_name = "N")]
    pub context: Option<u32>,
    /// Lines of context before each match.
    #[arg(short = 'B', long, value_name = "N")]
    pub before: Option<u32>,
    /// Lines of context after each match.
    #[arg(short = 'A', long, value_name = "N")]
    pub after: Option<u32>,
    /// At most this many matches (default 100; all are counted).
    #[arg(short = 'm', long = "max", value_name = "N")]
    pub max: Option<u64>,
    /// Only output written since then: a time ago (30s, 5m, 2h, 1d) or an
    /// RFC 3339 time.
    #[arg(long, value_name = "WHEN", value_parser = crate::base::time_of)]
    pub since: Option<String>,
    /// Only output written until then (as --since).
    #[arg(long, value_name = "WHEN", value_parser = crate::base::time_of)]
    pub until: Option<String>,
}

impl GrepArgs {
    /// `procd logs ID --grep RE [-C N] [--since WHEN]`: one session, as
    /// many matches as search returns.
    pub fn of_log(
        id: String,
        pattern: String,
        context: Option<u32>,
        since: Option<String>,
    ) -> GrepArgs {
        GrepArgs {
            pattern,
            ids: vec![id],
            key: None,
            ignore_case: false,
            context,
            before: None,
            after: None,
            max: Some(10_000),
            since,
            until: None,
        }
    }
}

/// A search reads only, so one cut short by a daemon that died is asked
/// again of the next (`Reconnecting::call`).
pub async fn run(
    args: &GrepArgs,
    json: bool,
    conn: &procd_client::Reconnecting,
) -> Result<i32, ClientError> {
    let mut ids = Vec::new();
    for arg in &args.ids {
        ids.push(procd_client::resolve_session(&*conn.last().await, arg).await?);
    }
    let sessions = Some(ids.clone()).filter(|i| !i.is_empty());
    let r = conn
        .call(|client| {
            let sessions = sessions.clone();
            async move {
                client
                    .search(
                        args.pattern.clone(),
                        sessions,
                        args.key.clone(),
                        Some(args.ignore_case),
                        args.before.or(args.context),
                        args.after.or(args.context),
                        None,
                        None,
                        args.since.clone(),
                        args.until.clone(),
                        args.max,
                        None,
                        None,
                    )
                    .await
            }
        })
        .await?;
    if json {
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
    } else {
        let context = args.context.or(args.before).or(args.after).unwrap_or(0) > 0;
        print!("{}", crate::render::as_grep(&r, ids.len() == 1, context));
        if r.truncated {
            eprintln!(
                "procd grep: {} of {} matches shown (--max for more)",
                r.matches.len(),
                r.total
            );
        }
    }
    Ok(if r.total > 0 { EXIT_OK } else { EXIT_FAILED })
}

/// `procd logs -f ID --grep RE`: the session's output from the start as it
/// comes, only its matching lines, numbered as `search` numbers them
/// (from the first line the log keeps), each flushed as it is printed;
/// ends when the session has exited and everything was read.
pub async fn follow(
    conn: &procd_client::Reconnecting,
    id: String,
    pattern: &str,
) -> Result<i32, ClientError> {
    use std::io::Write;
    let re = match procd_core::output::text::bounded_regex(pattern, false) {
        Ok(re) => re,
        Err(e) => {
            eprintln!("procd logs: --grep: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let (mut cursor, mut line_no, mut matched) = (0u64, 0u64, false);
    // The start of a line not yet ended.
    let mut partial = String::new();
    loop {
        let r = conn
            .call(|c| {
                let id = id.clone();
                async move {
                    let from = Some(procd_proto::Cursor::new(cursor));
                    let wait = Some(procd_proto::WaitMs::new(30_000.0));
                    c.read(id, from, None, wait, None, None).await
                }
            })
            .await?;
        partial.push_str(&r.data);
        let mut out = std::io::stdout().lock();
        let mut rest = partial.as_str();
        while let Some(end) = rest.find('\n') {
            line_no += 1;
            let line = rest[..end].trim_end_matches('\r');
            if re.is_match(line) {
                matched = true;
                let _ = writeln!(out, "{line_no}:{line}");
                let _ = out.flush();
            }
            rest = &rest[end + 1..];
        }
        if r.eof && !rest.is_empty() {
            line_no += 1;
            if re.is_match(rest) {
                matched = true;
                let _ = writeln!(out, "{line_no}:{rest}");
            }
            rest = "";
        }
        partial = rest.to_string();
        cursor = r.next_cursor;
        if r.eof {
            let _ = out.flush();
            return Ok(if matched { EXIT_OK } else { EXIT_FAILED });
        }
    }
}
