"""The gfx950emu package's imports: no cycles between its modules (lazy imports inside functions count
too) and nothing of the study (``mxfp4_ablation``): the emulator is a package of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import gfx950emu

ROOT = Path(gfx950emu.__file__).parent


def _module_name(path: Path) -> str:
    parts = ("gfx950emu",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts}


def _imports(module: str, path: Path) -> set[str]:
    """The modules ``module`` imports: ``from . import x`` names the submodule x when there is one (else
    the package itself, whose names it reads); ``from .a import b`` the module a and, where b is a
    submodule, a.b too."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = {f"{base}.{alias.name}" for alias in node.names}
            subs = names & MODULES.keys()
            out |= subs
            if node.module or names - subs:
                out.add(base)
    return out


GRAPH = {m: {i for i in _imports(m, p) if i in MODULES and i != m} for m, p in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as the list of modules around it), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_checker_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_module_graph_is_read():
    assert {"gfx950emu.operands", "gfx950emu.memops", "gfx950emu.timing.cu"} <= MODULES.keys()
    assert "gfx950emu.operands" in GRAPH["gfx950emu.memops"]        # from .operands import ...
    assert "gfx950emu.timing" in GRAPH["gfx950emu.machine"]         # from . import timing (lazily)
    assert "gfx950emu" in GRAPH["gfx950emu.hip.server"]             # from .. import launch (lazily)


def test_no_import_cycle_in_the_package():
    assert _cycle(GRAPH) is None, " -> ".join(_cycle(GRAPH))


def test_the_emulator_imports_nothing_of_the_study():
    study = {m: sorted(i for i in _imports(m, p) if i.split(".")[0] == "mxfp4_ablation") for m, p in MODULES.items()}
    assert not {m: i for m, i in study.items() if i}
