//! Unpredictable names from the OS's CSPRNG (getrandom(2)): session ids,
//! lease tokens and temp file names must not be guessable by another
//! process (docs/SECURITY.md).

/// `bytes` random bytes as lowercase hex (2 × `bytes` characters). Fails
/// only if the OS generator does (then no guessable name is made instead).
pub fn hex(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| {
        std::io::Error::other(format!("the OS random number generator failed: {e}"))
    })?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_has_the_asked_length_and_differs() {
        let a = super::hex(6).unwrap();
        assert_eq!(a.len(), 12);
        assert!(a
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, super::hex(6).unwrap());
    }
}
