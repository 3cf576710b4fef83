"""The correctness section: every check of a variant (:func:`verify_table`, through
:func:`mxfp4_ablation.runner.verify`: the emulator off-device, the GPU on an MI355X) and one row per
variant with the study's gate verdict (:func:`correctness_overview`)."""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import pandas as pd

#: The verify table's columns (the MoE study puts ``regime`` first).
VERIFY_COLUMNS = ["variant", "shape", "seed", "backend", "status", "passed", "cosine", "max_abs_err", "hazards",
                  "seconds", "error"]


def verify_table(study, names: Iterable[str], cases: dict, seeds: Sequence[int], mode: str) -> pd.DataFrame:
    """:func:`mxfp4_ablation.runner.verify` for each variant x regime x shape x seed.

    ``status`` is ``passed`` / ``FAILED`` / ``not run`` (static mode, or the runner cannot run this
    kernel yet: ``error`` says why). A failed check is recorded, not raised, so the table shows it.
    """
    names = list(names)
    for n in names:
        study.variant(n)
    cols = (["regime"] if study.regimed else []) + VERIFY_COLUMNS
    rows = []
    backend = "device" if mode == "device" else "emulator"
    for regime, shapes in cases.items():
        if mode == "static":
            rows += [{"regime": regime, "variant": n, "shape": "", "seed": -1, "backend": "none",
                      "status": "not run", "error": "static mode: no emulator and no gfx950 GPU"} for n in names]
            continue
        from .. import runner

        for n in names:
            for shape in shapes:
                for seed in seeds:
                    row = {"regime": regime, "variant": n, "shape": study.spec.shape_text(shape),
                           "seed": int(seed), "backend": backend}
                    try:
                        res = runner.verify(n, tuple(shape), backend=backend, seed=int(seed))
                    except (ValueError, NotImplementedError, ImportError) as err:
                        row.update(status="not run",
                                   error=str(err).splitlines()[0] if str(err) else type(err).__name__)
                    else:
                        row.update(status="passed" if res["passed"] else "FAILED", passed=bool(res["passed"]),
                                   cosine=res.get("cosine"), max_abs_err=res.get("max_abs_err"),
                                   hazards=res.get("hazards"), seconds=res.get("seconds"), error="")
                    rows.append(row)
    return pd.DataFrame(rows, columns=cols)

def correctness_overview(study, checks) -> pd.DataFrame:
    """One row per variant (in family order, only those checked): checks run / passed, coverage,
    worst cosine, total hazards, and the family's gate verdict (``status``)."""
    lead = [study.spec.label_column] if study.spec.label_column else []
    cols = lead + ["variant", "checks", "passed", study.spec.coverage_column, "min_cosine", "hazards", "status"]
    if isinstance(checks, list):
        checks = pd.concat(checks, ignore_index=True) if checks else pd.DataFrame(columns=["variant", "status"])
    if not len(checks):
        return pd.DataFrame(columns=cols)
    rows = []
    for name, v in study.variants().items():
        if name not in set(checks["variant"]):
            continue
        sub = checks[checks["variant"] == name]
        ran = sub[sub["status"] != "not run"]
        npass = int((ran["status"] == "passed").sum())
        coverage, gate = study.spec.gate(ran, study)
        status = "not run" if ran.empty else "FAILED" if npass < len(ran) else gate
        row = {"variant": name, "checks": int(len(ran)), "passed": npass, study.spec.coverage_column: coverage,
               "min_cosine": float(ran["cosine"].min()) if not ran.empty else math.nan,
               "hazards": float(ran["hazards"].sum()) if not ran.empty else math.nan, "status": status}
        if study.spec.label_column:
            row[study.spec.label_column] = study.spec.families[v.family]
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)
