//! Wall-clock timestamps as RFC 3339 UTC strings (the protocol's format).

use std::time::SystemTime;
use time::format_description::well_known::Rfc3339;
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::OffsetDateTime;

/// Always UTC, always milliseconds: `2026-11-29T22:12:09.375Z`.
const FORMAT: &[BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// Formats `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(t: SystemTime) -> String {
    // Only a year past 9999 cannot be written this way.
    OffsetDateTime::from(t)
        .format(FORMAT)
        .unwrap_or_else(|_| "9999-12-31T23:59:59.999Z".into())
}

/// Parses an RFC 3339 timestamp (what `rfc3339` writes, and any offset).
/// The monotonic instant of `t`, a wall-clock time in the past (a record
/// another daemon wrote); now if it is not in the past.
pub fn instant_at(t: SystemTime) -> std::time::Instant {
    let now = std::time::Instant::now();
    SystemTime::now()
        .duration_since(t)
        .ok()
        .and_then(|age| now.checked_sub(age))
        .unwrap_or(now)
}

pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    OffsetDateTime::parse(text, &Rfc3339)
        .ok()
        .map(SystemTime::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn parses_what_it_formats() {
        let t = UNIX_EPOCH + Duration::from_millis(1_764_460_800_123);
        assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t));
        assert_eq!(
            parse_rfc3339("2024-02-29T23:59:59.999Z")
                .map(rfc3339)
                .as_deref(),
            Some("2024-02-29T23:59:59.999Z")
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_997_928_123);
        assert_eq!(rfc3339(t), "2026-11-30T00:18:48.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }
}
