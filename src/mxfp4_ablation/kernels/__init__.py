"""Our FlyDSL kernels for gfx950 (MI355X), written for the ablation study.

Kernel families (each implements :class:`mxfp4_ablation.family.KernelFamily` and is listed once in
:data:`mxfp4_ablation.family.FAMILIES`):

* :mod:`.gemm` - the dense MXFP4 GEMM (FlyDSL PR #990's 4-wave 256x256 kernel, rebuilt with one
  boolean switch per optimisation);
* :mod:`.moe_gemm1` / :mod:`.moe_gemm2` - the a4w4 MXFP4 MoE gate/up + silu + requant and down
  projection (aiter PR #3828), sharing :mod:`.moe_common` (shape rule, switch flags, the buffer ABI).

Each declares its optimisations as :class:`~mxfp4_ablation.family.Switch` records next to the
builder, its outputs as :class:`~mxfp4_ablation.family.Output` records, and the contract's functions
(``check_shape``, ``make_inputs``, ``reference``, ``launch_config``, ``kernel_args``, ``device_args``,
``build``, ``compile_entry``, ``flops``, ``bytes``). FlyDSL loads on the first build, so reading the
records stays cheap; kernels never import the analysis layers (``isa``, ``metrics``).

Helpers and probes: :mod:`.mfma_tile` (one wave, one 16x16 scaled-fp4 MFMA tile: the smallest kernel
using every feature the GEMM uses), :mod:`.common` (buffer/LDS/MFMA helpers and the emulator's
kernarg layout), :mod:`.probe`.
"""
