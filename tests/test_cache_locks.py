"""Two processes that miss the same cache key at once compute it once, and a killed one blocks nobody
(issue #24: ``make reproduce`` runs two notebooks at once, and neighbouring steps share variants).

Each stand-in computation appends a line to a counter file and sleeps, so the two processes (started
together behind a barrier) overlap: without the per-key lock both would compute (two lines)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fakes import fake_kernel
from mxfp4_ablation import diskcache, modelled, runner, toolchain

_FORK = multiprocessing.get_context("fork")  # the children keep the test's stand-ins
SLOW = 0.5  # seconds a stand-in computation takes: the other process has long missed by then


def _count(counter: Path) -> None:
    with open(counter, "a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(SLOW)


def _in_two_processes(call, tmp_path: Path) -> list:
    """``call()`` in two forked processes started together; their results (JSON-able), in order."""
    barrier = _FORK.Barrier(2)
    out = tmp_path / "out"
    out.mkdir()

    def child(n):
        barrier.wait()
        (out / f"{n}.json").write_text(json.dumps(call()))

    procs = [_FORK.Process(target=child, args=(n,)) for n in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    return [json.loads((out / f"{n}.json").read_text()) for n in range(2)]


# --------------------------------------------------------------------------------- the helper itself

def _entry_calls(entry: Path, counter: Path):
    def load():
        try:
            return json.loads(entry.read_text())
        except (OSError, ValueError):
            return None

    def compute():
        _count(counter)
        value = {"pid": os.getpid()}
        diskcache.atomic_write_text(entry, json.dumps(value))
        return value

    return load, compute


def test_two_processes_missing_one_key_compute_it_once(tmp_path):
    entry, counter = tmp_path / "cache" / "k.json", tmp_path / "counter"
    load, compute = _entry_calls(entry, counter)
    got = _in_two_processes(lambda: diskcache.load_or_compute_one(entry, load, compute), tmp_path)
    assert len(counter.read_text().splitlines()) == 1
    (computer,) = counter.read_text().split()
    assert sorted(cached for _, cached in got) == [False, True]  # one computed, the other waited and read it
    assert [value for value, _ in got] == [{"pid": int(computer)}] * 2
    assert not diskcache.lock_path(entry).exists()  # the holder removes its lock file


def test_two_threads_missing_one_key_compute_it_once(tmp_path):
    """A Dask worker's threads, or a notebook's: each open of the lock file is its own flock."""
    import threading

    entry, counter = tmp_path / "cache" / "k.json", tmp_path / "counter"
    load, compute = _entry_calls(entry, counter)
    barrier, got = threading.Barrier(2), []

    def call():
        barrier.wait()
        got.append(diskcache.load_or_compute_one(entry, load, compute))

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(counter.read_text().splitlines()) == 1
    assert sorted(cached for _, cached in got) == [False, True] and got[0][0] == got[1][0]


def test_a_batch_computes_only_what_nobody_else_is_computing(tmp_path):
    """Two overlapping batches (a compile worker each): every key is computed once, by one of them."""
    entries = [tmp_path / "cache" / f"{n}.json" for n in range(4)]
    counter = tmp_path / "counter"

    def load(i):
        try:
            return json.loads(entries[i].read_text())
        except (OSError, ValueError):
            return None

    def compute(todo):
        values = []
        for i in todo:
            with open(counter, "a") as f:
                f.write(f"{i}\n")
            values.append(i * 10)
        time.sleep(SLOW)
        for i, value in zip(todo, values):
            diskcache.atomic_write_text(entries[i], json.dumps(value))
        return values

    got = _in_two_processes(lambda: diskcache.load_or_compute(entries, load, compute), tmp_path)
    assert sorted(counter.read_text().split()) == ["0", "1", "2", "3"]
    assert [[value for value, _ in g] for g in got] == [[0, 10, 20, 30]] * 2


def test_a_killed_holder_blocks_nobody(tmp_path):
    entry, counter = tmp_path / "cache" / "k.json", tmp_path / "counter"
    started = tmp_path / "started"

    def hang():
        started.touch()
        time.sleep(600)

    holder = _FORK.Process(target=lambda: diskcache.load_or_compute_one(entry, lambda: None, hang))
    holder.start()
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), "the holder never took the lock"
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(10)
    assert diskcache.lock_path(entry).exists()  # left behind by the killed holder ...
    load, compute = _entry_calls(entry, counter)
    waiter = _FORK.Process(target=lambda: diskcache.load_or_compute_one(entry, load, compute))
    start = time.monotonic()
    waiter.start()
    waiter.join(30)
    assert waiter.exitcode == 0 and time.monotonic() - start < 20  # ... but its lock went with it
    assert len(counter.read_text().splitlines()) == 1 and load() is not None


def test_a_waiter_computes_when_the_holder_stored_nothing(tmp_path):
    """The holder failed (raised): the process that waited for it finds no entry and computes it."""
    entry, counter = tmp_path / "cache" / "k.json", tmp_path / "counter"
    load, compute = _entry_calls(entry, counter)

    def fail():
        time.sleep(SLOW)
        raise RuntimeError("compile failed")

    barrier = _FORK.Barrier(2)

    def failing():
        barrier.wait()
        with pytest.raises(RuntimeError):
            diskcache.load_or_compute_one(entry, load, fail)

    def waiting():
        barrier.wait()
        time.sleep(SLOW / 5)  # the failing one takes the lock first
        assert diskcache.load_or_compute_one(entry, load, compute)[1] is False

    procs = [_FORK.Process(target=failing), _FORK.Process(target=waiting)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(counter.read_text().splitlines()) == 1 and load() is not None


# ------------------------------------------------------------------------------ the three caches

@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_compile_cache_compiles_a_shared_miss_once(cache, tmp_path, monkeypatch):
    counter = tmp_path / "counter"

    def worker(jobs, arch, **_):
        _count(counter)
        return [toolchain.Artifact(target=t, params=p, arch=arch, key=key, isa="s_endpgm", kernels={"k": "s_endpgm"},
                                   resources={}, compile_seconds=0.0, flydsl_version="0.5.0")
                for (t, p), key in jobs]

    monkeypatch.setattr(toolchain, "_run_worker", worker)
    got = _in_two_processes(lambda: toolchain.compile("mxfp4_ablation.kernels.gemm:build", {"M": 1}).cached,
                            tmp_path)
    assert len(counter.read_text().splitlines()) == 1 and sorted(got) == [False, True]


def test_the_timing_cache_simulates_a_shared_miss_once(cache, tmp_path, monkeypatch):
    import gfx950emu
    from gfx950emu.timing import power

    counter = tmp_path / "counter"

    def launch(prog, grid, block, args, **kw):
        _count(counter)
        timing = {"cycles": os.getpid(), "kernel": fake_kernel(), "model_version": "x",
                  "clock_ghz": 2.4, "by_instruction": {}}
        return SimpleNamespace(timing=timing, seconds=0.0)

    monkeypatch.setattr(gfx950emu, "load", lambda isa, kernel=None: SimpleNamespace(name="k"))
    monkeypatch.setattr(gfx950emu, "launch", launch)
    monkeypatch.setattr(power, "enabled", lambda p: False)
    got = _in_two_processes(lambda: {k: v for k, v in modelled.model_isa(
        "s_endpgm", (1, 1, 1), (64, 1, 1), lambda: [], flops=1.0).items() if k in ("cycles", "cached")}, tmp_path)
    assert len(counter.read_text().splitlines()) == 1
    assert sorted(g["cached"] for g in got) == [False, True] and got[0]["cycles"] == got[1]["cycles"]


def test_the_timeline_cache_simulates_a_shared_miss_once(cache, tmp_path, monkeypatch):
    from mxfp4_ablation.studies import modelled_runs

    counter = tmp_path / "counter"

    def rows(variant, shape, prep, sample, iterations):
        _count(counter)
        time.sleep(SLOW / 5)
        return [{"track": "wave0", "start": 0, "end": os.getpid()}]

    monkeypatch.setattr(modelled, "_prepare", lambda v, s, seed: {"isa_key": "k", "isa": "isa"})
    monkeypatch.setattr(modelled_runs, "_model_isa", lambda prep, sample, on_fresh=None: {})  # a cached point
    monkeypatch.setattr(modelled_runs, "_timeline_rows", rows)
    got = _in_two_processes(lambda: modelled_runs.timeline("gemm-v1", (256, 256, 3072), sample=1)["end"].tolist(),
                            tmp_path)
    assert len(counter.read_text().splitlines()) == 1 and got[0] == got[1]


def _fake_emulator(monkeypatch, counter: Path):
    """gfx950emu.launch writing 7s into the first argument (the kernel's output), counting its runs."""
    import gfx950emu

    def launch(program, grid, block, args, **kw):
        _count(counter)
        args[0][:] = 7
        return SimpleNamespace(hazards=[], stats=SimpleNamespace(out_of_range={}))

    monkeypatch.setattr(gfx950emu, "launch", launch)


def _emulate_once() -> list:
    out = np.zeros(16, np.uint8)
    summary, cached = runner._emulate(None, "s_endpgm", (1, 1, 1), (64, 1, 1), [out, 16], {})
    return [cached, out.tolist(), summary["hazards"]]


def test_the_emulation_cache_runs_a_shared_miss_once(cache, tmp_path, monkeypatch):
    counter = tmp_path / "counter"
    _fake_emulator(monkeypatch, counter)
    got = _in_two_processes(_emulate_once, tmp_path)
    assert len(counter.read_text().splitlines()) == 1
    assert sorted(g[0] for g in got) == [False, True] and all(g[1:] == [[7] * 16, 0] for g in got)


@pytest.mark.parametrize("damage", ["outputs.npz", "summary.json"])
def test_a_partial_emulation_entry_is_rerun_and_rewritten(cache, tmp_path, monkeypatch, damage):
    counter = tmp_path / "counter"
    _fake_emulator(monkeypatch, counter)
    assert _emulate_once() == [False, [7] * 16, 0]
    (folder,) = (cache / "emulate").glob("*/*")
    (folder / damage).write_bytes((folder / damage).read_bytes()[:10])  # a torn write
    assert _emulate_once() == [False, [7] * 16, 0]
    assert _emulate_once() == [True, [7] * 16, 0]  # rewritten whole: a hit again
    assert len(counter.read_text().splitlines()) == 2
