"""Where a result came from: the git commit of the running code and the machine."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


#: Names the commit of a copied working tree that has no ``.git`` (a container image, a GPU
#: machine the tree was sent to); read only when no git checkout answers.
COMMIT_ENV = "STRUCTQA_GIT_COMMIT"
#: a run's record of the checkpoint ``model.init_from`` started it from; written in the run
#: directory when the run starts and copied into each checkpoint and export made from it, so
#: that a checkpoint moved elsewhere still says where its training started
INIT_RECORD = "init_from.json"

MAX_CHANGED = 20  # paths listed in ``changed``; the count is always exact


def _changed_paths(status: str) -> set[str]:
    """Paths of ``git status --porcelain -z`` output, unquoted. Entries are ``XY path``
    separated by NULs; a rename or copy (``R``/``C`` in X or Y) is followed by its source
    path as the next entry, which is not listed (the new path is what the tree holds)."""
    entries = status.split("\0")
    paths: set[str] = set()
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        paths.add(entry[3:])
        if "R" in entry[:2] or "C" in entry[:2]:
            i += 1  # skip the source path
    return paths


def git_info(repo: Path | None = None) -> dict[str, Any]:
    """HEAD commit, whether tracked files differ from it (docs/results excluded: the runner
    writes there) and, when they do, which: ``changed`` lists up to :data:`MAX_CHANGED` of
    their paths and ``n_changed`` counts them, so that a reader of a result can tell whether
    the uncommitted edits could have touched it. Looks at the package's checkout, else the
    working directory."""
    for root in (repo,) if repo else (_REPO_ROOT, Path.cwd()):
        head = _git(root, "rev-parse", "HEAD")
        if head is None:
            continue
        status = _git(
            root,
            "status",
            "--porcelain",
            "-z",
            "--untracked-files=no",
            "--",
            ".",
            ":(exclude)docs/results",
        )
        if status is None:  # git ran for rev-parse but not for status: claim nothing
            return {"commit": head.strip(), "dirty": None}
        changed = sorted(_changed_paths(status))
        info: dict[str, Any] = {"commit": head.strip(), "dirty": bool(changed)}
        if changed:
            info["n_changed"] = len(changed)
            info["changed"] = changed[:MAX_CHANGED]
        return info
    stated = os.environ.get(COMMIT_ENV, "").strip()
    if stated:  # a copy of a checkout without its .git: the commit its copier names
        return {"commit": stated, "dirty": None, "source": COMMIT_ENV}
    return {"commit": None, "dirty": None}


def machine_info() -> dict[str, Any]:
    import torch

    from structqa.runtime import (
        bf16_speedup,
        cpu_has_native_bf16,
        cpu_kind,
        cpu_model,
        int8_weight_type,
    )

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    gpu = torch.cuda.is_available()
    return {
        "cpu": cpu_model(),
        # the widest vector ISA torch's CPU kernels use (e.g. AVX512, AVX2) and whether the CPU
        # has bf16 dot products (what train.bf16=auto follows): CPUs sold under one model name
        # differ in both
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": cpu_has_native_bf16(),
        # bf16 autocast's speed over fp32 on the encoder's products, measured (train.bf16=auto
        # takes bf16 at 1.25x or more)
        "bf16_speedup": bf16_speedup() if cpu_has_native_bf16() else None,
        # the same in words, with VNNI and any ONEDNN_MAX_CPU_ISA cap, and the int8 weight
        # type the ONNX runtime loads here (structqa.runtime.int8_weight_type)
        "cpu_kind": cpu_kind(),
        "int8_weights": int8_weight_type(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name(0) if gpu else None,
        "cuda": torch.version.cuda if gpu else None,
    }
