"""gfx950emu.timing.memory: the sampled CU's share of the chip's memory bandwidth, after the cycle simulation.

The cycle simulation gives every VMEM op the CU's own L2 -> L1 path (``[vmem].l1_bytes_per_clock``) and
one latency.  What it cannot see is that all CUs share HBM and the MALL: a burst that one CU could
stream at L2 speed -- a round's C tile stores, a decode kernel's expert weights -- drains at the CU's
share of the chip's bandwidth.  :func:`gfx950emu.timing.grid.memory_record` bins the sampled CU's
VMEM stream by issue cycle, each request weighted by the share of its buffer that misses every
on-chip level (compulsory bytes / requested bytes, from the touched lines).  Here the two streams
become fluid queues served at the CU's share:

* HBM reads: ``hbm_bytes_per_s x [memory].hbm_sustained_fraction / CUs with work``;
* writes: the MALL (write-back Infinity Cache), ``[device].mall_bytes_per_s / CUs with work``;

both x ``concurrency`` (the simulated workgroups' share of the CU's resident ones: one sampled
workgroup of four resident gets a quarter).  A fluid queue that starts empty drains its last byte at
``max_i (t_i + S_i / r)`` (``S_i``: bytes arriving at or after bin ``i``); the work after the stream's
last request waits for it, so the CU path is ``sim_cycles + max(0, drain - end of the last request's
bin)`` per queue (what drains within its own bin, the simulation's L2 path already served).
Parameters: ``gfx950.toml`` ``[memory]`` (sources there).  Nothing here re-runs the simulation, so the
figures re-evaluate on every cache hit, like the power clock.
"""
from __future__ import annotations

import numpy as np


def drain_cycles(bins: list, bin_cycles: int, rate: float) -> float:
    """Cycle at which a fluid queue, fed ``bins[i]`` bytes at cycle ``i x bin_cycles``, has served its
    last byte at ``rate`` bytes per cycle (0 when nothing arrives)."""
    b = np.asarray(bins, dtype=np.float64)
    nz = np.nonzero(b)[0]
    if not nz.size or rate <= 0:
        return 0.0
    suffix = np.cumsum(b[::-1])[::-1]
    return float(np.max(nz * float(bin_cycles) + suffix[nz] / rate))


def rates(rec: dict, clock_ghz: float, p) -> tuple:
    """(HBM read, MALL write) bytes per core cycle available to the sampled CU."""
    hz = float(clock_ghz) * 1e9
    share = float(rec["concurrency"]) / max(1, int(rec["cus_with_work"]))
    hbm = float(p.device_hbm_bytes_per_s) * float(p.memory_hbm_sustained_fraction) * share / hz
    mall = float(p.device_mall_bytes_per_s) * share / hz
    return hbm, mall


def cu_cycles(rec: dict, clock_ghz: float, p) -> float:
    """The sampled CU's span with its memory streams served at its bandwidth share (>= sim_cycles)."""
    hbm, mall = rates(rec, clock_ghz, p)
    end = float(rec["sim_cycles"])
    extra = 0.0
    b = int(rec["bin_cycles"])
    for bins, last, rate in ((rec["read_bytes"], rec["last_read"], hbm), (rec["write_bytes"], rec["last_write"], mall)):
        d = drain_cycles(bins, b, rate)
        if d:  # the stream's last request is served within its bin at the latest (the simulation's own path)
            extra = max(extra, d - float((int(last) // b + 1) * b))
    return end + max(0.0, extra)


__all__ = ["cu_cycles", "drain_cycles", "rates"]
