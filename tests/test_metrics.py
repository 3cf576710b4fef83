"""The metrics table (mxfp4_ablation.metrics): one definition per metric, one parse per set."""

from pathlib import Path

import pytest

from mxfp4_ablation import isa, metrics

TWO_KERNELS = (Path(__file__).parent / "data" / "isa" / "two_kernels.s").read_text()
SETS = {"kernel": metrics.KERNEL_KEYS, "gemm": metrics.GEMM_KEYS, "moe": metrics.MOE_KEYS,
        "fingerprint": metrics.FINGERPRINT_KEYS}


def test_every_metric_names_a_known_region_and_says_what_it_is():
    for m in metrics.METRICS.values():
        assert m.region in metrics.REGIONS, m.name
        assert m.doc.strip(), m.name
        assert not (m.prefixes and m.predicate), f"{m.name}: prefixes or a predicate, not both"


@pytest.mark.parametrize("name", list(SETS))
def test_every_set_is_ordered_names_of_the_table(name):
    keys = SETS[name]
    assert len(set(keys)) == len(keys) and set(keys) <= set(metrics.METRICS)


def test_a_metric_in_two_sets_has_one_name():  # issue #20: sign_shifts was sign_fixes, buffer_store_16B b16
    fp, moe, gemm = (set(SETS[n]) for n in ("fingerprint", "moe", "gemm"))
    assert {"sign_shifts", "mad_64", "kernarg_bytes", "s_load"} <= fp & moe
    assert {"buffer_store_2B", "buffer_store_16B"} <= fp & gemm


_MFMA = "\tv_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]\n"
ONE_KERNEL = ("\t.type\tk,@function\nk:\n\tbuffer_load_dword v1, v2, s[0:3], 0 offen\n.LBB0_1:\n" + _MFMA * 2
              + "\ts_waitcnt vmcnt(0)\n\ts_cbranch_scc1 .LBB0_1\n\tv_exp_f32_e32 v1, v1\n\ts_endpgm\n.Lfunc_end0:\n")


@pytest.mark.parametrize("compute", [metrics.kernel_metrics, metrics.fingerprint, metrics.gemm_metrics,
                                     metrics.moe_metrics])
def test_a_set_parses_the_text_once(monkeypatch, tmp_path, compute):
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path))
    calls = []
    real = isa.parse
    monkeypatch.setattr(isa, "parse", lambda text: calls.append(1) or real(text))
    values = compute(ONE_KERNEL)
    assert len(calls) == 1
    assert values["mfma"] == 2 and values["loop_s_waitcnt"] == 1 and values["insts_before_first_buffer_load"] == 0
    # a text's single-number values are kept on disk: the same values again, no parse
    assert compute(ONE_KERNEL) == values and len(calls) == 1 + (compute is metrics.kernel_metrics)
    assert list(compute(ONE_KERNEL)) == list(values)


def test_kept_metrics_follow_the_text_and_a_damaged_entry_is_parsed_again(monkeypatch, tmp_path):
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path))
    first = metrics.gemm_metrics(ONE_KERNEL)
    entries = list((tmp_path / "metrics").rglob("*.json"))
    assert len(entries) == 1
    other = ONE_KERNEL.replace("s_waitcnt vmcnt(0)", "s_waitcnt vmcnt(0)\n  s_waitcnt vmcnt(0)", 1)
    assert other != ONE_KERNEL and metrics.gemm_metrics(other)["s_waitcnt"] == first["s_waitcnt"] + 1
    entries[0].write_text('{"key": "x", "values": {"mfma": 99}}')
    assert metrics.gemm_metrics(ONE_KERNEL) == first
    entries[0].write_text("{not json")
    assert metrics.gemm_metrics(ONE_KERNEL) == first


def test_kernarg_bytes_has_one_source_the_descriptor_then_the_metadata():
    alpha = isa.kernel_of(TWO_KERNELS, "alpha")
    view = metrics.KernelView(alpha)
    desc = alpha.descriptor.get("kernarg_size")
    meta = alpha.metadata.get(".kernarg_segment_size")
    assert view.resources["kernarg_bytes"] == (desc if desc is not None else meta)
    assert metrics.fingerprint(alpha)["kernarg_bytes"] == view.resources["kernarg_bytes"]
    alpha.descriptor.pop("kernarg_size", None)
    alpha.metadata[".kernarg_segment_size"] = 4242
    assert metrics.KernelView(alpha).resources["kernarg_bytes"] == 4242


def test_a_region_the_kernel_lacks_gives_none_and_normalisers_follow_their_region():
    beta = metrics.KernelView(TWO_KERNELS, "beta")  # no loop, no MFMA
    assert beta.region("loop") is None and beta.region("after_mfma") is None
    assert beta.values(["loop_s_waitcnt_per_4k", "loop_k_steps", "epilogue_instructions", "mfma_operand_reuse",
                        "s_waitcnt_per_128_mfma"]) == dict.fromkeys(
        ["loop_s_waitcnt_per_4k", "loop_k_steps", "epilogue_instructions", "mfma_operand_reuse",
         "s_waitcnt_per_128_mfma"])
    alpha = metrics.KernelView(TWO_KERNELS, "alpha")
    loop = alpha.region("loop")
    mfma = sum(1 for i in loop if isa.is_mfma(i.opcode))
    waits = sum(1 for i in loop if isa.is_waitcnt(i.opcode))
    assert alpha.values(["loop_s_waitcnt_per_128_mfma"])["loop_s_waitcnt_per_128_mfma"] == round(waits * 128 / mfma, 3)
    assert alpha.values(["loop_s_waitcnt_per_4k"])["loop_s_waitcnt_per_4k"] == waits * 4 / (mfma / 128)
