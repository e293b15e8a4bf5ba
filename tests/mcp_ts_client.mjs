// Drives `procd mcp` with the official TypeScript MCP SDK (a client
// written by others), as Claude Code's and VS Code's are built: progress
// that resets a short request timeout, a cancellation, and the channel
// push. Prints what it saw as JSON.
//
// usage: node mcp_ts_client.mjs SDK_DIR PROCD_BINARY HOME
import path from "node:path";
import fs from "node:fs";

const [sdk, procd, home] = process.argv.slice(2);
const { Client } = await import(path.join(sdk, "dist/esm/client/index.js"));
const { StdioClientTransport } = await import(path.join(sdk, "dist/esm/client/stdio.js"));

const project = path.join(home, "project");
fs.mkdirSync(project, { recursive: true });

async function agent(...extra) {
  const transport = new StdioClientTransport({
    command: procd,
    args: ["--home", home, "mcp", ...extra],
    env: { HOME: home, PATH: process.env.PATH },
    cwd: project,
    stderr: "inherit",
  });
  const client = new Client({ name: "procd-test", version: "1.0.0" });
  const pushes = [];
  // Progress for a request the client gave up on reaches no handler: the
  // SDK reports it here. The server must send none after a cancel.
  const strays = [];
  client.onerror = (e) => {
    if (String(e.message).includes("progress notification for an unknown token")) strays.push(String(e.message));
  };
  client.fallbackNotificationHandler = async (n) => {
    pushes.push(n);
  };
  await client.connect(transport);
  return { client, pushes, strays };
}

const text = (r) => (r.content && r.content[0] ? r.content[0].text : "");
const out = {};
const plain = await agent("--progress-interval", "1");
const call = (client, name, args, options) =>
  client.callTool({ name, arguments: args }, undefined, options);

// A 10 s wait under a 3 s request timeout, kept alive by progress.
const ticking = await call(plain.client, "start", {
  command: "echo tick; sleep 10; echo done",
  yield_ms: 0,
});
const id = ticking.structuredContent.session_id;
const progress = [];
const began = Date.now();
const waited = await call(plain.client, "wait", { session_id: id, timeout_s: 60 }, {
  timeout: 3000,
  resetTimeoutOnProgress: true,
  onprogress: (p) => progress.push(p),
});
out.with_progress = {
  ms: Date.now() - began,
  exit_code: waited.structuredContent.exit_code,
  text: text(waited),
  progress,
};

// The same wait without progress: the client gives up at 3 s.
const silent = await call(plain.client, "start", { command: "exec sleep 10", yield_ms: 0 });
const silentId = silent.structuredContent.session_id;
try {
  await call(plain.client, "wait", { session_id: silentId, timeout_s: 60 }, { timeout: 3000 });
  out.without_progress = { finished: true };
} catch (e) {
  out.without_progress = { finished: false, code: e.code, message: String(e.message) };
}

// A cancelled wait: the call ends, the process runs on, the server serves.
const ac = new AbortController();
const cancelProgress = [];
const cancelled = call(plain.client, "wait", { timeout_s: 60 }, {
  signal: ac.signal,
  onprogress: (p) => cancelProgress.push(p),
});
setTimeout(() => ac.abort("the user pressed Esc"), 1500);
try {
  await cancelled;
  out.cancel = { rejected: false };
} catch (e) {
  out.cancel = { rejected: true, message: String(e.message ?? e) };
}
const afterCancel = await call(plain.client, "list", { status: "running" });
out.cancel.running_after = afterCancel.structuredContent.processes.map((p) => p.session_id);
out.cancel.silent_id = silentId;
out.cancel.progress_before = cancelProgress.length;
const straysBefore = plain.strays.length;
await new Promise((r) => setTimeout(r, 2500));
out.cancel.progress_after = cancelProgress.length;
// Notes the server sent for the cancelled request after the cancel (at
// 1 s apart, a server that went on waiting sends two in 2.5 s).
out.cancel.strays_after = plain.strays.length - straysBefore;

// Push: with --channel the server declares claude/channel and sends this
// agent's completion; without it, nothing is pushed.
const channel = await agent("--channel");
out.channel_capability = channel.client.getServerCapabilities()?.experimental ?? null;
out.plain_capability = plain.client.getServerCapabilities()?.experimental ?? null;
const pushed = await call(channel.client, "start", {
  command: "sleep 0.3; echo pushed-done",
  yield_ms: 0,
});
out.pushed_id = pushed.structuredContent.session_id;
const deadline = Date.now() + 20000;
while (
  !channel.pushes.some((n) => n.method === "notifications/claude/channel") &&
  Date.now() < deadline
) {
  await new Promise((r) => setTimeout(r, 20));
}
out.channel_pushes = channel.pushes;
// The plain agent's own sessions ended too (the 10 s ones); it got no push.
out.plain_pushes = plain.pushes.filter((n) => n.method === "notifications/claude/channel");

await plain.client.close();
await channel.client.close();
process.stdout.write(JSON.stringify(out));
