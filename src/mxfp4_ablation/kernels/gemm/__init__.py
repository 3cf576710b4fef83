"""The study's dense MXFP4 GEMM for gfx950, with one switch per optimisation.

Layout: the builder is a table of *slots* named by hardware stage, as FlyDSL's own kernel names its
stage classes (:class:`.slots.Slots`: ``g2s`` global -> LDS, ``s2r`` LDS -> registers, ``scales``,
``mfma``, ``order``, ``step``, ``loop``, ``store``, ``shape``).  :mod:`.stages` fills every slot for the
baseline ``gemm-v0``; each optimisation is one file ``steps/NN_<switch>.py`` holding its
:class:`~mxfp4_ablation.family.Switch` record and the stage implementations it puts into one or a few
slots, so step N reads as step N-1 plus that file.  :mod:`.schedule` is the trace-free issue plan
(wait counts), :mod:`.kernel` the pipeline that emits the slots' stages in order, :mod:`.layout` the
fixed geometry.  This module is the family contract (records, shapes, inputs, arguments).

``C[M, N] (bf16, row-major) = A[M, K] . B[N, K]^T`` where A and B are MXFP4:
two E2M1 values per byte (``formats.pack_fp4``) and one E8M0 scale per 1x32
block along K.  A is row-major ``uint8[M, K/2]``; B is
``formats.shuffle_weight_b`` of ``uint8[N, K/2]``; both scale tensors are
``formats.shuffle_scales`` of ``uint8[rows, K/32]``.

Geometry (fixed): one workgroup = 256 threads = 4 waves in 2x2 computes a
256x256 tile of C; wave ``(wi, wj)`` owns four 64x64 blocks ``(h, v)`` with
rows ``128h + 64wi + [0, 64)`` and columns ``128v + 64wj + [0, 64)`` of the
tile, each a 4x4 grid of 16x16 accumulators fed by
``v_mfma_scale_f32_16x16x128_f8f6f4`` (fp4 x fp4, ``cbsz:4 blgp:4``).  One K
step is 256 fp4 (two MFMAs per accumulator, the two 128-K halves being picked
by ``op_sel_hi`` out of the same scale word): 128 MFMAs per wave per K step.

Data movement: A and B go global -> LDS with ``buffer_load_dwordx4 ... lds``
(LDS DMA) into a two-stage ping-pong (stage = A half 0/1 + B half 0/1, 16 KiB
each, 128 KiB in all) while the MFMAs of the other stage run; A rows are
stored XOR-swizzled (16-byte slot ``c ^ (row % 8)``) so the ``ds_read_b128``
of 16 rows does not hit one bank group; B's preshuffled 1 KiB blocks are
copied verbatim, so lane ``l`` reads its operand at ``16*l``.  Workgroups walk
the tiles in an XCD-aware order (see :func:`tile_order`).

One K step ``k`` (stage ``k % 2``) is two waits and four 64x64 blocks of 32 MFMAs; each block
issues its loads where the seed puts them (the ``order`` slot: one after each of the first MFMAs
before PR #990, evenly spread over all 32 after it; :meth:`.schedule.Plan.segments` lists them,
:meth:`.kernel.Pipeline.block` places them).  With b_carry (PR #990's "after")::

    s_waitcnt vmcnt(N) lgkmcnt(0) ; s_barrier  # A1 of step k landed; stage k%2's A0/B0/B1 read by all
    block (0,0)  | LDS-DMA A0 of step k+2 x4, ds_read A1 of step k x8
    block (0,1)  | LDS-DMA B0 of k+2 x4, scales of k+1 x8 (ring ds_read_b32, or buffer_load_dword)
    s_waitcnt vmcnt(M) lgkmcnt(0) ; s_barrier  # stage (k+1)%2's A0/B0/B1 landed; A1 of k read by all
    block (1,0)  | LDS-DMA B1 of k+2 x4, ds_read A0 of step k+1 x8, scale gather of k+3
    block (1,1)  | LDS-DMA A1 of k+2 x4, ds_read B0, B1 of step k+1 x16

so the next step's A0/B0/B1 fragments arrive as loop-carried values and the only waits are the two
folded ones (N, M from :class:`.schedule.Plan`).  Without b_carry (PR #990's "before") B1 is read in the
step that uses it, and the waits stay per fragment::

    s_waitcnt vmcnt(N) lgkmcnt(0) ; s_barrier  # stage k%2's A0/B0 read by all (seed: no lgkmcnt, a race)
    block (0,0)  | LDS-DMA A0 of k+2 x4, ds_read B1 of k x8
    block (0,1)  | LDS-DMA B0 of k+2 x4, ds_read A1 of k x8, scales of k+1 x8 (waits per B1 fragment)
    s_waitcnt vmcnt(M) lgkmcnt(0) ; s_barrier
    block (1,0)  | LDS-DMA B1 of k+2 x4, ds_read A0 of k+1 x8, scale gather of k+3
    block (1,1)  | LDS-DMA A1 of k+2 x4, ds_read B0 of k+1 x8

The loop body holds two K steps (four with k_unroll4; an even count keeps the stage
static); the peeled head (step 0 with zero_first_k, steps 0 and 1 with k_unroll4)
and the last 2-3 steps, which issue fewer loads, are unrolled around it.  Any K
that is a multiple of 256 works; the runtime loop appears from K = 1024, 1280 or
1536 depending on the switches, see :func:`min_k_for_loop`.

Without g2s_m0 the LDS-DMA is the compiler's intrinsic; every DMA and ds_read then carries the
alias scope of its LDS half-buffer, so the compiler waits only for DMAs into the buffer a ds_read
reads (FlyDSL tags its loads likewise).

Kernel arguments: A, B, C, A_scale, B_scale are passed flattened 1-D (one pointer and
one i32 length each, as FlyDSL's own test passes them: 84 kernarg bytes), then M, N.  The
hand-placed vmcnt counts come from replaying the issue order (:class:`.schedule.Plan`);
``gfx950emu``'s waitcnt checker and numeric runs confirm them (tests).

Variants are data: :data:`SWITCHES` holds one :class:`~mxfp4_ablation.family.Switch`
record per optimisation (the seed's claim, the mechanism, the ISA metric that should
move); the registry (:mod:`mxfp4_ablation.family`) derives the cumulative ladder
``gemm-v0`` .. ``gemm-vN`` and the ``gemm-vN-no-<switch>`` sets from it.  ``gemm-v1``
(AGPR pinning, PR #756, with its zeroing writes) is FlyDSL's kernel before PR #990; every
later switch is PR #990's.  The "seed" is
FlyDSL's ``kernels/gemm/fp4_gemm_4wave.py`` (ROCm/FlyDSL; PR #990 = commit
741f3d6d, and PR #756 for AGPR pinning), whose numbers are quoted, never its
code.
"""

from pathlib import Path

from mxfp4_ablation import family as _family
from mxfp4_ablation.errors import UsageError
from mxfp4_ablation.family import Output

from . import kernel, steps
from .layout import BLOCK_K, BLOCK_M, BLOCK_N, N_WAVES
from .schedule import Plan, head_steps
from .slots import slots_for

#: The kernel family's name (its ladder is ``gemm-v0`` .. ``gemm-vN``) and how errors name it.
NAME = "gemm"
LABEL = "GEMM"
SHAPE_PARAMS = ("M", "N", "K")
OPTIONAL_SHAPE_PARAMS = ()
#: The metric set the study judges these switches by (:mod:`mxfp4_ablation.metrics`).
METRICS = "gemm"
#: Kernel symbol stem (FlyDSL names the symbol ``mxfp4_gemm_0``).
KERNEL_NAME = "mxfp4_gemm"
ARG_NAMES = ("A", "B", "C", "A_scale", "B_scale", "M", "N")

#: One record per step, in ladder order: the steps/ folder's ``NN_<switch>.py`` files.
SWITCHES = _family.switch_table(*(step.SWITCH for step in steps.STEPS))

#: C, bf16 [M, N]: every element is one f32 dot product of K exactly representable products
#: (fp4 x fp4 x 2^e), rounded once to bf16. The reference sums in a different order (torch f32
#: matmul), so the two f32 sums differ by a few f32 ulps and may round to neighbouring bf16 values:
#: at most one bf16 ulp, plus the f32 summation error where the sum cancels (bounded absolutely).
OUTPUTS = (
    Output("C", "close", max_ulp=1, max_abs=2.0 ** -10, min_cosine=0.99999,
           why="one bf16 rounding of an f32 sum whose order differs from the reference's: <= 1 bf16 ulp, "
           "plus <= 2^-10 absolute where the sum cancels (f32 reordering error of K <= 16384 exact products)"),
)


def _fam():
    return _family.of_module(__name__)


def min_k_for_loop(switches) -> int:
    """Smallest K at which the variant has a runtime K loop (smaller K, down to the
    256 minimum, run fully unrolled): 1024 without a peeled head, 1280 once scale_prefetch
    keeps the ring three steps ahead (or zero_first_k peels step 0), 1536 with both or with
    k_unroll4's two peeled steps (tests: ``test_min_k_for_loop_per_rung``)."""
    slots = slots_for(_fam().check_switches(switches))
    k_iters = 1
    while True:
        lo, hi, _u = Plan(slots, k_iters).loop_range(head_steps(slots, k_iters))
        if hi > lo:
            return k_iters * BLOCK_K
        k_iters += 1


def check_shape(M, N, K) -> dict:
    """Validate a shape before any compile (one clear ValueError); returns it as keywords."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise UsageError(f"{name} must be a positive integer, got {v!r}.")
    if M % BLOCK_M or N % BLOCK_N:
        raise UsageError(f"M and N must be multiples of {BLOCK_M} (one 256x256 tile per workgroup), got M={M}, N={N}.")
    if K % BLOCK_K:
        raise UsageError(f"K must be a multiple of {BLOCK_K} (one K step = 256 fp4), got K={K}.")
    return {"M": M, "N": N, "K": K}


def build(M: int, N: int, K: int, **switches):
    """The ``@flyc.jit`` launcher of the GEMM for the given shape and switches.

    ``switches`` are the names in :data:`SWITCHES` mapped to booleans (missing =
    off).  M and N are only baked in with ``static_prologue``; otherwise the launcher
    passes them at run time and they merely pick the grid here.
    """
    check_shape(M, N, K)
    return kernel.build(slots_for(_fam().switch_kwargs(switches)), M, N, K)


def unused_sources(params: dict) -> set:
    """The files of this package a compile with ``params`` does not run: the steps that are off
    (:func:`.steps.unused_files`). The compile cache key and the notebooks' make rules leave them out, so
    an edit of one step recompiles and reruns only what has it on."""
    return steps.unused_files(name for name in SWITCHES if params.get(name))


def builder_sources() -> set:
    """The files of this package whose code reaches a launch only through the compiled kernel: the
    pipeline (:mod:`.kernel`), its stages, slot table and issue plan, and every step file (a step acts
    only through ``apply``). Inputs, reference, arguments and launch config are this module's and
    :mod:`.layout`'s. A run keyed by its ISA (an emulation, a timing run: ``runner.launch_digest``) leaves
    them out, so an edit of a step's code that keeps its ISA keeps every such run; the compile key keeps
    them (``tests/test_runner.py`` checks both)."""
    here = Path(__file__).parent
    return {here / f"{name}.py" for name in ("kernel", "stages", "slots", "schedule")} | \
        {Path(step.__file__) for step in steps.STEPS}


def runtime_params(params: dict) -> tuple:
    """The shape parameters a compile with ``params`` takes at run time instead of baking them into the
    code: M and N (kernel arguments; here they only pick the grid), unless ``static_prologue`` makes them
    constants (:func:`build`). The compile cache key leaves them out, so one compile serves every M, N
    (``tests/test_toolchain.py`` checks that the ISA is byte-identical where the key is shared)."""
    switches = _fam().resolve(params.get("variant_name"), {n: v for n, v in params.items() if n in SWITCHES})
    return () if switches.get("static_prologue") else ("M", "N")


def make_inputs(M: int, N: int, K: int, seed: int = 0, lazy: bool = False) -> dict:
    """Random MXFP4 GEMM inputs in the kernel's layouts (keys = ARG_NAMES), plus the
    unshuffled ``A_q, B_q, A_s, B_s`` for references.  Uses ``mxfp4_ablation.reference``
    when present, else quantises Gaussian data with ``formats``.

    ``lazy=True`` (for a timing run): every buffer is a ``meta`` tensor (shape and dtype, no storage)
    that the timing run maps as zeros, and there is no reference.  A dense GEMM's timing does not
    depend on its data (no data-dependent branch, address or EXEC; ``tests/test_modelled.py`` checks
    that the modelled cycles on random inputs and on these are the same)."""
    import torch

    from mxfp4_ablation import formats

    check_shape(M, N, K)
    if lazy:
        meta = {"device": "meta", "dtype": torch.uint8}
        return {"A": torch.empty(M, K // 2, **meta), "B": torch.empty(N, K // 2, **meta),
                "C": torch.empty(M, N, dtype=torch.bfloat16, device="meta"),
                "A_scale": torch.empty(M, K // 32, **meta), "B_scale": torch.empty(N, K // 32, **meta),
                "M": M, "N": N, "A_q": None, "B_q": None, "A_s": None, "B_s": None}
    gen = torch.Generator().manual_seed(seed)
    a_q, a_s = formats.quantize_mxfp4(torch.randn(M, K, generator=gen))
    b_q, b_s = formats.quantize_mxfp4(torch.randn(N, K, generator=gen))
    return {
        "A": a_q, "B": formats.shuffle_weight_b(b_q), "C": torch.zeros(M, N, dtype=torch.bfloat16),
        "A_scale": formats.shuffle_scales(a_s), "B_scale": formats.shuffle_scales(b_s), "M": M, "N": N,
        "A_q": a_q, "B_q": b_q, "A_s": a_s, "B_s": b_s,
    }


def kernel_args(inputs: dict, **switches) -> list:
    """The emulator's kernarg list (metadata ``.args`` order): A, B, C, A_scale, B_scale
    flattened 1-D, as pointer + i32 length each, then M and N as i32 (see ``common.kernarg_entries``).
    C (bf16 [M, N]) is the output. No switch changes the list (``switches`` are validated)."""
    _fam().switch_kwargs(switches)
    missing = [n for n in ARG_NAMES if n not in inputs]
    if missing:
        raise ValueError(f"GEMM inputs lack {', '.join(missing)} (need {', '.join(ARG_NAMES)}).")
    M, N = inputs["M"], inputs["N"]
    K = int(inputs["A"].shape[-1]) * 2
    check_shape(M, N, K)
    from ..common import kernarg_values

    return kernarg_values([(n, _flat(inputs[n])) for n in ARG_NAMES])


def reference(inputs: dict) -> dict:
    """What C must hold (``{"C": ...}``): the dense reference on the unshuffled operands, rounded to bf16."""
    from mxfp4_ablation.reference import gemm_reference

    return {"C": gemm_reference(inputs["A_q"], inputs["A_s"], inputs["B_q"], inputs["B_s"])}


def launch_config(M: int, N: int, K: int):
    """``(grid, block)`` of one launch: one 256-thread workgroup (4 waves) per 256x256 tile."""
    check_shape(M, N, K)
    return ((M // BLOCK_M) * (N // BLOCK_N), 1, 1), (64 * N_WAVES, 1, 1)


def device_args(inputs: dict, **switches) -> tuple:
    """The FlyDSL launcher's arguments (tensors already on the GPU), in ``ARG_NAMES`` order."""
    _fam().switch_kwargs(switches)
    return tuple(_flat(inputs[n]) for n in ARG_NAMES)


def _flat(value):
    """A tensor argument as the kernel takes it: flattened 1-D (a view sharing its storage, so the
    kernel's stores land in the caller's tensor), as FlyDSL's own test passes them; ints pass through."""
    return value.reshape(-1) if hasattr(value, "reshape") else value


def flops(M: int, N: int, K: int) -> float:
    """Floating-point operations of one launch: 2*M*N*K (the timing harness's TFLOPS)."""
    return 2.0 * M * N * K


def bytes(M: int, N: int, K: int) -> float:  # noqa: A001 - the contract's name
    """Compulsory DRAM traffic of one launch: A and B (fp4) and their E8M0 scales read once, C (bf16)
    written once."""
    return float(M * K // 2 + N * K // 2 + (M + N) * (K // 32) + 2 * M * N)


def compile_entry(M: int, N: int, K: int, variant_name: str = None, **switches):
    """``(jit_launcher, args)`` for ``toolchain.compile``; pass switches by name or a
    ladder/leave-one-out ``variant_name`` (e.g. ``"gemm-v3"``)."""
    import torch

    switches = _fam().resolve(variant_name, switches)
    launcher = build(M, N, K, **switches)
    # Only shapes and dtypes matter for an offline compile: uninitialised tensors (never touched, so
    # they cost no memory or page faults; zero-filled ones made a 16384^3 compile touch 0.8 GB).
    # Tensors are flattened 1-D (see device_args): one pointer + one i32 length each, 84 kernarg bytes.
    args = (
        torch.empty(M * K // 2, dtype=torch.uint8),
        torch.empty(N * K // 2, dtype=torch.uint8),
        torch.empty(M * N, dtype=torch.bfloat16),
        torch.empty(M * K // 32, dtype=torch.uint8),
        torch.empty(N * K // 32, dtype=torch.uint8),
        M,
        N,
    )
    return launcher, args


__doc__ = _family.document(__doc__, SWITCHES)
