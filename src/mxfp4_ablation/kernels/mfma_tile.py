"""One-wave MXFP4 tile kernel: a 16x16 C = A . B^T with the scaled MFMA.

The smallest kernel of ours that exercises every hardware feature the dense
GEMM relies on, so the emulator and the ISA tooling can be tested on something
whose every instruction a person can read:

* ``v_mfma_scale_f32_16x16x128_f8f6f4`` with fp4 x fp4 (``cbsz:4 blgp:4``) and
  the E8M0 block scales applied inside the MFMA;
* one ``buffer_load_dwordx4 ... lds`` (LDS DMA) per K step for A, read back
  with ``ds_read_b128``;
* a plain ``buffer_load_dwordx4`` for B and a ``buffer_load_dword*`` for each
  scale row;
* one 16-byte ``buffer_store_dwordx4`` of f32 per lane for C.

Shapes (all row-major, ``uint8`` except C): ``A [16, K/2]`` and ``B [16, K/2]``
hold two E2M1 values per byte (element ``2i`` in the low nibble, as
``mxfp4_ablation.formats.pack_fp4``); ``A_scale [16, K/32]`` and
``B_scale [16, K/32]`` hold one E8M0 byte per 32-element K block;
``C [16, 16]`` is float32 and receives ``sum_k A[m,k]*sa[m,k//32] *
B[n,k]*sb[n,k//32]``.  ``K`` is 128 x ``ksteps`` (one MFMA per K step).

Lane mapping (lane ``l`` of the single wave, ``r = l % 16``, ``g = l // 16``):

* LDS DMA for A, K step ``s``: lane ``l`` fetches the 16 bytes at global byte
  ``(l//4)*(K/2) + 64*s + 16*(l%4)`` (row ``l//4``, bytes ``16*(l%4)..+15`` of
  that row's K step), and the hardware writes them to LDS ``1024*s + 16*l``;
  LDS therefore holds each K step as a 16 x 64-byte row-major block.
* ``ds_read_b128`` for A: lane ``l`` reads LDS ``1024*s + 64*r + 16*g`` = row
  ``r`` of A, fp4 elements ``128*s + 32*g .. +31``.
* ``buffer_load_dwordx4`` for B: lane ``l`` reads global byte
  ``r*(K/2) + 64*s + 16*g`` = row ``r`` of B, the same 32 K elements.
* scales: lane ``l`` loads the whole scale row ``r`` (``K/32`` bytes, as
  ``K/128`` dwords); for K step ``s`` it shifts dword ``s`` right by ``8*g`` so
  byte 0 (``op_sel`` 0) is the scale of its K block ``4*s + g``.
* MFMA operands are swapped (B's fragment is ``src0``, A's is ``src1``), so
  the MFMA computes C^T and lane ``l`` ends with ``C[r, 4g .. 4g+3]`` -- four
  consecutive floats of one row -- stored with one ``buffer_store_dwordx4`` at
  byte ``64*r + 16*g``.

The MFMA's register convention assumed here (src0 lane ``l`` = row ``l%16`` of
the 16xK operand, K elements ``32*(l//16)..+31``; src1 likewise for the
columns; result lane ``l`` = ``D[4*(l//16)+i, l%16]``) is the CDNA3/4 16x16
layout described in AMD's CDNA4 ISA guide and AMD's matrix-instruction
calculator.
"""


import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import const_expr, range_constexpr

from . import common as C

#: Kernel symbol stem (FlyDSL names the symbol ``mxfp4_mfma_tile_0``).
KERNEL_NAME = "mxfp4_mfma_tile"
#: Kernel parameters in order (each tensor expands to pointer + layout block).
ARG_NAMES = ("A", "B", "A_scale", "B_scale", "C")
TILE = 16
K_STEP = 128
MAX_KSTEPS = 4


def check_params(K: int = 128) -> int:
    """Validate the tile's K; returns the number of K steps."""
    if not isinstance(K, int) or isinstance(K, bool):
        raise ValueError(f"K must be an integer, got {K!r}.")
    if K <= 0 or K % K_STEP or K // K_STEP > MAX_KSTEPS:
        raise ValueError(f"K must be 128, 256, 384 or 512 (a multiple of 128, at most 4 K steps); got {K}.")
    return K // K_STEP


def build(K: int = 128, lds_dma: bool = True):
    """Return the ``@flyc.jit`` launcher for a 16x16xK tile (one wave).

    ``lds_dma=False`` loads A straight to VGPRs like B (no LDS at all): a simpler
    variant for checking the MFMA path alone."""
    ksteps = check_params(K)
    if not isinstance(lds_dma, bool):
        raise ValueError(f"lds_dma must be True or False, got {lds_dma!r}.")
    row_bytes = K // 2
    scale_row = K // 32
    scale_dwords = scale_row // 4

    @fx.struct
    class Shared:
        a_tile: fx.Array[fx.Int8, 1024 * ksteps if lds_dma else 16, 16]

    @flyc.kernel
    def mxfp4_mfma_tile(A: fx.Tensor, B: fx.Tensor, A_scale: fx.Tensor, B_scale: fx.Tensor, Cout: fx.Tensor):
        lds = fx.SharedAllocator().allocate(Shared).peek()
        lane = fx.thread_idx.x % 64
        r = lane % 16
        g = lane // 16
        a_rsrc = C.buffer_rsrc(A, TILE * row_bytes)
        b_rsrc = C.buffer_rsrc(B, TILE * row_bytes)
        sa_rsrc = C.buffer_rsrc(A_scale, TILE * scale_row)
        sb_rsrc = C.buffer_rsrc(B_scale, TILE * scale_row)
        c_rsrc = C.buffer_rsrc(Cout, TILE * TILE * 4)
        lds_base = C.uniform(C.lds_addr(lds.a_tile))

        # A: global -> LDS directly, one 1 KiB K step per instruction.
        dma_off = (lane // 4) * row_bytes + (lane % 4) * 16
        if const_expr(lds_dma):
            for s in range_constexpr(ksteps):
                C.lds_dma_dwordx4(a_rsrc, fx.Int32(lds_base) + 1024 * s, dma_off, 64 * s)
        else:
            a_direct = [C.buffer_load(a_rsrc, r * row_bytes + g * 16, 4, 64 * s) for s in range_constexpr(ksteps)]

        # Scales and B straight to VGPRs.
        sa_row = C.buffer_load(sa_rsrc, r * scale_row, scale_dwords)
        sb_row = C.buffer_load(sb_rsrc, r * scale_row, scale_dwords)
        b_frag = [C.buffer_load(b_rsrc, r * row_bytes + g * 16, 4, 64 * s) for s in range_constexpr(ksteps)]

        fx.rocdl.s_waitcnt(vmcnt=0)
        acc = C.zeros_f32x4()
        for s in range_constexpr(ksteps):
            if const_expr(lds_dma):
                a_frag = C.ds_read_b128(fx.Int32(lds_base) + 1024 * s + r * 64 + g * 16)
            else:
                a_frag = a_direct[s]
            sa = _dword(sa_row, s, scale_dwords) >> (g * 8)
            sb = _dword(sb_row, s, scale_dwords) >> (g * 8)
            # Swapped operands: the MFMA produces C^T, see the module docstring.
            acc = C.mfma_scale_fp4(b_frag[s], a_frag, acc, sb, sa)
        C.buffer_store(acc, c_rsrc, r * 64 + g * 16)

    @flyc.jit
    def launch(
        A: fx.Tensor,
        B: fx.Tensor,
        A_scale: fx.Tensor,
        B_scale: fx.Tensor,
        Cout: fx.Tensor,
        stream: fx.Stream = fx.Stream(None),
    ):
        mxfp4_mfma_tile(A, B, A_scale, B_scale, Cout).launch(grid=(1, 1, 1), block=(64, 1, 1), stream=stream)

    return launch


def make_inputs(K: int = 128, seed: int = 0) -> dict:
    """Random MXFP4 inputs for the tile (``formats.quantize_mxfp4`` of Gaussian
    data with a spread of block scales) plus a zeroed ``C``; keys = ARG_NAMES."""
    import torch

    from mxfp4_ablation import formats

    check_params(K)
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(TILE, K, generator=gen) * torch.exp2(torch.randint(-3, 4, (TILE, K // 32), generator=gen)).repeat_interleave(32, 1)
    b = torch.randn(TILE, K, generator=gen) * torch.exp2(torch.randint(-3, 4, (TILE, K // 32), generator=gen)).repeat_interleave(32, 1)
    a_q, a_s = formats.quantize_mxfp4(a)
    b_q, b_s = formats.quantize_mxfp4(b)
    return {"A": a_q, "B": b_q, "A_scale": a_s, "B_scale": b_s, "C": torch.zeros(TILE, TILE, dtype=torch.float32)}


def reference(inputs: dict):
    """The exact product the kernel must produce: dequantised ``A @ B^T`` in
    float64, returned as float32 ``[16, 16]`` (fp4 x fp4 products and their
    sums are exact in the MFMA's f32 accumulator only up to rounding, so compare
    with a relative tolerance of ~1e-6)."""
    from mxfp4_ablation import formats

    a = formats.dequantize_mxfp4(inputs["A"], inputs["A_scale"]).double()
    b = formats.dequantize_mxfp4(inputs["B"], inputs["B_scale"]).double()
    return (a @ b.T).float()


def _check_inputs(inputs: dict) -> int:
    import torch

    missing = [n for n in ARG_NAMES if n not in inputs]
    if missing:
        raise ValueError(f"mfma_tile inputs lack {', '.join(missing)} (need {', '.join(ARG_NAMES)}).")
    K = int(inputs["A"].shape[-1]) * 2
    check_params(K)
    want = {"A": ((TILE, K // 2), torch.uint8), "B": ((TILE, K // 2), torch.uint8),
            "A_scale": ((TILE, K // 32), torch.uint8), "B_scale": ((TILE, K // 32), torch.uint8),
            "C": ((TILE, TILE), torch.float32)}
    for name, (shape, dtype) in want.items():
        t = inputs[name]
        if tuple(t.shape) != shape or t.dtype != dtype or not t.is_contiguous():
            raise ValueError(f"mfma_tile input {name} must be a contiguous {dtype} tensor of shape {shape} "
                             f"for K={K}, got {tuple(t.shape)} {t.dtype}.")
    return K


def kernel_args(inputs: dict) -> list:
    """The emulator's kernarg list for the compiled tile (order of the metadata
    ``.args``): per tensor a ``global_buffer`` entry carrying the tensor and a
    16-byte ``by_value`` layout block, see ``common.kernarg_entries``.  ``C`` is
    the output."""
    _check_inputs(inputs)
    return C.kernarg_values([(n, inputs[n]) for n in ARG_NAMES])


def compile_entry(K: int = 128, lds_dma: bool = True):
    """``(jit_launcher, args)`` for ``toolchain.compile`` (CPU tensors; only
    their shapes and dtypes matter for an offline compile)."""
    inputs = make_inputs(K)
    return build(K, lds_dma), tuple(inputs[n] for n in ARG_NAMES)


def _dword(row, s, n):
    """Dword ``s`` of a scale row loaded as ``n`` dwords (an i32 if ``n == 1``)."""
    if n == 1:
        return fx.Int32(row)
    return fx.Int32(fx.Vector(row)[s])
