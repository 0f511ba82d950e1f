"""A run started from another checkpoint (``model.init_from``) records which one: the path,
the weights' hash and, for a built general reader, its card's commit; an experiment's result
and table carry it, since ``reader`` names whatever reader is built on the machine."""

from __future__ import annotations

import json
from pathlib import Path

from tiny import tiny_finetune_base

from structqa.config import load_config
from structqa.experiments.grid import experiment_from_dict
from structqa.experiments.runner import run_experiment
from structqa.experiments.store import Paths
from structqa.io import write_json
from structqa.manifest import file_sha256
from structqa.models.build import describe_start
from structqa.provenance import INIT_RECORD
from structqa.runtimes.onnx_export import export_onnx
from structqa.training.loop import record_start


def test_a_run_records_the_checkpoint_it_started_from_and_a_resume_keeps_it(
    tiny_trained_run: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    start = tiny_trained_run / "best"
    out = tmp_path / "run"
    cfg = load_config(
        overrides=[
            f"model.encoder={tiny_checkpoint}",
            f"model.init_from={start}",
            f"train.output_dir={out}",
        ]
    )
    record_start(cfg, resume=False)
    first = json.loads((out / INIT_RECORD).read_text())
    assert first["given"] == str(start) and first["checkpoint"] == str(start)
    assert first["weights_sha256"] == file_sha256(start / "model.safetensors")
    assert "reader" not in first  # a plain checkpoint, not a built reader

    # resumed, the run keeps the record of its start even if the source has been rebuilt since
    write_json(out / INIT_RECORD, {**first, "weights_sha256": "then"})
    record_start(cfg, resume=True)
    assert json.loads((out / INIT_RECORD).read_text())["weights_sha256"] == "then"
    record_start(cfg, resume=False)  # started afresh: recorded anew
    assert json.loads((out / INIT_RECORD).read_text()) == first


def test_a_built_reader_start_names_its_card_and_the_table_lists_it(
    tiny_trained_run: Path, tiny_checkpoint: Path, shared_data: Path, tmp_path: Path, monkeypatch
) -> None:
    import shutil

    reader = tmp_path / "reader"
    shutil.copytree(tiny_trained_run / "best", reader / "run" / "best")
    write_json(
        reader / "card.json",
        {
            "commit": {"commit": "abcdef0123456789", "dirty": False},
            "command": "structqa reader build --out reader",
            "heldout": {"squad1/torch": {"f1": 12.5, "exact_match": 3.0}},
        },
    )
    monkeypatch.setenv("STRUCTQA_READER", str(reader))
    base = tiny_finetune_base(tiny_checkpoint, shared_data)
    base["model"]["init_from"] = "reader"
    exp = experiment_from_dict(
        {"name": "tiny", "base": base, "grid": {"train.seed": [0]}}, source="configs/tiny.yaml"
    )
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    assert run_experiment(exp, paths, command="structqa experiment x", progress=False) == 0
    result = json.loads(paths.result(exp.runs()[0]).read_text())
    start = result["init_from"]
    assert start["given"] == "reader" and start["checkpoint"] == str(reader / "run" / "best")
    assert start["weights_sha256"] == file_sha256(reader / "run" / "best" / "model.safetensors")
    assert start["reader"]["commit"] == "abcdef0123456789"
    assert start["reader"]["heldout"] == {"squad1/torch": {"f1": 12.5}}
    table = (paths.results / "table.md").read_text()
    line = next(x for x in table.splitlines() if x.startswith("- started from"))
    assert f"`{start['weights_sha256'][:12]}`" in line and "`abcdef012345`" in line

    # the record travels with the checkpoint and its export, and a run started from that
    # checkpoint in turn records the chain
    best = paths.output(exp.runs()[0]) / "best"
    assert json.loads((best / INIT_RECORD).read_text()) == start
    exported = export_onnx(best, tmp_path / "onnx").directory
    assert json.loads((exported / INIT_RECORD).read_text()) == start
    moved = tmp_path / "elsewhere"
    shutil.copytree(best, moved)
    again = describe_start(str(moved))
    assert again["checkpoint"] == str(moved) and again["started_from"] == start
