"""Drives `procd mcp` with the official Python MCP SDK (a client written by
others), as an MCP-capable coding agent would. Prints what it saw as JSON.

usage: mcp_client.py PROCD_BINARY HOME
"""

import asyncio
import json
import os
import socket
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def tool_call(session, name, args):
    """One tool call, as the agent sees its answer."""
    r = await session.call_tool(name, args)
    return {
        "is_error": bool(r.is_error),
        "text": r.content[0].text if r.content else "",
        "result": r.structured_content,
    }


async def main(procd: str, home: str) -> None:
    # The agent runs in its project: `procd mcp` is started there.
    project = os.path.join(home, "project")
    os.makedirs(os.path.join(project, "sub"), exist_ok=True)
    params = StdioServerParameters(
        command=procd,
        args=["--home", home, "mcp"],
        env={"HOME": home, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=project,
    )
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = init.server_info.name
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            out["start_schema"] = next(t.input_schema for t in tools.tools if t.name == "start")
            out["start_description"] = next(t.description for t in tools.tools if t.name == "start")

            async def call(name, args):
                return await tool_call(session, name, args)

            out["fast"] = await call("start", {"command": "echo hello from mcp; exit 3", "yield_ms": 10000})
            # Found instead of read: the line, numbered, within the last hour.
            out["search"] = await call("search", {"pattern": "hello from", "since": "1h"})
            out["search_bad_since"] = await call("search", {"pattern": "x", "since": "yesterday"})
            # The agent's own shell: state carries over, the code is exact.
            out["shell1"] = await call("shell", {"command": "mkdir -p sub2 && cd sub2 && export STAGE=dev"})
            out["shell2"] = await call("shell", {"command": "echo $STAGE; pwd; (exit 3)"})
            out["shell_bad"] = await call("shell", {})
            # A command sent while the last one waits for input is not
            # queued behind it (it may never end): it is refused at once.
            out["shell_asks"] = await call("shell", {"command": "read answer; echo got $answer", "yield_ms": 3000})
            out["shell_busy"] = await call("shell", {"command": "echo next"})
            asked = out["shell_asks"]["result"] or {}
            out["shell_answer"] = await call("write", {"session_id": asked.get("shell_id", ""), "text": "yes", "yield_ms": 0})
            out["shell_waited"] = await call("shell", {"command_id": asked.get("command_id", 0), "yield_ms": 10000})
            out["shell_next"] = await call("shell", {"command": "echo next"})
            # Two commands at once (parallel tool calls), each waiting for
            # input: one runs, the other is refused at once, never queued
            # behind a command that may not end (that call would hang).
            both = await asyncio.wait_for(asyncio.gather(
                call("shell", {"command": "read a; echo a $a", "yield_ms": 3000}),
                call("shell", {"command": "read b; echo b $b", "yield_ms": 3000}),
            ), 60)
            out["shell_both"] = list(both)
            ran = next((r["result"] for r in both if not r["is_error"]), None) or {}
            out["shell_both_answer"] = await call("write", {"session_id": ran.get("shell_id", ""), "text": "x", "yield_ms": 0})
            out["shell_both_waited"] = await call("shell", {"command_id": ran.get("command_id", 0), "yield_ms": 10000})
            out["shell_after_both"] = await call("shell", {"command": "echo after"})
            # Who listens on a port: this client's own listener.
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            out["port_pid"] = os.getpid()
            out["port_owner"] = await call("port", {"port": listener.getsockname()[1]})
            listener.close()
            out["port_bad"] = await call("port", {"port": 70000})
            out["pwd"] = await call("start", {"command": "pwd", "yield_ms": 10000})
            out["pwd_sub"] = await call("start", {"command": "pwd", "cwd": "sub", "yield_ms": 10000})
            out["project"] = project
            out["slow"] = await call("start", {"command": "echo started; exec sleep 300", "yield_ms": 3000})
            out["kept"] = await call("start", {"command": "exec sleep 301", "persist": True, "yield_ms": 0})
            doomed = await call("start", {"command": "exec sleep 302", "yield_ms": 0})
            slow_id = out["slow"]["result"]["session_id"]
            out["read"] = await call("read", {"session_id": slow_id, "cursor": 0})
            out["write"] = await call(
                "start", {"command": "read line; echo got $line", "yield_ms": 0}
            )
            out["answer"] = await call(
                "write", {"session_id": out["write"]["result"]["session_id"], "text": "ping", "yield_ms": 5000}
            )
            out["kill"] = await call("kill", {"session_id": doomed["result"]["session_id"]})
            out["doomed_pid"] = doomed["result"]["pid"]
            out["bad"] = await call("read", {"session_id": "proc_ffffffffffff"})
            # A queue of one slot (made on first use): the second start waits.
            out["queue_first"] = await call("start", {"command": "exec sleep 305", "queue": "mcpq", "yield_ms": 0})
            out["queued"] = await call("start", {"command": "exec sleep 306", "queue": "mcpq", "yield_ms": 200})
            out["list"] = await call("list", {})
            # One page at a time: the words say how to go on.
            out["list_page"] = await call("list", {"limit": 1})
            out["list_next"] = await call(
                "list", {"limit": 1, "after": out["list_page"]["result"].get("next_after")}
            )
            out["list_bad"] = await call("list", {"limit": 0})
            out["unqueued"] = await call("kill", {"session_id": out["queued"]["result"]["session_id"]})
            # A dev server, started with a ready condition: the answer comes
            # when it listens, and says so.
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            out["port"] = port
            out["devserver"] = await call(
                "start",
                {
                    "command": f"echo compiling; sleep 1; exec python3 -m http.server {port} --bind 127.0.0.1",
                    "ready": {"http": f"http://127.0.0.1:{port}/", "port": port},
                    "yield_ms": 60000,
                },
            )
            # A question: the answer says it waits, and write answers it.
            out["prompt"] = await call(
                "start", {"command": "printf 'Proceed? [y/N] '; read a; echo \"answer $a\"", "yield_ms": 60000}
            )
            out["reply"] = await call(
                "write", {"session_id": out["prompt"]["result"]["session_id"], "text": "y", "yield_ms": 60000}
            )
            # A named start twice starts one process; a stack comes up and
            # goes down (docs/stacks.md).
            out["named"] = await call("start", {"command": "exec sleep 303", "name": "solo", "yield_ms": 0})
            out["named_again"] = await call("start", {"command": "exec sleep 303", "name": "solo", "yield_ms": 0})
            out["read_by_name"] = await call("read", {"session_id": "solo"})
            # A restart policy through start; a bad one is a tool error.
            out["restarting"] = await call("start", {"command": "exec sleep 304", "restart": "always", "yield_ms": 0})
            out["bad_restart"] = await call("start", {"command": "true", "restart": "sometimes", "yield_ms": 0})
            # A sandbox through start: the kernel refuses the write.
            out["sandboxed"] = await call("start", {"command": "touch " + os.path.join(project, "sandboxed.txt") + " || echo refused", "sandbox": "read-only"})
            out["bad_sandbox"] = await call("start", {"command": "true", "sandbox": "loose", "yield_ms": 0})
            with open(os.path.join(project, "procd.toml"), "w") as f:
                f.write('[service.api]\ncommand = "echo api up; exec sleep 300"\nready = { output = "api up" }\n')
            out["up"] = await call("up", {"wait_s": 20})
            out["down"] = await call("down", {"project": out["up"]["result"]["project"]})
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
