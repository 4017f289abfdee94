"""One rule says whether recorded training data are the data of now (``data_mismatch``), and one whether
recorded inputs are (``inputs_mismatch``): ``--resume`` (the whole fingerprint a build makes, every entry)
and ``hardmix compare`` (what is known before building, which a record may exceed) both follow them and
name what they find."""

from __future__ import annotations

import pytest

from hardmix.compare.fingerprints import _data_mismatch, _inputs_mismatch
from hardmix.training.fingerprint import data_mismatch, inputs_mismatch
from hardmix.training.resume_checks import check_same_data, check_same_inputs
from hardmix.training.run_folder import RunFolderError

BUILT = {"images": 16, "training images": 16, "image content sha256": "a" * 64}
BEFORE_BUILDING = {"images": 16, "image content sha256": "a" * 64}


def _resume(saved, now=BUILT) -> None:
    check_same_data(saved, now)  # the engine's check alone: nothing built


def test_the_same_data_pass_both() -> None:
    assert data_mismatch(dict(BUILT), BUILT, exact=True) is None
    _resume(dict(BUILT))
    assert _data_mismatch(dict(BUILT), BEFORE_BUILDING, "record") is None  # a record holds the counts too
    assert data_mismatch(None, None) is None and _data_mismatch({"x": 1}, None, "record") is None


def test_changed_content_is_named_by_both() -> None:
    changed = {**BUILT, "image content sha256": "b" * 64}
    assert data_mismatch(changed, BUILT, exact=True).differ == ["image content sha256"]
    with pytest.raises(RunFolderError, match=r"training data differ .*image content sha256 'b"):
        _resume(changed)
    why = _data_mismatch(changed, BEFORE_BUILDING, "record")
    assert why == "its training data differ (image content sha256 bbbbbbbbbbbb... then, aaaaaaaaaaaa... now)"


def test_an_older_form_cannot_establish_the_data_for_either() -> None:
    older = {"images": 16, "image list sha256": "c" * 64}
    mismatch = data_mismatch(older, BEFORE_BUILDING)
    assert mismatch.other_form and mismatch.missing == ["image content sha256"]
    with pytest.raises(RunFolderError, match="identifies its training data by image list sha256, images, "
                       "this hardmix by image content sha256, images, training images"):
        _resume(older)
    assert "not by image content sha256 (an older hardmix's fingerprint)" in _data_mismatch(
        older, BEFORE_BUILDING, "checkpoint")
    with pytest.raises(RunFolderError, match="identifies its training data by nothing"):
        _resume(None)
    assert _data_mismatch(None, BEFORE_BUILDING, "record") == (
        "its record records no training data fingerprint, so its data cannot be established")


def test_a_record_with_more_entries_passes_a_comparison_but_not_a_resume() -> None:
    more = {**BUILT, "decoded bytes": 1}
    assert _data_mismatch(more, BEFORE_BUILDING, "record") is None
    assert data_mismatch(more, BUILT, exact=True).other_form
    with pytest.raises(RunFolderError, match="cannot be established"):
        _resume(more)


def _resume_inputs(state, now) -> None:
    check_same_inputs(state, now)


def test_inputs_follow_one_rule_in_a_resume_and_a_comparison() -> None:
    digest, other = "d" * 64, "e" * 64
    for state, now in (({"inputs": digest}, digest), ({"inputs": None}, None)):
        assert inputs_mismatch(state, now) is None and _inputs_mismatch(state, now, "record") is None
        _resume_inputs(state, now)
    assert inputs_mismatch({"inputs": digest}, other) == "differ"
    with pytest.raises(RunFolderError, match=r"differ .*sha256 dddddddddddd\.\.\. then, eeeeeeeeeeee"):
        _resume_inputs({"inputs": digest}, other)
    assert _inputs_mismatch({"inputs": digest}, other, "checkpoint") == (
        "its inputs (model files, evaluation sets) differ (dddddddddddd... then, eeeeeeeeeeee... now)")
    assert inputs_mismatch({}, digest) == "unrecorded"  # an older hardmix's checkpoint or record
    with pytest.raises(RunFolderError, match="does not record its inputs"):
        _resume_inputs({}, digest)
    assert "records no inputs" in _inputs_mismatch({}, digest, "record")
    assert _inputs_mismatch({}, None, "record") is None  # not known before building: the resume checks it
