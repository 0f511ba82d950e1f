"""``structqa config``: every setting of a command, with its type, default and help.

One source of truth: the config dataclasses (:mod:`structqa.config`,
:mod:`structqa.pretrain.config`, :mod:`structqa.ncbert.config`), whose fields carry their
one-line help in ``metadata["help"]`` (:func:`structqa.config.setting`). ``--yaml`` writes
every setting at its default as a commented YAML file that ``structqa train FILE`` loads.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import types
import typing
from dataclasses import dataclass
from typing import Any

import yaml

from structqa.commands.common import command

# command -> the config class its YAML and --section.key=value overrides fill
CONFIG_CLASSES = {
    "train": "structqa.config:Config",
    "pretrain": "structqa.pretrain.config:PretrainConfig",
    "drop-train": "structqa.ncbert.config:DropConfig",
}


@dataclass(frozen=True)
class Setting:
    section: str
    key: str
    type: str
    default: Any
    help: str

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.key}"


def config_class(command: str) -> type:
    module, _, name = CONFIG_CLASSES[command].partition(":")
    return getattr(importlib.import_module(module), name)


def type_name(tp: Any) -> str:
    """``int | None`` -> ``int | null``; ``list[str]``, ``dict[str, float]`` as written; a
    ``Literal`` as its choices."""
    if tp is type(None):
        return "null"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Literal:  # a choice: its names
        return "one of " + " | ".join(str(a) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    return getattr(tp, "__name__", str(tp))


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def sections(cls: type) -> list[tuple[str, str, list[Setting]]]:
    """``(section, its help, its settings)`` of a config class, in declaration order."""
    out = []
    hints = typing.get_type_hints(cls)
    for sf in dataclasses.fields(cls):
        section_cls = hints[sf.name]
        inner = typing.get_type_hints(section_cls)
        items = [
            Setting(
                sf.name, f.name, type_name(inner[f.name]), _default(f), f.metadata.get("help", "")
            )
            for f in dataclasses.fields(section_cls)
        ]
        out.append((sf.name, sf.metadata.get("help", ""), items))
    return out


def yaml_value(value: Any) -> str:
    """A value as YAML writes it in flow style (``null``, ``'512'``, ``[]``, ``0.0001``)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000)
    return text.removesuffix("\n...\n").strip()


def render_list(cls: type, command: str, only: str | None = None) -> str:
    """The settings of ``cls`` (or of one section, or one ``section.key``) as text."""
    found = sections(cls)
    names = [name for name, _, _ in found]
    section, _, key = (only or "").partition(".")
    if section and section not in names:
        raise ValueError(
            f"no section {section!r} in the {command} config{_closest(section, names)}"
        )
    lines = []
    if not section:
        lines += [
            f"structqa {command} settings: give them in a YAML file (sections as below) or as "
            "--section.key=value",
            "",
        ]
    for name, about, items in found:
        if section and name != section:
            continue
        if key:
            keys = [s.key for s in items]
            if key not in keys:
                raise ValueError(f"no setting {only!r}{_closest(key, keys)}")
            items = [s for s in items if s.key == key]
        else:
            lines.append(f"{name}: {about}")
        for s in items:
            lines.append(f"  {s.dotted}: {s.type} = {yaml_value(s.default)}")
            lines.append(f"      {s.help}")
        lines.append("")
    if not section:
        lines.append(f"A file to start from: structqa config --yaml --command {command} > my.yaml")
    return "\n".join(lines).rstrip() + "\n"


def render_yaml(cls: type, command: str) -> str:
    """Every setting at its default, each under a comment with its help and type."""
    lines = [
        f"# structqa {command} config: every setting at its default, from `structqa config "
        f"--yaml --command {command}`.",
        f"# Edit, then: structqa {command} THIS.yaml (command-line --section.key=value wins).",
    ]
    for name, about, items in sections(cls):
        lines += ["", f"{name}:  # {about}"]
        for s in items:
            lines.append(f"  # {s.help} ({s.type})")
            lines.append(f"  {s.key}: {yaml_value(s.default)}")
    return "\n".join(lines) + "\n"


def _closest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.4)
    return f"; did you mean {close[0]!r}?" if close else f"; there are: {', '.join(options)}"


def sections_epilog(command: str) -> str:
    """For a command's --help: its config sections and where to read every setting."""
    names = ", ".join(name for name, _, _ in sections(config_class(command)))
    return (
        f"Settings: sections {names}, given in a YAML file or as --section.key=value (e.g. "
        f"--train.lr=3e-5). `structqa config{'' if command == 'train' else ' --command ' + command}"
        " [SECTION]` lists every one with its type, default and help; `--yaml` writes a "
        "commented file to start from."
    )


def cmd_config(args: argparse.Namespace, extra: list[str]) -> int:
    cls = config_class(args.for_command)
    if args.yaml:
        if args.section:
            raise ValueError("--yaml writes the whole config; leave out SECTION")
        print(render_yaml(cls, args.for_command), end="")
    else:
        print(render_list(cls, args.for_command, args.section), end="")
    return 0


_CONFIG_TEXT = """list every setting (type, default, help), or write a commented YAML config

Every setting of `structqa train` (or of --command pretrain / drop-train) with its type, default
and one-line help. `structqa config data` shows one section, `structqa config train.lr` one
setting; `structqa config --yaml > my.yaml` writes a complete, commented config that `structqa
train my.yaml` loads.
"""


def add_parser(subparsers) -> None:
    c = command(subparsers, "config", _CONFIG_TEXT)
    c.add_argument("section", nargs="?", help="a section (e.g. data) or one setting (train.lr)")
    c.add_argument(
        "--command",
        dest="for_command",
        default="train",
        choices=sorted(CONFIG_CLASSES),
        help="whose settings (default train; quickstart and evaluate share train's)",
    )
    c.add_argument("--yaml", action="store_true", help="write a commented YAML config")
    c.set_defaults(func=cmd_config)
