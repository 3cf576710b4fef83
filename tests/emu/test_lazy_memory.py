"""Lazy mapping (gfx950emu.memory): buffers materialise chunk by chunk on first touch, with the bytes eager
mapping puts there; LazyBuffer arguments are produced by their fill; write-back covers touched chunks."""
import numpy as np
import pytest

import gfx950emu
from gfx950emu import memory
from gfx950emu.memory import CHUNK, HEAP_BASE, FlatMemory, LazyBuffer
from emu_asm import kernel

# every lane copies dword (lane * stride_dwords) of arg 0 to dword lane of arg 1 (global loads / stores)
COPY = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
s_waitcnt lgkmcnt(0)
v_mul_u32_u24_e32 v1, {stride}, v0
v_lshlrev_b32_e32 v1, 2, v1
global_load_dword v2, v1, s[4:5]
v_lshlrev_b32_e32 v3, 2, v0
s_waitcnt vmcnt(0)
global_store_dword v3, v2, s[6:7]
s_endpgm
"""


@pytest.fixture
def always_lazy(monkeypatch):
    monkeypatch.setattr(memory, "LAZY_MIN_BYTES", 0)


def _run(inp, out, stride):
    prog = gfx950emu.load(kernel(COPY.format(stride=stride)))
    return gfx950emu.launch(prog, 1, 64, [inp, out], hazards="strict")


def test_lazy_launch_reads_the_same_bytes_and_writes_back(always_lazy):
    stride = CHUNK // 4 // 2                       # two lanes per chunk: 32 of the 64+ chunks get touched
    inp = (np.arange(64 * stride + 7, dtype=np.uint32) * 2654435761) & 0xFFFFFFFF
    out = np.full(64, 7, np.uint32)
    res = _run(inp, out, stride)
    assert res.hazards == []
    assert np.array_equal(out, inp[np.arange(64) * stride])


def test_lazy_buffer_argument_is_filled_only_where_touched(always_lazy):
    stride = CHUNK // 4                            # one chunk per lane
    n = 64 * stride * 4 + 4 * CHUNK               # 4 chunks more than the lanes touch
    asked = []

    def fill(lo, hi):
        asked.append((lo, hi))
        words = np.arange(lo // 4, hi // 4, dtype=np.uint64)
        return ((words * 40503 + 17) & 0xFFFFFFFF).astype(np.uint32).view(np.uint8)

    out = np.zeros(64, np.uint32)
    _run(LazyBuffer(n, fill, "in"), out, stride)
    want = ((np.arange(64, dtype=np.uint64) * stride * 40503 + 17) & 0xFFFFFFFF).astype(np.uint32)
    assert np.array_equal(out, want)
    touched = sum(hi - lo for lo, hi in asked)
    assert touched <= 65 * CHUNK < n               # the untouched chunks were never made


def test_lazy_zero_buffer_and_eager_small_launch_agree():
    inp = np.arange(64 * 3, dtype=np.uint32)
    eager_out, lazy_out = np.zeros(64, np.uint32), np.zeros(64, np.uint32)
    _run(inp, eager_out, 3)
    _run(LazyBuffer(inp.nbytes, lambda lo, hi: inp.view(np.uint8)[lo:hi]), lazy_out, 3)
    assert np.array_equal(eager_out, lazy_out)
    zero_out = np.ones(64, np.uint32)
    _run(LazyBuffer.zeros(inp.nbytes), zero_out, 3)
    assert not zero_out.any()


def test_flat_memory_lazy_chunks_partial_store_keeps_source_bytes():
    src = np.arange(3 * CHUNK, dtype=np.uint64).astype(np.uint8)
    m = FlatMemory()
    a = m.reserve("arg0", src.size, source=src)
    m.reserve("arg1", 16)
    m.finalize(lazy=True)
    assert not m.materialised.any()
    off = m.starts(np.array([a + CHUNK + 5], dtype=np.uint64), 4, line=1)
    m.scatter(off, np.array([[1, 2, 3, 4]], dtype=np.uint8))
    assert m.materialised.sum() == 1
    chunk = m.heap[a - HEAP_BASE + CHUNK - (a - HEAP_BASE) % CHUNK:][:16]
    assert chunk.size == 16
    got = m.read_bytes(a, src.size).copy()          # reading everything materialises the rest
    want = src.copy()
    want[CHUNK + 5:CHUNK + 9] = [1, 2, 3, 4]
    assert np.array_equal(got, want)
    assert m.materialised_ranges(a - HEAP_BASE, src.size) == [(0, src.size)]


def test_lazy_buffer_fill_of_wrong_size_is_an_error():
    with pytest.raises(ValueError, match="returned"):
        LazyBuffer(8, lambda lo, hi: b"\0").read()
    with pytest.raises(ValueError, match="callable"):
        LazyBuffer(8, fill=3)


def test_unmapped_address_still_faults_when_lazy(always_lazy):
    m = FlatMemory()
    a = m.reserve("arg0", 64, source=np.zeros(64, np.uint8))
    m.finalize()
    with pytest.raises(gfx950emu.MemoryFault, match="unmapped"):
        m.starts(np.array([a + 60], dtype=np.uint64), 8, line=3)
