"""One hermes process for test_hermes.py: `start HOME` runs a background
command through hermes's terminal tool on procd, prints its id and waits
to be killed; `recover HOME ID`, a fresh hermes, finds it again and prints
what it saw as JSON."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_hermes import BIN, hermes_tools, process  # noqa: E402

from procd_client import Client  # noqa: E402
from procd_client.hermes import install  # noqa: E402


def main() -> None:
    mode, home = sys.argv[1], sys.argv[2]
    tt = hermes_tools(home)
    registry = install(Client(home, program=BIN))
    if mode == "start":
        started = json.loads(
            tt.terminal_tool(
                "for i in $(seq 1 20); do echo tick $i; sleep 0.1; done; exit 7",
                background=True,
                notify_on_complete=True,
            )
        )
        print(started["session_id"], flush=True)
        time.sleep(300)
        return
    sid = sys.argv[3]
    recovered = registry.recover_from_checkpoint()
    seen = {
        "recovered": recovered,
        "wait": process({"action": "wait", "session_id": sid, "timeout": 60}),
        "log": process({"action": "log", "session_id": sid}),
    }
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
