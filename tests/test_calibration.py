"""The power-limited clock (gfx950emu.timing.power) and the calibration protocol (mxfp4_ablation.calibration).

Fast: no compile, no simulation (synthetic kernel dicts and activity counts)."""
import math
import shutil
from types import SimpleNamespace as NS

import pytest

from gfx950emu.timing import PARAMS_FILE, Params, grid, power
from mxfp4_ablation import calibration as CAL


def _kern(cycles=300000.0, flops=2.0 * 8192 ** 3, rounds=4, n_bytes=10 ** 8):
    p = Params()
    k = {"compute_cycles": cycles, "bytes_buffers": n_bytes, "bytes_l2": n_bytes, "launch_us": 2.0, "flops": flops,
         "rounds": rounds, "round_scale": 1.0, "memory": None, "us": 0.0}
    return grid.at_clock(k, p.clock_sustained_ghz, p)


def _act(mfma_per_cycle=0.22, sim_cycles=75000, n_wg=1024, op_bytes_per_mfma=3584.0):
    n = mfma_per_cycle * sim_cycles
    return {"mfma": int(n), "mfma_passes": 4.0 * n, "operand_bytes": op_bytes_per_mfma * n,
            "operand_bytes_without_reuse": op_bytes_per_mfma * n, "mfma_reuse_pairs": 0, "lds_bytes": 0.0,
            "vmem_bytes": 0.0, "valu": 0, "sim_cycles": sim_cycles, "n_wg": n_wg, "sampled": 1}


ON = {"power.enabled": True, "power.ref_ghz": 1.4, "power.operand_weight_per_byte": 0.0,
      "power.round_overhead_us": 0.0}


def test_power_off_leaves_the_kernel_exactly_as_the_constant_clock_gives_it():
    k = _kern()
    p = Params(overrides={"power.enabled": False})
    assert power.apply(k, _act(), p) is k
    assert power.apply(k, None, Params(overrides=ON)) is k


def test_a_busier_kernel_runs_at_a_lower_clock_and_a_small_grid_boosts():
    p = Params(overrides=ON)
    busy, light = power.clock(_kern(), _act(0.24), p), power.clock(_kern(), _act(0.18), p)
    assert busy["limited"] and busy["clock_ghz"] < light["clock_ghz"] < p.clock_peak_ghz
    # at the reference activity (0.25 FP4-MFMA units per CU cycle, every CU busy) the clock is ref_ghz
    assert power.clock(_kern(), _act(0.25), p)["clock_ghz"] == pytest.approx(1.4, rel=1e-4)
    # the cube root: 2x the activity -> 2^(-1/3) the clock
    a, b = (power.clock(_kern(), _act(x), p)["clock_ghz"] for x in (0.1, 0.2))
    assert b / a == pytest.approx(2 ** (-1 / 3), rel=1e-3)
    # 16 workgroups light 16 of 256 CUs: boost clock
    small = power.clock(_kern(), _act(0.25, n_wg=16), p)
    assert not small["limited"] and small["clock_ghz"] == p.clock_peak_ghz


def test_operand_energy_and_round_overhead_slow_the_kernel():
    k, a = _kern(), _act()
    base = power.apply(k, a, Params(overrides=ON))
    op = power.apply(k, a, Params(overrides={**ON, "power.operand_weight_per_byte": 1e-4}))
    rnd = power.apply(k, a, Params(overrides={**ON, "power.round_overhead_us": 5.0}))
    assert op["clock_ghz"] < base["clock_ghz"] and op["us"] > base["us"]
    assert rnd["us"] == pytest.approx(base["us"] + 4 * 5.0, abs=2e-3) and rnd["round_overhead_us"] == 20.0
    assert power.apply(base, a, Params(overrides=ON))["us"] == base["us"]  # idempotent (cache re-apply)


def _op(kind, index, count):
    return NS(kind=kind, index=index, count=count)


def test_activity_counts_operand_reuse_of_consecutive_mfmas():
    # three MFMAs: the second reuses the first's A (v0..3), the third reuses nothing; one ds_read_b128
    A0, A1, B0, B1 = _op("v", 0, 4), _op("v", 8, 4), _op("v", 4, 4), _op("v", 12, 4)
    acc = [_op("a", 4 * i, 4) for i in range(3)]
    sc = _op("v", 40, 1)
    ins = [NS(operands=[acc[0], A0, B0, acc[0], sc, sc]), NS(operands=[acc[1], A0, B1, acc[1], sc, sc]),
           NS(operands=[acc[2], A1, B0, acc[2], sc, sc]), NS(operands=[])]
    st = [NS(kind="mfma", passes=4, nbytes=0)] * 3 + [NS(kind="lds", passes=0, nbytes=16)]
    act = power.activity(NS(instructions=ins), st, [1, 1, 1, 2], sim_cycles=100, n_wg=1, sampled=1)
    full = (4 + 4 + 4 + 1 + 1) * 4 * 64
    # the ring: MFMA 0's predecessor is MFMA 2 (B0 again), MFMA 1 reuses A0, MFMA 2 nothing (A1, B0 vs A0, B1)
    assert act["mfma"] == 3 and act["mfma_passes"] == 12 and act["mfma_reuse_pairs"] == 2
    assert act["operand_bytes_without_reuse"] == 3 * full
    assert act["operand_bytes"] == 3 * full - 2 * 4 * 4 * 64
    assert act["lds_bytes"] == 2 * 16 * 64


def _synthetic_rows(theta):
    """Fit points whose 'published' times the model gives exactly at ``theta``."""
    rows = []
    for i, (cyc, rate, rounds) in enumerate([(3.0e5, 0.20, 4), (3.3e5, 0.22, 4), (6.0e5, 0.21, 4),
                                             (1.2e6, 0.23, 16), (2.4e6, 0.20, 16), (6.4e5, 0.24, 4)]):
        raw = {"kernel": _kern(cycles=cyc, rounds=rounds), "activity": _act(rate, op_bytes_per_mfma=3000 + 200 * i)}
        us = CAL.predict_us(raw, theta)
        shape = [(8192, 8192, 8192), (8192, 8192, 16384), (16384, 16384, 8192)][i % 3]
        rows.append({"stage": ["before_990", "after_990"][i // 3], "M": shape[0], "N": shape[1], "K": shape[2],
                     "raw": raw, "published_us": us, "published_tflops": raw["kernel"]["flops"] / us / 1e6})
    return rows


def test_the_fit_recovers_known_parameters_with_uncertainties():
    truth = {"power.ref_ghz": 1.3, "power.operand_weight_per_byte": 2e-4, "power.round_overhead_us": 3.0}
    res = CAL.fit(_synthetic_rows(truth))
    for k, v in truth.items():
        assert res["values"][k] == pytest.approx(v, rel=2e-2), k
        assert res["stderr"][k] >= 0
    assert res["rms_pct"] < 0.05 and res["n"] == 6 and res["dof"] == 3
    with pytest.raises(Exception, match="at most 4"):
        CAL.fit(_synthetic_rows(truth), params=list(truth) * 2)


def test_uncertainty_reports_bias_apart_from_spread():
    u = CAL.uncertainty([1.0, 2.0, 3.0, 2.0])
    assert u["bias_pp"] == pytest.approx(2.0) and u["spread_pp"] == pytest.approx(math.sqrt(2 / 3))
    assert u["bias_low_pp"] <= 2.0 <= u["bias_high_pp"]
    assert u["half_width_pp"] == pytest.approx(u["t"] * u["spread_pp"] * math.sqrt(1 + 1 / 4))
    with pytest.raises(Exception, match="at least 3"):
        CAL.uncertainty([1.0, 2.0])


def test_the_declared_fit_set_is_pr990s_twelve_points_and_nothing_else():
    pts = CAL.read_points()
    fit = [p for p in pts if p["role"] == "fit"]
    assert len(fit) == 12 and {p["stage"] for p in fit} == set(CAL.GEMM_STAGES)
    assert all(p["source_url"] == "https://github.com/ROCm/FlyDSL/pull/990" for p in fit)
    assert len({(p["M"], p["N"], p["K"]) for p in fit}) == 4
    val = [p for p in pts if p["role"] == "validate"]
    assert any(p["source_url"].endswith("aiter/pull/3828") for p in val)
    # FlyDSL's own commit-message figures (#756 / #798 branch history) stay out
    assert not any("/commit/" in p["source_url"] or "pull/756" in p["source_url"] or "pull/798" in p["source_url"]
                   for p in pts)


def test_write_toml_stores_the_fit_with_provenance(tmp_path):
    path = tmp_path / "gfx950.toml"
    shutil.copy(PARAMS_FILE, path)
    res = {"params": list(CAL.FIT_PARAMS), "values": {"power.ref_ghz": 1.234, "power.operand_weight_per_byte": 1e-4,
                                                       "power.round_overhead_us": 2.5},
           "stderr": {"power.ref_ghz": 0.01, "power.operand_weight_per_byte": 5e-5, "power.round_overhead_us": 0.5}}
    CAL.write_toml(res, {"fit_set": "12 points", "model_fingerprint": "0.1.0+x", "command": "cmd"}, path)
    p = Params(path)
    assert p.power_enabled is True and p.power_ref_ghz == pytest.approx(1.234)
    assert p.power_round_overhead_us == pytest.approx(2.5)
    e = p.table["power.ref_ghz"]
    assert e["fitted"] == "yes" and e["stderr"] == pytest.approx(0.01) and e["fit_model"] == "0.1.0+x"
    assert e["unit"] == "GHz" and "least squares" in e["source"]
    assert p.clock_sustained_ghz == Params().clock_sustained_ghz  # nothing else touched


def test_cli_bad_input_is_one_line_exit_2(capsys):
    assert CAL.main(["fit", "--upstream-out", "/nonexistent/upstream"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1


def test_committed_calibration_table_has_the_fit_the_cv_and_the_uncertainty():
    t = CAL.read_table()
    assert set(t["label"]) == {"modelled"} and t["model_fingerprint"].notna().all()
    fit = CAL.fit_summary(t)
    assert list(fit["name"]) == list(CAL.FIT_PARAMS) and (fit["stderr"] >= 0).all()
    cv = CAL.cv_table(t)
    assert {"leave-one-shape-out", "leave-one-kernel-out"} <= set(cv["scheme"])
    assert len(cv[(cv["scheme"] == "leave-one-shape-out") & (cv["kind"] == "cv_ratio")]) == 8
    u = CAL.read_uncertainty()
    assert u["n"] >= 8 and u["half_width_pp"] > 0 and u["bias_low_pp"] <= u["bias_pp"] <= u["bias_high_pp"]


def test_calibration_figures_draw_from_the_committed_table():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for fig in (CAL.plot_validation(), CAL.plot_residuals()):
        assert fig.axes and any(ax.collections or ax.patches for ax in fig.axes)
        plt.close(fig)


def test_mechanism_table_switches_each_mechanism_off_fixed_and_refit():
    truth = {"power.ref_ghz": 1.3, "power.operand_weight_per_byte": 2e-4, "power.round_overhead_us": 3.0}
    rows = _synthetic_rows(truth)
    t = CAL.mechanism_table(rows, truth)
    full = [r for r in t if r["mechanism_off"] == "none"]
    assert full and all(abs(r["error"]) < 0.05 for r in full)      # the synthetic points are the model's own
    assert {r["mechanism_off"] for r in t} == {"none"} | {k for k, _, _ in CAL.MECHANISMS}
    # the per-round overhead off: every speed-up moves (fixed), and a refit without it is reported too
    off = [r for r in t if r["mechanism_off"] == "power.round_overhead_us"]
    assert {r["params"] for r in off} == {"fixed", "refit"}
    assert max(abs(r["error"]) for r in off if r["params"] == "fixed") > 0.05
    # the constant clock has nothing to refit
    assert {r["params"] for r in t if r["mechanism_off"] == "power.enabled"} == {"fixed"}


def test_a_cycle_mechanism_row_uses_the_points_simulated_again_with_its_override():
    """The rows of a mechanism inside the cycle simulation come from the fit points simulated with it off
    (here: the after kernel's cycles 5 % longer), fixed and refit; without those rows it has no row."""
    import copy

    truth = {"power.ref_ghz": 1.3, "power.operand_weight_per_byte": 2e-4, "power.round_overhead_us": 3.0}
    rows = _synthetic_rows(truth)
    alt = copy.deepcopy(rows)
    for r in alt:
        if r["stage"] == "after_990":
            r["raw"]["kernel"]["compute_cycles"] *= 1.05
    key, val, _ = CAL.CYCLE_MECHANISMS[0]
    t = CAL.mechanism_table(rows, truth, cycle_rows={(key, val): alt})
    mine = [r for r in t if r["mechanism_off"] == key]
    assert {r["params"] for r in mine} == {"fixed", "refit"} and all(r["value_off"] == val for r in mine)
    fixed = [r for r in mine if r["params"] == "fixed" and r["case"] == "after_990/before_990"]
    assert fixed and all(r["error"] < -0.5 for r in fixed)     # the after kernel got slower: its gain shrinks
    assert not [r for r in CAL.mechanism_table(rows, truth) if r["mechanism_off"] == key]


def test_mechanism_summary_names_each_rows_setting():
    """A row says the setting it ran with: off for the model's mechanisms, on for a what-if that is off."""
    rows = set(CAL.mechanism_summary()["mechanism_off"])
    assert {"none", "memory.queues=False", "power.enabled=False", "vmem.l1_cache=False",
            "lds.dma_contends=True"} <= rows
