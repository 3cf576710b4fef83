"""Timing one trial of a kernel: event-timed stream loop, or graph replay.

A *trial* is ``warmup`` untimed launches followed by ``launches`` launches timed by
one pair of device events, so the per-launch time is ``elapsed / launches``.  Two
methods:

* ``events``: the host issues the launches one by one into the stream between the
  two events.  It includes whatever the host cannot hide (launch overhead for
  kernels shorter than ~10 us).
* ``graph``: the launches are captured once into a CUDA/HIP graph and each trial
  replays it between the events.  It removes most host overhead and is the right
  number for short kernels; for long kernels the two agree.

Every launch takes the next input set of its rotation (``Case.launch(i)`` with
``i`` the set index), so no launch reuses the buffers of the one before.

The backend is torch's ``cuda`` API, which is HIP on ROCm builds, so the same code
times NVIDIA and AMD kernels.  A deterministic simulated backend (``SimBackend``)
stands in for a GPU in the CPU-only tests.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .inputs import Rotation, rotation_for, DEFAULT_FACTOR

METHODS = ("events", "graph")


class TimingError(RuntimeError):
    """A trial could not be timed (bad method, no device, capture failed)."""


@dataclass
class Case:
    """One kernel configuration ready to launch.

    ``launch(i)`` enqueues one launch on input set ``i`` (0 <= i < n_sets) without
    synchronising.  ``flops`` is the exact floating-point operation count of one
    launch (2*M*N*K for a GEMM); ``bytes_moved`` optionally the minimal bytes.
    ``release`` frees the buffers when the comparison is done.
    """

    name: str
    launch: Callable[[int], None]
    rotation: Rotation
    flops: float = 0.0
    bytes_moved: float = 0.0
    meta: dict = field(default_factory=dict)
    release: Callable[[], None] | None = None
    #: Validation only: extra launches run inside every timed window but not counted
    #: in the per-launch division, which plants an exactly known slowdown of
    #: (launches + extra_launches) / launches.
    extra_launches: int = 0

    @property
    def n_sets(self) -> int:
        return self.rotation.n_sets


@dataclass
class DeviceContext:
    """What a launcher factory gets: the backend, device and how to size rotations."""

    backend: Any
    index: int = 0
    cache_bytes: int = 0
    rotation_factor: float = DEFAULT_FACTOR
    seed: int = 0

    @property
    def device(self) -> str:
        return getattr(self.backend, "device", "cpu")

    def rotation(self, set_bytes: int) -> Rotation:
        """Input sets for a case whose one launch touches ``set_bytes`` bytes."""
        return rotation_for(set_bytes, self.cache_bytes, self.rotation_factor)


# --------------------------------------------------------------------------- backends


class TorchBackend:
    """torch.cuda events and graphs: CUDA on NVIDIA, HIP on ROCm."""

    name = "torch"

    def __init__(self, index: int = 0):
        import torch

        if not torch.cuda.is_available():
            raise TimingError("no GPU visible to torch (torch.cuda.is_available() is False)")
        if index >= torch.cuda.device_count():
            raise TimingError(f"GPU {index} requested, torch sees {torch.cuda.device_count()}")
        self.torch = torch
        self.index = index
        self.device = f"cuda:{index}"
        torch.cuda.set_device(index)

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    @staticmethod
    def record(ev):
        ev.record()

    def elapsed_ms(self, start, end) -> float:
        end.synchronize()
        return float(start.elapsed_time(end))

    def synchronize(self):
        self.torch.cuda.synchronize(self.index)

    def capture(self, fn: Callable[[], None]):
        """Capture ``fn``'s launches into a graph (after one eager run on a side stream,
        which lets libraries such as cuBLAS set up workspaces outside the capture)."""
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        self.synchronize()
        return graph

    @staticmethod
    def replay(graph):
        graph.replay()

    def empty_cache(self):
        self.torch.cuda.empty_cache()


class SimBackend:
    """A virtual GPU for CPU tests: launches advance a virtual clock.

    ``SimKernel`` launches add their duration (times a slow common drift, as a clock
    or temperature would) to the clock.  In the ``events`` method each launch costs at
    least ``host_overhead_us`` (the host cannot issue faster); graph replays do not.
    Nothing sleeps, so tests of the statistics run in milliseconds, deterministically.
    """

    name = "sim"
    device = "sim"

    def __init__(self, index: int = 0, seed: int = 0, drift: float = 0.02,
                 drift_period_us: float = 2e5, host_overhead_us: float = 5.0):
        self.index = index
        self.clock_us = 0.0
        self.rng = np.random.default_rng(seed)
        self.drift = drift
        self.drift_period_us = drift_period_us
        self.host_overhead_us = host_overhead_us
        self._capturing: list | None = None
        self._in_replay = False

    def speed_factor(self) -> float:
        return 1.0 + self.drift * math.sin(2 * math.pi * self.clock_us / self.drift_period_us)

    def run_kernel(self, base_us: float, noise: float):
        """Called by SimKernel launches."""
        if self._capturing is not None:
            self._capturing.append((base_us, noise))
            return
        d = base_us * self.speed_factor() * math.exp(noise * self.rng.standard_normal())
        if not self._in_replay:
            d = max(d, self.host_overhead_us)
        self.clock_us += d

    def event(self):
        return [None]

    def record(self, ev):
        ev[0] = self.clock_us

    def elapsed_ms(self, start, end) -> float:
        return (end[0] - start[0]) / 1000.0

    def synchronize(self):
        pass

    def capture(self, fn):
        self._capturing = []
        try:
            fn()
            return list(self._capturing)
        finally:
            self._capturing = None

    def replay(self, graph):
        self._in_replay = True
        try:
            for base_us, noise in graph:
                self.run_kernel(base_us, noise)
        finally:
            self._in_replay = False

    def empty_cache(self):
        pass


#: Backends that live above this layer, loaded by name only when asked for (so a run that times on a
#: GPU never imports the emulator): ``"module:Class"``, constructed as ``Class(index, seed=seed)``.
PLUGIN_BACKENDS = {
    # FlyDSL's launcher on the gfx950emu HIP runtime; its clock counts launches (not a measurement)
    "emulated": "mxfp4_ablation.emulated_device:EmulatedBackend",
}


def make_backend(name: str, index: int = 0, seed: int = 0):
    if name == "torch":
        return TorchBackend(index)
    if name == "sim":
        return SimBackend(index, seed=seed)
    if name in PLUGIN_BACKENDS:
        import importlib

        module, cls = PLUGIN_BACKENDS[name].split(":")
        return getattr(importlib.import_module(module), cls)(index, seed=seed)
    raise TimingError(f"unknown backend {name!r} (torch, sim or {', '.join(PLUGIN_BACKENDS)})")


def sim_case(ctx: DeviceContext, base_us: float = 100.0, noise: float = 0.01,
             flops: float = 1e9, set_bytes: int = 1 << 20, name: str = "sim") -> Case:
    """A simulated kernel of ``base_us`` microseconds with lognormal noise ``noise``."""
    backend = ctx.backend
    if not isinstance(backend, SimBackend):
        raise TimingError("sim_case needs the sim backend")
    rot = ctx.rotation(set_bytes)

    def launch(i: int):
        if not 0 <= i < rot.n_sets:
            raise IndexError(i)
        backend.run_kernel(base_us, noise)

    return Case(name=name, launch=launch, rotation=rot, flops=flops, bytes_moved=set_bytes,
                meta={"base_us": base_us, "noise": noise})


# --------------------------------------------------------------------------- trials


class CaseTimer:
    """Times trials of one case with one method, rotating input sets across launches."""

    def __init__(self, case: Case, backend, method: str, launches: int, warmup: int):
        if method not in METHODS:
            raise TimingError(f"unknown timing method {method!r}; choose from {METHODS}")
        if launches < 1 or warmup < 0:
            raise TimingError(f"need launches >= 1 and warmup >= 0, got {launches}, {warmup}")
        self.case, self.backend, self.method = case, backend, method
        self.launches, self.warmup = launches, warmup
        self._next = 0
        self._graphs: list = []
        self._warm_graph = None
        self._graph_turn = 0
        if method == "graph":
            self._build_graphs()

    def _launch_run(self, start: int, count: int) -> Callable[[], None]:
        n = self.case.n_sets

        def run():
            for j in range(count):
                self.case.launch((start + j) % n)

        return run

    def _build_graphs(self):
        # Enough graphs that one pass over them touches every input set once: with
        # more sets than launches a single graph would cycle a subset that may fit
        # in the cache.
        n = self.case.n_sets
        per_graph = self.launches + self.case.extra_launches
        n_graphs = max(1, math.ceil(n / per_graph))
        try:
            self._graphs = [
                self.backend.capture(self._launch_run(g * per_graph, per_graph))
                for g in range(n_graphs)
            ]
            if self.warmup:
                self._warm_graph = self.backend.capture(self._launch_run(0, self.warmup))
        except Exception as exc:  # capture failures are backend specific
            raise TimingError(f"graph capture of {self.case.name} failed: {exc}") from exc

    def trial(self) -> float:
        """One trial; returns the elapsed milliseconds of the timed window (``launches``
        launches, plus ``case.extra_launches`` when a slowdown is planted)."""
        b = self.backend
        start, end = b.event(), b.event()
        if self.method == "events":
            n = self.case.n_sets
            for _ in range(self.warmup):
                self.case.launch(self._next % n)
                self._next += 1
            b.record(start)
            for _ in range(self.launches + self.case.extra_launches):
                self.case.launch(self._next % n)
                self._next += 1
            b.record(end)
        else:
            if self._warm_graph is not None:
                b.replay(self._warm_graph)
            graph = self._graphs[self._graph_turn % len(self._graphs)]
            self._graph_turn += 1
            b.record(start)
            b.replay(graph)
            b.record(end)
        ms = b.elapsed_ms(start, end)
        if not (ms > 0 and math.isfinite(ms)):
            raise TimingError(f"trial of {self.case.name} measured {ms} ms")
        return ms

    def close(self):
        self._graphs = []
        self._warm_graph = None


def launches_for(case: Case, backend, target_trial_ms: float, probes: int = 3,
                 max_launches: int = 10000) -> int:
    """Launches per trial so that one trial lasts about ``target_trial_ms``.

    Long enough that the event resolution (~0.5 us) and the fixed cost of the event
    pair vanish against it; short enough that many trials fit and drift between the
    A and B trial of a block stays small.
    """
    timer = CaseTimer(case, backend, "events", launches=1, warmup=1)
    ms = float(np.median([timer.trial() for _ in range(probes)]))
    return int(min(max_launches, max(1, math.ceil(target_trial_ms / max(ms, 1e-6)))))
