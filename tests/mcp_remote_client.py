"""Drives `procd mcp --host URL` with the official Python MCP SDK: a
start through ssh, then the ssh under the MCP server is SIGKILLed, and the
next calls must reach the far procd again (one retry allowed for the call
the drop fails). Prints what it saw as JSON.

usage: mcp_remote_client.py PROCD_BINARY URL  (PROCD_SSH in the environment)
"""

import asyncio
import json
import os
import signal
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcp_client import tool_call


def children(pid):
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(p) for p in f.read().split()]
    return found


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def mcp_server_pid():
    """The `procd mcp --host` this process started."""
    for pid in children(os.getpid()):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"mcp" in f.read().split(b"\0"):
                return pid
    raise SystemExit("no procd mcp child")


async def main(procd: str, url: str) -> None:
    params = StdioServerParameters(
        command=procd,
        args=["mcp", "--host", url],
        env={k: v for k, v in os.environ.items() if k in ("PATH", "PROCD_SSH", "PROCD_HOME")},
    )
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()

            async def call(name, args):
                return await tool_call(session, name, args)

            out["first"] = await call("start", {"command": "echo one-remote", "yield_ms": 10000})
            server = mcp_server_pid()
            ssh = [p for p in children(server) if comm(p) == "ssh"]
            out["ssh_killed"] = len(ssh)
            for p in ssh:
                os.kill(p, signal.SIGKILL)
            out["retries"] = 0
            for _ in range(2):
                second = await call("start", {"command": "echo two-remote", "yield_ms": 10000})
                if not second["is_error"]:
                    break
                out["retries"] += 1
            out["second"] = second
            out["ssh_after"] = len([p for p in children(server) if comm(p) == "ssh"])
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
