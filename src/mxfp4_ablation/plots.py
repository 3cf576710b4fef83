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

def apply_style() -> None:
    plt.rcParams.update(STYLE)

def source_badge(ax, source: str, detail: str = "") -> None:
    """Stamp the data's origin in the axes' top-right corner."""
    if source not in SOURCES:
        raise ValueError(f"unknown data source {source!r}; one of {', '.join(SOURCES)}")
    text, colour = SOURCES[source]
    ax.text(0.995, 1.01, text + (f": {detail}" if detail else ""), transform=ax.transAxes, ha="right",
            va="bottom", fontsize=7, color=colour, fontweight="bold")

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
