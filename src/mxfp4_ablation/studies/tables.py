"""Pure table functions of the study engine: pandas in, pandas out, nothing compiled or run.

Everything here works on the long tables the engine writes (``variant, ..., metric, value``) and is
shared by every family, by the figures and by the README renderer, so it imports neither FlyDSL nor the
kernel registry: ``make figures`` runs on these alone.
"""

from __future__ import annotations

import math

import pandas as pd

from ..errors import UsageError


class StudyError(UsageError):
    """Bad input to a study; the message is meant for the user."""


def is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt(value) -> str:
    """A table cell: ``–`` for missing, integers without a point, else two decimals."""
    if is_missing(value):
        return "–"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}"


def moved(before: float, after: float, direction: str) -> bool:
    """Did the metric move the ``direction`` from ``before`` (switch off) to ``after`` (switch on)?
    (:meth:`mxfp4_ablation.family.Expect.holds`: ``down`` / ``up`` strictly, ``zero``, ``same``; False
    when a value is missing, but ``same`` holds when both are.)"""
    from ..family import Expect

    return Expect("metric", direction).holds(before, after)


def relative(before: float, after: float) -> float:
    """Change from ``before`` to ``after`` in percent (+-100 when ``before`` is 0 and ``after`` is not)."""
    if before and not math.isnan(before):
        return (after / before - 1) * 100
    return 0.0 if not after else math.copysign(100.0, after)


def metric_wide(metrics: pd.DataFrame) -> pd.DataFrame:
    """Long metrics -> one row per variant (in table order), one column per metric."""
    order = list(dict.fromkeys(metrics["variant"]))
    cols = list(dict.fromkeys(metrics["metric"]))
    wide = metrics.pivot_table(index="variant", columns="metric", values="value", aggfunc="first", dropna=False)
    return wide.reindex(index=order, columns=cols)


def regimes_of(df: pd.DataFrame) -> list:
    """The regimes a table holds, in first-seen order ([None] for a table without a regime column)."""
    if "regime" not in df.columns:
        return [None]
    return list(dict.fromkeys(df["regime"]))


def per_regime(df: pd.DataFrame, regime) -> pd.DataFrame:
    return df if regime is None else df[df["regime"] == regime]


def isa_diff(metrics: pd.DataFrame, baseline: str, variant: str) -> pd.DataFrame:
    """``[regime,] metric, baseline, variant, delta, ratio`` for every metric of two variants."""
    parts = []
    for regime in regimes_of(metrics):
        wide = metric_wide(per_regime(metrics, regime))
        for n in (baseline, variant):
            if n not in wide.index:
                raise StudyError(f"no metrics for {n!r} in this table")
        rows = []
        for metric in wide.columns:
            if metric == "compile_seconds":
                continue
            a, b = float(wide.at[baseline, metric]), float(wide.at[variant, metric])
            ratio = 1.0 if a == b else (b / a if a != 0.0 and not math.isnan(a) else math.nan)
            rows.append({"metric": metric, "baseline": a, "variant": b, "delta": b - a, "ratio": ratio})
        diff = pd.DataFrame(rows, columns=["metric", "baseline", "variant", "delta", "ratio"])
        parts.append(diff if regime is None else diff.assign(regime=regime)[["regime"] + list(diff.columns)])
    return pd.concat(parts, ignore_index=True)


def changed_metrics(diff: pd.DataFrame, intended=()) -> pd.DataFrame:
    """Rows of an :func:`isa_diff` whose metric moved, or that a switch is meant to move."""
    return diff[(diff["delta"].fillna(0) != 0) | diff["metric"].isin(set(intended))]


def side_by_side(metrics: pd.DataFrame, names, keys=None) -> pd.DataFrame:
    """Metrics (rows) of ``names`` (columns), optionally only ``keys``; one block per regime."""
    parts = []
    for regime in regimes_of(metrics):
        wide = metric_wide(per_regime(metrics, regime))
        wide = wide.loc[[n for n in names if n in wide.index]].T
        if keys is not None:
            wide = wide.loc[[k for k in keys if k in wide.index]]
        if regime is not None:
            wide.index = pd.MultiIndex.from_product([[regime], wide.index], names=["regime", "metric"])
        parts.append(wide)
    return pd.concat(parts)
