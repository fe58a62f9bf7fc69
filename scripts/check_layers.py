#!/usr/bin/env python3
"""Checks the shape of the source tree (issue 20): no import cycles between modules, no
source file over 600 lines unless it says why, and no type whose inherent `impl` blocks are
spread over more than MAX_IMPL_FILES files (issue 36: that is how `Shard` became the whole
broker while the import check stayed green, since a child file adding methods to its
parent's type is not an import edge). The types that are spread wider today are listed in
SPREAD with their file count: a ratchet — the count may shrink (then lower it here), never grow.

Modules are compared where they are siblings: `crate::broker::shard::produce` using
`crate::broker::group::service` is an edge shard -> group inside `crate::broker`. A module
using its own ancestor (a child file adding `impl` blocks to its parent's type) is not an
edge. Every `crate::`, `super::` and `self::` path counts, in `use` lists and in code; comments
and doc comments do not. Exit status 1 with the cycles and the long files listed.

    python3 scripts/check_layers.py            # the whole workspace
"""

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (crate root file, crate name used in reports)
CRATES = [
    ("src/main.rs", "weir(bin)"),
    ("src/lib.rs", "weir(lib)"),
    ("storage/src/lib.rs", "weir-storage"),
]
MAX_LINES = 600
MAX_IMPL_FILES = 5
# (crate directory, type) -> files holding its inherent impl blocks today. Shard: issue 36
# moves the replica, fan-out and admin code off it. Log and its Inner: the storage engine's one
# type, split by concern (append, read, retention, recovery, compaction, ...: the file table of
# storage/DESIGN.md).
SPREAD = {("src", "Shard"): 13, ("storage/src", "Log"): 9, ("storage/src", "Inner"): 8}
IMPL = re.compile(r"^\s*impl\s*(?:<[^>{]*>)?\s*([\w:]+)(?:<[^{]*>)?\s*(?:where[^{]*)?\{", re.M)
REASON = re.compile(r"long because", re.I)

MOD_DECL = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
PATH_ATTR = re.compile(r"#\[path\s*=\s*\"([^\"]+)\"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def module_files(root_file):
    """Yields (module path tuple, file) for every module file reachable from a crate root."""
    out = []

    def walk(path, file, is_dir_owner):
        out.append((path, file))
        text = open(file, encoding="utf-8").read()
        base = os.path.dirname(file) if is_dir_owner else os.path.splitext(file)[0]
        seen = set()
        for rel, name in PATH_ATTR.findall(text):
            seen.add(name)
            walk(path + (name,), os.path.join(os.path.dirname(file), rel), False)
        for name in MOD_DECL.findall(strip_comments(text)):
            if name in seen:
                continue
            flat = os.path.join(base, name + ".rs")
            nested = os.path.join(base, name, "mod.rs")
            if os.path.exists(flat):
                walk(path + (name,), flat, False)
            elif os.path.exists(nested):
                walk(path + (name,), nested, True)

    walk((), root_file, True)
    return out


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]."""
    tree = tree.strip()
    depth = 0
    for i, ch in enumerate(tree):
        if ch == "{" and depth == 0:
            prefix = tree[:i]
            inner = tree[i + 1 : tree.rindex("}")]
            parts, d, start = [], 0, 0
            for j, c in enumerate(inner):
                if c == "{":
                    d += 1
                elif c == "}":
                    d -= 1
                elif c == "," and d == 0:
                    parts.append(inner[start:j])
                    start = j + 1
            parts.append(inner[start:])
            return [p for part in parts if part.strip() for p in expand_use(prefix + part.strip())]
    return [tree.split(" as ")[0].strip()]


def references(path, text, is_dir_owner):
    """Absolute module paths (tuples) this file names."""
    code = strip_comments(text)
    paths = []
    for stmt in re.findall(r"\buse\s+([^;]+);", code):
        paths.extend(expand_use(stmt))
    paths.extend(re.findall(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", code))
    here = path if is_dir_owner else path[:-1]  # the module `super`/`self` are relative to
    result = []
    for p in paths:
        segs = [s for s in p.split("::") if s]
        if not segs:
            continue
        if segs[0] == "crate":
            result.append(tuple(segs[1:]))
        elif segs[0] in ("super", "self"):
            base = list(path)
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
            result.append(tuple(base) + tuple(segs))
    del here
    return result


def resolve(target, modules):
    """The longest module path that prefixes `target` (the rest are items)."""
    for n in range(len(target), -1, -1):
        if target[:n] in modules:
            return target[:n]
    return ()


def find_cycles(edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            strong(v)
    return out


def main():
    problems = []
    for root_file, crate in CRATES:
        files = module_files(os.path.join(ROOT, root_file))
        modules = {p for p, _ in files}
        # level (parent path) -> child -> set(child)
        levels = defaultdict(lambda: defaultdict(set))
        why = {}
        for path, file in files:
            text = open(file, encoding="utf-8").read()
            owner = os.path.basename(file) in ("mod.rs", "lib.rs", "main.rs")
            for ref in references(path, text, owner):
                target = resolve(ref, modules)
                n = 0
                while n < min(len(path), len(target)) and path[n] == target[n]:
                    n += 1
                if n == len(path) or n == len(target):
                    continue  # one is the other's ancestor
                parent, a, b = path[:n], path[n], target[n]
                levels[parent][a].add(b)
                why.setdefault((parent, a, b), (os.path.relpath(file, ROOT), "::".join(ref)))
        for parent, edges in sorted(levels.items()):
            for comp in find_cycles(edges):
                where = "::".join(("crate",) + parent)
                lines = [f"{crate}: import cycle among {comp} in {where}:"]
                for a in comp:
                    for b in sorted(edges[a]):
                        if b in comp:
                            f, r = why[(parent, a, b)]
                            lines.append(f"    {a} -> {b}  ({f} names {r})")
                problems.append("\n".join(lines))
    for base in ("src", "storage/src"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, base)):
            for name in names:
                if not name.endswith(".rs"):
                    continue
                file = os.path.join(dirpath, name)
                text = open(file, encoding="utf-8").read()
                n = text.count("\n")
                head = "\n".join(text.splitlines()[:40])
                if n > MAX_LINES and not REASON.search(head):
                    problems.append(
                        f"{os.path.relpath(file, ROOT)}: {n} lines (> {MAX_LINES}) and no "
                        "'long because' reason in its first 40 lines"
                    )
    for base in ("src", "storage/src"):
        spread = defaultdict(set)
        for dirpath, _, names in os.walk(os.path.join(ROOT, base)):
            for name in names:
                if name.endswith(".rs"):
                    file = os.path.join(dirpath, name)
                    for ty in IMPL.findall(strip_comments(open(file, encoding="utf-8").read())):
                        spread[ty.split("::")[-1]].add(os.path.relpath(file, ROOT))
        for ty, files in sorted(spread.items()):
            allowed = SPREAD.get((base, ty), MAX_IMPL_FILES)
            if len(files) > allowed:
                problems.append(
                    f"{base}: `impl {ty}` blocks in {len(files)} files (at most {allowed}): "
                    + ", ".join(sorted(files))
                )
            elif (base, ty) in SPREAD and len(files) < allowed:
                problems.append(
                    f"{base}: `impl {ty}` is now in {len(files)} files: lower SPREAD[{(base, ty)!r}] "
                    f"in scripts/check_layers.py from {allowed} to {max(len(files), MAX_IMPL_FILES)}"
                    if len(files) > MAX_IMPL_FILES
                    else f"{base}: `impl {ty}` is now in {len(files)} files: drop it from SPREAD "
                    "in scripts/check_layers.py"
                )
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print(f"check_layers: no import cycles; every file over {MAX_LINES} lines says why; no type's impl "
          f"blocks in more than {MAX_IMPL_FILES} files (but {', '.join(t for _, t in SPREAD)}, see SPREAD)")


if __name__ == "__main__":
    main()
