"""procd_client against a real daemon (tests/python_client.rs runs this
with PROCD_BIN set to the procd it built)."""

import asyncio
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Dict, Iterator

import pytest

import procd_client
from cgroups import remove_instance_cgroups
from procd_client import AsyncClient, Client, Lease

BIN = os.environ["PROCD_BIN"]


def _stop(home: str) -> None:
    subprocess.run([BIN, "--home", home, "stop"], capture_output=True, timeout=60)


@pytest.fixture
def home() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="pdpy", dir="/tmp")
    try:
        yield path
    finally:
        _stop(path)
        remove_instance_cgroups(path)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def procd(home: str) -> Iterator[Client]:
    with Client(home, program=BIN) as client:
        yield client


def until(what: str, cond: Any, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.02)


def test_one_method_per_procd_method_with_its_params(procd: Client) -> None:
    table: Dict[str, Any] = json.loads(os.environ["PROCD_METHOD_PARAMS"])
    for method, params in table.items():
        if method.startswith(("subscribe_", "unsubscribe_")):
            continue
        fn = getattr(Client, method, None)
        assert fn is not None, f"Client has no {method}"
        assert getattr(AsyncClient, method) is fn, f"AsyncClient.{method} is Client's"
        got = [p for p in inspect.signature(fn).parameters if p != "self"]
        assert sorted(got) == sorted(params), f"{method}: {got} != {params}"
    # spawn's params, as the daemon itself lists them when one is unknown.
    with pytest.raises(procd_client.InvalidParams) as refused:
        procd._call("spawn", {"command": "true", "bogus": 1})
    known = set(re.findall(r"`([a-z_]+)`", refused.value.message)) - {"bogus"}
    assert "command" in known and "sandbox" in known, refused.value.message
    assert set(inspect.signature(Client.spawn).parameters) - {"self"} == known


def test_an_on_demand_daemon_is_started_and_every_error_is_its_class(procd: Client) -> None:
    status = procd.status()
    assert status["lifetime"] == "on_demand", status
    r = procd.spawn("echo hello; exit 3", yield_ms=10_000)
    assert (r["status"], r["exit_code"], r["output"]) == ("exited", 3, "hello\n")
    with pytest.raises(procd_client.SessionNotFound):
        procd.poll("proc_ffffffffffff")
    with pytest.raises(procd_client.InvalidParams) as bad:
        procd.wait(r["session_id"], timeout_s=-1)
    assert "timeout_s" in bad.value.message
    with pytest.raises(procd_client.MethodNotFound):
        procd._call("no_such_method", {})
    with pytest.raises(procd_client.WrongState):
        procd.wait_any(session_key="nobody", timeout_s=1)
    # The connection serves on after errors.
    assert procd.poll(r["session_id"])["exit_code"] == 3


def test_read_wait_and_subscriptions(procd: Client) -> None:
    r = procd.spawn("for i in 1 2 3; do echo step $i; sleep 0.1; done")
    sid = r["session_id"]
    chunks = list(procd.follow(sid))
    assert "".join(c["data"] for c in chunks) == "step 1\nstep 2\nstep 3\n"
    assert chunks[-1]["eof"] and chunks[-1]["exit_code"] == 0
    items = list(procd.subscribe_output(sid))
    assert "".join(i.get("data", "") for i in items) == "step 1\nstep 2\nstep 3\n"
    assert items[-1]["exited"] is True and items[-1]["exit_code"] == 0
    events = procd.subscribe_events(since=0)
    seen = []
    for event in events:
        seen.append(event)
        if event["type"] == "exited" and event["session_id"] == sid:
            break
    events.close()
    assert [e["type"] for e in seen if e.get("session_id") == sid] == ["started", "exited"]
    assert all(isinstance(e["seq"], int) for e in seen)


def test_a_daemon_killed_mid_follow_loses_nothing(procd: Client) -> None:
    r = procd.spawn("for i in $(seq 1 40); do echo tick $i; sleep 0.05; done")
    sid = r["session_id"]
    got = []
    killed = False
    for chunk in procd.follow(sid):
        got.append(chunk["data"])
        if not killed and "tick 5\n" in "".join(got):
            os.kill(procd.status()["pid"], signal.SIGKILL)
            killed = True
    assert killed
    assert "".join(got) == "".join(f"tick {i}\n" for i in range(1, 41))
    assert procd.wait(sid, timeout_s=20)["exit_code"] == 0


def test_a_lease_ends_its_sessions_and_persist_outlives_it(home: str, procd: Client) -> None:
    # The last lease of an on-demand daemon stops it: this one keeps it up.
    keeper = Lease("pytest-keeper", home=home, program=BIN)
    lease = Lease("pytest", home=home, program=BIN)
    owned = procd.spawn("exec sleep 300", owner=lease.token)["session_id"]
    kept = procd.spawn("exec sleep 300", owner=lease.token, persist=True)["session_id"]
    lease.release()
    until("the owned session ends", lambda: procd.poll(owned)["status"] == "exited")
    assert procd.poll(kept)["status"] == "running"
    procd.kill(kept)
    keeper.release()


def test_the_async_client_answers_concurrent_calls_by_id(home: str) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(home, program=BIN) as procd:
            slow = (await procd.spawn("sleep 0.5; exit 5"))["session_id"]
            fast = (await procd.spawn("exit 6"))["session_id"]
            waits = await asyncio.gather(
                procd.wait(slow, timeout_s=20), procd.wait(fast, timeout_s=20), procd.status()
            )
            assert [waits[0]["exit_code"], waits[1]["exit_code"]] == [5, 6]
            r = await procd.spawn("sleep 0.3; echo 'ERROR x'; exec sleep 300", session_key="py")
            woke = await procd.wait_any(session_key="py", output="ERROR", timeout_s=20)
            assert (woke["condition"], woke["line"]) == ("output", "ERROR x")
            await procd.kill(r["session_id"])
            with pytest.raises(procd_client.SessionNotFound):
                await procd.poll("proc_ffffffffffff")
            items = [i async for i in procd.subscribe_output(fast)]
            assert items[-1]["exit_code"] == 6

    asyncio.run(main())


def test_an_untrusted_socket_directory_is_refused() -> None:
    base = tempfile.mkdtemp(prefix="pdpy", dir="/tmp")
    try:
        run = os.path.join(base, "run")
        os.mkdir(run)
        os.chmod(run, 0o777)
        with pytest.raises(procd_client.NotTrusted, match="writable by group or others"):
            Client(socket_path=os.path.join(run, "procd.sock"), start=False)
        os.rmdir(run)
        os.symlink("/tmp", run)
        with pytest.raises(procd_client.NotTrusted, match="symbolic link"):
            Client(socket_path=os.path.join(run, "procd.sock"), start=False)
    finally:
        shutil.rmtree(base, ignore_errors=True)
