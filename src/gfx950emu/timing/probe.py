"""Address probes: which 128-byte lines a workgroup's VMEM instructions touch, without timing it.

The L2 model needs to know which other workgroups of the sampled workgroup's XCD (in the same round)
load the same lines.  That follows from the kernel's own workgroup-id arithmetic (a tile swizzle or
an XCD remap included), so it is read off the emulator: each co-resident workgroup runs functionally
(memory writes suppressed, LDS private) until each of its waves has executed every VMEM instruction
its counterpart wave of the sampled workgroup executes (``targets``; the prologue plus one trip of
each loop), or re-executes one when no targets are given, recording per instruction index the lines
of its first execution.  :func:`probe` with ``full=True`` runs a workgroup to its end instead and also
counts executions and bytes per instruction (for the grid's HBM fraction).

Which workgroups share an XCD and a round follows the dispatch order the timing model assumes
(:func:`gfx950emu.timing.first_cu_workgroups`): linear workgroup ``i`` on XCD ``i % xcds``, the XCD's
``j``-th workgroup on CU ``j % cus_per_xcd``, ``cus_per_xcd x occupancy`` of them per round.
"""
from __future__ import annotations

import numpy as np

from .. import decode as D
from ..memops import ExecError
from .memory import LINE, scratch_lines


class _NoWrites:
    """Suppress global stores / atomics of probe runs (atomics still return the old values)."""

    def __init__(self, mem):
        self.mem = mem

    def __enter__(self):
        mem = self.mem
        self._had = {k: mem.__dict__.get(k) for k in ("store", "atomic")}
        self._journal = mem.journal
        mem.journal = None
        orig = mem.atomic

        def atomic(op, idx, data, nbytes):
            keep = mem.heap[idx].copy()
            out = orig(op, idx, data, nbytes)
            mem.heap[idx] = keep
            return out
        mem.store = lambda idx, data: None
        mem.atomic = atomic
        return self

    def __exit__(self, *exc):
        mem = self.mem
        for k, v in self._had.items():
            if v is None:
                mem.__dict__.pop(k, None)
            else:
                mem.__dict__[k] = v
        mem.journal = self._journal
        return False


def _lines_of(capture) -> set:
    out = set()
    for off, nb in capture:
        off = np.asarray(off, dtype=np.int64)
        if off.ndim == 2:
            out.update((off[:, 0] // LINE).tolist())
            out.update((off[:, -1] // LINE).tolist())
        elif off.size:
            out.update((off // LINE).tolist())
            out.update(((off + (nb - 1)) // LINE).tolist())
    return out


def probe(prog, static, wg, make_waves, touched, *, full=False, budget=200_000, targets=None) -> dict:
    """``{"lines": {index: set(lines)}, "count": {index: executions}, "bytes": {index: bytes},
    "regions": set(buffer indices), "seen": [set(VMEM indices) per wave]}`` of workgroup ``wg``
    (see the module doc)."""
    fns = [d.fn for d in prog.decoded]
    vm = [st.kind == "vmem" for st in static]
    lines, count, nbytes = {}, {}, {}
    regions = set()
    waves = make_waves(wg)
    n_done = 0
    live = [True] * len(waves)
    seen = [set() for _ in waves]
    steps = 0
    with np.errstate(all="ignore"), _NoWrites(touched.mem):
        touched.mute = True
        try:
            while any(live):
                for k, w in enumerate(waves):
                    if not live[k]:
                        continue
                    while True:
                        i = w.pc
                        if i >= len(fns):
                            live[k] = False
                            break
                        is_vm = vm[i]
                        if is_vm:
                            if not full and i in seen[k] and (targets is None or k >= len(targets)):
                                live[k] = False
                                break
                            seen[k].add(i)
                            touched.capture = []
                        w.pc = i + 1
                        w.counts[i] += 1
                        try:
                            r = fns[i](w)
                        except (ExecError, ValueError, IndexError):
                            live[k] = False
                            break
                        steps += 1
                        if is_vm:
                            cap, touched.capture = touched.capture, None
                            st = static[i]
                            ls = _lines_of(cap)
                            if st.scratch is not None:
                                ls = set(scratch_lines(k, st.scratch(w), st.nbytes, w.active))
                            regions.update(touched.regions_of(cap))
                            if i not in lines:
                                lines[i] = ls            # first execution only
                            count[i] = count.get(i, 0) + 1
                            nbytes[i] = nbytes.get(i, 0) + len(ls) * LINE
                        if targets is not None and not full and k < len(targets) and is_vm \
                                and targets[k] <= seen[k]:
                            live[k] = False                 # every VMEM instruction of the sampled wave seen
                            break
                        if r == D.ENDPGM:
                            live[k] = False
                            n_done += 1
                            break
                        if r == D.BARRIER:
                            w.epoch += 1
                            break
                        if steps > budget * len(waves):
                            live[k] = False
                            break
        finally:
            touched.mute = False
            touched.capture = None
    return {"lines": lines, "count": count, "bytes": nbytes, "regions": regions, "seen": seen}


def co_resident(wgs: list, index: int, p, occupancy: int) -> list:
    """Linear indices of the workgroups on the same XCD and in the same round as workgroup ``index``."""
    xcds, cus = int(p.device_xcds), int(p.device_cus_per_xcd)
    x, j = index % xcds, index // xcds
    per = cus * max(1, occupancy)
    r = j // per
    return [xcds * jj + x for jj in range(r * per, (r + 1) * per) if xcds * jj + x < len(wgs) and xcds * jj + x != index]


def sharing(sample_lines: dict, others: list, total_others: int) -> dict:
    """Sharing degree per VMEM instruction: 1 + the co-resident workgroups whose first execution of the
    same instruction touched a line the sampled workgroup's did (scaled up when only some were probed)."""
    out = {}
    n = max(1, len(others))
    scale = total_others / n if others else 0.0
    for i, ls in sample_lines.items():
        if not ls:
            continue
        k = sum(1 for o in others if o["lines"].get(i) and not ls.isdisjoint(o["lines"][i]))
        out[i] = max(1, int(round(1 + k * scale)))
    return out
