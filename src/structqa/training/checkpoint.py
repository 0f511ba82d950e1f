"""Checkpoints: model weights (safetensors), resolved config, tokenizer, and resume state.

Every checkpoint is written into a temporary directory, sealed with a ``manifest.json`` of its
files' sizes and hashes (:mod:`structqa.manifest`) and swapped into place, so an interruption
mid-write never leaves a half checkpoint behind and a file changed later is refused at loading.

``resume.pt`` holds tensors and plain Python data only (the RNG states converted), so it loads
with ``torch.load(weights_only=True)``: resuming a run directory from elsewhere cannot run code.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import random
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from structqa.config import config_changes
from structqa.encoders import encoder_config_dict
from structqa.io import (
    UnreadableFile,
    read_json,
    read_safetensors,
    recover_dir,
    replace_dir,
    write_json,
    write_text,
)
from structqa.manifest import verify_manifest, write_manifest
from structqa.provenance import INIT_RECORD

log = logging.getLogger(__name__)

# Settings a resumed run may change: where things live, how often it logs, saves or
# batches evaluation, and the verifier and the unanswerable share of the calibration fitted
# after training. Any other difference from the checkpoint's config refuses the resume.
RESUME_MAY_CHANGE = frozenset(
    {
        "train.output_dir",
        "data.dir",
        "data.annotation_cache",
        "train.log_every_steps",
        "train.save_every_steps",
        "train.eval_batch_size",
        "decode.verifier",  # used only by the calibration fitted once training is over
        "decode.unanswerable_share",  # (the same)
    }
)


@dataclass
class TrainState:
    """Where training stands; enough to continue exactly where it stopped."""

    epoch: int = 0  # current epoch (0-based)
    batch_in_epoch: int = 0  # micro-batches of this epoch already consumed
    global_step: int = 0  # optimizer steps taken
    best_f1: float = -1.0
    best_epoch: int = -1
    finished: bool = False
    seconds: float = 0.0  # wall time spent training, summed over every start that trained it
    # the training windows it was trained on (:func:`data_fingerprint`; "" before it was kept)
    data_windows: int = 0
    data_fingerprint: str = ""
    # the questions that choose best/ (:func:`check_same_choice`; "" before it was kept)
    choice_fingerprint: str = ""
    # whether it trains in bf16 autocast (:func:`check_same_precision`; None before it was
    # kept) and each start that trained it: step, commit, CPU, device, precision
    bf16: bool | None = None
    stints: list[dict[str, Any]] = field(default_factory=list)


def save_checkpoint(
    target: Path,
    model: torch.nn.Module,
    tokenizer,
    config: dict[str, Any],
    state: TrainState,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    metrics: dict[str, Any] | None = None,
    write_model: Callable[[Any, Path], None] | None = None,
    config_file: str = "structqa_config.json",
) -> None:
    """The one checkpoint writer: the model's files (``write_model(model, directory)``; by default a
    span model's safetensors and encoder config), the tokenizer, ``config`` as
    ``config_file``, the train state, metrics and resume state, written aside, sealed with
    their manifest and swapped in as ``target`` (:func:`seal_checkpoint`). The run's record
    of the checkpoint it started from (:data:`~structqa.provenance.INIT_RECORD`, beside
    ``target``) is copied in, so the checkpoint keeps it wherever it is moved."""
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    (write_model or _write_span_model)(model, tmp)
    write_json(tmp / config_file, config)
    start = target.parent / INIT_RECORD  # where this run's training started, if recorded
    if start.is_file():
        shutil.copy2(start, tmp / INIT_RECORD)
    tokenizer.save_pretrained(str(tmp))
    write_json(tmp / "train_state.json", asdict(state))
    if metrics is not None:
        write_json(tmp / "metrics.json", metrics)
    if optimizer is not None:
        save_resume_state(tmp, optimizer, scheduler)
    seal_checkpoint(tmp, target)


def _write_span_model(model: torch.nn.Module, directory: Path) -> None:
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(weights, str(directory / "model.safetensors"))
    write_json(directory / "encoder_config.json", encoder_config_dict(model.encoder))


def seal_checkpoint(tmp: Path, target: Path) -> None:
    """Record the fully written ``tmp``'s files in its manifest, then swap it in as ``target``."""
    write_manifest(tmp)
    replace_dir(tmp, target)


def save_resume_state(directory: Path, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    """resume.pt: optimizer, scheduler and every RNG, what --resume needs beyond weights."""
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": rng_state(),
        },
        directory / "resume.pt",
    )


def load_resume(path: Path) -> tuple[TrainState, dict[str, Any]]:
    """The train state and ``resume.pt`` of ``path``, read without unpickling code: a
    ``resume.pt`` holding anything but tensors and plain data is refused
    (:class:`UnreadableFile`)."""
    remedy = "start the run afresh in a new output_dir"
    saved = read_json(path / "train_state.json", remedy)
    if not isinstance(saved, dict):
        raise UnreadableFile(path / "train_state.json", "not a train state", remedy)
    known = {f.name for f in fields(TrainState)}
    newer = sorted(set(saved) - known)
    if newer:  # kept by a later structqa: what this version knows of the state still holds
        log.warning("%s: train state fields %s unknown here, left aside", path, newer)
    state = TrainState(**{k: v for k, v in saved.items() if k in known})
    resume = path / "resume.pt"
    try:
        with torch.serialization.safe_globals(_LEGACY_NUMPY_GLOBALS):
            extra = torch.load(resume, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise UnreadableFile(
            resume,
            "holds Python objects besides tensors and plain data, which are not unpickled "
            f"since that could run code ({_refused_global(str(err))})",
            "resume only runs saved by structqa; otherwise start the run afresh in a new "
            "output_dir",
        ) from None
    except (RuntimeError, EOFError) as err:  # torch's zip reader on a cut-short file
        raise UnreadableFile(resume, f"not a readable resume state ({err})", remedy) from None
    if not isinstance(extra, dict) or not {"optimizer", "scheduler", "rng"} <= set(extra):
        raise UnreadableFile(resume, "not a structqa resume state", remedy)
    return state, extra


def _refused_global(message: str) -> str:
    """The line of torch's weights-only error that names the refused global."""
    found = re.search(r"Unsupported global: GLOBAL (\S+)", message)
    return f"it refers to {found.group(1)}" if found else message.splitlines()[0]


def _legacy_numpy_globals() -> list[Any]:
    """What a ``resume.pt`` from before plain RNG states needs beyond tensors: numpy's RNG
    state was saved as a uint32 array. Rebuilding arrays runs no code, so these are allowed
    (torch's documented allow-list for numpy arrays)."""
    from numpy.dtypes import UInt32DType

    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    return [
        _reconstruct,
        (_reconstruct, "numpy.core.multiarray._reconstruct"),
        np.ndarray,
        np.dtype,
        UInt32DType,
    ]


_LEGACY_NUMPY_GLOBALS = _legacy_numpy_globals()


def rng_state() -> dict[str, Any]:
    """Every RNG's state as tensors and plain data (``torch.load(weights_only=True)`` reads
    it back): Python's Mersenne Twister words as a list of ints, numpy's as an int64 tensor."""
    version, words, gauss = random.getstate()
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "python": {"version": version, "state": list(words), "gauss": gauss},
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(s: dict[str, Any]) -> None:
    """Restore :func:`rng_state`'s states (also the raw tuples older checkpoints saved)."""
    py, npy = s["python"], s["numpy"]
    if isinstance(py, dict):
        py = (py["version"], tuple(py["state"]), py["gauss"])
    random.setstate(tuple(py))
    if isinstance(npy, dict):
        keys = npy["keys"].numpy().astype(np.uint32)
        npy = ("MT19937", keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"])
    np.random.set_state(npy)
    torch.set_rng_state(s["torch"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def resumable(last_dir: Path) -> bool:
    """Whether ``last_dir`` holds a checkpoint to resume from, after recovering it from a
    crash in the middle of its atomic swap (:func:`structqa.io.recover_dir`)."""
    recover_dir(last_dir)
    return (last_dir / "resume.pt").exists()


def resume_from(
    last_dir: Path,
    resume: bool,
    load_weights: Callable[[Path], None],
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    config: dict[str, Any] | None = None,
    config_file: str = "structqa_config.json",
) -> TrainState:
    """Where a loop starts: with ``resume`` and a checkpoint in ``last_dir`` (see
    :func:`resumable`), its state with weights, optimizer, scheduler and RNG restored;
    otherwise a fresh state. Callers stop when the returned state is ``finished``.

    ``config`` (this stint's, as a dict) is checked against the one the checkpoint saved
    in ``config_file``: a resume with other data, seed, batch size, schedule or model is
    refused (ValueError), since it would not continue the run it names. A fresh start into
    a directory that already holds a checkpoint is refused too: it would overwrite it (with
    ``resume`` and no ``last_dir``, a warning says so: a run stopped before its first save
    starts afresh)."""
    if resume and resumable(last_dir):
        saved = last_dir / config_file
        if config is not None and saved.is_file():
            check_same_config(last_dir, read_json(saved), config)
        return restore(last_dir, load_weights, optimizer, scheduler)
    out = last_dir.parent
    if not resume:
        check_fresh_start(out)
    elif (out / "best").is_dir() or (out / "final").is_dir():
        # (a run stopped before its first last/ is started afresh by the build and the
        # experiment runner; a person who removed last/ is told what the start replaces)
        log.warning(
            "--resume: nothing to resume in %s, but %s holds a checkpoint; starting fresh, "
            "and the first evaluation replaces it (move it away to keep it)",
            last_dir,
            out,
        )
    else:
        log.info("nothing to resume in %s; starting fresh", last_dir)
    return TrainState()


class RunExists(ValueError):
    """A fresh run was asked to train into a directory that holds another run."""


def check_fresh_start(out: Path) -> None:
    """Refuse a fresh run into ``out`` when it holds another run's checkpoints (:class:`
    RunExists`): a loop calls it before it reads any data, so the refusal costs a second."""
    held = [p.name for p in sorted(out.iterdir()) if p.is_dir()] if out.is_dir() else []
    held = [n for n in held if n.split(".")[0] in _CHECKPOINT_DIRS]
    if held:
        raise RunExists(
            f"{out} already holds a run ({', '.join(held)}); continue it with --resume, or "
            "train into another output_dir (or delete this one)"
        )


# checkpoint directories of the training loops (a ".tmp" or ".old" twin counts too)
_CHECKPOINT_DIRS = ("last", "best", "final")


def data_fingerprint(lengths: Sequence[int]) -> str:
    """A digest of the training windows' token lengths in their order, for a task that
    gives no digest of its own (:func:`check_same_data`)."""
    return hashlib.sha256(",".join(map(str, lengths)).encode()).hexdigest()[:16]


def check_same_data(
    last_dir: Path, state: TrainState, lengths: Sequence[int], digest: str | None = None
) -> None:
    """Refuse to continue a run on other training windows than it was trained on; then keep
    their count and digest in ``state``. ``digest``: the task's own, of the windows' tokens
    and labels (extractive QA's); else one of their lengths. The same data read from a moved
    directory gives the same digest; another file (a changed ``data.dir`` that resolves a
    relative ``data.train`` elsewhere), an edited one, or a structqa version that cuts the
    windows differently gives another. A state saved before digests were kept is not checked."""
    digest = digest or data_fingerprint(lengths)
    if state.data_fingerprint and state.data_fingerprint != digest:
        raise ValueError(
            f"{last_dir}: cannot resume, the training windows differ from those it was "
            f"trained on ({state.data_windows} then, {len(lengths)} now; digest "
            f"{state.data_fingerprint} then, {digest} now): data.dir, data.train or the file "
            "changed since, or a structqa version that cuts or labels the windows differently "
            "read it. Give the same data (and version) to continue this run, or start afresh "
            "in another output directory"
        )
    state.data_windows, state.data_fingerprint = len(lengths), digest


def check_same_choice(last_dir: Path, state: TrainState, digest: str) -> None:
    """Refuse to continue a run whose best/ would be chosen on other questions than it was
    (an edited validation file: best/'s score and saved answers were of the old questions,
    and the calibration fitted after training read them as answers to the new ones); then
    keep the digest in ``state``. A state saved before it was kept is not checked."""
    if state.choice_fingerprint and state.choice_fingerprint != digest:
        raise ValueError(
            f"{last_dir}: cannot resume, the questions that choose best/ differ from those "
            f"it was chosen on (digest {state.choice_fingerprint} then, {digest} now): "
            "data.validation, data.eval or their file changed since. Give the same questions "
            "to continue this run, or start afresh in another output directory"
        )
    state.choice_fingerprint = digest


def check_same_precision(last_dir: Path, state: TrainState, bf16: bool, setting: str) -> None:
    """Refuse to go on in another precision than the run trained in (``train.bf16=auto``
    follows the machine and its thread count: a run stopped under one and resumed under
    another would mix bf16 and fp32 steps; the setting itself may not change on resume),
    then record the precision."""
    if state.bf16 is not None and state.bf16 != bf16:
        name = {True: "bf16", False: "fp32"}
        raise ValueError(
            f"{last_dir}: cannot resume, it trained in {name[state.bf16]} and would go on in "
            f"{name[bf16]} here (train.bf16={setting} resolves so on this machine and thread "
            "count); resume it where it resolves as it did (the machine it trained on, with "
            "as many threads: an experiment's --workers or --threads as before), or train "
            "into a new output_dir"
        )
    state.bf16 = bf16


def record_stint(state: TrainState, device: Any) -> None:
    """Add this start to the state's stints (from its step; what ran it and where)."""
    from structqa.provenance import git_info
    from structqa.runtime import cpu_model

    git = git_info()
    state.stints.append(
        {
            "from_step": state.global_step,
            "commit": git.get("commit"),
            "dirty": git.get("dirty"),
            "cpu": cpu_model(),
            "device": str(device),
            "bf16": state.bf16,
        }
    )


def check_same_config(last_dir: Path, saved: dict[str, Any], current: dict[str, Any]) -> None:
    changed = config_changes(saved, current, RESUME_MAY_CHANGE)
    if changed:
        what = "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in changed)
        raise ValueError(
            f"{last_dir}: cannot resume, the config differs from the checkpoint's ({what}). "
            "Give the same settings to continue this run, or train into a new output_dir"
        )


def start_log(path: Path, global_step: int) -> None:
    """Make the run's JSONL log agree with where training starts (``global_step``, 0 for a
    fresh run): a fresh run begins a new log; a resumed one drops the entries past its
    checkpoint's step (written after the last save by a stint that was killed), which the
    resumed steps log again."""
    if not path.exists():
        return
    if global_step == 0:
        path.unlink()
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            step = json.loads(line).get("step", 0)
        except (json.JSONDecodeError, AttributeError):
            continue  # a line cut short by the kill
        if step <= global_step:
            kept.append(line)
    write_text(path, "".join(f"{line}\n" for line in kept))


def restore(
    last_dir: Path,
    load_weights: Callable[[Path], None],
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
) -> TrainState:
    """Put weights, optimizer, scheduler and RNG back as ``last_dir`` saved them (resume).

    ``load_weights`` loads the model's weights from the directory (each loop knows its own
    file layout)."""
    verify_manifest(last_dir)
    state, extra = load_resume(last_dir)
    _check_param_groups(last_dir, extra["optimizer"]["param_groups"], optimizer.param_groups)
    load_weights(last_dir)
    optimizer.load_state_dict(extra["optimizer"])
    scheduler.load_state_dict(extra["scheduler"])
    set_rng_state(extra["rng"])
    log.info(
        "resumed at epoch %d, batch %d, step %d",
        state.epoch,
        state.batch_in_epoch,
        state.global_step,
    )
    return state


def _check_param_groups(last_dir: Path, saved: list[dict], current: list[dict]) -> None:
    """Refuse a resume whose optimizer groups differ from the checkpoint's: torch matches
    groups by position and would bring back the saved rates (or swap Adam states) silently
    when, say, ``train.head_lr``, ``head_lr_exclude`` or ``param_lr`` changed since it was saved."""

    def layout(groups: list[dict]) -> list[tuple[float, float, int]]:
        return [
            (float(g.get("initial_lr", g["lr"])), float(g["weight_decay"]), len(g["params"]))
            for g in groups
        ]

    if layout(saved) != layout(current):
        raise ValueError(
            f"{last_dir}: its optimizer groups (base lr, weight decay, parameters) are "
            f"{layout(saved)}, this run's are {layout(current)}; the learning-rate settings "
            "(train.lr, head_lr, head_lr_exclude, param_lr, weight_decay) changed since it was "
            "saved. Restore them to resume, or start the run afresh in a new output_dir"
        )


def safetensors_loader(model: torch.nn.Module) -> Callable[[Path], None]:
    """Weights saved by :func:`save_checkpoint` (model.safetensors, structqa names)."""

    def load(path: Path) -> None:
        model.load_state_dict(read_safetensors(path / "model.safetensors"))

    return load
