"""Tests of the MXFP4 MoE host pipeline against the direct torch reference.

The staged pipeline (sort -> sorted/shuffled scales -> preshuffled weights ->
blockwise gemm1 -> requant -> gemm2 -> atomic add or scatter-reduce) must give the
reference's numbers; the layout tests check the byte addresses the kernels compute.
"""

import math

import csv
import pytest
import torch

from mxfp4_ablation import formats
from mxfp4_ablation.moe import emulate, host
from mxfp4_ablation.moe.emulate import run_moe_pipeline
from mxfp4_ablation.moe.host import (
    KIMI_K25_TP4,
    MoEProblem,
    make_moe_inputs,
    moe_sort,
    small_test_problem,
)
from mxfp4_ablation.moe.reference import e8m0_scale_moe, moe_reference, quantize_mxfp4_moe

BF16_U = 2.0 ** -8  # bf16 keeps 8 significant bits: one rounding moves a value by at most U * |value|


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These are many small matmuls: on a shared 2-core box one thread is several times faster."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------- shared cases

_CASES = {}


def _case(tokens, regime):
    """Inputs, reference and pipeline output of one small-shape case (built once)."""
    key = (tokens, regime)
    if key not in _CASES:
        p = small_test_problem(tokens, regime, seed=1)
        inp = make_moe_inputs(p)
        _CASES[key] = (inp, moe_reference(inp), run_moe_pipeline(inp))
    return _CASES[key]


def _bound(ref, weights, topk):
    """|out - exact| <= (topk+1) * U * sum_k |w_k y_k|: both epilogues round at most topk+1
    values, each bounded by that sum, once to bf16 (the +1e-30 only covers exact zeros)."""
    mag = (ref["per_slot"].abs() * weights.unsqueeze(-1)).sum(dim=1)
    return (topk + 1) * BF16_U * mag + 1e-30


def _check_pipeline_matches(inp, ref, out):
    err = (out["out"].float() - ref["out_f32"]).abs()
    bound = _bound(ref, inp["topk_weights"], inp["problem"].topk)
    assert bool((err <= bound).all()), f"max excess {(err - bound).max().item()}"
    # and it is not trivially satisfied: the output is non-zero and O(1)
    assert ref["out_f32"].abs().max() > 0.5


# --------------------------------------------------------------------------- routing


def test_route_topk_softmax_then_topk_renormalised():
    logits = torch.tensor([[0.0, math.log(3.0), math.log(6.0), -20.0]])
    w, ids = host.route_topk(logits, 2, renormalize=True)
    assert ids.dtype == torch.int32 and ids.tolist() == [[2, 1]]
    assert torch.allclose(w, torch.tensor([[6 / 9, 3 / 9]]))
    w2, _ = host.route_topk(logits, 2, renormalize=False)
    total = 1 + 3 + 6 + math.exp(-20.0)
    assert torch.allclose(w2, torch.tensor([[6 / total, 3 / total]]))


@pytest.mark.parametrize("bad", [dict(topk=0), dict(topk=5), dict(logits=torch.zeros(4))])
def test_route_topk_rejects_bad_input(bad):
    logits = bad.get("logits", torch.zeros(2, 4))
    with pytest.raises(ValueError):
        host.route_topk(logits, bad.get("topk", 2))


# --------------------------------------------------------------------------- sorting


def test_sort_hand_checked():
    ids = torch.tensor([[1, 0], [1, 2]], dtype=torch.int32)
    w = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    s = moe_sort(ids, w, num_experts=3, block_m=4)
    t0s1, t1s1 = (1 << 24) | 0, (1 << 24) | 1
    assert s.sorted_token_ids.tolist() == [t0s1, 2, 2, 2, 0, 1, 2, 2, t1s1, 2, 2, 2, 2, 2, 2, 2]
    assert s.sorted_expert_ids.tolist() == [0, 1, 2, -1]
    assert s.num_valid_ids.tolist() == [12, 2]
    assert s.m_indices.tolist() == [0, 2, 2, 2, 0, 1, 2, 2, 1, 2, 2, 2, 2, 2, 2, 2]
    assert s.sorted_weights[:9].tolist() == [0.75, 0, 0, 0, 0.25, 0.5, 0, 0, 0.5]
    assert s.reverse_sorted.tolist() == [4, 0, 5, 8]
    assert host.sorting_stats(s) == dict(valid_rows=4, executed_rows=12, blocks=3, active_experts=3,
                                         padding_fraction=1 - 4 / 12)
    ck = moe_sort(ids, w, num_experts=3, block_m=4, pad_style="ck")
    assert ck.sorted_token_ids[1].item() == (2 << 24) | 2  # (topk << 24) | M


@pytest.mark.parametrize("tokens,topk,experts,block_m,pad_style", [
    (1, 2, 8, 16, "mxfp4_aux"),
    (16, 2, 8, 16, "mxfp4_aux"),
    (200, 2, 8, 128, "ck"),
    (37, 9, 385, 16, "mxfp4_aux"),
    (300, 9, 385, 128, "mxfp4_aux"),
])
def test_sort_round_trip(tokens, topk, experts, block_m, pad_style):
    g = torch.Generator().manual_seed(tokens)
    w, ids = host.route_topk(torch.randn(tokens, experts, generator=g), topk)
    s = moe_sort(ids, w, experts, block_m, pad_style)
    tok, slot = host.unpack_sorted_ids(s.sorted_token_ids)
    valid = s.valid_row_mask()
    # every (token, slot) exactly once, only in valid rows
    pairs = (tok[valid] * topk + slot[valid]).sort().values
    assert torch.equal(pairs, torch.arange(tokens * topk))
    assert bool((torch.nonzero(valid).flatten() < s.total_padded).all())
    # padding rows carry the sentinel, zero weight and m_indices == M
    assert bool((s.sorted_token_ids[~valid] == s.sentinel).all())
    assert bool((s.sorted_weights[~valid] == 0).all()) and bool((s.m_indices[~valid] == tokens).all())
    assert torch.equal(s.m_indices[valid].long(), tok[valid])
    # blocks are single-expert and agree with the routing; weights travel with their pair
    assert s.total_padded % block_m == 0 and s.total_padded <= s.max_sorted
    eid = s.sorted_expert_ids.long().repeat_interleave(block_m)
    assert torch.equal(eid[valid], ids.long()[tok[valid], slot[valid]])
    assert torch.equal(s.sorted_weights[valid], w[tok[valid], slot[valid]])
    nb = s.num_valid_blocks
    assert bool((s.sorted_expert_ids[nb:] == -1).all()) and bool((s.sorted_expert_ids[:nb] >= 0).all())
    assert bool((s.sorted_expert_ids[1:nb] >= s.sorted_expert_ids[: nb - 1]).all())
    counts = torch.bincount(ids.flatten().long(), minlength=experts)
    assert torch.equal(torch.bincount(s.sorted_expert_ids[:nb].long(), minlength=experts),
                       (counts + block_m - 1) // block_m)
    # reverse_sorted inverts the placement
    rev = s.reverse_sorted.long()
    assert torch.equal(tok[rev], torch.arange(tokens).repeat_interleave(topk))
    assert torch.equal(slot[rev], torch.arange(topk).repeat(tokens))


def test_sort_empty_experts_get_no_blocks():
    ids = torch.tensor([[5, 2]], dtype=torch.int32)
    s = moe_sort(ids, torch.tensor([[0.6, 0.4]]), num_experts=8, block_m=16)
    assert s.sorted_expert_ids[: s.num_valid_blocks].tolist() == [2, 5]
    assert s.total_padded == 32 and s.max_sorted == 32  # round_up(2 + 2*15, 16)
    assert s.valid_row_mask().sum().item() == 2


def test_max_sorted_rows_matches_aiter_formula():
    # Kimi decode M=4: 36 pairs on at most 36 experts -> 36 + 36*15 = 576 rows
    assert host.max_sorted_rows(4, 9, 385, 16) == 576
    # M=4096, BM128: every expert can be active -> round_up(36864 + 385*127, 128)
    assert host.max_sorted_rows(4096, 9, 385, 128) == 85760


@pytest.mark.parametrize("kwargs", [
    dict(ids=torch.tensor([[0, 8]])),
    dict(ids=torch.tensor([[-1, 0]])),
    dict(w=torch.ones(2, 2)),
    dict(block_m=0),
    dict(pad_style="zeros"),
    dict(ids=torch.tensor([[0.0, 1.0]])),
])
def test_sort_rejects_bad_input(kwargs):
    ids = kwargs.get("ids", torch.tensor([[0, 1]]))
    w = kwargs.get("w", torch.ones(ids.shape))
    with pytest.raises(ValueError):
        moe_sort(ids, w, 8, kwargs.get("block_m", 16), kwargs.get("pad_style", "mxfp4_aux"))


# --------------------------------------------------------------------------- quantisation


def test_moe_scale_rule_hand_values():
    amax = torch.tensor([0.0, 1.0, 3.0, 6.0, 6.01, 12.0, 3e38])
    # amax/6: 0 -> 0; 1/6 -> 2**-2 (125); 0.5 -> 126; 1.0 -> 127; just above 1 -> 128; 2 -> 128;
    # 5e37 (~2**125.2) rounds up to 2**126 = 253 (finite float32 never reaches the 254 clamp)
    assert e8m0_scale_moe(amax).tolist() == [0, 125, 126, 127, 128, 128, 253]


def test_moe_quant_never_saturates_and_matches_formats_codes():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 256, generator=g) * torch.logspace(-3, 3, 64).unsqueeze(-1)
    q, s = quantize_mxfp4_moe(x)
    deq = formats.dequantize_mxfp4(q, s)
    blocks = x.reshape(64, 8, 32)
    step = formats.e8m0_decode(s).unsqueeze(-1)  # the largest half-step (4 -> 6) is one scale
    assert bool(((deq.reshape(64, 8, 32) - blocks).abs() <= step).all())
    assert bool((blocks.abs().amax(-1) <= 6 * step.squeeze(-1)).all())  # no block saturates
    # elements use the formats rounding: where both rules pick the same scale, bytes agree
    fq, fs = formats.quantize_mxfp4(x)
    same = (fs == s).repeat_interleave(16, dim=-1)
    assert same.any() and torch.equal(q[same], fq[same])
    # and a formats rule passes straight through
    assert all(torch.equal(a, b) for a, b in zip(quantize_mxfp4_moe(x, "flydsl"), (fq, fs)))


def test_quantize_rejects_bad_input():
    with pytest.raises(ValueError):
        quantize_mxfp4_moe(torch.ones(2, 33))
    with pytest.raises(ValueError):
        quantize_mxfp4_moe(torch.tensor([[float("nan")] * 32]))


# --------------------------------------------------------------------------- layouts


def test_sorted_scales_land_where_gemm1_reads_them():
    inp, _, out = _case(16, "decode")
    s, a_scale = out["sorting"], inp["a_scale"]
    buf = out["a_scale_sorted_shuffled"]
    K = inp["problem"].hidden
    tok, _ = host.unpack_sorted_ids(s.sorted_token_ids)
    for r in [0, 1, 15, 16, 17, 31, s.max_sorted - 1]:
        for c in [0, 3, 4, 7, 8, K // 32 - 1]:
            want = a_scale[tok[r], c].item() if tok[r] < s.tokens else 0
            assert buf[formats.scale_shuffled_offset(r, c, K)].item() == want
    # and the inverse recovers the gathered rows
    back = host.unshuffle_sorted_scales(buf, K // 32)[: s.max_sorted]
    valid = s.valid_row_mask()
    assert torch.equal(back[valid], a_scale[tok[valid]])


def test_w1_bytes_at_gemm1_addresses():
    """Check bytes at the address gemm1 computes (FlyDSL mxfp_moe/gemm1.py index math)."""
    p = small_test_problem(1)
    inp = make_moe_inputs(p)
    w1q, w1s = inp["w1_quant"], inp["w1_scale"]
    shuf, sshuf = host.preshuffle_w1(w1q, w1s)
    E, N, KH = w1q.shape
    K = 2 * KH
    flat, sflat = shuf.reshape(-1), sshuf.reshape(-1)
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        e, n, kb = (int(torch.randint(0, m, (1,), generator=g)) for m in (E, N, KH))
        kc, kh, kl, kp = kb // 128, (kb % 128) // 64, (kb % 64) // 16, kb % 16
        off = (e * N + n - n % 16) * KH + 2048 * kc + 1024 * kh + 256 * kl + 16 * (n % 16) + kp
        assert flat[off] == w1q[e, n, kb]
        # the same byte in the compact "16-byte chunks of 16 rows" form (= shuffle_weight (16, 16))
        assert off == (e * N + n - n % 16) * KH + (kb // 16) * 256 + (n % 16) * 16 + kb % 16
        c = kb // 16  # scale column of this byte
        n32, npk, nl = n // 32, (n % 32) // 16, n % 16
        k8, kp2, kl2 = c // 8, (c % 8) // 4, c % 4
        dword = ((e * (N // 32) + n32) * (K // 256) + k8) * 64 + 16 * kl2 + nl
        assert sflat[dword * 4 + 2 * kp2 + npk] == w1s[e, n, c]
    assert all(torch.equal(a, b) for a, b in zip(host.unpreshuffle_w1(shuf, sshuf), (w1q, w1s)))


def test_gate_up_interleave_hand_checked_and_inverse():
    E, inter = 1, 32
    t = torch.arange(2 * inter).reshape(E, 2 * inter, 1)
    il = host.interleave_gate_up(t).flatten().tolist()
    assert il[:16] == list(range(0, 16)) and il[16:32] == list(range(32, 48))
    assert il[32:48] == list(range(16, 32)) and il[48:] == list(range(48, 64))
    assert torch.equal(host.deinterleave_gate_up(host.interleave_gate_up(t)), t)
    with pytest.raises(ValueError):
        host.interleave_gate_up(torch.zeros(1, 40, 1))


def test_interleaved_preshuffle_matches_aiter_guinterleave_order():
    """aiter's is_guinterleave/gate_up W1 order: 16-row tiles as (n0, gate|up), then 16x64B tiles;
    its gate_up scale order pairs gate tile n and up tile n in one 32-row word group."""
    E, inter, KB = 2, 32, 128
    g = torch.Generator().manual_seed(2)
    q = torch.randint(0, 256, (E, 2 * inter, KB), generator=g, dtype=torch.uint8)
    sc = torch.randint(0, 256, (E, 2 * inter, KB // 16), generator=g, dtype=torch.uint8)
    qs, ss = host.preshuffle_w1(q, sc, interleave=True)
    # weights: [E, g/u, n0, lane16, k0, klane4, kpack16] -> [E, n0, g/u, k0, klane, lane, kpack]
    want_q = q.view(E, 2, inter // 16, 16, KB // 64, 4, 16).permute(0, 2, 1, 4, 5, 3, 6).reshape(q.shape)
    assert torch.equal(qs, want_q)
    # scales: [E, g/u, n1, lane16, k1, kpack2, klane4] -> [E, n1, k1, klane, lane, kpack, g/u]
    want_s = sc.view(E, 2, inter // 16, 16, KB // 128, 2, 4).permute(0, 2, 4, 6, 3, 5, 1).reshape(sc.shape)
    assert torch.equal(ss, want_s)


def test_interleaved_w1_gives_same_result_and_wrong_layout_is_caught():
    inp, _, out = _case(16, "decode")
    s = out["sorting"]
    w_il, s_il = host.preshuffle_w1(inp["w1_quant"], inp["w1_scale"], interleave=True)
    assert not torch.equal(w_il, out["w1_shuf"])
    q_il, sc_il = emulate.emulate_gemm1(inp["a_quant"], out["a_scale_sorted_shuffled"], w_il, s_il, s, interleave=True)
    assert torch.equal(q_il, out["inter_quant"]) and torch.equal(sc_il, out["inter_scale_shuffled"])
    # negative control: reading separated weights as interleaved scrambles gate/up
    q_bad, _ = emulate.emulate_gemm1(inp["a_quant"], out["a_scale_sorted_shuffled"], out["w1_shuf"],
                                     out["w1_scale_shuf"], s, interleave=True)
    valid = s.valid_row_mask()
    assert (q_bad[valid] != out["inter_quant"][valid]).float().mean() > 0.5


# --------------------------------------------------------------------------- pipeline vs reference


@pytest.mark.parametrize("tokens,regime", [(16, "decode"), (200, "prefill"), (200, "decode"), (16, "prefill")])
def test_staged_pipeline_equals_reference(tokens, regime):
    inp, ref, out = _case(tokens, regime)
    s = out["sorting"]
    assert s.block_m == host.REGIMES[regime].block_m
    assert s.total_padded > tokens * 2  # padding rows are present and exercised
    # gemm1 + requant: bit-identical intermediate in sorted order, zero on padding
    tok, slot = host.unpack_sorted_ids(s.sorted_token_ids)
    valid = s.valid_row_mask()
    assert torch.equal(out["inter_quant"][valid], ref["h_quant"][tok[valid], slot[valid]])
    assert bool((out["inter_quant"][~valid] == 0).all())
    inter_sc = host.unshuffle_sorted_scales(out["inter_scale_shuffled"], inp["problem"].intermediate // 32)
    assert torch.equal(inter_sc[: s.max_sorted][valid], ref["h_scale"][tok[valid], slot[valid]])
    # gemm2 + epilogue: within the bf16 rounding bound of the exact weighted sum
    _check_pipeline_matches(inp, ref, out)
    if regime == "prefill":
        assert torch.equal(out["flat_out"][valid], ref["per_slot"][tok[valid], slot[valid]].to(torch.bfloat16))
        # scatter-reduce = fp32 sum, in slot order, of w * bf16(row), rounded once
        expect = torch.zeros_like(ref["out_f32"])
        for k in range(inp["problem"].topk):
            expect += inp["topk_weights"][:, k:k + 1] * ref["per_slot"][:, k].to(torch.bfloat16).float()
        assert torch.equal(out["out"], expect.to(torch.bfloat16))


def test_bound_catches_a_routing_weight_bug():
    """Negative control: the tolerance used above is tight enough to see swapped slot weights."""
    inp, ref, out = _case(200, "prefill")
    s = out["sorting"]
    pos = s.reverse_sorted.long()
    swapped = s.sorted_weights.clone()
    swapped[pos] = s.sorted_weights[pos.reshape(-1, 2).flip(-1).reshape(-1)]  # each token's two weights swapped
    bad = host.MoESorting(**{**s.__dict__, "sorted_weights": swapped})
    wrong = host.scatter_reduce(out["flat_out"], bad)
    err = (wrong.float() - ref["out_f32"]).abs()
    assert bool((err > _bound(ref, inp["topk_weights"], 2)).float().mean() > 0.5)


def test_single_token_both_regimes():
    p = small_test_problem(1, "decode", seed=5)
    inp = make_moe_inputs(p)
    ref = moe_reference(inp)
    for regime, pad_style in (("decode", "mxfp4_aux"), ("prefill", "ck")):
        out = run_moe_pipeline(inp, regime=regime, pad_style=pad_style)
        assert out["sorting"].num_valid_blocks == 2  # two experts, six empty ones
        _check_pipeline_matches(inp, ref, out)


def test_atomic_and_scatter_reduce_round_differently_by_hand():
    # one token, three contributions 1, 2**-8, 2**-8 (weight 1)
    contrib = torch.tensor([[1.0], [2.0 ** -8], [2.0 ** -8]])
    atomic = emulate.atomic_accumulate_bf16(contrib, torch.tensor([0, 0, 0]), tokens=1)
    assert atomic.item() == 1.0  # each 1 + 2**-8 is a tie, rounded to even
    s = moe_sort(torch.tensor([[0, 1, 2]]), torch.ones(1, 3), num_experts=3, block_m=1)
    flat = torch.zeros(s.max_sorted, 1, dtype=torch.bfloat16)
    flat[s.reverse_sorted.long()] = contrib.to(torch.bfloat16)
    assert host.scatter_reduce(flat, s).item() == 1.0078125  # fp32 sum, one rounding
    # padding rows (token >= M) are skipped by the atomic epilogue
    assert emulate.atomic_accumulate_bf16(contrib, torch.tensor([0, 1, 1]), tokens=1).item() == 1.0


def test_reference_hand_checked_tiny():
    # x rows all 1.0 and all 2.0 -> MoE quant: scale 2**-2 / 2**-1, every code 4.0 (0x6)
    x = torch.stack([torch.ones(32), 2 * torch.ones(32)])
    a_q, a_s = quantize_mxfp4_moe(x)
    assert a_s.flatten().tolist() == [125, 126] and bool((a_q == 0x66).all())
    # one expert: gate rows all 0.5 (code 1), up rows all 1.0 (code 2), W2 all 1.0
    w1_q = torch.cat([torch.full((1, 32, 16), 0x11), torch.full((1, 32, 16), 0x22)], dim=1).to(torch.uint8)
    w1_s = torch.full((1, 64, 1), 127, dtype=torch.uint8)
    w2_q = torch.full((1, 32, 16), 0x22, dtype=torch.uint8)
    w2_s = torch.full((1, 32, 1), 127, dtype=torch.uint8)
    inputs = dict(a_quant=a_q, a_scale=a_s, w1_quant=w1_q, w1_scale=w1_s, w2_quant=w2_q, w2_scale=w2_s,
                  topk_ids=torch.zeros(2, 1, dtype=torch.int32), topk_weights=torch.tensor([[1.0], [0.5]]))
    ref = moe_reference(inputs)
    # gate = 32*0.5*x, up = 32*x: h = silu(16)*32 ~ 512 and silu(32)*64 ~ 2048
    want_h = torch.tensor([16 * torch.sigmoid(torch.tensor(16.0)) * 32, 32 * torch.sigmoid(torch.tensor(32.0)) * 64])
    assert torch.allclose(ref["h"][:, 0, 0], want_h)
    assert ref["h_scale"].flatten().tolist() == [134, 136]  # 2**7 and 2**9 -> codes 4.0
    assert ref["out"].float()[:, 0].tolist() == [32 * 512.0, 0.5 * 32 * 2048.0]


def test_pipeline_rejects_bad_input():
    with pytest.raises(ValueError):
        run_moe_pipeline({"topk_ids": torch.zeros(1, 1)})
    inp, _, _ = _case(16, "decode")
    with pytest.raises(ValueError):
        run_moe_pipeline(inp, regime="turbo")
    with pytest.raises(ValueError):
        run_moe_pipeline({k: v for k, v in inp.items() if k != "w2_scale"})
    _, _, out = _case(16, "decode")
    with pytest.raises(ValueError, match="bytes"):  # a scale buffer sized for the wrong sorting
        emulate.emulate_gemm1(inp["a_quant"], out["a_scale_sorted_shuffled"][:-32], out["w1_shuf"],
                              out["w1_scale_shuf"], out["sorting"])


# --------------------------------------------------------------------------- problems and FLOPs


def test_problem_constants_and_validation():
    k = host.kimi_k25_tp4(4096)
    assert (k.experts, k.hidden, k.intermediate, k.topk) == (385, 7168, 512, 9)
    assert k.regime == "prefill" and k.block_m == 128
    assert host.kimi_k25_tp4(64).block_m == 16
    assert host.SMALL_TEST == dict(experts=8, hidden=512, intermediate=256, topk=2)
    assert host.SMALL_TEST_TOKENS == (16, 200)
    for bad in [dict(hidden=500), dict(topk=9), dict(regime="x"), dict(tokens=0), dict(experts=2.0)]:
        kw = dict(host.SMALL_TEST, tokens=4)
        kw.update(bad)
        with pytest.raises(ValueError):
            MoEProblem(**kw)


def test_make_moe_inputs_is_deterministic():
    a = make_moe_inputs(small_test_problem(16, seed=7))
    b = make_moe_inputs(small_test_problem(16, seed=7))
    c = make_moe_inputs(small_test_problem(16, seed=8))
    for key in ("hidden_states", "topk_ids", "topk_weights", "a_quant", "w1_quant", "w2_scale"):
        assert torch.equal(a[key], b[key])
    assert not torch.equal(a["w1_quant"], c["w1_quant"])
    assert a["w1_quant"].shape == (8, 512, 256) and a["w2_scale"].shape == (8, 512, 8)
    assert torch.allclose(a["topk_weights"].sum(-1), torch.ones(16))
    with pytest.raises(ValueError):
        make_moe_inputs(dict(KIMI_K25_TP4, tokens=1))


def test_flops_count_valid_rows_only():
    f = host.moe_flops(host.kimi_k25_tp4(4096))
    assert f["valid_rows"] == 36864
    assert f["gemm1"] == 541_165_879_296 and f["gemm2"] == 270_582_939_648
    assert f["total"] == f["gemm1"] + f["gemm2"]
    assert host.gemm1_flops(1, 32, 32) == 2 * 32 * 64


def test_published_ratios_csv():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments" / "reference" / "moe_published.csv"
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == ["kernel", "M", "stage", "ratio", "source", "note"]
    got = {(r["kernel"], int(r["M"]), r["stage"]): float(r["ratio"]) for r in rows}
    assert got == {("gemm2", 4096, "before"): 1.11, ("gemm2", 4096, "after"): 1.00,
                   ("gemm2", 16384, "before"): 1.10, ("gemm2", 16384, "after"): 1.03,
                   ("gemm1", 4096, "before"): 1.07, ("gemm1", 4096, "after"): 1.05}
    assert {r["source"] for r in rows} == {"aiter PR #3828"} and all(r["note"] for r in rows)
