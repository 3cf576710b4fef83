"""The dense MXFP4 GEMM: its variant data, its input checks, and ISA facts per switch.

Compiles go through ``mxfp4_ablation.toolchain`` (cached on disk).  A K=2048 GEMM
compile takes 10-20 s on this machine, so the per-switch ladder checks are ``slow``;
the fast subset compiles one small variant.  Emulator runs (``gfx950emu``) check the
numbers against the dequantised product.
"""

import re

import pytest
import torch

from mxfp4_ablation import family, isa, metrics, toolchain
from mxfp4_ablation.kernels import gemm
from mxfp4_ablation.kernels.gemm import layout, stages
from mxfp4_ablation.kernels.gemm.schedule import Plan

F = family.get("gemm")

TARGET = "mxfp4_ablation.kernels.gemm:compile_entry"
LADDER_SHAPE = {"M": 1024, "N": 1024, "K": 3072}  # K big enough for a runtime K loop of >= 2 iterations (k_unroll4: [2, 10))
LAST = F.ladder[-1][0]  # the last rung (every switch on)
#: Switches other switches require: no leave-one-out variant drops them.
REQUIRED = {r for s in gemm.SWITCHES.values() for r in s.requires}


def _rung(switch):
    """The ladder rung that turns ``switch`` on."""
    return next(n for (n, cur), (_, prev) in zip(F.ladder[1:], F.ladder) if cur - prev == {switch})


def _before(switch):
    """The rung just before ``_rung(switch)``."""
    names = [n for n, _ in F.ladder]
    return names[names.index(_rung(switch)) - 1]


def _plan(switches, KI):
    return Plan(gemm.slots_for(frozenset(switches)), KI)


def _compile(variant, **shape):
    return toolchain.compile(TARGET, {**(shape or LADDER_SHAPE), "variant_name": variant})


def _loop(art):
    body = isa.hot_loop(art.isa)
    assert body, "expected a K loop"
    return body


def _count(insts, pattern):
    return sum(1 for i in insts if re.fullmatch(pattern, i.opcode))


def _reads_before_first_mfma(body):
    first = next(n for n, i in enumerate(body) if i.opcode.startswith("v_mfma"))
    return sum(1 for i in body[:first] if i.opcode.startswith("ds_read"))


def _max_mem_run(body):
    """The longest run of memory loads (ds_read*, buffer_load*) with no MFMA between them."""
    best = run = 0
    for i in body:
        if i.opcode.startswith("v_mfma"):
            run = 0
        elif i.opcode.startswith(("ds_read", "buffer_load")):
            run += 1
            best = max(best, run)
    return best


# ---------------------------------------------------------------- variants as data


def test_ladder_is_cumulative_one_switch_per_step():
    assert [n for n, _ in F.ladder] == [f"gemm-v{i}" for i in range(len(gemm.SWITCHES) + 1)]
    assert F.ladder[0][1] == frozenset()
    for (_, prev), (_, cur), switch in zip(F.ladder, F.ladder[1:], gemm.SWITCHES):
        assert cur - prev == {switch} and prev < cur


def test_every_switch_states_claim_mechanism_and_metric():
    for name, switch in gemm.SWITCHES.items():
        doc = switch.doc
        assert "claim" in doc and "Mechanism" in doc and "Metric" in doc, name


def test_leave_one_out_drops_each_independent_switch():
    full = F.ladder[-1][1]
    loo = dict(F.leave_one_out())
    assert REQUIRED == {"g2s_m0", "agpr_acc"}
    assert set(loo) == {f"{LAST}-no-{s}" for s in gemm.SWITCHES if s not in REQUIRED}
    for name, switches in loo.items():
        assert full - switches == {name.removeprefix(f"{LAST}-no-")}
        F.check_switches(switches)  # every leave-one-out set is valid


def test_a_dependent_switch_alone_is_refused_naming_its_dependency():
    with pytest.raises(ValueError, match="scale_prefetch depends on g2s_m0"):
        F.check_switches({"scale_prefetch"})
    with pytest.raises(ValueError, match="b_carry depends on g2s_m0"):
        gemm.build(256, 256, 256, b_carry=True)
    with pytest.raises(ValueError, match="zero_first_k depends on agpr_acc"):
        F.check_switches({"zero_first_k"})


@pytest.mark.parametrize(
    "shape, message",
    [
        ((255, 256, 256), "multiples of 256"),
        ((256, 300, 256), "multiples of 256"),
        ((256, 256, 128), "multiple of 256"),
        ((256, 256, 0), "positive integer"),
        ((256.0, 256, 256), "positive integer"),
    ],
)
def test_bad_shapes_fail_before_compiling(shape, message):
    with pytest.raises(ValueError, match=message):
        gemm.compile_entry(*shape)


def test_bad_switches_are_plain_value_errors():
    with pytest.raises(ValueError, match="unknown GEMM switch"):
        gemm.build(256, 256, 256, fast=True)
    with pytest.raises(ValueError, match="True/False"):
        gemm.build(256, 256, 256, agpr_acc="yes")
    with pytest.raises(ValueError, match="unknown GEMM variant"):
        F.switch_set("gemm-v99")


@pytest.mark.parametrize("m_tiles, n_tiles", [(1, 1), (4, 2), (3, 5), (8, 8), (5, 8), (16, 3), (7, 9)])
def test_tile_order_visits_every_tile_once(m_tiles, n_tiles):
    tiles = [stages.tile_order(w, m_tiles, n_tiles) for w in range(m_tiles * n_tiles)]
    assert sorted(tiles) == [(i, j) for i in range(m_tiles) for j in range(n_tiles)]


def test_tile_order_gives_each_xcd_a_compact_group():
    # 8x8 tiles: XCD x runs workgroups x, x+8, ...; its first four tiles are one column of a 4-row group.
    xcd0 = [stages.tile_order(w, 8, 8) for w in range(0, 64, 8)][:4]
    assert xcd0 == [(0, 0), (1, 0), (2, 0), (3, 0)]


def test_wait_plan_matches_the_issue_order():
    # Without the ring or b_carry, step k issues S(k+1) (8 VGPR scale loads) at its top, before the
    # first wait (as FlyDSL daee90e4's `_one_step` does), A0(k+2) in block (0,0), B0(k+2) in (0,1), then,
    # after the middle wait, B1(k+2) in (1,0) and A1(k+2) in (1,1).
    plan = _plan((), 8)
    assert plan.issues(0) == [("S", 1, 8), ("A0", 2, 4), ("B0", 2, 4), ("B1", 2, 4), ("A1", 2, 4)]
    assert plan.segments(0)[0] == ("issue", "scales", [("scale", 1, n) for n in range(8)])
    assert plan.waits["prologue"] == 24  # A0(0), B0(0) are read in the prologue: B1(0), A1(0), D(1) may fly
    # The top wait of step k needs A1(k), its last half (read in this step): after it come step k-1's 24
    # and this step's 8 scale loads.
    assert plan.waits["top", 0] == 24 and plan.waits["top", 3] == 32 and plan.waits["top", 7] == 8
    # The middle wait needs A0(k+1), B0(k+1) (the next step's fragments are read after it): after B0(k+1)
    # come step k-1's B1, A1 and this step's 8 scale loads, A0(k+2) and B0(k+2).
    assert plan.waits["mid", 3] == 4 + 4 + 8 + 4 + 4 and ("mid", 7) not in plan.waits
    # b_carry + ring: B1(k+1) is read after the middle wait too; the gather G(k+3) sits in block (1,0).
    ring = _plan({"serpentine", "g2s_m0", "scale_prefetch", "b_carry"}, 8)
    assert ring.issues(3) == [("A0", 5, 4), ("B0", 5, 4), ("B1", 5, 4), ("G", 6, 1), ("A1", 5, 4)]
    assert ring.waits["prologue"] == 4 + 16  # A0/B0/B1(0) and G(0) read in the prologue: A1(0), D(1) fly
    assert ring.waits["top", 3] == 17 and ring.waits["mid", 3] == 1 + 4 + 4 + 4 and ring.waits["top", 7] == 0
    assert ring.loop_range(0) == (0, 4, 2)
    # The units of one block: one DMA half never split (g2s_m0 advances m0 along it), loads spread.
    segs = ring.segments(3)
    assert [s[0] for s in segs] == ["wait", "block", "block", "wait", "block", "block"]
    b00 = [u[0] for u in segs[1][2]]
    assert b00.count("dma") == 4 and b00.count("read") == 8 and b00[:3] == ["dma", "read", "read"]
    # k_unroll4 (PR #990's shape of the loop): steps 0, 1 peeled, [2, K/256 - 2) four at a time, two
    # tail steps; the loop's last step issues a dummy gather G(K/256) so every loop step is alike.
    u4 = _plan({"g2s_m0", "scale_prefetch", "k_unroll4"}, 32)
    assert u4.loop_range(2) == (2, 30, 4)
    assert ("G", 32, 1) in u4.issues(29) and not any(kind == "G" for kind, _, _ in u4.issues(30))
    assert _plan({"g2s_m0", "scale_prefetch", "k_unroll4"}, 6).loop_range(2) == (2, 4, 2)


def test_load_slots_follow_the_seeds():
    front, spread = gemm.slots_for({"agpr_acc"}).order, gemm.slots_for({"agpr_acc", "serpentine"}).order
    # daee90e4 (before PR #990): one load after each MFMA from the first; 12 loads leave 20 quiet MFMAs
    assert front.load_after(12, 32) == list(range(12))
    # 741f3d6d: slots = {(t * n_mfma) // len(thunks)}; 12 or 14 loads leave the last 2 MFMAs quiet, 20 leave 1
    assert spread.load_after(12, 32)[-1] == 29 and spread.load_after(14, 32)[-1] == 29
    assert spread.load_after(20, 32)[-1] == 30 and spread.load_after(6, 32)[-1] == 26
    assert front is stages.RowMajorOrder and spread is not front
    # without serpentine the block's units are the DMAs, then the reads (the seed's thunk list)
    segs = _plan({"agpr_acc"}, 8).segments(3)
    b00 = [u[0] for u in next(s for s in segs if s[0] == "block")[2]]
    assert b00 == ["dma"] * 4 + ["read"] * 8


def test_spread_places_the_shorter_list_evenly():
    mix = gemm.slots_for({"serpentine"}).order.mix
    assert mix(list("DDDD"), list("RRRRRRRR")) == list("DRRDRRDRRDRR")
    assert mix(list("RR"), []) == list("RR") and mix([], list("RR")) == list("RR")


def test_steps_are_the_ladder_one_file_each():
    """The steps/ folder in NN order is the ladder; each step file replaces stages of the slot table."""
    assert [s.SWITCH.name for s in gemm.steps.STEPS] == list(gemm.SWITCHES)
    base = gemm.slots_for(frozenset())
    for step in gemm.steps.STEPS:
        assert step.apply(base) != base, step.SWITCH.name


def test_min_k_for_loop_per_rung():
    got = [gemm.min_k_for_loop(s) for _, s in F.ladder]
    assert got == [1024, 1024, 1024, 1024, 1280, 1280, 1536, 1536, 1536, 1536]
    assert all(gemm.min_k_for_loop(s) <= LADDER_SHAPE["K"] for _, s in F.leave_one_out())


def test_numbers_in_the_records_are_the_generated_table():
    """A record's "metric a -> b" (8192^3) is what README's generated GEMM ladder table says for that
    rung ("metric a → b"), so a recompiled table whose numbers moved fails here until the record says
    the new ones."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme[readme.index("<!-- gemm-ladder-table:begin"):readme.index("<!-- gemm-ladder-table:end -->")]
    cells = {row[1]: row[2] for row in ([c.strip() for c in ln.strip("|").split("|")]
                                        for ln in block.splitlines() if ln.startswith("| gemm-v"))}
    checked = 0
    for name, switch in gemm.SWITCHES.items():
        for m in re.finditer(r"(\w+)(?: \([^)]*\))? (\d+) -> (\d+)", switch.metric):
            shown = re.search(rf"\b{m.group(1)}(?: \([^)]*\))? (\S+) → (\S+)", cells[name])
            if shown:
                assert shown.groups() == m.group(2, 3), (name, m.group(0), shown.group(0))
                checked += 1
    assert checked >= 4


# ---------------------------------------------------------------- one small compile (fast)


@pytest.fixture(scope="module")
def small_v7():
    return _compile(LAST, M=256, N=256, K=256)


def test_small_v7_has_the_scaled_fp4_mfma_lds_dma_and_wide_stores(small_v7):
    insts = isa.parse(small_v7.isa)[0].instructions
    mfma = [i for i in insts if i.opcode == "v_mfma_scale_f32_16x16x128_f8f6f4"]
    assert len(mfma) == 128  # one K step: 4 blocks x 16 tiles x 2 K halves
    assert all("cbsz:4" in i.modifiers and "blgp:4" in i.modifiers for i in mfma)
    assert sum(1 for i in mfma if i.operands[3] == "0") == 64  # first K half starts from constant 0
    assert sum(1 for i in insts if i.opcode.startswith("buffer_load") and "lds" in i.modifiers) == 16 + 1
    m = metrics.kernel_metrics(small_v7.isa)
    assert m["buffer_store_by_width"] == {16: 32}
    assert m["scratch_bytes"] == 0 and m["agpr"] > 0
    assert m["lds_bytes"] == 2 * layout.STAGE + layout.RING_SLOTS * layout.RING_SLOT


# ---------------------------------------------------------------- the ladder, switch by switch (slow)


@pytest.fixture(scope="module")
def ladder():
    arts = toolchain.compile_many([(TARGET, {**LADDER_SHAPE, "variant_name": n}) for n, _ in F.ladder])
    return {n: a for (n, _), a in zip(F.ladder, arts)}


@pytest.mark.slow
def test_every_rung_runs_128_scaled_mfmas_per_k_step_in_its_loop(ladder):
    for name, art in ladder.items():
        loop = _loop(art)
        mfma = [i for i in loop if i.opcode == "v_mfma_scale_f32_16x16x128_f8f6f4"]
        steps = 4 if "k_unroll4" in F.switch_set(name) else 2
        assert len(mfma) == steps * 128, name  # the loop body holds two K steps (four with k_unroll4)
        assert all("cbsz:4" in i.modifiers and "blgp:4" in i.modifiers for i in mfma), name
        assert _count(loop, r"buffer_load_dwordx4") >= 2 * layout.LOADS_PER_STEP, name
        if "agpr_acc" in F.switch_set(name):  # v0 may spill, as the seed's kernel did before AGPR pinning
            assert metrics.kernel_metrics(art.isa)["scratch_bytes"] == 0, name


@pytest.mark.slow
def test_agpr_acc_removes_accumulator_shuffling(ladder):
    v0, v1 = _loop(ladder["gemm-v0"]), _loop(ladder["gemm-v1"])
    assert _count(v0, r"v_accvgpr_(read|write|mov)_b32") > 0
    assert _count(v1, r"v_accvgpr_(read|write|mov)_b32") == 0
    m0, m1 = metrics.kernel_metrics(ladder["gemm-v0"].isa), metrics.kernel_metrics(ladder["gemm-v1"].isa)
    assert m1["agpr"] == 256 and m1["arch_vgpr"] < m0["arch_vgpr"]
    # PR #756's kernel (FlyDSL before #990) zero-initialises the 256 AGPRs: one write each, none in the loop.
    assert m1["v_accvgpr_write"] == 256


@pytest.mark.slow
def test_serpentine_raises_mfma_operand_reuse(ladder):
    before = isa.mfma_operand_reuse(ladder[_before("serpentine")].isa, loop_only=True)
    after = isa.mfma_operand_reuse(ladder[_rung("serpentine")].isa, loop_only=True)
    assert after > 0.9 > before


@pytest.mark.slow
def test_g2s_m0_sets_m0_once_per_batch(ladder):
    v2, v3 = _loop(ladder[_before("g2s_m0")]), _loop(ladder[_rung("g2s_m0")])
    def m0_writes(body, op):
        return sum(1 for i in body if i.opcode == op and i.operands[:1] == ("m0",))
    assert m0_writes(v2, "s_mov_b32") == 2 * 16 and m0_writes(v2, "s_add_u32") == 0
    assert m0_writes(v3, "s_mov_b32") == 2 * 4 and m0_writes(v3, "s_add_u32") == 2 * 12
    assert _count(v2, r"v_readfirstlane_b32") == 2 * 16  # before: m0 read-first-laned per load
    assert _count(v3, r"v_readfirstlane_b32") == 0
    dma3 = [i for i in v3 if i.opcode == "buffer_load_dwordx4" and "lds" in i.modifiers]
    assert all(i.operands[-1] != "0" for i in dma3)  # the K offset rides in soffset


@pytest.mark.slow
def test_scale_prefetch_moves_scales_to_one_lds_dma_per_step(ladder):
    b, a = _before("scale_prefetch"), _rung("scale_prefetch")
    v3, v4 = _loop(ladder[b]), _loop(ladder[a])
    assert _count(v3, r"buffer_load_dword") == 2 * 8 and _count(v4, r"buffer_load_dword") == 0
    def dma(body):
        return sum(1 for i in body if i.opcode.startswith("buffer_load") and "lds" in i.modifiers)
    assert dma(v4) == dma(v3) + 2


@pytest.mark.slow
def test_every_rung_issues_its_loads_among_the_mfmas(ladder):
    """Like FlyDSL's kernel before and after PR #990 (the order slot's load_after), each block's loads (LDS-DMA,
    ds_read, ring read) one per MFMA slot: no run of them outside the MFMA stream, no ds_read before the
    first MFMA.  Without scale_prefetch the 8 VGPR scale loads of the next step open the step, before its
    first wait (FlyDSL daee90e4's ``_load_scales_rt`` at the top of ``_one_step``): one run of 8."""
    for name, art in ladder.items():
        body = _loop(art)
        sw = F.switch_set(name)
        blocks = [i for i in body if not (i.opcode.startswith("buffer_load_dword") and "lds" not in i.modifiers)] \
            if "scale_prefetch" not in sw else body
        # v0's MFMAs are the compiler's (no AGPR pinning): sched_barriers keep each load in its slot,
        # but the compiler may still move an MFMA of a slot past the next one (measured: runs of 2).
        assert _max_mem_run(blocks) <= (1 if "agpr_acc" in sw else 2), name
        assert _reads_before_first_mfma(body) == 0, name
        if "scale_prefetch" not in sw:
            assert _max_mem_run(body) == 8, name  # the step-top scale loads


@pytest.mark.slow
def test_b_carry_folds_the_per_fragment_waits(ladder):
    b, a = _before("b_carry"), _rung("b_carry")
    # PR #990: hot-loop s_waitcnt 68 -> 8 per 4 K steps; ours (1024x1024x3072) 40 -> 8: from the two
    # barrier waits and the compiler's per-fragment B1 waits (8) per K step to two folded vmcnt +
    # lgkmcnt(0) + s_barrier per K step, nothing else (ours start below the seed's 68: our top wait
    # already waits for B0, see stages.StepPerFragmentWaits).
    mb, ma = metrics.gemm_metrics(ladder[b].isa), metrics.gemm_metrics(ladder[a].isa)
    assert mb["loop_s_waitcnt_per_4k"] == 40 and ma["loop_s_waitcnt_per_4k"] == 8
    waits = [i for i in _loop(ladder[a]) if i.opcode == "s_waitcnt"]
    assert all("vmcnt" in " ".join(w.operands) and "lgkmcnt(0)" in " ".join(w.operands) for w in waits)
    assert sum(1 for i in _loop(ladder[a]) if i.opcode == "s_barrier") == len(waits)


@pytest.mark.slow
def test_k_unroll4_runs_four_k_steps_per_iteration_and_peels_two(ladder):
    mb, ma = metrics.kernel_metrics(ladder[_before("k_unroll4")].isa), metrics.kernel_metrics(ladder[_rung("k_unroll4")].isa)
    assert (mb["loop_mfma"], ma["loop_mfma"]) == (256, 512)
    # K = 3072 (12 steps): before, a 2-step body + 4 unrolled tail steps; after, 2 peeled + 4 + 2 (PR #990: 1024).
    assert (mb["mfma"], ma["mfma"]) == (768, 1024)


@pytest.mark.slow
def test_zero_first_k_drops_the_accumulator_zeroing(ladder):
    mb, ma = metrics.kernel_metrics(ladder[_before("zero_first_k")].isa), metrics.kernel_metrics(ladder[_rung("zero_first_k")].isa)
    assert mb["v_accvgpr_write"] > 0 and ma["v_accvgpr_write"] == 0
    insts = isa.parse(ladder[_rung("zero_first_k")].isa)[0].instructions
    assert sum(1 for i in insts if i.opcode.startswith("v_mfma") and i.operands[3] == "0") == 64


@pytest.mark.slow
def test_wide_epilogue_stores_16_bytes_per_lane(ladder):
    assert metrics.kernel_metrics(ladder[_before("wide_epilogue")].isa)["buffer_store_by_width"] == {2: 256}
    m6 = metrics.kernel_metrics(ladder[_rung("wide_epilogue")].isa)
    assert m6["buffer_store_by_width"] == {16: 32}
    assert m6["opcode_histogram"].get("v_permlane16_swap_b32_e32", 0) == 64


@pytest.mark.slow
def test_static_prologue_removes_the_integer_division(ladder):
    m6, m7 = metrics.kernel_metrics(ladder[_before("static_prologue")].isa), metrics.kernel_metrics(ladder[_rung("static_prologue")].isa)
    assert m7["insts_before_first_buffer_load"] < m6["insts_before_first_buffer_load"]
    assert m6["opcode_histogram"].get("v_rcp_f32_e32", 0) > 0
    assert m7["opcode_histogram"].get("v_rcp_f32_e32", 0) == 0


def test_static_prologue_moves_addresses_not_loads():
    """static_prologue bakes M and N in and computes the tile addresses after the first scale loads:
    every load, its place and every wait count stay those of the kernel without it."""
    full = F.ladder[-1][1]
    for KI in (1, 2, 4, 6, 12, 32):
        a, b = _plan(full, KI), _plan(full - {"static_prologue"}, KI)
        assert a.waits == b.waits and [a.segments(k) for k in range(KI)] == [b.segments(k) for k in range(KI)]
    assert gemm.min_k_for_loop(full) == gemm.min_k_for_loop(full - {"static_prologue"})
    assert gemm.slots_for(full).shape is not gemm.slots_for(full - {"static_prologue"}).shape


@pytest.mark.slow
def test_leave_one_out_variants_compile():
    names = [n for n, _ in F.leave_one_out()]
    arts = toolchain.compile_many([(TARGET, {**LADDER_SHAPE, "variant_name": n}) for n in names])
    for name, art in zip(names, arts):
        assert metrics.kernel_metrics(art.isa)["loop_mfma"] == (512 if "k_unroll4" in F.switch_set(name) else 256), name


# ---------------------------------------------------------------- numbers, in the emulator (slow)


def _run_in_emulator(variant, M, N, K, seed=0):
    gfx950emu = pytest.importorskip("gfx950emu")
    from mxfp4_ablation import formats

    art = _compile(variant, M=M, N=N, K=K)
    inputs = gemm.make_inputs(M, N, K, seed=seed)
    res = gfx950emu.launch(gfx950emu.load(art.isa), grid=((M // 256) * (N // 256), 1, 1), block=(256, 1, 1),
                           args=gemm.kernel_args(inputs), hazards="report")
    a = formats.dequantize_mxfp4(inputs["A_q"], inputs["A_s"]).double()
    b = formats.dequantize_mxfp4(inputs["B_q"], inputs["B_s"]).double()
    return inputs["C"].float(), (a @ b.T).float(), res


def _ordering_hazards(res):
    """The s_waitcnt / LDS-ordering hazards (what the gate counts): the s_nop wait-state reports of the
    inline-asm M0 -> LDS-DMA idiom are counted apart (README, "Wait states")."""
    return [str(h) for h in res.hazards if h.kind != "wait_states"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", [n for n, _ in F.ladder])
def test_every_rung_computes_the_product_in_the_emulator(variant):
    out, ref, res = _run_in_emulator(variant, 256, 256, 1536, seed=1)  # 6 K steps: loop + peeled steps
    assert _ordering_hazards(res) == []
    # bf16 output: one rounding of an f32 sum, so within half a bf16 ulp (2^-8 relative) plus f32 noise.
    torch.testing.assert_close(out, ref, rtol=2 ** -8, atol=1e-3)


@pytest.mark.slow
def test_the_four_step_loop_computes_the_product_in_the_emulator():
    """K = 3072 (12 steps): with k_unroll4 the loop runs [2, 10) in two iterations of four steps."""
    out, ref, res = _run_in_emulator(LAST, 256, 256, 3072, seed=3)
    assert _ordering_hazards(res) == []
    torch.testing.assert_close(out, ref, rtol=2 ** -8, atol=1e-3)


@pytest.mark.slow
def test_xcd_tile_order_covers_every_tile_in_the_emulator():
    out, ref, res = _run_in_emulator(LAST, 1024, 512, 512, seed=2)  # 8 tiles: the XCD remap is live
    assert _ordering_hazards(res) == []
    torch.testing.assert_close(out, ref, rtol=2 ** -8, atol=1e-3)


# A GEMM compiled with every hand-counted vmcnt raised by one (one more load allowed in flight).
_LOOSE_WAITS = """
import glob, sys
from mxfp4_ablation.kernels import gemm
from mxfp4_ablation.kernels.gemm.schedule import Plan
exact = Plan._count_after
Plan._count_after = lambda self, need: exact(self, need) + 1
launcher, args = gemm.compile_entry(256, 256, 1536, variant_name=sys.argv[1])
launcher(*args)
"""


@pytest.mark.slow
def test_the_hand_counted_waits_are_tight(tmp_path):
    """One load more in flight at any planned wait is a race the emulator reports; the real
    counts pass the same check (test_every_rung_computes_the_product_in_the_emulator)."""
    import subprocess
    import sys

    gfx950emu = pytest.importorskip("gfx950emu")
    subprocess.run([sys.executable, "-c", _LOOSE_WAITS, LAST], env=toolchain.compile_env(tmp_path),
                   check=True, capture_output=True)
    loose_isa = next(tmp_path.glob("*/*final_isa.s")).read_text()
    inputs = gemm.make_inputs(256, 256, 1536, seed=1)
    res = gfx950emu.launch(gfx950emu.load(loose_isa), grid=(1, 1, 1), block=(256, 1, 1),
                           args=gemm.kernel_args(inputs), hazards="report")
    assert any("LDS DMA" in h.text or h.kind.startswith("lds_") for h in res.hazards)


def test_every_variant_has_a_timing_case():
    """`mxfp4-ablation bench` finds a launcher for every variant; its case is built from the kernel
    module's contract (running it needs an MI355X, so here the case is only built, on the CPU)."""
    import functools

    from mxfp4_ablation import variants
    from mxfp4_ablation.bench import launchers
    from mxfp4_ablation.bench.inputs import sets_needed
    from mxfp4_ablation.bench.timing import DeviceContext

    for name, v in variants.all_variants().items():
        shape = (8192, 8192, 8192) if v.family == "gemm" else (4096, 385, 7168, 512, 9)
        factory = launchers.launcher_for(name, shape)
        assert isinstance(factory, functools.partial) and factory.keywords["switches"] == tuple(sorted(v.switches))

    class CPU:
        device = "cpu"

    ctx = DeviceContext(backend=CPU(), cache_bytes=4 << 20, rotation_factor=2.0)
    for name, shape, flops in ((LAST, (256, 256, 512), 2.0 * 256 * 256 * 512),
                               ("moe1-v2", (16, 8, 512, 256, 2), 2.0 * 32 * 512 * 512),
                               ("moe2-v4", (16, 8, 512, 256, 2), 2.0 * 32 * 256 * 512)):
        case = launchers.launcher_for(name, shape)(ctx)
        assert case.flops == flops
        # as many input sets as the harness's sizing rule asks for, for this (4 MiB) cache
        assert case.n_sets == sets_needed(case.rotation.set_bytes, 4 << 20, 2.0) >= 1
        assert case.rotation.set_bytes > 0 and case.meta["switches"] == sorted(variants.get(name).switches)
        case.release()
