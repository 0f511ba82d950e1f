"""The general reader's calibrate stage: fitted on the validation slice's human-written
questions (the rewrites left out), weighted to SQuAD 2.0's unanswerable share (the build
itself, and an older build calibrated again: tests/reader/test_reader_build.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from structqa.calibration import Calibrator
from structqa.calibration.report import load_calibration, save_calibration
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.data.squad_json import write_squad_json
from structqa.reader.calibrate import HUMAN_FILE, calibrate_reader
from structqa.reader.data import squad2_unanswerable_share
from structqa.training.negatives import REWRITE_MARK, is_rewrite

MINI = "fixtures/squad-v1.1-mini.json"


def _slice(shared_data: Path, path: Path, human_unanswerable: bool = True) -> list[Example]:
    """The mini fixture's questions (answerable), a rewrite of each (unanswerable) and, with
    ``human_unanswerable``, each asked of the other passage (unanswerable)."""
    examples = read_extractive(shared_data / MINI).examples
    out = list(examples)
    out += [
        Example(
            f"{ex.id}{REWRITE_MARK}negation",
            f"Not {ex.question}",
            ex.context,
            is_impossible=True,
            title=ex.title,
        )
        for ex in examples
    ]
    if human_unanswerable:
        contexts = list(dict.fromkeys(ex.context for ex in examples))
        out += [
            Example(
                f"{ex.id}-other",
                ex.question,
                next(c for c in contexts if c != ex.context),
                is_impossible=True,
            )
            for ex in examples
        ]
    write_squad_json(path, out)
    return out


@pytest.fixture
def checkpoint(tiny_trained_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_trained_run / "best", tmp_path / "best"))


def test_fitted_on_the_human_written_questions_weighted_to_the_share(
    checkpoint: Path, shared_data: Path, tmp_path: Path
):
    validation = tmp_path / "run" / "validation.v2.json"
    validation.parent.mkdir()
    written = _slice(shared_data, validation)
    human = [ex for ex in written if not is_rewrite(ex.id)]
    record = calibrate_reader(checkpoint, validation, 0.5, False)
    kept = read_extractive(validation.parent / HUMAN_FILE).examples
    assert [ex.id for ex in kept] == [ex.id for ex in human]  # rewrites left out
    assert record["questions"] == len(human) and record["fallback"] is None
    assert record["rewrites_left_out"] == len(written) - len(human) > 0
    assert record["unanswerable"] == sum(ex.is_impossible for ex in human) > 0
    fit = load_calibration(checkpoint).fit
    assert fit["unanswerable_share"] == 0.5 and fit["questions"] == len(human)
    assert fit["source"].endswith(HUMAN_FILE)
    assert record["calibration"]["null_threshold"] == load_calibration(checkpoint).null_threshold


def test_a_slice_without_human_unanswerable_questions_is_fitted_whole_and_says_so(
    checkpoint: Path, shared_data: Path, tmp_path: Path, caplog
):
    validation = tmp_path / "validation.v2.json"
    written = _slice(shared_data, validation, human_unanswerable=False)
    with caplog.at_level("WARNING", logger="structqa.reader.calibrate"):
        record = calibrate_reader(checkpoint, validation, 0.5, False)
    assert record["questions"] == len(written) and record["unanswerable_share"] == 0.5
    assert "not of both kinds" in record["fallback"] and "not of both kinds" in caplog.text
    assert load_calibration(checkpoint).fit["unanswerable_share"] == 0.5


def test_a_slice_without_unanswerable_questions_keeps_the_runs_calibration(
    checkpoint: Path, shared_data: Path, tmp_path: Path
):
    """No threshold can be fitted on answerable questions alone: refitting would take the
    abstaining reader's threshold away (refused by calibrate), so its own is kept."""
    save_calibration(checkpoint, Calibrator("temperature", -0.5, t_span=2.0))  # abstains
    before = load_calibration(checkpoint)
    validation = tmp_path / "validation.v2.json"
    write_squad_json(validation, read_extractive(shared_data / MINI).examples)
    record = calibrate_reader(checkpoint, validation, 0.5, False)
    assert "not of both kinds" in record["skipped"] and "kept" in record["skipped"]
    assert load_calibration(checkpoint) == before


def test_a_run_without_a_validation_slice_keeps_its_calibration(tmp_path: Path):
    from structqa.config import load_config
    from structqa.reader.calibrate import calibrate_stage

    trained = {"checkpoint": str(tmp_path / "best"), "validation_file": None}
    record = calibrate_stage(trained, load_config(None, []), tmp_path)
    assert "no validation slice" in record["skipped"]


def test_the_share_is_counted_on_squad2_training_questions_off_held_out_passages(
    shared_data: Path,
):
    share = squad2_unanswerable_share(shared_data)
    # the split is 1,753 of 3,406 unanswerable; its questions on held-out passages dropped
    assert 0.45 < share < 0.55 and share != pytest.approx(1753 / 3406)


def test_the_offset_moves_the_threshold_and_is_recorded(
    checkpoint: Path, shared_data: Path, tmp_path: Path
):
    validation = tmp_path / "run" / "validation.v2.json"
    validation.parent.mkdir()
    _slice(shared_data, validation)
    plain = calibrate_reader(checkpoint, validation, 0.5, False)
    moved = calibrate_reader(checkpoint, validation, 0.5, False, threshold_offset=-1.25)
    assert plain["threshold_offset"] == 0.0 and moved["threshold_offset"] == -1.25
    shift = moved["calibration"]["null_threshold"] - plain["calibration"]["null_threshold"]
    assert shift == pytest.approx(-1.25)
    assert load_calibration(checkpoint).null_threshold == moved["calibration"]["null_threshold"]


def test_a_build_calibrated_at_another_offset_is_calibrated_and_scored_again(
    tmp_path: Path, monkeypatch
):
    import json

    from structqa.reader import build, calibrate

    stages = tmp_path / "stages"
    stages.mkdir()

    def records(calibrated: dict) -> None:
        for stage, record in (
            ("train", {}),
            ("calibrate", calibrated),
            ("export", {}),
            ("heldout", {}),
        ):
            (stages / f"{stage}.json").write_text(json.dumps(record))

    monkeypatch.setattr(calibrate, "THRESHOLD_OFFSET", -1.0)
    every = {"train", "calibrate", "export", "heldout"}
    records({"threshold_offset": -1.0, "threshold_offset_asked": -1.0})
    build._drop_if_offset_changed(tmp_path)  # the recipe's offset: nothing to do
    assert {p.stem for p in stages.glob("*.json")} == every
    # asked for, not added (the odds were of another kind): not calibrated again each run
    records({"threshold_offset": 0.0, "threshold_offset_asked": -1.0})
    build._drop_if_offset_changed(tmp_path)
    assert {p.stem for p in stages.glob("*.json")} == every
    records({"questions": 449})  # from before the offset: 0
    build._drop_if_offset_changed(tmp_path)
    # its training stands; the int8 graph carries a copy of the calibration: exported again
    assert {p.stem for p in stages.glob("*.json")} == {"train"}
    records({"skipped": "no validation slice"})
    build._drop_if_offset_changed(tmp_path)
    assert {p.stem for p in stages.glob("*.json")} == every
    # an article-slice build takes no offset: one calibrated with the recipe's is redone
    records({"threshold_offset": 0.0, "threshold_offset_asked": 0.0})
    build._drop_if_offset_changed(tmp_path, "articles")
    assert {p.stem for p in stages.glob("*.json")} == every
    records({"threshold_offset": -1.0, "threshold_offset_asked": -1.0})
    build._drop_if_offset_changed(tmp_path, "articles")
    assert {p.stem for p in stages.glob("*.json")} == {"train"}


def test_an_offset_measured_on_other_odds_is_not_added_and_the_record_says_so(
    checkpoint: Path, shared_data: Path, tmp_path: Path
):
    validation = tmp_path / "run" / "validation.v2.json"
    validation.parent.mkdir()
    _slice(shared_data, validation)
    plain = calibrate_reader(checkpoint, validation, 0.5, False)  # no verifier: model's odds
    record = calibrate_reader(checkpoint, validation, 0.5, False, -1.25, "similarity")
    assert record["threshold_offset"] == 0.0 and record["threshold_offset_asked"] == -1.25
    assert "measured on the similarity verifier's odds" in record["offset_note"]
    assert record["calibration"]["null_threshold"] == plain["calibration"]["null_threshold"]


def test_the_stage_asks_for_the_recipes_offset(tmp_path: Path, monkeypatch):
    from structqa.config import load_config
    from structqa.reader import calibrate

    asked: list[tuple] = []
    monkeypatch.setattr(calibrate, "THRESHOLD_OFFSET", -0.5)
    monkeypatch.setattr(calibrate, "calibrate_reader", lambda *a: asked.append(a) or {})
    cfg = load_config(overrides=["decode.unanswerable_share=0.5"])
    trained = {"checkpoint": str(tmp_path / "best"), "validation_file": str(tmp_path / "v.json")}
    assert calibrate.calibrate_stage(trained, cfg, tmp_path)["share_from"]
    assert asked[0][2:] == (0.5, cfg.decode.verifier, -0.5, calibrate.OFFSET_VERIFIER)
    # a slice of whole held-out articles is new articles already: nothing added
    calibrate.calibrate_stage(trained, cfg, tmp_path, "articles")
    assert asked[1][4] == 0.0
