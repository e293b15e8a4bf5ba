"""Two agents on one daemon, each a `procd mcp` driven by the official
Python MCP SDK, reading every answer as Claude Code does: only
`JSON.stringify(structuredContent)`. Prints what it saw as JSON.

usage: mcp_agents_client.py PROCD_BINARY HOME WITH_CGROUP(0|1)
"""

import asyncio
import json
import os
import socket
import subprocess
import sys
from contextlib import AsyncExitStack

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def seen_by_model(r):
    """What a model behind Claude Code, Codex or VS Code reads of a result."""
    if r.is_error:
        return r.content[0].text if r.content else ""
    return json.dumps(r.structured_content, separators=(",", ":"), ensure_ascii=False)


async def agent(stack, procd, home, project, *extra):
    params = StdioServerParameters(
        command=procd,
        args=["--home", home, "mcp", *extra],
        env={"HOME": home, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=project,
    )
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()

    async def call(name, args):
        r = await session.call_tool(name, args)
        return {
            "is_error": bool(r.is_error),
            "model": seen_by_model(r),
            "result": r.structured_content,
        }

    return session, call


async def main(procd, home, with_cgroup):
    project = os.path.join(home, "project")
    os.makedirs(project, exist_ok=True)
    out = {}
    async with AsyncExitStack() as stack:
        a_session, a = await agent(stack, procd, home, project, "--session-key", "agent-a")
        _, b = await agent(stack, procd, home, project)

        tools = await a_session.list_tools()
        out["annotations"] = {
            t.name: (t.annotations.model_dump(exclude_none=True, by_alias=True) if t.annotations else {})
            for t in tools.tools
        }

        # Every tool's answer, as the model reads it.
        prompt = await a("start", {"command": "printf 'Name? '; read n; echo \"hi $n\"", "yield_ms": 20000})
        out["prompt_start"] = prompt
        pid = prompt["result"]["session_id"]
        out["prompt_read"] = await a("read", {"session_id": pid, "cursor": 0})
        out["prompt_list"] = await a("list", {"status": "running"})
        out["prompt_wait_timeout"] = await a("wait", {"session_id": pid, "timeout_s": 0.5})
        out["prompt_write"] = await a("write", {"session_id": pid, "text": "bob", "yield_ms": 10000})
        out["prompt_wait"] = await a("wait", {"session_id": pid, "timeout_s": 20})
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        out["port"] = port
        out["server"] = await a(
            "start",
            {
                "command": f"exec python3 -m http.server {port} --bind 127.0.0.1",
                "ready": {"port": port},
                "yield_ms": 30000,
            },
        )
        out["server_kill"] = await a("kill", {"session_id": out["server"]["result"]["session_id"]})

        # Each agent's events are its own.
        done_a = await a("start", {"command": "sleep 0.3; echo done-A", "notify": True, "yield_ms": 0})
        done_b = await b("start", {"command": "sleep 0.3; echo done-B", "notify": True, "yield_ms": 0})
        out["done_a"], out["done_b"] = done_a["result"]["session_id"], done_b["result"]["session_id"]
        await a("wait", {"session_id": out["done_a"], "timeout_s": 20})
        await b("wait", {"session_id": out["done_b"], "timeout_s": 20})
        out["b_notifications"] = await b("notifications", {})
        out["a_notifications"] = await a("notifications", {})

        # One wait over all of an agent's processes: the first thing that
        # happens wakes it, and says what.
        await a("start", {"command": "exec sleep 300", "yield_ms": 0})
        await a("start", {"command": "sleep 1; echo 'server LISTENING now'; exec sleep 300", "yield_ms": 0})
        out["wait_output"] = await a("wait", {"output": "LISTENING", "timeout_s": 30})
        quitter = await a("start", {"command": "sleep 0.5; echo bye; exit 7", "yield_ms": 0})
        out["quitter"] = quitter["result"]["session_id"]
        out["wait_exit"] = await a("wait", {"timeout_s": 30})
        out["wait_nothing"] = await a("wait", {"until": ["exit"], "timeout_s": 0.5})
        # B has nothing of its own running after A's started: its wait
        # over "all mine" never wakes for A's processes.
        out["b_wait_none"] = await b("wait", {"timeout_s": 0.5})
        # Bad input, refused by name.
        out["bad_until"] = await a("wait", {"until": ["soon"], "timeout_s": 1})
        out["bad_regex"] = await a("wait", {"output": "(", "timeout_s": 1})
        out["others_session"] = await b("wait", {"session_ids": [out["quitter"]], "timeout_s": 1})

        # An OOM kill of an agent's session: its event text through MCP.
        if with_cgroup:
            spawn = {
                "command": "python3 -c 'b = []\nwhile True: b.append(bytearray(1 << 20))'; echo after $?",
                "limits": {"memory_bytes": 64 << 20},
                "session_key": "agent-a",
                "notify_on_complete": True,
            }
            env = dict(os.environ, PROCD_HOME=home)
            r = subprocess.run(
                [procd, "--home", home, "rpc", "spawn", json.dumps(spawn)],
                capture_output=True, text=True, env=env, check=True,
            )
            oom_id = json.loads(r.stdout)["session_id"]
            out["oom_id"] = oom_id
            await a("wait", {"session_id": oom_id, "timeout_s": 60})
            out["oom_notifications"] = await a("notifications", {})
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] == "1"))
