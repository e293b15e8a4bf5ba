//! What each parameter means, written once for every surface that shows
//! it: the protocol's field (its doc comment), the MCP tools' schemas (the
//! description the model reads) and the CLI's `--help`. A surface adds only
//! what is its own (a default of its own, how it resolves a relative
//! path) after the shared text, with `concat!`; it never restates it.
//!
//! A macro, not constants: `#[doc = …]` takes a literal or a macro, not a
//! `const`.

/// The description of parameter `$name`, a `&'static str` literal:
/// `procd_proto::describe!(cwd)`.
#[macro_export]
macro_rules! describe {
    (command) => {
        "Shell command line to run, e.g. \"npm run dev\" or \"pytest -x tests/\". Runs in bash."
    };
    (cwd) => {
        "Working directory."
    };
    (pty) => {
        "Run on a pseudo-terminal, for interactive programs (REPLs, prompts, TUIs)."
    };
    (env) => {
        "Extra environment variables."
    };
    (yield_ms) => {
        "Milliseconds to wait for the process to finish or go quiet before answering, with its output so far."
    };
    (persist) => {
        "Keep the process running after its owner (the agent that started it) disconnects."
    };
    (notify_on_complete) => {
        "Queue a notification when it exits."
    };
    (watch_patterns) => {
        "Substrings to watch for in output lines (e.g. \"ready on port\"); matches become notifications."
    };
    (timeout_s) => {
        "Kill its tree after this many seconds."
    };
    (max_output_chars) => {
        "Most characters of output to return (head and tail are kept)."
    };
    (ready) => {
        "For servers: when it is ready. The answer then waits (up to yield_ms) until it is, instead of returning when output pauses."
    };
    (ready_output) => {
        "Ready once an output line matches this regex."
    };
    (ready_port) => {
        "Ready once the tree listens on this TCP port, \"any\", or \"auto\" (the port it was given)."
    };
    (ready_http) => {
        "Ready once this loopback URL answers with status 200-399."
    };
    (ready_timeout_s) => {
        "Seconds to wait for readiness before it counts as not ready (it keeps running either way). Default 60."
    };
    (name) => {
        "A name for it (lowercase letters, digits, - _ .), unique among the running sessions of its project: while it runs, a start with the same name and command returns it instead of starting a second one; with another command it is refused unless replace is set."
    };
    (replace) => {
        "With name: kill the running one of that name first if it runs another command."
    };
    (restart) => {
        "Start it again when it ends: \"on-failure\" (a non-zero exit or a crash) or \"always\"."
    };
    (sandbox) => {
        "Run it in a sandbox the kernel enforces on its whole tree: \"workspace-write\" (write only under its cwd and its own TMPDIR, no network), \"read-only\" (write nothing but TMPDIR, no network) or \"full\" (no sandbox)."
    };
    (junit) => {
        "A JUnit XML report the command writes (relative to its cwd): its counts and failures become the session's `tests`."
    };
    (port) => {
        "The TCP port a server is to use: a number, or \"auto\" for a free one no other process of procd's holds (for parallel worktrees). Given as PORT and put for {port} in the command."
    };
    (queue) => {
        "A queue to run it in (e.g. \"build\"): at most the queue's slots of its sessions run at once across all agents; a spawn finding them taken answers status \"queued\" with its position and starts, in order, when one frees."
    };
    (jobs) => {
        "For a build or test run (make, cargo, npm): it takes a token of procd's machine-wide jobserver to start, waiting as \"queued\" while all are taken, and its make, cargo and rustc draw their parallel jobs from the same tokens, so every agent's builds together never overload the machine."
    };
    (task_id) => {
        "A task id to group sessions by (list filters on it)."
    };
    (project) => {
        "The project its name belongs to (names are unique within one)."
    };
    (max_restarts) => {
        "Restarts allowed in a row before the session ends as crash_loop (default 5); a run that lasts long enough (reset_after_s, default 60) starts a new row."
    };
    (backoff_s) => {
        "The first delay before a restart, in seconds (default 1), doubled for each restart in a row, up to 30 s."
    };
    (memory_bytes) => {
        "Memory limit of the session's tree."
    };
    (cpu_cores) => {
        "CPU limit of the session's tree, in cores (e.g. 1.5)."
    };
    (pids) => {
        "Most processes (and threads) the session's tree may have."
    };
    (watch_paths) => {
        "Directories to watch for changes, relative to its cwd (default: the cwd), or globs below it (src/**/*.ts: src watched, matches counted); .git, node_modules, target… and the cwd's .gitignore are left out."
    };
    (watch_action) => {
        "What a change does: \"restart\" (the default), \"signal:NAME\" (e.g. \"signal:HUP\") or \"run:COMMAND\" (COMMAND first, as a session; a restart if it exits 0)."
    };
    (session_id) => {
        "The session's id."
    };
    (cursor) => {
        "Byte cursor to read from: 0 for the start, or the cursor a previous answer gave."
    };
    (wait_ms) => {
        "If nothing new is there yet, wait up to this many milliseconds for output or exit."
    };
    (signal) => {
        "Signal to send first, e.g. \"TERM\" (default) or \"INT\"; survivors get SIGKILL after the grace period."
    };
    (grace_s) => {
        "Seconds to wait before SIGKILL."
    };
}
