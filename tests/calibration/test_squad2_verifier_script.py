"""scripts/squad2_verifier.py: each verifier arm fitted on a run's validation answers and
scored on the held-out file at its own threshold, with the similarity arm's diagram."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tiny import load_script

from structqa.data.records import Answer, Example
from structqa.data.squad_json import to_squad_json

CONTEXT = "The Broncos won the game in Denver. It rained all day in the mountains."


def _questions(prefix: str, n: int, seed: int) -> tuple[list[Example], dict, dict]:
    """Answerable questions ask about the passage, unanswerable ones about what it lacks;
    the model's null odds are noise, its answer always "The Broncos"."""
    rng = np.random.default_rng(seed)
    examples, nbest, odds = [], {}, {}
    for i in range(n):
        unanswerable = i % 2 == 1
        topic = "volcano eruption in Iceland" if unanswerable else "game in Denver"
        ex = Example(
            f"{prefix}{i}",
            f"Who watched the {topic}?",
            CONTEXT,
            () if unanswerable else (Answer("The Broncos", 0),),
            () if unanswerable else ("The Broncos",),
            unanswerable,
        )
        examples.append(ex)
        nbest[ex.id] = [
            {"text": "The Broncos", "start_char": 0, "end_char": 11, "score": 5.0},
            {"text": "Denver", "start_char": 28, "end_char": 34, "score": 4.0},
        ]
        nbest[ex.id][0]["probability"], nbest[ex.id][1]["probability"] = 0.7, 0.3
        odds[ex.id] = float(rng.normal())
    return examples, nbest, odds


def _write(directory: Path, nbest: dict, odds: dict) -> None:
    directory.mkdir(parents=True)
    (directory / "nbest_predictions.json").write_text(json.dumps(nbest))
    (directory / "null_odds.json").write_text(json.dumps(odds))


def test_the_verifier_arms_are_fitted_on_validation_and_scored_on_held_out(tmp_path):
    val, val_nbest, val_odds = _questions("v", 40, 0)
    heldout, ho_nbest, ho_odds = _questions("h", 20, 1)
    runs = tmp_path / "runs"
    split = runs / "_validation" / "slice"
    split.mkdir(parents=True)
    (split / "val.json").write_text(json.dumps(to_squad_json(val, True)))
    data = tmp_path / "data" / "splits"
    data.mkdir(parents=True)
    (data / "squad2-heldout.v2.0.json").write_text(json.dumps(to_squad_json(heldout, True)))
    best = runs / "variant=a,seed=0" / "best"
    _write(best, val_nbest, val_odds)
    _write(best / "heldout", ho_nbest, ho_odds)

    out = tmp_path / "out"
    script = load_script("squad2_verifier")
    assert script.main([str(runs), "--out", str(out), "--data", str(tmp_path / "data")]) == 0
    got = json.loads((out / "verifier.json").read_text())["variant=a,seed=0"]
    assert set(got) == {
        "null odds",
        "lexical verifier",
        "similarity verifier",
        "auto (the default)",
    }
    assert got["lexical verifier"]["NoAns_auc"] == 100.0  # the question's words tell
    assert got["similarity verifier"]["NoAns_auc"] == 100.0
    assert got["null odds"]["NoAns_auc"] < 90  # noise
    assert got["auto (the default)"] == got["similarity verifier"]  # it ranks better: kept
    assert (out / "reliability" / "variant=a,seed=0" / "reliability.png").is_file()
    assert "**a, mean of 1**" in (out / "verifier.md").read_text()
