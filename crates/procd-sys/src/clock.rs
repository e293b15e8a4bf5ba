//! Wall-clock timestamps as RFC 3339 UTC strings (the protocol's format).

use std::time::SystemTime;
use std::time::UNIX_EPOCH;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Formats `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, milliseconds:
/// `2026-11-29T22:12:09.375Z`). By hand rather than through `time`'s
/// format description, which cost ~2k instructions a call, an eighth of a
/// poll; `tests::matches_the_time_crate` holds the two equal. Years are
/// clamped to 0000..=9999, the ones this format can write.
pub fn rfc3339(t: SystemTime) -> String {
    const MS_PER_DAY: i128 = 86_400_000;
    let ms = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i128,
        Err(e) => -(e.duration().as_nanos().div_ceil(1_000_000) as i128),
    };
    let (days, ms_of_day) = (ms.div_euclid(MS_PER_DAY), ms.rem_euclid(MS_PER_DAY));
    let (year, month, day) = civil_from_days(days);
    if year > 9999 {
        return "9999-12-31T23:59:59.999Z".into();
    }
    if year < 0 {
        return "0000-01-01T00:00:00.000Z".into();
    }
    let ms_of_day = ms_of_day as u32;
    let (year, month, day) = (year as u32, month, day);
    let (h, m, sec, milli) = (
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000,
    );
    let two = |v: u32| [b'0' + (v / 10) as u8, b'0' + (v % 10) as u8];
    let [y0, y1] = two(year / 100);
    let [y2, y3] = two(year % 100);
    let [mo0, mo1] = two(month);
    let [d0, d1] = two(day);
    let [h0, h1] = two(h);
    let [mi0, mi1] = two(m);
    let [s0, s1] = two(sec);
    let [ms1, ms2] = two(milli % 100);
    let ms0 = b'0' + (milli / 100) as u8;
    let text = [
        y0, y1, y2, y3, b'-', mo0, mo1, b'-', d0, d1, b'T', h0, h1, b':', mi0, mi1, b':', s0, s1,
        b'.', ms0, ms1, ms2, b'Z',
    ];
    // ASCII digits and separators: always UTF-8.
    String::from_utf8_lossy(&text).into_owned()
}

/// The proleptic Gregorian (year, month, day) of a day count from
/// 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i128) -> (i128, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i128::from(month <= 2);
    (year, month, day)
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
        let before = UNIX_EPOCH - Duration::from_micros(1);
        assert_eq!(rfc3339(before), "1969-12-31T23:59:59.999Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(62_167_219_201)),
            "0000-01-01T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(253_402_300_800)),
            "9999-12-31T23:59:59.999Z"
        );
    }

    /// The hand formatter writes what `time`'s format description did, over
    /// instants spread from year 0 to 9999 and around every day's edges.
    #[test]
    fn matches_the_time_crate() {
        use time::macros::format_description;
        let format = format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
        );
        let reference = |t: SystemTime| OffsetDateTime::from(t).format(format).expect("in range");
        let start = -62_167_219_200_000i64; // 0000-01-01
        let end = 253_402_300_799_999i64; // 9999-12-31T23:59:59.999
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut instants = vec![start, end, 0, -1, 86_399_999, 86_400_000];
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ms = start + (x % (end - start) as u64) as i64;
            instants.extend([
                ms,
                ms - ms.rem_euclid(86_400_000),
                ms - ms.rem_euclid(86_400_000) - 1,
            ]);
        }
        for ms in instants {
            let t = if ms >= 0 {
                UNIX_EPOCH + Duration::from_millis(ms as u64)
            } else {
                UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
            };
            assert_eq!(rfc3339(t), reference(t), "{ms} ms");
        }
    }
}
