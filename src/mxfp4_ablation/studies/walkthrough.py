"""The walking skeleton of the study: compile our small kernels offline and look at their ISA.

Used by ``notebooks/00_walkthrough.py``. It shows the whole pipe end to end -- FlyDSL kernel of ours ->
offline gfx950 compile -> ISA metrics -> result table with provenance -> deterministic figure -- on
kernels small enough to read every instruction of.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .. import metrics, provenance, results, toolchain
from ..figures import figure

RUN = "00_walkthrough"

#: (label, toolchain target, compile parameters)
KERNELS = (
    ("probe y=2x", "mxfp4_ablation.kernels.probe:compile_entry", {"rows": 64}),
    ("mfma tile 16x16x256", "mxfp4_ablation.kernels.mfma_tile:compile_entry", {"K": 256}),
)

#: Opcode classes, by prefix (first match wins).
CLASSES = (
    ("MFMA", ("v_mfma",)),
    ("VMEM", ("buffer_", "global_", "flat_")),
    ("LDS", ("ds_",)),
    ("SMEM", ("s_load", "s_buffer_load")),
    ("wait/barrier", ("s_waitcnt", "s_barrier")),
    ("SALU/branch", ("s_",)),
    ("VALU", ("v_",)),
)


def opcode_class(opcode: str) -> str:
    for name, prefixes in CLASSES:
        if opcode.startswith(prefixes):
            return name
    return "other"


def collect(out_dir: str | Path, mode: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Compile the kernels, write ``metrics.parquet`` and ``opcodes.parquet`` (+ .s files) to out_dir."""
    out_dir = Path(out_dir)
    arts = toolchain.compile_many([(target, params) for _, target, params in KERNELS])
    metric_rows, opcode_rows = [], []
    for (label, target, params), art in zip(KERNELS, arts):
        m = metrics.kernel_metrics(art.isa)
        results.atomic_write_text(out_dir / f"{art.kernel_name}.s", art.isa)
        scalars = {k: v for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        scalars["compile_seconds"] = art.compile_seconds
        for metric, value in scalars.items():
            metric_rows.append({"kernel": label, "metric": metric, "value": float(value)})
        for opcode, count in sorted(m["opcode_histogram"].items()):
            opcode_rows.append({"kernel": label, "opcode": opcode, "class": opcode_class(opcode), "count": count})
    prov = provenance.collect("static", settings={"kernels": [dict(label=k, target=t, params=p) for k, t, p in KERNELS]})
    metrics_df, opcodes_df = pd.DataFrame(metric_rows), pd.DataFrame(opcode_rows)
    results.write_table(metrics_df, out_dir / "metrics.parquet", prov)
    results.write_table(opcodes_df, out_dir / "opcodes.parquet", prov)
    return metrics_df, opcodes_df


@figure("walkthrough/opcode_mix", run=RUN)
def draw_opcode_mix(run_dir: Path):
    """Instruction mix per kernel, by opcode class (static counts of the ISA, not executed counts)."""
    import matplotlib.pyplot as plt

    from ..plots import source_badge

    opcodes, _ = results.read_table(Path(run_dir) / "opcodes.parquet")
    table = opcodes.pivot_table(index="kernel", columns="class", values="count", aggfunc="sum", fill_value=0)
    order = [name for name, _ in CLASSES if name in table.columns]
    table = table[order].sort_index()
    from ..plots import CATEGORICAL

    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    left = [0] * len(table)
    for i, cls in enumerate(order):
        ax.barh(table.index, table[cls], left=left, label=cls, color=CATEGORICAL[i % len(CATEGORICAL)])
        left = [a + b for a, b in zip(left, table[cls])]
    ax.set_xlabel("instructions in the kernel (static count)")
    ax.legend(ncol=4, fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.32), frameon=False)  # below the bars
    ax.set_title("gfx950 instruction mix of our smallest kernels", loc="left", pad=16)
    source_badge(ax, "static", "offline gfx950 compile")
    fig.tight_layout()
    return fig
