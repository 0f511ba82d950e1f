"""Training progress without a bar (``--no-progress``): log lines a person can follow."""

from __future__ import annotations

import logging

import pytest

from structqa.training.progress import Progress, format_duration


def test_lines_say_step_share_loss_and_time_left(caplog):
    caplog.set_level(logging.INFO, logger="structqa.training")
    bar = Progress(4, "lines", every_s=0.0)
    bar.advance(1)  # resumed after one step
    for loss in (0.9, 0.8, 0.7):
        bar.update(loss, 5.0, 0)
    bar.note("step 4: F1 70.00")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("train: step 2/4 (50.0%), epoch 1, loss 0.900, 5.0 feat/s")
    assert "left" in lines[1] and lines[1].startswith("train: step 3/4 (75.0%)")
    assert lines[2].startswith("train: step 4/4 (100.0%)") and "left" not in lines[2]
    assert lines[3] == "train: step 4: F1 70.00"


def test_lines_are_spaced_in_time_but_the_last_step_is_always_said(caplog):
    caplog.set_level(logging.INFO, logger="structqa.training")
    bar = Progress(50, "lines", every_s=3600.0)
    for _ in range(50):
        bar.update(1.0, 1.0, 0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("train: step 50/50")


def test_other_processes_are_silent_and_modes_are_checked(caplog):
    caplog.set_level(logging.INFO, logger="structqa.training")
    bar = Progress(3, "off", every_s=0.0)
    bar.update(1.0, 1.0, 0)
    bar.note("evaluated")
    assert not caplog.records and not bar.enabled
    with pytest.raises(ValueError, match="bar, lines or off"):
        Progress(3, "quiet")


def test_durations_read_as_minutes_then_hours():
    assert format_duration(59) == "1 min" and format_duration(61 * 60) == "1 h 01 min"
    assert format_duration(3 * 3600 + 25 * 60) == "3 h 25 min"


def test_a_counted_job_logs_its_share_done_and_the_end(caplog):
    from structqa.training.progress import counted

    caplog.set_level(logging.INFO, logger="structqa.training")
    with counted(2400, "lines", "scoring", "windows") as advance:
        for _ in range(3):
            advance(800)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[-1].startswith("scoring: 2,400/2,400 windows (100.0%), ")
    assert "left" not in lines[-1]
    with counted(10, "off", "scoring", "windows") as advance:
        advance(10)
    assert len(caplog.records) == len(lines)
    with pytest.raises(ValueError, match="bar, lines or off"), counted(1, "loud", "x", "y"):
        pass


def test_evaluate_logs_its_progress_for_a_log_file(tiny_trained_run, shared_data, tmp_path, caplog):
    from structqa.cli import main

    caplog.set_level(logging.INFO, logger="structqa.training")
    mini = str(shared_data / "fixtures/squad-v1.1-mini.json")
    args = ["evaluate", str(tiny_trained_run / "best"), "--eval", mini, "--no-progress"]
    assert main([*args, "--bf16", "off", "--out", str(tmp_path / "ev")]) == 0
    assert any(
        r.getMessage().startswith("scoring: ") and "windows (100.0%)" in r.getMessage()
        for r in caplog.records
    )
