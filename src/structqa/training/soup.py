"""Weight averaging: one checkpoint whose weights are the mean of several runs' ("a model
soup", Wortsman et al. 2022).

The runs must share their architecture and the weights they started from (the same encoder,
``model.init_from`` and ``train.init_seed``): runs fine-tuned from one start stay close
enough that the mean of their weights is a model of its own, often better than any of them,
at one model's cost to read. Runs that started apart (another ``init_seed``) are refused
unless ``force`` says otherwise: their new layers began in different places, and averaging
is only measured here for runs from one start (docs/results/reader-soup-cpu).

The soup keeps what defines the model (weights, encoder and structqa configs, tokenizer) and
none of what a member measured or fitted on its own weights (metrics, calibration, answers,
an ONNX export, the train and resume states): calibrate, export and score the soup itself.
Its ``soup.json`` names the members (path, the SHA-256 of their weights, seeds, metrics).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from structqa.io import read_json, write_json
from structqa.manifest import (
    MANIFEST,
    file_sha256,
    listed_sha256,
    seal_file,
    verify_manifest,
)
from structqa.models.build import not_a_checkpoint
from structqa.training.checkpoint import seal_checkpoint

WEIGHTS = "model.safetensors"
CONFIG = "structqa_config.json"
SOUP_RECORD = "soup.json"
#: a member's own measurements and fits, not the soup's
MEMBER_ONLY = frozenset(
    {
        WEIGHTS,
        MANIFEST,
        SOUP_RECORD,
        "metrics.json",
        "calibration.json",
        "predictions.json",
        "nbest_predictions.json",
        "null_odds.json",
        "train_state.json",
        "resume.pt",
        "onnx",
        "test",
        "eval",  # the end-of-training test's scores (heldout.TEST_DIR): a member's, not the soup's
    }
)


def member_only(name: str) -> bool:
    """A member's own file or folder (:data:`MEMBER_ONLY`, or `evaluate`'s ``eval-NAME``)."""
    return name in MEMBER_ONLY or name.startswith("eval-")


class SoupRefused(ValueError):
    """Checkpoints that cannot be averaged, and why."""


def _init_seed(config: dict[str, Any]) -> Any:
    """The seed of a run's new layers (its ``model.init_from`` is part of its model section,
    compared with the architecture)."""
    train = config.get("train", {})
    return train.get("seed") if train.get("init_seed") is None else train["init_seed"]


def check_members(members: Sequence[Path], force: bool = False) -> list[dict[str, Any]]:
    """Each member's config, after checking that the members can be averaged: at least two,
    each a checkpoint whose files match its manifest, of one architecture and tokenizer, and
    (unless ``force``) from one start."""
    if len(members) < 2:
        raise SoupRefused("a soup needs at least two checkpoints (RUN/best directories)")
    if len({p.resolve() for p in members}) < len(members):
        raise SoupRefused("a checkpoint is named twice: give each run once")
    configs = []
    for path in members:
        for needed in (WEIGHTS, CONFIG):
            if not (path / needed).is_file():
                raise SoupRefused(not_a_checkpoint(path, needed))
        verify_manifest(path)
        configs.append(read_json(path / CONFIG))
    first, first_path = configs[0], members[0]
    tokenizer = file_sha256(first_path / "tokenizer.json")
    for path, config in zip(members[1:], configs[1:], strict=True):
        if config["model"] != first["model"]:
            diff = sorted(k for k in first["model"] if first["model"][k] != config["model"].get(k))
            raise SoupRefused(
                f"{path}: another model than {first_path} ({CONFIG} model.{', model.'.join(diff)} "
                "differ): only runs of one architecture can be averaged"
            )
        if file_sha256(path / "tokenizer.json") != tokenizer:
            raise SoupRefused(f"{path}: another tokenizer than {first_path}")
        if not force and _init_seed(config) != _init_seed(first):
            raise SoupRefused(
                f"{path} started from other weights than {first_path} (init_seed "
                f"{_init_seed(config)} against {_init_seed(first)}): a soup averages runs "
                "from one start. Train the members with one --train.init_seed (their "
                "--train.seed may differ), or pass --force to average them anyway"
            )
    return configs


def average_weights(members: Sequence[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the members' weights (accumulated in float64, saved in each
    tensor's own dtype); integer tensors (position ids) must be equal and are kept."""
    total: dict[str, torch.Tensor] = {}
    kept: dict[str, torch.Tensor] = {}
    reference: dict[str, tuple[torch.dtype, torch.Size]] = {}
    for n, path in enumerate(members):
        weights = load_file(str(path / WEIGHTS))
        if n == 0:
            reference = {k: (v.dtype, v.shape) for k, v in weights.items()}
        elif set(weights) != set(reference):
            odd = sorted(set(weights) ^ set(reference))[:3]
            raise SoupRefused(f"{path / WEIGHTS}: other tensors than {members[0]} ({odd})")
        for key, value in weights.items():
            if (value.dtype, value.shape) != reference[key]:
                raise SoupRefused(
                    f"{path / WEIGHTS}: tensor {key} is {value.dtype} {tuple(value.shape)}, "
                    f"{reference[key][0]} {tuple(reference[key][1])} in {members[0]}"
                )
            if not value.is_floating_point():
                if n and not torch.equal(value, kept[key]):
                    raise SoupRefused(f"{path / WEIGHTS}: integer tensor {key} differs")
                kept[key] = value
            elif n == 0:
                total[key] = value.to(torch.float64)
            else:
                total[key] += value.to(torch.float64)
    mean = {k: (v / len(members)).to(reference[k][0]).contiguous() for k, v in total.items()}
    return {**mean, **kept}


def _member_record(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    metrics = path / "metrics.json"
    return {
        "path": str(path),
        # (verified by check_members: the manifest's digest, not the weights hashed again)
        "weights_sha256": listed_sha256(path, WEIGHTS),
        "seed": config.get("train", {}).get("seed"),
        "init_seed": config.get("train", {}).get("init_seed"),
        "metrics": read_json(metrics) if metrics.is_file() else None,
    }


def make_soup(members: Sequence[str | Path], out: str | Path, force: bool = False) -> Path:
    """Write the uniform soup of ``members`` as the checkpoint ``out`` (written aside, sealed
    with its manifest, then swapped in); refuses an existing ``out``."""
    paths = [Path(m) for m in members]
    out = Path(out)
    if out.exists():
        raise SoupRefused(f"{out} exists: give another --out, or delete it first")
    return _write_soup(paths, check_members(paths, force), out, force)


def _write_soup(
    paths: Sequence[Path], configs: Sequence[dict[str, Any]], out: Path, force: bool = False
) -> Path:
    """The uniform soup of members already checked (:func:`check_members`) as ``out``."""
    weights = average_weights(paths)
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for item in paths[0].iterdir():
        if member_only(item.name) or item.name.endswith((".tmp", ".old")):
            continue
        if item.is_dir():
            shutil.copytree(item, tmp / item.name)
        else:
            shutil.copy2(item, tmp / item.name)
    save_file(weights, str(tmp / WEIGHTS))
    write_json(
        tmp / SOUP_RECORD,
        {
            "kind": "uniform",
            "forced": force,
            "members": [_member_record(p, c) for p, c in zip(paths, configs, strict=True)],
        },
    )
    seal_checkpoint(tmp, out)
    return out


def greedy_soup(
    members: Sequence[str | Path],
    out: str | Path,
    score: Callable[[Path], float],
    scores: Sequence[float] | None = None,
) -> dict[str, Any]:
    """The greedy soup (Wortsman et al. 2022) as the checkpoint ``out``: the members ranked by
    ``score`` (higher is better; validation questions, never the test's), or by ``scores``
    already measured in the same way, then each added to the soup in that order only when
    the soup's score does not drop. The soup is thus never below its best member on what
    ``score`` measures; a soup of one member is that member's copy. Returns the path taken
    (also recorded in ``out``'s soup.json)."""
    paths = [Path(m) for m in members]
    out = Path(out)
    if out.exists():
        raise SoupRefused(f"{out} exists: give another --out, or delete it first")
    configs = dict(zip(paths, check_members(paths), strict=True))
    measured = list(scores) if scores is not None else [score(p) for p in paths]
    order = sorted(range(len(paths)), key=lambda i: -measured[i])
    kept, best = [order[0]], measured[order[0]]
    steps: list[dict[str, Any]] = []
    trial = out.with_name(out.name + ".trial")
    for i in order[1:]:
        if trial.exists():
            shutil.rmtree(trial)
        chosen = [paths[j] for j in (*kept, i)]
        _write_soup(chosen, [configs[p] for p in chosen], trial)
        value = score(trial)
        steps.append({"added": str(paths[i]), "score": value, "kept": value >= best})
        if value >= best:
            kept, best = [*kept, i], value
        shutil.rmtree(trial)
    if len(kept) == 1:
        tmp = out.with_name(out.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        shutil.copytree(paths[kept[0]], tmp, ignore=shutil.ignore_patterns("onnx", "eval*", "test"))
        (tmp / MANIFEST).unlink(missing_ok=True)
        seal_checkpoint(tmp, out)
    else:
        _write_soup([paths[j] for j in kept], [configs[paths[j]] for j in kept], out)
    path = {
        "kind": "greedy",
        "members": [str(p) for p in paths],
        "member_scores": measured,
        "order": [str(paths[i]) for i in order],
        "steps": steps,
        "kept": [str(paths[j]) for j in kept],
        "score": best,
    }
    record = out / SOUP_RECORD
    earlier = read_json(record) if record.is_file() else {}
    write_json(record, {**earlier, **path})
    seal_file(out, SOUP_RECORD)
    return path


__all__ = [
    "SOUP_RECORD",
    "SoupRefused",
    "average_weights",
    "check_members",
    "greedy_soup",
    "make_soup",
]
