"""The studies: one generic engine (:mod:`.engine`), configured once per kernel family.

* :mod:`.engine` -- :class:`~.engine.Study` (correctness, static metrics, expectations, speed, fidelity);
* :mod:`.tables` -- pure table functions; :mod:`.speed` -- measured / modelled / published speed;
* :mod:`.views` -- the figures (from stored tables alone); :mod:`.readme` -- the README's tables;
* the modelled section: :mod:`.modelled_runs` (timing-model points), :mod:`.modelled_tables` (pure
  tables), :mod:`.modelled_figures`, :mod:`.modelled_section` (a step's and the summary's section, its
  README block);
* :mod:`.step_notebook` -- the step notebooks' template and section cells;
* :mod:`.cli` -- ``python -m mxfp4_ablation.studies ...``;
* :mod:`.gemm`, :mod:`.moe` -- the two configurations; :mod:`.harness`, :mod:`.walkthrough` -- the
  figures of the harness-validation and walkthrough notebooks.

Adding a family is one kernel module plus one entry in :data:`STUDIES` (and its configuration module).
"""

from __future__ import annotations

import importlib

#: Study name -> configuration module (each defines ``STUDY``, ``VIEW``).
STUDIES = {"gemm": "mxfp4_ablation.studies.gemm", "moe": "mxfp4_ablation.studies.moe"}
#: Run name of ``notebooks/summary.py`` (its tables feed the summary figures and the README tables).
SUMMARY_RUN = "summary"


def get(name: str):
    """The :class:`~.engine.Study` called ``name``."""
    if name not in STUDIES:
        from .tables import StudyError

        raise StudyError(f"unknown study {name!r} (known: {', '.join(STUDIES)})")
    return importlib.import_module(STUDIES[name]).STUDY


def study_of(family: str):
    """The :class:`~.engine.Study` whose configuration holds kernel family ``family``."""
    for name in STUDIES:
        study = get(name)
        if family in study.spec.families:
            return study
    from .tables import StudyError

    raise StudyError(f"no study holds kernel family {family!r}")
