//! Sealed memfds: bytes kept in memory only (never on a disk), handed to
//! another process as a descriptor, and unchangeable once made.

use rustix::fs::{MemfdFlags, SealFlags};
use std::io::{Read, Seek, Write};
use std::os::fd::{AsFd, OwnedFd};

/// Every seal: no write, no resize, no new seals.
fn all_seals() -> SealFlags {
    SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL
}

/// A memfd named `name` holding `bytes`, sealed against every change.
pub fn sealed(name: &str, bytes: &[u8]) -> std::io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    std::fs::File::from(fd.try_clone()?).write_all(bytes)?;
    rustix::fs::fcntl_add_seals(&fd, all_seals())?;
    Ok(fd)
}

/// What a memfd `sealed` made holds, if it is one (fully sealed) and holds
/// at most `max` bytes.
pub fn read_sealed(fd: impl AsFd, max: u64) -> std::io::Result<Vec<u8>> {
    let seals = rustix::fs::fcntl_get_seals(&fd)?;
    if !seals.contains(all_seals()) {
        return Err(std::io::Error::other("not a sealed memfd"));
    }
    let mut file = std::fs::File::from(fd.as_fd().try_clone_to_owned()?);
    let len = file.metadata()?.len();
    if len > max {
        return Err(std::io::Error::other(format!(
            "a sealed memfd of {len} bytes (at most {max} expected)"
        )));
    }
    file.rewind()?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_sealed_reads_back_and_cannot_change() {
        let fd = sealed("procd-test", b"hello").unwrap();
        assert_eq!(read_sealed(&fd, 5).unwrap(), b"hello");
        assert!(read_sealed(&fd, 4).is_err(), "over the bound");
        let mut file = std::fs::File::from(fd.try_clone().unwrap());
        assert!(file.write_all(b"x").is_err(), "sealed against writes");
        let open = rustix::fs::memfd_create("procd-test", MemfdFlags::ALLOW_SEALING).unwrap();
        assert!(
            read_sealed(&open, 10).is_err(),
            "an unsealed memfd is refused"
        );
    }
}
