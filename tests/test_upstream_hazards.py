"""The upstream-hazards helpers: wait patching on ISA text, and one clear error without a checkout.
(The FlyDSL run itself needs a checkout: notebooks/upstream_hazards.py.)"""
import pytest

from mxfp4_ablation import upstream_hazards as U

ISA = """\tbuffer_load_dwordx4 v1, s[0:3], 0 offen lds
\ts_waitcnt vmcnt(24) lgkmcnt(0)
\ts_barrier
\tds_read_b128 v[2:5], v6
\ts_waitcnt lgkmcnt(0)
\tv_mov_b32_e32 v7, v2
"""


def test_governing_wait_is_the_last_wait_before_the_line():
    assert U.governing_wait(ISA, 4) == 2
    assert U.governing_wait(ISA, 6) == 5
    assert U.governing_wait(ISA, 1) is None


def test_patch_wait_changes_one_counter_and_keeps_every_line():
    out = U.patch_wait(ISA, 2, "vmcnt", 20)
    assert out.splitlines()[1] == "\ts_waitcnt vmcnt(20) lgkmcnt(0)"
    assert len(out.splitlines()) == len(ISA.splitlines())
    assert U.patch_wait(ISA, 5, "vmcnt", 3).splitlines()[4] == "\ts_waitcnt lgkmcnt(0) vmcnt(3)"
    assert U._wait_counts("s_waitcnt vmcnt(20) lgkmcnt(0)") == {"vmcnt": 20, "lgkmcnt": 0}


def test_patching_a_line_that_is_no_wait_is_one_clear_error():
    with pytest.raises(ValueError, match="line 3 is not an s_waitcnt"):
        U.patch_wait(ISA, 3, "vmcnt", 0)


def test_a_missing_checkout_is_one_clear_error(tmp_path):
    from mxfp4_ablation import upstream

    with pytest.raises(upstream.UpstreamError):
        U.compile_isa(tmp_path / "nope")


def test_the_committed_record_names_its_command_and_holds_no_upstream_text():
    rec = U.load_reference()
    assert rec["command"].startswith("PYTHONPATH=src python -m mxfp4_ablation.upstream_hazards --checkout upstream/")
    assert rec["runs"]["late"]["mismatches"] > 0 and rec["runs"]["fixed_late"]["exact"]
    assert {"instruction", "source", "patched_isa", "hazards"}.isdisjoint(
        {k for part in (rec, *rec["runs"].values(), *rec["fix"]["changes"]) for k in part})


@pytest.mark.slow
@pytest.mark.upstream
def test_make_upstreams_flydsl_reproduces_the_committed_race_record():
    """The emulator on FlyDSL 741f3d6d (make upstream's checkout) gives the committed numbers again."""
    from conftest import need, upstream_root

    from mxfp4_ablation import upstream

    checkout = need(upstream_root() / "flydsl-741f3d6d" / upstream.FLYDSL_GEMM_FILE, "a FlyDSL checkout at 741f3d6d").parents[2]
    rec = U.load_reference()
    shape = rec["shape"]
    new = U.reference_record(U.report(checkout, shape["M"], shape["N"], shape["K"], seed=rec["seed"], commit=rec["commit"]),
                             rec["command"])
    for key in ("runs", "fix", "flagged_by_kind", "wait_states", "tree_digest", "isa_lines"):
        assert new[key] == rec[key], key
