"""`structqa config`: every setting of every command's config, with its type, default and
help, from the dataclasses; the YAML it writes loads back as the defaults."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import yaml

from structqa.cli import main
from structqa.commands.settings import CONFIG_CLASSES, config_class, sections, yaml_value
from structqa.config import load_config


def all_fields(cls: type, prefix: str = ""):
    """(dotted name, field) of every field of a config class and of its sections."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        yield prefix + f.name, f
        if dataclasses.is_dataclass(hints[f.name]):
            yield from all_fields(hints[f.name], f"{prefix}{f.name}.")


@pytest.mark.parametrize("command", sorted(CONFIG_CLASSES))
def test_every_field_of_every_config_has_one_line_help(command: str) -> None:
    missing = [
        name
        for name, f in all_fields(config_class(command))
        if not f.metadata.get("help", "").strip() or "\n" in f.metadata["help"]
    ]
    assert missing == [], f"{command}: fields without one-line help: {missing}"


@pytest.mark.parametrize("command", sorted(CONFIG_CLASSES))
def test_the_listing_names_every_key_with_type_default_and_help(command: str, capsys) -> None:
    assert main(["config", "--command", command]) == 0
    out = capsys.readouterr().out
    cls = config_class(command)
    settings = [s for _, _, items in sections(cls) for s in items]
    assert len(settings) == sum(1 for name, _ in all_fields(cls) if "." in name)
    for s in settings:
        assert f"  {s.dotted}: {s.type} = {yaml_value(s.default)}\n      {s.help}\n" in out


def test_train_settings_show_their_real_types_and_defaults(capsys) -> None:
    assert main(["config", "train.lr"]) == 0
    assert capsys.readouterr().out.startswith("  train.lr: float = 0.0001\n      peak learning")
    assert main(["config", "data"]) == 0
    out = capsys.readouterr().out
    assert "  data.eval_size: int | null = null\n" in out
    assert "  data.validation: str | null = '0.1'\n" in out
    assert "  train." not in out  # one section only


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["config", "dta"], "did you mean 'data'"), (["config", "train.lrr"], "did you mean 'lr'")],
)
def test_unknown_sections_and_keys_name_the_closest(args, needle, capsys) -> None:
    assert main(args) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(CONFIG_CLASSES))
def test_the_yaml_is_commented_and_loads_back_as_the_defaults(command, tmp_path, capsys):
    assert main(["config", "--yaml", "--command", command]) == 0
    text = capsys.readouterr().out
    path = tmp_path / "start.yaml"
    path.write_text(text)
    cls = config_class(command)
    assert load_config(path, cls=cls).to_dict() == cls().to_dict()
    # every key is written, each under a comment with its help
    data = yaml.safe_load(text)
    for name, items in ((n, i) for n, _, i in sections(cls)):
        assert [s.key for s in items] == list(data[name])
        for s in items:
            assert f"  # {s.help} ({s.type})\n  {s.key}: " in text


def test_train_loads_the_written_yaml(tmp_path, tiny_checkpoint, shared_data, capsys) -> None:
    """`structqa config --yaml > my.yaml`, edited, then `structqa train my.yaml`."""
    assert main(["config", "--yaml"]) == 0
    text = capsys.readouterr().out
    text = text.replace("encoder: default", f"encoder: {tiny_checkpoint}")
    text = text.replace("max_steps: null", "max_steps: 2")
    path = tmp_path / "my.yaml"
    path.write_text(text)
    out = tmp_path / "run"
    args = [
        "train",
        str(path),
        f"--data={shared_data}",
        "--data.train=fixtures/squad-v1.1-mini.json",
        "--data.train_size=all",
        "--data.validation=0.2",
        f"--train.output_dir={out}",
        "--train.bf16=off",
        "--no-progress",
    ]
    assert main(args) == 0
    assert (out / "best" / "model.safetensors").is_file()


@pytest.mark.parametrize("command", ["train", "quickstart", "evaluate", "pretrain", "drop-train"])
def test_command_help_names_the_sections_and_points_to_config(command, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "structqa config" in out and "--section.key=value" in out
    for name, _, _ in sections(
        config_class("train" if command in ("quickstart", "evaluate") else command)
    ):
        assert name in out
