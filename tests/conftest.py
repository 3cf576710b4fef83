"""pytest takes ``src/`` from the checkout it runs in -- not from wherever the venv's editable install
points (a copied or moved checkout, or another worktree sharing a venv) -- and so do the subprocesses
the tests start (``PYTHONPATH``)."""

import os
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
if sys.path[:1] != [SRC]:
    sys.path.insert(0, SRC)
os.environ["PYTHONPATH"] = os.pathsep.join([SRC] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                    if p and p != SRC])
for name in [m for m in sys.modules if m == "mxfp4_ablation" or m.startswith(("mxfp4_ablation.", "gfx950emu"))]:
    if not str(getattr(sys.modules[name], "__file__", "") or "").startswith(SRC):
        del sys.modules[name]  # imported from elsewhere before this file ran (a plugin): take ours
