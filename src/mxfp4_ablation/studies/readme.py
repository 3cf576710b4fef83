"""The README's generated tables: one ladder table per study, between markers, from the summary run.

``python -m mxfp4_ablation.studies readme-table [--study gemm] [--update README.md]`` (``make readme``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .. import results
from . import SUMMARY_RUN, tables
from .tables import StudyError, fmt


def markers(name: str) -> tuple[str, str]:
    """The begin / end markers of study ``name``'s table in the README."""
    cmd = "python -m mxfp4_ablation.studies readme-table"
    return (f"<!-- {name}-ladder-table:begin (generated: {cmd}) -->", f"<!-- {name}-ladder-table:end -->")


#: The README's columns per study, where they differ from the study's ``key_metrics`` (which the ladder
#: figure keeps): ``(metric, label, families)`` -- ``families`` None for every row, else the families
#: whose rows the metric means what its label says (other rows show "–"). Loop counts say their unit,
#: as the "intended change" text beside them does (a trip is 2 K-steps up to ``b_carry``, 4 from
#: ``k_unroll4`` on).
README_COLUMNS = {
    "gemm": (
        ("vgpr_unified", "unified VGPRs", None),
        ("v_accvgpr_write", "v_accvgpr_write", None),
        ("v_accvgpr_mov", "v_accvgpr_mov", None),
        ("mfma_operand_reuse", "MFMA operand reuse (loop)", None),
        ("loop_k_steps", "K-steps per trip", None),
        ("loop_s_mov_b32_m0", "loop s_mov_b32 m0 (per trip)", None),
        ("loop_buffer_load_dword", "loop buffer_load_dword (per trip)", None),
        ("loop_s_waitcnt_per_4k", "loop s_waitcnt (per 4 K-steps)", None),
        ("buffer_store_16B", "16-byte stores", None),
        ("insts_before_first_buffer_load", "insts before 1st buffer_load", None),
    ),
    "moe": (
        ("kernarg_bytes", "kernarg bytes", None),
        ("s_load", "s_load_dword*", None),
        ("epi_valu", "gemm1 epilogue VALU", ("moe1",)),
        ("epi_v_ldexp_f32", "gemm1 epilogue v_ldexp_f32", ("moe1",)),
        ("sign_shifts", "s/v ashr (sign fix-ups)", None),
        ("s_waitcnt", "s_waitcnt (kernel)", None),
        ("loop_s_waitcnt", "K-loop s_waitcnt (per trip)", None),
        ("mad_64", "64-bit mad (mad_64)", None),
        ("instructions", "instructions", None),
    ),
}
#: Loop metrics that are not per trip (normalised, or a shape of the loop).
_NOT_PER_TRIP = ("loop_s_waitcnt_per_4k", "loop_k_steps", "loop_max_lds_run", "mfma_operand_reuse")


def metric_text(metric: str) -> str:
    """A metric's name as the README's change text writes it: loop counts say "per trip"."""
    return f"{metric} (per trip)" if metric.startswith("loop_") and metric not in _NOT_PER_TRIP else metric


def also_moved(wide: pd.DataFrame, before: str | None, name: str, columns, intended) -> list[str]:
    """README-column metrics a step moved by at least 16 and 25 % that it was not meant to move
    (per-trip counts are left out where the trip itself changed length): the table names them."""
    if before is None or before not in wide.index:
        return []
    trip_changed = "loop_k_steps" in wide.columns and wide.at[before, "loop_k_steps"] != wide.at[name, "loop_k_steps"]
    out = []
    for metric in columns:
        if metric in intended or metric not in wide.columns or metric == "loop_k_steps":
            continue
        if trip_changed and metric_text(metric) != metric:
            continue
        a, b = wide.at[before, metric], wide.at[name, metric]
        if tables.is_missing(a) or tables.is_missing(b):
            continue
        a, b = float(a), float(b)
        if abs(b - a) >= 16 and abs(b - a) >= 0.25 * max(abs(a), abs(b)):
            out.append(f"{metric_text(metric)} {fmt(a)} → {fmt(b)}")
    return out


def ladder_table(study, metrics: pd.DataFrame, expectations: pd.DataFrame,
                 correctness: pd.DataFrame | None = None, modelled: dict | None = None, modelled_note: str = "") -> str:
    """The README's ladder table (markdown) of one study, from its summary tables.

    One row per ladder step (and regime): the switch it adds, its intended metric(s) predecessor -> step
    with a check mark when it moved the intended way, a few key static metrics, and its correctness.
    """
    exp = expectations[expectations["comparison"] == "ladder"] if len(expectations) else expectations
    status = dict(zip(correctness["variant"], correctness["status"])) if correctness is not None and len(correctness) else {}
    keys = set(metrics["metric"])
    columns = README_COLUMNS.get(study.name) or tuple((k, label, None) for k, label in study.spec.key_metrics)
    show = [(k, label) for k, label, _ in columns if k in keys]
    applies = {k: fams for k, _, fams in columns}
    regimes = tables.regimes_of(metrics)
    lead = ["step"] + (["regime"] if regimes != [None] else [])
    extra = ["TFLOPS (modelled)", "Δ (modelled)"] if modelled else []  # modelled_section.readme_columns
    head = lead + ["switch", "intended ISA change (predecessor → step)"] + [label for _, label in show] + extra + ["correct"]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join(["---"] * (len(lead) + 2) + ["---:"] * (len(show) + len(extra)) + ["---"]) + "|"]
    shapes = []
    for regime in regimes:
        sub_m = tables.per_regime(metrics, regime)
        wide = tables.metric_wide(sub_m)
        shapes.append(((f"{regime}: " if regime else "") + str(sub_m["shape"].iloc[0])) if len(sub_m) else "?")
        sub_e = tables.per_regime(exp, regime) if len(exp) else exp
        for name in [n for n in wide.index if study.variant(n).kind == "ladder"]:
            rows = sub_e[sub_e["variant"] == name] if len(sub_e) else sub_e
            change = "; ".join(f"{metric_text(r.metric)} {fmt(r.before)} → {fmt(r.after)}"
                               f"{' (same)' if r.direction == 'same' else ''}"
                               f" {'✓' if r.as_intended else '✗'}" for r in rows.itertuples()) or "baseline"
            variant = study.variant(name)
            others = also_moved(wide, variant.predecessor, name, [k for k, _ in show],
                                set(rows["metric"]) if len(rows) else set())
            if others:
                change += "; also: " + "; ".join(others)
            family = getattr(variant, "family", None)
            cells = [name] + ([regime] if regime else []) + [study.step_switch(name) or "–", change]
            cells += [fmt(wide.at[name, k]) if k in wide.columns and (applies.get(k) is None or family in applies[k])
                      else "–" for k, _ in show]
            cells += list(modelled.get((name, regime), ("–", "–"))) if modelled else []
            cells.append(status.get(name, "not run"))
            lines.append("| " + " | ".join(cells) + " |")
    where = "; ".join(shapes)
    label = "M,N,K = " if regimes == [None] else ""
    lines += ["", f"Static counts from the offline gfx950 compile at {label}{where} (not measured speed); "
              "generated by `python -m mxfp4_ablation.studies readme-table`."]
    if modelled and modelled_note:
        lines += ["", modelled_note]
    return "\n".join(lines)


def replace_between_markers(text: str, table: str, begin: str, end: str) -> str:
    """``text`` with the part between ``begin`` and ``end`` replaced by ``table``."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < 0 or stop < start:
        raise StudyError(f"the file has no '{begin}' ... '{end}' markers (in that order)")
    return text[: start + len(begin)] + "\n" + table.strip("\n") + "\n" + text[stop:]


def table_from_run(study, run: str | Path | None = None) -> str:
    """The study's README table from a summary run (default: the latest one)."""
    run = Path(run) if run is not None else results.latest_run(SUMMARY_RUN)
    if run is None or not (Path(run) / study.summary_table("ladder")).is_file():
        raise StudyError("no summary run with a ladder table yet; run `make reproduce` "
                         "(or `python -m mxfp4_ablation.notebooks run notebooks/summary.py`) first")
    read = lambda key: results.read_table(Path(run) / study.summary_table(key))[0]  # noqa: E731
    corr = Path(run) / study.summary_table("correctness")
    from . import modelled_section

    return ladder_table(study, read("ladder"), read("expectations"), read("correctness") if corr.is_file() else None,
                        modelled_section.readme_columns(study.name, run), modelled_section.readme_note(study.name, run))


def fidelity_markers(name: str) -> tuple[str, str]:
    """The begin / end markers of study ``name``'s generated fidelity block in the README."""
    cmd = "python -m mxfp4_ablation.studies readme-table"
    return (f"<!-- {name}-fidelity:begin (generated: {cmd}) -->", f"<!-- {name}-fidelity:end -->")


def fidelity_from_run(study, run: str | Path | None) -> str | None:
    """The fidelity block from the summary run's fidelity table, or None when that run has none."""
    path = Path(run) / study.summary_table("fidelity") if run is not None else None
    if path is None or not path.is_file():
        return None
    from .. import fidelity

    return fidelity.markdown(results.read_table(path)[0])


def _latest():
    return results.latest_run(SUMMARY_RUN)


def update(path: str | Path, studies, run: str | Path | None = None) -> list[str]:
    """Replace each study's table between its markers in ``path`` (studies without markers are skipped
    when another one has them); returns the names updated.

    A generated block whose data the summary run lacks (its modelled tables, its fidelity table) is an
    error naming the block and the missing file, and nothing is written: a block is never left stale."""
    path = Path(path)
    if not path.is_file():
        raise StudyError(f"no file {path}")
    text, done = path.read_text(), []
    latest = Path(run) if run is not None else _latest()
    try:
        return _update(path, text, done, studies, run, latest)
    except results.CorruptTable as err:
        raise StudyError(f"{err}; {path.name} was not changed") from None


def _missing(path: Path, block: str, run, wanted: str) -> StudyError:
    where = f"the summary run {Path(run).name}" if run is not None else "no summary run"
    return StudyError(f"{path.name}'s {block} block: {where} has no {wanted}; rerun the summary (make reproduce); "
                      f"{path.name} was not changed")


def _update(path: Path, text: str, done: list, studies, run, latest) -> list[str]:
    for study in studies:
        begin, end = markers(study.name)
        if begin not in text and len(studies) > 1:
            continue
        text = replace_between_markers(text, table_from_run(study, run), begin, end)
        done.append(study.name)
        from . import modelled_section  # the modelled findings, where the README has their markers

        fb, fe = modelled_section.findings_markers(study.name)
        if fb in text:
            found = modelled_section.readme_findings(study.name, latest)
            if not found:
                raise _missing(path, f"{study.name} modelled findings (and ladder table's modelled columns)", latest,
                               f"modelled-{study.name}/modelled_delta.parquet")
            text = replace_between_markers(text, found, fb, fe)
        gb, ge = fidelity_markers(study.name)
        if gb in text:
            fid = fidelity_from_run(study, latest)
            if not fid:
                raise _missing(path, f"{study.name} fidelity", latest, study.summary_table("fidelity"))
            text = replace_between_markers(text, fid, gb, ge)
        from . import attribution_views  # the Shapley attribution block (#23), where the README has its markers

        ab, ae = attribution_views.readme_markers(study.name)
        att = attribution_views.readme_block(study.name, run if run is not None else _latest())
        if ab in text and att:
            text = replace_between_markers(text, att, ab, ae)
    if not done:
        raise StudyError(f"{path} has no generated-table markers")
    results.atomic_write_text(path, text)
    return done
