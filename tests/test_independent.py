"""The independent check (FlyDSL PR #756's commit-message figures against the model): the declared steps,
the step arithmetic, the summary, and the committed table's agreement with the declared steps."""
import csv
import math

import pytest

from mxfp4_ablation import independent as IND
from mxfp4_ablation.errors import UsageError


def test_declared_steps_are_full_commits_with_figures_and_sources():
    steps = IND.read_steps()
    assert len(steps) >= 10
    assert all(len(s["before"]) == 40 and len(s["after"]) == 40 for s in steps)
    assert all(s["source"].startswith("FlyDSL commit message") for s in steps)
    assert all(not s["flag"] or s["flag_note"] for s in steps)      # every flag says why


def test_bad_steps_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "steps.csv"
    head = "step,shape,before,after,published_before_tflops,published_after_tflops,source,flag,flag_note\n"
    bad.write_text(head + "1,8192x8192x8192,abc,def,1,2,x,,\n")
    with pytest.raises(UsageError, match="40-hex"):
        IND.read_steps(bad)
    bad.write_text(head + f"1,8192x8192,{'a' * 40},{'b' * 40},1,2,x,,\n")
    with pytest.raises(UsageError, match="MxNxK"):
        IND.read_steps(bad)
    bad.write_text(head.replace("shape,", "") + "1,abc,def,1,2,x,,\n")
    with pytest.raises(UsageError, match="lacks column"):
        IND.read_steps(bad)
    with pytest.raises(UsageError, match="no declared steps"):
        IND.read_steps(tmp_path / "missing.csv")


S8, S16 = (8192, 8192, 8192), (16384, 16384, 16384)


def _steps():
    a, b, c = "a" * 40, "b" * 40, "c" * 40
    return [{"step": "1", "shape": S8, "before": a, "after": b, "published_before_tflops": 100.0,
             "published_after_tflops": 110.0, "flag": ""},
            {"step": "2", "shape": S8, "before": b, "after": c, "published_before_tflops": 110.0,
             "published_after_tflops": 110.0, "flag": ""},
            {"step": "3", "shape": S8, "before": a, "after": c, "published_before_tflops": 100.0,
             "published_after_tflops": 150.0, "flag": "c"},
            {"step": "4", "shape": S16, "before": a, "after": b, "published_before_tflops": 100.0,
             "published_after_tflops": 100.0, "flag": ""}]


def test_step_rows_set_modelled_beside_published_speed_ups():
    m = {("a" * 40, S8): 200.0, ("b" * 40, S8): 230.0, ("c" * 40, S8): 230.0, ("a" * 40, S16): 300.0,
         ("b" * 40, S16): 297.0}
    rows = IND.step_rows(_steps(), m, fingerprint="fp", version="v", command="cmd")
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and rows[3]["shape"] == "16384x16384x16384"
    assert rows[0]["published_speedup_pct"] == pytest.approx(10.0) and rows[0]["modelled_speedup_pct"] == pytest.approx(15.0)
    assert rows[0]["error_pp"] == pytest.approx(5.0) and rows[0]["label"] == "modelled"
    # a kernel without a modelled figure (it did not compile) drops its steps
    assert [r["step"] for r in IND.step_rows(_steps(), {("a" * 40, S8): 1.0, ("b" * 40, S8): 1.0}, fingerprint="",
                                              version="", command="")] == [1]
    s = IND.summary(rows, "8192x8192x8192")
    assert s["n"] == 2 and s["mean_pp"] == pytest.approx(2.5) and s["signed"] == 1 and s["same_sign"] == 1
    assert s["worst_step"] == 1 and s["sd_pp"] == pytest.approx(math.sqrt(12.5))
    assert IND.summary(rows)["n"] == 3 and IND.summary(rows, "16384x16384x16384")["mean_pp"] == pytest.approx(-1.0)


def test_committed_check_matches_the_declared_steps():
    steps = {int(s["step"]): s for s in IND.read_steps()}
    rows = IND.read_check()
    assert rows and {r["label"] for r in rows} == {"modelled"} and all(r["model_fingerprint"] for r in rows)
    for r in rows:
        s = steps[int(r["step"])]
        assert (r["before"], r["after"]) == (s["before"][:8], s["after"][:8]) and r["flag"] == s["flag"]
        assert r["shape"] == "x".join(map(str, s["shape"]))
        pub = 100 * (s["published_after_tflops"] / s["published_before_tflops"] - 1)
        assert float(r["published_speedup_pct"]) == pytest.approx(pub, abs=1e-3)
        mod = 100 * (float(r["modelled_after_tflops"]) / float(r["modelled_before_tflops"]) - 1)
        assert float(r["modelled_speedup_pct"]) == pytest.approx(mod, abs=0.01)
        assert float(r["error_pp"]) == pytest.approx(mod - pub, abs=0.01)
    with open(IND.paths.reference_dir() / IND.CHECK_CSV, newline="") as f:
        assert next(csv.reader(f)) == IND.CHECK_COLUMNS
