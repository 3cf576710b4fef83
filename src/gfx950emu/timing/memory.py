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
workgroup of four resident gets a quarter).  With ``[memory].mall_writes`` the MALL holds at most its
size of the grid's written lines; the rest of each write joins the HBM queue (:func:`spill_share`).
With ``[memory].loaded_latency`` (model 0.6.0) the queues feed back into the CU: a bin's ops that a wave
waited for (the simulation records, per op, when a wave first waited for it) stall the CU when the
queue serves them later than that, and every later bin issues that much later (:func:`replay_cycles`).
Without it (model 0.5.0): a fluid queue that starts empty drains its last byte at
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


def spill_share(rec: dict, p) -> float:
    """The share of the written bytes the MALL cannot hold: a write-back cache of ``[device].mall_bytes``
    keeps at most that much of what the grid writes, the rest is written back to HBM and shares the
    HBM bandwidth with the reads; the chip's floor counts these written bytes, not those the MALL still
    holds when the kernel ends.  0 with ``[memory].mall_writes`` off (model 0.5.0: every write at the
    MALL's rate, every written byte in the floor)."""
    wr = float(rec.get("written_bytes", 0))
    if not bool(p.memory_mall_writes):
        return 0.0
    return max(0.0, 1.0 - float(p.device_mall_bytes) / wr) if wr > 0 else 0.0


def replay_cycles(rec: dict, hbm: float, mall: float, p) -> float:
    """Loaded latency: the sampled CU's span when its two streams queue at ``hbm`` / ``mall`` bytes per
    cycle and a wave that waits for a late op stalls the CU.  Bins in issue order, the CU shifted by
    the stalls so far (``delta``); a bin's bytes join their FIFO queue at its shifted start; the queue
    serves them ``late`` cycles past the bin's shifted end; the ops some wave waited for allowed
    ``slack`` cycles from their return to that wait (``read_slack`` / ``write_slack``, -1: none
    waited), so the CU stalls ``max(0, late - slack)``, and every later bin issues that much later.
    The span: the shifted simulation, or the last queued byte served, whichever is later."""
    b = float(rec["bin_cycles"])
    rb, wb = rec["read_bytes"], rec["write_bytes"]
    g = spill_share(rec, p)
    rs, ws = rec["read_slack"], rec["write_slack"]
    delta = c_r = c_w = 0.0
    for i in range(len(rb)):
        r, w = rb[i], wb[i]
        if not (r or w):
            continue
        a = i * b + delta
        stall = 0.0
        if w and mall > 0:          # the MALL takes the writes; the share it cannot hold goes on to HBM
            c_w = max(c_w, a) + w * (1.0 - g) / mall
            if ws[i] >= 0:
                stall = max(stall, c_w - (a + b) - ws[i])
        if (r or g * w) and hbm > 0:
            c_r = max(c_r, a) + (r + g * w) / hbm
            late = c_r - (a + b)
            for s in ((rs[i],) if r else ()) + ((ws[i],) if g * w else ()):
                if s >= 0:
                    stall = max(stall, late - s)
        delta += max(0.0, stall)
    return max(float(rec["sim_cycles"]) + delta, c_r, c_w)


def cu_cycles(rec: dict, clock_ghz: float, p) -> float:
    """The sampled CU's span with its memory streams served at its bandwidth share (>= sim_cycles):
    with ``[memory].loaded_latency`` the replay of :func:`replay_cycles`, otherwise (model 0.5.0) the
    simulation plus what each queue drains past its last request's bin."""
    hbm, mall = rates(rec, clock_ghz, p)
    if bool(p.memory_loaded_latency) and "read_slack" in rec:
        return replay_cycles(rec, hbm, mall, p)
    end = float(rec["sim_cycles"])
    extra = 0.0
    b = int(rec["bin_cycles"])
    for bins, last, rate in ((rec["read_bytes"], rec["last_read"], hbm), (rec["write_bytes"], rec["last_write"], mall)):
        d = drain_cycles(bins, b, rate)
        if d:  # the stream's last request is served within its bin at the latest (the simulation's own path)
            extra = max(extra, d - float((int(last) // b + 1) * b))
    return end + max(0.0, extra)


__all__ = ["cu_cycles", "drain_cycles", "rates", "replay_cycles", "spill_share"]
