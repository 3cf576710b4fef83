"""No import cycles in our packages: the graph of which module imports which (lazy imports inside
functions count too, as they do for the notebook dependency rules) has no cycle, so the layers really
go one way (formats/reference -> kernels -> toolchain -> isa -> runner -> results -> studies -> notebooks)."""

from __future__ import annotations

import ast

import pytest

from mxfp4_ablation import sources


def _modules(package: str) -> dict[str, tuple]:
    out = {}
    for path in sorted((sources.SRC / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(sources.SRC).with_suffix("")
        is_package = path.name == "__init__.py"
        out[".".join(rel.parts[:-1] if is_package else rel.parts)] = (path, is_package)
    return out


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ours ``tree`` imports: ``from pkg import name`` is ``pkg.name`` when that is a
    module (importing a submodule is not importing the package's own names), else ``pkg``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in out if m in known and m != module}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


@pytest.mark.parametrize("package", ["mxfp4_ablation"])
def test_no_import_cycles(package):
    modules = _modules(package)
    known = set(modules)
    graph = {name: _imports(ast.parse(path.read_text(), str(path)), name, is_package, known)
             for name, (path, is_package) in modules.items()}
    assert not _cycles(graph), f"import cycles in {package}: {_cycles(graph)}"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
