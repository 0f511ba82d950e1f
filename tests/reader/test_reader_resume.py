"""`structqa reader build` stopped where its runs are finished but not yet recorded, asked to
stop during a run's final evaluation, run again with other options, or left with a
checkpoint half-swapped: it goes on, stops, refuses or recovers as a user would expect."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from test_reader_build import _build_args, small_data  # noqa: F401 (a fixture)

from structqa.cli import main
from structqa.reader import build as build_module

pytest.importorskip("spacy")


def _soup_args(out: Path, data: Path, encoder: Path) -> list[str]:
    return [a for a in _build_args(out, data, encoder) if a != "--baseline"]


def test_a_run_finished_but_not_recorded_goes_into_the_soup(
    small_data: Path,  # noqa: F811
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "reader"
    args = _soup_args(out, small_data, tiny_checkpoint)
    real = build_module._write_validation

    def killed(cfg, path: Path) -> Path:  # a stop after member 1 trained, before its record
        if "m1" in str(path):
            raise KeyboardInterrupt
        return real(cfg, path)

    # a mistyped setting stops the first start; it must not lock the folder to it
    assert main([*args, "--model.blok=1"]) == 2
    assert not (out / "build.json").exists()
    with monkeypatch.context() as patch:
        patch.setattr(build_module, "_write_validation", killed)
        assert main(args) == 130
    assert json.loads((out / "build.json").read_text())["seed"] == 0
    assert (out / "stages" / "member-0.json").is_file()
    assert not (out / "stages" / "member-1.json").is_file()
    state = json.loads((out / "members" / "m1" / "last" / "train_state.json").read_text())
    assert state["finished"]
    capsys.readouterr()

    # the same options, another seed: refused before anything is trained or mixed
    assert main([*args, "--seed=1"]) == 2
    assert "built with --seed 0, not 1" in capsys.readouterr().err
    assert main([*args, "--model.block=null"]) == 2
    assert "built with settings " in capsys.readouterr().err
    # the other slice: refused by build.json, and by the data stage's record without it
    passages = [a for a in args if a != "--slice=articles"]
    assert main(passages) == 2
    assert "built with --slice articles, not passages" in capsys.readouterr().err
    kept = (out / "build.json").read_text()
    (out / "build.json").unlink()
    assert main(passages) == 2
    assert "training data made for --slice articles" in capsys.readouterr().err
    (out / "build.json").write_text(kept)

    assert main(args) == 0  # member 1's record made from its saved best/, then the soup
    saved = json.loads((out / "members" / "m1" / "best" / "metrics.json").read_text())
    member = json.loads((out / "stages" / "member-1.json").read_text())
    assert member["validation"]["f1"] == saved["f1"]
    soup = json.loads((out / "run" / "best" / "soup.json").read_text())
    assert soup["member_scores"][1] == pytest.approx(saved.get("best_f1", saved["f1"]))

    # a quick check's held-out scores are not taken for the full ones: scored again
    card = (out / "MODEL_CARD.md").read_text()
    assert "the first 6 questions of each file only" in card
    assert main([*[a for a in args if not a.startswith("--heldout-size")], "--heldout-size=4"]) == 0
    heldout = json.loads((out / "stages" / "heldout.json").read_text())
    assert heldout["heldout_size"] == 4
    assert "the first 4 questions of each file only" in (out / "MODEL_CARD.md").read_text()


def test_a_stop_asked_during_the_final_evaluation_stops_the_build(
    small_data: Path,  # noqa: F811
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from structqa.training import loop

    out = tmp_path / "reader"
    args = _soup_args(out, small_data, tiny_checkpoint)
    real = loop.SpanTask.evaluate

    def interrupted(self, *a, **k):  # Ctrl-C while member 0 scores its last step
        os.kill(os.getpid(), signal.SIGINT)
        return real(self, *a, **k)

    with monkeypatch.context() as patch:
        patch.setattr(loop.SpanTask, "evaluate", interrupted)
        assert main(args) == 130
    assert "finished as it was asked to stop" in capsys.readouterr().err
    assert json.loads((out / "members" / "m0" / "last" / "train_state.json").read_text())[
        "finished"
    ]
    assert not (out / "members" / "m1").exists()  # the next run was not begun
    assert not (out / "stages" / "member-0.json").is_file()  # recorded when run again


def test_a_checkpoint_half_swapped_is_found_again(tmp_path: Path) -> None:
    """A stop between the two renames of last/'s swap leaves last.old alone: the build reads
    (and resumes) it, where it once started the run afresh into a folder that held one."""
    from structqa.config import load_config

    run = tmp_path / "run"
    (run / "last.old").mkdir(parents=True)
    (run / "last.old" / "train_state.json").write_text(json.dumps({"global_step": 7}))
    cfg = load_config(None, [f"train.output_dir={run}"])
    assert build_module.last_state(cfg) == {"global_step": 7}
    assert (run / "last" / "train_state.json").is_file()
