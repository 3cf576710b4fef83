"""Input rotation sizing: no trial may be served from the last-level cache."""
import pytest

from mxfp4_ablation.bench.device_info import KNOWN_LLC_BYTES, llc_bytes_for
from mxfp4_ablation.bench.inputs import RotationError, rotation_for, sets_needed, single_set

MB = 2**20


def test_h200_l2_small_op_needs_several_sets():
    # 24 MiB per launch (12 MiB in + 12 MiB out) on a 60 MiB L2, 2x margin -> 5 sets
    rot = rotation_for(24 * MB, 60 * MB)
    assert rot.n_sets == 5
    assert rot.total_bytes >= 2 * 60 * MB
    assert rot.cache_multiple >= 2.0


def test_mi355x_infinity_cache_is_the_last_level():
    llc = llc_bytes_for("gfx950", l2_bytes=4 * MB)
    assert llc == 256 * MB == KNOWN_LLC_BYTES["gfx950"]
    # an MXFP4 GEMM 4096x4096x4096: A, B packed 2/byte, e8m0 scales, bf16 out
    m = n = k = 4096
    set_bytes = m * k // 2 + n * k // 2 + (m + n) * k // 32 + 2 * m * n
    rot = rotation_for(set_bytes, llc)
    assert rot.total_bytes >= 2 * llc
    assert (rot.n_sets - 1) * set_bytes < 2 * llc  # smallest such count


def test_large_set_still_gets_two_sets_and_override_wins():
    assert sets_needed(550 * MB, 60 * MB) == 2
    assert llc_bytes_for("sm_90", 60 * MB, override=0) == 0
    assert llc_bytes_for("sm_90", 60 * MB) == 60 * MB


def test_single_set_is_cache_hot_on_purpose():
    assert single_set(24 * MB, 60 * MB).n_sets == 1


@pytest.mark.parametrize("kwargs,match", [
    (dict(set_bytes=0, cache_bytes=MB), "positive size"),
    (dict(set_bytes=MB, cache_bytes=-1), "cache size"),
    (dict(set_bytes=MB, cache_bytes=MB, factor=0), "factor"),
    (dict(set_bytes=1, cache_bytes=256 * MB), "more than the limit"),
])
def test_bad_sizes_fail_clearly(kwargs, match):
    with pytest.raises(RotationError, match=match):
        sets_needed(**kwargs)
