"""``make readme`` never leaves a generated block stale: a block whose data the summary run lacks is an
error naming the block and the missing file, and README.md is not written (issue #19, finding 6)."""

from __future__ import annotations

import pytest

from mxfp4_ablation.studies import get, modelled_section, readme
from mxfp4_ablation.studies.tables import StudyError


def _readme(tmp_path):
    study = get("gemm")
    parts = []
    for begin, end in (readme.markers("gemm"), modelled_section.findings_markers("gemm"), readme.fidelity_markers("gemm")):
        parts += [begin, "OLD", end]
    path = tmp_path / "README.md"
    path.write_text("\n".join(parts) + "\n")
    return study, path


def test_a_block_whose_data_is_missing_is_an_error_and_nothing_is_written(tmp_path, monkeypatch):
    study, path = _readme(tmp_path)
    run = tmp_path / "20260101T000000Z-abcdef0-summary"
    run.mkdir()
    before = path.read_text()
    monkeypatch.setattr(readme, "table_from_run", lambda study, run=None: "NEW TABLE")
    with pytest.raises(StudyError, match=r"gemm modelled findings .* has no modelled-gemm/modelled_delta.parquet"):
        readme.update(path, [study], run)
    assert path.read_text() == before
    monkeypatch.setattr(modelled_section, "readme_findings", lambda name, run: "* a finding *(modelled)*")
    with pytest.raises(StudyError, match=r"gemm fidelity block: the summary run .* has no .*fidelity.parquet"):
        readme.update(path, [study], run)
    assert path.read_text() == before
    monkeypatch.setattr(readme, "fidelity_from_run", lambda study, run: "FIDELITY")
    assert readme.update(path, [study], run) == ["gemm"]
    text = path.read_text()
    assert "OLD" not in text and "NEW TABLE" in text and "a finding" in text and "FIDELITY" in text
