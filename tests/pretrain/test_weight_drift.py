"""scripts/weight_drift.py: each arm is measured against its own converted step 0."""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import torch
from tiny import load_script

from structqa.encoders import convert_stacking, save_encoder
from structqa.encoders.bert import BertEncoder


def _script() -> ModuleType:
    return load_script("weight_drift")


def test_step_zero_is_no_drift_and_a_changed_weight_is_measured(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    wd = _script()
    converted = convert_stacking(BertEncoder.from_pretrained(tiny_checkpoint), ["sa", "sa", "ffn"])
    save_encoder(converted, tmp_path / "zero")
    d = wd.drift(tmp_path / "zero", tiny_checkpoint)
    # the LayerNorm hand-off moved affines between sub-layers: not a change against step 0
    assert all(d[k] < 1e-6 for k in ("embeddings", "attention", "ffn", "all")), d
    assert d["added_out_ratio"] == 0.0  # the added output projection starts at zero

    with torch.no_grad():
        ffn = converted.layers[0].sublayers[2]
        before = ffn.output.weight.clone()
        ffn.output.weight.mul_(1.5)  # ||W - W0|| = 0.5 ||W0|| on this tensor
        added = converted.layers[0].sublayers[1].attn.output.weight
        kept = converted.layers[0].sublayers[0].attn.output.weight
        added.copy_(0.25 * kept)
    save_encoder(converted, tmp_path / "moved")
    d = wd.drift(tmp_path / "moved", tiny_checkpoint)
    assert d["attention"] < 1e-6 and d["embeddings"] < 1e-6
    ffn_norms = [
        float(p.pow(2).sum())
        for name, p in BertEncoder.from_pretrained(tiny_checkpoint).state_dict().items()
        if name.startswith("layers.") and ".sublayers.1." in name
    ]
    expected = 0.5 * float(before.norm()) / math.sqrt(sum(ffn_norms))
    assert math.isclose(d["ffn"], expected, rel_tol=1e-4), (d["ffn"], expected)
    layers = len(converted.layers)
    assert math.isclose(d["added_out_ratio"], 0.25 / layers, rel_tol=1e-4)


def test_data_rows_measure_the_function_against_the_start(
    tmp_path: Path, tiny_checkpoint: Path, shared_data: Path, capsys
) -> None:
    wd = _script()
    converted = convert_stacking(BertEncoder.from_pretrained(tiny_checkpoint), ["sa", "sa", "ffn"])
    save_encoder(converted, tmp_path / "zero")
    with torch.no_grad():
        for layer in converted.layers:
            layer.sublayers[2].output.weight.mul_(3.0)
    save_encoder(converted, tmp_path / "moved")
    data = shared_data / "fixtures/squad-v1.1-mini.json"
    argv = [str(tmp_path / "zero"), str(tmp_path / "moved"), "--base", str(tiny_checkpoint)]
    assert wd.main([*argv, "--data", str(data), "--passages", "4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5  # header, rule, the start, two checkpoints
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    start, zero, moved = ([float(x) for x in row[-3:]] for row in cells)
    # step 0 of the converted block computes the starting encoder's function (LayerNorm rounding)
    assert zero[0] > 0.9999 and math.isclose(zero[1], start[1], abs_tol=1e-3)
    assert math.isclose(zero[2], start[2], rel_tol=1e-2)
    assert moved[0] < 0.999  # tripled FFN outputs moved the states
