"""Figures are deterministic: same data, byte-identical files, no timestamps."""

import matplotlib.pyplot as plt
import pytest

from mxfp4_ablation import plots


def _figure():
    plots.apply_style()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(["v0", "v1"], [1.0, 1.07])
    plots.source_badge(ax, "published", "FlyDSL PR #990")
    return fig


def test_savefig_is_byte_identical_and_has_no_date(tmp_path):
    first = plots.savefig(_figure(), "t/fig", root=tmp_path / "a")
    second = plots.savefig(_figure(), "t/fig", root=tmp_path / "b")
    for p, q in zip(first, second):
        assert p.read_bytes() == q.read_bytes()
    svg = first[0].read_text()
    assert "<dc:date>" not in svg and "Matplotlib" not in svg.split("<svg", 1)[0]
    assert [p.suffix for p in first] == [".svg", ".png"]


def test_badge_requires_a_known_source():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="unknown data source"):
        plots.source_badge(ax, "guessed")
    plt.close(fig)


def test_savefig_rejects_path_escape(tmp_path):
    with pytest.raises(ValueError, match="relative path"):
        plots.savefig(_figure(), "../escape", root=tmp_path)
