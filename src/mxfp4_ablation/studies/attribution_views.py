"""The attribution's figures and summary section, drawn from stored tables alone.

Per study, from a summary run's ``attribution-<study>/`` tables (:func:`mxfp4_ablation.studies.attribution.write`):

* ``<study>/attribution_shares`` -- three views of each switch side by side, all in log-% of TFLOPS so
  they compare: its Shapley share with its interval (order-independent; the shares add up to the
  whole ladder's gain), its ladder delta (given the switches before it) and its leave-one-out loss
  (given all the others; a switch others require is left out with its dependents, marked ``*``);
  one row of panels per (family, shape);
* ``<study>/attribution_interactions`` -- the pairwise Shapley interaction index as a heat map (red:
  the pair buys more together than apart, blue: less), one panel per (family, shape); in the sampled
  form a pair that was never adjacent in an ordering is blank.

:func:`summary_section` runs the attribution for the summary notebook (plan, sweep, attribute, write,
draw). Importing this module imports neither FlyDSL nor the kernel registry.
"""

from __future__ import annotations

import re

import functools
from dataclasses import dataclass, field
from pathlib import Path

from .. import plots, results

FOLDER = "attribution-{study}"


def _read(run_dir: Path, name: str):
    return results.read_table(Path(run_dir) / f"{name}.parquet")[0]


def _detail(df) -> str:
    lab = ", ".join(sorted(set(df["label"])))
    vs = ", ".join(sorted({str(v) for v in df["model_version"].dropna()})) if "model_version" in df else ""
    from .modelled_tables import clock_text

    clocks = [float(c) for v in (df["clock_ghz"].dropna() if "clock_ghz" in df else [])
              for c in re.findall(r"\d+(?:\.\d+)?", str(v).split("(")[0])]
    meth = ", ".join(sorted(set(df["method"])))
    return f"{meth} Shapley" + (f"; model {vs}, {clock_text(clocks)}" if lab == "modelled" and vs else "")


def _groups(df):
    return list(dict.fromkeys(zip(df["family"], df["shape"])))


def draw_shares(run_dir: Path):
    """Shapley share (with interval) | ladder delta | leave-one-out loss, per switch, in log-%."""
    import matplotlib.pyplot as plt

    sw = _read(run_dir, "attribution_switches")
    groups = _groups(sw)
    n_sw = max(len(sw[(sw["family"] == f) & (sw["shape"] == s)]) for f, s in groups)
    fig, axes = plt.subplots(len(groups), 3, figsize=(8.6, (0.26 * n_sw + 0.9) * len(groups) + 0.5), squeeze=False,
                             sharey="row")
    titles = ("Shapley share (interval)", "ladder delta (given earlier steps)", "leave-one-out (given all others)")
    for i_row, (row, (fam, shape)) in enumerate(zip(axes, groups)):
        sub = sw[(sw["family"] == fam) & (sw["shape"] == shape)].sort_values("ladder_rank")
        ys = list(range(len(sub)))
        vals = (sub["shapley_log_pct"], sub["ladder_log_pct"], sub["loo_log_pct"])
        for k, (ax, v) in enumerate(zip(row, vals)):
            colours = ["#1b7837" if x >= 0 else "#b2182b" for x in v]
            if k == 0:
                err = [(sub["shapley_log_pct"] - sub["ci_low"]).clip(lower=0),
                       (sub["ci_high"] - sub["shapley_log_pct"]).clip(lower=0)]
                ax.barh(ys, v, color=colours, xerr=err, error_kw={"elinewidth": 0.7, "capsize": 1.5})
                for y, r in zip(ys, sub.itertuples()):
                    undecided = r.ci_low <= 0 <= r.ci_high
                    ax.text(r.ci_high if r.shapley_log_pct >= 0 else r.ci_low, y,
                            f" {r.shapley_log_pct:+.1f}" + ("?" if undecided else " "), va="center",
                            ha="left" if r.shapley_log_pct >= 0 else "right", fontsize=5)
            else:
                ax.barh(ys, v, color=colours)
                for y, x in zip(ys, v):
                    ax.text(x, y, f" {x:+.1f} ", va="center", ha="left" if x >= 0 else "right", fontsize=5)
            ax.axvline(0, color="#4d4d4d", linewidth=0.6)
            ax.margins(x=0.22)  # room for the value labels at both ends
            ax.tick_params(axis="x", labelsize=5)
            ax.set_title(titles[k] if i_row == 0 else "", fontsize=7, loc="left")
        labels = [f"{r.switch}" + (" *" if isinstance(r.loo_dropped_too, str) and r.loo_dropped_too else "")
                  for r in sub.itertuples()]
        row[0].set_yticks(ys, labels, fontsize=6)
        row[0].invert_yaxis()
        total = float(sub["total_log_pct"].iloc[0])
        row[0].set_ylabel(f"{fam} {shape}\n(total {total:+.1f} log-%)", fontsize=6)
        for ax in row:
            ax.set_xlabel("log-% of TFLOPS", fontsize=5)
    notes = sorted({f"* {r.switch}: left out with {r.loo_dropped_too.replace(',', ', ')} (they require it)"
                    for r in sw.itertuples() if isinstance(r.loo_dropped_too, str) and r.loo_dropped_too})
    fig.text(0.01, 0.005, "; ".join(notes) + ("; " if notes else "") + "? = interval holds 0 (cannot decide)",
             fontsize=5, ha="left", va="bottom")
    text, colour = plots.SOURCES[{"measured": "device"}.get(sw["label"].iloc[0], sw["label"].iloc[0])]
    fig.suptitle("What each step buys: order-independent share vs ladder delta vs leave-one-out", x=0.01, ha="left",
                 fontsize=8, y=0.995)
    # the source line under the title (a long model detail no longer runs into it)
    fig.text(0.01, 0.955, f"{text}: {_detail(sw)}", ha="left", va="top", fontsize=6, color=colour, fontweight="bold")
    fig.tight_layout(rect=(0, 0.02, 1, 0.93))
    return fig


def draw_interactions(run_dir: Path):
    """The pairwise Shapley interaction index per (family, shape), log-%."""
    import matplotlib.pyplot as plt
    import numpy as np

    it = _read(run_dir, "attribution_interactions")
    sw = _read(run_dir, "attribution_switches")
    groups = _groups(sw)
    fig, axes = plt.subplots(1, len(groups), figsize=(3.4 * len(groups) + 1.2, 4.8), squeeze=False,
                             layout="constrained")
    vmax = max(1e-3, float(it["index_log_pct"].abs().max()) if len(it) else 1.0)
    im = None
    for ax, (fam, shape) in zip(axes[0], groups):
        names = list(sw[(sw["family"] == fam) & (sw["shape"] == shape)].sort_values("ladder_rank")["switch"])
        idx = {n: i for i, n in enumerate(names)}
        m = np.full((len(names), len(names)), np.nan)
        sub = it[(it["family"] == fam) & (it["shape"] == shape)]
        for r in sub.itertuples():
            if r.samples != 0:
                m[idx[r.a], idx[r.b]] = m[idx[r.b], idx[r.a]] = r.index_log_pct
        im = ax.imshow(m, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax.grid(False)
        for i in range(len(names)):
            for j in range(len(names)):
                if i != j and m[i, j] == m[i, j] and (len(names) <= 5 or abs(m[i, j]) >= 0.05 * vmax):
                    ax.text(j, i, f"{m[i, j]:+.1f}", ha="center", va="center", fontsize=4.5)
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=5)
        ax.set_yticks(range(len(names)), names, fontsize=5)
        ax.set_title(f"{fam} {shape}", fontsize=6, loc="left")
    if im is not None:
        cb = fig.colorbar(im, ax=list(axes[0]), shrink=0.8)
        cb.ax.tick_params(labelsize=5)
        cb.set_label("interaction index, log-% (together minus apart)", fontsize=5)
    text, colour = plots.SOURCES[{"measured": "device"}.get(sw["label"].iloc[0], sw["label"].iloc[0])]
    fig.suptitle(f"Pairwise interactions (the pairs that make ladder orders disagree)\n{text}: {_detail(sw)}",
                 x=0.01, ha="left", fontsize=7, color="#000000")
    return fig


def _study_figure(study: str, draw, run_dir: Path):
    return draw(Path(run_dir) / FOLDER.format(study=study))


def register(summary_run: str = "summary") -> None:
    from ..figures import figure
    from . import STUDIES

    for study in STUDIES:
        figure(f"{study}/attribution_shares", run=summary_run)(functools.partial(_study_figure, study, draw_shares))
        figure(f"{study}/attribution_interactions", run=summary_run)(
            functools.partial(_study_figure, study, draw_interactions))


register()


# ============================================================================ the summary notebook's section


@dataclass
class AttributionSection:
    study: str
    out_dir: Path
    results: list
    tables: dict
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    def table(self):
        cols = ["family", "shape", "switch", "shapley_log_pct", "ci_low", "ci_high", "ladder_pct", "loo_pct",
                "loo_dropped_too", "method", "label", "model_version", "clock_ghz"]
        return self.tables["attribution_switches"][cols]

    def figure(self, name: str):
        from IPython.display import SVG

        return SVG(filename=str(self.figures[name]))

    def findings(self) -> list[str]:
        from . import attribution

        return attribution.findings(self.tables["attribution_switches"], self.tables["attribution_order"])


def summary_section(study: str, out_dir, method: str = "auto", pairs: int | None = None, scheduler: str = "local",
                    workers: int | None = None, render: bool = True, progress: bool = False) -> AttributionSection:
    """Attribute ``study`` at its ISA shapes (modelled), write ``<out_dir>/attribution-<study>/`` and
    draw its two figures."""
    import time

    from . import attribution

    t0 = time.perf_counter()
    res, rows = attribution.run(study, method=method, pairs=pairs or attribution.DEFAULT_PAIRS, scheduler=scheduler,
                                workers=workers, progress=progress)
    out = Path(out_dir) / FOLDER.format(study=study)
    settings = {"study": study, "method": method, "pairs": pairs or attribution.DEFAULT_PAIRS, "scheduler": scheduler}
    attribution.write(res, out, settings)
    sec = AttributionSection(study, out, res, attribution.tables(res), seconds=round(time.perf_counter() - t0, 1))
    if render:
        from .. import figures

        for name in ("attribution_shares", "attribution_interactions"):
            sec.figures[name] = figures.render(f"{study}/{name}", Path(out_dir))[0]
    return sec


# ============================================================================ README hook


def readme_markers(study: str) -> tuple[str, str]:
    cmd = "python -m mxfp4_ablation.studies readme-table"
    return (f"<!-- {study}-attribution:begin (generated: {cmd}) -->", f"<!-- {study}-attribution:end -->")


def readme_block(study: str, run_dir) -> str | None:
    """The README's attribution block of ``study`` from a summary run (None: the run has none): a table
    (switch, Shapley share with interval, ladder delta, leave-one-out), the findings, the figure."""
    base = Path(run_dir) / FOLDER.format(study=study) if run_dir else None
    if base is None or not (base / "attribution_switches.parquet").is_file():
        return None
    from . import attribution

    sw = _read(base, "attribution_switches")
    od = _read(base, "attribution_order")
    lines = ["| family | shape | switch | Shapley share (log-%) | interval | ladder Δ (%) | leave-one-out (%) | decided |",
             "|---|---|---|---:|---|---:|---:|---|"]
    for r in sw.itertuples():
        dec = "yes" if (r.ci_low > 0 or r.ci_high < 0) else "no (interval holds 0)"
        loo = f"{r.loo_pct:+.2f}" + (f" (also drops {r.loo_dropped_too.replace(',', ', ')})" if r.loo_dropped_too else "")
        lines.append(f"| {r.family} | {r.shape} | {r.switch} | {r.shapley_log_pct:+.2f} | "
                     f"[{r.ci_low:+.2f}, {r.ci_high:+.2f}] | {r.ladder_pct:+.2f} | {loo} | {dec} |")
    lab = sw["label"].iloc[0]
    lines += ["", f"*{lab.capitalize()}* ({_detail(sw)}); interval = sampling + {sw['evidence_rule'].iloc[0]}. "
              f"Figures: `figures/{study}/attribution_shares.svg`, `figures/{study}/attribution_interactions.svg`. "
              f"Generated by `python -m mxfp4_ablation.studies readme-table`.", ""]
    lines += [f"* {f} *({lab})*" for f in attribution.findings(sw, od)]
    return "\n".join(lines)


__all__ = ["draw_shares", "draw_interactions", "register", "summary_section", "AttributionSection", "readme_markers",
           "readme_block"]
