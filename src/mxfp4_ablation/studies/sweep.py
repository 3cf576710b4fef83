"""The sweep engine: (variant, shape, what) tasks on a Dask cluster, one parquet row per task.

A :class:`Task` is one unit of work on one kernel variant at one shape -- ``what`` is ``compile``
(offline gfx950 compile + static ISA metrics), ``verify`` (the emulator's correctness gate),
``model`` (the gfx950emu timing model, :func:`mxfp4_ablation.studies.modelled_runs.model_row`, the same
cached run the notebooks use) or ``bench`` (paired A/B timing against the family's empty-set kernel on
a gfx950 GPU; refused anywhere else). :func:`run_task` runs one in the calling process and returns a
flat row (always: variant, family, switch mask, shape, what, label, ok, error, seconds, cpu_seconds,
host, pid, started -- the task's start as Unix time, so the rows show which worker ran what when -- and
the task's own columns). :func:`run` spreads many over a Dask scheduler:

* ``"local"`` (the default) starts a ``LocalCluster`` sized to the machine (one single-threaded
  worker process per usable core; ``"local:N"`` or ``workers=N`` for N);
* ``"tcp://host:8786"`` (any scheduler address) uses a running scheduler and its workers;
* ``"slurm"`` / ``"pbs"`` start a ``dask_jobqueue`` cluster (queue, cores, memory and walltime come
  from the usual dask-jobqueue configuration, ``~/.config/dask/jobqueue.yaml``) scaled to ``workers``;
* ``"inline"`` runs the tasks one by one in this process (no Dask; for debugging).

Workers on other machines give the same rows: compiles are keyed by kernel source, parameters,
FlyDSL version and arch, timing runs by the ISA's hash, the shape, the sample and the model's
fingerprint (:mod:`mxfp4_ablation.toolchain`, :mod:`mxfp4_ablation.modelled`), never by host or name;
each row carries the keys (``compile_key``, ``isa_key``, ``model_fingerprint``) so two clusters' rows
can be compared. Point ``MXFP4_CACHE`` at a shared folder to share the caches themselves.

Progress: a tqdm bar on stderr (tasks done / total, rate, ETA) as the futures complete.
:func:`write` stores the rows as ``<out>/sweep.parquet`` with the provenance sidecar
(:func:`mxfp4_ablation.results.write_table`). The Makefile's notebook-level parallelism is separate:
this is for sweeps that outgrow it (subsets x shapes x delivery modes x upstream commits).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from .. import toolchain
from ..errors import UsageError

WHATS = ("compile", "verify", "model", "bench")
COLUMNS = ["variant", "family", "mask", "switches", "shape", "what", "label", "ok", "error", "seconds",
           "cpu_seconds", "host", "pid", "started"]


class SweepError(UsageError):
    """Bad sweep input, or tasks that failed (one line naming them)."""


@dataclass(frozen=True)
class Task:
    """One unit of work. ``options``: extra keywords of the task kind, as sorted ``(key, value)`` pairs
    (``sample`` for model; ``delivery`` / ``wave_order`` / ``delivery_seed`` for verify; bench settings)."""

    variant: str
    shape: tuple[int, ...]
    what: str
    options: tuple = ()

    def __post_init__(self):
        if self.what not in WHATS:
            raise SweepError(f"task what must be one of {', '.join(WHATS)}; got {self.what!r}")
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        object.__setattr__(self, "options", tuple(sorted(dict(self.options).items())))

    @property
    def key(self) -> str:
        return f"{self.what}:{self.variant}@{'x'.join(map(str, self.shape))}" + (
            f"{dict(self.options)}" if self.options else "")


def tasks(variant_names: Iterable[str], shapes: Iterable[Sequence[int]], whats: Iterable[str],
          **options) -> list[Task]:
    """The product variants x shapes x whats (checked: names resolve, shapes fit, kinds exist)."""
    from .. import variants

    whats = list(whats)
    bad = [w for w in whats if w not in WHATS]
    if bad:
        raise SweepError(f"unknown task kind(s) {', '.join(bad)}; known: {', '.join(WHATS)}")
    out = []
    shapes = [tuple(int(n) for n in s) for s in shapes]
    for name in variant_names:
        v = variants.get(name)
        for s in shapes:
            v.shape(s)  # the count of shape numbers, checked before anything runs
            for w in whats:
                out.append(Task(v.name, s, w, tuple(options.items())))
    return list(dict.fromkeys(out))


# ============================================================================ one task


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _do_compile(v, shape, opts) -> dict:
    from .. import metrics, toolchain

    v.module.check_shape(**v.shape(shape))
    art = toolchain.compile(v.target, v.params(shape))
    m = metrics.kernel_metrics(art.isa)
    flat = {k: val for k, val in m.items() if isinstance(val, (int, float)) and not isinstance(val, bool)}
    return {"label": "static", "compile_key": art.key, "kernel": art.kernel_name,
            "compile_seconds": art.compile_seconds, "cached": bool(art.cached),
            "metrics": json.dumps(flat, sort_keys=True)}


def _do_verify(v, shape, opts) -> dict:
    from .. import runner

    r = runner.verify(v.name, shape, **opts)
    return {"label": "emulated", "passed": bool(r["passed"]), "hazards": int(r["hazards"]),
            "cosine": float(r.get("cosine", float("nan"))), "mismatches": int(r.get("mismatches") or 0),
            "failed_outputs": ",".join(r.get("failed_outputs", [])), "cached": bool(r.get("emulator_cached"))}


def _do_model(v, shape, opts) -> dict:
    from . import modelled_runs

    row = modelled_runs.model_row(v.name, shape, opts.get("sample", "auto"))
    row.pop("variant", None)
    row.pop("family", None)
    row.pop("shape", None)
    return row


def _do_bench(v, shape, opts) -> dict:
    """Paired A/B on a gfx950 GPU: the empty-set kernel (A) against this subset (B), the harness's
    median time ratio with its CI. Refused (UsageError) without a gfx950 device."""
    from ..bench.abtest import BenchError, Comparison, HarnessSettings, run_comparisons
    from ..bench.launchers import LauncherError, launcher_for
    from ..cli.bench import require_gfx950

    device = int(opts.pop("device", 0))
    require_gfx950(device)
    baseline = v.spec.ladder[0][0]
    try:
        a, b = launcher_for(baseline, shape), launcher_for(v.name, shape)
        settings = HarnessSettings(progress=False, **opts).validate()
        res = run_comparisons([Comparison(f"{v.name}_vs_{baseline}", a=a, b=b)], settings, device_index=device)
    except (BenchError, LauncherError) as exc:
        raise SweepError(str(exc)) from None
    s = res.summary
    s = s[s["method"] == s["method"].iloc[0]].iloc[0]
    return {"label": "measured", "baseline": baseline, "method": s["method"], "ratio": float(s["ratio"]),
            "ci_low": float(s["ci_low"]), "ci_high": float(s["ci_high"]), "n_pairs": int(s["n_pairs"]),
            "time_a_us": float(s.get("time_a_us", float("nan"))), "time_b_us": float(s.get("time_b_us", float("nan"))),
            "confidence": settings.confidence}


RUNNERS: dict[str, Callable] = {"compile": _do_compile, "verify": _do_verify, "model": _do_model, "bench": _do_bench}


def run_task(task: Task, raise_errors: bool = False) -> dict:
    """Run one task here; the row (module doc). A usage or toolchain error becomes ``ok=False`` with
    its first line in ``error`` (``raise_errors``: raised instead); anything else is a bug and raises."""
    from .. import variants
    from ..toolchain import ToolchainError

    start, t0, c0 = time.time(), time.perf_counter(), _cpu()
    v = variants.get(task.variant)
    fam = v.spec
    row: dict[str, Any] = {"variant": v.name, "family": v.family, "mask": fam.mask(v.switches),
                           "switches": "+".join(s for s in fam.switches if s in v.switches),
                           "shape": "x".join(map(str, task.shape)), "what": task.what, "ok": True, "error": ""}
    try:
        row.update(RUNNERS[task.what](v, task.shape, dict(task.options)))
    except (UsageError, ToolchainError) as exc:
        if raise_errors:
            raise
        row.update(ok=False, error=(str(exc).strip().splitlines() or [type(exc).__name__])[0],
                   label=row.get("label", "none"))
    row.update(seconds=round(time.perf_counter() - t0, 3), cpu_seconds=round(_cpu() - c0, 3),
               host=platform.node(), pid=os.getpid(), started=start)
    row.setdefault("label", "none")
    return row


def probe(task: Task) -> dict:
    """A no-work task: which worker ran it (host, pid), its package versions, cache folder and the
    variant's switch set -- ``mxfp4-ablation sweep --check`` (is every worker set up alike?) and the
    engine's own tests."""
    from importlib import metadata

    from .. import paths, variants

    v = variants.get(task.variant)
    try:
        flydsl = metadata.version("flydsl")
    except metadata.PackageNotFoundError:
        flydsl = None
    return {"variant": v.name, "family": v.family, "mask": v.spec.mask(v.switches),
            "switches": "+".join(s for s in v.spec.switches if s in v.switches),
            "shape": "x".join(map(str, task.shape)), "what": task.what, "label": "none", "ok": True, "error": "",
            "seconds": 0.0, "cpu_seconds": 0.0, "host": platform.node(), "pid": os.getpid(), "started": time.time(),
            "flydsl": flydsl, "cache": str(paths.cache_dir())}


# ============================================================================ many tasks


def default_workers() -> int:
    """One worker per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _worker_env() -> dict:
    """What a local worker needs to find this checkout and share its caches."""
    keep = ("PYTHONPATH", "MXFP4_CACHE", "MXFP4_MODEL_SHAPES", "MODE", toolchain.COMPILE_LOG_ENV)
    env = {k: os.environ[k] for k in keep if k in os.environ}
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def parse_scheduler(scheduler: str | None, workers: int | None) -> tuple[str, int | None]:
    """``local`` / ``local:N`` / ``inline`` / ``slurm`` / ``pbs`` / an address -> (kind, workers)."""
    s = (scheduler or "local").strip()
    if workers is not None and workers < 1:
        raise SweepError(f"--workers must be at least 1, got {workers}")
    if s.startswith("local:"):
        try:
            n = int(s.split(":", 1)[1])
        except ValueError:
            raise SweepError(f"scheduler {s!r}: write local:N with N a number of workers") from None
        if n < 1:
            raise SweepError(f"scheduler {s!r}: N must be at least 1")
        return "local", n
    if s in ("local", "inline", "slurm", "pbs"):
        return s, workers
    if "://" in s or ":" in s:
        return "address", workers
    raise SweepError(f"unknown scheduler {s!r}: give local, local:N, inline, slurm, pbs or an address "
                     f"such as tcp://host:8786")


@contextlib.contextmanager
def client(scheduler: str | None = "local", workers: int | None = None) -> Iterator[Any]:
    """A ``dask.distributed.Client`` for ``scheduler`` (module doc); None for ``inline``. A cluster
    this function started is closed on exit."""
    kind, n = parse_scheduler(scheduler, workers)
    if kind == "inline":
        yield None
        return
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise SweepError("the sweep engine needs dask.distributed (pip install -r requirements.txt)") from None
    import dask

    cluster = None
    with dask.config.set({"distributed.worker.daemon": False,  # a task compiles in a child process
                          "distributed.logging.distributed": "error"}):
        if kind == "local":
            n = n or default_workers()
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                                   memory_limit=0, silence_logs=40, env=_worker_env())
            c = Client(cluster)
        elif kind in ("slurm", "pbs"):
            toolchain.compile_log_incomplete(f"a {kind} cluster's workers compile")
            try:
                import dask_jobqueue
            except ImportError:
                raise SweepError("--scheduler slurm|pbs needs dask-jobqueue (pip install -r requirements.txt)") from None
            cls = dask_jobqueue.SLURMCluster if kind == "slurm" else dask_jobqueue.PBSCluster
            try:
                cluster = cls()
            except ValueError as exc:  # no cores/memory configured
                raise SweepError(f"dask-jobqueue {kind}: {str(exc).splitlines()[0]} (configure it in "
                                 f"~/.config/dask/jobqueue.yaml)") from None
            cluster.scale(n or 1)
            c = Client(cluster)
        else:
            toolchain.compile_log_incomplete("a remote scheduler's workers compile")
            try:
                c = Client(scheduler, timeout="10s")
            except (OSError, TimeoutError) as exc:
                raise SweepError(f"cannot reach the Dask scheduler at {scheduler}: {str(exc).splitlines()[0]}") from None
        try:
            yield c
        finally:
            c.close()
            if cluster is not None:
                cluster.close()


def _progress(total: int, enabled: bool, desc: str):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="task", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)


def _order(todo: Sequence[Task]) -> list[int]:
    """Slowest kinds first; within a kind the biggest shapes first (the product of the shape's numbers:
    the longest tasks start first, so the last to finish are short -- a two-worker summary otherwise
    ended on one worker running the MoE's 16384-token points alone), a shape's tasks one after another
    by family (a MoE shape's inputs are built once per worker)."""
    rank = {"bench": 0, "verify": 1, "model": 2, "compile": 3}
    return sorted(range(len(todo)), key=lambda i: (rank[todo[i].what], -math.prod(todo[i].shape), todo[i].shape,
                                                    todo[i].variant.split("-")[0].split("+")[0], todo[i].variant))


def run(todo: Sequence[Task], scheduler: str | None = "local", workers: int | None = None, progress: bool = True,
        desc: str = "sweep", client_=None, fn: Callable[[Task], dict] | None = None) -> "pd.DataFrame":  # noqa: F821
    """Run every task (duplicates once) on ``scheduler``; one row per task, in ``todo``'s order.
    ``client_``: an existing ``Client`` to use instead of starting one; ``fn``: what runs a task
    (default :func:`run_task`; :func:`probe` does no work)."""
    fn = fn or run_task
    import pandas as pd

    todo = list(dict.fromkeys(todo))
    rows: dict[int, dict] = {}
    bar = _progress(len(todo), progress and len(todo) > 0, desc)
    try:
        if client_ is not None:
            rows = _on_client(client_, todo, bar, fn)
        else:
            with client(scheduler, workers) as c:
                if c is None:
                    for i in _order(todo):
                        rows[i] = fn(todo[i])
                        if bar is not None:
                            bar.update(1)
                else:
                    rows = _on_client(c, todo, bar, fn)
    finally:
        if bar is not None:
            bar.close()
        held = sys.modules.get("mxfp4_ablation.modelled")
        if held is not None:  # inline: the last shape's (lazily mapped) timing inputs go now
            held._LAZY_INPUTS.clear()
    df = pd.DataFrame([rows[i] for i in range(len(todo))])
    front = [c for c in COLUMNS if c in df.columns]
    return df[front + [c for c in df.columns if c not in front]]


def _on_client(c, todo: Sequence[Task], bar, fn) -> dict[int, dict]:
    from dask.distributed import as_completed

    order = _order(todo)
    futures = {c.submit(fn, todo[i], key=f"task-{i}-{abs(hash(todo[i].key)):x}", pure=False): i for i in order}
    rows = {}
    for fut in as_completed(list(futures)):
        rows[futures[fut]] = fut.result()
        if bar is not None:
            bar.update(1)
    return rows


def failures(df) -> list[str]:
    """``"what:variant@shape: error"`` for every failed row."""
    if not len(df):
        return []
    bad = df[~df["ok"].astype(bool)]
    return [f"{r.what}:{r.variant}@{r.shape}: {r.error}" for r in bad.itertuples()]


def write(df, out: str | Path, settings: dict | None = None, name: str = "sweep") -> Path:
    """``<out>/<name>.parquet`` + sidecar with the provenance (mode ``emulated`` unless a bench row
    says ``measured``: then ``device``)."""
    from .. import provenance, results

    mode = "device" if len(df) and (df["label"] == "measured").any() else "emulated"
    prov = provenance.collect(mode, settings=settings or {})
    return results.write_table(df, Path(out) / f"{name}.parquet", prov)


__all__ = ["WHATS", "Task", "tasks", "run_task", "probe", "run", "client", "parse_scheduler", "default_workers",
           "failures", "write", "SweepError"]
