"""Deterministic figures: same data in, byte-identical SVG/PNG out.

Fixed font (DejaVu Sans, shipped with matplotlib), fixed DPI and size, ``svg.hashsalt`` set, no
creation dates or software strings in the files. Every figure states where its numbers come from with
:func:`source_badge` (device / emulated / static / published / modelled): no number without its label.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import paths  # noqa: E402
from .results import atomic_write_bytes  # noqa: E402

STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "svg.hashsalt": "mxfp4-ablation",
    "svg.fonttype": "path",
    "path.simplify": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

SOURCES = {
    "device": ("measured on device", "#1b7837"),
    "emulated": ("emulated (no hardware timing)", "#2166ac"),
    "static": ("static ISA metrics", "#5e3c99"),
    "published": ("published figures", "#b35806"),
    "modelled": ("modelled", "#999999"),
}

#: A colour-blind-safe categorical palette (Paul Tol's "muted" scheme, https://personal.sron.nl/~pault/):
#: for categories that must be told apart (timeline instruction kinds, exposed-cycle reasons).
CATEGORICAL = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255",
               "#AA4499", "#DDDDDD")


def apply_style() -> None:
    plt.rcParams.update(STYLE)

def source_badge(ax, source: str, detail: str = "") -> None:
    """Stamp the data's origin in the axes' top-right corner."""
    if source not in SOURCES:
        raise ValueError(f"unknown data source {source!r}; one of {', '.join(SOURCES)}")
    text, colour = SOURCES[source]
    ax.text(0.995, 1.01, text + (f": {detail}" if detail else ""), transform=ax.transAxes, ha="right",
            va="bottom", fontsize=7, color=colour, fontweight="bold")

def _drawn_texts(fig) -> list:
    """Every text the renderer draws: visible, non-empty, tick labels only of the ticks drawn."""
    from matplotlib.axis import Tick
    from matplotlib.text import Text

    out = []
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:  # axis("off"): no tick labels drawn
            continue
        for axis in (ax.xaxis, ax.yaxis):
            if not axis.get_visible():
                continue
            for tick in axis._update_ticks():  # the ticks inside the view limits: what gets drawn
                for label in (tick.label1, tick.label2):
                    if label.get_visible() and label.get_text().strip():
                        out.append(label)
    for text in fig.findobj(Text):
        if _in_tick(text, Tick):
            continue
        if not text.get_visible() or not text.get_text().strip():
            continue
        parent = text.axes
        if parent is not None and not parent.get_visible():
            continue
        if any(not a.get_visible() for a in _ancestors(text)):
            continue
        out.append(text)
    return list(dict.fromkeys(out))


def _in_tick(text, tick_type) -> bool:
    return any(isinstance(a, tick_type) for a in _ancestors(text))


def _ancestors(artist) -> list:
    """The artists above ``artist`` (legend, tick, ...), found through the figure's children tree."""
    fig = artist.get_figure(root=True) if hasattr(artist, "get_figure") else artist.figure
    parents = getattr(fig, "_mxfp4_parents", None)
    if parents is None:
        parents = {}
        stack = [fig]
        while stack:
            node = stack.pop()
            for child in node.get_children():
                parents[id(child)] = node
                stack.append(child)
        fig._mxfp4_parents = parents
    out, node = [], parents.get(id(artist))
    while node is not None and node is not fig:
        out.append(node)
        node = parents.get(id(node))
    return out


def layout_problems(fig, tolerance_px: float = 0.5) -> list[str]:
    """What a reader could not read in ``fig``, from the drawn artists: any two visible texts whose
    boxes overlap, any text reaching outside the canvas, any legend drawn over a bar (``ax.bar``/``barh``) of its axes.
    Empty when the layout is clean. (Boxes are axis-aligned, so exact for horizontal and vertical text.)"""
    from matplotlib.container import BarContainer
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import Bbox

    fig.canvas.draw()
    fig.__dict__.pop("_mxfp4_parents", None)
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    texts = _drawn_texts(fig)
    boxes = [(t, t.get_window_extent(renderer)) for t in texts]
    problems = []
    for t, b in boxes:
        if (b.x0 < canvas.x0 - tolerance_px or b.y0 < canvas.y0 - tolerance_px or b.x1 > canvas.x1 + tolerance_px
                or b.y1 > canvas.y1 + tolerance_px):
            problems.append(f"clipped: {t.get_text()!r} at {_box(b)} outside the canvas {_box(canvas)}")
    for i, (t, b) in enumerate(boxes):
        for u, c in boxes[i + 1:]:
            w = min(b.x1, c.x1) - max(b.x0, c.x0)
            h = min(b.y1, c.y1) - max(b.y0, c.y0)
            if w > tolerance_px and h > tolerance_px:
                problems.append(f"overlap: {t.get_text()!r} {_box(b)} and {u.get_text()!r} {_box(c)}")
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or not legend.get_visible():
            continue
        lb = legend.get_window_extent(renderer)
        bars = [p for c in ax.containers if isinstance(c, BarContainer) for p in c.patches]
        for patch in bars:
            if not isinstance(patch, Rectangle) or not patch.get_visible() or patch.get_width() == 0 \
                    or patch.get_height() == 0:
                continue
            pb = Bbox.intersection(patch.get_window_extent(renderer), ax.bbox)
            if pb is None:
                continue
            w = min(lb.x1, pb.x1) - max(lb.x0, pb.x0)
            h = min(lb.y1, pb.y1) - max(lb.y0, pb.y0)
            if w > tolerance_px and h > tolerance_px:
                problems.append(f"legend over a bar: legend {_box(lb)} covers a bar at {_box(pb)}")
                break
    fig.__dict__.pop("_mxfp4_parents", None)
    return problems


def _box(b) -> str:
    return f"[{b.x0:.0f},{b.y0:.0f} .. {b.x1:.0f},{b.y1:.0f}]"


def savefig(fig, name: str, root: str | Path | None = None, formats=("svg", "png")) -> list[Path]:
    """Save ``fig`` as ``<figures>/<name>.<fmt>`` atomically, without metadata; return the paths."""
    parts = name.split("/")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*", name) or {".", ".."} & set(parts):
        raise ValueError(f"figure name {name!r} must be a relative path of plain names")
    root = Path(root) if root is not None else paths.figures_dir()
    out = []
    for fmt in formats:
        buffer = io.BytesIO()
        metadata = {"Date": None, "Creator": None} if fmt == "svg" else {"Software": None}
        with plt.rc_context(STYLE):
            fig.savefig(buffer, format=fmt, metadata=metadata, bbox_inches=None)
        out.append(atomic_write_bytes(root / f"{name}.{fmt}", buffer.getvalue()))
    return out
