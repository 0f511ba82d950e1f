"""Run claims: let several ``structqa experiment`` workers share one grid.

A worker claims a run (or a pre-training arm) before training it by taking an exclusive,
non-blocking ``flock`` on ``<runs-dir>/.claims/<name>.lock`` and holds it until the run stops.
The kernel drops the lock when the holding process exits, however it exits, so a crashed or
killed worker never leaves a stale claim behind. Another worker finding the lock taken skips
that run and moves on; the holder's pid and host are written into the file for ``--dry-run``.

The lock files stay in place after release (deleting a lock file that another process may be
opening at that moment would let two workers hold "the" lock at once).

``flock`` works between processes of one machine and on most local and cluster filesystems;
where ``fcntl`` does not exist (Windows) claims always succeed, i.e. one worker per grid.

The tables of a results directory have a lock of their own, :func:`tables_lock`, which a
worker waits for (rather than skipping): each refresh reads the results and writes the tables
under it, so a worker's older view cannot land on disk after another's newer one.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux/macOS
    fcntl = None  # type: ignore[assignment]

CLAIMS_DIR = ".claims"
#: in a results directory, beside table.md: the lock of :func:`tables_lock`
TABLES_LOCK = ".tables.lock"


class RunBusy(Exception):
    """Another worker holds something this run needs (its pre-training arm): ``claim``."""

    def __init__(self, message: str, claim: str) -> None:
        super().__init__(message)
        self.claim = claim


def claim_path(runs_dir: Path, name: str) -> Path:
    """The lock file of run (or arm) ``name``; characters other than ``[\\w.=,+-]`` become ``_``."""
    return runs_dir / CLAIMS_DIR / (re.sub(r"[^\w.=,+-]", "_", name) + ".lock")


@dataclass
class Claim:
    """A held claim; :meth:`release` (or leaving the ``with`` block) gives it up."""

    path: Path
    fd: int | None

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)  # no stale holder shown by --dry-run
        finally:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def try_claim(runs_dir: Path, name: str) -> Claim | None:
    """Claim ``name`` for this process; None if another process holds it."""
    path = claim_path(runs_dir, name)
    if fcntl is None:  # pragma: no cover
        return Claim(path, None)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    record = {"pid": os.getpid(), "host": socket.gethostname()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)
    return Claim(path, fd)


def holder(runs_dir: Path, name: str) -> dict[str, Any] | None:
    """Who holds ``name`` as its lock file says ({"pid", "host"}), or None if nobody does.

    Informational (for listings): a record whose pid is gone on this host counts as free."""
    path = claim_path(runs_dir, name)
    try:
        record = json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or "pid" not in record:
        return None
    if record.get("host") == socket.gethostname() and not _alive(int(record["pid"])):
        return None
    return record


def held_by(runs_dir: Path, name: str) -> str:
    """'pid N on HOST' for the worker holding ``name``'s claim, as its lock file says."""
    record = holder(runs_dir, name)
    if record is None:
        return "another worker"
    return f"pid {record['pid']} on {record.get('host', '?')}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def tables_lock(results_dir: Path) -> Iterator[None]:
    """Hold the exclusive lock on ``results_dir``'s tables, waiting while another process holds
    it. Read the results and write the tables from them inside, as one step. Not reentrant:
    a second hold in the same process (another descriptor) would wait for the first forever.

    By hand with ``flock``, as the claims above: the lock ``filelock`` would give is this one
    (a blocking flock on a lock file), and filelock is not among structqa's dependencies (only
    installed along with torch), which these few lines do not justify adding."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    results_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(results_dir / TABLES_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # (the kernel drops it if this process dies)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the flock
