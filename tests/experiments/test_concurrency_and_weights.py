"""Two workers refreshing the tables at once write one after the other (the later from the
newer view); stale and reuse compare a local encoder by its weights' digest, not its path."""

from __future__ import annotations

import multiprocessing
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from structqa.config import ConfigError
from structqa.experiments import runner, stale
from structqa.experiments.aggregate import refresh
from structqa.experiments.claims import TABLES_LOCK, tables_lock
from structqa.experiments.grid import experiment_from_dict
from structqa.experiments.results import load_results
from structqa.experiments.reuse import find_reusable
from structqa.experiments.spec import Experiment, plan
from structqa.experiments.store import Paths, config_file
from structqa.experiments.weights import local_weights
from structqa.io import write_json

# ---- the tables' lock ---------------------------------------------------------------------


def _result(run: str, f1: float) -> dict[str, Any]:
    return {"run": run, "metrics": {"f1": f1, "exact_match": f1 - 10}}


def _waiting_for_lock(lock: Path, pid: int) -> bool:
    """Whether process ``pid`` waits for a flock on ``lock`` (Linux's /proc/locks lists each
    waiter as ``N: -> FLOCK ADVISORY WRITE PID MAJ:MIN:INODE ...``)."""
    inode = lock.stat().st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        words = line.split()
        if len(words) > 6 and words[1] == "->" and words[5] == str(pid):
            if int(words[6].rsplit(":", 1)[1]) == inode:
                return True
    return False


def _other_worker(exp: Experiment, paths: Paths, go: Any) -> None:
    """A second worker: once told, it saves seed=1's result and refreshes the tables."""
    go.wait()
    write_json(paths.result(exp.runs()[1]), _result("seed=1", 70.0))
    runner.refresh_tables(exp, paths)


@pytest.mark.skipif(not Path("/proc/locks").is_file(), reason="needs Linux's /proc/locks")
def test_a_second_worker_waits_for_the_tables_and_the_newer_view_is_left(tmp_path):
    exp = experiment_from_dict(
        {"name": "t", "base": {"train": {"lr": 1e-4}}, "grid": {"train.seed": [0, 1]}},
        source="configs/t.yaml",
    )
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    write_json(paths.result(exp.runs()[0]), _result("seed=0", 60.0))
    context = multiprocessing.get_context("fork")
    go = context.Event()
    other = context.Process(target=_other_worker, args=(exp, paths, go))
    other.start()  # (before the lock is taken: a forked child would share its descriptor)
    try:
        with tables_lock(paths.results):  # this worker: read the results, then the tables
            older = load_results(paths.results)
            go.set()
            # the other worker saves its result and refreshes meanwhile: it must wait here
            deadline = time.monotonic() + 300  # (only so that a broken lock cannot hang)
            while not _waiting_for_lock(paths.results / TABLES_LOCK, other.pid):
                assert other.is_alive(), "the other worker refreshed without waiting"
                assert time.monotonic() < deadline, "the other worker never took the lock"
                time.sleep(0.01)
            assert sorted(load_results(paths.results)) == ["seed=0", "seed=1"]
            assert sorted(older) == ["seed=0"]
            refresh(exp, plan(exp, older), older, paths.results, config_file(exp))
    finally:
        go.set()
        other.join()
    assert other.exitcode == 0
    # the other worker wrote last, from both results: the older view did not stay on disk
    assert "- runs: 2 of 2 finished" in (paths.results / "table.md").read_text()


# ---- local encoders by their weights --------------------------------------------------------


def _encoder(folder: Path, value: float) -> Path:
    """A local encoder directory whose model.safetensors holds one small tensor of ``value``
    (a real safetensors file: its digest is what a result records)."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"w": torch.full((4,), value)}, str(folder / "model.safetensors"))
    return folder


def _experiment(encoder: Path | str, reuse: list[str] | None = None) -> Experiment:
    spec: dict[str, Any] = {
        "name": "t",
        "base": {"model": {"encoder": str(encoder)}, "train": {"lr": 1e-4}},
        "grid": {"train.seed": [0]},
    }
    if reuse:
        spec["reuse"] = reuse
    return experiment_from_dict(spec, source="configs/t.yaml")


def _recorded(exp: Experiment, *, digest: bool = True) -> dict[str, Any]:
    """The result a run of ``exp`` leaves (``local_weights`` as execute records it; an older
    result without it when ``digest`` is false)."""
    cfg = exp.config_for(exp.runs()[0])
    result = {"run": "seed=0", "config": cfg.to_dict(), **_result("seed=0", 60.0)}
    if digest and (weights := local_weights(cfg)):
        result["local_weights"] = weights
    return result


def test_stale_compares_a_local_encoder_by_its_weights(tmp_path):
    here = _encoder(tmp_path / "enc", 1.0)
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    result = _recorded(_experiment(here))
    assert set(result["local_weights"]) == {"model.encoder"}
    old = _recorded(_experiment(here), digest=False)
    moved = tmp_path / "elsewhere" / "enc"
    shutil.copytree(here, moved)  # the same weights at another path
    assert stale.stale_results(_experiment(here), paths, {"seed=0": result}) == {}
    assert stale.stale_results(_experiment(moved), paths, {"seed=0": result}) == {}
    # an older result, without the digest: its path text, as before
    assert stale.stale_results(_experiment(moved), paths, {"seed=0": old}) == {
        "seed=0": ["model.encoder"]
    }

    _encoder(here, 2.0)  # rebuilt at the same path: other weights
    assert stale.stale_results(_experiment(here), paths, {"seed=0": result}) == {
        "seed=0": ["model.encoder (other weights at the same path)"]
    }
    with pytest.raises(ConfigError, match="other weights at the same path"):
        stale.check_not_stale(_experiment(here), paths, {"seed=0": result})
    assert stale.stale_results(_experiment(moved), paths, {"seed=0": result}) == {}
    assert stale.stale_results(_experiment(here), paths, {"seed=0": old}) == {}


def test_reuse_compares_a_local_encoder_by_its_weights(tmp_path):
    here = _encoder(tmp_path / "enc", 1.0)
    other_dir = str(tmp_path / "other")
    result = _recorded(_experiment(here))  # trained by another experiment, from enc/
    old = _recorded(_experiment(here), digest=False)
    moved = tmp_path / "elsewhere" / "enc"
    shutil.copytree(here, moved)

    def reused(encoder: Path | str, candidate: dict[str, Any]) -> bool:
        exp = _experiment(encoder, reuse=[other_dir])
        cfg = exp.config_for(exp.runs()[0])
        return find_reusable(exp, cfg, [(tmp_path / "other.json", candidate)]) is not None

    assert reused(here, result) and reused(moved, result)  # the same weights, wherever
    assert reused(here, old) and not reused(moved, old)  # no digest recorded: by path
    _encoder(here, 2.0)  # rebuilt at the same path
    assert not reused(here, result)
    assert reused(moved, result)
    assert reused(here, old)  # (an older result cannot tell)
    # a hub name names no local weights: compared as text
    hub = _recorded(_experiment("some-org/some-bert"))
    assert "local_weights" not in hub
    assert reused("some-org/some-bert", hub) and not reused("some-org/other-bert", hub)
