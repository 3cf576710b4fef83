"""Numbers the README's hand-written prose holds, checked against the data they come from.

The generated blocks (between ``<!-- ...:begin -->`` / ``end`` markers) are rewritten by ``make readme``;
the prose around them is not. Where the prose must quote a number, this test reads it from the
generated GEMM ladder table, ``experiments/reference/timing_validation.csv`` or
``experiments/reference/upstream_hazards.json``, so a regenerated table or record whose numbers moved
fails here until the prose says the new ones.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
REF = REPO / "experiments" / "reference"


def _block(name: str) -> str:
    start = README.index(f"<!-- {name}:begin")
    return README[start:README.index(f"<!-- {name}:end -->")]


def _gemm_ladder() -> dict[str, dict[str, str]]:
    lines = [ln for ln in _block("gemm-ladder-table").splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows[cells[1]] = dict(zip(head, cells))
    return rows


def _delta(row: dict[str, str]) -> float:
    return float(re.match(r"([+-]?[\d.]+)%", row["Δ (modelled)"]).group(1))


def _interval(row: dict[str, str]) -> tuple[float, float]:
    lo, hi = re.search(r"\[([+-]?[\d.]+), ([+-]?[\d.]+)\]", row["Δ (modelled)"]).groups()
    return float(lo), float(hi)


def _validation() -> dict:
    with open(REF / "timing_validation.csv") as f:
        return {(r["stage"], r["M"], r["N"], r["K"]): r for r in csv.DictReader(f)}


def _prose() -> str:
    """README without its generated blocks."""
    text = README
    for m in re.finditer(r"<!-- ([\w-]+):begin", README):
        name = m.group(1)
        text = text.replace(_block(name), "")
    return text


#: a signed number as the prose writes it (typographic minus)
_SIGNED = r"([−+][\d.]+)"


def _signed(m: re.Match) -> tuple:
    return tuple(float(g.replace("−", "-")) for g in m.groups())


def _says(pattern: str) -> re.Match:
    found = re.search(pattern, " ".join(_prose().split()))
    assert found, f"the README prose no longer says {pattern!r}"
    return found


@pytest.mark.parametrize("switch, pattern", [
    ("g2s_m0", r"`g2s_m0` as ([+−-][\d.]+) %"),
    ("scale_prefetch", r"`scale_prefetch` as ([+−-][\d.]+) %"),
    ("b_carry", r"`b_carry` as ([+−-][\d.]+) % \(both unresolved\)"),
    ("serpentine", r"sees `serpentine` as ([+−-][\d.]+) %"),
])
def test_step_deltas_quoted_in_prose_are_the_tables(switch, pattern):
    ladder = _gemm_ladder()
    quoted = _says(pattern)
    assert float(quoted.group(1).replace("−", "-")) == pytest.approx(_delta(ladder[switch]), abs=0.005)


def test_resolved_counts_in_prose_are_the_tables():
    ladder = _gemm_ladder()
    ivs = {sw: _interval(r) for sw, r in ladder.items() if sw != "–"}
    resolved = sorted(sw for sw, (lo, hi) in ivs.items() if lo > 0 or hi < 0)
    m = _says(r"At 8192\^3, (\d+) of the (\d+) GEMM step deltas are resolved \(([^)]*?);")
    assert (int(m.group(1)), int(m.group(2))) == (len(resolved), len(ivs))
    assert sorted(re.findall(r"`(\w+)`", m.group(3))) == resolved


def test_first_and_last_rung_speed_against_upstream_in_prose():
    ladder, val = _gemm_ladder(), _validation()
    first, last = float(ladder["agpr_acc"]["TFLOPS (modelled)"]), float(ladder["static_prologue"]["TFLOPS (modelled)"])
    before = float(val[("before_990", "8192", "8192", "8192")]["modelled_tflops"])
    after = float(val[("after_990", "8192", "8192", "8192")]["modelled_tflops"])
    m = _says(r"`gemm-v1` models at (\d+) TFLOPS against (\d+) for FlyDSL daee90e4 in the same model \(([+−-][\d.]+) %\)")
    assert (int(m.group(1)), int(m.group(2))) == (round(first), round(before))
    assert float(m.group(3).replace("−", "-")) == pytest.approx(100 * (first / before - 1), abs=0.05)
    m = _says(r"`gemm-v9`, is within ([\d.]+) % of 741f3d6d \((\d+) vs (\d+);")
    assert float(m.group(1)) == pytest.approx(100 * abs(last / after - 1), abs=0.05)
    assert (int(m.group(2)), int(m.group(3))) == (round(last), round(after))
    m = _says(r"modelled span of PR #990 \(\+([\d.]+) %\) is not the PR's own span in the same model \(\+([\d.]+) %\)")
    assert float(m.group(1)) == pytest.approx(100 * (last / first - 1), abs=0.05)
    assert float(m.group(2)) == pytest.approx(100 * (after / before - 1), abs=0.05)
    gap = 100 * (first / before - 1)
    assert _says(rf"first rung is {abs(gap):.1f} % {'faster' if gap > 0 else 'slower'} than daee90e4")


def test_the_upstream_race_in_prose_is_the_committed_record():
    rec = json.loads((REF / "upstream_hazards.json").read_text())
    late = rec["runs"]["late"]
    m = _says(r"cosine ([\d.]+) at (\d+)x(\d+)x(\d+), ([\d,]+) of ([\d,]+) outputs wrong")
    assert float(m.group(1)) == round(late["cosine"], 3)
    assert [int(m.group(i)) for i in (2, 3, 4)] == [rec["shape"][k] for k in ("M", "N", "K")]
    assert int(m.group(5).replace(",", "")) == late["mismatches"]
    assert int(m.group(6).replace(",", "")) == late["elements"]
    fix, tail = rec["fix"]["changes"]
    assert fix["alone_late_exact"] and not tail["alone_late_exact"] and rec["runs"]["fixed_late"]["exact"]
    _says(rf"`s_waitcnt vmcnt\({fix['old']}\)` before the `b1_frag` carry seed should be `vmcnt\({fix['new']}\)`")
    _says(rf"tail `vmcnt\({tail['old']}\)` → `vmcnt\({tail['new']}\)`")
    assert "PYTHONPATH=src python -m mxfp4_ablation.upstream_hazards" in rec["command"] and "/work/" not in rec["command"]


#: Absolute paths of one machine: this workplace's checkouts, a home or root folder, a scratch folder.
MACHINE_PATH = re.compile(r"(?<![\w.$<])/(?:work|root|home|tmp)/")


def test_no_tracked_file_names_a_machine_path():
    import subprocess

    files = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True).stdout.split()
    if not files:
        pytest.skip("not a git checkout")
    me = Path(__file__).relative_to(REPO).as_posix()
    bad = []
    for name in files:
        path = REPO / name
        if name == me or not path.is_file():
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        bad += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if MACHINE_PATH.search(line)]
    assert not bad, f"absolute machine paths in tracked files: {bad[:10]}"


def test_pr990_span_against_published_in_prose():
    ladder = _gemm_ladder()
    first, last = float(ladder["agpr_acc"]["TFLOPS (modelled)"]), float(ladder["static_prologue"]["TFLOPS (modelled)"])
    with open(REF / "gemm_published.csv") as f:
        pub = {(r["stage"], r["M"], r["N"], r["K"]): float(r["tflops"]) for r in csv.DictReader(f)}
    p = pub[("after_990", "8192", "8192", "8192")] / pub[("before_990", "8192", "8192", "8192")]
    m = _says(r"\(gemm-v1 → gemm-v9\) models at \+([\d.]+) % at 8192\^3 against the \+([\d.]+) % it published")
    assert float(m.group(1)) == pytest.approx(100 * (last / first - 1), abs=0.05)
    assert float(m.group(2)) == pytest.approx(100 * (p - 1), abs=0.05)


# ------------------------------------------------------------------ the README table's columns


def _long(rows, regime=None):
    import pandas as pd

    out = [{"variant": v, "metric": k, "value": x, "shape": "s", **({"regime": regime} if regime else {})}
           for v, metrics in rows.items() for k, x in metrics.items()]
    return pd.DataFrame(out)


def _exp(rows, regime=None):
    import pandas as pd

    return pd.DataFrame([{"comparison": "ladder", "variant": v, "metric": k, "before": a, "after": b,
                          "direction": d, "as_intended": True, **({"regime": regime} if regime else {})}
                         for v, k, a, b, d in rows])


def test_gemm_readme_columns_say_their_units_and_name_what_moved():
    from mxfp4_ablation.studies import gemm, readme

    base = {"vgpr_unified": 464, "v_accvgpr_write": 256, "v_accvgpr_mov": 0, "mfma_operand_reuse": 0.94,
            "loop_k_steps": 2, "loop_s_mov_b32_m0": 10, "loop_buffer_load_dword": 0, "loop_s_waitcnt_per_4k": 8,
            "buffer_store_16B": 0, "insts_before_first_buffer_load": 246, "loop_mfma": 256}
    v6 = {**base, "v_accvgpr_write": 1, "v_accvgpr_mov": 255, "loop_k_steps": 4, "loop_s_mov_b32_m0": 20,
          "loop_mfma": 512}
    v7 = {**v6, "v_accvgpr_write": 0, "v_accvgpr_mov": 0}
    metrics = _long({"gemm-v5": base, "gemm-v6": v6, "gemm-v7": v7})
    exp = _exp([("gemm-v6", "loop_mfma", 256, 512, "up"), ("gemm-v7", "v_accvgpr_write", 1, 0, "down")])
    lines = readme.ladder_table(gemm.STUDY, metrics, exp).splitlines()
    head = lines[0]
    assert "K-steps per trip" in head and "loop s_mov_b32 m0 (per trip)" in head
    assert "loop s_waitcnt (per 4 K-steps)" in head and "| v_accvgpr_mov |" in head
    row6 = next(ln for ln in lines if ln.startswith("| gemm-v6 "))
    row7 = next(ln for ln in lines if ln.startswith("| gemm-v7 "))
    assert "loop_mfma (per trip) 256 → 512 ✓" in row6
    assert "also: v_accvgpr_write 256 → 1; v_accvgpr_mov 0 → 255" in row6
    assert "loop_s_mov_b32_m0" not in row6.split("|")[3]  # per-trip counts double with the trip: not "moved"
    assert "v_accvgpr_write 1 → 0 ✓; also: v_accvgpr_mov 255 → 0" in row7


def test_moe_readme_columns_leave_gemm1_only_metrics_out_of_gemm2_rows():
    import pandas as pd

    from mxfp4_ablation.studies import moe, readme

    m1 = {"kernarg_bytes": 88, "s_load": 7, "epi_valu": 710, "epi_v_ldexp_f32": 0, "sign_shifts": 18, "s_waitcnt": 40,
          "loop_s_waitcnt": None, "mad_64": 0, "v_mad_u64_u32": 0, "instructions": 4196}
    m2 = {**m1, "epi_valu": 55, "epi_v_ldexp_f32": 0, "mad_64": 64, "v_mad_u64_u32": 0, "loop_s_waitcnt": 25}
    m2b = {**m2, "mad_64": 2, "v_mad_u64_u32": 2}
    metrics = pd.concat([_long({"moe1-v1": m1, "moe1-v2": m1}, "prefill"),
                         _long({"moe2-v3": m2, "moe2-v4": m2b}, "prefill")])
    exp = _exp([("moe2-v4", "mad_64", 64, 2, "down")], "prefill")
    lines = readme.ladder_table(moe.STUDY, metrics, exp).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert "64-bit mad (mad_64)" in head and "v_mad_u64_u32" not in head
    row = dict(zip(head, [c.strip() for c in next(ln for ln in lines if ln.startswith("| moe2-v4 ")).strip("|").split("|")]))
    assert row["gemm1 epilogue VALU"] == "–" and row["gemm1 epilogue v_ldexp_f32"] == "–"
    assert row["64-bit mad (mad_64)"] == "2" and row["K-loop s_waitcnt (per trip)"] == "25"
    row1 = dict(zip(head, [c.strip() for c in next(ln for ln in lines if ln.startswith("| moe1-v2 ")).strip("|").split("|")]))
    assert row1["gemm1 epilogue VALU"] == "710"


def test_the_unexplained_sgpr_difference_in_prose_is_the_fidelity_tables():
    block = " ".join(_block("gemm-fidelity").split())
    m = _says(r"the GEMM's sgpr difference, (\d+) vs (\d+) and (\d+) vs (\d+), is not\)")
    assert f"sgpr {m.group(1)} vs {m.group(2)} " in block and f"sgpr {m.group(3)} vs {m.group(4)} " in block


def test_the_timing_models_error_in_prose_is_the_validation_table():
    val = _validation().values()
    points = [float(r["error_pct"]) for r in val if r["source"] == "flydsl" and r["stage"] in ("before_990", "after_990")]
    ratios = [float(r["error_pct"]) for r in val if r["source"] == "ratio after/before"]
    asm = [float(r["modelled_tflops"]) for r in val if r["source"] == "ratio aiter_asm/after"]
    m = _says(rf"absolute TFLOPS within {_SIGNED} % \.\. {_SIGNED} % in-sample at the PR's four shapes")
    assert _signed(m) == (round(min(points), 1), round(max(points), 1))
    m = _says(rf"after/before speed-up off by {_SIGNED} \.\. {_SIGNED} points in-sample")
    assert _signed(m) == (round(min(ratios), 1), round(max(ratios), 1))
    assert len(asm) == 4 and all(a > 1 for a in asm)  # "on the right side of 1 everywhere"
    with open(REF / "calibration.csv") as f:
        held = [float(r["error"]) for r in csv.DictReader(f)
                if r["kind"] == "cv_ratio" and r["scheme"] == "leave-one-shape-out" and r["name"] == "after_990/before_990"]
    m = _says(rf"{_SIGNED} \.\. {_SIGNED} points held out \(leave-one-shape-out")
    assert _signed(m) == (round(min(held), 2), round(max(held), 2))
