"""MXFP4 a4w4 MoE half of the lab: host pipeline (routing, sorting, layouts, reduce), the torch
emulations of the two kernels and the direct torch reference.  Torch/numpy only - the FlyDSL kernels
live elsewhere.
"""

from mxfp4_ablation.moe.host import (  # noqa: F401
    KIMI_K25_TP4,
    REGIMES,
    SMALL_TEST,
    SMALL_TEST_TOKENS,
    MoEProblem,
    MoESorting,
    RegimeConfig,
    kimi_k25_tp4,
    make_moe_inputs,
    moe_flops,
    moe_sort,
    route_topk,
    scatter_reduce,
    small_test_problem,
    sorting_stats,
)
from mxfp4_ablation.moe.emulate import run_moe_pipeline  # noqa: F401
from mxfp4_ablation.moe.reference import moe_reference, quantize_mxfp4_moe  # noqa: F401
