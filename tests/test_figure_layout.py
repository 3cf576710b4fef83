"""Would a reader be able to read every figure? Each registered figure is drawn from stored data and
checked from its drawn artists (:func:`mxfp4_ablation.plots.layout_problems`): no two visible texts
overlap, nothing reaches outside the canvas, no legend sits on a bar; it says where its numbers come
from (measured / emulated / static / published / modelled); no two figures are the same bytes; and a
redraw is byte-identical.

The fast test draws every drawer once from a small synthetic stored-data set (``figure_fixture.py``,
written without compiling); the slow ones draw every registered figure from the full synthetic set, and
from the real runs of a ``make reproduce`` in this checkout where there are any."""

from __future__ import annotations

import hashlib

import matplotlib.pyplot as plt
import pandas as pd
import pytest

import figure_fixture
from mxfp4_ablation import figures, paths, plots

LABELS = tuple(text for text, _ in plots.SOURCES.values())


def _check(names_sources):
    """Draw each ``(name, source)``; return ``(problems by name, sha256 of the drawn pixels by name)``."""
    problems, digests = {}, {}
    for name, source in names_sources:
        plots.apply_style()
        fig = figures.FIGURES[name].draw(source)
        try:
            found = plots.layout_problems(fig)  # draws the canvas
            texts = " ".join(t.get_text() for t in plots._drawn_texts(fig))
            if not any(label in texts for label in LABELS):
                found.append(f"no source label (one of {', '.join(LABELS)})")
            pixels = bytes(fig.canvas.buffer_rgba())
        finally:
            plt.close(fig)
        if found:
            problems[name] = found
        digests[name] = hashlib.sha256(pixels).hexdigest()
    return problems, digests


def _drawer(fig) -> tuple:
    """What draws a registered figure: its function (and a partial's arguments)."""
    draw = fig.draw
    return (getattr(draw, "func", draw), tuple(repr(a) for a in getattr(draw, "args", ())))


def _duplicates(digests: dict) -> list:
    by = {}
    for name, digest in digests.items():
        by.setdefault(digest, []).append(name)
    return [names for names in by.values() if len(names) > 1]


def _synthetic(tmp, every_step):
    exp = figure_fixture.build(tmp / "experiments", every_step=every_step)
    mp = pytest.MonkeyPatch()
    mp.setenv("MXFP4_EXPERIMENTS", str(exp))
    mp.setenv("MXFP4_FIGURES", str(tmp / "figures"))
    return mp


def _assert_clean(names_sources):
    problems, digests = _check(names_sources)
    assert not problems, "\n".join(f"{n}:\n  " + "\n  ".join(p) for n, p in problems.items())
    assert not _duplicates(digests), _duplicates(digests)
    return digests


def test_every_drawer_is_legible_labelled_and_distinct(tmp_path):
    """The small synthetic set: every drawer of the registry at least once (a third of the figures)."""
    mp = _synthetic(tmp_path, every_step=False)
    try:
        reg = figures.load()
        pick = {}  # one figure per drawer (the last by name), plus a timeline of a kernel without a loop
        for name in sorted(reg):
            if reg[name].source() is not None:
                pick[_drawer(reg[name])] = name
        assert {_drawer(f) for f in reg.values()} <= set(pick), "a drawer has no data in the small synthetic set"
        names = sorted(set(pick.values()) | {"moe/12_gemm1_exp2_speed_cycles"})
        have = [(name, reg[name].source()) for name in names]
        digests = _assert_clean(have)
        again = _check(have[:2])[1]  # deterministic: the same stored data, the same pixels
        assert {n: digests[n] for n in again} == again
    finally:
        mp.undo()


@pytest.mark.slow
def test_every_registered_figure_is_legible_labelled_and_distinct(tmp_path):
    """The full synthetic set: a run for every step notebook, so every registered figure is drawn."""
    mp = _synthetic(tmp_path, every_step=True)
    try:
        reg = figures.load()
        missing = [name for name, fig in sorted(reg.items()) if fig.source() is None]
        assert not missing, f"the synthetic data set lacks the run of: {missing}"
        _assert_clean([(name, reg[name].source()) for name in sorted(reg)])
    finally:
        mp.undo()


def test_the_checker_sees_overlap_clipping_and_a_legend_on_bars():
    plots.apply_style()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(["a", "b"], [1.0, 2.0], label="bars")
    ax.text(0, 1.0, "hello")
    ax.text(0, 1.0, "world")
    ax.text(5, 1.0, "far outside")
    ax.legend(loc="center")
    try:
        found = plots.layout_problems(fig)
    finally:
        plt.close(fig)
    assert any(p.startswith("overlap: 'hello'") for p in found), found
    assert any(p.startswith("clipped: 'far outside'") for p in found), found
    assert any(p.startswith("legend over a bar") for p in found), found
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(["a", "b"], [1.0, 2.0])
    ax.set_title("fine")
    fig.tight_layout()
    try:
        assert plots.layout_problems(fig) == []
    finally:
        plt.close(fig)


def test_missing_on_both_sides_is_not_a_bar():
    from mxfp4_ablation.studies import views

    assert views.change_or_none(float("nan"), float("nan")) is None
    assert views.change_or_none(None, 3.0) is None
    assert views.change_or_none(4.0, 2.0) == pytest.approx(-50.0)


@pytest.mark.slow
def test_figures_of_the_real_runs_are_legible(tmp_path):
    """The same checks on this checkout's stored runs (after `make reproduce`): every figure that has one."""
    reg = figures.load()
    have = [(name, reg[name].source()) for name in sorted(reg) if reg[name].source() is not None]
    runs = [n for n, _ in have if reg[n].data is None]
    if not runs:
        pytest.skip(f"no notebook run under {paths.experiments_dir()} yet (make reproduce writes them)")
    _assert_clean(have)


def test_a_kernel_without_a_hot_loop_shows_where_its_instruction_stream_differs():
    """moe1 (gemm1) has no hot loop: its timeline is kept whole, and the step figure's window is where
    wave 0's executed opcodes differ from the predecessor's (here: a VALU stretch near the end)."""
    from mxfp4_ablation.studies import modelled_figures

    tl = figure_fixture._timeline(["moe1-v1", "moe1-v2"], "4096x385x7168x512x9x128", loop=False)
    assert set(tl["window"]) == {"whole kernel"}
    win = modelled_figures.diff_windows(tl, "moe1-v1", "moe1-v2")
    assert set(win) == {"moe1-v1", "moe1-v2"}
    ops = tl[(tl["variant"] == "moe1-v2") & (tl["track"] == "wave0")].sort_values("start").reset_index(drop=True)
    exp = ops[ops["opcode"] == "v_exp_f32"]
    lo, hi, spans = win["moe1-v2"]
    assert lo <= exp["start"].min() and exp["end"].max() <= hi  # the changed stretch is inside the window
    assert lo > 0  # and the window is not the whole kernel from its start
    assert len(spans) >= len(exp)
    assert modelled_figures.diff_windows(tl, None, "moe1-v2") == {}
    same = tl[tl["variant"] == "moe1-v1"]
    assert modelled_figures.diff_windows(pd.concat([same, same.assign(variant="moe1-v2")]), "moe1-v1", "moe1-v2") == {}
