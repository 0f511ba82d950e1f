"""scripts/fit_vs_f1.py: F1 against the end-of-fine-tuning training loss, rank-correlated."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType

import pytest
from scipy.stats import spearmanr
from tiny import load_script


def _script() -> ModuleType:
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


def test_nan_and_constant_inputs_are_refused() -> None:
    script = _script()
    with pytest.raises(ValueError, match="NaN"):
        script.spearman([1.0, 2.0, 3.0, 4.0], [math.nan, 1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="constant"):
        script.spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0])


def _write_runs(tmp_path: Path, table: dict[str, tuple[float, list[float]]]) -> tuple[Path, Path]:
    runs, results = tmp_path / "runs", tmp_path / "results"
    (results / "runs").mkdir(parents=True)
    for name, (f1, losses) in table.items():
        run = runs / f"variant={name},seed=0"
        run.mkdir(parents=True)
        lines = [json.dumps({"step": 10 * i, "loss": v}) for i, v in enumerate(losses)]
        lines.append(json.dumps({"step": 20, "eval": {"f1": 0.0}}))  # eval lines are skipped
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        (results / "runs" / f"{run.name}.json").write_text(json.dumps({"metrics": {"f1": f1}}))
    return runs, results


def test_a_diverged_run_ranks_as_the_worst_fit(tmp_path: Path, capsys) -> None:
    table = {"a": (50.0, [3.0, 1.0]), "b": (10.0, [3.0, math.nan]), "c": (40.0, [3.0, 1.5])}
    runs, results = _write_runs(tmp_path, table)
    assert _script().main([str(runs), str(results), "--last", "1"]) == 0
    out = capsys.readouterr().out
    assert "variant=b,seed=0: non-finite training loss" in out
    rows = [line.split(" | ")[0] for line in out.splitlines() if line.startswith("| variant=")]
    assert rows == ["| variant=a,seed=0", "| variant=c,seed=0", "| variant=b,seed=0"]
    assert "over 3 runs: -1.000" in out


def test_rows_pair_each_run_with_its_result(tmp_path: Path, capsys) -> None:
    table = {"a": (50.0, [3.0, 1.0]), "b": (30.0, [3.0, 2.0]), "c": (40.0, [3.0, 1.5])}
    runs, results = _write_runs(tmp_path, table)
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
