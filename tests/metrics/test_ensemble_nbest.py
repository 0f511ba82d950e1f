"""scripts/ensemble_nbest.py: the output ensemble that weight averaging is measured against."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny import load_script


def _candidate(text: str, start: int, probability: float) -> dict[str, object]:
    return {
        "text": text,
        "start_char": start,
        "end_char": start + len(text),
        "probability": probability,
    }


def test_the_span_with_the_highest_mean_probability_wins(tmp_path: Path) -> None:
    script = load_script("ensemble_nbest")
    # run 1 is sure of "Normans", runs 2 and 3 prefer "The Normans": the mean probability
    # decides, (0.6 + 0.3 + 0.3) / 3 = 0.4 against (0.1 + 0.5 + 0.5) / 3 = 0.367
    runs = [
        {"q": [_candidate("Normans", 4, 0.6), _candidate("The Normans", 0, 0.1)]},
        {"q": [_candidate("The Normans", 0, 0.5), _candidate("Normans", 4, 0.3)]},
        {"q": [_candidate("The Normans", 0, 0.5), _candidate("Normans", 4, 0.3)]},
    ]
    assert script.ensemble(runs) == {"q": "Normans"}  # 0.4 against 0.367
    runs[0]["q"][0]["probability"] = 0.3
    assert script.ensemble(runs) == {"q": "The Normans"}  # 0.3 against 0.367
    # a span one run did not list counts 0 there
    runs.append({"q": [_candidate("Normandy", 21, 0.9)]})
    assert script.ensemble(runs) == {"q": "The Normans"}  # 0.275 against 0.225
    paths = []
    for n, run in enumerate(runs):
        paths.append(tmp_path / f"{n}.json")
        paths[-1].write_text(json.dumps(run))
    assert script.main([*map(str, paths), "--out", str(tmp_path / "out" / "p.json")]) == 0
    assert json.loads((tmp_path / "out" / "p.json").read_text()) == {"q": "The Normans"}


def test_runs_that_answer_other_questions_are_refused() -> None:
    script = load_script("ensemble_nbest")
    with pytest.raises(ValueError, match="other questions"):
        script.ensemble([{"a": []}, {"b": []}])
