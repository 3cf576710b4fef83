"""The GEMM's optimisation steps, one file each, in ladder order: ``NN_<switch>.py`` holds the step's
:class:`~mxfp4_ablation.family.Switch` record (``SWITCH``), the stage implementations it brings, and
``apply(slots)``, which puts them into the slot table (:class:`~..slots.Slots`).  The ladder is this
folder in NN order: adding a step is adding a file (and its test).  A step file acts only through
``apply`` (importing it changes nothing), so a build runs the files of its switched-on steps alone
(:func:`unused_files`)."""

import importlib
import re
from pathlib import Path
from typing import Iterable


def _discover():
    steps = []
    for path in sorted(Path(__file__).parent.glob("[0-9][0-9]_*.py")):
        step = importlib.import_module(f"{__name__}.{path.stem}")
        if path.stem[3:] != step.SWITCH.name:
            raise ImportError(f"{path} declares switch {step.SWITCH.name!r}: name the file after it")
        steps.append(step)
    return tuple(steps)


STEPS = _discover()


def unused_files(on: Iterable[str]) -> set[Path]:
    """The step files a build with the switches ``on`` does not run: those of the steps that are off,
    less any that a switched-on step's file names (a step may build on another's stages, as
    ``07_zero_first_k`` on ``01_agpr_acc``'s)."""
    files = {step.SWITCH.name: Path(step.__file__) for step in STEPS}
    used = {files[name] for name in on}
    named = {m for f in used for m in re.findall(r"\b\d\d_\w+", f.read_text())}
    return {f for f in files.values() if f not in used and f.stem not in named}
