//! Numeric parameters, validated where they are parsed (docs/SECURITY.md).
//!
//! Every number a method takes has its own type here, named after its field,
//! so that a bad value is refused while the request is deserialized — before
//! any handler runs and before anything happens — with a -32602 message that
//! names the field: negative, non-finite, fractional counts, wrong types and
//! values past the field's hard limit. Within the limit, a value above the
//! method's documented maximum is clamped by the method (docs/protocol.md: `max_bytes`,
//! `wait_ms`, `timeout_s`), so the hard limit only rules out the absurd (1e20
//! seconds, a cursor past 2^53) and what would overflow a `Duration`.
//!
//! Clients build them with `new` (unchecked: the daemon checks).

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::Duration;

/// The largest duration any parameter may name: about 31 years.
pub const MAX_SECONDS: f64 = 1e9;
/// The largest count, cursor or offset: 2^53, the last integer every JSON
/// implementation represents exactly.
pub const MAX_COUNT: u64 = 1 << 53;

/// A parameter from a number a client was given (a CLI flag's value), by
/// the rule the daemon applies to it on the wire: one rule and one message
/// for both, and NaN or an infinity (which JSON cannot carry: serde_json
/// would send null) refused before anything is sent.
pub fn param_of<T: for<'de> Deserialize<'de>>(value: f64) -> Result<T, String> {
    T::deserialize(de::value::F64Deserializer::<de::value::Error>::new(value))
        .map_err(|e| e.to_string())
}

/// `param_of` the number written in `text`.
pub fn parse_param<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, String> {
    let value = text
        .trim()
        .parse::<f64>()
        .map_err(|e| format!("{e}: {text:?}"))?;
    param_of(value)
}

/// Accepts any JSON number as f64; anything else is "invalid type".
struct NumberVisitor(&'static str);

impl Visitor<'_> for NumberVisitor {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }
}

/// Accepts a JSON integer; a float, a negative number or another type is
/// refused with the field's name.
struct CountVisitor(&'static str);

impl Visitor<'_> for CountVisitor {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::custom(format!("{}, got {v}", self.0)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        // 5.0 is five; 5.5 or 1e300 is not a count.
        if v.fract() == 0.0 && (0.0..=MAX_COUNT as f64).contains(&v) {
            Ok(v as u64)
        } else {
            Err(E::custom(format!("{}, got {v}", self.0)))
        }
    }
}

macro_rules! duration_param {
    ($(#[$doc:meta])* $name:ident, $field:literal, $unit:literal, $per_second:expr) => {
        duration_param!($(#[$doc])* $name, $field, $unit, $per_second, min = 0.0, "from 0");
    };
    ($(#[$doc:meta])* $name:ident, $field:literal, $unit:literal, $per_second:expr, above_zero) => {
        duration_param!($(#[$doc])* $name, $field, $unit, $per_second, min = f64::MIN_POSITIVE, "greater than 0 and up");
    };
    ($(#[$doc:meta])* $name:ident, $field:literal, $unit:literal, $per_second:expr, min = $min:expr) => {
        duration_param!($(#[$doc])* $name, $field, $unit, $per_second, min = $min, concat!("from ", $min));
    };
    ($(#[$doc:meta])* $name:ident, $field:literal, $unit:literal, $per_second:expr, min = $min:expr, $from:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
        pub struct $name(f64);

        impl $name {
            const RULE: &'static str = concat!(
                $field, ": must be a number of ", $unit, " ", $from, " to ",
            );

            /// For clients; the daemon validates what it receives.
            pub fn new(value: f64) -> Self {
                $name(value)
            }

            /// The value as sent, in its unit.
            pub fn get(self) -> f64 {
                self.0
            }

            /// The value as a duration (never panics: validated on parse).
            pub fn duration(self) -> Duration {
                Duration::from_secs_f64((self.0 / $per_second).clamp(0.0, MAX_SECONDS))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_f64(self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let limit = MAX_SECONDS * $per_second;
                let v = d.deserialize_any(NumberVisitor(concat!($field, ": a number of ", $unit)))?;
                if !v.is_finite() || v < $min || v > limit {
                    return Err(de::Error::custom(format!("{}{limit}, got {v}", Self::RULE)));
                }
                Ok($name(v))
            }
        }
    };
}

/// A whole-number parameter of type `$int` from `$min` to `$max`
/// (`$range` says it in the message).
macro_rules! int_param {
    ($(#[$doc:meta])* $name:ident, $field:literal, $int:ty, $min:expr, $max:expr, $range:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        pub struct $name($int);

        impl $name {
            /// For clients; the daemon validates what it receives.
            pub fn new(value: $int) -> Self {
                $name(value)
            }

            pub fn get(self) -> $int {
                self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_u64(u64::from(self.0))
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                const RULE: &str = concat!($field, ": must be a whole number from ", $range);
                let v = d.deserialize_any(CountVisitor(RULE))?;
                match <$int>::try_from(v) {
                    Ok(n) if ($min..=$max).contains(&n) => Ok($name(n)),
                    _ => Err(de::Error::custom(format!("{RULE}, got {v}"))),
                }
            }
        }
    };
}

/// A count, cursor or offset: 0 to 2^53.
macro_rules! count_param {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        int_param!($(#[$doc])* $name, $field, u64, 0, MAX_COUNT, "0 to 2^53");
    };
}

duration_param!(
    /// `timeout_s` of spawn, wait and shutdown, in seconds: more than 0
    /// (a timeout of nothing would end, or answer, at once).
    TimeoutS, "timeout_s", "seconds", 1.0, above_zero
);
duration_param!(
    /// `grace_s` of kill, in seconds. A negative grace is clamped to 0
    /// (docs/SECURITY.md, seed R27), so down to -1e9 is accepted.
    GraceS, "grace_s", "seconds", 1.0, min = -1e9
);
duration_param!(
    /// `max_active_age_s` of has_active, in seconds.
    MaxActiveAgeS, "max_active_age_s", "seconds", 1.0
);
duration_param!(
    /// `yield_ms` of spawn and the stdin writes, in milliseconds.
    YieldMs, "yield_ms", "milliseconds", 1000.0
);
duration_param!(
    /// `wait_ms` of read, in milliseconds.
    WaitMs, "wait_ms", "milliseconds", 1000.0
);

duration_param!(
    /// `restart.backoff_s`: the first delay before a restart, in seconds
    /// (doubled per restart in a row; past 30 s it is 30 s).
    BackoffS, "backoff_s", "seconds", 1.0
);
duration_param!(
    /// `restart.reset_after_s`: how long a run must last for the restarts
    /// before it to stop counting towards `max_restarts`.
    ResetAfterS, "reset_after_s", "seconds", 1.0
);
int_param!(
    /// `restart.max_restarts`: restarts in a row before `crash_loop`.
    MaxRestarts, "max_restarts", u32, 0, 1_000_000, "0 to 1000000"
);

count_param!(
    /// A byte cursor into a session's output (read, subscribe_output).
    Cursor, "cursor"
);
count_param!(
    /// `max_bytes` of read.
    MaxBytes, "max_bytes"
);
count_param!(
    /// `offset` of log (a 0-based line index).
    Offset, "offset"
);
count_param!(
    /// `limit` of log (a number of lines).
    Limit, "limit"
);
int_param!(
    /// `limit` of list: the most entries one answer holds. A page of 10 000
    /// entries is a few MB of JSON; past that, page with `after`.
    ListLimit, "limit", u32, 1, 10_000, "1 to 10000"
);
count_param!(
    /// `max_output_chars`: an output budget in characters.
    MaxOutputChars, "max_output_chars"
);
count_param!(
    /// `max_output_tokens`: an output budget in tokens (~4 characters).
    MaxOutputTokens, "max_output_tokens"
);

int_param!(
    /// A TCP port (`port`).
    Port, "port", u16, 1, 65535, "1 to 65535"
);
int_param!(
    /// PTY height in rows.
    Rows, "rows", u16, 1, 4096, "1 to 4096"
);
int_param!(
    /// PTY width in columns.
    Cols, "cols", u16, 1, 4096, "1 to 4096"
);

int_param!(
    /// `limits.memory_bytes`: at least 1 MiB (less cannot run a shell).
    MemoryBytes, "memory_bytes", u64, 1 << 20, MAX_COUNT, "1048576 to 2^53"
);
int_param!(
    /// `limits.pids`: the most processes (and threads) the tree may have.
    Pids, "pids", u64, 1, 4_194_304, "1 to 4194304"
);

/// `limits.cpu_cores`: CPU time as a number of cores, 0.01 to 1024.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct CpuCores(f64);

impl CpuCores {
    const RULE: &'static str = "cpu_cores: must be a number of cores from 0.01 to 1024";

    /// For clients; the daemon validates what it receives.
    pub fn new(cores: f64) -> Self {
        CpuCores(cores)
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

impl Serialize for CpuCores {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for CpuCores {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = d.deserialize_any(NumberVisitor(Self::RULE))?;
        if v.is_finite() && (0.01..=1024.0).contains(&v) {
            Ok(CpuCores(v))
        } else {
            Err(de::Error::custom(format!("{}, got {v}", Self::RULE)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<T: for<'de> Deserialize<'de>>(json: &str) -> Result<T, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_flag_is_judged_by_its_fields_rule() {
        assert_eq!(parse_param::<TimeoutS>(" 2.5 ").unwrap().get(), 2.5);
        for bad in ["inf", "nan", "0", "1e30", "two"] {
            let e = parse_param::<TimeoutS>(bad).unwrap_err();
            assert!(
                e.contains("timeout_s") || e.contains("invalid float"),
                "{bad}: {e}"
            );
        }
        assert!(parse_param::<CpuCores>("nan")
            .unwrap_err()
            .contains("cpu_cores"));
        assert_eq!(param_of::<GraceS>(-5.0).unwrap().duration(), Duration::ZERO);
    }

    #[test]
    fn durations_refuse_the_absurd_and_name_the_field() {
        assert_eq!(
            parse::<YieldMs>("1500").unwrap().duration(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            parse::<TimeoutS>("2").unwrap().duration(),
            Duration::from_secs(2)
        );
        assert_eq!(parse::<TimeoutS>("0.5").unwrap().get(), 0.5);
        for zero in ["0", "-0.0", "-1"] {
            let e = parse::<TimeoutS>(zero).unwrap_err();
            assert!(
                e.starts_with("timeout_s: must be a number of seconds greater than 0 and up to 1000000000, got"),
                "{zero}: {e}"
            );
        }
        assert!(parse::<YieldMs>("0").is_ok(), "0 ms is no yield");
        for bad in ["-1", "1e20", "\"5\"", "null", "[1]", "{}", "true"] {
            let e = parse::<YieldMs>(bad).unwrap_err();
            assert!(e.contains("yield_ms: "), "{bad}: {e}");
        }
        let e = parse::<MaxActiveAgeS>("1e20").unwrap_err();
        assert!(
            e.starts_with("max_active_age_s: must be a number of seconds"),
            "{e}"
        );
        assert!(parse::<GraceS>("1000000000").is_ok());
        assert_eq!(parse::<GraceS>("-5").unwrap().duration(), Duration::ZERO);
        assert!(parse::<GraceS>("-1e20").is_err());
        assert!(parse::<GraceS>("1000000001").is_err());
    }

    #[test]
    fn counts_are_whole_non_negative_and_at_most_2_pow_53() {
        assert_eq!(parse::<Cursor>("0").unwrap().get(), 0);
        assert_eq!(parse::<Cursor>("9007199254740992").unwrap().get(), 1 << 53);
        assert_eq!(parse::<Limit>("5.0").unwrap().get(), 5);
        for bad in ["-1", "9007199254740993", "1.5", "1e300", "\"3\"", "null"] {
            let e = parse::<Cursor>(bad).unwrap_err();
            assert!(e.contains("cursor: must be a whole number"), "{bad}: {e}");
        }
    }

    #[test]
    fn terminal_sizes_are_1_to_4096() {
        assert_eq!(parse::<Rows>("30").unwrap().get(), 30);
        for bad in ["0", "4097", "-3", "70000", "2.5"] {
            let e = parse::<Cols>(bad).unwrap_err();
            assert!(
                e.starts_with("cols: must be a whole number from 1 to 4096"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn limits_refuse_what_cannot_hold() {
        assert_eq!(parse::<MemoryBytes>("67108864").unwrap().get(), 64 << 20);
        assert_eq!(parse::<CpuCores>("1.5").unwrap().get(), 1.5);
        assert_eq!(parse::<Pids>("64").unwrap().get(), 64);
        for bad in ["0", "1000", "-1", "1.5", "\"64M\""] {
            let e = parse::<MemoryBytes>(bad).unwrap_err();
            assert!(e.contains("memory_bytes: must be"), "{bad}: {e}");
        }
        for bad in ["0", "0.001", "2000", "-1", "\"1\""] {
            let e = parse::<CpuCores>(bad).unwrap_err();
            assert!(e.contains("cpu_cores: must be"), "{bad}: {e}");
        }
        assert!(parse::<Pids>("0").unwrap_err().starts_with("pids: must be"));
    }

    #[test]
    fn clients_serialize_plain_numbers() {
        assert_eq!(
            serde_json::to_string(&YieldMs::new(250.0)).unwrap(),
            "250.0"
        );
        assert_eq!(serde_json::to_string(&Cursor::new(7)).unwrap(), "7");
        assert_eq!(serde_json::to_string(&Rows::new(24)).unwrap(), "24");
    }
}
