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


# ------------------------------------------------------------------ partial runs, checksums (#19)

import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

KILLED_RUN = """
import os, sys, time
from mxfp4_ablation import results
with results.run_dir("gemm--01_agpr_acc", root=sys.argv[1]) as rd:
    (rd / "speed.parquet").write_bytes(b"half a table")
    print(rd.path, flush=True)
    time.sleep(120)
"""


def _killed_partial(root):
    """A run SIGKILLed mid-way: its .partial folder is left behind (as after `kill -9`)."""
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(root)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    partial = proc.stdout.readline().strip()
    return proc, partial


def test_a_killed_runs_partial_folder_is_never_the_latest_run_and_is_cleaned(tmp_path):
    with results.run_dir("gemm--01_agpr_acc", root=tmp_path) as rd:
        pass
    published = rd.final
    proc, partial = _killed_partial(tmp_path)
    try:
        assert partial.endswith(".partial") and os.path.isdir(partial)
        # while its run is alive: not the latest run, and a new run leaves it alone
        assert results.latest_run("gemm--01_agpr_acc", tmp_path) == published
        with results.run_dir("other", root=tmp_path):
            pass
        assert os.path.isdir(partial), "a live run's partial folder was removed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert results.latest_run("gemm--01_agpr_acc", tmp_path) == published
        assert results.latest_run("", tmp_path).name.endswith("other")
        with results.run_dir("third", root=tmp_path):  # the next run cleans the killed one's folder
            pass
        assert not os.path.exists(partial)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_latest_tables_never_reads_a_partial(tmp_path, monkeypatch):
    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path))
    with results.run_dir("step") as rd:
        results.write_table(pd.DataFrame({"x": [1]}), rd / "t.parquet", {"mode": "static"})
    later = tmp_path / "29991231T235959Z-abcdef0-step.x1.partial"
    later.mkdir()
    results.write_table(pd.DataFrame({"x": [2]}), later / "t.parquet", {"mode": "static"})
    assert results.latest_run("step") == rd.final
    assert [t["x"].tolist() for t in results.latest_tables(["step"], "t.parquet")] == [[1]]


def test_every_table_records_its_checksum_and_a_flipped_byte_is_one_clear_error(tmp_path):
    path = results.write_table(pd.DataFrame({"tflops": [229.0, 0.94], "name": ["a", "b"]}), tmp_path / "s.parquet",
                               {"mode": "static"})
    prov = json.loads(path.with_suffix(".json").read_text())
    assert len(prov[results.CHECKSUM_KEY]) == 64
    results.read_table(path)
    data = bytearray(path.read_bytes())
    for i in range(0, len(data), max(1, len(data) // 50)):  # every flip anywhere in the file is caught
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        path.write_bytes(bytes(flipped))
        with pytest.raises(results.CorruptTable, match=r"s\.parquet is corrupt: sha256"):
            results.read_table(path)
    path.write_bytes(bytes(data))
    assert results.read_table(path)[0]["tflops"].tolist() == [229.0, 0.94]


def test_a_table_without_its_sidecar_checksum_is_refused(tmp_path):
    """In a run folder every table is checksummed: one without is refused (committed data folders,
    guarded by git, may predate the checksum)."""
    path = results.write_table(pd.DataFrame({"x": [1]}), tmp_path / "20260101T000000Z-abcdef0-x" / "t.parquet",
                               {"mode": "static"})
    sidecar = path.with_suffix(".json")
    prov = json.loads(sidecar.read_text())
    del prov[results.CHECKSUM_KEY]
    sidecar.write_text(json.dumps(prov))
    with pytest.raises(results.CorruptTable, match="records no checksum"):
        results.read_table(path)
    committed = tmp_path / "harness-validation" / "run1" / "t.parquet"
    committed.parent.mkdir(parents=True)
    committed.write_bytes(path.read_bytes())
    committed.with_suffix(".json").write_text(json.dumps(prov))
    assert results.read_table(committed)[0]["x"].tolist() == [1]
    sidecar.unlink()
    with pytest.raises(results.CorruptTable, match="sidecar t.json is missing"):
        results.read_table(path)


def test_owned_tempdirs_of_killed_processes_are_cleaned(tmp_path):
    code = ("import sys, time\nfrom mxfp4_ablation import tempdirs\n"
            "with tempdirs.owned_tempdir('nb-', sys.argv[1]) as d:\n    print(d, flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    left = proc.stdout.readline().strip()
    try:
        with results.owned_tempdir("nb-", tmp_path):
            assert os.path.isdir(left)  # alive: kept
        proc.kill()
        proc.wait()
        time.sleep(0.1)
        with results.owned_tempdir("nb-", tmp_path) as mine:
            assert not os.path.exists(left) and mine.is_dir()
        assert not list(tmp_path.iterdir())
    finally:
        if proc.poll() is None:
            proc.kill()


def test_git_dirty_counts_tracked_code_and_data_not_the_figures_the_pipeline_redraws(tmp_path, monkeypatch):
    import subprocess

    from mxfp4_ablation import paths, provenance

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "figures").mkdir()
    (tmp_path / "src" / "k.py").write_text("X = 1\n")
    (tmp_path / "figures" / "f.svg").write_text("<svg/>\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    assert provenance.git_state()["git_dirty"] is False
    (tmp_path / "figures" / "f.svg").write_text("<svg>being redrawn</svg>\n")
    assert provenance.git_state()["git_dirty"] is False
    (tmp_path / "src" / "k.py").write_text("X = 2\n")
    assert provenance.git_state()["git_dirty"] is True
