"""What a test's daemon could not remove: its instance's cgroups.

The Rust harness does the same (tests/common: `remove_instance_cgroups`).
A daemon that stops removes its own tree; one a test SIGKILLed, or one
whose killed session had not left its cgroup yet, leaves it. Only the
directories of this home's instance are touched: procd names them
`procd-<tag>`, the tag an FNV-1a hash of the state dir
(crates/procd-sys/src/cgroup.rs, `instance_tag`)."""

import os
import time

V1_CONTROLLERS = ("memory", "cpu", "pids")


def instance_tag(state_dir: str) -> str:
    h = 0xCBF29CE484222325
    for byte in os.fsencode(state_dir):
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def _bases(home: str) -> list:
    """The instance's base directories: the v2 one, then any v1 ones."""
    name = "procd-" + instance_tag(os.path.join(os.path.abspath(home), "state"))
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                own[c] = path.lstrip("/")
    bases = []
    for mount in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        if "" in own and os.path.exists(os.path.join(mount, "cgroup.controllers")):
            bases.append(os.path.join(mount, own[""], name))
            break
    for c in V1_CONTROLLERS:
        if c in own and os.path.isdir(os.path.join("/sys/fs/cgroup", c)):
            bases.append(os.path.join("/sys/fs/cgroup", c, own[c], name))
    return bases


def _populated(cgroup: str) -> bool:
    try:
        with open(os.path.join(cgroup, "cgroup.events")) as f:
            return "populated 1" in f.read()
    except OSError:
        return False


def remove_instance_cgroups(home: str, patience: float = 30.0) -> None:
    for base in _bases(home):
        try:
            sessions = [e.path for e in os.scandir(base) if e.is_dir()]
        except OSError:
            continue
        for cgroup in sessions:
            try:
                with open(os.path.join(cgroup, "cgroup.kill"), "w") as f:
                    f.write("1")
            except OSError:
                pass
            deadline = time.monotonic() + patience
            while _populated(cgroup) and time.monotonic() < deadline:
                time.sleep(0.01)
            try:
                os.rmdir(cgroup)
            except OSError:
                pass
        try:
            os.rmdir(base)
        except OSError:
            pass
