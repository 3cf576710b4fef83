"""MXFP4 kernel ablation lab: take apart FlyDSL MXFP4 GEMM / MoE optimisations on gfx950.

Layers (imports go one way, top to bottom):
formats / reference (numpy, torch) -> kernels (FlyDSL) -> toolchain (offline compile, ISA text)
-> isa (analysis) -> runner (device or the gfx950emu emulator) -> results (parquet + provenance)
-> plots / notebooks.
"""

__version__ = "0.1.0"
