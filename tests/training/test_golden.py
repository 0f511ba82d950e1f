"""The tiny runs of ``golden_runs.py`` reproduce their recording step by step: every training
loss and learning rate, every evaluation, every checkpoint's state and metrics, the result."""

from __future__ import annotations

import json

import pytest
from golden_runs import GOLDEN, RUNS, same

pytestmark = pytest.mark.usefixtures("one_thread")  # as recorded (tiny tensors: see conftest)


@pytest.mark.parametrize("name", list(RUNS))
def test_run_matches_its_recording(name, tmp_path, tiny_checkpoint, shared_data):
    recorded = json.loads((GOLDEN / f"{name}.json").read_text())
    now = RUNS[name](tmp_path, tiny_checkpoint, shared_data)
    assert same(recorded, json.loads(json.dumps(now))) == []


def test_the_comparison_sees_a_changed_loss():
    recorded = json.loads((GOLDEN / "span-v1.json").read_text())
    changed = json.loads(json.dumps(recorded))
    changed["log"][0]["loss"] *= 1 + 1e-5
    changed["checkpoints"]["best"]["files"].append("extra.json")  # extra files are allowed
    assert same(recorded, changed) == [
        f".log[0].loss: recorded {recorded['log'][0]['loss']!r}, now {changed['log'][0]['loss']!r}"
    ]
    changed["checkpoints"]["best"]["metrics"]["f1"] += 1e-3
    assert any(d.startswith(".checkpoints.best.metrics.f1") for d in same(recorded, changed))
    del changed["checkpoints"]["last"]
    assert ".checkpoints.last: missing" in same(recorded, changed)
