//! The TCP sockets in LISTEN state of the daemon's network namespace, by
//! inode, from the kernel's sock_diag netlink interface (what `ss -lt`
//! uses). /proc/net/tcp would do, but reading it walks the whole
//! established-connection hash table — sized by memory, ~10 ms on a 24 GiB
//! machine even when idle — while a LISTEN-only dump walks the listeners.

use nix::sys::socket::{
    recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};
use std::collections::HashMap;
use std::io;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const TCP_LISTEN: u32 = 10;
const HEADER: usize = 16;
/// inet_diag_msg: family, state, timer, retrans, then the 48-byte socket
/// id (source port first, big-endian), expires, rqueue, wqueue, uid, inode.
const SPORT_AT: usize = 4;
const UID_AT: usize = 4 + 48 + 12;
const INODE_AT: usize = 4 + 48 + 16;
/// The attributes (netlink rtattrs) follow the 72-byte message.
const ATTRS_AT: usize = INODE_AT + 4;
/// INET_DIAG_CGROUP_ID: the id of the cgroup2 the socket was made in
/// (a u64; sent with every socket since Linux 5.7).
const INET_DIAG_CGROUP_ID: u16 = 21;

/// A listening TCP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listening {
    pub port: u16,
    /// The uid the socket belongs to (its maker's, in the daemon's user
    /// namespace).
    pub uid: u32,
    /// The cgroup2 id (its directory's inode) of the process that made
    /// it, when the kernel says.
    pub cgroup: Option<u64>,
}

/// Inode → every listening TCP socket (IPv4 and IPv6), with its cgroup.
pub fn listening_tcp() -> io::Result<HashMap<u64, Listening>> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )?;
    let kernel = NetlinkAddr::new(0, 0);
    let mut out = HashMap::new();
    for (seq, family) in [(1u32, libc::AF_INET), (2, libc::AF_INET6)] {
        sendto(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &request(seq, family as u8),
            &kernel,
            MsgFlags::empty(),
        )?;
        let mut buf = vec![0u8; 32 * 1024];
        'dump: loop {
            let n = recv(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                &mut buf,
                MsgFlags::empty(),
            )?;
            if n == 0 {
                return Err(io::Error::other("sock_diag: the kernel closed the dump"));
            }
            let mut at = 0;
            while at + HEADER <= n {
                let len = u32_at(&buf, at) as usize;
                let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
                if len < HEADER || at + len > n {
                    return Err(io::Error::other("sock_diag: a truncated message"));
                }
                match kind {
                    NLMSG_DONE => break 'dump,
                    NLMSG_ERROR => return Err(io::Error::other("sock_diag: the kernel refused")),
                    SOCK_DIAG_BY_FAMILY => {
                        let msg = &buf[at + HEADER..at + len];
                        if msg.len() >= ATTRS_AT {
                            let port = u16::from_be_bytes([msg[SPORT_AT], msg[SPORT_AT + 1]]);
                            let cgroup = cgroup_attr(&msg[ATTRS_AT..]);
                            let uid = u32_at(msg, UID_AT);
                            out.insert(
                                u64::from(u32_at(msg, INODE_AT)),
                                Listening { port, uid, cgroup },
                            );
                        }
                    }
                    _ => {}
                }
                at += (len + 3) & !3;
            }
        }
    }
    Ok(out)
}

/// A dump request for TCP sockets of `family` in LISTEN state.
fn request(seq: u32, family: u8) -> [u8; HEADER + 56] {
    let mut r = [0u8; HEADER + 56];
    r[0..4].copy_from_slice(&((HEADER + 56) as u32).to_ne_bytes());
    r[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    r[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    r[8..12].copy_from_slice(&seq.to_ne_bytes());
    // inet_diag_req_v2: family, protocol, extensions, pad, states, id.
    r[HEADER] = family;
    r[HEADER + 1] = libc::IPPROTO_TCP as u8;
    r[HEADER + 4..HEADER + 8].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    r
}

/// The INET_DIAG_CGROUP_ID attribute among `attrs` (rtattrs: u16 length
/// including the 4-byte header, u16 type, the value, padded to 4).
fn cgroup_attr(attrs: &[u8]) -> Option<u64> {
    let mut at = 0;
    while at + 4 <= attrs.len() {
        let len = usize::from(u16::from_ne_bytes([attrs[at], attrs[at + 1]]));
        let kind = u16::from_ne_bytes([attrs[at + 2], attrs[at + 3]]);
        if len < 4 || at + len > attrs.len() {
            return None;
        }
        if kind == INET_DIAG_CGROUP_ID && len >= 12 {
            let v: [u8; 8] = attrs[at + 4..at + 12].try_into().ok()?;
            return Some(u64::from_ne_bytes(v));
        }
        at += (len + 3) & !3;
    }
    None
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_listening_socket_is_found_with_its_port_and_inode() {
        use std::os::unix::fs::MetadataExt;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
        let inode = std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .ino();
        let table = super::listening_tcp().unwrap();
        assert_eq!(table.get(&inode).map(|l| l.port), Some(port), "{table:?}");
        let uid = nix::unistd::getuid().as_raw();
        assert_eq!(table.get(&inode).map(|l| l.uid), Some(uid), "{table:?}");
        // Made in this process's cgroup2: its directory's inode.
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let path = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
        let mount = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .find(|m| std::path::Path::new(m).join("cgroup.procs").exists());
        match mount {
            Some(mount) => {
                let dir = std::fs::metadata(format!("{mount}{path}")).unwrap().ino();
                let socket = super::listening_tcp().unwrap()[&inode];
                assert_eq!(socket.cgroup, Some(dir), "{socket:?}");
            }
            None => assert!(
                std::env::var_os("PROCD_TEST_NO_CGROUP").is_some(),
                "no cgroup2 mount here (set PROCD_TEST_NO_CGROUP=1 where there is none)"
            ),
        }
        let v6 = std::net::TcpListener::bind("[::1]:0");
        if let Ok(v6) = v6 {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&v6);
            let inode = std::fs::metadata(format!("/proc/self/fd/{fd}"))
                .unwrap()
                .ino();
            let table = super::listening_tcp().unwrap();
            assert_eq!(
                table.get(&inode).map(|l| l.port),
                Some(v6.local_addr().unwrap().port())
            );
        }
    }
}
