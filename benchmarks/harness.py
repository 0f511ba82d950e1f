"""What every benchmark shares: timing, alternation and the provenance of its JSON result.

A benchmark is a script run as ``python benchmarks/NAME.py``; Python puts ``benchmarks/`` on
``sys.path``, so ``import harness`` works from any of them. Benchmarks measure; they never
pass or fail on a time. The API:

Timing
    ``pick_device()``: CUDA when there is one, else the CPU.
    ``sync(device)``: wait for queued GPU work (a no-op on the CPU); call before reading a clock.
    ``timed(fn, device=None) -> (result, seconds)``: one call of ``fn``, synced on both sides.
    ``timing(fn, repeats=1, device=None) -> Callable[[], float]``: a callable that runs ``fn``
    ``repeats`` times and returns the seconds per call; the usual arm of :func:`alternate`.
    ``rate(n, seconds)``: ``n / seconds`` (NaN for no time), e.g. windows per second.
    ``ratio(a, b)``: ``"1.23x"`` for ``a / b``, ``"-"`` when ``b`` is 0.
    ``seed_all(seed)``: Python's, NumPy's and torch's generators.

Alternation
    ``alternate(arms, rounds, *, block=1, warm_block=False, warm_round=False, on_round=None)``
    runs every arm in turn, round after round (A, B, A, B, ...), so that the machine's drift
    between minutes falls on every arm alike and cancels out of their ratios. ``arms`` maps a
    name to a callable whose return value is one sample (seconds, from :func:`timing`, or any
    record); returns ``{name: [sample, ...]}``. ``block``: samples per arm and turn;
    ``warm_block``: one untimed call before each turn's samples (each arm measured warm, not
    right after another arm churned the caches); ``warm_round``: one untimed round first;
    ``on_round(i, {name: samples of round i})`` is called after each round (for progress).
    ``median(samples)`` is ``statistics.median``, kept here so that arms are summarised alike.

Provenance
    ``prov = Provenance.start(args, device)`` at the start of ``main``: the command line, the
    parsed arguments, the git commit (``structqa.provenance.git_info``: commit, dirty, changed
    paths), the machine (``structqa.provenance.machine_info``: CPU model and ISA, native bf16,
    cores, torch threads, GPU; plus the device, the load average and library versions) and the
    start time. ``prov.record(**fields)`` returns them with ``wall_time_s`` so far and the
    benchmark's own fields; ``prov.write(path, **fields)`` writes that record as JSON
    (atomically) and ``prov.write_stamped(out_dir, stem, **fields)`` writes it to
    ``out_dir/stem-YYYYmmdd-HHMMSS.json`` (the start time); both return the path.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from structqa.io import write_json
from structqa.provenance import git_info, machine_info

T = TypeVar("T")
median = statistics.median


# ---- timing --------------------------------------------------------------------------------


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], T], device: torch.device | None = None) -> tuple[T, float]:
    sync(device)
    t0 = time.perf_counter()
    result = fn()
    sync(device)
    return result, time.perf_counter() - t0


def timing(
    fn: Callable[[], Any], repeats: int = 1, device: torch.device | None = None
) -> Callable[[], float]:
    def run() -> float:
        sync(device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        sync(device)
        return (time.perf_counter() - t0) / repeats

    return run


def rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("nan")


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---- alternation ---------------------------------------------------------------------------


def alternate(
    arms: Mapping[str, Callable[[], T]],
    rounds: int,
    *,
    block: int = 1,
    warm_block: bool = False,
    warm_round: bool = False,
    on_round: Callable[[int, dict[str, list[T]]], None] | None = None,
) -> dict[str, list[T]]:
    samples: dict[str, list[T]] = {name: [] for name in arms}
    if warm_round:
        for arm in arms.values():
            arm()
    for i in range(rounds):
        this_round: dict[str, list[T]] = {}
        for name, arm in arms.items():
            if warm_block:
                arm()
            this_round[name] = [arm() for _ in range(block)]
            samples[name].extend(this_round[name])
        if on_round is not None:
            on_round(i, this_round)
    return samples


# ---- provenance ----------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    out = {}
    for name in ("transformers", "onnxruntime"):
        module = sys.modules.get(name)  # only what this benchmark imported
        if module is not None and hasattr(module, "__version__"):
            out[name] = module.__version__
    return out


def _plain(args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as JSON can write them (paths and other objects as their text)."""
    return {
        k: v if isinstance(v, (str, int, float, bool, type(None), list)) else str(v)
        for k, v in args.items()
    }


@dataclass
class Provenance:
    command: str
    args: dict[str, Any]
    git: dict[str, Any]
    machine: dict[str, Any]
    started_at: str
    started: float = field(repr=False)  # time.time() at the start
    _t0: float = field(repr=False)  # time.perf_counter() at the start

    @classmethod
    def start(
        cls,
        args: argparse.Namespace | Mapping[str, Any] | None = None,
        device: torch.device | None = None,
    ) -> Provenance:
        machine = machine_info()
        machine["device"] = str(device or pick_device())
        # other processes may share these cores: the 1/5/15-minute load at the start
        machine["load_average"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
        # every benchmark says which kind of CPU its figures are from (bf16 native or not)
        print(f"CPU: {machine['cpu']} ({machine['cpu_kind']})", file=sys.stderr)
        started = time.time()
        return cls(
            command=shlex.join(["python", *sys.argv]),
            args=_plain(vars(args) if isinstance(args, argparse.Namespace) else (args or {})),
            git=git_info(),
            machine=machine,
            started_at=datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
            started=started,
            _t0=time.perf_counter(),
        )

    def record(self, **fields: Any) -> dict[str, Any]:
        self.machine.update(_versions())
        return {
            "command": self.command,
            "args": self.args,
            "git": self.git,
            "machine": self.machine,
            "started_at": self.started_at,
            "wall_time_s": round(time.perf_counter() - self._t0, 3),
            **fields,
        }

    def write(self, path: str | Path, **fields: Any) -> Path:
        write_json(path, self.record(**fields))
        return Path(path)

    def write_stamped(self, out_dir: str | Path, stem: str, **fields: Any) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.started))
        return self.write(Path(out_dir) / f"{stem}-{stamp}.json", **fields)
