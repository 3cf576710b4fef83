"""Shapes, seeds and regimes as data: the loader of ``experiments/shapes.toml``.

The file has one table per *group* of kernel families (``gemm``; ``moe`` for ``moe1`` and ``moe2``):
``families``, ``params`` (the order of a shape's numbers), ``seeds``, optional ``regimes`` (name ->
``block_m``), ``models`` (named problem sizes), and named ``sets``; a set is a plain list of shapes
(``shapes = [...]``) or one list per regime (``decode = [...]``, ``prefill = [...]``). ``[names]``
maps a name to one shape, for ``--shape NAME``.

    >>> shapes.cases("gemm", "device")            # [Case(shape=(8192, 8192, 8192), regime=None), ...]
    >>> shapes.by_regime("moe1", "isa")           # {"decode": [(16, 385, ...)], "prefill": [...]}
    >>> shapes.resolve("kimi-decode")             # (16, 385, 7168, 512, 9, 16)

Families may be named instead of groups. The file is checked on load (lengths, positive integers, a
regime's ``block_m``); a broken file is one ``ShapesError`` naming the file and the key.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project pins Python 3.11
    import tomli as tomllib

from . import paths
from .errors import UsageError

#: The committed shapes file.
SHAPES_FILE = paths.REPO_ROOT / "experiments" / "shapes.toml"


class ShapesError(ValueError):
    """The shapes file is malformed (names the file and the key)."""


@dataclass(frozen=True)
class Case:
    """One shape of a set; ``regime`` is None in a set without regimes."""

    shape: tuple[int, ...]
    regime: str | None = None

    @property
    def text(self) -> str:
        return ",".join(map(str, self.shape))


@functools.lru_cache(maxsize=4)
def _load(path: str) -> dict[str, Any]:
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text())
    except FileNotFoundError:
        raise ShapesError(f"no shapes file at {file}") from None
    except tomllib.TOMLDecodeError as err:
        raise ShapesError(f"{file}: {err}") from None
    _check(data, file)
    return data


def load(path: str | Path | None = None) -> dict[str, Any]:
    """The parsed, checked file (cached; pass ``path`` to read another)."""
    return _load(str(Path(path) if path is not None else SHAPES_FILE))


def _check(data: dict, file: Path) -> None:
    def fail(key: str, why: str):
        raise ShapesError(f"{file}: [{key}] {why}")

    groups = {k: v for k, v in data.items() if k != "names"}
    seen: dict[str, str] = {}
    for gname, g in groups.items():
        if not isinstance(g, dict):
            fail(gname, "must be a table")
        for key in ("families", "params", "seeds", "sets"):
            if key not in g:
                fail(gname, f"lacks {key!r}")
        for fam in g["families"]:
            if fam in seen:
                fail(gname, f"family {fam!r} is already in group {seen[fam]!r}")
            seen[fam] = gname
        regimes = g.get("regimes", {})
        n = len(g["params"])
        for sname, s in g["sets"].items():
            key = f"{gname}.sets.{sname}"
            lists = {k: v for k, v in s.items() if k != "note"}
            if not lists:
                fail(key, "holds no shapes")
            for rname, shapes in lists.items():
                if rname != "shapes" and rname not in regimes:
                    fail(key, f"{rname!r} is neither 'shapes' nor a regime ({', '.join(regimes) or 'none'})")
                for shape in shapes:
                    if not (isinstance(shape, list) and shape
                            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in shape)):
                        fail(key, f"shape {shape!r} must be a list of positive integers")
                    if len(shape) > n:
                        fail(key, f"shape {shape!r} has more numbers than {', '.join(g['params'])}")
                    if rname in regimes:
                        if len(shape) != n:
                            fail(key, f"shape {shape!r} of regime {rname} needs all of {', '.join(g['params'])}")
                        if shape[g["params"].index("block_m")] != regimes[rname]["block_m"]:
                            fail(key, f"shape {shape!r} of regime {rname} must have block_m "
                                      f"{regimes[rname]['block_m']}")
    for name, shape in data.get("names", {}).items():
        if not (isinstance(shape, list) and shape and all(isinstance(x, int) and x > 0 for x in shape)):
            fail(f"names.{name}", f"{shape!r} must be a list of positive integers")


def _group(name: str, data: dict) -> tuple[str, dict]:
    groups = {k: v for k, v in data.items() if k != "names"}
    if name in groups:
        return name, groups[name]
    for gname, g in groups.items():
        if name in g["families"]:
            return gname, g
    known = sorted(set(groups) | {f for g in groups.values() for f in g["families"]})
    raise UsageError(f"no shapes for {name!r} (known: {', '.join(known)})")


def group(name: str, path: str | Path | None = None) -> dict[str, Any]:
    """A group's table (by group or family name)."""
    return _group(name, load(path))[1]


def set_names(name: str, path: str | Path | None = None) -> list[str]:
    return list(group(name, path)["sets"])


def cases(name: str, set_name: str, path: str | Path | None = None) -> list[Case]:
    """Every shape of one set, in file order (regime by regime for a set with regimes)."""
    gname, g = _group(name, load(path))
    if set_name not in g["sets"]:
        raise UsageError(f"no shape set {set_name!r} for {gname} (sets: {', '.join(g['sets'])})")
    out = []
    for rname, shapes in g["sets"][set_name].items():
        if rname == "note":
            continue
        out += [Case(tuple(s), None if rname == "shapes" else rname) for s in shapes]
    return out


def shapes(name: str, set_name: str, path: str | Path | None = None) -> list[tuple[int, ...]]:
    """The shapes of one set, without their regimes."""
    return [c.shape for c in cases(name, set_name, path)]


def by_regime(name: str, set_name: str, path: str | Path | None = None) -> dict[str, list[tuple[int, ...]]]:
    """A set with regimes as ``regime -> [shape]`` (UsageError for a set without regimes)."""
    out: dict[str, list[tuple[int, ...]]] = {}
    for c in cases(name, set_name, path):
        if c.regime is None:
            raise UsageError(f"shape set {set_name!r} of {name} has no regimes")
        out.setdefault(c.regime, []).append(c.shape)
    return out


def note(name: str, set_name: str, path: str | Path | None = None) -> str:
    cases(name, set_name, path)  # the error for an unknown set
    return group(name, path)["sets"][set_name].get("note", "")


def seeds(name: str, path: str | Path | None = None) -> list[int]:
    return list(group(name, path)["seeds"])


def regimes(name: str, path: str | Path | None = None) -> dict[str, dict]:
    """Regime name -> its table (``block_m``); empty for a group without regimes."""
    return dict(group(name, path).get("regimes", {}))


def model(name: str, model_name: str, path: str | Path | None = None) -> dict[str, Any]:
    models = group(name, path).get("models", {})
    if model_name not in models:
        raise UsageError(f"no model {model_name!r} for {name} (models: {', '.join(models) or 'none'})")
    return dict(models[model_name])


def resolve(text: str, path: str | Path | None = None) -> tuple[int, ...]:
    """A ``--shape`` argument: a name from ``[names]`` or comma-separated positive integers."""
    names = load(path).get("names", {})
    if text in names:
        return tuple(names[text])
    from .variants import parse_shape

    try:
        return parse_shape(text)
    except ValueError:
        raise UsageError(f"shape {text!r} is neither comma-separated positive integers (e.g. 512,512,1024) "
                         f"nor a named shape ({', '.join(names)})") from None


def main(argv: list[str] | None = None) -> int:
    """``python -m mxfp4_ablation.shapes``: check the file and print every set."""
    data = load(argv[0] if argv else None)
    for gname, g in data.items():
        if gname == "names":
            continue
        print(f"[{gname}] families={','.join(g['families'])} params={','.join(g['params'])} seeds={g['seeds']}")
        for sname in g["sets"]:
            print(f"  {sname}: " + "  ".join(f"{c.regime + ':' if c.regime else ''}{c.text}"
                                             for c in cases(gname, sname, argv[0] if argv else None)))
    print("names: " + ", ".join(data.get("names", {})))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
