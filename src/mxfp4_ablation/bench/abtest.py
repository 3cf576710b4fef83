"""Interleaved A/B timing across several fresh processes, and sweeps over several GPUs.

Design (why each piece is there):

* A and B alternate trial by trial inside every process (ABBA: AB, BA, AB, ...; or a
  seeded random order per block), so clock, thermal and neighbour drift lands on
  both arms; each block yields one paired ratio time_B / time_A.
* Several fresh processes (``spawn``) repeat the whole run, so one process's luck
  (allocation addresses, a library's heuristic pick, a bad clock state) cannot decide
  the result; the per-process medians are reported to show they agree.
* Each arm rotates through input sets larger than the last-level cache together.
* The parent holds a per-GPU lock file for the duration, so two measurements never
  share a GPU; a sweep runs one job per GPU at a time, all GPUs in parallel.
* Nothing is written until the run is complete; ``write_result`` then writes the
  trial table and the summary atomically with provenance.
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import pickle
import queue
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from . import device_info
from .inputs import DEFAULT_FACTOR
from .stats import summarize
from .timing import METHODS, CaseTimer, DeviceContext, launches_for, make_backend

#: A launcher factory: given the device context, build a ready-to-launch Case.
Factory = Callable[[DeviceContext], "object"]

ORDERS = ("abba", "random")


class BenchError(RuntimeError):
    """A measurement could not be run as asked; the message is meant for the user."""


@dataclass(frozen=True)
class Comparison:
    """Arm A (baseline) against arm B (candidate). ``pairs``/``methods`` override settings."""

    name: str
    a: Factory
    b: Factory
    pairs: int | None = None
    methods: tuple[str, ...] | None = None
    note: str = ""
    launches: int | None = None


@dataclass(frozen=True)
class HarnessSettings:
    """Every knob of a run; recorded in the provenance of its results."""

    pairs: int = 50                  # A/B blocks per process per method
    launches: int | None = None      # launches per trial; None: sized to target_trial_ms
    target_trial_ms: float = 20.0
    warmup: int = 3                  # untimed launches before each trial
    warmup_pairs: int = 3            # untimed A/B blocks before the timed ones
    methods: tuple[str, ...] = METHODS
    order: str = "abba"
    processes: int = 6               # >= 6 makes the per-process t-interval informative
    fresh_processes: bool = True     # False: run the "processes" in this one (tests, sim)
    seed: int = 0
    confidence: float = 0.95
    n_resamples: int = 9999
    noise_floor: float = 0.0         # dead band around 1 for the verdict (fraction)
    cluster_min: int = 3             # processes needed for the process-clustered CI
    rotation_factor: float = DEFAULT_FACTOR
    cache_bytes: int | None = None   # override the device's last-level cache size
    backend: str = "torch"           # "torch" (CUDA/HIP), "sim" (CPU tests) or "emulated" (gfx950emu HIP)
    progress: bool = True
    lock_timeout_s: float = 3600.0

    def validate(self) -> "HarnessSettings":
        problems = []
        if self.pairs < 3:
            problems.append(f"pairs must be >= 3 (got {self.pairs})")
        if self.launches is not None and self.launches < 1:
            problems.append(f"launches must be >= 1 (got {self.launches})")
        if self.target_trial_ms <= 0:
            problems.append(f"target_trial_ms must be > 0 (got {self.target_trial_ms})")
        if self.warmup < 0 or self.warmup_pairs < 0:
            problems.append("warmup counts must be >= 0")
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            problems.append(f"methods must be a non-empty subset of {METHODS} (got {self.methods})")
        if self.order not in ORDERS:
            problems.append(f"order must be one of {ORDERS} (got {self.order!r})")
        if self.processes < 1:
            problems.append(f"processes must be >= 1 (got {self.processes})")
        if not 0 < self.confidence < 1:
            problems.append(f"confidence must be in (0, 1) (got {self.confidence})")
        if self.noise_floor < 0:
            problems.append(f"noise_floor must be >= 0 (got {self.noise_floor})")
        if self.rotation_factor <= 0:
            problems.append(f"rotation_factor must be > 0 (got {self.rotation_factor})")
        if self.cache_bytes is not None and self.cache_bytes < 0:
            problems.append(f"cache_bytes must be >= 0 (got {self.cache_bytes})")
        if self.backend not in ("torch", "sim", "emulated"):
            problems.append(f"backend must be torch, sim or emulated (got {self.backend!r})")
        if problems:
            raise BenchError("; ".join(problems))
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class RunResult:
    """Trial table (one row per trial), summary (one row per comparison x method), provenance."""

    trials: pd.DataFrame
    summary: pd.DataFrame
    provenance: dict
    devices: list = field(default_factory=list)


def block_order(block: int, order: str, rng: np.random.Generator) -> tuple[str, str]:
    """Arm order inside block ``block``: ABBA alternates AB / BA; random flips a coin."""
    if order == "abba":
        return ("A", "B") if block % 2 == 0 else ("B", "A")
    if order == "random":
        return ("A", "B") if rng.random() < 0.5 else ("B", "A")
    raise BenchError(f"unknown order {order!r}")


def _sim_facts(index: int) -> dict:
    return {"index": index, "name": "simulated GPU", "arch": "sim", "runtime": "sim",
            "l2_cache_bytes": 64 * 2**20, "llc_bytes": 64 * 2**20}


def _progress(iterable, enabled: bool, desc: str):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, leave=False, mininterval=1.0)


def measure(comparisons: Sequence[Comparison], settings: HarnessSettings, device_index: int = 0,
            process: int = 0) -> dict:
    """Run every comparison once in *this* process; returns rows and device facts.

    This is what each fresh process executes.  Cases are built, timed and released
    one comparison at a time, so only two arms' buffers are alive at once.
    """
    seed = settings.seed * 1_000_003 + process
    backend = make_backend(settings.backend, device_index, seed=seed)
    if settings.backend == "torch":
        facts = device_info.probe(device_index)
    elif settings.backend == "emulated":
        facts = backend.facts()
    else:
        facts = _sim_facts(device_index)
    cache = device_info.llc_bytes_for(facts["arch"], facts.get("l2_cache_bytes", 0),
                                      settings.cache_bytes)
    facts["cache_bytes_used"] = cache
    # the emulated device's clock counts launches (no rates) or is modelled; torch/sim time for real
    time_source = facts.get("clock", "events" if settings.backend == "torch" else "simulated")
    rates = time_source != "launch-count"
    ctx = DeviceContext(backend, device_index, cache, settings.rotation_factor, seed)
    t0 = time.perf_counter()
    rows: list[dict] = []
    log: list[str] = []
    for ci, comp in enumerate(comparisons):
        cases = {}
        try:
            # Alternate which arm allocates first, so an address/placement advantage of
            # the first allocation is not always A's (it becomes process-level noise,
            # which the clustered CI accounts for).
            first = ("A", "B") if process % 2 == 0 else ("B", "A")
            for arm in first:
                cases[arm] = (comp.a if arm == "A" else comp.b)(ctx)
            methods = comp.methods or settings.methods
            pairs = comp.pairs or settings.pairs
            launches = comp.launches or settings.launches or launches_for(
                cases["A"], backend, settings.target_trial_ms)
            for mi, method in enumerate(methods):
                timers = {arm: CaseTimer(case, backend, method, launches, settings.warmup)
                          for arm, case in cases.items()}
                for _ in range(settings.warmup_pairs):
                    timers["A"].trial()
                    timers["B"].trial()
                rng = np.random.default_rng([settings.seed, process, ci, mi])
                desc = f"p{process} {comp.name} {method}"
                for block in _progress(range(pairs), settings.progress, desc):
                    for pos, arm in enumerate(block_order(block, settings.order, rng)):
                        ms = timers[arm].trial()
                        case = cases[arm]
                        per_launch_s = ms / 1e3 / launches
                        rows.append(dict(
                            experiment=comp.name, method=method, process=process,
                            pid=os.getpid(), device_index=device_index, block=block,
                            position=pos, arm=arm, case=case.name, launches=launches,
                            warmup=settings.warmup, extra_launches=case.extra_launches,
                            elapsed_ms=ms,
                            time_per_launch_us=per_launch_s * 1e6,
                            flops=float(case.flops),
                            time_source=time_source,
                            tflops=case.flops / per_launch_s / 1e12 if case.flops and rates else np.nan,
                            bytes_moved=float(case.bytes_moved),
                            gbps=case.bytes_moved / per_launch_s / 1e9 if case.bytes_moved and rates
                            else np.nan,
                            n_sets=case.n_sets, set_bytes=case.rotation.set_bytes,
                            cache_bytes=cache, t_s=time.perf_counter() - t0,
                        ))
                for t in timers.values():
                    t.close()
                mine = [r for r in rows if r["experiment"] == comp.name and r["method"] == method]
                a = np.array([r["time_per_launch_us"] for r in mine if r["arm"] == "A"])
                b = np.array([r["time_per_launch_us"] for r in mine if r["arm"] == "B"])
                log.append(f"p{process} {comp.name:<22} {method:<6} launches={launches:<5} "
                           f"A={np.median(a):9.2f}us B={np.median(b):9.2f}us "
                           f"ratio~{np.median(b) / np.median(a):.4f}")
                if settings.progress is False:
                    print(log[-1], flush=True)
            metas = {arm: {"name": c.name, **c.meta, "n_sets": c.n_sets,
                           "set_bytes": c.rotation.set_bytes} for arm, c in cases.items()}
            log.append(json.dumps({"comparison": comp.name, "cases": metas}, default=str))
        finally:
            for case in cases.values():
                if case.release is not None:
                    case.release()
            cases.clear()
            backend.empty_cache()
    return {"rows": rows, "device": facts, "pid": os.getpid(), "process": process, "log": log}


def _in_fresh_process(comparisons, settings, device_index, process) -> dict:
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(measure, list(comparisons), settings, device_index, process).result()


def _check_picklable(comparisons):
    try:
        pickle.dumps(list(comparisons))
    except Exception as exc:
        raise BenchError(
            "launcher factories must be importable module-level functions (or functools.partial "
            f"of them) to run in fresh processes: {exc}") from None


def run_comparisons(comparisons: Sequence[Comparison], settings: HarnessSettings,
                    device_index: int = 0, mode: str = "device") -> RunResult:
    """Measure ``comparisons`` on GPU ``device_index`` in ``settings.processes`` processes.

    Returns the trial table, its summary and the provenance; writes nothing.
    """
    settings.validate()
    if not comparisons:
        raise BenchError("nothing to compare")
    names = [c.name for c in comparisons]
    if len(set(names)) != len(names):
        raise BenchError(f"comparison names must be unique: {names}")
    for comp in comparisons:
        bad = [m for m in (comp.methods or ()) if m not in METHODS]
        if bad:
            raise BenchError(f"{comp.name}: unknown methods {bad}")
    if settings.fresh_processes:
        _check_picklable(comparisons)
    if settings.backend == "torch" and not device_info.gpu_available():
        raise BenchError("no GPU visible to torch; timing needs a CUDA or ROCm device")
    started = time.time()
    with device_info.device_lock(device_index, settings.lock_timeout_s):
        before = device_info.snapshot(device_index) if settings.backend == "torch" else {}
        outs = []
        for p in range(settings.processes):
            try:
                if settings.fresh_processes:
                    outs.append(_in_fresh_process(comparisons, settings, device_index, p))
                else:
                    outs.append(measure(comparisons, settings, device_index, p))
            except (KeyboardInterrupt, BenchError):
                raise
            except Exception as exc:
                raise BenchError(f"process {p} on GPU {device_index} failed: "
                                 f"{type(exc).__name__}: {exc}".splitlines()[0]) from exc
        after = device_info.snapshot(device_index) if settings.backend == "torch" else {}
    trials = pd.DataFrame([r for o in outs for r in o["rows"]])
    summary = summarize(trials, settings.confidence, settings.n_resamples, settings.seed,
                        settings.noise_floor, cluster_min=settings.cluster_min)
    facts = outs[0]["device"]
    prov = bench_provenance(
        mode=mode if settings.backend == "torch" else {"emulated": "emulated"}.get(settings.backend, "simulated"),
        settings=settings, comparisons=comparisons, device=facts,
        telemetry_before=before, telemetry_after=after,
        processes=[{"process": o["process"], "pid": o["pid"], "log": o["log"]} for o in outs],
        wall_s=time.time() - started,
    )
    return RunResult(trials=trials, summary=summary, provenance=prov, devices=[facts])


def _describe_factory(f) -> str:
    import functools

    if isinstance(f, functools.partial):
        args = ", ".join([*map(repr, f.args), *(f"{k}={v!r}" for k, v in f.keywords.items())])
        return f"{_describe_factory(f.func)}({args})"
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"


def bench_provenance(mode, settings, comparisons, device, telemetry_before, telemetry_after,
                     processes, wall_s) -> dict:
    """The lead's provenance (git, packages, UTC) extended with the harness's device facts."""
    from .. import provenance

    collect_mode = mode if mode in ("device", "emulated", "static", "published") else "static"
    prov = provenance.collect(collect_mode, settings=settings.to_dict(),
                              arch=device.get("arch"))
    prov["mode"] = mode
    prov["device"] = device.get("name", prov.get("device"))
    prov["arch"] = device.get("arch", prov.get("arch"))
    serial = None
    for snap in (telemetry_before or {}).get("readings", []):
        serial = serial or snap.get("serial")
    prov["bench"] = {
        "harness": "mxfp4_ablation.bench",
        "backend": settings.backend,
        "device_facts": device,
        "device_serial": serial or "unavailable",
        "telemetry_before": telemetry_before,
        "telemetry_after": telemetry_after,
        "comparisons": [{"name": c.name, "a": _describe_factory(c.a), "b": _describe_factory(c.b),
                         "pairs": c.pairs, "methods": c.methods, "launches": c.launches,
                         "note": c.note}
                        for c in comparisons],
        "processes": processes,
        "fresh_processes": settings.fresh_processes,
        "wall_s": round(wall_s, 3),
    }
    return prov


def write_result(result: RunResult, out_dir: str | Path, name: str = "trials") -> list[Path]:
    """Write ``<name>.parquet`` (trials) and ``<name>-summary.parquet``, each with its
    ``.json`` provenance sidecar, atomically (a crash leaves old files or none)."""
    from ..results import write_table

    out = Path(out_dir)
    paths = [write_table(result.trials, out / f"{name}.parquet", result.provenance),
             write_table(result.summary, out / f"{name}-summary.parquet", result.provenance)]
    return paths


# --------------------------------------------------------------------------- several GPUs


@dataclass(frozen=True)
class Job:
    """One independent measurement in a sweep (e.g. one variant pair at one shape)."""

    name: str
    comparisons: tuple[Comparison, ...]


def run_sweep(jobs: Sequence[Job], settings: HarnessSettings, devices: Sequence[int],
              mode: str = "device") -> dict[str, RunResult]:
    """Run independent jobs one per GPU at a time, all GPUs concurrently.

    Each GPU has a worker thread that takes the next job from a shared queue and runs
    it (in fresh processes, under that GPU's lock).  Results are keyed by job name.
    The first failure stops the hand-out of new jobs and is re-raised.
    """
    if not devices:
        raise BenchError("no devices given for the sweep")
    if len(set(devices)) != len(devices):
        raise BenchError(f"devices listed twice: {list(devices)}")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise BenchError(f"job names must be unique: {names}")
    todo: queue.Queue = queue.Queue()
    for job in jobs:
        todo.put(job)
    results: dict[str, RunResult] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(dev: int):
        while not errors:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            try:
                res = run_comparisons(job.comparisons, settings, device_index=dev, mode=mode)
                res.provenance["bench"]["job"] = job.name
                with lock:
                    results[job.name] = res
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                with lock:
                    errors.append(exc)
                return

    threads = [threading.Thread(target=worker, args=(d,), daemon=True) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
