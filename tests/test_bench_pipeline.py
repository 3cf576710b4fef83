"""mxfp4_ablation.bench_pipeline: the pipeline profile's cell reader, exclusive phases and output files
(the profile itself is a benchmark: its numbers are measured by running it, not asserted here)."""
import time

from mxfp4_ablation import bench_pipeline as B


def test_cells_keep_code_and_mark_the_parameters_cell(tmp_path):
    nb = tmp_path / "nb.py"
    nb.write_text('# ---\n# jupyter: x\n# ---\n\n# %% [markdown]\n# # Title\n\n# %% tags=["parameters"]\nout_dir = None\n'
                  '\n# %%\nx = 1\n\n# %% [markdown]\n# text\n\n# %%\ny = x + 1\n')
    cells = B._cells(nb)
    assert [p for p, _ in cells] == [True, False, False]
    ns = {}
    for _, code in cells:
        exec(code, ns)
    assert ns["y"] == 2


def test_phases_are_exclusive():
    ph = B._Phases()
    inner = ph.wrap("compile", lambda: time.sleep(0.05))

    def outer():
        time.sleep(0.05)
        inner()
    ph.wrap("model", outer)()
    assert 0.04 < ph.t["compile"] < 0.2 and 0.04 < ph.t["model"] < 0.2


def test_write_labels_every_number_measured(tmp_path):
    row = {"label": "x", "what": "notebooks/a.py", "cache": "cold", "wall_s": 1.0, "user_s": 0.5, "sys_s": 0.1,
           "max_rss_mb": 100.0, "rc": 0, **{f"{p}_s": 0.1 for p in B.PHASES}}
    meta = {"date": "d", "machine": B.machine_line(), "commit": "c", "command": "cmd", "load_before": "1",
            "load_after": "2"}
    B.write([row], tmp_path, "x", meta)
    text = (tmp_path / "x.md").read_text()
    assert "(measured)" in text and "notebooks/a.py" in text
    assert (tmp_path / "x.csv").read_text().splitlines()[0].startswith("label,what,cache,wall_s")


def test_bad_notebook_is_one_clear_error(capsys):
    assert B.main(["notebooks/nope.py"]) == 2
    assert "no notebook" in capsys.readouterr().err


def test_bench_reproduce_counts_and_writes(tmp_path):
    from mxfp4_ablation import bench_reproduce as B

    log = "[gemm--05_b_carry] done -> /x\n[gemm--06_k_unroll4] inputs changed in comments or layout only: not rerun (r)\n" \
          "[summary] done -> /y\n"
    assert B._counts(log) == (2, 1)
    rows = [{"step": "cold", "what": "w", "wall_s": 1.0, "user_s": 2.0, "sys_s": 0.5, "max_rss_mb": 10,
             "notebooks_run": 23, "notebooks_skipped": 0, "rc": 0}]
    meta = {"date": "d", "machine": "m", "commit": "c", "command": "cmd", "load_before": "0", "load_after": "0"}
    B.write(rows, tmp_path, "x", meta)
    assert (tmp_path / "x.csv").read_text().splitlines()[1].startswith("cold,w,1.0,2.0,0.5,10,23,0,0")
    assert "| cold | w | 1.0 |" in (tmp_path / "x.md").read_text()
    assert B.main(["--keep", str(tmp_path)]) == 2  # an existing folder: one clear refusal, nothing run


def test_bench_reproduce_profiles_the_cold_run_by_notebook(tmp_path):
    """Each published run folder's executed notebook: start after make's, papermill's duration, the
    slowest code cell; a folder without a notebook (a partial run) is left out."""
    import json
    from datetime import datetime, timezone

    from mxfp4_ablation import bench_reproduce as B

    t0 = datetime(2026, 12, 2, 16, 0, 0, tzinfo=timezone.utc).timestamp()
    for name, start, cells in (("20261202T160100Z-abc1234-dirty-gemm--05_b_carry", "16:01:40", [1.5, 20.25]),
                               ("20261202T160000Z-abc1234-summary", "16:00:30", [3.0])):
        run = tmp_path / "experiments" / name
        run.mkdir(parents=True)
        nb = {"metadata": {"papermill": {"start_time": f"2026-12-02T{start}.000000+00:00", "duration": sum(cells)}},
              "cells": [{"cell_type": "code", "source": [f"\nstep_{i}()\n", "more"],
                         "metadata": {"papermill": {"duration": d}}} for i, d in enumerate(cells)]}
        (run / "x.ipynb").write_text(json.dumps(nb))
    (tmp_path / "experiments" / "20261202T160200Z-abc1234-other").mkdir()
    rows = B.cold_profile(tmp_path, t0)
    assert rows == [{"notebook": "summary", "start_s": 30.0, "papermill_s": 3.0, "slowest_cell_s": 3.0,
                     "slowest_cell": "step_0()"},
                    {"notebook": "gemm--05_b_carry", "start_s": 100.0, "papermill_s": 21.8, "slowest_cell_s": 20.2,
                     "slowest_cell": "step_1()"}]
    meta = {"date": "d", "machine": "m", "commit": "c", "command": "cmd", "load_before": "0", "load_after": "0"}
    B.write([], tmp_path, "x", meta, rows)
    assert (tmp_path / "x_by_notebook.csv").read_text().splitlines()[1] == "summary,30.0,3.0,3.0,step_0()"
    assert "| gemm--05_b_carry | 100.0 | 21.8 | 20.2 | step_1() |" in (tmp_path / "x.md").read_text()


def test_bench_reproduce_isa_edit_matches_one_line_of_its_step():
    """The ISA-changing edit finds its one line in the step file (else the benchmark refuses to start)."""
    from mxfp4_ablation import bench_reproduce as B, paths

    f = paths.REPO_ROOT / "src" / "mxfp4_ablation" / "kernels" / "gemm" / "steps" / f"{B.ISA_EDIT[0]}.py"
    assert f.read_text().count(B.ISA_EDIT[1]) == 1
    steps = B._edits(paths.REPO_ROOT, f.with_name("05_b_carry.py"), f)
    assert [s[0] for s in steps] == ["cold", "again", "comment", "code", "isa"]
    assert steps[-1][2] == B.ISA_EDIT[1:]
