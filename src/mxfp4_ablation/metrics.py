"""The study's metric sets: what each family's switches are judged by, on a compiled kernel's ISA.

:mod:`mxfp4_ablation.isa` is the ISA analysis (parsing, loops, histograms, the generic
:func:`~mxfp4_ablation.isa.metrics`); this layer adds the few counts the :class:`~mxfp4_ablation.family.Expect`
records name, per metric set. A family names its set (``METRICS = "gemm"`` / ``"moe"``) -- kernels
never import analysis code; :func:`for_family` looks the set up here.

Every set returns :func:`isa.metrics`' scalar keys plus its own; every ``Expect.metric`` of a family's
switches is a key of its set (a test checks it).
"""

from __future__ import annotations

from typing import Any, Callable

from . import isa

#: MFMAs per wave per GEMM K step (4 blocks x 16 accumulators x 2 MFMAs of 128 K each).
GEMM_MFMA_PER_K_STEP = 128


def _text(isa_text: Any) -> str:
    text = getattr(isa_text, "isa", isa_text)
    if not isinstance(text, str):
        raise ValueError("metrics need ISA text or a toolchain Artifact.")
    return text


def _count(insts, pred) -> int:
    return sum(1 for i in insts or () if pred(i))


def _writes_m0(inst, opcode: str) -> bool:
    return inst.opcode == opcode and bool(inst.operands) and inst.operands[0] == "m0"


def _is_valu(inst) -> bool:
    return inst.opcode.startswith("v_") and not inst.opcode.startswith(("v_mfma", "v_smfmac"))


def gemm_metrics(isa_text: Any) -> dict[str, float | None]:
    """:func:`isa.metrics`' scalar metrics plus the counts the GEMM switches are judged by.

    Added keys: ``buffer_store_2B`` / ``buffer_store_16B`` (stores by bytes per lane);
    ``v_accvgpr_mov``; ``v_permlane16_swap``; ``int_div_idiom`` (``v_rcp_iflag_f32`` +
    ``v_rcp_f32`` + ``v_cvt_f32_u32``, any encoding: LLVM's expansion of an unsigned integer
    division through a float reciprocal); ``mfma_operand_reuse`` (hot loop); ``loop_k_steps``
    (hot-loop MFMAs / 128); ``loop_s_waitcnt_per_4k`` (the PR's unit); and counts in the hot loop:
    ``loop_buffer_load_dword``, ``loop_ds_read_b32`` (every ``ds_read*`` moving 32-bit elements,
    ``ds_read2st64_b32`` included), ``loop_v_readfirstlane``, ``loop_v_add_u32``,
    ``loop_s_mov_b32_m0`` / ``loop_s_add_u32_m0`` (writes of m0). Loop keys are None when the
    kernel has no loop.
    """
    m = isa.metrics(isa_text)
    out: dict[str, float | None] = {k: m[k] for k in isa.SCALAR_KEYS}
    widths = {int(k): v for k, v in (m.get("buffer_store_by_width") or {}).items()}
    hist = m.get("opcode_histogram") or {}
    out["buffer_store_2B"] = widths.get(2, 0)
    out["buffer_store_16B"] = widths.get(16, 0)
    out["v_accvgpr_mov"] = sum(c for op, c in hist.items() if op.startswith("v_accvgpr_mov"))
    out["v_permlane16_swap"] = sum(c for op, c in hist.items() if op.startswith("v_permlane16_swap"))
    div_ops = ("v_rcp_iflag_f32", "v_rcp_f32", "v_cvt_f32_u32")
    out["int_div_idiom"] = sum(c for op, c in hist.items() if op.startswith(div_ops))
    body = isa.hot_loop(isa_text)
    out["mfma_operand_reuse"] = isa.mfma_operand_reuse(isa_text, loop_only=True)
    loop_mfma = m.get("loop_mfma")
    k_steps = loop_mfma / GEMM_MFMA_PER_K_STEP if loop_mfma else None
    out["loop_k_steps"] = k_steps
    out["loop_s_waitcnt_per_4k"] = (m["loop_s_waitcnt"] * 4 / k_steps) if k_steps else None
    if body is None:
        for key in ("loop_buffer_load_dword", "loop_ds_read_b32", "loop_v_readfirstlane", "loop_v_add_u32",
                    "loop_s_mov_b32_m0", "loop_s_add_u32_m0"):
            out[key] = None
    else:
        out["loop_buffer_load_dword"] = _count(body, lambda i: i.opcode == "buffer_load_dword")
        out["loop_ds_read_b32"] = _count(body, lambda i: i.opcode.startswith("ds_read") and i.opcode.endswith("_b32"))
        out["loop_v_readfirstlane"] = _count(body, lambda i: i.opcode.startswith("v_readfirstlane"))
        out["loop_v_add_u32"] = _count(body, lambda i: i.opcode.startswith("v_add_u32"))
        out["loop_s_mov_b32_m0"] = _count(body, lambda i: _writes_m0(i, "s_mov_b32"))
        out["loop_s_add_u32_m0"] = _count(body, lambda i: _writes_m0(i, "s_add_u32"))
    return out


def moe_kernel_counts(isa_text: Any) -> dict[str, Any]:
    """The numbers the MoE ABI and exp2 switches move, from a compiled kernel's ``.s`` text (or Artifact).

    * ``kernarg_bytes`` (metadata ``.kernarg_segment_size``), ``kernarg_entries`` (metadata
      ``.args``), ``s_load`` (``s_load_*`` instructions: all of them read kernel arguments
      here) and ``s_load_dwords`` (dwords they fetch) -- ``int64_abi``;
    * over the epilogue (the instructions after the K loop's backward branch; the whole
      kernel when the loop was unrolled away): ``v_exp_f32``, ``v_ldexp_f32``,
      ``v_cndmask``, ``v_cmp`` and ``valu`` (VALU instructions other than MFMAs) -- ``exp2``;
    * ``kernel_valu``: the same VALU count over the whole kernel.
    """
    kernels = isa.parse(_text(isa_text))
    if not kernels:
        raise ValueError("the ISA text holds no kernel.")
    k = kernels[0]
    insts = k.instructions
    found = isa.loops(k)
    tail = insts[max(lp.end for lp in found) + 1:] if found else insts

    def count(seq, *prefixes):
        return sum(1 for i in seq if i.opcode.startswith(prefixes))

    width = {"s_load_dword": 1, "s_load_dwordx2": 2, "s_load_dwordx4": 4, "s_load_dwordx8": 8,
             "s_load_dwordx16": 16}
    return {
        "kernarg_bytes": k.metadata.get(".kernarg_segment_size"),
        "kernarg_entries": len(k.metadata.get(".args", [])),
        "s_load": count(insts, "s_load_"),
        "s_load_dwords": sum(width.get(i.opcode, 0) for i in insts),
        "v_exp_f32": count(tail, "v_exp_f32"),
        "v_ldexp_f32": count(tail, "v_ldexp_f32"),
        "v_cndmask": count(tail, "v_cndmask"),
        "v_cmp": count(tail, "v_cmp"),
        "valu": sum(1 for i in tail if _is_valu(i)),
        "kernel_valu": sum(1 for i in insts if _is_valu(i)),
    }


def moe_metrics(isa_text: Any) -> dict[str, float | None]:
    """:func:`isa.metrics`' scalar metrics plus the counts the MoE switches are judged by.

    From :func:`moe_kernel_counts` (over the whole kernel): ``kernarg_bytes``,
    ``kernarg_entries``, ``s_load``, ``s_load_dwords``, ``kernel_valu``; and, renamed with an
    ``epi_`` prefix because they count the epilogue only (after the K loop): ``epi_v_exp_f32``,
    ``epi_v_ldexp_f32``, ``epi_v_cndmask``, ``epi_v_cmp``, ``epi_valu``. Added for gemm2:
    ``sign_shifts`` (``s_ashr_i32`` + ``v_ashrrev_i32``), ``s_mul_hi_i32``, ``s_mul_hi_u32``,
    ``v_mad_u64_u32``, ``mad_64`` (every 64-bit multiply-add, ``v_mad_u64_u32`` + ``v_mad_i64_i32``, as
    :func:`isa.fingerprint` counts it), ``asm_s_waitcnt`` (waits written as inline asm) and
    ``epilogue_instructions`` (instructions after the last MFMA).
    """
    m = isa.metrics(isa_text)
    out: dict[str, float | None] = {k: m[k] for k in isa.SCALAR_KEYS}
    for key, value in moe_kernel_counts(isa_text).items():
        epilogue = key.startswith("v_") or key == "valu"
        out[f"epi_{key}" if epilogue else key] = value
    hist = m.get("opcode_histogram") or {}

    def count(*prefixes: str) -> int:
        return sum(c for op, c in hist.items() if op.startswith(prefixes))

    out["sign_shifts"] = count("s_ashr_i32", "v_ashrrev_i32")
    out["s_mul_hi_i32"] = count("s_mul_hi_i32")
    out["s_mul_hi_u32"] = count("s_mul_hi_u32")
    out["v_mad_u64_u32"] = count("v_mad_u64_u32")
    out["mad_64"] = count("v_mad_u64_u32", "v_mad_i64_i32")
    insts = isa.parse(_text(isa_text))[0].instructions
    out["asm_s_waitcnt"] = sum(1 for i in insts if i.opcode == "s_waitcnt" and i.in_asm_block)
    mfma_at = [n for n, i in enumerate(insts) if i.opcode.startswith("v_mfma")]
    out["epilogue_instructions"] = len(insts) - mfma_at[-1] - 1 if mfma_at else None
    return out


#: Metric set name (a family's ``METRICS``) -> function of ISA text.
METRIC_SETS: dict[str, Callable[[Any], dict[str, float | None]]] = {"gemm": gemm_metrics, "moe": moe_metrics}


def metric_set(name: str) -> Callable[[Any], dict[str, float | None]]:
    if name not in METRIC_SETS:
        raise ValueError(f"unknown metric set {name!r} (known: {', '.join(METRIC_SETS)})")
    return METRIC_SETS[name]


def for_family(family_name: str, isa_text: Any) -> dict[str, float | None]:
    """The metrics ``family_name``'s switches are judged by, on ``isa_text`` (or an Artifact)."""
    from . import family

    return metric_set(family.get(family_name).metrics)(isa_text)


def for_variant(variant_name: str, isa_text: Any) -> dict[str, float | None]:
    """:func:`for_family` for the family of a variant name."""
    from . import variants

    return for_family(variants.get(variant_name).family, isa_text)
