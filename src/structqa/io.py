"""Atomic file writes (write to a temporary sibling, then rename over the target), and the
project's error for a file that cannot be read."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class UnreadableFile(ValueError):
    """A file that is missing, cut short, altered or not in its format. The message names the
    file, what is wrong and what to do; the CLI prints it and exits with status 2."""

    def __init__(self, path: str | Path, problem: str, remedy: str = "") -> None:
        self.path, self.problem, self.remedy = str(path), problem, remedy
        super().__init__(f"{path}: {problem}" + (f"; {remedy}" if remedy else ""))


def read_json(path: str | Path, remedy: str = "") -> Any:
    """Parse a JSON file, turning undecodable or invalid content (also nesting deeper than
    the parser's recursion allows) into :class:`UnreadableFile`. A missing file stays a
    ``FileNotFoundError`` (it names the path)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise UnreadableFile(
            path, f"not UTF-8 text ({err.reason} at byte {err.start})", remedy
        ) from None
    except json.JSONDecodeError as err:
        raise UnreadableFile(
            path, f"invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}", remedy
        ) from None
    except RecursionError:
        raise UnreadableFile(path, "JSON nested too deeply to parse", remedy) from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, with the permissions ``open`` would give a new
    file (mkstemp's are owner-only: results and checkpoints must stay readable by a group)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any, indent: int | None = 2) -> None:
    write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def _sync(path: Path) -> None:
    """Flush a file's or a directory's entries to disk (a directory where the OS allows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a directory
        pass
    finally:
        os.close(fd)


def replace_dir(tmp_dir: Path, target: Path) -> None:
    """Swap a fully written directory into place; the old one is removed only afterwards,
    once the new one's files and the swap itself are on disk (a power cut after the rename
    could otherwise leave ``target`` with files cut short and no ``.old`` to go back to)."""
    for path in sorted(tmp_dir.rglob("*"), key=lambda p: -len(p.parts)):
        _sync(path)
    _sync(tmp_dir)
    old = target.with_name(target.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        os.replace(target, old)
    os.replace(tmp_dir, target)
    _sync(target.parent)
    if old.exists():
        shutil.rmtree(old)


def recover_dir(target: Path) -> bool:
    """Undo an interrupted :func:`replace_dir`: a crash between its two renames leaves the
    previous directory at ``<target>.old`` and none at ``target``; put it back. Returns
    whether ``target`` exists afterwards. (The ``.tmp`` directory is not trusted: a crash
    may have cut its writing short.)"""
    old = target.with_name(target.name + ".old")
    if not target.exists() and old.exists():
        os.replace(old, target)
        log.warning("%s: recovered from %s (a checkpoint swap was interrupted)", target, old)
    return target.exists()


_HELD: dict[Path, tuple[threading.RLock, list[int]]] = {}
_HELD_GUARD = threading.Lock()


@contextmanager
def dir_lock(target: str | Path) -> Iterator[None]:
    """Hold the hidden lock beside ``target`` (``.NAME.lock``) while one writer replaces it:
    other processes wait (flock), other threads too; the thread holding it may take it again
    (a caller that checks and then writes, around a writer that locks)."""
    path = Path(target).resolve()
    with _HELD_GUARD:
        rlock, depth = _HELD.setdefault(path, (threading.RLock(), [0]))
    with rlock:
        if depth[0]:
            depth[0] += 1
            try:
                yield
            finally:
                depth[0] -= 1
            return
        import fcntl  # (POSIX; here only, so that the rest of the package imports anywhere)

        path.parent.mkdir(parents=True, exist_ok=True)
        # read-only: a lock file another user created may be taken by anyone who can read it
        fd = os.open(path.parent / f".{path.name}.lock", os.O_RDONLY | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            depth[0] = 1
            try:
                yield
            finally:
                depth[0] = 0
        finally:
            os.close(fd)  # (releases the lock)


@contextmanager
def writing_dir(target: str | Path) -> Iterator[Path]:
    """A scratch folder of this writer's own beside ``target``, swapped in whole for it
    (:func:`replace_dir`) when the block ends, removed when it raises (also on Ctrl-C).
    Writers of one target take turns (:func:`dir_lock`); a swap a crash cut short is undone
    first (:func:`recover_dir`), and scratch folders of writers that were killed are removed
    (none is live while the lock is held)."""
    target = Path(target)
    with dir_lock(target):
        recover_dir(target)
        left = [
            *target.parent.glob(f".{target.name}.*.tmp"),
            target.with_name(target.name + ".tmp"),
        ]
        for stale in left:
            if stale.is_dir() and not stale.is_symlink():
                log.info("%s: removing the scratch folder of a writer that was stopped", stale)
                shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
        os.chmod(tmp, 0o777 & ~_umask())
        try:
            yield tmp
            replace_dir(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def append_jsonl(path: str | Path, obj: Any) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()


def read_safetensors(path: str | Path, remedy: str = "") -> dict[str, Any]:
    """The tensors of a ``.safetensors`` file; a cut-short or corrupt one raises
    :class:`UnreadableFile` (safetensors' own error is no ``OSError``/``ValueError``)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file" + (f"; {remedy}" if remedy else ""))
    try:
        return load_file(str(path))
    except SafetensorError as err:
        raise UnreadableFile(path, f"not a readable safetensors file ({err})", remedy) from None
