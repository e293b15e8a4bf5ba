"""One scripted transcript of Codex's exec-server protocol, run against a
server command (argv after `--`), printed as normalised JSON: the same
steps give the same text from Codex's own server and from
`procd exec-server` (tests/codex.rs compares them; docs/codex.md lists
what is normalised and why).

Usage: codex_exec_transcript.py WORKDIR -- SERVER ARGV...
The server runs in WORKDIR; paths under it print as <W>.
"""

import base64
import json
import os
import select
import subprocess
import sys
import time

DEADLINE_S = 30


# Every server started, ended when the transcript ends, also when a step
# fails (a server that hangs would otherwise outlive the test).
SERVERS = []


class Server:
    def __init__(self, argv, workdir, env=None):
        self.proc = subprocess.Popen(
            argv, cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            stderr=open(os.path.join(workdir, ".server.err"), "wb"))
        SERVERS.append(self.proc)
        self.buf = b""
        self.pending = []
        self.next_id = 0

    def send(self, msg):
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def recv(self, until):
        """Messages until `until(msg)` holds for one (kept), or the deadline."""
        end = time.monotonic() + DEADLINE_S
        while True:
            for i, m in enumerate(self.pending):
                if until(m):
                    return self.pending.pop(i)
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                self.pending.append(json.loads(line))
            if any(until(m) for m in self.pending):
                continue
            left = end - time.monotonic()
            if left <= 0:
                raise SystemExit(f"no answer in {DEADLINE_S}s; pending: {self.pending}")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                data = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not data:
                    raise SystemExit(f"the server closed its stdout; pending: {self.pending}")
                self.buf += data

    def call(self, method, params):
        self.next_id += 1
        n = self.next_id
        self.send({"id": n, "method": method, "params": params})
        answer = self.recv(lambda m: m.get("id") == n)
        del answer["id"]
        return answer

    def events(self, pid):
        """The notifications of process `pid` until it is closed, checked
        for one consecutive seq and summarised: output joined, exit code."""
        seen = []
        kinds = set()
        # Until closed, and exited too: on a loaded machine Codex's server
        # has pushed `exited` after `closed` (their seqs in order).
        while not {"process/closed", "process/exited"} <= kinds:
            seen.append(self.recv(lambda m: m.get("params", {}).get("processId") == pid
                                  and "method" in m))
            kinds.add(seen[-1]["method"])
        seqs = [m["params"]["seq"] for m in seen]
        # In seq order: the order the server meant, whatever the arrival.
        kinds = [m["method"] for m in sorted(seen, key=lambda m: m["params"]["seq"])]
        output = b"".join(base64.b64decode(m["params"]["chunk"]) for m in seen
                          if m["method"] == "process/output")
        streams = sorted({m["params"]["stream"] for m in seen if m["method"] == "process/output"})
        exited = [m["params"] for m in seen if m["method"] == "process/exited"]
        return {
            # Each seq once, none missing. In arrival order only for
            # procd: Codex's server may push `exited` ahead of the last
            # output's seq (seen on a loaded machine).
            "seq_consecutive_from_1": sorted(seqs) == list(range(1, len(seqs) + 1)),
            # Codex's server may push `exited` before the last output
            # (its pipes drain after the wait returns); `closed` is last
            # by seq.
            "closed_last_exited_once": kinds[-1] == "process/closed"
            and kinds.count("process/exited") == 1,
            "output": output.decode(errors="replace"),
            "streams": streams,
            "exitCode": exited[0]["exitCode"] if exited else None,
            "sandboxDenied": exited[0].get("sandboxDenied") if exited else None,
            # How many chunks the output came in is the server's own
            # business (docs/codex.md), so the last seq is not shown. The
            # highest, not the last to arrive: Codex's server may push
            # `exited` after `closed`.
            "_last_seq": max(seqs),
        }


def b64(s):
    return base64.b64encode(s.encode()).decode()


def main():
    workdir = os.path.realpath(sys.argv[1])
    argv = sys.argv[sys.argv.index("--") + 1:]
    w = "file://" + workdir
    w_bare = workdir
    s = Server(argv, workdir)
    out = []

    def step(name, value):
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if not k.startswith("_")}
        text = json.dumps(value, sort_keys=True).replace(workdir, "<W>")
        out.append({"step": name, "got": json.loads(text)})

    def start(pid, argv, **kw):
        params = {"processId": pid, "argv": argv, "cwd": w, "env": {}, "tty": False}
        params.update(kw)
        return s.call("process/start", params)

    # A resume over stdio: each stdio connection is a new server.
    r = Server(argv, workdir)
    step("initialize resuming a session", r.call("initialize", {
        "clientName": "procd-transcript", "resumeSessionId": "0199a213-81c0-7800-8aa1-bbab2a035a53"}))
    step("initialize without a client name", r.call("initialize", {}))
    r.proc.stdin.close()
    r.proc.wait(timeout=DEADLINE_S)
    # The handshake: only `initialize` before it; one that fails does not
    # count; the rest waits for `initialized`.
    h = Server(argv, workdir)
    for what, method, params in [
        ("fs", "fs/getMetadata", {"path": w}),
        ("process", "process/read", {"processId": "x", "afterSeq": 0}),
        ("environment/info", "environment/info", {}),
        ("a failed initialize", "initialize", {}),
        ("fs after it", "fs/getMetadata", {"path": w}),
        ("initialize", "initialize", {"clientName": "procd-transcript"}),
        ("fs before initialized", "fs/getMetadata", {"path": w}),
        ("process before initialized", "process/read", {"processId": "x", "afterSeq": 0}),
        ("initialize again", "initialize", {"clientName": "procd-transcript"}),
    ]:
        answer = h.call(method, params)
        step("handshake: " + what, answer.get("error") or "answered")
    h.send({"method": "initialized"})
    h.send({"method": "initialized"})
    step("handshake: process after initialized, twice",
         h.call("process/read", {"processId": "x", "afterSeq": 0}))
    h.proc.stdin.close()
    h.proc.wait(timeout=DEADLINE_S)
    init = s.call("initialize", {"clientName": "procd-transcript"})
    info = init["result"]["environmentInfo"]
    step("initialize", {
        "sessionId_is_uuid": len(init["result"]["sessionId"]) == 36,
        "info": {k: info.get(k) for k in ("shell", "cwd", "platformOs", "userHomeDir", "tempDir")},
    })
    s.send({"method": "initialized"})
    step("environment/info", s.call("environment/info", {})["result"] == info)

    step("start exit 3", start("p1", ["/bin/sh", "-c", "echo hi; exit 3"]))
    ev = s.events("p1")
    step("events exit 3", ev)
    r = s.call("process/read", {"processId": "p1", "afterSeq": 0})["result"]
    step("read exit 3", {
        "output": b"".join(base64.b64decode(c["chunk"]) for c in r["chunks"]).decode(),
        "nextSeq_after_closed": r["nextSeq"] == ev["_last_seq"] + 1,
        **{k: r[k] for k in ("exited", "exitCode", "closed", "failure", "sandboxDenied")},
    })
    r = s.call("process/read", {"processId": "p1", "afterSeq": ev["_last_seq"], "waitMs": 50})
    step("read past the end", {"chunks": r["result"]["chunks"], "closed": r["result"]["closed"]})
    r = s.call("process/read", {"processId": "p1", "afterSeq": ev["_last_seq"] + 50})
    step("read far past the end", {**r["result"],
                                   "nextSeq_follows_the_last": r["result"]["nextSeq"] == ev["_last_seq"] + 1,
                                   "nextSeq": None})

    step("start stdin", start("p2", ["/bin/sh", "-c", "read a; read b; echo \"$a $b\""],
                              pipeStdin=True))
    step("write", s.call("process/write", {"processId": "p2", "chunk": b64("x\n"), "writeId": "w1"}))
    step("write again", s.call("process/write", {"processId": "p2", "chunk": b64("x\n"), "writeId": "w1"}))
    step("write next", s.call("process/write", {"processId": "p2", "chunk": b64("y\n"), "writeId": "w2"}))
    step("events stdin", s.events("p2"))

    step("start env", start("p3", ["/bin/sh", "-c", "env | grep -v '^PROCD_' | sort"],
                            env={"FOO": "bar baz"}))
    step("events env", s.events("p3"))
    step("start arg0", start("p4", ["/bin/sh", "-c", "echo $0; pwd"], arg0="named"))
    step("events arg0", s.events("p4"))

    step("start sleeper", start("p5", ["sleep", "100"]))
    step("terminate", s.call("process/terminate", {"processId": "p5"}))
    step("events terminated", s.events("p5"))
    step("terminate again", s.call("process/terminate", {"processId": "p5"}))

    step("start tty", start("p6", ["/bin/sh", "-c", "tty >/dev/null && echo is-a-tty"], tty=True))
    step("events tty", s.events("p6"))

    step("start an id in use", start("p1", ["true"]))
    step("start no argv", start("p7", []))
    step("start a missing program", start("p8", ["/nonexistent/program"]))
    step("start in a missing cwd", start("p9", ["true"], cwd=w + "/missing"))
    open(os.path.join(workdir, "not-a-dir"), "w").close()
    step("start in a cwd that is a file", start("p10", ["true"], cwd=w + "/not-a-dir"))
    step("signal an unknown process", s.call("process/signal", {"processId": "nope", "signal": "interrupt"}))
    step("terminate an unknown process", s.call("process/terminate", {"processId": "nope"}))
    # More output than either server keeps (Codex's 1 MiB, procd's 8 MiB):
    # a read from the start gets the oldest chunk still kept.
    start("flood", ["/bin/sh", "-c", "head -c 9500000 /dev/zero | tr '\\0' x"])
    flood = s.events("flood")
    r = s.call("process/read", {"processId": "flood", "afterSeq": 0, "maxBytes": 100})["result"]
    step("read from the start after a flood", {
        "output_bytes": len(flood["output"]),
        "oldest_dropped": r["chunks"][0]["seq"] > 1,
        "one_chunk": len(r["chunks"]) == 1,
        "nextSeq_follows": r["nextSeq"] == r["chunks"][0]["seq"] + 1,
        "closed": r["closed"],
    })
    step("read an unknown process", s.call("process/read", {"processId": "nope", "afterSeq": 0}))
    step("write bad base64", s.call("process/write", {"processId": "p2", "chunk": "!!!", "writeId": "w3"}))
    unknown = s.call("no/such/method", {})
    step("an unknown method", {"code": unknown["error"]["code"]})

    f = w + "/a.txt"
    step("fs/writeFile", s.call("fs/writeFile", {"path": f, "dataBase64": b64("hello")}))
    step("fs/readFile", s.call("fs/readFile", {"path": f}))
    step("fs/open", s.call("fs/open", {"handleId": "h1", "path": f}))
    step("fs/open a taken handle", s.call("fs/open", {"handleId": "h1", "path": f}))
    block = lambda off, n: s.call("fs/readBlock", {"handleId": "h1", "offset": off, "len": n})
    step("fs/readBlock", block(0, 3))
    step("fs/readBlock to the end", block(3, 2))
    step("fs/readBlock past the end", block(5, 1))
    step("fs/readBlock of nothing", block(0, 0))
    step("fs/readBlock of too much", block(0, (1 << 20) + 1))
    step("fs/open a missing file", s.call("fs/open", {"handleId": "h2", "path": w + "/missing"}))
    step("fs/close", s.call("fs/close", {"handleId": "h1"}))
    step("fs/close again", s.call("fs/close", {"handleId": "h1"}))
    step("fs/readBlock of a closed handle", block(0, 1))
    md = s.call("fs/getMetadata", {"path": f})["result"]
    step("fs/getMetadata", {**md, "createdAtMs": md["createdAtMs"] >= 0,
                            "modifiedAtMs": md["modifiedAtMs"] > 0})
    step("fs/createDirectory", s.call("fs/createDirectory", {"path": w + "/d/e", "recursive": True}))
    step("fs/open a directory", s.call("fs/open", {"handleId": "h3", "path": w + "/d"}))
    step("fs/createDirectory existing", s.call("fs/createDirectory", {"path": w + "/d", "recursive": False}))
    step("fs/copy", s.call("fs/copy", {"sourcePath": f, "destinationPath": w + "/d/b.txt",
                                       "recursive": False}))
    listed = s.call("fs/readDirectory", {"path": w + "/d"})
    listed["result"]["entries"].sort(key=lambda e: e["fileName"])
    step("fs/readDirectory", listed)
    os.makedirs(os.path.join(workdir, "d/e/f/g"))
    for name in ("d/B", "d/e/f/deep", "d/e/f/g/deeper"):
        open(os.path.join(workdir, name), "w").close()
    os.symlink(os.path.join(workdir, "d/e"), os.path.join(workdir, "d/link"))
    os.symlink(os.path.join(workdir, "a.txt"), os.path.join(workdir, "d/flink"))
    os.mkfifo(os.path.join(workdir, "d/fifo"))
    walk = lambda path, **o: s.call("fs/walk", {"path": path, "options": {
        "maxDepth": 5, "maxDirectories": 10, "maxEntries": 20,
        "followDirectorySymlinks": False, **o}})
    os.symlink(os.path.join(workdir, "nowhere"), os.path.join(workdir, "d/dangling"))
    listed = s.call("fs/readDirectory", {"path": w + "/d"})
    listed["result"]["entries"].sort(key=lambda e: e["fileName"])
    step("fs/readDirectory with links, a dangling one and a FIFO", listed)
    step("fs/walk", walk(w + "/d"))
    step("fs/walk following symlinks", walk(w + "/d", followDirectorySymlinks=True))
    step("fs/walk to depth 1", walk(w + "/d", maxDepth=1))
    step("fs/walk of 2 directories", walk(w + "/d", maxDirectories=2))
    step("fs/walk of 3 entries", walk(w + "/d", maxEntries=3))
    step("fs/walk of a file", walk(f))
    step("fs/walk of a missing path", walk(w + "/missing"))
    step("fs/walk without options", s.call("fs/walk", {"path": w + "/d"}))
    copy = lambda src, dst, recursive=True: s.call("fs/copy", {
        "sourcePath": src, "destinationPath": dst, "recursive": recursive})
    step("fs/copy a tree (links as links, no FIFO)", copy(w + "/d", w + "/copied"))
    step("fs/walk of the copied tree", walk(w + "/copied"))
    step("fs/copy a directory into itself", copy(w + "/d", w + "/d/e/inside"))
    step("fs/copy a directory onto itself", copy(w + "/d", w + "/d"))
    step("fs/copy a directory without recursive", copy(w + "/d", w + "/d2", False))
    step("fs/copy a FIFO", copy(w + "/d/fifo", w + "/fifo2", False))
    # Refused at once: an open of a FIFO waits for a writer.
    step("fs/readFile a FIFO", s.call("fs/readFile", {"path": w + "/d/fifo"}))
    step("fs/open a FIFO", s.call("fs/open", {"handleId": "h4", "path": w + "/d/fifo"}))
    step("fs/readFile a directory", s.call("fs/readFile", {"path": w + "/d"}))
    step("fs/copy a symlink", copy(w + "/d/flink", w + "/flink2", False))
    step("fs/getMetadata of the copied symlink",
         {k: v for k, v in s.call("fs/getMetadata", {"path": w + "/flink2"})["result"].items()
          if k in ("isSymlink", "isFile", "isDirectory")})
    # An empty file: Codex's own server answers {} and leaves the file
    # empty, procd's leaves it as it was (tests/codex.rs checks that).
    step("fs/copy a file onto itself", copy(w + "/d/B", w + "/d/B", False))
    step("fs/canonicalize", s.call("fs/canonicalize", {"path": w + "/d/../a.txt"}))
    # Dot segments go by name, as the URL parser removes them: through a
    # symlink, past a missing directory, past a file.
    for path in ("/d/link/..", "/gone/../a.txt", "/a.txt/..", "/d/./e/", "/%2e%2e" + w_bare + "/a.txt"):
        step("fs/canonicalize " + path.replace(w_bare, "<W>"),
             s.call("fs/canonicalize", {"path": w + path}))
    step("fs/writeFile without data", s.call("fs/writeFile", {"path": f}))
    step("fs/readFile after it", s.call("fs/readFile", {"path": f}))
    for data in ("!!", "eA"):
        step("fs/writeFile of bad base64 " + data,
             s.call("fs/writeFile", {"path": w + "/bad", "dataBase64": data}))
    step("fs/createDirectory without recursive",
         s.call("fs/createDirectory", {"path": w + "/made/a/b"}))
    step("fs/remove without recursive or force", s.call("fs/remove", {"path": w + "/made"}))
    step("fs/remove of a missing path, without force", s.call("fs/remove", {"path": w + "/made"}))
    step("fs/getMetadata of what was removed", s.call("fs/getMetadata", {"path": w + "/made"}))
    step("fs/remove", s.call("fs/remove", {"path": w + "/d", "recursive": True}))
    step("fs/getMetadata missing", s.call("fs/getMetadata", {"path": w + "/d"}))
    step("fs/remove missing, forced", s.call("fs/remove", {"path": w + "/d", "force": True}))
    step("fs/readFile a relative URI", s.call("fs/readFile", {"path": "a.txt"}))
    # How a path URI is read (the `url` crate's parse in Codex's server).
    for uri in ("http://x/y", "HTTP://x/y", "data:,x", "c:/x", "1abc:/x", "",
                w + "/a.txt?q=1", w + "/a.txt?", w + "/a.txt#frag", w + "/a.txt#",
                w + "/a.txt?q#x", "file://host/x", "file://localhost" + w_bare + "/a.txt",
                "file://LOCALHOST" + w_bare + "/a.txt", "file:" + w_bare + "/a.txt",
                "file:" + w_bare.lstrip("/") + "/a.txt", w + "/%61.txt", w + "/a%2etxt",
                w + "/%zz", w + "/%4", w + "/a%20b"):
        answer = s.call("fs/getMetadata", {"path": uri})
        shown = uri.replace(w_bare, "<W>").replace(w_bare.lstrip("/"), "<W>")
        step("fs/getMetadata of " + repr(shown),
             answer.get("error") or sorted(answer["result"]))

    s.proc.stdin.close()
    step("server exits", s.proc.wait(timeout=DEADLINE_S))

    # envPolicy, from an environment set here: which of these names a
    # process gets (processes "env-N"; tests/codex.rs counts them apart).
    known = {"HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C", "LC_CTYPE": "C",
             "LC_TIME": "C", "LOGNAME": "u", "SHELL": "/bin/sh", "TEMP": "/tmp", "TMP": "/tmp",
             "TMPDIR": "/tmp", "USER": "u", "USERNAME": "u", "TERM": "dumb", "TZ": "UTC",
             "PLAIN": "p", "MY_API_KEY": "k", "SECRET_THING": "s", "GITHUB_TOKEN": "t"}
    e = Server(argv, workdir, env={**os.environ, **known})
    e.call("initialize", {"clientName": "procd-transcript"})
    e.send({"method": "initialized"})
    policies = [{"inherit": "all"}, {"inherit": "core"}, {"inherit": "none"},
                {"inherit": "all", "ignoreDefaultExcludes": True},
                {"inherit": "all", "exclude": ["PL*", "LC_*"]},
                {"inherit": "all", "includeOnly": ["P*", "H*"]},
                {"inherit": "none", "set": {"A": "1"}},
                {"inherit": "core", "set": {"PLAIN": "over"}, "exclude": ["LANG"]}]
    for i, policy in enumerate(policies):
        full = {"inherit": "all", "ignoreDefaultExcludes": False, "exclude": [], "set": {},
                "includeOnly": [], **policy}
        started = e.call("process/start", {"processId": f"env-{i}", "argv": ["/usr/bin/env"],
                                           "cwd": w, "env": {"FROM_ENV": "x"}, "tty": False,
                                           "envPolicy": full})
        got = e.events(f"env-{i}")["output"].splitlines() if "result" in started else started
        if isinstance(got, list):
            got = sorted(line for line in got
                         if line.split("=", 1)[0] in {*known, "FROM_ENV", "A"})
        step("envPolicy " + json.dumps(policy, sort_keys=True), got)
    e.proc.stdin.close()
    e.proc.wait(timeout=DEADLINE_S)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


try:
    main()
finally:
    for proc in SERVERS:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
