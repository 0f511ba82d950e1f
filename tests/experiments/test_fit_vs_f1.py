"""scripts/fit_vs_f1.py: F1 against the end-of-fine-tuning training loss, rank-correlated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy.stats import spearmanr
from tiny import load_script


def _script():
    return load_script("fit_vs_f1")


@pytest.mark.parametrize(
    ("x", "y"),
    [
        ([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]),
        ([1.0, 2.0, 2.0, 5.0, 0.5], [3.0, 1.0, 1.0, 7.0, 2.0]),  # ties on both sides
        ([3.1, 0.2, 9.9, 4.4, 4.4, 1.0], [0.5, 0.5, 2.0, 8.0, 1.0, 3.0]),
    ],
)
def test_spearman_matches_scipy(x: list[float], y: list[float]) -> None:
    assert _script().spearman(x, y) == pytest.approx(spearmanr(x, y).statistic)


def test_rows_pair_each_run_with_its_result(tmp_path: Path, capsys) -> None:
    runs, results = tmp_path / "runs", tmp_path / "results"
    (results / "runs").mkdir(parents=True)
    table = {"a": (50.0, [3.0, 1.0]), "b": (30.0, [3.0, 2.0]), "c": (40.0, [3.0, 1.5])}
    for name, (f1, losses) in table.items():
        run = runs / f"variant={name},seed=0"
        run.mkdir(parents=True)
        lines = [json.dumps({"step": 10 * i, "loss": v}) for i, v in enumerate(losses)]
        lines.append(json.dumps({"step": 20, "eval": {"f1": 0.0}}))  # eval lines are skipped
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        (results / "runs" / f"{run.name}.json").write_text(json.dumps({"metrics": {"f1": f1}}))
    (runs / "variant=d,seed=0").mkdir()  # no result: left out
    assert _script().main([str(runs), str(results), "--last", "1"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| variant=")]
    assert lines == [
        "| variant=a,seed=0 | 50.00 | 1.00 |",
        "| variant=c,seed=0 | 40.00 | 1.50 |",
        "| variant=b,seed=0 | 30.00 | 2.00 |",
    ]
    assert "over 3 runs: -1.000" in out
