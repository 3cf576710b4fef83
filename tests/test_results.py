"""Result files: atomic writes, provenance on every row, run folders that appear only when complete."""

import json
import os

import pandas as pd
import pytest

from mxfp4_ablation import provenance, results


def test_write_table_adds_provenance_columns_and_sidecar(tmp_path):
    prov = provenance.collect("static", settings={"iters": 3})
    df = pd.DataFrame({"variant": ["a", "b"], "tflops": [1.0, 2.0]})
    path = results.write_table(df, tmp_path / "t.parquet", prov)
    back, side = results.read_table(path)
    assert list(back["tflops"]) == [1.0, 2.0]
    for field in provenance.ROW_FIELDS:
        assert field in back.columns
    assert set(back["mode"]) == {"static"} and set(back["arch"]) == {"gfx950"}
    assert json.loads(back["settings"][0]) == {"iters": 3}
    assert side["settings"] == {"iters": 3} and side["versions"]["flydsl"] == side["flydsl_version"]
    assert side["utc"].endswith("Z") and "git_dirty" in side


def test_write_table_rejects_non_parquet(tmp_path):
    with pytest.raises(ValueError, match="parquet"):
        results.write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.csv", provenance.collect("static"))


def test_collect_rejects_unknown_mode():
    with pytest.raises(ValueError, match="not one of"):
        provenance.collect("guessed")


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "x.txt"
    results.atomic_write_text(target, "old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        results.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_run_dir_publishes_only_on_success(tmp_path):
    with results.run_dir("demo", root=tmp_path) as run:
        (run / "a.txt").write_text("1")
        assert run.path.name.endswith(".partial")
    assert run.final is not None and (run.final / "a.txt").read_text() == "1"
    assert run.final.name.endswith("-demo") and not run.final.name.endswith(".partial")
    assert results.latest_run("demo", root=tmp_path) == run.final

    with pytest.raises(RuntimeError):
        with results.run_dir("demo", root=tmp_path) as failed:
            (failed / "b.txt").write_text("half")
            raise RuntimeError("interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == [run.final.name]


def test_run_dirs_never_overwrite(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "new_run_id", lambda name="": "20260101T000000Z-abc-x")
    finals = []
    for i in range(3):
        with results.run_dir("x", root=tmp_path) as run:
            (run / "i.txt").write_text(str(i))
        finals.append(run.final)
    assert len(set(finals)) == 3
    assert [(f / "i.txt").read_text() for f in finals] == ["0", "1", "2"]
