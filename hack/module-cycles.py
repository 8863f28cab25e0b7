#!/usr/bin/env python3
"""Import cycles between sibling modules, per crate of the workspace.

A module uses a sibling when its product code names a path through it (`crate::a::b::X`,
`super::b::X`, `self::c::X`); a use of a module inside a sibling counts as a use of that sibling
(devices::irq naming devices::virtio::worker uses devices::virtio). A parent and its children may
use each other (a parent re-exports, a child names its parent's types). Test code does not count:
files named tests.rs, *_tests.rs, test_utils.rs, fixtures.rs, kvm_tests.rs, and a file's tail from
its first `#[cfg(test)]` or `#[cfg(all(test, ...))]`. Binaries under src/bin are left out.

Usage: hack/module-cycles.py [REPO]   Prints each cycle; exits 1 when there is one.
"""
import os
import re
import subprocess
import sys

TEST_FILES = {"tests.rs", "test_utils.rs", "fixtures.rs", "kvm_tests.rs"}
TEST_TAIL = re.compile(r"^#\[cfg\((?:test|all\(test\b)", re.M)
PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")


def module_of(src, path):
    parts = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if parts[0] == "bin":
        return None
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def product_modules(src):
    modules = {}
    for directory, _, names in os.walk(src):
        for name in names:
            if not name.endswith(".rs") or name in TEST_FILES or name.endswith("_tests.rs"):
                continue
            path = os.path.join(directory, name)
            module = module_of(src, path)
            if module is None:
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            tail = TEST_TAIL.search(text)
            if tail:
                text = text[: tail.start()]
            modules[module] = re.sub(r"//[^\n]*", "", text)
    return modules


def sibling_edges(modules):
    def longest_known(parts):
        for k in range(len(parts), 0, -1):
            if tuple(parts[:k]) in modules:
                return tuple(parts[:k])
        return None

    edges = set()
    for module, text in modules.items():
        for m in PATH.finditer(text):
            rest = m.group(2).split("::")[1:]
            if m.group(1) == "crate":
                base = []
            elif m.group(1) == "self":
                base = list(module)
            else:
                base = list(module[:-1])
                while rest and rest[0] == "super":
                    base, rest = base[:-1], rest[1:]
            target = longest_known(base + rest)
            if target is None or target == module:
                continue
            k = 0
            while k < min(len(module), len(target)) and module[k] == target[k]:
                k += 1
            if k in (len(module), len(target)):
                continue  # an ancestor or a descendant
            edges.add((module[: k + 1], target[: k + 1]))
    return edges


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    manifests = subprocess.check_output(["git", "-C", repo, "ls-files", "*Cargo.toml"], text=True)
    crates = sorted(
        os.path.dirname(m) for m in manifests.split() if os.path.isdir(os.path.join(repo, os.path.dirname(m), "src"))
    )
    count = 0
    for crate in crates:
        for component in cycles(sibling_edges(product_modules(os.path.join(repo, crate, "src")))):
            count += 1
            print(f"{crate or '.'}: " + " <-> ".join("::".join(m) for m in component))
    print(f"module-cycles: {count} cycle(s) between sibling modules in {len(crates)} crates")
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main())
