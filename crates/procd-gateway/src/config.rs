//! Loading `config.toml` into `procd_core::Config`: every key optional,
//! unknown keys and bad values are errors that name the key.

use procd_core::Config;
use std::path::Path;

/// The config at `path`; a missing file gives the defaults.
pub fn load(path: &Path, explicit: bool) -> Result<Config, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
            return Ok(Config::default())
        }
        Err(e) => return Err(format!("cannot read config {}: {e}", path.display())),
    };
    parse(&text).map_err(|e| format!("config {}: {e}", path.display()))
}

pub fn parse(text: &str) -> Result<Config, String> {
    let config: Config = toml::from_str(text).map_err(|e| e.message().to_string())?;
    config.validate()?;
    Ok(config)
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
        let err = parse("max_sesions = 3").unwrap_err();
        assert!(err.contains("max_sesions"), "{err}");
        let err = parse("kill_grace_s = \"two\"").unwrap_err();
        assert!(
            err.contains("kill_grace_s") || err.contains("invalid type"),
            "{err}"
        );
        let err = parse("kill_grace_s = -1").unwrap_err();
        assert!(err.contains("kill_grace_s"), "{err}");
        assert_eq!(parse("max_sessions = 3").unwrap().max_sessions, 3);
    }
}
