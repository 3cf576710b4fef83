"""Stand-ins shared by the cache tests (no ISA is run)."""


def fake_kernel() -> dict:
    """A ``res.timing["kernel"]`` with the fields ``gfx950emu.timing.grid.kernel`` writes (what a cache hit
    re-evaluates at the current post-hoc parameters)."""
    return {"compute_cycles": 1000.0, "bytes_buffers": 0, "bytes_l2": 0, "launch_us": 2.0, "flops": 1.0,
            "rounds": 1, "round_scale": 1.0, "memory": None, "tflops": 1.0, "us": 1.0}
