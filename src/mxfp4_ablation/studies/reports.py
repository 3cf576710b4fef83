"""What a step notebook and the summary show, as DataFrames: :class:`StepReport` (one ladder step:
its checks, metrics, ISA diff, expectations, speed) and :class:`SummaryReport` (every step), written by
:meth:`.engine.Study.step_report` / :meth:`~.engine.Study.summary_report` (the same data as the run
folder's parquet), with the small views a notebook cell shows and a reader tweaks."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import speed as speed_mod
from . import tables


@dataclass
class StepReport:
    """What :meth:`Study.step_report` wrote, as DataFrames (the same data as the run folder's parquet)."""

    study: "Study"
    variant: str
    baseline: str | None
    switch: str | None
    mode: str
    out_dir: Path
    cases: dict  # regime -> [shape, ...] the checks (and timings) ran at
    isa_cases: dict  # regime -> shape the ISA was read at
    verify: pd.DataFrame
    metrics: pd.DataFrame
    isa_diff: pd.DataFrame | None
    expectations: pd.DataFrame
    speed: pd.DataFrame  # every speed value with its kind (measured / modelled / published), or why not
    measured: pd.DataFrame | None = None  # the harness's table (device mode), None elsewhere
    figures: dict = field(default_factory=dict)  # figure name -> svg path
    speed_note: str = ""  # why nothing was measured on a device (e.g. no launcher for the variant yet)

    @property
    def shapes(self) -> list:
        return [s for shapes in self.cases.values() for s in shapes]

    # -------------------------------------------------------- cells a notebook shows (and a reader tweaks)

    def intro(self):
        from IPython.display import Markdown

        return Markdown(self.study.intro_markdown(self.variant, self.baseline))

    def changed(self, only_intended: bool = False) -> pd.DataFrame:
        """The metrics that moved from the baseline to the step (or only the intended ones)."""
        if self.isa_diff is None:
            return self.study.side_by_side(self.metrics, [self.variant])
        intended = set(self.expectations["metric"]) if len(self.expectations) else set()
        diff = self.isa_diff[self.isa_diff["metric"].isin(intended)] if only_intended else \
            tables.changed_metrics(self.isa_diff, intended)
        index = ["regime", "metric"] if "regime" in diff.columns else ["metric"]
        return diff.set_index(index)

    def isa_text(self, name: str, regime: str | None = None) -> str:
        """The ``.s`` this step wrote for variant ``name`` (in ``regime``: default the first one)."""
        regime = regime if regime is not None else next(iter(self.isa_cases))
        return (Path(self.out_dir) / "isa" / (regime or "") / f"{name}.s").read_text()

    def hot_loop(self, regime: str | None = None, lines: int | None = 80) -> pd.DataFrame:
        """The hot loop of the baseline and of the step, side by side (one instruction per row; the
        first ``lines`` rows, None for all). Off-loop kernels show an empty column."""
        from .. import isa

        cols = {}
        for name in [n for n in (self.baseline, self.variant) if n]:
            body = isa.hot_loop(self.isa_text(name, regime)) or []
            cols[name] = [i.text for i in body]
        n = max([len(c) for c in cols.values()] + [0])
        frame = pd.DataFrame({k: v + [""] * (n - len(v)) for k, v in cols.items()})
        return frame if lines is None else frame.head(lines)

    def speed_table(self, kind: str | None = None) -> pd.DataFrame:
        """Every speed value of this step with its kind (measured / modelled / published), or one kind;
        a kind that is not available has one row saying why."""
        return self.speed if kind is None else speed_mod.speed_view(self.speed, kind)

    def figure(self, kind: str):
        """The SVG of this step's figure ``kind`` (``isa_diff`` / ``speed``), for ``display``."""
        from IPython.display import SVG

        for name, path in self.figures.items():
            if name.endswith(f"_{kind}"):
                return SVG(filename=str(path))
        return None


@dataclass
class SummaryReport:
    study: "Study"
    metrics: pd.DataFrame
    expectations: pd.DataFrame
    correctness: pd.DataFrame
    out_dir: Path
    measured: pd.DataFrame | None = None  # the step runs' (and leave-one-out) measured tables, device only
    figures: dict = field(default_factory=dict)  # figure name -> svg path
    fidelity: pd.DataFrame | None = None  # first/last rung vs the seed's before/after, metric by metric
    fidelity_note: str = ""  # why there is no fidelity table (not asked for, or no fidelity module)

    def ladder_table(self, label: str | None = None, regime: str | None = None) -> pd.DataFrame:
        """Every metric per ladder step (rows: metrics, columns: steps) of one family in one regime."""
        return self.study.ladder_table(self.metrics, label, regime)

    def leave_one_out_table(self) -> pd.DataFrame:
        """Each ``<full>-no-<switch>`` against the full kernel: the switch's own metrics."""
        e = self.expectations
        return e[e["comparison"] == "leave-one-out"].reset_index(drop=True)

    def figure(self, name: str):
        from IPython.display import SVG

        return SVG(filename=str(self.figures[f"{self.study.name}/{name}"]))
