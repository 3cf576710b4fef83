"""The timing model's parameters: one data file, ``gfx950.toml`` (value, unit, source per entry)."""
from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path

PARAMS_FILE = Path(__file__).with_name("gfx950.toml")


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    out = {}
    for section, entries in raw.items():
        for key, entry in entries.items():
            if not isinstance(entry, dict) or "value" not in entry or "source" not in entry:
                raise ValueError(f"{path}: [{section}].{key} needs a value and a source")
            out[f"{section}.{key}"] = entry
    return out


def table(path: str | Path | None = None) -> dict:
    """``{"section.key": {"value", "unit", "source", ...}}`` of the parameter file."""
    return dict(_load(str(path or PARAMS_FILE)))


class Params:
    """Attribute access to the values: ``p.mfma_cycles_per_pass`` = ``[mfma].cycles_per_pass``."""

    def __init__(self, path=None, overrides: dict | None = None):
        self.table = table(path)
        vals = {k: e["value"] for k, e in self.table.items()}
        for k, v in (overrides or {}).items():
            if k not in vals:
                raise ValueError(f"unknown timing parameter {k!r}; known: {', '.join(sorted(vals))}")
            vals[k] = v
        self.values = vals
        for k, v in vals.items():
            setattr(self, k.replace(".", "_"), v)

    @property
    def version(self) -> str:
        return str(self.values["model.version"])
