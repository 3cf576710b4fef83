"""The upstream pull requests the GEMM's steps come from (FlyDSL's ``kernels/gemm/fp4_gemm_4wave.py``)."""

from mxfp4_ablation.family import Seed

PR_756 = Seed("ROCm/FlyDSL", 756, "20103433", "Add fp4_gemm_4wave: 4-wave MXFP4 GEMM kernel for gfx950")
PR_990 = Seed("ROCm/FlyDSL", 990, "741f3d6d", "[fp4_gemm_4wave] MXFP4 GEMM perf optimize")
