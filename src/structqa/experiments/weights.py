"""The local checkpoints a run starts from, named by the SHA-256 of their weights.

A result records, as ``local_weights``, the digest of each local directory its config names
as ``model.encoder`` (and a DROP run's ``model.init``). A path says little: a directory rebuilt
at the same path holds other weights, and the same weights may be copied elsewhere. So
whether a result still stands for the YAML (:mod:`~structqa.experiments.stale`) or can be
taken over by another experiment (:mod:`~structqa.experiments.reuse`) compares those settings
by digest where both sides have one, and by their text where not (a result from before
digests were recorded, or a hub or package name, which names no local weights).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from structqa.manifest import MANIFEST, listed_sha256

WEIGHTS = "model.safetensors"
#: the settings that may name a local checkpoint directory, as ``local_weights`` keys them
WEIGHT_SETTINGS = ("model.encoder", "model.init")


def local_weights(cfg: Any) -> dict[str, dict[str, str]]:
    """``{"model.encoder": {"path", "weights_sha256"}}`` (and ``model.init``) for each setting
    of ``cfg`` that names a local directory holding model.safetensors; a hub name, a
    package's encoder or a missing setting is left out."""
    out: dict[str, dict[str, str]] = {}
    for setting in WEIGHT_SETTINGS:
        value = getattr(cfg.model, setting.removeprefix("model."), None)
        if not isinstance(value, str) or not (Path(value) / WEIGHTS).is_file():
            continue
        out[setting] = {"path": value, "weights_sha256": _weights_sha256(value)}
    return out


def _weights_sha256(directory: str) -> str:
    """:func:`~structqa.manifest.listed_sha256` of ``directory``'s weights, hashed once per
    version of the files (a grid compares every result with the same encoder)."""
    folder = Path(directory)
    stamps = (_stamp(folder / WEIGHTS), _stamp(folder / MANIFEST))
    if any(s is not None and s[-1] > time.time_ns() - RECENT_NS for s in stamps):
        # a file changed this instant could change again within the same timestamp tick,
        # looking unchanged: hashed afresh, not remembered (as git treats "racily clean" files)
        return listed_sha256(directory, WEIGHTS)
    return _digest_of(directory, *stamps)


#: files changed less than this long ago are not remembered by their stamp (ns)
RECENT_NS = 2_000_000_000


def _stamp(path: Path) -> tuple[int, ...] | None:
    """What changes when ``path`` is rewritten or replaced (the change time last); None where
    there is no such file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@functools.lru_cache(maxsize=64)
def _digest_of(directory: str, weights: tuple | None, manifest: tuple | None) -> str:
    del weights, manifest  # (the cache key: the files' versions)
    return listed_sha256(directory, WEIGHTS)


def recorded_digests(result: Mapping[str, Any]) -> dict[str, str]:
    """The weights' digest a result recorded for each setting (none before they were)."""
    recorded = result.get("local_weights")
    if not isinstance(recorded, Mapping):
        return {}
    out = {}
    for setting, entry in recorded.items():
        if isinstance(entry, Mapping) and isinstance(entry.get("weights_sha256"), str):
            out[str(setting)] = entry["weights_sha256"]
    return out


def same_weights(
    result: Mapping[str, Any], now: Mapping[str, Mapping[str, str]]
) -> dict[str, bool]:
    """For each setting both ``result`` (its ``local_weights``) and ``now``
    (:func:`local_weights` of the config now) give a digest for: whether the digests agree.
    These settings are compared by weights, not by path; any other by its text."""
    recorded = recorded_digests(result)
    return {
        setting: recorded[setting] == entry["weights_sha256"]
        for setting, entry in now.items()
        if setting in recorded
    }


def weights_change(setting: str, result: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """How a setting whose weights differ is named in a list of changed settings."""
    was = (result.get("local_weights") or {}).get(setting) or {}
    if was.get("path") == now[setting]["path"]:
        return f"{setting} (other weights at the same path)"
    return setting
