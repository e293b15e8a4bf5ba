"""A stand-in for the model behind Codex (the Responses API on 127.0.0.1),
so that `codex exec` runs a turn with no model: the first request is
answered with one call of the shell tool the request offers, running
COMMAND; the next with a final message. Every request body is appended to
LOG (one JSON per line). Prints its port, then serves until killed.

Usage: codex_mock_model.py COMMAND LOG
"""

import http.server
import json
import sys

COMMAND, LOG = sys.argv[1], sys.argv[2]


def sse(events):
    out = ""
    for ev in events:
        out += f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n"
    return out.encode()


def completed(rid):
    return {"type": "response.completed", "response": {"id": rid, "usage": {
        "input_tokens": 0, "input_tokens_details": None, "output_tokens": 0,
        "output_tokens_details": None, "total_tokens": 0}}}


def tool_call(tools):
    """One call of the shell tool offered, with COMMAND in its shape."""
    names = [t.get("name") for t in tools if isinstance(t, dict)]
    if "exec_command" in names:
        return "exec_command", {"cmd": COMMAND}
    if "shell_command" in names:
        return "shell_command", {"command": COMMAND}
    if "shell" in names:
        return "shell", {"command": ["bash", "-lc", COMMAND]}
    raise SystemExit(f"no shell tool offered: {names}")


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        with open(LOG, "a") as f:
            f.write(json.dumps({"path": self.path, "body": body}) + "\n")
        if not self.path.endswith("/responses"):
            self.send_response(404)
            self.end_headers()
            return
        answered = any(i.get("type") == "function_call_output" for i in body.get("input", [])
                       if isinstance(i, dict))
        if answered:
            events = [{"type": "response.created", "response": {"id": "r2"}},
                      {"type": "response.output_item.done", "item": {
                          "type": "message", "role": "assistant", "id": "m1",
                          "content": [{"type": "output_text", "text": "done"}]}},
                      completed("r2")]
        else:
            name, args = tool_call(body.get("tools", []))
            events = [{"type": "response.created", "response": {"id": "r1"}},
                      {"type": "response.output_item.done", "item": {
                          "type": "function_call", "call_id": "call-1", "name": name,
                          "arguments": json.dumps(args)}},
                      completed("r1")]
        data = sse(events)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
