#!/usr/bin/env python3
"""Prints the import loops between the modules of each crate, and exits 1 if there is one; and
counts each crate's upward imports.

Usage: scripts/import-loops.py [-v] [crates-dir]   (default: crates/ beside this script's folder;
       -v lists each upward import)

A module is a file (`src/a/b.rs` and `src/a/b/mod.rs` are `a::b`). An edge a -> b is any path
that starts in `a` and names `b`: `crate::b::...`, `super::...` resolved from `a`, and each
name inside a `use crate::{...}` group. Tests (`#[cfg(test)] mod tests { ... }` at the end of
a file) are left out: a test may reach anywhere. A module's own submodules are not an edge
from it (`mod x;` declares, it does not import), but a submodule that names its parent is.

An upward import is an edge a -> b where b is a proper ancestor of a: the crate root (`lib`,
`crate::Config`) or a module whose file declares a, directly or through a child of its
own (`cmd::rl_check` -> `cmd`, `http::check` -> `http`). The ancestor composes the module, so an
edge back up makes the two one unit: neither can be read, tested or moved without the other.
Edges to a sibling or to another top-level module are not upward (the tree says nothing of their
layering). Each crate's line gives the count and, in brackets, how many of them end at the crate
root: in sluice-node that is the composition root (`run`), which STYLE.md says nothing imports
back; in a library it is mostly re-exports (`crate::Nanos`), a path and not a layer. Counting is
not failing: only a loop exits 1.
"""

import os
import re
import sys


def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if f.endswith(".rs"):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, src)[:-3].split(os.sep)
                if rel[-1] in ("mod", "lib", "main"):
                    rel = rel[:-1]
                mods["::".join(rel)] = path
    return mods


def expand_groups(text):
    """`crate::{a, b::c, d::{e, f}}` -> `crate::a crate::b::c crate::d::e crate::d::f`."""
    out = []
    for m in re.finditer(r"\b(crate|super(?:::super)*)::((?:[A-Za-z0-9_]+::)*)\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        inner = text[m.end() : i - 1]
        prefix = m.group(1) + "::" + m.group(2)
        for part in split_top(inner):
            part = part.strip()
            if part and part != "self":
                out.append(prefix + part)
            elif part == "self":
                out.append(prefix.rstrip(":"))
    return out


def split_top(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    flat = []
    for p in parts:
        if "{" in p:
            head, _, body = p.partition("{")
            for q in split_top(body.rsplit("}", 1)[0]):
                flat.append(head.strip() + q.strip())
        else:
            flat.append(p)
    return flat


def resolve(path, here, mods):
    """The module that `path` (crate::..., super::...) names, seen from module `here`."""
    parts = path.split("::")
    if parts[0] == "crate":
        base, rest = [], parts[1:]
    else:
        base = here.split("::") if here else []
        rest = parts
        while rest and rest[0] == "super":
            base = base[:-1]
            rest = rest[1:]
    full = base + rest
    for k in range(len(full), -1, -1):
        name = "::".join(full[:k])
        if name in mods:
            return name
    return None


def edges_of(crate_src):
    mods = modules(crate_src)
    edges = {}
    for m, path in mods.items():
        text = open(path, errors="ignore").read()
        text = re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)
        # A doc link (`[`crate::a`]`, `[text](crate::a)`) names a module as an import does.
        links = re.findall(r"[\[(]`?((?:crate|super(?:::super)*)::[A-Za-z0-9_:]*[A-Za-z0-9_])`?[\])]", text)
        text = re.sub(r"//[^\n]*", "", text)
        paths = links + re.findall(r"\b(?:crate|super(?:::super)*)::[A-Za-z0-9_:]*[A-Za-z0-9_]", text)
        paths += expand_groups(text)
        for p in paths:
            t = resolve(p, m, mods)
            if t is None or t == m:
                continue
            # A parent declaring its children is not an import.
            if t.startswith(m + "::") if m else True:
                continue
            edges.setdefault(m, set()).add(t)
    return mods, edges


def upward(edges):
    """The upward edges (see the module's doc), as (from, to) pairs, sorted."""
    out = []
    for a, targets in edges.items():
        parts = a.split("::")
        ancestors = {"::".join(parts[:k]) for k in range(len(parts))}
        out.extend((a, b) for b in targets if b in ancestors)
    return sorted(out)


def loops(mods, edges):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def scc(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                scc(w)
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

    for v in mods:
        if v not in index:
            scc(v)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    args = sys.argv[1:]
    verbose = "-v" in args
    args = [a for a in args if a != "-v"]
    crates = args[0] if args else os.path.join(here, "..", "crates")
    found = False
    for crate in sorted(os.listdir(crates)):
        src = os.path.join(crates, crate, "src")
        if not os.path.isdir(src):
            continue
        mods, edges = edges_of(src)
        for comp in loops(mods, edges):
            found = True
            names = ", ".join(m or "lib" for m in comp)
            print(f"{crate}: {len(comp)} modules import each other: {names}")
        up = upward(edges)
        to_root = sum(1 for _, b in up if b == "")
        print(
            f"{crate}: {len(mods)} modules, {sum(len(e) for e in edges.values())} imports, "
            f"{len(up)} upward ({to_root} to the crate root)"
        )
        if verbose:
            for a, b in up:
                print(f"  {a} -> {b or 'lib'}")
    if found:
        sys.exit(1)
    print("no import loops")


if __name__ == "__main__":
    main()
