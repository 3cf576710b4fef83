"""Timing harness that can resolve a 1 % TFLOPS delta (issue #5).

Public API:

* :class:`HarnessSettings`, :class:`Comparison`, :func:`run_comparisons`,
  :func:`run_sweep` / :class:`Job`, :func:`write_result`, :class:`RunResult` (abtest)
* :class:`Case`, :class:`DeviceContext`, :class:`CaseTimer` (timing): a launcher
  factory is ``factory(ctx: DeviceContext) -> Case``
* :func:`median_ci`, :func:`verdict`, :func:`summarize`, :func:`paired_ratios` (stats)
* :func:`rotation_for`, :func:`sets_needed` (inputs)
* :func:`harness_check` (validation), :func:`launcher_for` (launchers), peers
"""
from .abtest import (BenchError, Comparison, HarnessSettings, Job, RunResult, run_comparisons,
                     run_sweep, write_result)
from .inputs import Rotation, rotation_for, sets_needed
from .stats import Interval, median_ci, paired_ratios, summarize, verdict
from .timing import Case, CaseTimer, DeviceContext

__all__ = [
    "BenchError", "Case", "CaseTimer", "Comparison", "DeviceContext", "HarnessSettings",
    "Interval", "Job", "Rotation", "RunResult", "median_ci", "paired_ratios", "rotation_for",
    "run_comparisons", "run_sweep", "sets_needed", "summarize", "verdict", "write_result",
]
