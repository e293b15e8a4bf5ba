//! Loading `config.toml` into `procd_proto::config::Config`: every key optional,
//! unknown keys and bad values are errors that name the key.

use procd_proto::config::Config;
use std::path::{Path, PathBuf};

/// Why a configuration cannot be used; every message names the file or
/// the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {}: {message}", path.display())]
    InFile { path: PathBuf, message: String },
    /// Not valid TOML, an unknown key or a bad value (named).
    #[error("{0}")]
    Invalid(String),
    #[error("--set takes KEY=VALUE, got {0:?}")]
    Override(String),
}

impl ConfigError {
    fn in_file(self, path: &Path) -> ConfigError {
        match self {
            ConfigError::Invalid(message) => ConfigError::InFile {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        }
    }
}

/// The most of a config file that is read: a config is a few hundred
/// bytes, and `--config /dev/zero` must not fill memory.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The text of the config at `path`; a missing file that was not asked
/// for by name is empty. A pipe is read too (`--config <(…)`), up to
/// `MAX_CONFIG_BYTES`.
fn read(path: &Path, explicit: bool) -> Result<String, ConfigError> {
    use std::io::Read;
    let failed = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => return Ok(String::new()),
        Err(e) => return Err(failed(e)),
    };
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(failed)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(failed(std::io::Error::other(format!(
            "larger than {MAX_CONFIG_BYTES} bytes"
        ))));
    }
    Ok(text)
}

/// The config at `path`; a missing file gives the defaults.
pub fn load(path: &Path, explicit: bool) -> Result<Config, ConfigError> {
    load_with(path, explicit, &[])
}

/// `load`, then `KEY=VALUE` overrides (values in TOML syntax; a bare word
/// is taken as a string).
pub fn load_with(path: &Path, explicit: bool, overrides: &[String]) -> Result<Config, ConfigError> {
    let text = read(path, explicit)?;
    let mut table: toml::Table = toml::from_str(&text)
        .map_err(|e| ConfigError::Invalid(e.message().to_string()).in_file(path))?;
    for kv in overrides {
        let (key, raw) = kv
            .split_once('=')
            .ok_or_else(|| ConfigError::Override(kv.clone()))?;
        let key = key.trim();
        let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.to_string()));
        table.insert(key.to_string(), value);
    }
    // A bad key or value given by --set is not the file's fault.
    let located = |e: ConfigError| match overrides.is_empty() {
        true => e.in_file(path),
        false => e,
    };
    let config = to_config(table).map_err(located)?;
    config
        .validate()
        .map_err(|e| located(ConfigError::Invalid(e)))?;
    Ok(config)
}

pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let table: toml::Table =
        toml::from_str(text).map_err(|e| ConfigError::Invalid(e.message().to_string()))?;
    let config = to_config(table)?;
    config.validate().map_err(ConfigError::Invalid)?;
    Ok(config)
}

/// The table as a `Config`. serde's message for a bad value does not say
/// which key it was ("invalid type: string, expected usize"): on failure
/// each key is tried alone, and the first that fails is named.
fn to_config(table: toml::Table) -> Result<Config, ConfigError> {
    match table.clone().try_into::<Config>() {
        Ok(config) => Ok(config),
        Err(whole) => {
            for (key, value) in table {
                let single: toml::Table = [(key.clone(), value)].into_iter().collect();
                if let Err(e) = single.try_into::<Config>() {
                    return Err(ConfigError::Invalid(format!("{key}: {}", e.message())));
                }
            }
            Err(ConfigError::Invalid(whole.message().to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_default_file_is_the_default() {
        let text = include_str!("../../../config/procd.toml");
        assert_eq!(parse(text).unwrap(), Config::default());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let err = parse("max_sesions = 3").unwrap_err().to_string();
        assert!(err.contains("max_sesions"), "{err}");
        let err = parse("kill_grace_s = \"two\"").unwrap_err().to_string();
        assert!(
            err.contains("kill_grace_s") || err.contains("invalid type"),
            "{err}"
        );
        let err = parse("kill_grace_s = -1").unwrap_err().to_string();
        assert!(err.contains("kill_grace_s"), "{err}");
        assert_eq!(parse("max_sessions = 3").unwrap().max_sessions, 3);
    }

    #[test]
    fn queues_are_checked_by_name() {
        let c = parse("[queue.build]\nslots = 2\nmax_memory_pressure = 20\n").unwrap();
        assert_eq!(c.queue["build"].slots, 2);
        assert_eq!(c.queue["build"].max_memory_pressure, Some(20.0));
        for (text, named) in [
            ("[queue.build]\nslots = 0\n", "slots must be at least 1"),
            ("[queue.build]\nslots = 2\nslot = 3\n", "slot"),
            ("[queue.build]\n", "slots"),
            ("[queue.Build]\nslots = 1\n", "[queue.Build]"),
            (
                "[queue.build]\nslots = 1\nmax_memory_pressure = 120\n",
                "max_memory_pressure",
            ),
            ("queue_slots = 0\n", "queue_slots"),
            ("[queue.build]\nslots = 1\ncpu_weight = 0\n", "cpu_weight"),
            (
                "[queue.build]\nslots = 1\ncpu_weight = 10001\n",
                "cpu_weight",
            ),
            ("[queue.build]\nslots = 1\nio_weight = 0\n", "io_weight"),
            (
                "[queue.build]\nslots = 1\nio_weight = 10001\n",
                "io_weight must be from 1 to 10000",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(named), "{text:?}: {err}");
        }
    }

    #[test]
    fn an_endless_file_is_refused_and_a_pipe_is_read() {
        let err = load(Path::new("/dev/zero"), true).unwrap_err().to_string();
        assert!(err.contains("larger than 1048576 bytes"), "{err}");
        let (reader, mut writer) = std::io::pipe().unwrap();
        std::io::Write::write_all(&mut writer, b"max_sessions = 7\n").unwrap();
        drop(writer);
        use std::os::fd::AsRawFd;
        let path = format!("/proc/self/fd/{}", reader.as_raw_fd());
        assert_eq!(load(Path::new(&path), true).unwrap().max_sessions, 7);
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "kill_grace_s = 1.0\nmax_sessions = 5\n").unwrap();
        let c = load_with(
            &path,
            true,
            &["kill_grace_s=4".into(), "redact=false".into()],
        )
        .unwrap();
        assert_eq!(c.kill_grace_s, 4.0);
        assert!(!c.redact);
        assert_eq!(c.max_sessions, 5);
        let err = load_with(&path, true, &["nope=1".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("nope"), "{err}");
    }
}
