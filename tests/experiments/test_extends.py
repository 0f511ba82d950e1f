"""An experiment YAML that ``extends:`` another states only what differs from it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from structqa.config import ConfigError
from structqa.experiments.grid import load_experiment, read_experiment_yaml

ROOT = Path(__file__).resolve().parents[2]

PARENT = {
    "name": "parent",
    "description": "a grid",
    "base": {"train": {"lr": 3.0e-5, "epochs": 2}, "data": {"max_seq_len": 256}},
    "variants": [{"name": "a"}, {"name": "b", "train": {"lr": 1.0e-4}}],
    "grid": {"train.seed": [0], "train.epochs": [2]},
    "table": {"title": "parent's", "rows": ["variant"], "columns": "train.epochs"},
}


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_the_child_lays_its_keys_over_the_parent(tmp_path):
    _write(tmp_path / "parent.yaml", PARENT)
    child = _write(
        tmp_path / "child.yaml",
        {
            "extends": "parent.yaml",  # from the child's folder
            "name": "child",
            "base": {"train": {"lr": 5.0e-5}},
            "grid": {"train.seed": [0, 1, 2]},
            "variants": [{"name": "a"}],
        },
    )
    got = read_experiment_yaml(child)
    assert "extends" not in got and got["name"] == "child"
    # mappings merge key by key; lists and values are replaced
    assert got["base"] == {"train": {"lr": 5.0e-5, "epochs": 2}, "data": {"max_seq_len": 256}}
    assert got["grid"] == {"train.seed": [0, 1, 2], "train.epochs": [2]}
    assert got["variants"] == [{"name": "a"}] and got["table"] == PARENT["table"]
    exp = load_experiment(child)
    assert exp.name == "child" and exp.source == str(child)
    assert exp.axes["train.seed"] == [0, 1, 2]
    # the parent file is read, not changed
    assert yaml.safe_load((tmp_path / "parent.yaml").read_text()) == PARENT


def test_extends_chains_and_refuses_cycles_and_shared_names(tmp_path):
    _write(tmp_path / "parent.yaml", PARENT)
    _write(
        tmp_path / "mid.yaml",
        {"extends": "parent.yaml", "name": "mid", "grid": {"train.epochs": [3]}},
    )
    last = _write(tmp_path / "last.yaml", {"extends": "mid.yaml", "name": "last"})
    assert read_experiment_yaml(last)["grid"] == {"train.seed": [0], "train.epochs": [3]}

    _write(tmp_path / "x.yaml", {"extends": "y.yaml", "name": "x"})
    _write(tmp_path / "y.yaml", {"extends": "x.yaml", "name": "y"})
    with pytest.raises(ConfigError, match="a cycle"):
        read_experiment_yaml(tmp_path / "x.yaml")
    same = _write(tmp_path / "same.yaml", {"extends": "parent.yaml", "grid": {"train.seed": [1]}})
    with pytest.raises(ConfigError, match="needs a 'name' of its own"):
        read_experiment_yaml(same)
    gone = _write(tmp_path / "gone.yaml", {"extends": "nowhere.yaml", "name": "gone"})
    with pytest.raises(ConfigError, match=r"gone.yaml.extends: nowhere.yaml does not exist"):
        read_experiment_yaml(gone)


@pytest.mark.parametrize(
    ("child", "parent", "seeds"),
    [
        ("configs/ncbert/drop3k-gpu.yaml", "configs/ncbert/drop3k.yaml", [0, 1, 2, 3, 4]),
        (
            "configs/documents/covidqa-5fold-gpu.yaml",
            "configs/documents/covidqa-5fold.yaml",
            [0, 1, 2],
        ),
    ],
)
def test_the_shipped_gpu_grids_are_their_cpu_grids_with_more_seeds(
    child, parent, seeds, monkeypatch
):
    monkeypatch.chdir(ROOT)
    gpu, cpu = load_experiment(child), load_experiment(parent)
    assert gpu.name != cpu.name and gpu.axes["train.seed"] == seeds
    assert gpu.base == cpu.base and gpu.variants == cpu.variants
    assert {k: v for k, v in gpu.axes.items() if k != "train.seed"} == {
        k: v for k, v in cpu.axes.items() if k != "train.seed"
    }
