"""scripts/soup_grid.py: a grid's runs of one variant averaged, scored, beside their ensemble."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from tiny import load_script, mini_train_args

from structqa.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")
MINI = "fixtures/squad-v1.1-mini.json"


def test_each_variant_is_souped_scored_and_ensembled(
    tmp_path: Path, tiny_checkpoint: Path, shared_data: Path
) -> None:
    runs = tmp_path / "runs"
    for seed in (0, 1, 2):
        out = runs / f"variant=plain,seed={seed}"
        args = mini_train_args("train", shared_data, tiny_checkpoint, out, MINI, steps=2)
        assert main([*args, f"--train.seed={seed}", "--train.init_seed=0", "--no-progress"]) == 0
    (runs / "soup-by-hand").mkdir()  # not a grid run: ignored
    script = load_script("soup_grid")
    assert [s for s, _ in script.grid_runs(runs, None)["plain"]] == [0, 1, 2]
    assert [s for s, _ in script.grid_runs(runs, {0, 2})["plain"]] == [0, 2]
    results = tmp_path / "soups"
    eval_file = str(shared_data / MINI)
    assert (
        script.main([str(runs), "--eval", eval_file, "--out", str(results), "--seeds", "0,2"]) == 0
    )
    record = json.loads((results / "variant=plain.json").read_text())
    assert record["seeds"] == [0, 2] and len(record["members"]) == 2
    assert 0 <= record["soup"]["f1"] <= 100 and 0 <= record["ensemble"]["f1"] <= 100
    assert record["commit"] and record["machine"]
    with gzip.open(results / "variant=plain.json.gz", "rt") as f:
        answers = json.load(f)
    questions = json.loads((shared_data / MINI).read_text())["data"]
    ids = {q["id"] for a in questions for p in a["paragraphs"] for q in p["qas"]}
    assert set(answers) == ids
    # the soup's recorded score is the score of the answers written
    from structqa.scoring import score_file

    assert score_file(eval_file, results / "variant=plain.json.gz")["f1"] == pytest.approx(
        record["soup"]["f1"]
    )
