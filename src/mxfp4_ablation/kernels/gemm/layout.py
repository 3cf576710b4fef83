"""The GEMM's fixed geometry: tile sizes, the LDS layout, the XCD walk (plain constants)."""

BLOCK_M = BLOCK_N = 256
BLOCK_K = 256  # fp4 per K step
N_WAVES = 4
HALF = 16 * 1024  # one LDS half-tile: 128 rows x 128 bytes (A) or 16 blocks of 1 KiB (B)
STAGE = 4 * HALF  # A half 0, A half 1, B half 0, B half 1
#: The four LDS halves of a stage in the order a step refills them (A0 in block (0,0), B0 in
#: (0,1), B1 in (1,0), A1 in (1,1)); each is 4 LDS-DMA instructions per wave.
HALVES = ("A0", "B0", "B1", "A1")
RING_SLOTS = 4
RING_SLOT = 4096  # one K step of the tile's scales: A 2 KiB + B 2 KiB
N_XCD = 8
GROUP_M = 4
LOADS_PER_STEP = 16  # LDS-DMA instructions per wave per K step (8 A + 8 B)
