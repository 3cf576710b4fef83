"""The GEMM's optimisation steps, one file each, in ladder order: ``NN_<switch>.py`` holds the step's
:class:`~mxfp4_ablation.family.Switch` record (``SWITCH``), the stage implementations it brings, and
``apply(slots)``, which puts them into the slot table (:class:`~..slots.Slots`).  The ladder is this
folder in NN order: adding a step is adding a file (and its test)."""

import importlib
from pathlib import Path


def _discover():
    steps = []
    for path in sorted(Path(__file__).parent.glob("[0-9][0-9]_*.py")):
        step = importlib.import_module(f"{__name__}.{path.stem}")
        if path.stem[3:] != step.SWITCH.name:
            raise ImportError(f"{path} declares switch {step.SWITCH.name!r}: name the file after it")
        steps.append(step)
    return tuple(steps)


STEPS = _discover()
