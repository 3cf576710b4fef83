"""The emulated global address space and the memory-op helpers.

All kernel arguments (and the kernarg segment itself) live in one flat numpy
byte heap mapped at ``HEAP_BASE``; a buffer occupies ``[addr, addr+nbytes)``
and buffers are separated by unmapped guard gaps.  A global access that
touches a byte outside every mapped buffer is a memory fault (an error naming
the line), not a silent read of garbage.

Buffer (MUBUF) addressing follows the CDNA3/CDNA4 ISA guide, "Buffer Instructions / Buffer Addressing": the V# holds base[47:0] (dwords 0-1),
stride (dword1[29:16]), num_records (dword2) and flags (dword3, ADD_TID_ENABLE
is bit 23).  The per-lane byte offset is ``(voffset (offen) + inst_offset) mod
2^32 + soffset``; the address is ``base + offset + index * stride`` with index
= the idxen VGPR (+ lane id with ADD_TID).  Range check (issue #12 fix 1, from
the audit of LLVM's AMDGPU backend, rocjitsu and the CDNA pseudocode): with
idxen and stride != 0 a lane is out of range when ``index >= num_records``
(the offset is not checked against the stride); otherwise each dword of the
access is out of range when its end passes ``num_records`` bytes (soffset
counts); ADD_TID buffers are not range-checked.  Out-of-range loads return 0,
out-of-range stores/atomics are dropped, and the lanes are counted in
``Result.stats.out_of_range``.

Multi-process launches record every store/atomic of a workgroup in a journal
that the parent replays in workgroup order, so processes=N gives the same bytes
as processes=1.

Lazy mapping (issue #24): a launch whose buffers hold more than
:data:`LAZY_MIN_BYTES` maps them lazily.  The heap is allocated zeroed (the
operating system hands out zero pages only when they are written), and a
buffer's bytes are copied in -- from the caller's array, or produced by a
:class:`LazyBuffer`'s ``fill`` -- one :data:`CHUNK`-byte chunk at a time, the
first time an access (load, store or atomic; every one goes through
:meth:`FlatMemory.offsets` / :meth:`FlatMemory.starts`) touches that chunk.
Untouched chunks are never built, so a timing run that executes a few
workgroups of a multi-GB problem costs only what those workgroups read.  Every
byte a kernel can observe is the byte eager mapping would have put there; only
the chunks a launch materialised are compared and written back to the
caller's arrays (the others cannot have changed).
"""
from __future__ import annotations

import bisect

import numpy as np

from .errors import MemoryFault

HEAP_BASE = 0x1_0000_0000
GUARD = 4096
ALIGN = 256
#: Lazy mapping granule (bytes): a chunk is materialised whole on its first touch.
CHUNK_SHIFT = 16
CHUNK = 1 << CHUNK_SHIFT
#: Launches whose buffers hold more bytes than this map them lazily (smaller ones are copied in at once).
LAZY_MIN_BYTES = 64 << 20


def _round_up(x, a):
    return (x + a - 1) // a * a


class LazyBuffer:
    """A kernel argument buffer of ``nbytes`` whose bytes are produced only where a launch touches them.

    ``fill(lo, hi)`` returns the ``hi - lo`` bytes ``[lo, hi)`` of the buffer (anything
    ``np.frombuffer`` / ``np.asarray(..., uint8)`` accepts); it must be deterministic -- the same range,
    the same bytes -- since a chunk may be asked for in any order.  ``fill=None`` is a zero buffer.  The
    launch keeps the buffer's writes in its own memory (nothing is written back to a LazyBuffer).
    """

    __slots__ = ("nbytes", "fill", "name")

    def __init__(self, nbytes: int, fill=None, name: str | None = None):
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"LazyBuffer size must be >= 0, got {nbytes}")
        if fill is not None and not callable(fill):
            raise ValueError("LazyBuffer fill must be a callable fill(lo, hi) -> bytes, or None for zeros")
        self.nbytes, self.fill, self.name = nbytes, fill, name

    @classmethod
    def zeros(cls, nbytes: int, name: str | None = None) -> "LazyBuffer":
        return cls(nbytes, None, name)

    def read(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """The buffer's bytes ``[lo, hi)`` as ``fill`` makes them (a check, or to build it eagerly)."""
        hi = self.nbytes if hi is None else int(hi)
        if not 0 <= lo <= hi <= self.nbytes:
            raise ValueError(f"LazyBuffer range [{lo}, {hi}) is outside its {self.nbytes} bytes")
        if self.fill is None:
            return np.zeros(hi - lo, np.uint8)
        out = self.fill(int(lo), int(hi))
        if isinstance(out, (bytes, bytearray, memoryview)):
            out = np.frombuffer(out, dtype=np.uint8)
        else:
            out = np.ascontiguousarray(out).reshape(-1).view(np.uint8)
        if out.size != hi - lo:
            raise ValueError(f"LazyBuffer {self.name or ''} fill({lo}, {hi}) returned {out.size} bytes, "
                             f"not {hi - lo}")
        return out

    def __repr__(self):
        return f"LazyBuffer({self.nbytes}, {'zeros' if self.fill is None else 'fill'}, name={self.name!r})"


class FlatMemory:
    """One byte heap holding every mapped buffer; addresses are 64-bit ints."""

    def __init__(self):
        self.regions = []          # (name, offset, nbytes)
        self._sources = []         # (offset, nbytes, source): a uint8 array or a LazyBuffer (None: zeros)
        self._size = GUARD
        self.heap = None
        self.journal = None        # list while journaling (multi-process workers)
        self.lazy = False
        self._npending = 0

    # ---- set-up (before finalize) ----
    def reserve(self, name: str, nbytes: int, source=None) -> int:
        """Reserve ``nbytes`` and return the buffer's address.  ``source``: the bytes the buffer starts
        with (a uint8 numpy array of ``nbytes``, or a :class:`LazyBuffer`); None leaves it zero (or for
        :meth:`write_bytes` after :meth:`finalize`)."""
        off = _round_up(self._size, ALIGN)
        self.regions.append((name, off, int(nbytes)))
        self._size = off + _round_up(max(int(nbytes), 1), ALIGN) + GUARD
        if source is not None and not (isinstance(source, LazyBuffer) and source.fill is None) and int(nbytes):
            self._sources.append((off, int(nbytes), source))
        return HEAP_BASE + off

    def finalize(self, lazy: bool | None = None):
        """Allocate the heap and place the sources: at once, or (``lazy``; default: when they hold more
        than :data:`LAZY_MIN_BYTES`) chunk by chunk on first touch."""
        self._size = _round_up(self._size, 16)
        self.heap = np.zeros(self._size, dtype=np.uint8)
        self.heap32 = self.heap.view(np.uint32)
        self._starts = np.array([off for _, off, _ in self.regions], dtype=np.int64)
        self._ends = np.array([off + n for _, off, n in self.regions], dtype=np.int64)
        self._starts_list, self._ends_list = self._starts.tolist(), self._ends.tolist()
        if lazy is None:
            lazy = sum(n for _, n, _ in self._sources) > LAZY_MIN_BYTES
        self.lazy = bool(lazy)
        if not self.lazy:
            for off, n, src in self._sources:
                self.heap[off:off + n] = src.read() if isinstance(src, LazyBuffer) else src
            self._sources = []
            return
        self._src_starts = np.array([off for off, _, _ in self._sources], dtype=np.int64)
        self._pending = np.zeros(-(-self._size // CHUNK), dtype=bool)
        for off, n, _ in self._sources:
            self._pending[off >> CHUNK_SHIFT:((off + n - 1) >> CHUNK_SHIFT) + 1] = True
        self._npending = int(self._pending.sum())
        #: chunks materialised so far (a bool per chunk; write-back and tests read it)
        self.materialised = np.zeros_like(self._pending)

    # ---- lazy chunks ----
    def _materialise(self, chunks) -> None:
        """Build every still-pending chunk of ``chunks`` (chunk indices) from the sources it overlaps."""
        for c in chunks:
            c = int(c)
            if not self._pending[c]:
                continue
            lo, hi = c << CHUNK_SHIFT, (c + 1) << CHUNK_SHIFT
            k = max(0, int(np.searchsorted(self._src_starts, lo, side="right")) - 1)
            while k < len(self._sources) and self._sources[k][0] < hi:
                off, n, src = self._sources[k]
                a, b = max(lo, off), min(hi, off + n)
                if a < b:
                    self.heap[a:b] = src.read(a - off, b - off) if isinstance(src, LazyBuffer) \
                        else src[a - off:b - off]
                k += 1
            self._pending[c] = False
            self.materialised[c] = True
            self._npending -= 1

    def _touch(self, first: np.ndarray, last: np.ndarray) -> None:
        """Materialise the chunks holding heap offsets ``first`` .. ``last`` (inclusive, element-wise)."""
        c0, c1 = first >> CHUNK_SHIFT, last >> CHUNK_SHIFT
        c0 = np.clip(c0, 0, self._pending.size - 1)
        c1 = np.clip(c1, 0, self._pending.size - 1)
        if not (self._pending[c0].any() or self._pending[c1].any()):
            return
        span = c1 - c0
        if span.size and int(span.max()) > 1:   # an access wider than two chunks: every chunk in between
            chunks = np.unique(np.concatenate([np.arange(a, b + 1) for a, b in zip(c0.tolist(), c1.tolist())]))
        else:
            chunks = np.unique(np.concatenate([c0, c1]))
        self._materialise(chunks[self._pending[chunks]])

    def materialised_ranges(self, off: int, n: int) -> list:
        """``[(lo, hi), ...]`` byte ranges (relative to the buffer at heap offset ``off``) that a launch
        may have read or written: the whole buffer when mapped eagerly, its materialised chunks when lazy."""
        if not self.lazy or n == 0:
            return [(0, n)] if n else []
        c0, c1 = off >> CHUNK_SHIFT, (off + n - 1) >> CHUNK_SHIFT
        out = []
        for c in np.flatnonzero(self.materialised[c0:c1 + 1]).tolist():
            lo, hi = max(off, (c0 + c) << CHUNK_SHIFT), min(off + n, (c0 + c + 1) << CHUNK_SHIFT)
            if out and out[-1][1] == lo - off:
                out[-1] = (out[-1][0], hi - off)
            else:
                out.append((lo - off, hi - off))
        return out

    def write_bytes(self, addr: int, data) -> None:
        b = np.frombuffer(memoryview(data), dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8).reshape(-1)
        off = addr - HEAP_BASE
        if self._npending and b.size:
            self._touch(np.array([off]), np.array([off + b.size - 1]))
        self.heap[off:off + b.size] = b

    def read_bytes(self, addr: int, n: int) -> np.ndarray:
        off = addr - HEAP_BASE
        if self._npending and n:
            self._touch(np.array([off]), np.array([off + n - 1]))
        return self.heap[off:off + n]

    # ---- address checks ----
    def offsets(self, addrs: np.ndarray, nbytes: int, line: int) -> np.ndarray:
        """Heap byte offsets [lanes, nbytes] for byte addresses; faults on unmapped bytes."""
        base = addrs.astype(np.int64) - HEAP_BASE
        idx = base[:, None] + np.arange(nbytes, dtype=np.int64)[None, :]
        if idx.size and not self._in_one_region(int(idx.min()), int(idx.max()) + 1) and not self._ok(idx).all():
            bad = addrs[(~self._ok(idx)).any(axis=1)]
            raise MemoryFault(f"line {line}: global access to unmapped address 0x{int(bad[0]):x} "
                              f"(no argument buffer covers it)")
        if self._npending and idx.size:
            self._touch(idx[:, 0], idx[:, -1])
        return idx

    def _in_one_region(self, lo: int, hi: int) -> bool:
        k = bisect.bisect_right(self._starts_list, lo) - 1
        return k >= 0 and lo >= self._starts_list[k] and hi <= self._ends_list[k]

    def starts(self, addrs: np.ndarray, nbytes: int, line: int) -> np.ndarray:
        """Heap offsets (int64 [lanes]) of accesses of ``nbytes`` each; faults on unmapped bytes.

        Fast path: all accesses inside one mapped buffer (checked on the extremes)."""
        off = addrs.astype(np.int64) - HEAP_BASE
        if off.size == 0:
            return off
        lo, hi = int(off.min()), int(off.max()) + nbytes
        if not self._in_one_region(lo, hi):
            self.offsets(addrs, nbytes, line)      # slow path raises with the faulting address (and touches)
            return off
        # lazy chunks: only when one lies in the accesses' chunk range (else none of theirs is pending)
        if self._npending and self._pending[lo >> CHUNK_SHIFT:((hi - 1) >> CHUNK_SHIFT) + 1].any():
            self._touch(off, off + (nbytes - 1))
        return off

    def gather(self, off: np.ndarray, nbytes: int) -> np.ndarray:
        """Bytes [lanes, nbytes] at heap offsets ``off`` (already validated)."""
        if nbytes % 4 == 0 and not (off & 3).any():
            dw = self.heap32[(off >> 2)[:, None] + np.arange(nbytes // 4)[None, :]]
            return dw.view(np.uint8).reshape(off.size, nbytes)
        return self.heap[off[:, None] + np.arange(nbytes)[None, :]]

    def scatter(self, off: np.ndarray, data: np.ndarray) -> None:
        """Store bytes [lanes, nbytes] at validated heap offsets (journaled when needed)."""
        idx = off[:, None] + np.arange(data.shape[1])[None, :]
        self.store(idx, data)

    def _ok(self, idx):
        """True where a heap offset lies inside a mapped buffer."""
        k = np.searchsorted(self._starts, idx, side="right") - 1
        inr = (k >= 0) & (idx >= 0)
        return inr & (idx < self._ends[np.where(inr, k, 0)])

    # ---- plain loads / stores on [lanes, nbytes] offset arrays ----
    def load(self, idx: np.ndarray) -> np.ndarray:
        return self.heap[idx]

    def store(self, idx: np.ndarray, data: np.ndarray) -> None:
        self.heap[idx] = data
        if self.journal is not None:
            self.journal.append(("st", idx.copy(), np.array(data, copy=True)))

    def atomic(self, op: str, idx: np.ndarray, data: np.ndarray, nbytes: int) -> np.ndarray:
        """Apply an atomic lane by lane (lane order); returns the old values."""
        if self.journal is not None:
            self.journal.append(("at", op, idx.copy(), np.array(data, copy=True), nbytes))
        return apply_atomic(self.heap, op, idx, data, nbytes)

    def replay(self, journal) -> None:
        for entry in journal:
            if self._npending:
                idx = entry[1] if entry[0] == "st" else entry[2]
                if idx.size:
                    self._touch(idx.reshape(-1), idx.reshape(-1))
            if entry[0] == "st":
                self.heap[entry[1]] = entry[2]
            else:
                apply_atomic(self.heap, entry[1], entry[2], entry[3], entry[4])


def _bf16_round(f32: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN."""
    b = f32.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint32)
    nan = np.isnan(f32)
    if nan.any():
        r = np.where(nan, ((b >> 16) | 0x40).astype(np.uint32), r)
    return r & 0xFFFF


def _combine(op: str, old: np.ndarray, val: np.ndarray) -> np.ndarray:
    """New value of one atomic step on uint32 (or uint64) words."""
    if op == "add":
        return old + val
    if op == "sub":
        return old - val
    if op == "swap":
        return val
    if op == "and":
        return old & val
    if op == "or":
        return old | val
    if op == "xor":
        return old ^ val
    if op == "umax":
        return np.maximum(old, val)
    if op == "umin":
        return np.minimum(old, val)
    if op in ("smax", "smin"):
        s = np.int32 if old.dtype == np.uint32 else np.int64
        f = np.maximum if op == "smax" else np.minimum
        return f(old.view(s), val.view(s)).view(old.dtype)
    if op == "inc":
        return np.where(old >= val, 0, old + 1).astype(old.dtype)
    if op == "dec":
        return np.where((old == 0) | (old > val), val, old - 1).astype(old.dtype)
    if op == "add_f32":
        return (old.view(np.float32) + val.view(np.float32)).view(np.uint32)
    if op == "add_f64":
        return (old.view(np.float64) + val.view(np.float64)).view(np.uint64)
    if op in ("pk_add_bf16", "pk_add_f16"):
        halves = []
        for sh in (0, 16):
            a = (old >> sh) & 0xFFFF
            b = (val >> sh) & 0xFFFF
            if op == "pk_add_bf16":
                # bf16 + bf16 is exact enough in f32 that one RNE rounding to bf16 is exact
                s = (a << 16).view(np.float32) + (b << 16).view(np.float32)
                halves.append(_bf16_round(s))
            else:
                s = a.astype(np.uint16).view(np.float16) + b.astype(np.uint16).view(np.float16)
                halves.append(s.view(np.uint16).astype(np.uint32))
        return (halves[0] | (halves[1] << 16)).astype(np.uint32)
    raise ValueError(f"unknown atomic operation {op!r}")


def apply_atomic(heap: np.ndarray, op: str, idx: np.ndarray, data: np.ndarray, nbytes: int) -> np.ndarray:
    """Atomics on [lanes, nbytes] heap offsets; lanes hitting the same word go in lane order.

    ``cmpswap`` takes data [lanes, 2] = (new value, compare value) and stores the new value where
    memory equals the compare value ([ISA] BUFFER_ATOMIC_CMPSWAP: "tmp = MEM; src = DATA[0]; cmp = DATA[1];
    MEM = (tmp == cmp) ? src : tmp; RETURN_DATA[0] = tmp")."""
    dt = np.uint32 if nbytes == 4 else np.uint64
    words = idx[:, 0]
    if op == "cmpswap":
        d2 = np.asarray(data).astype(dt).reshape(len(words), 2)
        old_all = np.empty(len(words), dtype=dt)
        for k in range(len(words)):             # lane order: a later lane sees an earlier lane's swap
            cur = heap[idx[k]].copy().view(dt)[0]
            old_all[k] = cur
            if cur == d2[k, 1]:
                heap[idx[k]] = np.array([d2[k, 0]], dtype=dt).view(np.uint8)
        return old_all
    old_all = np.empty(len(words), dtype=dt)
    remaining = np.arange(len(words))
    while remaining.size:
        _, first = np.unique(words[remaining], return_index=True)
        sel = remaining[np.sort(first)]
        cur = heap[idx[sel]].copy().view(dt).reshape(-1)
        old_all[sel] = cur
        new = _combine(op, cur, data[sel].astype(dt)).astype(dt)
        heap[idx[sel]] = new.view(np.uint8).reshape(len(sel), nbytes)
        remaining = np.setdiff1d(remaining, sel, assume_unique=True)
    return old_all


_VSHARP_CACHE: dict = {}


def decode_vsharp(words) -> dict:
    """Fields of a 128-bit buffer resource (V#) given as 4 uint32 (CDNA ISA "Buffer Resource")."""
    key = tuple(words)
    hit = _VSHARP_CACHE.get(key)
    if hit is not None:
        return hit
    if len(_VSHARP_CACHE) > 4096:
        _VSHARP_CACHE.clear()
    _VSHARP_CACHE[key] = r = _decode_vsharp(key)
    return r


def _decode_vsharp(words) -> dict:
    w0, w1, w2, w3 = (int(x) & 0xFFFFFFFF for x in words)
    return {
        "base": w0 | ((w1 & 0xFFFF) << 32),
        "stride": (w1 >> 16) & 0x3FFF,
        "cache_swizzle": (w1 >> 30) & 1,
        "swizzle_en": (w1 >> 31) & 1,
        "num_records": w2,
        "add_tid": (w3 >> 23) & 1,
        "word3": w3,
    }
