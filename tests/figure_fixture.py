"""A small synthetic stored-data set for every registered figure, written in seconds without compiling,
modelling or FlyDSL: one run folder per run name the registry draws from (every step notebook of both
studies, the summary, the walkthrough) plus the committed harness-validation data.

Numbers are made up (plausible in size, deterministic); only the tables' shapes matter: the figures are
drawn from them exactly as from a real ``make reproduce``. The layout test (``test_figure_layout.py``)
renders every figure from this set. Built through the same pure table functions the study uses
(:mod:`mxfp4_ablation.studies.modelled_section`), so a change of those tables' columns shows up here.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd

from mxfp4_ablation import paths, results
from mxfp4_ablation.studies import modelled_runs as R
from mxfp4_ablation.studies import modelled_tables as A
from mxfp4_ablation.studies import views

PROV = {"label": "synthetic test fixture", "mode": "static", "settings": {}}

GEMM_SHAPES = ["8192x8192x8192", "8192x8192x16384", "16384x16384x8192", "16384x16384x16384"]
MOE_SHAPES = {"decode": "16x385x7168x512x9x16", "prefill": "4096x385x7168x512x9x128"}
GEMM_METRICS = ("vgpr_unified", "v_accvgpr_write", "mfma_operand_reuse", "loop_s_mov_b32_m0",
                "loop_buffer_load_dword", "loop_s_waitcnt_per_4k", "buffer_store_16B", "insts_before_first_buffer_load")
MOE_METRICS = ("kernarg_bytes", "s_load", "epi_valu", "epi_v_ldexp_f32", "sign_shifts", "loop_s_waitcnt",
               "v_mad_u64_u32", "instructions", "loop_instructions")


def _write(df: pd.DataFrame, path: Path) -> None:
    results.write_table(df.reset_index(drop=True), path, PROV)


def _run(exp: Path, name: str) -> Path:
    path = exp / f"20260101T000000Z-0000000-{name}"
    path.mkdir(parents=True)
    return path


def ladders() -> dict:
    """``{study: [(slug, variant, switch, family), ...]}`` from the step notebooks' file names."""
    out = {}
    for study, prefix in (("gemm", "gemm"), ("moe", None)):
        rows = []
        for slug in views.step_slugs(study):
            num, rest = slug.split("_", 1)
            if study == "gemm":
                variant, family, switch = f"gemm-v{int(num)}", "gemm", rest
            else:
                family = "moe1" if num.startswith("1") else "moe2"
                variant = f"{family}-v{int(num[1])}"
                switch = rest.split("_", 1)[1]
            rows.append((slug, variant, None if switch == "baseline" else switch, family))
        out[study] = rows
    return out


def _value(i: int, metric: str, k: int) -> float:
    return float((i * 7 + k * 13 + len(metric) * 3) % 50 + 10)


def _metrics(names: list, metrics, shape_of: dict, family: str, roles: dict) -> pd.DataFrame:
    rows = []
    for i, name in enumerate(names):
        for regime, shape in shape_of.items():
            for k, m in enumerate(metrics):
                value = math.nan if m == "loop_instructions" and regime == "decode" else _value(i, m, k)
                rows.append({"variant": name, "family": family, "kind": "ladder", "switch": "", "shape": shape,
                             "metric": m, "value": value, "role": roles.get(name, "variant"),
                             **({"regime": regime} if regime else {})})
    return pd.DataFrame(rows)


def _isa_diff(metrics: pd.DataFrame, base: str, variant: str) -> pd.DataFrame:
    rows = []
    keys = ["regime"] if "regime" in metrics.columns else []
    for key, g in metrics.groupby(keys or (lambda _: 0)):
        w = g.pivot_table(index="metric", columns="variant", values="value", aggfunc="first", dropna=False)
        for m in w.index:
            b, v = w.at[m, base], w.at[m, variant]
            row = {"metric": m, "baseline": b, "variant": v, "delta": v - b, "ratio": v / b if b else math.nan}
            if keys:
                row["regime"] = key[0] if isinstance(key, tuple) else key
            rows.append(row)
    return pd.DataFrame(rows)


def _expectations(diff: pd.DataFrame, base: str, variant: str, switch: str, comparison: str = "ladder") -> pd.DataFrame:
    rows = []
    for r in diff.head(6 if "regime" in diff.columns else 3).itertuples():
        direction = "down" if r.delta <= 0 else "up"
        if r.metric == "loop_instructions":
            direction = "same"  # missing on both sides at decode: drawn as n/a
        rows.append({"comparison": comparison, "variant": variant, "baseline": base, "switch": switch,
                     "metric": r.metric, "direction": direction, "before": r.baseline, "after": r.variant,
                     "delta": r.delta, "as_intended": bool(r.delta != 0 or direction == "same"),
                     **({"regime": r.regime} if "regime" in diff.columns else {})})
    return pd.DataFrame(rows)


def _sweep(names: list, shapes: list) -> pd.DataFrame:
    rows = []
    for i, name in enumerate(names):
        for j, shape in enumerate(shapes):
            tflops = (1000.0 if name.endswith("-v0") else 4800.0 + 37.0 * i - 11.0 * j) if name.startswith("gemm") \
                else 30.0 + 3.0 * i + 300.0 * j
            us = 1e3 / tflops
            row = {c: 0.0 for c in R.SWEEP_COLUMNS}
            row.update({"label": "modelled", "variant": name, "family": name.split("-")[0], "shape": shape,
                        "tflops": tflops, "us": us, "bound": "compute", "cycles": 1e5, "mfma_busy": 0.7 + 0.01 * i,
                        **{f"exposed_{r}": 1000.0 * (k + 1) + 10 * i for k, r in enumerate(A.REASONS)},
                        "model_version": "0.1.0", "clock_ghz": 1.395, "sample": 1, "cached": True})
            rows.append(row)
    return pd.DataFrame(rows, columns=R.SWEEP_COLUMNS)


def _timeline(names: list, shape: str, loop: bool) -> pd.DataFrame:
    """Four waves and (with a loop) four MFMA pipes; without a loop, a whole kernel whose second
    variant swaps a stretch of VALU for fewer ones near the end (an "epilogue" change)."""
    rows = []
    kinds = ["salu", "vmem", "lds", "valu", "waitcnt", "barrier", "branch", "smem"] + (["mfma"] if loop else [])
    for vi, name in enumerate(names):
        for w in range(4):
            t, ops = 0, []
            for n in range(160):
                kind = kinds[(n + w) % len(kinds)]
                ops.append((kind, f"op_{kind}"))
            if not loop and vi == 1:
                ops = ops[:120] + [("valu", "v_exp_f32")] * 6 + ops[140:]
            for line, (kind, opcode) in enumerate(ops):
                dur = 4 + (line % 5)
                rows.append({"variant": name, "shape": shape, "track": f"wave{w}", "start": t, "end": t + dur,
                             "opcode": opcode, "kind": kind, "line": line})
                t += dur + 2
        if loop:
            for s in range(4):
                for k in range(40):
                    rows.append({"variant": name, "shape": shape, "track": f"SIMD {s} MFMA", "start": 16 * k,
                                 "end": 16 * k + 14, "opcode": "v_mfma", "kind": "mfma", "line": 5})
    df = pd.DataFrame(rows)
    df["window"] = "hot loop" if loop else "whole kernel"
    df["window_cycles"] = df.groupby("variant")["end"].transform("max").astype(int)
    df["model_version"], df["clock_ghz"] = "0.1.0", 1.395
    return df


def _step_modelled(run: Path, base: str | None, variant: str, shapes: list, loop: bool) -> None:
    names = [n for n in (base, variant) if n]
    sw = _sweep(names, shapes)
    d = A.step_deltas(sw, [(base, variant)], {variant: "switch"})
    tl_shape = shapes[-1]
    _write(sw, run / "modelled_sweep.parquet")
    _write(d, run / "modelled_delta.parquet")
    _write(A.cycles_table(sw[sw["shape"] == tl_shape]), run / "modelled_cycles.parquet")
    _write(_timeline(names, tl_shape, loop), run / "modelled_timeline.parquet")
    _write(A.verdicts(d, {variant: ""}), run / "modelled_verdict.parquet")
    speed = []
    for r in sw.itertuples():
        speed.append({"variant": r.variant, "baseline": base, "kind": "modelled", "shape": r.shape, "metric": "tflops",
                      "value": r.tflops, "low": math.nan, "high": math.nan, "detail": "model 0.1.0, 1.395 GHz",
                      "available": True})
    speed.append({"variant": variant, "baseline": base, "kind": "measured", "shape": None, "metric": None,
                  "value": math.nan, "low": math.nan, "high": math.nan, "detail": "not available: no gfx950 GPU",
                  "available": False})
    _write(pd.DataFrame(speed), run / "speed.parquet")


def _published(study: str) -> pd.DataFrame:
    csv = "gemm_published.csv" if study == "gemm" else "moe_published.csv"
    return pd.read_csv(paths.REPO_ROOT / "experiments" / "reference" / csv)


def _fidelity(seeds: list) -> pd.DataFrame:
    """The fidelity table of ``seeds`` against the committed upstream fingerprints, with "ours" = the
    upstream values moved by a few per cent (no compile)."""
    from mxfp4_ablation import fidelity

    df = fidelity.load_fingerprints()
    ours = {}
    for name in seeds:
        seed = fidelity.SEEDS[name]
        for label, shape in fidelity.upstream_cases(df, seed).items():
            up = df[(df["source"] == seed.source) & (df["stage"] == seed.stage) & (df["shape"] == shape)]
            values = {}
            for i, r in enumerate(up.drop_duplicates("metric").itertuples()):
                try:
                    values[r.metric] = float(r.value) * (1.0 + 0.04 * ((i % 7) - 3))
                except (TypeError, ValueError):
                    continue
            for variant in (seed.first, _last(name)):
                ours[(variant, fidelity.our_shape(seed, shape))] = values
    return fidelity.fidelity_table(seeds, fingerprints=df, ours=ours,
                                   rungs={n: (fidelity.SEEDS[n].first, _last(n)) for n in seeds})


def _last(seed: str) -> str:
    return {"gemm": "gemm-v9", "moe1": "moe1-v2", "moe2": "moe2-v4"}[seed]


#: The steps of the small set (:func:`build` with ``every_step=False``): per study its baselines and one
#: step of each family (gemm1's has no hot loop): every drawer of the registry, a third of the figures.
SMALL = ("00_baseline", "01_agpr_acc", "10_gemm1_baseline", "12_gemm1_exp2", "20_gemm2_baseline",
         "24_gemm2_epilogue_strength_reduction")



def _attribution(run: Path) -> None:
    """Synthetic attribution tables of the summary run (``attribution-<study>/``): a log-additive game per
    family with one interaction, exact for the MoE families and sampled (2 pairs) for the GEMM, through the
    study's own plan / attribute / write (no compile, no model)."""
    import math

    from mxfp4_ablation import family as family_mod
    from mxfp4_ablation.studies import attribution as A

    for study in ("gemm", "moe"):
        results = []
        for p in A.study_plans(study, method="exact" if study == "moe" else "sampled", pairs=2):
            fam = family_mod.get(p.family)
            factor = {s: 1.0 + 0.02 * (i + 1) * (-1) ** i for i, s in enumerate(fam.switches)}
            first = list(fam.switches)[:2]

            def tflops(s, factor=factor, first=first):
                t = 1000.0 * math.prod(factor[x] for x in s)
                return t * (1.1 if set(first) <= set(s) else 1.0)

            rows = pd.DataFrame([{"variant": fam.subset_name(s), "family": p.family, "mask": fam.mask(s),
                                  "shape": "x".join(map(str, p.shape)), "what": "model", "ok": True, "error": "",
                                  "label": "modelled", "tflops": tflops(s), "model_version": "fixture",
                                  "clock_ghz": 1.0} for s in p.sets])
            results.append(A.attribute(p, rows, resamples=50))
        A.write(results, run / f"attribution-{study}")

def build(exp: Path, every_step: bool = True) -> Path:
    """Write the synthetic data set under ``exp`` (an experiments folder); returns it. ``every_step``:
    a run for every step notebook, else only those of :data:`SMALL`."""
    exp = Path(exp)
    exp.mkdir(parents=True, exist_ok=True)
    shutil.copytree(paths.REPO_ROOT / "experiments" / "harness-validation", exp / "harness-validation")
    shutil.copytree(paths.REPO_ROOT / "experiments" / "reference", exp / "reference")
    # the walkthrough
    run = _run(exp, "00_walkthrough")
    ops = [("probe y=2x", "v_add_f32", "VALU", 6), ("probe y=2x", "buffer_load_dword", "VMEM", 2),
           ("probe y=2x", "s_waitcnt", "wait/barrier", 3), ("probe y=2x", "s_endpgm", "SALU/branch", 1),
           ("mfma tile 16x16x256", "v_mfma_scale_f32_16x16x128_f8f6f4", "MFMA", 2),
           ("mfma tile 16x16x256", "global_load_dwordx4", "VMEM", 8), ("mfma tile 16x16x256", "ds_read_b128", "LDS", 4),
           ("mfma tile 16x16x256", "s_load_dwordx4", "SMEM", 3), ("mfma tile 16x16x256", "v_mov_b32", "VALU", 20)]
    _write(pd.DataFrame(ops, columns=["kernel", "opcode", "class", "count"]), run / "opcodes.parquet")
    lad = ladders()
    # the step runs
    for study, steps in lad.items():
        prev = {}
        for slug, variant, switch, family in steps:
            base = prev.get(family)
            prev[family] = variant
            if not every_step and slug not in SMALL:
                continue
            run = _run(exp, f"{study}--{slug}")
            names = [n for n in (base, variant) if n]
            shape_of = {None: GEMM_SHAPES[0]} if study == "gemm" else MOE_SHAPES
            roles = {variant: "variant", **({base: "baseline"} if base else {})}
            met = _metrics(names, GEMM_METRICS if study == "gemm" else MOE_METRICS, shape_of, family, roles)
            _write(met, run / "metrics.parquet")
            _write(_published(study), run / "published.parquet")
            if base:
                diff = _isa_diff(met, base, variant)
                _write(diff, run / "isa_diff.parquet")
                _write(_expectations(diff, base, variant, switch), run / "expectations.parquet")
            shapes = GEMM_SHAPES if study == "gemm" else list(MOE_SHAPES.values())
            _step_modelled(run, base, variant, shapes, loop=family != "moe1")
    # the summary
    run = _run(exp, "summary")
    _attribution(run)
    for study, prefix in (("gemm", ""), ("moe", "moe_")):
        steps = lad[study]
        shape_of = {None: GEMM_SHAPES[0]} if study == "gemm" else MOE_SHAPES
        metrics, exps = [], []
        for family in dict.fromkeys(f for *_, f in steps):
            names = [v for _, v, _, f in steps if f == family]
            met = _metrics(names, GEMM_METRICS if study == "gemm" else MOE_METRICS, shape_of, family, {})
            metrics.append(met)
            full = names[-1]
            for _, v, switch, f in steps:
                if f != family or switch is None:
                    continue
                loo = f"{full}-no-{switch}"
                lm = _metrics([full, loo], GEMM_METRICS if study == "gemm" else MOE_METRICS, shape_of, family, {})
                lm.loc[lm["variant"] == loo, "value"] += 3.0
                e = _expectations(_isa_diff(lm, loo, full), loo, full, switch, "leave-one-out")
                if study == "moe":
                    e["gemm"] = "gemm1" if family == "moe1" else "gemm2"
                exps.append(e)
        ladder = pd.concat(metrics, ignore_index=True).drop(columns=["role"])
        _write(ladder, run / f"{prefix}ladder.parquet")
        _write(pd.concat(exps, ignore_index=True), run / f"{prefix}expectations.parquet")
        _write(_published(study), run / f"{prefix}published.parquet")
        _write(_fidelity(["gemm"] if study == "gemm" else ["moe1", "moe2"]), run / f"{prefix}fidelity.parquet")
        # the summary's modelled tables
        out = run / f"modelled-{study}"
        out.mkdir()
        if study == "gemm":
            ladder_names = [v for _, v, _, _ in steps]
            loo_names = {s: f"{ladder_names[-1]}-no-{s}" for _, _, s, _ in steps[1:]}
            sw = _sweep(ladder_names + list(loo_names.values()), GEMM_SHAPES)
            switches = {v: s for _, v, s, _ in steps}
            pairs = [(None, ladder_names[0])] + list(zip(ladder_names[:-1], ladder_names[1:]))
            d = A.step_deltas(sw, pairs, switches)
            d.insert(1, "gemm", "gemm")
            _write(d, out / "modelled_delta.parquet")
            wf = pd.concat([A.waterfall(sw, ladder_names, s, switches) for s in GEMM_SHAPES], ignore_index=True)
            wf["model_version"], wf["clock_ghz"] = "0.1.0", 1.395
            _write(wf, out / "modelled_waterfall.parquet")
            pub = _published("gemm")
            pub["shape"] = [R.shape_text((r.M, r.N, r.K)) for r in pub.itertuples()]
            _write(pub, out / "modelled_published.parquet")
            loo = A.leave_one_out(sw, ladder_names[-1], loo_names, GEMM_SHAPES[0])
            loo.insert(0, "gemm", "gemm")
            _write(loo, out / "modelled_leave_one_out.parquet")
        else:
            parts, loos, firsts, lasts = [], [], {}, {}
            for family, gemm in (("moe1", "gemm1"), ("moe2", "gemm2")):
                names = [v for _, v, _, f in steps if f == family]
                loo_names = {s: f"{names[-1]}-no-{s}" for _, v, s, f in steps if f == family and s}
                shapes = [f"{m}x385x7168x512x9x{16 if m < 1024 else 128}" for m in (16, 128, 1024, 4096)]
                sw = _sweep(names + list(loo_names.values()), shapes)
                d = A.step_deltas(sw, [(None, names[0])] + list(zip(names[:-1], names[1:])),
                                  {v: s for _, v, s, f in steps if f == family})
                d.insert(1, "gemm", gemm)
                parts.append(d)
                t = A.leave_one_out(sw, names[-1], loo_names, shapes[-1])
                t.insert(0, "gemm", gemm)
                loos.append(t)
                firsts[gemm], lasts[gemm] = names[0], names[-1]
                parts_sw = sw if family == "moe1" else pd.concat([parts_sw, sw], ignore_index=True)  # noqa: F821
            _write(pd.concat(parts, ignore_index=True), out / "modelled_delta.parquet")
            _write(pd.concat(loos, ignore_index=True), out / "modelled_leave_one_out.parquet")
            _write(A.moe_ratios(parts_sw, firsts, lasts, _published("moe")), out / "modelled_moe_ratios.parquet")
    return exp
