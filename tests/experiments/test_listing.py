"""The --dry-run listing on hand-made result files: whole run names however narrow the output,
and how many finished runs kept no answers for `compare` and `--bootstrap`."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from structqa.experiments import listing
from structqa.experiments.grid import experiment_from_dict
from structqa.experiments.spec import Experiment
from structqa.experiments.store import Paths
from structqa.io import write_json

# names alike in their first 40 characters, as configs/combos/grid.yaml's are
LONG = {
    "name": "long",
    "variants": [
        {"name": "independent.naa-naa-ffn", "model.head": "independent"},
        {"name": "independent.sa-sa-ft-longer", "model.head": "independent"},
    ],
    "grid": {"data.train_size": [256, 1024], "train.seed": [0]},
    "table": {"rows": ["variant"], "columns": "data.train_size"},
}


def finished(exp: Experiment, paths: Paths) -> list[str]:
    """Every run of ``exp`` finished (a result file each); their names."""
    for run in exp.runs():
        write_json(
            paths.result(run), {"run": run.name, "metrics": {"f1": 50.0, "exact_match": 40.0}}
        )
    return [run.name for run in exp.runs()]


@pytest.mark.parametrize("terminal", [False, True])
def test_run_names_are_never_cut(tmp_path, capsys, monkeypatch, terminal):
    monkeypatch.setenv("COLUMNS", "60")
    if terminal:  # (a narrow terminal: the name folds onto the next line)
        monkeypatch.setenv("FORCE_COLOR", "1")
    else:
        monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")  # (a dumb terminal is taken as 80 columns)
    exp = experiment_from_dict(LONG)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    names = finished(exp, paths)
    listing.print_plan(exp, paths)
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # (colours)
    assert "…" not in out
    if terminal:
        assert max(len(line) for line in out.splitlines()) <= 60
    else:  # piped: one line per run, the whole name on it, for `| grep NAME`
        lines = out.splitlines()
        for name in names:
            assert sum(f" {name} " in line for line in lines) == 1, name


def test_the_listing_counts_finished_runs_without_kept_answers(tmp_path, capsys):
    exp = experiment_from_dict(LONG)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    finished(exp, paths)
    kept, in_output, _, _ = exp.runs()
    paths.answers(kept).parent.mkdir(parents=True)
    paths.answers(kept).write_bytes(gzip.compress(json.dumps({"q": "a"}).encode()))
    (paths.output(in_output) / "best").mkdir(parents=True)
    (paths.output(in_output) / "best" / "predictions.json").write_text('{"q": "a"}')
    listing.print_plan(exp, paths)
    out = " ".join(capsys.readouterr().out.split())
    assert "answers: 3 of 4 finished run(s) have no answers kept" in out
    assert "1 of them still have theirs in the output directory" in out
    assert "`structqa compare` and `--bootstrap` cannot score 2 of them again" in out
    for run in exp.runs():  # every answer kept: nothing to say
        paths.answers(run).write_bytes(paths.answers(kept).read_bytes())
    listing.print_plan(exp, paths)
    assert "answers:" not in capsys.readouterr().out
