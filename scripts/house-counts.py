#!/usr/bin/env python3
"""Counts what docs/ARCHITECTURE.md's house rules bound (issue 49): files
over 800 lines and functions over 80 lines in crates/*/src (tests and the
bench excluded), as `scripts/house-counts.py [--list]` prints them; and
the synchronisation primitives in a session's shared part (the fields of
`Session`, and of its `Restarts`, whose type is a lock, a channel's
sender, an atomic, a once-cell or a `Notify`), and the files
that change a session's state (through its lock or its view); and the places a
session's code (session.rs, session/) calls into the registry: a closure
it was handed (a field or parameter of an `Fn` type) or a name of the
registry's (it reports to the registry instead, `session::Report`); and
the places a session is made (`Session::new`) or put in the table
(`table().insert`): its ways in (a restart makes none: the next run
becomes the session's, `Session::begin_run`); and the places its end is
recorded (`mark_exited`).

A function's length is from its `fn` line to its closing brace, found by
matching braces outside strings, chars and comments: a reader's count, not
a compiler's (a `fn` inside a macro is counted as one)."""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FILE_LIMIT, FN_LIMIT = 800, 80


def code_only(text: str) -> str:
    """The text with comments, strings and char literals blanked (lines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and re.search(r"(?<![A-Za-z0-9_])b?$", text[max(0, i - 2):i]) is not None:
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = '"' + hashes
            j = text.find(end, i + 2 + len(hashes))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1])); i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'", text[i:i + 12]):
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            out.append(" " * len(m.group(0))); i += len(m.group(0))
        else:
            out.append(c); i += 1
    return "".join(out)


def functions(path: pathlib.Path):
    code = code_only(path.read_text())
    for m in re.finditer(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)", code):
        open_at = code.find("{", m.end())
        semi = code.find(";", m.end())
        if open_at < 0 or (0 <= semi < open_at):
            continue  # a declaration without a body
        depth, i = 0, open_at
        while i < len(code):
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        start = code.count("\n", 0, m.start()) + 1
        end = code.count("\n", 0, i) + 1
        yield m.group(1), start, end - start + 1


PRIMITIVE = re.compile(
    r"\b(Mutex|RwLock|watch::Sender|Atomic[A-Za-z0-9]+|OnceLock|OnceCell|Notify)\b"
)


def primitives(path: pathlib.Path, struct: str) -> list[str]:
    """The fields of `struct` in `path` whose type is a primitive."""
    code = code_only(path.read_text())
    m = re.search(r"\bstruct\s+" + struct + r"\s*\{", code)
    body = code[m.end():code.index("\n}", m.end())]
    fields = re.findall(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?([a-z_]+):\s*([^\n]+)", body, re.M)
    return [name for name, ty in fields if PRIMITIVE.search(ty)]


CALLBACK = re.compile(r"\b(dyn\s+Fn(Mut|Once)?|impl\s+Fn(Mut|Once)?)\s*\(\s*(Arc<Session>|WatchOutcome)|\bRegistry\b")


def callbacks(paths: list[pathlib.Path]) -> list[str]:
    """`file:line` of each call path from a session's code into the registry."""
    found = []
    for path in paths:
        code = code_only(path.read_text())
        for m in CALLBACK.finditer(code):
            found.append(f"{path.relative_to(ROOT)}:{code.count(chr(10), 0, m.start()) + 1}")
    return found


def main() -> None:
    sources = [
        p for p in sorted(ROOT.glob("crates/*/src/**/*.rs"))
        if "procd-bench" not in p.parts
    ]
    long_files = [(p, len(p.read_text().splitlines())) for p in sources]
    long_files = [(p, n) for p, n in long_files if n > FILE_LIMIT]
    long_fns = []
    for p in sources:
        # Unit tests in a file's `mod tests` are tests.
        text = p.read_text()
        cut = text.find("#[cfg(test)]")
        test_from = text.count("\n", 0, cut) + 1 if cut >= 0 else 10**9
        for name, line, length in functions(p):
            if length > FN_LIMIT and line < test_from:
                long_fns.append((p, name, line, length))
    print(f"files over {FILE_LIMIT} lines: {len(long_files)}")
    print(f"functions over {FN_LIMIT} lines: {len(long_fns)}")
    core = ROOT / "crates/procd-core/src"
    shared = [("Session", core / "session.rs"), ("Restarts", core / "session/spec.rs")]
    every = []
    for struct, path in shared:
        names = primitives(path, struct)
        every += names
        print(f"synchronisation primitives in {struct}: {len(names)} ({', '.join(names)})")
    print(f"synchronisation primitives in a session's shared part: {len(every)} ({', '.join(every)})")
    # A session's changing fields are private to session.rs; a change is
    # a write through its lock or its view's sender.
    changers = sorted({
        str(p.relative_to(ROOT)) for p in sources
        if re.search(r"\.core\(\)|\bview\s*\.\s*send", code_only(p.read_text()))
    })
    print(f"files that change a session's state: {len(changers)} {' '.join(changers)}".rstrip())
    session_code = [core / "session.rs", *sorted((core / "session").glob("*.rs"))]
    calls = callbacks(session_code)
    print(f"calls from a session's code into the registry: {len(calls)} {' '.join(calls)}".rstrip())
    for label, pattern in [
        ("places a session is made", r"\bSession::new\("),
        ("places a session is put in the table", r"\btable\(\)\s*\.insert\("),
        ("places a session's end is recorded", r"\.mark_exited\("),
    ]:
        found = []
        for p in sources:
            code = code_only(p.read_text())
            # Unit tests make sessions of their own.
            code = code[:code.find("#[cfg(test)]")] if "#[cfg(test)]" in code else code
            for m in re.finditer(pattern, code):
                found.append(f"{p.relative_to(ROOT)}:{code.count(chr(10), 0, m.start()) + 1}")
        print(f"{label}: {len(found)} {' '.join(found)}".rstrip())
    if "--list" in sys.argv:
        for p, n in long_files:
            print(f"  {p.relative_to(ROOT)}: {n} lines")
        for p, name, line, length in sorted(long_fns, key=lambda f: -f[3]):
            print(f"  {p.relative_to(ROOT)}:{line} {name}: {length} lines")


if __name__ == "__main__":
    main()
