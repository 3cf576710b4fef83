"""Every number the study reads off a compiled kernel's ISA, defined once.

:data:`METRICS` is one declarative table, tritonbench-registry style: each :class:`Metric` names the
*region* of the kernel it looks at (:data:`REGIONS`: the whole kernel, the hot loop, the epilogue, ...),
what it takes from there (a count of the instructions whose opcode starts with one of ``prefixes`` or
that pass ``predicate``, or a ``reduce`` of the region's instructions, or a kernel resource), an
optional *normaliser* (per 128 MFMAs of the same region, per 4 K steps, ...) and one sentence saying
what it is. The metric sets are tuples of names over that table:

* :data:`KERNEL_KEYS` -- :func:`kernel_metrics`, the generic set every kernel gets (the CLI, the
  walkthrough, the sweep rows); :data:`SCALAR_KEYS` are its single-number keys;
* :data:`GEMM_KEYS` / :data:`MOE_KEYS` -- :func:`gemm_metrics` / :func:`moe_metrics`, what each family's
  switches are judged by (a family names its set, ``METRICS = "gemm"`` / ``"moe"``; every
  ``Expect.metric`` of its switches is a key of it, a test checks it);
* :data:`FINGERPRINT_KEYS` -- :func:`fingerprint`, the set a kernel is compared by with another
  project's kernel (``experiments/reference/fingerprints.csv``, :mod:`mxfp4_ablation.fidelity`).

A set parses the ``.s`` once (:class:`KernelView`); :func:`diff` / :func:`diff_table` compare two
:func:`kernel_metrics` dicts. Counts are static (instructions in the text, inline asm included, not
executed); a metric whose region a kernel lacks (no loop, no MFMA) is None. The parsing, the loops and
the occupancy model are :mod:`mxfp4_ablation.isa`'s.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Any, Callable, Iterable, Sequence

from . import isa
from .isa import Instruction

#: MFMAs per wave per GEMM K step (4 blocks x 16 accumulators x 2 MFMAs of 128 K each).
GEMM_MFMA_PER_K_STEP = 128

#: The regions a metric can look at; each is a list of instructions, or None when the kernel has none.
REGIONS = {
    "kernel": "every instruction of the kernel function",
    "loop": "the hot loop's body (isa.hot_loop: the backward branch with the most MFMAs, then the most "
            "instructions); None without a loop",
    "after_loop": "the epilogue: the instructions after the last backward branch (the whole kernel when "
                  "the loop was unrolled away)",
    "after_mfma": "the instructions after the last MFMA; None without MFMAs",
    "before_first_buffer_load": "the instructions before the first buffer_load_* in program order; None "
                                "without one",
    "resources": "the kernel descriptor, the .set resource symbols and the amdgpu_metadata entry",
}


@dataclasses.dataclass(frozen=True)
class Metric:
    """One row of :data:`METRICS`: ``name`` over ``region`` (a key of :data:`REGIONS`).

    The raw value is, for ``region="resources"``, the kernel resource of that name
    (:meth:`KernelView.resources`); else ``reduce(instructions)`` when given, else the number of the
    region's instructions whose opcode starts with one of ``prefixes`` or that pass ``predicate`` (all of
    them when neither is given). ``per(value, instructions)`` then normalises it. A region the kernel
    lacks gives None.
    """

    name: str
    region: str
    doc: str
    prefixes: tuple[str, ...] = ()
    predicate: Callable[[Instruction], bool] | None = None
    reduce: Callable[[Sequence[Instruction]], Any] | None = None
    per: Callable[[Any, Sequence[Instruction]], Any] | None = None

    def value(self, view: "KernelView") -> Any:
        if self.region == "resources":
            return view.resources[self.name]
        insts = view.region(self.region)
        if insts is None:
            return None
        if self.reduce is not None:
            value = self.reduce(insts)
        elif self.prefixes:
            value = sum(c for op, c in view.histogram(self.region).items() if op.startswith(self.prefixes))
        elif self.predicate is not None:
            value = sum(1 for i in insts if self.predicate(i))
        else:
            value = len(insts)
        return self.per(value, insts) if self.per is not None else value


# --------------------------------------------------------------------------------------------
# Normalisers and predicates
# --------------------------------------------------------------------------------------------


def _mfma_count(insts: Iterable[Instruction]) -> int:
    return sum(1 for i in insts if isa.is_mfma(i.opcode))


def per_128_mfma(count: int | None, insts: Sequence[Instruction]) -> float | None:
    """``count * 128 / MFMAs`` of the same region, rounded to 3 places (None without MFMAs): kernels that
    unroll differently compare per unit of matrix work (128 MFMAs = one 256-deep K step of a 128x128 wave
    tile of 16x16x128 MFMAs)."""
    mfma = _mfma_count(insts)
    if count is None or not mfma:
        return None
    return round(count * 128 / mfma, 3)


def in_k_steps(mfma: int | None, insts: Sequence[Instruction]) -> float | None:
    """An MFMA count in GEMM K steps (:data:`GEMM_MFMA_PER_K_STEP` MFMAs each); None for none."""
    return mfma / GEMM_MFMA_PER_K_STEP if mfma else None


def per_4_k_steps(count: int | None, insts: Sequence[Instruction]) -> float | None:
    """``count`` per 4 K steps of the same region (PR #990's unit); None without MFMAs."""
    k_steps = in_k_steps(_mfma_count(insts), insts)
    return count * 4 / k_steps if k_steps else None


def _writes_m0(opcode: str) -> Callable[[Instruction], bool]:
    return lambda i: i.opcode == opcode and bool(i.operands) and i.operands[0] == "m0"


def _is_valu(inst: Instruction) -> bool:
    return inst.opcode.startswith("v_") and not isa.is_mfma(inst.opcode)


def _stores_by_width(insts: Iterable[Instruction]) -> dict[int, int]:
    stores: dict[int, int] = {}
    for inst in insts:
        width = isa.store_width(inst.opcode)
        if width is not None:
            stores[width] = stores.get(width, 0) + 1
    return dict(sorted(stores.items()))


def _store_width_is(width: int) -> Callable[[Instruction], bool]:
    return lambda i: isa.store_width(i.opcode) == width


#: Dwords each ``s_load_*`` fetches.
_S_LOAD_DWORDS = {"s_load_dword": 1, "s_load_dwordx2": 2, "s_load_dwordx4": 4, "s_load_dwordx8": 8,
                  "s_load_dwordx16": 16}

#: Store widths (bytes per lane) that always get a ``buffer_store_<N>B`` metric.
STORE_WIDTHS = (1, 2, 4, 8, 12, 16)


#: How a metric counted over another region says where (:func:`_over`).
_WHERE = {"loop": ("loop_", "in the hot loop"), "after_loop": ("epi_", "in the epilogue (after the last loop)")}


def _over(region: str, metric: Metric) -> Metric:
    """``metric`` counted over ``region`` instead, its name prefixed (``loop_``, ``epi_``)."""
    prefix, where = _WHERE[region]
    return dataclasses.replace(metric, name=prefix + metric.name, region=region, doc=f"{metric.doc} {where}")


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------

_INSTRUCTIONS = Metric("instructions", "kernel", "instructions")
_MFMA = Metric("mfma", "kernel", "matrix-core instructions: v_mfma* (incl. v_mfma_scale_*) and v_smfmac*",
               predicate=lambda i: isa.is_mfma(i.opcode))
_S_WAITCNT = Metric("s_waitcnt", "kernel", "s_waitcnt and s_waitcnt_* instructions",
                    predicate=lambda i: isa.is_waitcnt(i.opcode))
_V_READFIRSTLANE = Metric("v_readfirstlane", "kernel", "v_readfirstlane_*", prefixes=("v_readfirstlane",))
_V_EXP = Metric("v_exp_f32", "kernel", "v_exp_f32 (the hardware exp2)", prefixes=("v_exp_f32",))
_V_LDEXP = Metric("v_ldexp_f32", "kernel", "v_ldexp_f32 (the scaling of the library's exp2 expansion)",
                  prefixes=("v_ldexp_f32",))
_V_CNDMASK = Metric("v_cndmask", "kernel", "v_cndmask_*", prefixes=("v_cndmask",))
_V_CMP = Metric("v_cmp", "kernel", "v_cmp_*", prefixes=("v_cmp",))
_VALU = Metric("valu", "kernel", "VALU instructions other than MFMAs", predicate=_is_valu)

_ROWS = [
    # Resources, from the descriptor, the .set symbols and the metadata (KernelView.resources).
    Metric("vgpr_unified", "resources", "registers taken from the 512-entry unified file, as the hardware "
           "allocates them: .amdhsa_next_free_vgpr (usually isa.unified_vgprs(arch_vgpr, agpr); larger when "
           "inline asm names AGPRs, and that larger number limits occupancy); falls back to unified_vgprs, "
           "then metadata .vgpr_count"),
    Metric("arch_vgpr", "resources", "arch VGPRs: .set .L<k>.num_vgpr (else metadata .vgpr_count when there "
           "are no AGPRs)"),
    Metric("agpr", "resources", "accumulation VGPRs: .set .L<k>.num_agpr (else metadata .agpr_count)"),
    Metric("sgpr", "resources", "metadata .sgpr_count (numbered SGPRs plus VCC/FLAT_SCRATCH/XNACK); falls "
           "back to .amdhsa_next_free_sgpr"),
    Metric("lds_bytes", "resources", "static LDS per workgroup: .amdhsa_group_segment_fixed_size"),
    Metric("scratch_bytes", "resources", "private (scratch) bytes per work-item: "
           ".amdhsa_private_segment_fixed_size"),
    Metric("occupancy_waves_per_simd", "resources", "isa.occupancy of the above, with the workgroup size "
           "from the metadata (.reqd_workgroup_size product, else .max_flat_workgroup_size)"),
    Metric("kernarg_bytes", "resources", "kernel-argument bytes: .amdhsa_kernarg_size (else metadata "
           ".kernarg_segment_size)"),
    Metric("kernarg_entries", "resources", "entries of the metadata .args (hidden arguments included)"),
    # Whole-kernel counts.
    _INSTRUCTIONS, _MFMA, _S_WAITCNT,
    Metric("s_barrier", "kernel", "instructions whose opcode starts with s_barrier", prefixes=("s_barrier",)),
    Metric("distinct_opcodes", "kernel", "number of different opcodes",
           reduce=lambda insts: len(isa.histogram(insts))),
    Metric("opcode_histogram", "kernel", "{opcode: count}, most frequent first (ties alphabetical)",
           reduce=isa.histogram),
    Metric("buffer_store_by_width", "kernel", "{bytes per lane: count} over buffer_store_* (isa.store_width), "
           "ascending; format stores left out", reduce=_stores_by_width),
    Metric("buffer_store", "kernel", "buffer_store_* with a known width (isa.store_width)",
           predicate=lambda i: isa.store_width(i.opcode) is not None),
    *(Metric(f"buffer_store_{w}B", "kernel", f"buffer_store_* of {w} bytes per lane (isa.store_width)",
             predicate=_store_width_is(w)) for w in STORE_WIDTHS),
    Metric("global_store", "kernel", "global_store_*", prefixes=("global_store_",)),
    Metric("global_atomic", "kernel", "global_atomic_* (e.g. the atomic bf16 adds of a MoE gemm2)",
           prefixes=("global_atomic_",)),
    Metric("v_accvgpr_write", "kernel", "v_accvgpr_write* (moves into AGPRs)", prefixes=("v_accvgpr_write",)),
    Metric("v_accvgpr_read", "kernel", "v_accvgpr_read* (moves out of AGPRs)", prefixes=("v_accvgpr_read",)),
    Metric("v_accvgpr_mov", "kernel", "v_accvgpr_mov* (AGPR to AGPR)", prefixes=("v_accvgpr_mov",)),
    _V_READFIRSTLANE,
    Metric("m0_writes", "kernel", "scalar/readfirstlane instructions whose destination is m0 (s_mov_b32 m0, "
           "...: the LDS-DMA base and friends)",
           predicate=lambda i: bool(i.operands) and i.operands[0] == "m0"
           and (i.opcode.startswith("s_") or i.opcode.startswith("v_readfirstlane"))),
    Metric("s_load", "kernel", "scalar memory loads s_load_* (kernel arguments and other constants)",
           prefixes=("s_load_",)),
    Metric("s_load_dwords", "kernel", "dwords the s_load_* fetch",
           reduce=lambda insts: sum(_S_LOAD_DWORDS.get(i.opcode, 0) for i in insts)),
    Metric("ds_read", "kernel", "LDS reads ds_read*", prefixes=("ds_read",)),
    Metric("ds_write", "kernel", "LDS writes ds_write*", prefixes=("ds_write",)),
    Metric("v_permlane", "kernel", "v_permlane* (cross-lane swaps)", prefixes=("v_permlane",)),
    Metric("v_permlane16_swap", "kernel", "v_permlane16_swap*", prefixes=("v_permlane16_swap",)),
    Metric("int_div_idiom", "kernel", "v_rcp_iflag_f32 + v_rcp_f32 + v_cvt_f32_u32, any encoding: LLVM's "
           "expansion of an unsigned integer division through a float reciprocal",
           prefixes=("v_rcp_iflag_f32", "v_rcp_f32", "v_cvt_f32_u32")),
    _V_EXP, _V_LDEXP,
    Metric("mad_64", "kernel", "64-bit multiply-adds v_mad_u64_u32 + v_mad_i64_i32 (address arithmetic)",
           prefixes=("v_mad_u64_u32", "v_mad_i64_i32")),
    Metric("v_mad_u64_u32", "kernel", "v_mad_u64_u32", prefixes=("v_mad_u64_u32",)),
    Metric("sign_shifts", "kernel", "s_ashr_i32 + v_ashrrev_i32: the sign fix-ups of signed division and "
           "extension", prefixes=("s_ashr_i32", "v_ashrrev_i32")),
    Metric("s_mul_hi_i32", "kernel", "s_mul_hi_i32", prefixes=("s_mul_hi_i32",)),
    Metric("s_mul_hi_u32", "kernel", "s_mul_hi_u32", prefixes=("s_mul_hi_u32",)),
    Metric("asm_s_waitcnt", "kernel", "s_waitcnt written as inline asm",
           predicate=lambda i: i.opcode == "s_waitcnt" and i.in_asm_block),
    dataclasses.replace(_VALU, name="kernel_valu"),
    dataclasses.replace(_S_WAITCNT, name="s_waitcnt_per_128_mfma", doc="s_waitcnt per 128 MFMAs",
                        per=per_128_mfma),
    # The hot loop.
    *(_over("loop", m) for m in (_INSTRUCTIONS, _MFMA, _S_WAITCNT, _V_READFIRSTLANE)),
    Metric("loop_instructions_per_128_mfma", "loop", "hot-loop instructions per 128 of its MFMAs",
           per=per_128_mfma),
    Metric("loop_s_waitcnt_per_128_mfma", "loop", "hot-loop s_waitcnt per 128 of its MFMAs",
           predicate=_S_WAITCNT.predicate, per=per_128_mfma),
    Metric("loop_k_steps", "loop", "hot-loop MFMAs in K steps (/ 128)", predicate=_MFMA.predicate,
           per=in_k_steps),
    Metric("loop_s_waitcnt_per_4k", "loop", "hot-loop s_waitcnt per 4 K steps (PR #990's unit)",
           predicate=_S_WAITCNT.predicate, per=per_4_k_steps),
    Metric("loop_max_lds_run", "loop", "isa.max_lds_run of the hot loop: whether its LDS reads and DMAs are "
           "interleaved with its MFMAs (1) or issued in batches", reduce=isa.max_lds_run),
    Metric("mfma_operand_reuse", "loop", "isa.operand_reuse of the hot loop's MFMAs: share of consecutive "
           "pairs repeating an A or B operand", reduce=isa.operand_reuse),
    Metric("loop_buffer_load_dword", "loop", "buffer_load_dword in the hot loop",
           predicate=lambda i: i.opcode == "buffer_load_dword"),
    Metric("loop_ds_read_b32", "loop", "every ds_read* moving 32-bit elements (ds_read2st64_b32 included) in "
           "the hot loop", predicate=lambda i: i.opcode.startswith("ds_read") and i.opcode.endswith("_b32")),
    Metric("loop_v_add_u32", "loop", "v_add_u32* in the hot loop", prefixes=("v_add_u32",)),
    Metric("loop_s_mov_b32_m0", "loop", "s_mov_b32 m0, ... in the hot loop", predicate=_writes_m0("s_mov_b32")),
    Metric("loop_s_add_u32_m0", "loop", "s_add_u32 m0, ... in the hot loop", predicate=_writes_m0("s_add_u32")),
    Metric("insts_before_first_buffer_load", "before_first_buffer_load",
           "instructions before the first buffer_load_* in program order"),
    # The epilogue.
    *(_over("after_loop", m) for m in (_V_EXP, _V_LDEXP, _V_CNDMASK, _V_CMP, _VALU)),
    Metric("epilogue_instructions", "after_mfma", "instructions after the last MFMA"),
]

#: Every metric, by name.
METRICS: dict[str, Metric] = {m.name: m for m in _ROWS}
assert len(METRICS) == len(_ROWS), "two metrics share a name"
assert all(m.region in REGIONS for m in _ROWS)


# --------------------------------------------------------------------------------------------
# One parse of one kernel, with its regions
# --------------------------------------------------------------------------------------------


class KernelView:
    """One kernel of a ``.s`` text parsed once: its regions (:data:`REGIONS`) and resources.

    ``source`` is the ``.s`` text, a toolchain ``Artifact`` (its ``.isa``) or a parsed
    :class:`~mxfp4_ablation.isa.Kernel`; ``kernel`` picks a kernel by name (FlyDSL's ``_0`` suffix may be
    left off), None when the text holds one."""

    def __init__(self, source: Any, kernel: str | None = None):
        self.kernel = isa.kernel_of(source, kernel)
        self._histograms: dict[str, dict[str, int]] = {}

    @cached_property
    def _regions(self) -> dict[str, list[Instruction] | None]:
        insts = self.kernel.instructions
        found = isa.loops(self.kernel)
        hot = isa.hottest(found)
        mfma_at = [n for n, i in enumerate(insts) if isa.is_mfma(i.opcode)]
        first_load = next((n for n, i in enumerate(insts) if i.opcode.startswith("buffer_load_")), None)
        return {
            "kernel": insts,
            "loop": list(hot.body) if hot is not None else None,
            "after_loop": insts[max(lp.end for lp in found) + 1:] if found else insts,
            "after_mfma": insts[mfma_at[-1] + 1:] if mfma_at else None,
            "before_first_buffer_load": insts[:first_load] if first_load is not None else None,
        }

    def region(self, name: str) -> list[Instruction] | None:
        return self._regions[name]

    def histogram(self, region: str) -> dict[str, int]:
        if region not in self._histograms:
            self._histograms[region] = isa.histogram(self.region(region) or ())
        return self._histograms[region]

    @cached_property
    def resources(self) -> dict[str, Any]:
        """The ``resources`` metrics (defined in :data:`METRICS`)."""
        k = self.kernel
        sym, desc, md = k.symbols, k.descriptor, k.metadata
        agpr = _first_int(sym.get("num_agpr"), md.get(".agpr_count"))
        arch_vgpr = _first_int(sym.get("num_vgpr"))
        if arch_vgpr is None and isinstance(md.get(".vgpr_count"), int) and agpr == 0:
            arch_vgpr = md[".vgpr_count"]
        # The descriptor is what the hardware allocates from; the symbols are the fallback.
        vgpr_unified = _first_int(desc.get("next_free_vgpr"))
        if vgpr_unified is None and arch_vgpr is not None:
            vgpr_unified = isa.unified_vgprs(arch_vgpr, agpr or 0)
        if vgpr_unified is None:
            vgpr_unified = _first_int(md.get(".vgpr_count"))
        sgpr = _first_int(md.get(".sgpr_count"), desc.get("next_free_sgpr"))
        lds = _first_int(desc.get("group_segment_fixed_size"), md.get(".group_segment_fixed_size"))
        return {
            "vgpr_unified": vgpr_unified, "arch_vgpr": arch_vgpr, "agpr": agpr, "sgpr": sgpr, "lds_bytes": lds,
            "scratch_bytes": _first_int(desc.get("private_segment_fixed_size"),
                                        md.get(".private_segment_fixed_size"), sym.get("private_seg_size")),
            "occupancy_waves_per_simd": isa.occupancy(vgpr_unified, sgpr, lds,
                                                      isa.workgroup_size(k))["waves_per_simd"],
            "kernarg_bytes": _first_int(desc.get("kernarg_size"), md.get(".kernarg_segment_size")),
            "kernarg_entries": len(md.get(".args", [])),
        }

    def values(self, keys: Iterable[str]) -> dict[str, Any]:
        """``{key: value}`` of the metrics ``keys``, in that order."""
        return {key: METRICS[key].value(self) for key in keys}


def _first_int(*values: Any) -> int | None:
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool)), None)


# --------------------------------------------------------------------------------------------
# The sets
# --------------------------------------------------------------------------------------------

#: The keys of :func:`kernel_metrics`, in order.
KERNEL_KEYS = (
    "vgpr_unified", "arch_vgpr", "agpr", "sgpr", "lds_bytes", "scratch_bytes", "occupancy_waves_per_simd",
    "instructions", "mfma", "s_waitcnt", "s_barrier", "loop_instructions", "loop_mfma", "loop_s_waitcnt",
    "insts_before_first_buffer_load", "buffer_store_by_width", "v_accvgpr_write", "v_accvgpr_read",
    "distinct_opcodes", "opcode_histogram",
)
#: The keys of :func:`kernel_metrics` whose values are single numbers (or None).
SCALAR_KEYS = tuple(k for k in KERNEL_KEYS if k not in ("buffer_store_by_width", "opcode_histogram"))

#: The keys of :func:`gemm_metrics`: :data:`SCALAR_KEYS` plus what the GEMM switches move.
GEMM_KEYS = SCALAR_KEYS + (
    "buffer_store_2B", "buffer_store_16B", "v_accvgpr_mov", "v_permlane16_swap", "int_div_idiom",
    "mfma_operand_reuse", "loop_k_steps", "loop_s_waitcnt_per_4k", "loop_buffer_load_dword", "loop_ds_read_b32",
    "loop_v_readfirstlane", "loop_v_add_u32", "loop_s_mov_b32_m0", "loop_s_add_u32_m0",
)

#: The keys of :func:`moe_metrics`: :data:`SCALAR_KEYS` plus what the MoE switches move (``int64_abi``:
#: the kernargs and their scalar loads; ``exp2``: the epilogue's ``epi_*``; gemm2's divisions and
#: address arithmetic).
MOE_KEYS = SCALAR_KEYS + (
    "kernarg_bytes", "kernarg_entries", "s_load", "s_load_dwords", "epi_v_exp_f32", "epi_v_ldexp_f32",
    "epi_v_cndmask", "epi_v_cmp", "epi_valu", "kernel_valu", "sign_shifts", "s_mul_hi_i32", "s_mul_hi_u32",
    "v_mad_u64_u32", "mad_64", "asm_s_waitcnt", "epilogue_instructions",
)

#: The keys of :func:`fingerprint`, in order.
FINGERPRINT_KEYS = (
    "vgpr_unified", "arch_vgpr", "agpr", "sgpr", "lds_bytes", "kernarg_bytes",
    "instructions", "mfma", "s_waitcnt", "s_waitcnt_per_128_mfma",
    "loop_instructions", "loop_mfma", "loop_s_waitcnt",
    "loop_instructions_per_128_mfma", "loop_s_waitcnt_per_128_mfma", "loop_max_lds_run",
    "s_barrier", "insts_before_first_buffer_load",
    "buffer_store", *(f"buffer_store_{w}B" for w in STORE_WIDTHS), "global_store", "global_atomic",
    "v_accvgpr_write", "v_accvgpr_read", "v_readfirstlane", "m0_writes", "s_load",
    "ds_read", "ds_write", "v_permlane",
    "v_exp_f32", "v_ldexp_f32", "mad_64", "sign_shifts",
)

assert all(k in METRICS for k in KERNEL_KEYS + GEMM_KEYS + MOE_KEYS + FINGERPRINT_KEYS)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _values(source: Any, kernel: str | None, keys: tuple[str, ...]) -> dict[str, Any]:
    """``KernelView(source, kernel).values(keys)``, kept on disk by the ``.s`` text's digest, the kernel,
    the keys and the code of this module and everything it imports (:func:`.sources.closure_digest`):
    the summary reads the metrics of ~60 compiles that the step notebooks and its sweep already read, and
    parsing a GEMM's ``.s`` is ~0.1 s each (issue #24). Only a text (or Artifact) source whose values are
    all single numbers is kept; a damaged or mismatched entry is a miss."""
    import hashlib
    import json

    text = source if isinstance(source, str) else getattr(source, "isa", None)
    if not isinstance(text, str):
        return KernelView(source, kernel).values(keys)
    from . import diskcache, paths, sources

    key = hashlib.sha256(json.dumps([sources.closure_digest({__name__}), kernel, keys,
                                     hashlib.sha256(text.encode()).hexdigest()]).encode()).hexdigest()
    entry = paths.cache_dir() / "metrics" / key[:2] / f"{key}.json"
    try:
        stored = json.loads(entry.read_text())
        if isinstance(stored, dict) and stored.get("key") == key and list(stored.get("values", {})) == list(keys):
            return stored["values"]
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    values = KernelView(text, kernel).values(keys)
    if all(_scalar(v) for v in values.values()):
        try:
            diskcache.atomic_write_text(entry, json.dumps({"key": key, "values": values}))
        except OSError:  # a read-only cache only costs the parse next time
            pass
    return values


def kernel_metrics(isa_text: Any, kernel: str | None = None) -> dict[str, Any]:
    """One kernel of a ``.s`` text (or Artifact, or parsed Kernel) reduced to :data:`KERNEL_KEYS`
    (a JSON-friendly dict, in that order; definitions in :data:`METRICS`)."""
    return _values(isa_text, kernel, KERNEL_KEYS)


def gemm_metrics(isa_text: Any) -> dict[str, Any]:
    """:data:`GEMM_KEYS` of a compiled GEMM (``.s`` text or Artifact)."""
    return _values(isa_text, None, GEMM_KEYS)


def moe_metrics(isa_text: Any) -> dict[str, Any]:
    """:data:`MOE_KEYS` of a compiled MoE kernel (``.s`` text or Artifact)."""
    return _values(isa_text, None, MOE_KEYS)


def fingerprint(isa_text: Any, kernel: str | None = None) -> dict[str, Any]:
    """:data:`FINGERPRINT_KEYS` of one kernel: the flat numbers (ints, floats or None) a kernel is
    compared by with another project's kernel."""
    return _values(isa_text, kernel, FINGERPRINT_KEYS)


#: Metric set name (a family's ``METRICS``) -> function of ISA text.
METRIC_SETS: dict[str, Callable[[Any], dict[str, Any]]] = {"gemm": gemm_metrics, "moe": moe_metrics}


def metric_set(name: str) -> Callable[[Any], dict[str, Any]]:
    if name not in METRIC_SETS:
        raise ValueError(f"unknown metric set {name!r} (known: {', '.join(METRIC_SETS)})")
    return METRIC_SETS[name]


def for_family(family_name: str, isa_text: Any) -> dict[str, Any]:
    """The metrics ``family_name``'s switches are judged by, on ``isa_text`` (or an Artifact)."""
    from . import family

    return metric_set(family.get(family_name).metrics)(isa_text)


def for_variant(variant_name: str, isa_text: Any) -> dict[str, Any]:
    """:func:`for_family` for the family of a variant name."""
    from . import variants

    return for_family(variants.get(variant_name).family, isa_text)


# --------------------------------------------------------------------------------------------
# Comparing two kernels
# --------------------------------------------------------------------------------------------


def _compare(a: Any, b: Any) -> dict[str, Any]:
    """``{"a", "b", "delta": b - a, "ratio": b / a}``; ratio 1.0 when equal, None when a is 0/None."""
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    delta = b - a if numeric else None
    if numeric and a == b:
        ratio: float | None = 1.0
    elif numeric and a != 0:
        ratio = b / a
    else:
        ratio = None
    return {"a": a, "b": b, "delta": delta, "ratio": ratio}


def _check_metrics(m: Any, which: str) -> dict[str, Any]:
    if not isinstance(m, dict) or not set(SCALAR_KEYS) <= set(m):
        raise ValueError(f"diff() needs two dicts returned by metrics.kernel_metrics(); argument {which} is not one.")
    return m


def _int_keys(d: dict | None) -> dict[int, int]:
    """``buffer_store_by_width`` with int keys (they come back as strings from JSON)."""
    return {int(k): v for k, v in (d or {}).items()}


def diff(metrics_a: dict[str, Any], metrics_b: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Compare two :func:`kernel_metrics` dicts (a = baseline, b = variant).

    Returns ``{"metrics": {key: cmp}, "opcodes": {opcode: cmp}, "buffer_store_by_width":
    {bytes: cmp}}`` where each ``cmp`` is ``{"a", "b", "delta", "ratio"}``: ``delta = b - a``,
    ``ratio = b / a`` (1.0 when equal, None when a is 0 and b is not, or a value is None).
    Opcodes and store widths missing on one side count as 0 there.
    """
    a = _check_metrics(metrics_a, "a")
    b = _check_metrics(metrics_b, "b")
    out: dict[str, dict[str, Any]] = {"metrics": {k: _compare(a.get(k), b.get(k)) for k in SCALAR_KEYS}}
    ha, hb = a.get("opcode_histogram") or {}, b.get("opcode_histogram") or {}
    out["opcodes"] = {op: _compare(ha.get(op, 0), hb.get(op, 0)) for op in sorted(set(ha) | set(hb))}
    sa, sb = _int_keys(a.get("buffer_store_by_width")), _int_keys(b.get("buffer_store_by_width"))
    out["buffer_store_by_width"] = {w: _compare(sa.get(w, 0), sb.get(w, 0)) for w in sorted(set(sa) | set(sb))}
    return out


def diff_table(metrics_a: dict[str, Any], metrics_b: dict[str, Any], *, changed_only: bool = False):
    """:func:`diff` as a pandas DataFrame: columns ``section, name, a, b, delta, ratio``.

    ``section`` is ``metrics``, ``opcodes`` or ``buffer_store_by_width``; rows keep the order of
    :func:`diff`. With ``changed_only`` the rows where ``a == b`` are dropped.
    """
    import pandas as pd

    rows = []
    for section, entries in diff(metrics_a, metrics_b).items():
        for name, cmp in entries.items():
            if changed_only and cmp["a"] == cmp["b"]:
                continue
            rows.append({"section": section, "name": str(name), **cmp})
    return pd.DataFrame(rows, columns=["section", "name", "a", "b", "delta", "ratio"])
