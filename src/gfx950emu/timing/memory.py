"""The memory hierarchy of the timing model: vector L1, L2 per XCD, MALL, HBM, in nanoseconds.

One :class:`Hierarchy` serves the simulated CU.  Every VMEM instruction hands it the 128-byte lines
its lanes touched (the real addresses, read off the emulated instruction; scratch lines from the
wave's private offsets in the hardware's dword-interleaved swizzle) and gets the cycle its data is
back:

* **vector L1** (per CU, 32 KiB, LRU over 128-byte lines): a hit costs ``l1_hit_ns``; loads
  allocate, stores write through without allocating;
* **L2** (per XCD, 4 MiB): the CU's own earlier lines (an LRU of the CU's share of the XCD's L2) hit;
  a line another workgroup of the same XCD requests in the same round (the *sharing degree* of the
  instruction, from :func:`probe`) is an L2 hit for all but one of the ``d`` sharers (which one is
  fixed by the line address, so the sampled CU pays its 1/d share of the misses);
* **MALL** (256 MiB Infinity Cache) and **HBM3E**: an L2 miss is a MALL hit unless it is the chip's
  compulsory fetch of the line: the fraction ``hbm_fraction`` of L2 misses that HBM serves is the
  compulsory bytes (argument buffers touched) over the grid's L2-miss bytes, 1 when the buffers
  exceed the MALL;
* **loaded latency**: each level beyond L1 is a pipe of the CU's share of that level's bandwidth
  (L2: 2048 B/clock per XCD over its active CUs; MALL and HBM: chip bandwidth over the active CUs --
  all CUs start together, so the prologue's loads and the epilogue's stores of a round are
  chip-wide bursts); an access waits for its pipe (queueing with the bytes in flight) and then pays
  its level's unloaded latency.

Latencies are in ns and do not scale with the core clock: :func:`ns_to_cycles` converts them at the
clock the run uses (:func:`gfx950emu.timing.grid.core_clock_ghz`).
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

LINE = 128
SCRATCH_TAG = 1 << 60


def ns_to_cycles(ns: float, clock_ghz: float) -> float:
    return float(ns) * float(clock_ghz)


class LRU:
    """A fully associative LRU set of line ids."""

    __slots__ = ("cap", "d")

    def __init__(self, lines: int):
        self.cap = max(1, int(lines))
        self.d = OrderedDict()

    def hit(self, ln) -> bool:
        d = self.d
        if ln in d:
            d.move_to_end(ln)
            return True
        return False

    def insert(self, ln) -> None:
        d = self.d
        d[ln] = True
        if len(d) > self.cap:
            d.popitem(last=False)


class Pipe:
    """A bandwidth share (bytes per cycle): the cycle a transfer of ``n`` bytes issued at ``t`` is through."""

    __slots__ = ("bpc", "free", "bytes")

    def __init__(self, bytes_per_cycle: float):
        self.bpc = max(1e-9, float(bytes_per_cycle))
        self.free = 0.0
        self.bytes = 0

    def take(self, t: float, n: int) -> float:
        """Queueing delay + transfer time of ``n`` bytes arriving at ``t``."""
        start = self.free if self.free > t else t
        self.free = start + n / self.bpc
        self.bytes += n
        return self.free - t


class Hierarchy:
    """Cache state and bandwidth shares of one simulated CU (see the module doc)."""

    def __init__(self, p, clock_ghz: float, *, active_cus: int, active_cus_xcd: int, sharing=None,
                 hbm_fraction: float = 1.0):
        self.p = p
        self.clk = float(clock_ghz)
        self.on = bool(p.mechanisms_memory_hierarchy)
        self.queue = bool(p.mechanisms_bandwidth_queue)
        self.sharing = sharing if (sharing is not None and p.mechanisms_l2_sharing) else {}
        self.hbm_fraction = float(hbm_fraction)
        self.l1 = LRU(int(p.memory_l1_bytes) // LINE)
        self.l2 = LRU(int(p.device_l2_bytes_per_xcd) // max(1, int(p.device_cus_per_xcd)) // LINE)
        cyc = 1e9 * self.clk
        self.lat = {lvl: ns_to_cycles(getattr(p, f"memory_{lvl}_ns"), self.clk) for lvl in ("l1_hit", "l2_hit",
                                                                                          "mall_hit", "hbm")}
        self.pipes = {
            "l2": Pipe(float(p.device_l2_bytes_per_clock_per_xcd) / max(1, active_cus_xcd)),
            "mall": Pipe(float(p.device_mall_bytes_per_s) / max(1, active_cus) / cyc),
            "hbm": Pipe(float(p.device_hbm_bytes_per_s) * float(p.memory_hbm_sustained_fraction)
                        / max(1, active_cus) / cyc),
        }
        self.hits = {"l1": 0, "l2": 0, "l2_shared": 0, "mall": 0, "hbm": 0, "store": 0}
        self.miss_bytes = 0          # bytes this CU requested beyond its L2 (MALL + HBM)

    def _shared_hit(self, ln, d: int) -> bool:
        # which of the d sharers fetches the line is fixed by the address (the sampled CU pays 1/d of them)
        return d > 1 and (hash((ln, 0x9E3779B1)) % d) != 0

    def _beyond_hbm(self, ln) -> bool:
        f = self.hbm_fraction
        if f >= 1.0:
            return True
        return ((hash((ln, 0x85EBCA6B)) & 0xFFFF) / 65536.0) < f

    def access(self, t: float, lines, *, store: bool = False, index: int = -1) -> float:
        """Cycles from ``t`` until the lines' data is back (a load) or acknowledged by L2 (a store)."""
        if not self.on:
            return float(self.p.vmem_latency_cycles)
        lat = self.lat
        h = self.hits
        n_l2 = n_mall = n_hbm = 0
        worst = lat["l1_hit"]
        d = self.sharing.get(index, 1)
        l1, l2 = self.l1, self.l2
        for ln in lines:
            if store:
                h["store"] += 1
                n_l2 += 1
                l2.insert(ln)
                if not (ln & SCRATCH_TAG):
                    n_hbm += 1                       # written back to HBM eventually (bandwidth only)
                continue
            if l1.hit(ln):
                h["l1"] += 1
                continue
            l1.insert(ln)
            n_l2 += 1
            if l2.hit(ln):
                h["l2"] += 1
                w = lat["l2_hit"]
            else:
                l2.insert(ln)
                if self._shared_hit(ln, d) or (ln & SCRATCH_TAG):
                    h["l2_shared" if not (ln & SCRATCH_TAG) else "l2"] += 1
                    w = lat["l2_hit"]
                else:
                    self.miss_bytes += LINE
                    if self._beyond_hbm(ln):
                        h["hbm"] += 1
                        n_hbm += 1
                        n_mall += 1
                        w = lat["hbm"]
                    else:
                        h["mall"] += 1
                        n_mall += 1
                        w = lat["mall_hit"]
            if w > worst:
                worst = w
        if store:
            worst = lat["l2_hit"]
        q = 0.0
        if self.queue:
            pipes = self.pipes
            if n_l2:
                q = pipes["l2"].take(t, n_l2 * LINE)
            if n_mall:
                q = max(q, pipes["mall"].take(t, n_mall * LINE))
            if n_hbm:
                q = max(q, pipes["hbm"].take(t, n_hbm * LINE))
        return worst + q

    def smem(self, t: float, cold: bool) -> float:
        """Scalar load: cold (the first touch of a line by the kernel's first round) from HBM, else an
        L2 hit (the scalar cache is not modelled as a capacity)."""
        p = self.p
        if not p.mechanisms_smem_ns:
            return float(p.vmem_smem_latency_cycles)
        return self.lat["hbm"] if cold else ns_to_cycles(p.memory_scalar_hit_ns, self.clk)

    def stats(self) -> dict:
        out = dict(self.hits)
        out["bytes_l2_pipe"] = self.pipes["l2"].bytes
        out["bytes_mall_pipe"] = self.pipes["mall"].bytes
        out["bytes_hbm_pipe"] = self.pipes["hbm"].bytes
        out["hbm_fraction"] = round(self.hbm_fraction, 4)
        out["sharing_mean"] = round(float(np.mean(list(self.sharing.values()))), 3) if self.sharing else 1.0
        return out


def scratch_lines(wave_uid: int, offsets, nbytes: int, lanes) -> list:
    """128-byte lines of a scratch access: the hardware interleaves the lanes' private segments dword
    by dword (lane l's dword j at j*256 + 4*l), so one dword of 64 lanes is two lines."""
    offs = np.asarray(offsets, dtype=np.int64)
    if offs.size == 0:
        return []
    lanes = np.asarray(lanes, dtype=np.int64)
    rows = (offs[:, None] + np.arange(0, max(4, nbytes), 4)[None, :]) // 4          # [lanes, dwords]
    addr = rows * 256 + 4 * lanes[:, None]
    ln = np.unique(addr // LINE)
    return [int(SCRATCH_TAG | (wave_uid << 40) | int(x)) for x in ln]
