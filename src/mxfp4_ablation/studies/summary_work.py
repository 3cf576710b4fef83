"""The summary's expensive work, done first, spread over the sweep engine's Dask cluster.

The summary notebook's sections (each study's report, modelled section and attribution) run one after
another in the notebook's process, and each is mostly compiles, emulator runs and timing-model points.
All three are cached on disk by content (:mod:`mxfp4_ablation.toolchain`, ``runner._emulate``,
:mod:`mxfp4_ablation.modelled`), never by who computed them, so :func:`prefetch` runs that work first as
one sweep (:func:`.sweep.run`: one worker process per core by default) and the sections then read it from
the caches: the same tables and figures, with the machine's cores busy instead of one.

:func:`plan` lists the tasks from the functions the sections themselves plan with (the variants and ISA
shapes of :meth:`.engine.Study.summary_report`, :func:`.modelled_section.summary_plan`,
:func:`.attribution.study_plans`, :func:`mxfp4_ablation.fidelity.compile_requests`), so the two cannot
drift apart; a task the sections do not need is only wasted time, never a wrong number.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .sweep import Task


def plan(study_names: Sequence[str], mode: str, *, cases: Mapping[str, tuple[Any, Any]] | None = None,
         verify_leave_one_out: bool = True, fidelity: bool = True, modelled: bool = True,
         attribution: bool = True, attribution_pairs: Mapping[str, int] | None = None) -> list[Task]:
    """The summary's tasks for ``study_names``: compile every variant at the ISA shapes (and, with
    ``fidelity``, the first and last rungs at the seeds' shapes), verify the leave-one-out variants
    (emulated mode), model the modelled section's points and the attribution's subsets.
    ``cases``: per study ``(isa_cases, cases)`` as :meth:`.engine.Study.summary_report` takes them;
    ``attribution_pairs``: per study the sampled orderings' pairs (default: the attribution's)."""
    from .. import fidelity as fid
    from . import attribution as attr
    from . import get, modelled_section

    todo: list[Task] = []
    for name in study_names:
        study = get(name)
        isa_cases, run_cases = (cases or {}).get(name, (None, None))
        for shapes in study.parse_cases(isa_cases, mode, isa=True).values():
            todo += [Task(v, s, "compile") for s in shapes for v in study.variants()]
        if fidelity:
            seeds = [n for n, seed in fid.SEEDS.items() if getattr(seed, "first", None) in study.variants()]
            if seeds:
                todo += [Task(v, s, "compile") for v, s in fid.compile_requests(seeds)]
        if verify_leave_one_out and mode == "emulated":
            loo = study.leave_one_out_names()
            for shapes in study.parse_cases(run_cases, mode).values():
                todo += [Task(v, s, "verify") for s in shapes for v in loo]
        if modelled:
            todo += [Task(v, s, "model") for v, s in modelled_section.summary_plan(study)]
            if attribution:
                pairs = (attribution_pairs or {}).get(name, attr.DEFAULT_PAIRS)
                todo += attr.tasks_for(attr.study_plans(name, method="auto", pairs=pairs))
    return list(dict.fromkeys(todo))


def prefetch(study_names: Sequence[str], mode: str, *, scheduler: str = "local", progress: bool = False,
             **plan_options):
    """Run :func:`plan`'s tasks on ``scheduler`` (:func:`.sweep.run`); their rows. A failed task is
    only reported in its row: the section that needs it runs it again and raises its own error."""
    from . import sweep

    return sweep.run(plan(study_names, mode, **plan_options), scheduler=scheduler, progress=progress,
                     desc="summary work")


def overview(rows):
    """Per task kind: tasks, already cached, failed, CPU seconds (the work's own account, *measured*)."""
    import pandas as pd

    if not len(rows):
        return pd.DataFrame(columns=["what", "tasks", "cached", "failed", "cpu_seconds"])
    cached = rows["cached"].eq(True) if "cached" in rows else False
    df = rows.assign(cached_=cached, failed_=~rows["ok"].astype(bool))
    return (df.groupby("what", sort=False)
              .agg(tasks=("what", "size"), cached=("cached_", "sum"), failed=("failed_", "sum"),
                   cpu_seconds=("cpu_seconds", "sum"))
              .reset_index().round({"cpu_seconds": 1}))
