"""``python -m gfx950emu.timing FILE.s --grid X[,Y,Z] --block N [--buffers ...] [--json] [--trace out.json]``

Runs the timing model on any single-kernel gfx950 ``.s`` (or a code object, when
``gfx950emu.load_code_object`` is available).  Kernel arguments the caller does not describe are
synthesised: every ``global_buffer`` gets a zero-filled buffer of ``--buffer-bytes`` (default
64 MiB), or the size given per argument with ``--buffers NAME=BYTES,...`` (or ``INDEX=BYTES``);
every ``by_value`` argument is 0 unless given with ``--values NAME=INT,...``.  Zero-filled data
keeps the control flow of kernels whose branches depend only on sizes and ids (GEMMs); a kernel
that reads indices or counts from its buffers (MoE routing) needs real inputs, so use
``mxfp4-ablation model`` or ``gfx950emu.launch`` for those.  ``--micro`` prints the micro-kernel
table instead.  Every number printed is modelled.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def _dims(text, what):
    try:
        t = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise ValueError(f"{what} must be up to three comma-separated positive integers, got {text!r}") from None
    if not 1 <= len(t) <= 3 or min(t) < 1:
        raise ValueError(f"{what} must be up to three comma-separated positive integers, got {text!r}")
    return t


def _kv(text, what):
    out = {}
    for part in filter(None, (text or "").split(",")):
        if "=" not in part:
            raise ValueError(f"{what} entries are NAME=INT, got {part!r}")
        k, v = part.split("=", 1)
        try:
            out[k.strip()] = int(v, 0)
        except ValueError:
            raise ValueError(f"{what}: {part!r} is not NAME=INT") from None
    return out


def synth_args(prog, buffer_bytes, buffers=None, values=None):
    """Zero-filled buffers / zero values for every user argument of ``prog`` (see the module doc)."""
    buffers, values = dict(buffers or {}), dict(values or {})
    args = []
    user = [a for a in prog.args if not str(a.get(".value_kind", "")).startswith("hidden_")]
    for k, a in enumerate(user):
        name = str(a.get(".name", k))
        if a.get(".value_kind") == "global_buffer":
            n = buffers.pop(name, buffers.pop(str(k), buffer_bytes))
            args.append(np.zeros(max(16, n), np.uint8))
        else:
            args.append(values.pop(name, values.pop(str(k), 0)))
    left = list(buffers) + list(values)
    if left:
        raise ValueError(f"no kernel argument named {left[0]!r}; arguments: {', '.join(str(a.get('.name', k)) for k, a in enumerate(user))}")
    return args


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gfx950emu.timing", description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", help="gfx950 .s text (or .co/.hsaco code object)")
    ap.add_argument("--kernel", help="kernel name when the file holds several")
    ap.add_argument("--grid", default="1", help="workgroups X[,Y,Z] (default 1)")
    ap.add_argument("--block", default="256", help="work-items X[,Y,Z] (default 256)")
    ap.add_argument("--buffer-bytes", type=int, default=64 << 20, help="size of each synthesised buffer")
    ap.add_argument("--buffers", help="per-argument buffer sizes NAME=BYTES,...")
    ap.add_argument("--values", help="by_value arguments NAME=INT,...")
    ap.add_argument("--sample", type=int, help="simulate only this many of the first CU's workgroups")
    ap.add_argument("--flops", type=float, help="the kernel's flop count (default: MFMA flops executed)")
    ap.add_argument("--json", action="store_true", help="print res.timing as JSON")
    ap.add_argument("--trace", help="write a Chrome-trace/Perfetto JSON timeline here")
    ap.add_argument("--micro", action="store_true", help="print the micro-kernel validation table")
    ns = ap.parse_args(argv)
    try:
        return _run(ns)
    except (ValueError, OSError) as e:
        print(f"python -m gfx950emu.timing: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2


def _run(ns) -> int:
    import gfx950emu
    from . import micro, trace
    if ns.micro:
        rows = micro.run()
        hw = micro.run_hardware()
        print(json.dumps({"consistency": rows, "hardware": hw}, indent=2) if ns.json else
              micro.table(rows) + "\n\nagainst published hardware measurements (modelled at the model clock):\n"
              + micro.hardware_table(hw))
        return 0
    if not ns.file:
        raise ValueError("give a .s file (or --micro)")
    if ns.file.endswith((".co", ".hsaco")):
        loader = getattr(gfx950emu, "load_code_object", None)
        if loader is None:
            raise ValueError("this gfx950emu has no code-object loader (load_code_object); pass the .s text")
        prog = loader(ns.file, kernel=ns.kernel)
    else:
        with open(ns.file) as f:
            prog = gfx950emu.load(f.read(), kernel=ns.kernel)
    grid, block = _dims(ns.grid, "--grid"), _dims(ns.block, "--block")
    args = synth_args(prog, ns.buffer_bytes, _kv(ns.buffers, "--buffers"), _kv(ns.values, "--values"))
    res = gfx950emu.launch(prog, grid, block, args, timing=True, flops=ns.flops, timing_sample=ns.sample,
                           timing_trace=bool(ns.trace))
    t = res.timing
    if ns.trace:
        trace.write(ns.trace, t, prog)
    t = {k: v for k, v in t.items() if k != "trace_events"}
    if ns.json:
        print(json.dumps(t, indent=2))
        return 0
    k = t["kernel"]
    print(f"{prog.name}: modelled (gfx950emu.timing {t['model_version']}, clock {t['clock_ghz']} GHz)")
    print(f"  workgroup: {t['cycles']} cycles, {t['mfma_count']} MFMAs, cycles/MFMA (hot loop) {t['cycles_per_mfma_loop']}, "
          f"MFMA busy {t['mfma_busy']}")
    print(f"  exposed cycles per SIMD: {t['exposed']}")
    print(f"  kernel: {k['us']} us, {k['tflops']} TFLOPS, {k['bound']}-bound, {k['rounds']} rounds, "
          f"HBM {k['bytes_hbm']} B, L2 {k['bytes_l2']} B (sampled {len(t['sampled_workgroups'])} workgroups)")
    if ns.trace:
        print(f"  timeline: {ns.trace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
