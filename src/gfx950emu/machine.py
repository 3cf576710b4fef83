"""Load a kernel, set up its launch state, run its workgroups.

Launch state follows LLVM AMDGPUUsage, "Initial Kernel Execution State" (GFX9
family incl. gfx90a/gfx942/gfx950) and the kernel descriptor fields of
"Code Object V3+ Kernel Descriptor" / "AMDHSA Kernel Assembler Directives":

* user SGPRs, in this order and each only when its ``.amdhsa_user_sgpr_*``
  enable is 1: private segment buffer (4), dispatch ptr (2), queue ptr (2),
  kernarg segment ptr (2), dispatch id (2), flat scratch init (2), private
  segment size (1); then ``kernarg_preload_length`` dwords of preloaded
  kernel arguments (gfx940+).  System SGPRs follow at ``user_sgpr_count``:
  workgroup id x, y, z (each when enabled), workgroup info.
* v0 holds the work-item id; on gfx90a+ the ids are packed into v0 (X in
  bits 9:0, Y in 19:10, Z in 29:20) when ``system_vgpr_workitem_id`` enables
  them (0: X only, 1: X and Y, 2: X, Y and Z).
* the unified VGPR file holds 512 registers per lane; AGPR ``aN`` is unified
  register ``accum_offset + N`` (``.amdhsa_accum_offset``, gfx90a+).
* scratch: gfx940+ use architected flat scratch, so no private-segment SGPRs
  are set up; each lane gets ``.amdhsa_private_segment_fixed_size`` private
  bytes for ``scratch_*`` instructions.
* LDS size: ``.amdhsa_group_segment_fixed_size`` (plus any dynamic LDS given
  by the caller); wave64 (``.amdhsa_wavefront_size32`` must be 0 or absent).

Waves of one workgroup run cooperatively: each runs until ``s_barrier`` or
``s_endpgm``; when every live wave has reached the barrier they all go on.
Workgroups are independent and may run in forked worker processes; their
stores and atomics are journaled and replayed in workgroup order, so the
bytes written are the same as with one process.
"""
from __future__ import annotations

import functools
import multiprocessing
import random
import struct
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .errors import ExecError
from .kernel import decode_kernel
from .memory import FlatMemory, LazyBuffer
from .operands import BARRIER, ENDPGM, int_to_mask, mask_to_int
from .parser import parse_module

NVGPR = 512
M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF
_ALL_LANES = np.ones(64, dtype=bool)
_ALL_ACTIVE = np.arange(64)
_NO_SCRATCH = np.zeros((64, 0), dtype=np.uint8)


@dataclass
class Program:
    """A decoded kernel ready to launch."""

    name: str
    source: object
    decoded: list
    descriptor: dict
    metadata: dict
    args: list
    lds_size: int
    accum_offset: int
    kernarg_size: int
    returning_atomics: list = field(default_factory=list)

    @property
    def instructions(self):
        return self.source.instructions


def load(isa_text: str, kernel: str | None = None) -> Program:
    """Parse and pre-decode one kernel of an ``.s`` text (the only one if ``kernel`` is None)."""
    ks = parse_module(isa_text)
    if kernel is None:
        if len(ks) != 1:
            raise ValueError(f"the ISA text holds {len(ks)} kernels ({', '.join(sorted(ks))}); pass kernel=NAME")
        src = next(iter(ks.values()))
    else:
        if kernel not in ks:
            raise ValueError(f"kernel {kernel!r} is not in the ISA text; it holds: {', '.join(sorted(ks))}")
        src = ks[kernel]
    desc = src.descriptor
    if desc.get("wavefront_size32"):
        raise ValueError(f"kernel {src.name} is wave32; gfx950 kernels are wave64")
    acc = int(desc.get("accum_offset", 256))
    if not 4 <= acc <= 256 or acc % 4:
        raise ValueError(f"kernel {src.name}: .amdhsa_accum_offset {acc} is not a multiple of 4 in 4..256")
    decoded = decode_kernel(src, acc, NVGPR)
    meta = src.metadata or {}
    lds = int(desc.get("group_segment_fixed_size", meta.get(".group_segment_fixed_size", 0)) or 0)
    ksize = int(desc.get("kernarg_size", meta.get(".kernarg_segment_size", 0)) or 0)
    ret_atomics = [d.line for d in decoded if "atomic" in d.opcode and d.vwrites]
    return Program(src.name, src, decoded, desc, meta, list(meta.get(".args") or []), lds, acc,
                   ksize, ret_atomics)


# ------------------------------------------------------------------ waves ----
class Wave:
    """Architectural state of one wave64."""

    __slots__ = ("v", "s", "scc", "exec_mask", "exec_full", "active", "pc", "lds", "lds32",
                 "mem", "hz", "id", "epoch", "counts", "done", "executed", "scratch", "private",
                 "defer", "land", "log", "at_barrier")

    def __init__(self, wid, lds, lds32, mem, ninstr):
        self.v = np.zeros((NVGPR, 64), dtype=np.uint32)
        self.s = [0] * 128
        self.scc = 0
        self.pc = 0
        self.lds = lds
        self.lds32 = lds32
        self.mem = mem
        self.hz = None
        self.id = wid
        self.epoch = 0
        self.counts = np.zeros(ninstr + 1, dtype=np.int64)
        self.done = False
        self.executed = 0
        self.exec_mask = _ALL_LANES
        self.exec_full = True
        self.active = _ALL_ACTIVE
        self.scratch = _NO_SCRATCH
        self.private = None     # (lanes, their byte offsets) of the last scratch access: the timing model's caches
        self.defer = False      # delivery "late"/"random": memory handlers leave their writes in self.land
        self.land = None
        self.log = None
        self.at_barrier = False

    def sync_exec(self):
        """Refresh the cached EXEC views after s[126:127] changed."""
        e = self.s[126] | (self.s[127] << 32)
        if e == M64:
            self.exec_full, self.exec_mask, self.active = True, _ALL_LANES, _ALL_ACTIVE
        else:
            self.exec_full = False
            self.exec_mask = int_to_mask(e)
            self.active = np.flatnonzero(self.exec_mask)


def _off_end(w):
    raise ExecError(f"wave {w.id} ran past the last instruction without s_endpgm")


def _checked(fn, d, hz):
    """``fn`` between the hazard tracker's checks of instruction ``d`` (what it reads, then what it issues)."""
    def step(w):
        hz.before(w, d)
        r = fn(w)
        hz.after(w, d)
        return r
    return step


def _run(w, fns, budget, hz=None, tick=False, steps=None):
    """The interpreter loop: run wave ``w`` until an instruction returns a signal (BARRIER, ENDPGM), and
    return it -- or, given ``steps``, for at most that many instructions (0 when the slice ran out).

    The delivery mode is the strategy: with a hazard tracker ``hz`` the handlers in ``fns`` are wrapped in
    its checks (:func:`_checked`) and it is told when the wave ends; ``tick`` (delivery "random") lands,
    after every instruction, the deferred ops whose drawn time has come.  ``budget`` bounds the wave's
    instructions in all (an endless loop is an error)."""
    counts = w.counts
    n = 0
    while True:
        i = w.pc
        w.pc = i + 1
        counts[i] += 1
        r = fns[i](w)
        w.executed += 1
        n += 1
        if tick:
            hz.land_due(w)
        if r:
            if r == ENDPGM and hz is not None:
                hz.endpgm(w)
            return r
        if w.executed > budget:
            raise ExecError(f"wave {w.id} executed more than {budget} instructions (endless loop?)")
        if n == steps:
            return 0


# ------------------------------------------------------------ arguments ----
def _byte_view(x, what):
    """(uint8 numpy view sharing x's memory, writeable) for a numpy array or CPU torch tensor."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        torch = sys.modules["torch"]
        if x.device.type != "cpu":
            raise ValueError(f"{what} is a torch tensor on {x.device}; pass a CPU tensor")
        if not x.is_contiguous():
            raise ValueError(f"{what} is not contiguous; pass x.contiguous()")
        flat = x.detach().reshape(-1)
        if flat.numel() == 0:
            return np.zeros(0, np.uint8), False
        return flat.view(torch.uint8).numpy(), True
    if isinstance(x, np.ndarray):
        if not x.flags.c_contiguous:
            raise ValueError(f"{what} is not C-contiguous; pass np.ascontiguousarray(x)")
        return x.reshape(-1).view(np.uint8), bool(x.flags.writeable)
    if isinstance(x, (bytes, bytearray, memoryview)):
        return np.frombuffer(x, dtype=np.uint8), False
    raise ValueError(f"{what} must be a numpy array or a CPU torch tensor, got {type(x).__name__}")


def _is_array(x):
    return isinstance(x, (np.ndarray, LazyBuffer)) or type(x).__module__.startswith("torch")


_HIDDEN = ("hidden_",)


def _pack_value(v, size, what):
    if isinstance(v, (bytes, bytearray)):
        if len(v) != size:
            raise ValueError(f"{what} takes {size} bytes, got {len(v)}")
        return bytes(v)
    if isinstance(v, (bool, np.bool_)):
        v = int(v)
    if isinstance(v, (int, np.integer)):
        v = int(v)
        if not -(1 << (8 * size - 1)) <= v < (1 << (8 * size)):
            raise ValueError(f"{what} = {v} does not fit in {size} bytes")
        return (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    if isinstance(v, (float, np.floating)):
        if size == 4:
            return struct.pack("<f", float(v))
        if size == 8:
            return struct.pack("<d", float(v))
        if size == 2:
            return np.float16(v).tobytes()
    raise ValueError(f"{what} must be an int or float (size {size}), got {type(v).__name__}")


class _Launch:
    """Everything one launch needs that does not change between workgroups."""

    def __init__(self, prog, grid, block, args, lds_bytes):
        self.prog = prog
        self.grid = grid
        self.block = block
        self.mem = FlatMemory()
        user_args = [a for a in prog.args if not str(a.get(".value_kind", "")).startswith(_HIDDEN)]
        if len(args) != len(user_args):
            names = [a.get(".name", f"#{k}") for k, a in enumerate(user_args)]
            raise ValueError(f"kernel {prog.name} takes {len(user_args)} arguments ({', '.join(map(str, names))}), "
                             f"got {len(args)}")
        mapped = []          # (addr, source bytes, view for write-back or None)
        kargs = bytearray(max(prog.kernarg_size, 8))
        for k, (meta, val) in enumerate(zip(user_args, args)):
            what = f"argument {k} ({meta.get('.name', meta.get('.value_kind'))})"
            if isinstance(val, dict):          # a described entry: {"tensor": ...} or {"bytes": ...}
                if "tensor" in val:
                    val = val["tensor"]
                elif "bytes" in val:
                    val = bytes(val["bytes"])
                else:
                    raise ValueError(f"{what} is a dict without a 'tensor' or 'bytes' entry")
            off, size = int(meta.get(".offset", 0)), int(meta.get(".size", 0))
            if off + size > len(kargs):
                kargs.extend(b"\0" * (off + size - len(kargs)))
            kind = meta.get(".value_kind")
            if kind == "global_buffer" or (kind == "by_value" and size == 8 and _is_array(val)):
                if isinstance(val, LazyBuffer):       # bytes made on first touch (see memory.LazyBuffer)
                    addr = self.mem.reserve(f"arg{k}", val.nbytes, source=val)
                    kargs[off:off + size] = addr.to_bytes(size, "little")
                    continue
                if val is None:
                    kargs[off:off + size] = b"\0" * size
                    continue
                if not _is_array(val) and not isinstance(val, (bytes, bytearray, memoryview)):
                    if kind == "global_buffer" and isinstance(val, (int, np.integer)):
                        kargs[off:off + size] = _pack_value(val, size, what)   # a raw address
                        continue
                    raise ValueError(f"{what} is a buffer: pass a numpy array or CPU torch tensor")
                view, writeable = _byte_view(val, what)
                addr = self.mem.reserve(f"arg{k}", view.size, source=view)
                mapped.append((addr, view, writeable))
                kargs[off:off + size] = addr.to_bytes(size, "little")
            elif kind == "by_value":
                if _is_array(val) or val is None:
                    raise ValueError(f"{what} is a {size}-byte value, not a buffer")
                kargs[off:off + size] = _pack_value(val, size, what)
            else:
                raise ValueError(f"{what}: argument kind {kind!r} is not supported")
        self._fill_hidden(prog, kargs)
        self.kernarg_addr = self.mem.reserve("kernarg", len(kargs))
        self.dispatch_addr = self.mem.reserve("dispatch_packet", 64)
        self.mem.finalize()
        self.mem.write_bytes(self.kernarg_addr, bytes(kargs))
        self.mem.write_bytes(self.dispatch_addr, self._dispatch_packet())
        self.mapped = mapped
        self.lds_size = prog.lds_size + int(lds_bytes or 0)
        if self.lds_size > 160 * 1024:
            raise ValueError(f"kernel {prog.name} asks for {self.lds_size} bytes of LDS; gfx950 has 163840")

    def _fill_hidden(self, prog, kargs):
        g, b = self.grid, self.block
        values = {
            "hidden_block_count_x": g[0], "hidden_block_count_y": g[1], "hidden_block_count_z": g[2],
            "hidden_group_size_x": b[0], "hidden_group_size_y": b[1], "hidden_group_size_z": b[2],
            "hidden_remainder_x": 0, "hidden_remainder_y": 0, "hidden_remainder_z": 0,
            "hidden_grid_dims": 1 + (g[1] * b[1] > 1 or g[2] * b[2] > 1) + (g[2] * b[2] > 1),
            "hidden_global_offset_x": 0, "hidden_global_offset_y": 0, "hidden_global_offset_z": 0,
        }
        for a in prog.args:
            kind = str(a.get(".value_kind", ""))
            if not kind.startswith("hidden_"):
                continue
            off, size = int(a.get(".offset", 0)), int(a.get(".size", 0))
            if off + size > len(kargs):
                kargs.extend(b"\0" * (off + size - len(kargs)))
            kargs[off:off + size] = int(values.get(kind, 0)).to_bytes(size, "little")

    def _dispatch_packet(self):
        """hsa_kernel_dispatch_packet_t: workgroup sizes (u16 at 4,6,8), grid sizes in work-items (u32 at 12,16,20)."""
        p = bytearray(64)
        g, b = self.grid, self.block
        struct.pack_into("<HHHHHIII", p, 2, 3, b[0], b[1], b[2], 0, g[0] * b[0], g[1] * b[1], g[2] * b[2])
        return bytes(p)

    def write_back(self):
        """Copy the kernel's writes back into the caller's arrays (lazily mapped: the chunks it touched)."""
        from .memory import HEAP_BASE

        for addr, view, writeable in self.mapped:
            off = addr - HEAP_BASE
            for lo, hi in self.mem.materialised_ranges(off, view.size):
                new = self.mem.heap[off + lo:off + hi]
                if not np.array_equal(new, view[lo:hi]):
                    if not writeable:
                        raise ValueError("the kernel wrote into a read-only argument buffer")
                    view[lo:hi] = new


def _init_wave(L, w, wg, wave_in_wg):
    """Set SGPRs/VGPRs/EXEC of one wave at dispatch (AMDGPUUsage initial state)."""
    desc = L.prog.descriptor
    s = w.s
    k = 0
    if desc.get("user_sgpr_private_segment_buffer"):
        k += 4
    if desc.get("user_sgpr_dispatch_ptr"):
        s[k], s[k + 1] = L.dispatch_addr & M32, L.dispatch_addr >> 32
        k += 2
    if desc.get("user_sgpr_queue_ptr"):
        k += 2
    if desc.get("user_sgpr_kernarg_segment_ptr"):
        s[k], s[k + 1] = L.kernarg_addr & M32, L.kernarg_addr >> 32
        k += 2
    if desc.get("user_sgpr_dispatch_id"):
        k += 2
    if desc.get("user_sgpr_flat_scratch_init"):
        k += 2
    if desc.get("user_sgpr_private_segment_size"):
        k += 1
    npre = int(desc.get("user_sgpr_kernarg_preload_length", 0) or 0)
    if npre:
        poff = int(desc.get("user_sgpr_kernarg_preload_offset", 0) or 0)
        kb = L.mem.read_bytes(L.kernarg_addr + 4 * poff, 4 * npre).view("<u4")
        for j in range(npre):
            s[k + j] = int(kb[j])
        k += npre
    k = int(desc.get("user_sgpr_count", k))
    for dim, key in enumerate(("x", "y", "z")):
        if desc.get(f"system_sgpr_workgroup_id_{key}", 1 if key == "x" else 0):
            s[k] = wg[dim]
            k += 1
    bx, by, bz = L.block
    tid = wave_in_wg * 64 + np.arange(64)
    nthreads = bx * by * bz
    x, y, z = tid % bx, (tid // bx) % by, tid // (bx * by)
    level = int(desc.get("system_vgpr_workitem_id", 0) or 0)
    packed = x.copy()
    if level >= 1:
        packed |= y << 10
    if level >= 2:
        packed |= z << 20
    w.v[0] = np.where(tid < nthreads, packed, 0).astype(np.uint32)
    live = tid < nthreads
    e = mask_to_int(live)
    s[126], s[127] = e & M32, e >> 32
    w.sync_exec()


DELIVERIES = ("issue", "late", "random")
WAVE_ORDERS = ("forward", "reverse", "random")


def _run_workgroup(L, wg, hz_mode, budget, order=None):
    """Run one workgroup; returns (per-wave counts, hazard reports, out-of-range buffer lanes).

    ``order`` is None (delivery "issue", waves forward: the fast path) or (delivery, wave_order, seed)."""
    from .hazards import EventLog, HazardTracker
    prog = L.prog
    bx, by, bz = L.block
    nwaves = (bx * by * bz + 63) // 64
    lds = np.zeros((L.lds_size + 3) // 4 * 4, dtype=np.uint8)
    lds32 = lds.view(np.uint32)
    delivery, wave_order, seed = order or ("issue", "forward", 0)
    rng = None
    if "random" in (delivery, wave_order):
        rng = random.Random(f"gfx950emu/{seed}/{wg[0]}/{wg[1]}/{wg[2]}")   # same draws in any process
    tracker = None
    if hz_mode != "off" or delivery != "issue":      # deferred delivery lands ops as the tracker retires them
        tracker = HazardTracker(hz_mode if hz_mode != "off" else "report", lds.size, wg, prog.accum_offset,
                                rng if delivery == "random" else None, prog.instructions)
    log = EventLog(hz_mode, lds.size, wg)
    fns = [d.fn if tracker is None else _checked(d.fn, d, tracker) for d in prog.decoded] + [_off_end]
    waves = []
    for i in range(nwaves):
        w = Wave(i, lds, lds32, L.mem, len(prog.decoded))
        w.hz = tracker
        w.log = log
        w.defer = delivery != "issue"
        priv = int(prog.descriptor.get("private_segment_fixed_size", 0) or 0)
        if priv:
            w.scratch = np.zeros((64, (priv + 3) // 4 * 4), dtype=np.uint8)
        _init_wave(L, w, wg, i)
        waves.append(w)
    with np.errstate(all="ignore"):      # IEEE results (inf, nan) are data here, not warnings
        _schedule(waves, functools.partial(_run, fns=fns, budget=budget, hz=tracker, tick=delivery == "random"),
                  wave_order, rng)
    reports = (tracker.reports if tracker is not None and hz_mode != "off" else []) + log.reports
    return [w.counts[:-1] for w in waves], reports, log.out_of_range


def _schedule(waves, run, wave_order, rng):
    """Run the waves of one workgroup (``run(wave[, steps=n])``: the interpreter loop): forward or reverse,
    each up to its next barrier, or -- for wave_order "random", the adversarial order -- a seeded random
    ready wave for a random slice of 1..64 instructions at a time (a barrier releases when every live
    wave has reached it; an ended wave counts as arrived)."""
    if wave_order != "random":
        seq = waves if wave_order == "forward" else waves[::-1]
        while True:
            for w in seq:
                if not w.done and run(w) == ENDPGM:
                    w.done = True
            live = [w for w in waves if not w.done]
            if not live:
                return
            for w in live:
                w.epoch += 1
    while True:
        ready = [w for w in waves if not w.done and not w.at_barrier]
        if not ready:
            live = [w for w in waves if not w.done]
            if not live:
                return
            for w in live:
                w.at_barrier = False
                w.epoch += 1
            continue
        w = ready[rng.randrange(len(ready))] if len(ready) > 1 else ready[0]
        r = run(w, steps=rng.randint(1, 64))
        if r == ENDPGM:
            w.done = True
        elif r == BARRIER:
            w.at_barrier = True


# ----------------------------------------------------------------- stats ----
@dataclass
class Stats:
    """Executed instruction counts: totals and per wave (workgroup, wave index)."""

    by_opcode: dict
    by_class: dict
    per_wave: list          # dicts: workgroup, wave, instructions, by_opcode, by_class
    #: out-of-range buffer lanes (loads read 0, stores and atomics dropped): opcode -> {line: lanes}
    out_of_range: dict = field(default_factory=dict)

    @property
    def instructions(self) -> int:
        return int(sum(self.by_opcode.values()))


@dataclass
class Result:
    hazards: list
    stats: Stats
    seconds: float
    timing: dict | None = None      # timing=True: the modelled clock (gfx950emu.timing), else None


def _make_stats(prog, results):
    ops = [d.opcode for d in prog.decoded]
    classes = [d.cls for d in prog.decoded]
    op_names = sorted(set(ops))
    cls_names = sorted(set(classes))
    op_id = np.array([op_names.index(o) for o in ops], dtype=np.int64)
    cls_id = np.array([cls_names.index(c) for c in classes], dtype=np.int64)
    tot_op = np.zeros(len(op_names), dtype=np.int64)
    tot_cls = np.zeros(len(cls_names), dtype=np.int64)
    per_wave = []
    for wg, counts in results:
        for wi, c in enumerate(counts):
            bo = np.bincount(op_id, weights=c, minlength=len(op_names)).astype(np.int64)
            bc = np.bincount(cls_id, weights=c, minlength=len(cls_names)).astype(np.int64)
            tot_op += bo
            tot_cls += bc
            per_wave.append({
                "workgroup": wg, "wave": wi, "instructions": int(c.sum()),
                "by_opcode": {op_names[k]: int(n) for k, n in enumerate(bo) if n},
                "by_class": {cls_names[k]: int(n) for k, n in enumerate(bc) if n},
            })
    return Stats({op_names[k]: int(n) for k, n in enumerate(tot_op) if n},
                 {cls_names[k]: int(n) for k, n in enumerate(tot_cls) if n}, per_wave)


# ---------------------------------------------------------------- timing ----
def _launch_timing(L, wgs, hazards, flops, sample, overrides, trace, t0):
    from . import timing as T
    from .hazards import EventLog
    if hazards != "off":
        raise ValueError("timing=True runs without the hazard checker; pass hazards='off' (check hazards in a plain launch)")
    prog = L.prog
    bx, by, bz = L.block
    nwaves = (bx * by * bz + 63) // 64
    priv = int(prog.descriptor.get("private_segment_fixed_size", 0) or 0)
    done = []

    logs = []

    def make_waves(wg):
        lds = np.zeros((L.lds_size + 3) // 4 * 4, dtype=np.uint8)
        lds32 = lds.view(np.uint32)
        log = EventLog("off", lds.size, wg)     # LDS outside the allocation, out-of-range buffer lanes
        logs.append(log)
        waves = []
        for i in range(nwaves):
            w = Wave(i, lds, lds32, L.mem, len(prog.decoded))
            w.log = log
            if priv:
                w.scratch = np.zeros((64, (priv + 3) // 4 * 4), dtype=np.uint8)
            _init_wave(L, w, wg, i)
            waves.append(w)
        done.append((wg, waves))
        return waves
    touched = T.track_touched(L.mem)
    try:
        timing = T.simulate(L, wgs, make_waves, sample=sample, flops=flops, overrides=overrides, trace=trace,
                            touched=touched)
    finally:
        touched.detach()
    L.write_back()
    results = [(wg, [w.counts[:-1] for w in ws]) for wg, ws in done]
    stats = _make_stats(prog, results)
    oob = {}
    for log in logs:
        _add_oob(oob, log.out_of_range)
    stats.out_of_range = oob
    return Result([r for log in logs for r in log.reports], stats, time.perf_counter() - t0, timing)


# ---------------------------------------------------------------- launch ----
_FORK_STATE = None


def _worker(chunk):
    L, hz_mode, budget, order = _FORK_STATE
    out = []
    for k, wg in chunk:
        L.mem.journal = []
        counts, reports, oob = _run_workgroup(L, wg, hz_mode, budget, order)
        out.append((k, wg, L.mem.journal, counts, reports, oob))
    return out


def _add_oob(total, oob):
    for (opcode, line), n in oob.items():
        per = total.setdefault(opcode, {})
        per[line] = per.get(line, 0) + n


def _dims(x, what):
    if isinstance(x, (int, np.integer)):
        x = (int(x),)
    try:
        t = tuple(int(v) for v in x)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be up to three positive integers, got {x!r}") from None
    if not 1 <= len(t) <= 3 or any(v < 1 for v in t):
        raise ValueError(f"{what} must be up to three positive integers, got {x!r}")
    return t + (1,) * (3 - len(t))


def launch(prog: Program, grid=(1, 1, 1), block=(64, 1, 1), args=(), *, hazards: str = "off",
           processes: int = 1, lds_bytes: int = 0, max_instructions: int = 50_000_000,
           delivery: str = "issue", wave_order: str = "forward", seed: int = 0,
           timing: bool = False, flops: float | None = None, timing_sample=None, timing_params: dict | None = None,
           timing_trace: bool = False) -> Result:
    """Run ``prog`` over ``grid`` workgroups of ``block`` work-items.

    ``args`` follow the metadata ``.args`` list one for one (hidden arguments
    are filled in): ``global_buffer`` takes a numpy array / CPU torch tensor
    (mapped into the emulated address space; the kernel's writes are copied
    back into it) or None; ``by_value`` takes an int or float, or an array for
    an 8-byte value (FlyDSL passes some pointers as plain Int64), or exact
    ``bytes``.  A dict ``{"tensor": t}`` / ``{"bytes": b}`` (a described kernarg
    entry) stands for its tensor / bytes.

    ``delivery`` says when a memory op's data lands (``res`` is the same whenever
    a kernel waits correctly): ``"issue"`` at issue (fastest); ``"late"`` only
    when an ``s_waitcnt`` or the end of the wave forces it -- VGPR/SGPR
    destinations, LDS-DMA writes, DS reads, writes and atomics (they touch LDS
    when they complete, in order), atomic return values; vmcnt and DS ops in
    issue order, scalar loads only at ``lgkmcnt(0)``; ``s_barrier`` does not wait
    for memory (gfx90a+); global loads read memory and stores write it at issue.
    ``"random"``: each op lands at a seeded random moment 0..39 instructions
    after issue (in counter order) or when a wait forces it.  ``wave_order``:
    ``"forward"``/``"reverse"`` run the waves in that order, each up to its next
    barrier; ``"random"`` interleaves seeded random slices of 1..64 instructions.
    The late/random modes run the hazard tracker (whatever ``hazards`` says; its
    reports are kept only when ``hazards`` is not "off").  An LDS access outside
    the kernel's allocation is always reported (``lds_outside``).

    ``timing=True`` runs the timing model instead (see :mod:`gfx950emu.timing`): only the sampled
    workgroups execute (``timing_sample``: None = those the first CU receives, an int = the first
    that many of them, or a list of workgroup ids), buffers hold only their writes, and
    ``Result.timing`` holds the modelled cycles and grid figures (``flops``: the kernel's flop
    count for TFLOPS; default the MFMA flops executed; ``timing_params``: parameter overrides
    ``{"section.key": value}``; ``timing_trace``: keep the timeline for a Chrome trace).
    """
    if not isinstance(prog, Program):
        raise ValueError("launch() needs the Program returned by gfx950emu.load()")
    if hazards not in ("off", "report", "strict"):
        raise ValueError(f"hazards must be 'off', 'report' or 'strict', got {hazards!r}")
    grid, block = _dims(grid, "grid"), _dims(block, "block")
    nthreads = block[0] * block[1] * block[2]
    if nthreads > 1024:
        raise ValueError(f"block has {nthreads} work-items; the limit is 1024")
    req = prog.metadata.get(".reqd_workgroup_size")
    if req and tuple(req) != block:
        raise ValueError(f"kernel {prog.name} requires block {tuple(req)}, got {block}")
    if not isinstance(processes, (int, np.integer)) or processes < 1:
        raise ValueError(f"processes must be a positive integer, got {processes!r}")
    if delivery not in DELIVERIES:
        raise ValueError(f"delivery must be one of {', '.join(DELIVERIES)}, got {delivery!r}")
    if wave_order not in WAVE_ORDERS:
        raise ValueError(f"wave_order must be one of {', '.join(WAVE_ORDERS)}, got {wave_order!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    order = None if (delivery, wave_order) == ("issue", "forward") else (delivery, wave_order, int(seed))
    t0 = time.perf_counter()
    L = _Launch(prog, grid, block, list(args), lds_bytes)
    wgs = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    if timing:
        if (delivery, wave_order) != ("issue", "forward"):
            raise ValueError("timing=True runs loads at issue in cycle order; it takes no delivery / wave_order")
        return _launch_timing(L, wgs, hazards, flops, timing_sample, timing_params, timing_trace, t0)
    results, reports, oob = [], [], {}
    if processes > 1 and len(wgs) > 1:
        if prog.returning_atomics:
            raise ValueError(f"kernel {prog.name} uses atomics that return values (line "
                             f"{prog.returning_atomics[0]}); their results depend on workgroup order, run with processes=1")
        global _FORK_STATE
        _FORK_STATE = (L, hazards, max_instructions, order)
        n = min(processes, len(wgs))
        chunks = [[(k, wg) for k, wg in enumerate(wgs) if k % n == j] for j in range(n)]
        try:
            with multiprocessing.get_context("fork").Pool(n) as pool:
                parts = pool.map(_worker, chunks)
        finally:
            _FORK_STATE = None
        flat = sorted((item for part in parts for item in part), key=lambda t: t[0])
        for k, wg, journal, counts, reps, wg_oob in flat:
            L.mem.replay(journal)
            results.append((wg, counts))
            reports.extend(reps)
            _add_oob(oob, wg_oob)
    else:
        for wg in wgs:
            counts, reps, wg_oob = _run_workgroup(L, wg, hazards, max_instructions, order)
            results.append((wg, counts))
            reports.extend(reps)
            _add_oob(oob, wg_oob)
    L.write_back()
    stats = _make_stats(prog, results)
    stats.out_of_range = oob
    return Result(reports, stats, time.perf_counter() - t0)
