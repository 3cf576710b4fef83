"""Our FlyDSL kernels for gfx950 (MI355X), written for the ablation study.

* :mod:`.mfma_tile` - one wave, one 16x16 tile with the scaled fp4 MFMA, LDS DMA
  and a 16-byte store: the smallest kernel that uses every feature the GEMM uses.
* :mod:`.gemm` - the dense MXFP4 GEMM with one boolean switch per optimisation
  and the ``gemm-v0`` .. ``gemm-v7`` ladder as data.
* :mod:`.common` - buffer/LDS/MFMA helpers and the emulator's kernarg layout.

Each kernel module exposes ``compile_entry(**params) -> (jit_launcher, args)`` for
``mxfp4_ablation.toolchain.compile`` and ``kernel_args(inputs)`` for the emulator.
Modules are imported lazily so that importing this package does not import FlyDSL.
"""
