"""Checkpoint manifests: what a saved directory holds, so a missing or altered file is refused.

Every directory ``structqa`` saves a model into (training, pre-training and DROP checkpoints,
extended vocabularies, exports) gets a ``manifest.json`` written last, listing each file with
its size and SHA-256::

    {"format": "structqa-manifest", "version": 1,
     "files": {"model.safetensors": {"size": 1234, "sha256": "..."}, ...}}

Loading calls :func:`verify_manifest` first: a listed file that is missing, of another size or
another hash raises :class:`ManifestMismatch` naming the file (so a checkpoint without its
``tokenizer.json`` can no longer load and answer with a default tokenizer). Files the manifest
does not list (an ``eval/`` folder written later, say) are not checked. A directory saved
before manifests existed loads with a warning; ``python -m structqa.manifest write DIR``
records its files as they are now, once you trust them.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structqa.io import UnreadableFile, read_json, write_json

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
_FORMAT = "structqa-manifest"
_VERSION = 1
_CHUNK = 1 << 20
_REMEDY = (
    "the directory is incomplete or was changed after it was saved: copy it again from its "
    "source, or save it again (retrain / re-export)"
)
#: files written into a saved directory after it was sealed, each sealed again on its own
#: (:func:`seal_file`) right after it is written: a stop between the two leaves the file
#: apart from its record: loading refuses it with this remedy, and the command that writes
#: it again loads without it (:func:`rewriting`, :func:`later_file_problem`)
LATER_FILES = {
    "calibration.json": (
        "a `structqa calibrate` stopped between writing it and recording it, or a damaged "
        "copy, leaves this; run `structqa calibrate` on this directory again (or copy the "
        "directory again from its source)"
    ),
}
# files of LATER_FILES the directory loads without while they are being written again
_REWRITING: ContextVar[frozenset[str]] = ContextVar("rewriting", default=frozenset())


@contextmanager
def rewriting(name: str) -> Iterator[None]:
    """Within it, :func:`verify_manifest` does not check ``name`` (a file of
    :data:`LATER_FILES`): the command that writes it again loads the directory first, and a
    copy a stopped write left apart from its record must not stop it."""
    token = _REWRITING.set(_REWRITING.get() | {name})
    try:
        yield
    finally:
        _REWRITING.reset(token)


# directories whose missing manifest is warned about: what structqa itself saved (an HF
# encoder downloaded elsewhere has none, and that is expected)
_STRUCTQA_MARKERS = ("train_state.json", "structqa_config.json")


class ManifestMismatch(UnreadableFile):
    """A file the manifest lists is missing, or its size or hash differ from the record."""


@dataclass(frozen=True)
class FileRecord:
    size: int
    sha256: str


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _listed_files(directory: Path) -> list[Path]:
    """Regular files under ``directory`` (recursively), but the manifest itself and the
    hidden temporaries of atomic writes; sorted, so the manifest is deterministic."""
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and p.name != MANIFEST
        and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    )


def write_manifest(directory: str | Path) -> Path:
    """Record every file of ``directory`` (size and SHA-256) in its ``manifest.json``; call it
    once the directory is complete, before it is swapped into place."""
    directory = Path(directory)
    files: dict[str, Any] = {}
    for path in _listed_files(directory):
        files[path.relative_to(directory).as_posix()] = {
            "size": path.stat().st_size,
            "sha256": file_sha256(path),
        }
    target = directory / MANIFEST
    write_json(target, {"format": _FORMAT, "version": _VERSION, "files": files})
    return target


def seal_file(directory: str | Path, name: str) -> Path:
    """Add (or renew) the record of one file, ``directory/name``, in the directory's manifest,
    keeping every other record as it is: what a file written into a saved directory later
    (``calibration.json``) needs. Sealing the whole directory again instead would list what
    was written into it since (an ``eval/`` folder, an export with its own manifest), and the
    next rewrite of those would make the checkpoint refuse to load."""
    directory = Path(directory)
    target = directory / MANIFEST
    doc = read_json(target, f"restore {MANIFEST} from the checkpoint's source")
    path = directory / name
    doc["files"][name] = {"size": path.stat().st_size, "sha256": file_sha256(path)}
    write_json(target, doc)
    return target


def listed_sha256(directory: str | Path, name: str) -> str:
    """The SHA-256 of ``directory/name`` as its manifest lists it (not hashed again), else
    hashed now: what a record names a checkpoint's weights by."""
    record = (read_manifest(directory) or {}).get(name)
    return record.sha256 if record is not None else file_sha256(Path(directory) / name)


def read_manifest(directory: str | Path) -> dict[str, FileRecord] | None:
    """The records of ``directory``'s manifest, None when it has none."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    remedy = f"restore {MANIFEST} from the checkpoint's source, or delete it to load unchecked"
    doc = read_json(path, remedy)
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        raise UnreadableFile(path, f'not a structqa manifest (no "format": {_FORMAT!r})', remedy)
    if doc.get("version") != _VERSION:
        raise UnreadableFile(
            path,
            f"manifest version {doc.get('version')!r}, this structqa reads version {_VERSION}",
            "upgrade structqa to load this checkpoint",
        )
    try:
        return {
            name: FileRecord(int(rec["size"]), str(rec["sha256"]))
            for name, rec in doc["files"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UnreadableFile(path, 'malformed "files" records', remedy) from None


def later_file_problem(directory: str | Path, name: str) -> str | None:
    """Why ``directory/name``, a file of :data:`LATER_FILES`, is not the one its manifest
    records (with the remedy), or None: it matches, or is not recorded."""
    records = read_manifest(directory)
    record = None if records is None else records.get(name)
    if record is None:
        return None
    problem = _record_problem(Path(directory) / name, record)
    return None if problem is None else f"{problem}; {LATER_FILES[name]}"


def _record_problem(path: Path, record: FileRecord) -> str | None:
    """How ``path`` differs from its manifest ``record`` (missing, another size, another
    SHA-256: the size first, which catches a cut-short copy without hashing), or None."""
    if not path.is_file():
        return f"missing (listed in {MANIFEST})"
    size = path.stat().st_size
    if size != record.size:
        cut = "cut short" if size < record.size else "grown"
        return (
            f"{size} bytes where {MANIFEST} records {record.size} (the file was {cut} or replaced)"
        )
    digest = file_sha256(path)
    if digest != record.sha256:
        return (
            f"its SHA-256 {digest[:16]}... differs from the {record.sha256[:16]}... "
            f"{MANIFEST} records (the file was altered or corrupted)"
        )
    return None


def verify_manifest(
    directory: str | Path,
    *,
    warn_if_absent: bool | None = None,
    rewriting: str | None = None,
) -> bool:
    """Check ``directory``'s files against its manifest; True when it has one and all match.

    Raises :class:`ManifestMismatch` for the first listed file that is missing or differs
    (size first, which catches a cut-short copy without hashing). Without a manifest, returns
    False and logs a warning when ``warn_if_absent`` (default: when the directory looks saved
    by structqa, i.e. holds a ``train_state.json`` or ``structqa_config.json``). A file
    written into a saved directory later (:data:`LATER_FILES`) that differs is named with its
    own remedy; ``rewriting``: such a file about to be written again, not checked."""
    directory = Path(directory)
    records = read_manifest(directory)
    if records is None:
        if warn_if_absent is None:
            warn_if_absent = any((directory / m).is_file() for m in _STRUCTQA_MARKERS)
        if warn_if_absent:
            log.warning(
                "%s: no %s (saved before checkpoints recorded their files), so its files "
                "cannot be verified; once you trust them, record them with "
                "`python -m structqa.manifest write %s`",
                directory,
                MANIFEST,
                directory,
            )
        return False
    for name, record in records.items():
        if name == rewriting or name in _REWRITING.get():
            continue
        path = directory / name
        if (problem := _record_problem(path, record)) is not None:
            raise ManifestMismatch(path, problem, LATER_FILES.get(name, _REMEDY))
    log.debug("%s: %d files match %s", directory, len(records), MANIFEST)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m structqa.manifest", description="write or check a checkpoint manifest"
    )
    parser.add_argument("action", choices=["write", "verify"])
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if not args.directory.is_dir():
        print(f"{args.directory}: not a directory", file=sys.stderr)
        return 2
    try:
        if args.action == "write":
            print(write_manifest(args.directory))
        elif verify_manifest(args.directory, warn_if_absent=True):
            print(f"{args.directory}: every file matches {MANIFEST}")
        else:
            return 1
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
