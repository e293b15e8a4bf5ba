"""Where procd's socket is, and whether it may be trusted: the rules the
`procd` CLI follows (docs/SECURITY.md), so a Python agent talks to the
same daemon and refuses the same planted sockets."""

import os
import shutil
import socket
import stat
import struct
import subprocess
from typing import Optional

from .errors import NotTrusted, ProcdError


def socket_path(home: Optional[str] = None) -> str:
    """`home` (or `PROCD_HOME`)/run/procd.sock, else
    `$XDG_RUNTIME_DIR/procd/procd.sock`, else `/tmp/procd-UID/procd.sock`."""
    home = home or os.environ.get("PROCD_HOME") or None
    if home:
        return os.path.join(os.path.abspath(home), "run", "procd.sock")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "procd", "procd.sock")
    return os.path.join(f"/tmp/procd-{os.getuid()}", "procd.sock")


def check_trusted_dir(path: str) -> None:
    """Refuses a socket directory that is a link, not ours, or writable by
    others (anyone who can write it could plant a socket there)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise NotTrusted(f"refusing to use {path}: it is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise NotTrusted(f"refusing to use {path}: it is not a directory")
    me = os.getuid()
    if st.st_uid != me:
        raise NotTrusted(f"refusing to use {path}: it is owned by uid {st.st_uid}, not by you (uid {me})")
    if st.st_mode & 0o022:
        raise NotTrusted(
            f"refusing to use {path}: it is writable by group or others "
            f"(mode {st.st_mode & 0o7777:o}; chmod 700 it)"
        )


def connect(path: str) -> socket.socket:
    """The daemon's socket, opened after the directory check and, before a
    byte is sent, the listener's uid check (this user or root)."""
    parent = os.path.dirname(path)
    if os.path.exists(parent):
        check_trusted_dir(parent)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        me = os.getuid()
        if uid not in (me, 0):
            raise NotTrusted(
                f"refusing to talk to {path}: the process listening there runs as uid {uid}, not as you (uid {me})"
            )
    except BaseException:
        sock.close()
        raise
    return sock


def procd_binary(explicit: Optional[str] = None) -> str:
    """The `procd` program: `explicit`, `PROCD_BIN`, else `procd` on PATH."""
    found = explicit or os.environ.get("PROCD_BIN") or shutil.which("procd")
    if not found:
        raise ProcdError("procd is not running and no procd program was found to start it (set PROCD_BIN)")
    return found


def start_on_demand(home: Optional[str], program: Optional[str] = None) -> None:
    """Starts an on-demand daemon the way the CLI does (its locks, its
    wait for a stopping daemon), by asking the CLI for `status` through
    `procd rpc`, which starts one when none runs."""
    args = [procd_binary(program)]
    if home:
        args += ["--home", home]
    done = subprocess.run(
        args + ["rpc", "status"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise ProcdError(f"cannot start procd: {done.stderr.strip()}")
