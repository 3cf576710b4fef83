"""Step 4: the scale slot gathers each step's scales into an LDS ring three steps ahead and reads them
from there one step ahead, among the MFMAs."""

from dataclasses import replace

from mxfp4_ablation.family import Expect, Switch

from .. import stages
from ..layout import RING_SLOT, RING_SLOTS, STAGE
from ..seeds import PR_990

fx = C = llvm = None  # FlyDSL, filled on the first build

SWITCH = Switch(
    "scale_prefetch", "Scale gather through an LDS ring.", PR_990,
    claim="per K step the tile's scales are one buffer_load_dwordx4 ... lds per wave into a 4-slot LDS ring, "
    "three K steps ahead, carried to VGPRs one step ahead, issued in the MFMA shadow.",
    mechanism="replaces 8 buffer_load_dword (to VGPR) per wave per K step; the 8 ring reads (ds_read_b32) "
    "of step k+1 are issued among the MFMAs of block (0,1), the gather of step k+3 after the LDS-DMAs of "
    "block (1,0).",
    metric="buffer_load_dword in the loop -> 0, one more LDS-DMA per step, lds_bytes +16 KiB; loop_s_waitcnt "
    "24 -> 20 per 2 K steps at 8192^3 (the compiler's two vmcnt waits per step for the VGPR scale loads "
    "go; the per-fragment LDS waits for B1 stay until b_carry).",
    expects=(Expect("loop_buffer_load_dword", "zero"), Expect("loop_ds_read_b32", "up")),
    requires=("g2s_m0",),
)


class ScaleGatherLDS:
    """FlyDSL's ``ScaleGatherLDS`` + ``ScaleLoaderLDS``: one LDS-DMA per wave per step gathers a
    quarter of the tile's scales of step k + 3 into ring slot (k + 3) % 4 (in block (1,0)); the 8
    ds_read_b32 of step k + 1's words run in block (0,1); the top wait also waits for step k + 1's
    gather.  With the loop slot's ``uniform_steps`` every step that refills a stage gathers, the one
    past the end a dummy (clamped to the last step, into a slot nobody reads any more)."""

    def __init__(self, p):
        self.p = p

    @staticmethod
    def shared():
        @fx.struct
        class Shared:
            tiles: fx.Array[fx.Int8, 2 * STAGE, 16]
            ring: fx.Array[fx.Int8, RING_SLOTS * RING_SLOT, 16]

        return Shared

    def lds_bases(self, lds):
        self.base = fx.Int32(C.uniform(C.lds_addr(lds.ring)))
        self.wave_base = fx.Int32(C.uniform(self.base + self.p.wave * 1024))

    def setup(self):
        """The gather's per-lane voffset and its buffer (waves 0, 1 gather A's scales, 2, 3 B's)."""
        p = self.p
        is_a = p.wave < 2
        rp = (p.wave % 2) * 4 + p.lane // 16
        tile_x = fx.Int32(fx.arith.select(is_a, p.tile_i, p.tile_j))
        self.g_voff = (tile_x * 8 + rp) * (p.K1 * 256) + (p.lane % 16) * 16
        self.g_rsrc = llvm.SelectOp(C.raw(is_a), C.raw(p.sa_rsrc), C.raw(p.sb_rsrc)).result

    @staticmethod
    def prologue_events(KI):
        return [("G", k) for k in range(min(3, KI))]

    @staticmethod
    def prologue_needs():
        return [("G", 0)]

    @staticmethod
    def gathers(k, KI, loop) -> bool:
        """Whether step k gathers the scales of step k + 3."""
        return k + 3 < KI or (loop.uniform_steps and k + 2 < KI)

    @classmethod
    def units(cls, k, KI, loop):
        nxt = k + 1 < KI
        reads = [("ring", 1, n) for n in range(8)] if nxt else []
        gather = [("gather", 3)] if cls.gathers(k, KI, loop) else []
        return [], reads, gather, ([("G", k + 1)] if nxt else [])

    @staticmethod
    def last_full_step(KI, loop):
        return KI - (2 if loop.uniform_steps else 3)

    def prologue(self):
        for k in range(min(3, self.p.KI)):
            self.gather(k)

    def first(self, loaded):
        """After the prologue's wait: 8 ds_read_b32 of step 0's scale words from the ring."""
        return [C.ds_read_b32(a) for a in self.words(0)]

    def emit(self, u, k, cache, new_scales):
        if u[0] == "gather":
            self.gather(k + u[1])
            return
        if "ring" not in cache:
            cache["ring"] = self.words(k + u[1])
        new_scales[u[2]] = C.ds_read_b32(cache["ring"][u[2]])

    def gather(self, k):
        """One buffer_load_dwordx4 ... lds per wave: a quarter of the tile's scales for step k -> ring."""
        m0 = self.wave_base + (fx.Int32(k) % RING_SLOTS) * RING_SLOT
        last = self.p.KI - 1
        kc = min(k, last) if isinstance(k, int) else stages.select(fx.Int32(k) < last, k, last)
        soff = C.uniform(fx.Int32(kc) * 256)
        stages.inline_asm(None, [m0, self.g_voff, self.g_rsrc, soff],
                          "s_mov_b32 m0, $0\n\tbuffer_load_dwordx4 $1, $2, $3 offen lds", "s,v,s,s,~{m0}")

    def words(self, k):
        """LDS addresses of the 8 scale words of step k in the ring (same order as ``addrs``)."""
        p = self.p
        slot = self.base + (fx.Int32(k) % RING_SLOTS) * RING_SLOT + p.lane * 4
        return [slot + base + (hv * 4 + w * 2 + q) * 256
                for base, w in ((0, p.wi), (2048, p.wj)) for hv in range(2) for q in range(2)]


def apply(slots):
    return replace(slots, scales=ScaleGatherLDS)
