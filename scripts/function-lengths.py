#!/usr/bin/env python3
"""scripts/function-lengths.py: no hand-written Swift function over 60 lines (make check).

Usage:  scripts/function-lengths.py [--limit N] [--report] DIR...

Counts each function's and initializer's lines, from the line of its `func`/`init` keyword to
the line of its closing brace, in every .swift file under DIR. Exits 1, naming FILE:LINE and the
count, for each one over the limit (60), unless the line before the declaration says
`// function-length: exempt (WHY)` (a hash's unrolled compression). `--report` prints every
function's length, longest first, and exits 0.

A small scanner, not a parser: string literals (one-line and multi-line), comments and
character escapes are skipped; a declaration without a body (a protocol requirement) is
recognised by the next declaration or closing brace coming before its opening brace.
"""
import os
import re
import sys

DECL = re.compile(r"^\s*(?:@[\w.]+(?:\([^)]*\))?\s+)*(?:(?:public|package|private|fileprivate|internal|open|static|class|"
                  r"mutating|nonmutating|override|final|convenience|required|nonisolated|dynamic|indirect)(?:\([^)]*\))?\s+)*"
                  r"(?:func\s|init[?!]?\s*[(<]|deinit\b|subscript\s*[(<])")
ENDS_PENDING = re.compile(r"^\s*(?:}|(?:@[\w.]+\s+)*(?:public\s+|static\s+|package\s+)*(?:func|var|let|case|init|"
                          r"associatedtype|typealias|subscript)\b)")
EXEMPT = "// function-length: exempt"


def code_of(line, state):
    """The line without comments and string contents; `state` carries an open multi-line string."""
    out = []
    i = 0
    while i < len(line):
        if state["multiline"]:
            end = line.find('"""', i)
            if end < 0:
                return "".join(out)
            state["multiline"] = False
            i = end + 3
            continue
        if line.startswith("//", i):
            break
        if line.startswith('"""', i):
            state["multiline"] = True
            i += 3
            continue
        c = line[i]
        if c == '"':
            i += 1
            while i < len(line) and line[i] != '"':
                i += 2 if line[i] == "\\" else 1
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    """(first line, length, declaration) of each function with a body in `path`."""
    lines = open(path, encoding="utf-8").read().split("\n")
    state = {"multiline": False}
    depth = 0
    open_functions = []   # (depth at its declaration, first line, text) awaiting or inside a body
    pending = None        # a declaration whose opening brace has not come yet
    found = []
    for number, raw in enumerate(lines, 1):
        was_multiline = state["multiline"]
        code = code_of(raw, state)
        if not was_multiline and DECL.match(code):
            exempt = number >= 2 and EXEMPT in lines[number - 2]
            pending = (depth, number, raw.strip()[:100], exempt)
        elif pending and ENDS_PENDING.match(code) and "{" not in code:
            pending = None  # the last one had no body
        for c in code:
            if c == "{":
                if pending and pending[0] == depth:
                    open_functions.append(pending)
                    pending = None
                depth += 1
            elif c == "}":
                depth -= 1
                if open_functions and open_functions[-1][0] == depth:
                    start_depth, first, text, exempt = open_functions.pop()
                    if not exempt:
                        found.append((first, number - first + 1, text))
    return found


def main(argv):
    limit = 60
    report = False
    dirs = []
    args = iter(argv)
    for a in args:
        if a == "--limit":
            limit = int(next(args))
        elif a == "--report":
            report = True
        else:
            dirs.append(a)
    if not dirs:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    every = []
    for d in dirs:
        for root, _, files in os.walk(d):
            for f in sorted(files):
                if f.endswith(".swift"):
                    p = os.path.join(root, f)
                    every += [(length, p, first, text) for first, length, text in functions(p)]
    every.sort(reverse=True)
    if report:
        for length, p, first, text in every:
            print(f"{length:4d} {p}:{first} {text}")
        return 0
    over = [e for e in every if e[0] > limit]
    for length, p, first, text in over:
        print(f"{p}:{first}: {length} lines (more than {limit}): {text}", file=sys.stderr)
    if over:
        print(f"function-lengths: {len(over)} function(s) over {limit} lines: split them", file=sys.stderr)
        return 1
    print(f"function-lengths: {len(every)} functions, none over {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
