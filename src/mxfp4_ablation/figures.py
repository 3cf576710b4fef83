"""Every figure of the study, registered by name, drawn from stored data alone.

A study module registers ``@figure("group/name", run="<notebook run name>")`` functions that take the
run folder a notebook wrote and return a matplotlib figure. Notebooks call :func:`render` right after
writing their data; ``make figures`` (``python -m mxfp4_ablation.figures``) redraws every figure from the
latest run of its notebook without compiling or measuring anything.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import plots, results

#: Study modules whose figures are registered on import.
STUDY_MODULES = ("mxfp4_ablation.studies.walkthrough", "mxfp4_ablation.studies.gemm", "mxfp4_ablation.studies.moe")


@dataclass(frozen=True)
class Figure:
    name: str
    run: str
    draw: Callable


FIGURES: dict[str, Figure] = {}


def figure(name: str, run: str):
    def register(func):
        FIGURES[name] = Figure(name, run, func)
        return func

    return register


def _load_studies() -> None:
    for module in STUDY_MODULES:
        importlib.import_module(module)


def render(name: str, run_dir: str | Path, root: str | Path | None = None) -> list[Path]:
    """Draw figure ``name`` from ``run_dir`` and save it (svg + png) under figures/."""
    import matplotlib.pyplot as plt

    _load_studies()
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r} (known: {', '.join(sorted(FIGURES))})")
    plots.apply_style()
    fig = FIGURES[name].draw(Path(run_dir))
    try:
        return plots.savefig(fig, name, root=root)
    finally:
        plt.close(fig)


def main() -> int:
    _load_studies()
    missing = 0
    for fig in FIGURES.values():
        run = results.latest_run(fig.run)
        if run is None:
            print(f"figures: {fig.name}: no run of {fig.run!r} yet (make reproduce writes one)")
            missing += 1
            continue
        for path in render(fig.name, run):
            print(f"figures: {path} <- {run.name}")
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
