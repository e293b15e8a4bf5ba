"""hermes-agent 0.19.0's own tools on procd (tests/hermes.rs runs this in
target/hermes-venv, where hermes-agent is installed, with PROCD_BIN set
to the procd it built)."""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Iterator, List

import pytest

BIN = os.environ["PROCD_BIN"]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from cgroups import remove_instance_cgroups  # noqa: E402


# hermes makes HERMES_HOME/sandboxes/ again at exit, after a fixture has
# removed the home: the homes go once more at exit, after hermes's own
# handlers (registered later, when its tools are imported, so run first).
HOMES: list = []
atexit.register(lambda: [shutil.rmtree(p, ignore_errors=True) for p in HOMES])


@pytest.fixture
def home() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="pdhm", dir="/tmp")
    HOMES.append(path)
    os.environ["HERMES_HOME"] = os.path.join(path, "hermes")
    os.makedirs(os.environ["HERMES_HOME"])
    try:
        yield path
    finally:
        subprocess.run([BIN, "--home", path, "stop"], capture_output=True, timeout=60)
        remove_instance_cgroups(path)
        shutil.rmtree(path, ignore_errors=True)


def hermes_tools(home: str) -> Any:
    """hermes's terminal and process tools, set up as a local backend."""
    import tools.terminal_tool as tt

    config = tt._get_env_config()
    config.update(env_type="local", cwd=home)
    tt._get_env_config = lambda: dict(config)
    tt._start_cleanup_thread = lambda: None
    tt._check_all_guards = lambda *a, **k: {"approved": True}
    return tt


def process(args: Dict[str, Any]) -> Dict[str, Any]:
    import tools.process_registry as pr

    result: Dict[str, Any] = json.loads(pr._handle_process(args))
    return result


def scenario(tt: Any) -> Dict[str, Dict[str, Any]]:
    """One run of hermes's tools: each answer, by action."""
    out: Dict[str, Dict[str, Any]] = {}
    started = json.loads(
        tt.terminal_tool(
            "printf 'Name? '; read n; echo \"hi $n\"; sleep 0.3",
            background=True,
            pty=True,
            notify_on_complete=True,
        )
    )
    out["start"] = started
    sid = started["session_id"]
    deadline = time.monotonic() + 20
    while "Name?" not in process({"action": "poll", "session_id": sid}).get("output_preview", ""):
        assert time.monotonic() < deadline, "the prompt never showed"
        time.sleep(0.05)
    out["poll"] = process({"action": "poll", "session_id": sid})
    out["submit"] = process({"action": "submit", "session_id": sid, "data": "bob"})
    out["wait"] = process({"action": "wait", "session_id": sid, "timeout": 20})
    out["log"] = process({"action": "log", "session_id": sid})
    out["list"] = process({"action": "list"})
    sleeper = json.loads(tt.terminal_tool("sleep 300", background=True))["session_id"]
    out["kill"] = process({"action": "kill", "session_id": sleeper})
    return out


def keys(answers: Dict[str, Dict[str, Any]]) -> Dict[str, List[str]]:
    shapes = {action: sorted(answer) for action, answer in answers.items()}
    shapes["list[0]"] = sorted(answers["list"]["processes"][0])
    return shapes


def ancestors(pid: int) -> List[str]:
    names = []
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        names.append(stat[stat.index("(") + 1 : stat.rindex(")")])
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return names


def test_hermes_tools_run_their_processes_under_procd_with_hermes_shapes(home: str) -> None:
    import tools.process_registry as pr
    from procd_client import Client
    from procd_client.hermes import ProcdProcessRegistry, install

    tt = hermes_tools(home)
    # hermes's own registry first, for the shapes its answers have.
    native = scenario(tt)
    assert native["wait"]["exit_code"] == 0, native["wait"]

    procd = Client(home, program=BIN)
    registry = install(procd)
    assert isinstance(pr.process_registry, ProcdProcessRegistry)
    assert registry is pr.process_registry
    on_procd = scenario(tt)
    assert keys(on_procd) == keys(native)
    assert on_procd["wait"]["exit_code"] == 0
    assert "hi bob" in on_procd["wait"]["output"], on_procd["wait"]
    assert on_procd["kill"]["termination_source"] == "process.kill"

    # Really procd's: in its list, marked in its environment, its child.
    sid = on_procd["start"]["session_id"]
    listed = {p["session_id"]: p for p in procd.list()["processes"]}
    assert sid in listed and listed[sid]["meta"]["client"] == "hermes"
    runner = json.loads(tt.terminal_tool("exec sleep 300", background=True))
    # Its bash may still be in its exec of sleep, during which the kernel
    # shows an empty environment: read until the exec is over.
    environ, deadline = b"", time.monotonic() + 20
    while not environ:
        assert time.monotonic() < deadline, "its environment stayed empty"
        with open(f"/proc/{runner['pid']}/environ", "rb") as f:
            environ = f.read()
        time.sleep(0 if environ else 0.01)
    assert f"PROCD_SESSION_ID={runner['session_id']}".encode() in environ.split(b"\0")
    chain = ancestors(runner["pid"])
    assert "procd" in chain[1:], chain
    assert str(os.getpid()) not in [str(p) for p in chain]
    process({"action": "kill", "session_id": runner["session_id"]})


def test_a_completion_reaches_hermes_and_kill_all_spares_other_clients(home: str) -> None:
    from procd_client import Client
    from procd_client.hermes import install

    tt = hermes_tools(home)
    procd = Client(home, program=BIN)
    registry = install(procd)
    other = procd.spawn("exec sleep 300")["session_id"]
    service = procd.spawn("exec sleep 300", persist=True)["session_id"]
    done = json.loads(tt.terminal_tool("sleep 0.3; echo built", background=True, notify_on_complete=True))
    mine = json.loads(tt.terminal_tool("exec sleep 300", background=True))["session_id"]
    texts: List[str] = []
    deadline = time.monotonic() + 20
    while not texts:
        assert time.monotonic() < deadline, "no completion reached hermes's queue"
        texts = [text for _, text in registry.drain_notifications()]
        time.sleep(0.05)
    assert texts[0].startswith(f"[IMPORTANT: Background process {done['session_id']} completed normally (exit code 0)")
    assert "built" in texts[0]
    assert registry.kill_all() == 1
    state = {p["session_id"]: p["status"] for p in procd.list()["processes"]}
    assert state[mine] == "exited"
    assert state[other] == "running" and state[service] == "running"
    procd.kill(other)
    procd.kill(service)


def test_a_hermes_killed_mid_run_finds_its_process_again_with_output_and_exit(home: str) -> None:
    env = dict(os.environ, PROCD_HOME=home, HERMES_HOME=os.environ["HERMES_HOME"])
    first = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "hermes_run.py"), "start", home],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert first.stdout is not None
    sid = first.stdout.readline().strip()
    assert sid.startswith("proc_"), sid
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=20)
    again = subprocess.run(
        [sys.executable, os.path.join(HERE, "hermes_run.py"), "recover", home, sid],
        capture_output=True,
        env=env,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    seen = json.loads(again.stdout)
    assert seen["recovered"] >= 1, seen
    assert seen["wait"]["status"] == "exited" and seen["wait"]["exit_code"] == 7, seen
    # Printed after hermes died, kept by procd.
    assert "tick 20" in seen["log"]["output"], seen
