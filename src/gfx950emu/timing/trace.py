"""Chrome-trace / Perfetto JSON of a timing run: one track per wave, one per MFMA pipe.

Open the file in https://ui.perfetto.dev or chrome://tracing.  Times are in microseconds at the
model's clock (the track names say so); each slice is one issued instruction (its issue slot; an
MFMA's slice on its SIMD's pipe track covers its passes).
"""
from __future__ import annotations

import json


def _events(timing, t0=None, t1=None):
    ev = timing.get("trace_events")
    if ev is None:
        raise ValueError("this timing result has no timeline; run launch(..., timing=True, timing_trace=True)")
    if t0 is not None or t1 is not None:
        lo, hi = (t0 or 0), (t1 if t1 is not None else float("inf"))
        ev = [e for e in ev if e[5] > lo and e[4] < hi]
    return ev


def timeline(timing: dict, prog, t0=None, t1=None) -> list:
    """Plain intervals for plotting (cycles): ``{"track", "start", "end", "opcode", "kind", "line"}``,
    one per issued instruction on its wave's track, plus each MFMA on ``"SIMD s MFMA"``; optionally
    only those overlapping the cycle window [t0, t1)."""
    out = []
    for wgi, wave, simd, idx, t, end, kind in _events(timing, t0, t1):
        d = prog.decoded[idx]
        out.append({"track": f"wg{wgi} wave{wave}", "start": t, "end": t + 4 if kind == "mfma" else end,
                    "opcode": d.opcode, "kind": kind, "line": d.line})
        if kind == "mfma":
            out.append({"track": f"SIMD {simd} MFMA", "start": t, "end": end, "opcode": d.opcode, "kind": kind,
                        "line": d.line})
    return out


def chrome_trace(timing: dict, prog, *, max_events: int = 400_000, t0=None, t1=None) -> dict:
    """The trace dict of ``res.timing`` from ``launch(..., timing=True, timing_trace=True)``
    (optionally only the cycle window [t0, t1))."""
    ev = _events(timing, t0, t1)
    clk = float(timing["clock_ghz"])
    us = 1.0 / (clk * 1e3)
    out = [
        {"ph": "M", "pid": 0, "name": "process_name",
         "args": {"name": f"waves (modelled, gfx950emu.timing {timing['model_version']}, {clk} GHz)"}},
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "MFMA pipes (one per SIMD)"}},
    ]
    seen = set()
    for wgi, wave, simd, idx, t, end, kind in ev[:max_events]:
        tid = wgi * 64 + wave
        if tid not in seen:
            seen.add(tid)
            out.append({"ph": "M", "pid": 0, "tid": tid, "name": "thread_name",
                        "args": {"name": f"wg{wgi} wave{wave} (SIMD {simd})"}})
        d = prog.decoded[idx]
        slot_end = t + 4 if kind == "mfma" else end
        out.append({"ph": "X", "pid": 0, "tid": tid, "name": d.opcode, "cat": kind, "ts": t * us,
                    "dur": max(1, slot_end - t) * us, "args": {"line": d.line, "cycle": t}})
        if kind == "mfma":
            if ("p", simd) not in seen:
                seen.add(("p", simd))
                out.append({"ph": "M", "pid": 1, "tid": simd, "name": "thread_name", "args": {"name": f"SIMD {simd} MFMA"}})
            out.append({"ph": "X", "pid": 1, "tid": simd, "name": d.opcode, "cat": "mfma", "ts": t * us,
                        "dur": (end - t) * us, "args": {"line": d.line, "wave": f"wg{wgi} wave{wave}", "cycle": t}})
    return {"traceEvents": out, "displayTimeUnit": "ns",
            "otherData": {"label": "modelled", "model_version": timing["model_version"], "clock_ghz": clk}}


def write(path, timing: dict, prog) -> None:
    data = chrome_trace(timing, prog)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    import os
    os.replace(tmp, path)
