"""procd beside its peers, measured in one run (procd-bench --only peers).

Desktop Commander is driven by the official Python MCP SDK, and so is
`procd mcp`: the same client, the same calls an agent makes. pueue, pm2
and supervisor are driven by their own CLIs, beside procd's CLI. Each figure alternates
procd and the peer over the rounds. Prints a JSON list of figures; the
bench turns them into rows (a row is met when procd is at least as good).

usage: peers.py PROCD PEERS_DIR ROUNDS
"""

import asyncio
import json
import os
import random
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

PROCD, PEERS, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3])
DC_JS = os.path.join(PEERS, "npm/node_modules/@wonderwhy-er/desktop-commander/dist/index.js")
PM2 = os.path.join(PEERS, "npm/node_modules/.bin/pm2")
PUEUE = os.path.join(PEERS, "pueue/bin/pueue")
PUEUED = os.path.join(PEERS, "pueue/bin/pueued")
SUPERVISOR_PY = os.path.join(PEERS, "venv/bin/python")
# tests/codex-cli.sh installs it here (peer_rows runs it).
CODEX = os.path.join(PEERS, "codex/node_modules/.bin/codex")
# process/start of `true` to its process/exited, per exec-server (cheap:
# four times the other figures' rounds).
CODEX_ROUNDS = 4 * ROUNDS
FIGURES = []
# Kills of a 20-process tree per manager (each up to 3 s when it fails),
# and lines read from the log per manager: figures a few milliseconds
# apart, which three rounds let flip from run to run (three in the
# quick mode's run, which asserts none of them).
KILL_ROUNDS = 7 if ROUNDS >= 15 else 3
LOG_ROUNDS = max(3, ROUNDS // 2)
# Every home made here, removed at the end.
HOMES = []


def figure(metric, unit, procd, peer, name, better, detail):
    FIGURES.append({"metric": metric, "unit": unit, "procd": procd, "peer": peer,
                    "peer_name": name, "better": better, "detail": detail})


def home(prefix):
    h = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    HOMES.append(h)
    return h


def env_for(h):
    # Nothing of the user's: a fresh HOME, and the runtime dir inside it.
    rt = os.path.join(h, "rt")
    os.makedirs(rt, mode=0o700, exist_ok=True)
    return {"HOME": h, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "XDG_RUNTIME_DIR": rt,
            "XDG_CONFIG_HOME": os.path.join(h, ".config"), "XDG_DATA_HOME": os.path.join(h, ".local/share"),
            "PM2_HOME": os.path.join(h, ".pm2"), "PROCD_HOME": os.path.join(h, "procd")}


# ----- processes by marker -------------------------------------------------------

def marked(marker):
    """Live pids whose command line contains `marker` (a unique sleep length)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            found.append(int(pid))
    return found


def end(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def homed(homes):
    """Live pids whose HOME is one of `homes`: what this run started,
    through a peer too (supervisord restarts a program the kill test
    SIGKILLed, and a stopped one's children outlive it: both are left
    when supervisord goes)."""
    wanted = {f"HOME={h}".encode() for h in homes}
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if wanted.intersection(env):
            found.append(int(pid))
    return found


def new_marker():
    return f"{3000 + random.randrange(1000)}.{random.randrange(10**6):06d}"


def tree_command(marker):
    # 20 processes: the shell and 19 sleeps, each marked.
    return f"for i in $(seq 19); do sleep {marker} & done; exec sleep {marker}"


def hold_tree(marker):
    """Pidfds of the marked processes, taken before a kill: each turns
    readable the moment its process is dead, and a pid the kernel hands
    to another process meanwhile is never mistaken for one of them."""
    fds = []
    for pid in marked(marker):
        try:
            fds.append(os.pidfd_open(pid))
        except ProcessLookupError:
            pass
    return fds


def wait_gone(marker, held, t0, limit=3.0):
    """(seconds from `t0`, taken before the kill was asked, until no
    marked process is left, survivors at `limit`). The held processes'
    ends are woken for, not looked for every 10 ms; then anything forked
    after they were held is looked for."""
    deadline = t0 + limit
    poller = select.poll()
    for fd in held:
        poller.register(fd, select.POLLIN)
    pending = set(held)
    while pending and time.monotonic() < deadline:
        for fd, _ in poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            pending.discard(fd)
            poller.unregister(fd)
    took = time.monotonic() - t0
    for fd in held:
        os.close(fd)
    # What was forked after the tree was held, or outlived the limit.
    while marked(marker):
        if time.monotonic() >= deadline:
            left = marked(marker)
            end(left)
            return limit, len(left)
        time.sleep(0.01)
        took = time.monotonic() - t0
    return took, 0


def wait_for(cond, limit=20.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        v = cond()
        if v:
            return v
        time.sleep(0.01)
    raise RuntimeError("timed out waiting")


def kib_summed(pids, path, field):
    """`field` (in kB) of /proc/PID/`path`, summed over `pids`."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/{path}") as f:
                for line in f:
                    if line.startswith(field):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def rss_kib(pids):
    return kib_summed(pids, "status", "VmRSS:")


def pss_kib(pids):
    """The proportional set size: each shared page counted once in all,
    split among the processes that map it. procd's daemon and keeper run
    one binary, whose pages RSS counts twice; PSS once."""
    return kib_summed(pids, "smaps_rollup", "Pss:")


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except OSError:
                pass
    return out


def median_ms(samples):
    return round(statistics.median(samples) * 1000, 2)


# ----- the MCP clients: procd mcp and Desktop Commander ---------------------------

class Agent:
    """One MCP client session with a server; the calls an agent makes."""

    def __init__(self, kind, h):
        self.kind, self.h = kind, h
        if kind == "procd":
            self.params = StdioServerParameters(command=PROCD, args=["mcp"], env=env_for(h), cwd=h)
        else:
            self.params = StdioServerParameters(command="node", args=[DC_JS], env=env_for(h), cwd=h)

    async def __aenter__(self):
        self._stdio = stdio_client(self.params)
        read, write = await self._stdio.__aenter__()
        self._session = ClientSession(read, write)
        self.s = await self._session.__aenter__()
        await self.s.initialize()
        return self

    async def __aexit__(self, *exc):
        await self._session.__aexit__(*exc)
        await self._stdio.__aexit__(*exc)

    async def call(self, tool, args):
        r = await self.s.call_tool(tool, args)
        text = "".join(getattr(c, "text", "") for c in r.content)
        return text, r.structured_content or {}

    async def start(self, command, wait_ms):
        """(handle, text, structured) of starting `command`, waiting up to wait_ms."""
        if self.kind == "procd":
            text, res = await self.call("start", {"command": command, "yield_ms": wait_ms})
            return res.get("session_id"), text, res
        text, res = await self.call("start_process", {"command": command, "timeout_ms": wait_ms})
        m = re.search(r"PID (\d+)", text)
        return (int(m.group(1)) if m else None), text, res

    async def read(self, handle, wait_ms):
        if self.kind == "procd":
            text, res = await self.call("read", {"session_id": handle, "cursor": 0, "wait_ms": wait_ms})
            return res.get("output", text)
        text, _ = await self.call("read_process_output", {"pid": handle, "timeout_ms": wait_ms})
        return text

    async def kill(self, handle):
        if self.kind == "procd":
            return await self.call("kill", {"session_id": handle})
        return await self.call("force_terminate", {"pid": handle})

    async def list(self):
        if self.kind == "procd":
            return (await self.call("list", {}))[0]
        return (await self.call("list_sessions", {}))[0]

    def server_pids(self):
        """The MCP server's process, and for procd the daemon and keeper it uses."""
        mine = PROCD if self.kind == "procd" else DC_JS
        pids = [p for p in children(os.getpid()) if mine in cmdline(p)]
        if self.kind == "procd":
            st = subprocess.run([PROCD, "status", "--json"], env=env_for(self.h), capture_output=True, text=True)
            try:
                daemon = json.loads(st.stdout)["pid"]
                pids.append(daemon)
                with open(f"/proc/{daemon}/stat") as f:
                    keeper = int(f.read().rsplit(")", 1)[1].split()[1])
                if os.readlink(f"/proc/{keeper}/exe") == os.readlink(f"/proc/{daemon}/exe"):
                    pids.append(keeper)
            except (ValueError, KeyError, OSError):
                pass
        return pids


def procd_stop(h):
    subprocess.run([PROCD, "stop"], env=env_for(h), capture_output=True)


async def mcp_figures():
    hp, hd = home("pp"), home("pd")
    DC = "Desktop Commander"
    async with Agent("procd", hp) as procd, Agent("dc", hd) as dc:
        agents = [procd, dc]
        # Warm both (the first call starts procd's daemon; node compiles).
        for a in agents:
            await a.start("true", 5000)

        # Start `echo` and get its result.
        times = {"procd": [], "dc": []}
        for r in range(ROUNDS):
            for a in (agents if r % 2 == 0 else agents[::-1]):
                t0 = time.monotonic()
                _, text, res = await a.start("echo hi", 10000)
                times[a.kind].append(time.monotonic() - t0)
                if "hi" not in text and "hi" not in json.dumps(res):
                    raise RuntimeError(f"{a.kind}: echo's output missing: {text[:200]}")
        figure("run `echo` and get its output (MCP start, median)", "ms",
               median_ms(times["procd"]), median_ms(times["dc"]), DC, "lower",
               f"{ROUNDS} rounds, alternating; the same Python MCP SDK client; procd `start` with yield_ms, Desktop Commander `start_process` with timeout_ms")

        # list/status round trip.
        times = {"procd": [], "dc": []}
        for r in range(ROUNDS):
            for a in (agents if r % 2 == 0 else agents[::-1]):
                t0 = time.monotonic()
                await a.list()
                times[a.kind].append(time.monotonic() - t0)
        figure("list sessions round trip (MCP, median)", "ms", median_ms(times["procd"]),
               median_ms(times["dc"]), DC, "lower", f"{ROUNDS} rounds; procd `list`, Desktop Commander `list_sessions`")

        # Output to a reader: a line printed at a known time, read by a waiting reader.
        lat = {"procd": [], "dc": []}
        for r in range(max(3, ROUNDS // 4)):
            for a in (agents if r % 2 == 0 else agents[::-1]):
                handle, _, _ = await a.start("sleep 0.3; echo mark $(date +%s.%N); sleep 3", 0)
                seen = None
                t_end = time.monotonic() + 10
                while seen is None and time.monotonic() < t_end:
                    out = await a.read(handle, 2000)
                    m = re.search(r"mark (\d+\.\d+)", out)
                    if m:
                        seen = time.time() - float(m.group(1))
                if seen is None:
                    raise RuntimeError(f"{a.kind}: the marked line was never read")
                lat[a.kind].append(seen)
                await a.kill(handle)
        figure("output line to a waiting reader (MCP read, median)", "ms", median_ms(lat["procd"]),
               median_ms(lat["dc"]), DC, "lower",
               "the line carries the time it was printed; the reader calls read (procd wait_ms, Desktop Commander timeout_ms) until it sees it")

        # Kill of a 20-process tree.
        gone, left = {"procd": [], "dc": []}, {"procd": 0, "dc": 0}
        for r in range(KILL_ROUNDS):
            for a in (agents if r % 2 == 0 else agents[::-1]):
                marker = new_marker()
                handle, _, _ = await a.start(tree_command(marker), 0)
                wait_for(lambda: len(marked(marker)) >= 20)
                held = hold_tree(marker)
                t0 = time.monotonic()
                await a.kill(handle)
                took, survivors = wait_gone(marker, held, t0)
                gone[a.kind].append(took)
                left[a.kind] = max(left[a.kind], survivors)
        figure(f"survivors of a 20-process tree 3 s after kill (MCP, most of {KILL_ROUNDS})", "processes", left["procd"],
               left["dc"], DC, "lower", "procd `kill`; Desktop Commander `force_terminate`; survivors counted by a unique marker, then ended")
        figure(f"kill of a 20-process tree until none is left (MCP, median of {KILL_ROUNDS})", "ms", median_ms(gone["procd"]),
               median_ms(gone["dc"]), DC, "lower", "from the kill call until every process of the tree is dead (told by pidfds taken before it); 3000 = not all gone in 3 s")

        # Prompt detection, and no false alarm on `...` progress output.
        detected, false_alarm = {}, {}
        for a in agents:
            _, text, res = await a.start("read -p 'Continue? [y/N] ' answer; echo got $answer", 3000)
            detected[a.kind] = int(bool(res.get("waiting_for_input")) if a.kind == "procd"
                                   else bool(re.search(r"waiting for input|prompt", text, re.I)))
            _, text, res = await a.start("for i in 1 2 3 4; do echo 'Loading...'; sleep 0.4; done; sleep 2", 1200)
            false_alarm[a.kind] = int(bool(res.get("waiting_for_input")) if a.kind == "procd"
                                      else bool(re.search(r"waiting for input|prompt", text, re.I)))
        figure("a `read -p` prompt detected", "yes=1", detected["procd"], detected["dc"], DC, "higher",
               "procd: waiting_for_input in start's answer; Desktop Commander: its answer says waiting for input / prompt")
        figure("false prompt alarms on `Loading...` progress output", "alarms", false_alarm["procd"],
               false_alarm["dc"], DC, "lower", "the same test on output that ends in `...` and pauses")

        # The idle manager's memory.
        await asyncio.sleep(1)
        figure("idle manager RSS (MCP server, + procd's daemon and keeper)", "MiB",
               round(rss_kib(procd.server_pids()) / 1024, 1), round(rss_kib(dc.server_pids()) / 1024, 1), DC,
               "lower", "procd counts its MCP adapter, daemon and keeper; Desktop Commander its node process")
    procd_stop(hp)

    # SIGKILL of the manager: a session printing 60 numbered lines over 3 s.
    lost_sessions, lost_lines = {}, {}
    for kind, h in (("procd", home("pp")), ("dc", home("pd"))):
        marker = new_marker()
        command = f"for i in $(seq 60); do echo line $i; sleep 0.05; done; sleep {marker}"
        a = await Agent(kind, h).__aenter__()
        handle, _, _ = await a.start(command, 0)
        await asyncio.sleep(1)
        # procd: its daemon (the adapter is only a client); Desktop
        # Commander: its one process.
        end(a.server_pids()[1:2] if kind == "procd" else a.server_pids())
        await asyncio.sleep(3)
        try:
            await a.__aexit__(None, None, None)
        except Exception:  # a client whose server died may not close cleanly
            pass
        async with Agent(kind, h) as a:
            listing = await a.list()
            known = str(handle) in listing
            lost_sessions[kind] = 0 if known else 1
            out = ""
            if known:
                out = await a.read(handle, 0)
            seen = set(re.findall(r"line (\d+)", out))
            lost_lines[kind] = 60 - len(seen & {str(i) for i in range(1, 61)})
            if known:
                await a.kill(handle)
        end(marked(marker))
        if kind == "procd":
            procd_stop(h)
    figure("sessions lost when the manager is SIGKILLed", "sessions", lost_sessions["procd"],
           lost_sessions["dc"], DC, "lower",
           "procd: its daemon killed (the keeper starts the next); Desktop Commander: its server process; a new client then lists sessions")
    figure("output lines lost when the manager is SIGKILLed", "of 60", lost_lines["procd"], lost_lines["dc"], DC,
           "lower", "60 numbered lines over 3 s, the kill 1 s in; read back through a new client")


# ----- the CLIs: procd beside pueue and pm2 ------------------------------------------

def run(argv, env, check=True):
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0 and not (argv[0] == PROCD and argv[1] == "wait"):
        raise RuntimeError(f"{argv}: exit {r.returncode}: {r.stderr[:300]}")
    return r


class ProcdCli:
    name = "procd"

    def __init__(self):
        self.h = home("pc")
        self.env = env_for(self.h)
        run([PROCD, "start"], self.env)

    def start(self, command):
        return json.loads(run([PROCD, "spawn", "--json", "--", command], self.env).stdout)["session_id"]

    def start_and_wait(self, command):
        sid = self.start(command)
        run([PROCD, "wait", sid], self.env, check=False)
        return sid

    def status(self):
        run([PROCD, "ps"], self.env)

    def kill(self, sid):
        run([PROCD, "kill", sid], self.env)

    def manager_pids(self):
        daemon = json.loads(run([PROCD, "status", "--json"], self.env).stdout)["pid"]
        with open(f"/proc/{daemon}/stat") as f:
            keeper = int(f.read().rsplit(")", 1)[1].split()[1])
        return [daemon, keeper]

    def kill_manager(self):
        end(self.manager_pids()[:1])

    def knows_exit(self, sid):
        r = json.loads(run([PROCD, "poll", "--json", sid], self.env).stdout)
        return r.get("status") == "exited" and r.get("exit_code") is not None

    def log(self, sid):
        return run([PROCD, "logs", sid], self.env).stdout

    def follow_argv(self, sid):
        return [PROCD, "logs", "-f", sid]

    def close(self):
        run([PROCD, "stop"], self.env, check=False)


class Pueue:
    name = "pueue"

    def __init__(self):
        self.h = home("pq")
        self.env = env_for(self.h)
        self.daemon = subprocess.Popen([PUEUED], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: run([PUEUE, "status"], self.env, check=False).returncode == 0)

    def start(self, command):
        return run([PUEUE, "add", "--print-task-id", "--", command], self.env).stdout.strip()

    def start_and_wait(self, command):
        tid = self.start(command)
        run([PUEUE, "wait", tid], self.env, check=False)
        return tid

    def status(self):
        run([PUEUE, "status"], self.env)

    def kill(self, tid):
        run([PUEUE, "kill", tid], self.env)

    def manager_pids(self):
        return [self.daemon.pid]

    def kill_manager(self):
        self.daemon.kill()
        self.daemon.wait()
        self.daemon = subprocess.Popen([PUEUED], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: run([PUEUE, "status"], self.env, check=False).returncode == 0)

    def knows_exit(self, tid):
        tasks = json.loads(run([PUEUE, "status", "--json"], self.env).stdout)["tasks"]
        status = tasks.get(tid, {}).get("status", {})
        done = status.get("Done") if isinstance(status, dict) else None
        result = done.get("result") if isinstance(done, dict) else done
        # A real exit: "Success" or {"Failed": code}; "Killed"/"Errored" are not.
        return result == "Success" or (isinstance(result, dict) and "Failed" in result)

    def log(self, tid):
        return run([PUEUE, "log", "--full", tid], self.env, check=False).stdout

    def follow_argv(self, tid):
        return [PUEUE, "follow", tid]

    def close(self):
        self.daemon.kill()
        self.daemon.wait()


class Pm2:
    name = "pm2"

    def __init__(self):
        self.h = home("pm")
        self.env = env_for(self.h)
        self.n = 0
        run([PM2, "ping"], self.env)

    def start(self, command):
        self.n += 1
        name = f"b{self.n}"
        run([PM2, "start", "--no-autorestart", "--name", name, "bash", "--", "-c", command], self.env)
        return name

    def entry(self, name):
        for p in json.loads(run([PM2, "jlist"], self.env).stdout or "[]"):
            if p.get("name") == name:
                return p
        return None

    def start_and_wait(self, command):
        # pm2 has no wait: poll its list until the process has stopped.
        name = self.start(command)
        wait_for(lambda: (self.entry(name) or {}).get("pm2_env", {}).get("status") in ("stopped", "errored"))
        return name

    def status(self):
        run([PM2, "jlist"], self.env)

    def kill(self, name):
        run([PM2, "delete", name], self.env)

    def manager_pids(self):
        with open(os.path.join(self.env["PM2_HOME"], "pm2.pid")) as f:
            return [int(f.read().strip())]

    def kill_manager(self):
        # Not our child: gone when /proc no longer has it (then `ping`
        # starts a new daemon rather than asking the dying one).
        pids = self.manager_pids()
        end(pids)
        wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids))
        run([PM2, "ping"], self.env)

    def knows_exit(self, name):
        e = self.entry(name)
        return bool(e) and e["pm2_env"].get("status") == "stopped" and e["pm2_env"].get("exit_code") is not None

    def log(self, name):
        return run([PM2, "logs", name, "--nostream", "--raw", "--lines", "1000"], self.env, check=False).stdout

    def follow_argv(self, name):
        return [PM2, "logs", name, "--raw", "--lines", "0"]

    def close(self):
        run([PM2, "kill"], self.env, check=False)


class Supervisor:
    """supervisord with its defaults; a program per command, in an include dir."""
    name = "supervisor"

    def __init__(self):
        self.h = home("ps")
        self.env = env_for(self.h)
        self.n = 0
        self.sock = os.path.join(self.h, "supervisor.sock")
        self.conf = os.path.join(self.h, "supervisord.conf")
        self.programs = os.path.join(self.h, "programs")
        os.makedirs(self.programs)
        with open(self.conf, "w") as f:
            f.write(f"""[unix_http_server]
file={self.sock}
[supervisord]
nodaemon=true
logfile={self.h}/supervisord.log
pidfile={self.h}/supervisord.pid
childlogdir={self.h}
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[supervisorctl]
serverurl=unix://{self.sock}
[include]
files={self.programs}/*.conf
""")
        # When each program's run began: a run supervisord starts again
        # after a restart is another run.
        self.started = {}
        self.up()

    def up(self):
        self.daemon = subprocess.Popen([SUPERVISOR_PY, "-m", "supervisor.supervisord", "-c", self.conf],
                                       env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self.ctl("pid").stdout.strip().isdigit())

    def ctl(self, *args):
        return run([SUPERVISOR_PY, "-m", "supervisor.supervisorctl", "-c", self.conf, *args], self.env, check=False)

    def info(self, name):
        """(state, exit status, start time) from supervisord's XML-RPC interface."""
        probe = ("import sys, xmlrpc.client as x; from supervisor.xmlrpc import SupervisorTransport as T; "
                 "s = x.ServerProxy('http://localhost', transport=T(None, None, 'unix://' + sys.argv[1])); "
                 "i = s.supervisor.getProcessInfo(sys.argv[2]); print(i['statename'], i['exitstatus'], i['start'])")
        out = run([SUPERVISOR_PY, "-c", probe, self.sock, name], self.env, check=False).stdout.split()
        return (out[0], int(out[1]), int(out[2])) if len(out) == 3 else ("", None, 0)

    def start(self, command):
        self.n += 1
        name = f"b{self.n}"
        script = os.path.join(self.programs, f"{name}.sh")
        with open(script, "w") as f:
            f.write(command + "\n")
        with open(os.path.join(self.programs, f"{name}.conf"), "w") as f:
            f.write(f"[program:{name}]\ncommand=/bin/bash {script}\nautorestart=false\nstartsecs=0\nstartretries=0\n")
        self.ctl("update")
        self.started[name] = wait_for(lambda: self.info(name)[2])
        return name

    def start_and_wait(self, command):
        # supervisorctl has no wait: poll the program's state.
        name = self.start(command)
        wait_for(lambda: self.info(name)[0] in ("EXITED", "FATAL", "STOPPED"))
        return name

    def status(self):
        self.ctl("status")

    def kill(self, name):
        self.ctl("stop", name)

    def manager_pids(self):
        return [self.daemon.pid]

    def kill_manager(self):
        self.daemon.kill()
        self.daemon.wait()
        self.up()

    def knows_exit(self, name):
        # The run that was started, not one supervisord starts again.
        state, code, started = self.info(name)
        return state == "EXITED" and code == 3 and started == self.started.get(name)

    def log(self, name):
        return self.ctl("tail", "-100000", name).stdout

    def follow_argv(self, name):
        return [SUPERVISOR_PY, "-m", "supervisor.supervisorctl", "-c", self.conf, "tail", "-f", name]

    def close(self):
        self.daemon.kill()
        self.daemon.wait()


def followed_mark(argv, env, who):
    """Seconds from a "mark T" line's T to its arrival on the stdout of the
    follower `argv`, which is ended (by pid) before returning."""
    follower = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL)
    try:
        seen, text = None, b""
        t_end = time.monotonic() + 10
        while seen is None and time.monotonic() < t_end:
            ready, _, _ = select.select([follower.stdout], [], [], max(0.0, t_end - time.monotonic()))
            if not ready:
                break
            chunk = os.read(follower.stdout.fileno(), 65536)
            if not chunk:
                break
            text += chunk
            found = re.search(rb"mark (\d+\.\d+)\r?\n", text)  # whole: a read may end mid-number
            if found:
                seen = time.time() - float(found.group(1))
        if seen is None:
            raise RuntimeError(f"{who}: the marked line never reached the follower")
        return seen
    finally:
        follower.kill()
        follower.wait()


def cli_figures(peer_class):
    procd, peer = ProcdCli(), peer_class()
    pair = [procd, peer]
    name = peer.name
    try:
        for m in pair:
            m.start_and_wait("true")
        times = {procd.name: [], name: []}
        for r in range(ROUNDS):
            for m in (pair if r % 2 == 0 else pair[::-1]):
                t0 = time.monotonic()
                m.start_and_wait("true")
                times[m.name].append(time.monotonic() - t0)
        figure(f"start `true` and learn its exit (CLI, median)", "ms", median_ms(times["procd"]),
               median_ms(times[name]), name, "lower",
               {"pueue": "`procd spawn` + `procd wait` against `pueue add` + `pueue wait`",
                "pm2": "`procd spawn` + `procd wait` against `pm2 start` + polling `pm2 jlist` (pm2 has no wait)",
                "supervisor": "`procd spawn` + `procd wait` against a program file, `supervisorctl update` and polling its state"}[name])
        times = {procd.name: [], name: []}
        for r in range(ROUNDS):
            for m in (pair if r % 2 == 0 else pair[::-1]):
                t0 = time.monotonic()
                m.status()
                times[m.name].append(time.monotonic() - t0)
        figure("list/status round trip (CLI, median)", "ms", median_ms(times["procd"]), median_ms(times[name]),
               name, "lower", {"pueue": "`procd ps` against `pueue status`", "pm2": "`procd ps` against `pm2 jlist`",
                               "supervisor": "`procd ps` against `supervisorctl status`"}[name])
        time.sleep(1)
        figure("idle manager RSS", "MiB", round(rss_kib(procd.manager_pids()) / 1024, 1),
               round(rss_kib(peer.manager_pids()) / 1024, 1), name, "lower",
               "procd: daemon and keeper; " + {"pueue": "pueued", "pm2": "the pm2 daemon (God)",
                                               "supervisor": "supervisord"}[name])
        figure("idle manager PSS", "MiB", round(pss_kib(procd.manager_pids()) / 1024, 1),
               round(pss_kib(peer.manager_pids()) / 1024, 1), name, "lower",
               "smaps_rollup's Pss: shared pages split among the processes that map them, "
               "so the binary procd's daemon and keeper share counts once")
        gone, left = {procd.name: [], name: []}, {procd.name: 0, name: 0}
        for r in range(KILL_ROUNDS):
            for m in (pair if r % 2 == 0 else pair[::-1]):
                marker = new_marker()
                handle = m.start(tree_command(marker))
                wait_for(lambda: len(marked(marker)) >= 20)
                held = hold_tree(marker)
                t0 = time.monotonic()
                m.kill(handle)
                took, survivors = wait_gone(marker, held, t0)
                gone[m.name].append(took)
                left[m.name] = max(left[m.name], survivors)
        figure(f"kill of a 20-process tree until none is left (CLI, median of {KILL_ROUNDS})", "ms", median_ms(gone["procd"]),
               median_ms(gone[name]), name, "lower", "from the kill command until every process of the tree is dead (told by pidfds taken before it), the CLI call included; 3000 = not all gone in 3 s")
        figure(f"survivors of a 20-process tree 3 s after kill (CLI, most of {KILL_ROUNDS})", "processes", left["procd"], left[name], name,
               "lower", {"pueue": "`procd kill` against `pueue kill`", "pm2": "`procd kill` against `pm2 delete`",
                          "supervisor": "`procd kill` against `supervisorctl stop` (supervisor's defaults: stopasgroup=false)"}[name])
        # Output to a reader that polls the manager's log command.
        lat = {procd.name: [], name: []}
        for r in range(LOG_ROUNDS):
            for m in (pair if r % 2 == 0 else pair[::-1]):
                marker = new_marker()
                handle = m.start(f"sleep 0.3; echo mark $(date +%s.%N); sleep {marker}")
                seen = None
                t_end = time.monotonic() + 10
                while seen is None and time.monotonic() < t_end:
                    found = re.search(r"mark (\d+\.\d+)", m.log(handle))
                    if found:
                        seen = time.time() - float(found.group(1))
                if seen is None:
                    raise RuntimeError(f"{m.name}: the marked line was never read")
                lat[m.name].append(seen)
                m.kill(handle)
                end(marked(marker))
        figure("output line to a reader polling the log (CLI, median)", "ms", median_ms(lat["procd"]),
               median_ms(lat[name]), name, "lower", "the line carries the time it was printed; the reader runs the log command ("
               + {"pueue": "`pueue log --full`", "pm2": "`pm2 logs --nostream`",
                  "supervisor": "`supervisorctl tail`"}[name] + ", `procd logs`) until it sees it")
        # Output to a reader that follows the log: the CLI's follow mode,
        # started before the line is printed.
        lat = {procd.name: [], name: []}
        for r in range(LOG_ROUNDS):
            for m in (pair if r % 2 == 0 else pair[::-1]):
                marker = new_marker()
                # 1.5 s: every follower is up and reading before the line.
                handle = m.start(f"sleep 1.5; echo mark $(date +%s.%N); sleep {marker}")
                lat[m.name].append(followed_mark(m.follow_argv(handle), m.env, m.name))
                m.kill(handle)
                end(marked(marker))
        figure("output line to a reader following the log (CLI, median)", "ms", median_ms(lat["procd"]),
               median_ms(lat[name]), name, "lower", "the line carries the time it was printed; the reader is the log "
               "command's follow mode, started before the line (" + {"pueue": "`pueue follow`", "pm2": "`pm2 logs`",
               "supervisor": "`supervisorctl tail -f`"}[name] + ", `procd logs -f`), timed when its output shows the line")
        # SIGKILL of the manager amid output: what can still be read.
        lines_lost = {}
        for m in pair:
            marker = new_marker()
            # Each line names its run (the shell's pid): a manager that
            # runs the command again after its restart does not count.
            handle = m.start(f"for i in $(seq 60); do echo line $i $$; sleep 0.05; done; sleep {marker}")
            time.sleep(1)  # the scenario: the manager dies 1 s into the output
            first = re.search(r"line \d+ (\d+)", m.log(handle))
            m.kill_manager()
            run_id = first.group(1) if first else None

            def lines_seen():
                return {i for i, pid in re.findall(r"line (\d+) (\d+)", m.log(handle)) if pid == run_id}

            # Until the last line is readable, or 5 s after the output ended.
            try:
                wait_for(lambda: "60" in lines_seen(), 7.0)
            except RuntimeError:
                pass
            seen = lines_seen()
            lines_lost[m.name] = 60 - len(seen & {str(i) for i in range(1, 61)})
            end(marked(marker))
        figure("output lines lost when the manager is SIGKILLed (CLI)", "of 60", lines_lost["procd"],
               lines_lost[name], name, "lower",
               "60 numbered lines over 3 s, the manager killed (and started again) 1 s in; read back with the log command; lines of a second run do not count")
        # SIGKILL of the manager while a session runs: is its exit still known?
        unknown = {}
        for m in pair:
            marker = new_marker()
            handle = m.start(f"sleep 1; exit 3; sleep {marker}")
            time.sleep(0.3)  # the scenario: the manager dies while it runs
            m.kill_manager()
            try:
                unknown[m.name] = 0 if wait_for(lambda: m.knows_exit(handle), 7) else 1
            except RuntimeError:
                unknown[m.name] = 1
            end(marked(marker))
        figure("exit codes lost when the manager is SIGKILLed", "of 1", unknown["procd"], unknown[name], name,
               "lower", "a session that exits 3 one second after its manager (procd's daemon, " + name +
               "'s daemon) was SIGKILLed and started again" +
               ("; supervisord runs the program again on its restart (autostart), a second run" if name == "supervisor" else ""))
    finally:
        for m in pair:
            m.close()


# ----- Codex's exec-server beside procd exec-server -------------------------------

class ExecServer:
    """One exec-server on stdio (JSON-RPC lines without "jsonrpc")."""

    def __init__(self, name, argv, env):
        import queue
        import threading
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 0
        self.call("initialize", {"clientName": "procd-bench"})
        self.send({"method": "initialized", "params": {}})

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def send(self, msg):
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def take(self, want, limit=20.0):
        deadline = time.monotonic() + limit
        while True:
            msg = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            if msg is None:
                raise RuntimeError(f"{self.name} exec-server ended")
            if want(msg):
                return msg

    def call(self, method, params):
        self.next_id += 1
        i = self.next_id
        self.send({"id": i, "method": method, "params": params})
        msg = self.take(lambda m: m.get("id") == i)
        if "error" in msg:
            raise RuntimeError(f"{self.name} {method}: {msg['error']}")
        return msg["result"]

    def start_to_exit(self, pid_name, cwd):
        """process/start of `true`, to its process/exited."""
        t0 = time.perf_counter()
        self.send({"id": f"s-{pid_name}", "method": "process/start", "params": {
            "processId": pid_name, "argv": ["/bin/true"], "cwd": "file://" + cwd,
            "env": {"PATH": "/usr/bin:/bin"}, "tty": False, "pipeStdin": False, "arg0": None}})
        msg = self.take(lambda m: m.get("method") == "process/exited"
                        and m["params"]["processId"] == pid_name
                        or m.get("id") == f"s-{pid_name}" and "error" in m)
        if "error" in msg:
            raise RuntimeError(f"{self.name} process/start: {msg['error']}")
        return time.perf_counter() - t0

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def codex_figures():
    h = home("pb-codex-")
    env = env_for(h)
    env["CODEX_HOME"] = os.path.join(h, "codex")
    os.makedirs(env["CODEX_HOME"], exist_ok=True)
    work = os.path.join(h, "work")
    os.makedirs(work)
    servers = [ExecServer("procd", [PROCD, "exec-server"], env),
               ExecServer("Codex", [CODEX, "exec-server", "--listen", "stdio"], env)]
    try:
        times = {s.name: [] for s in servers}
        for r in range(CODEX_ROUNDS + 3):
            for s in (servers if r % 2 == 0 else servers[::-1]):
                took = s.start_to_exit(f"p{r}", work)
                if r >= 3:  # the first rounds start the daemon and warm up
                    times[s.name].append(took)
        figure("exec-server: process/start of true to process/exited", "ms",
               median_ms(times["procd"]), median_ms(times["Codex"]), "Codex's exec-server 0.171.0",
               "lower", f"median of {CODEX_ROUNDS} alternating rounds over stdio after 3 warm-up "
               "rounds; procd's runs each as a daemon session (cgroup, log, checkpoint)")
    finally:
        for s in servers:
            s.close()
        procd_stop(h)


def main():
    try:
        only = os.environ.get("PEERS_ONLY", "")
        if only in ("", "mcp"):
            asyncio.run(mcp_figures())
        if only in ("", "pueue"):
            cli_figures(Pueue)
        if only in ("", "pm2"):
            cli_figures(Pm2)
        if only in ("", "supervisor"):
            cli_figures(Supervisor)
        if only in ("", "codex"):
            codex_figures()
    finally:
        end(homed(HOMES))
        for h in HOMES:
            shutil.rmtree(h, ignore_errors=True)
    print(json.dumps(FIGURES))


main()
