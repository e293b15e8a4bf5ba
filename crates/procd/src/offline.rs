//! `procd logs ID` when no daemon runs (docs/operations.md): a finished session's
//! output is read from its log file, redacted as the daemon redacts it, and
//! the reader is told that the daemon is not running. Read-only: it starts
//! nothing and writes nothing.

use crate::base::{EXIT_FAILED, EXIT_OK};
use procd_core::output::redact::Redactor;
use procd_core::output::store::OutputStore;
use procd_gateway::Paths;
use std::path::{Path, PathBuf};

/// The log file of `id` (a full id, or a unique prefix of 4+ hex digits).
fn find_log(logs: &Path, id: &str) -> Result<(String, PathBuf), String> {
    let want = id.strip_prefix("proc_").unwrap_or(id).to_ascii_lowercase();
    if want.len() < 4 || !want.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "{id:?} is not a session id (proc_ and 4+ hex digits)"
        ));
    }
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(logs)
        .map_err(|_| "no session logs on disk".to_string())?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let session = name.strip_suffix(".log")?.to_string();
            let hex = session.strip_prefix("proc_")?;
            (hex.len() == 12 && hex.starts_with(&want)).then(|| (session, e.path()))
        })
        .collect();
    match found.len() {
        0 => Err(format!("no log of a session {id} on disk")),
        1 => Ok(found.remove(0)),
        n => Err(format!("{id} matches {n} sessions; give more of the id")),
    }
}

pub async fn logs(
    paths: &Paths,
    config: &Option<PathBuf>,
    id: &str,
    limit: Option<u64>,
    json: bool,
) -> i32 {
    let (session, path) = match find_log(&paths.logs_dir(), id) {
        Ok(found) => found,
        Err(e) => {
            eprintln!("procd is not running, and {e}");
            return EXIT_FAILED;
        }
    };
    let config_path = config.clone().unwrap_or_else(|| paths.config_file.clone());
    let config = procd_gateway::config::load(&config_path, config.is_some()).unwrap_or_default();
    let limit = limit.unwrap_or(200).min(100_000);
    let page = async {
        let store = OutputStore::open_existing(&path, u64::MAX, 1)?;
        store.lines(None, limit, config.max_response_bytes).await
    };
    let page = match page.await {
        Ok(page) => page,
        Err(e) => {
            eprintln!(
                "procd is not running, and {} cannot be read: {e}",
                path.display()
            );
            return EXIT_FAILED;
        }
    };
    let n = page.lines.len() as u64;
    let mut text = procd_core::output::text::strip_ansi(&page.lines.join("\n"));
    if n > 0 {
        text.push('\n');
    }
    // The log file does not say which command wrote it: mask as for an
    // environment dump too (it masks more, never less, than the daemon).
    let redactor = Redactor {
        enabled: config.redact,
    };
    let output = redactor.excerpt(&text, &page.before, true);
    let showing = if n == 0 {
        format!("0 lines (of {})", page.total)
    } else {
        format!(
            "{n} lines ({}-{} of {})",
            page.first,
            page.first + n - 1,
            page.total
        )
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "session_id": session,
                "output": output,
                "total_lines": page.total,
                "showing": showing,
                "daemon": "not running",
                "source": path.display().to_string(),
            })
        );
    } else {
        eprintln!(
            "procd is not running; {session}'s output from {}:",
            path.display()
        );
        print!("{output}");
    }
    EXIT_OK
}
