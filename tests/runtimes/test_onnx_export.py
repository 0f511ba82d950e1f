"""ONNX export of every span head and stacking: the graph computes what torch computes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from export_cases import CASES

from structqa.features.batching import collate, sorted_batches
from structqa.features.squad import featurize
from structqa.models.build import model_from_checkpoint
from structqa.runtimes.onnx_export import ExportRefused, export_onnx
from structqa.runtimes.onnx_model import OnnxSpanModel, read_export
from structqa.serving.predictor import Predictor
from structqa.training.data import feature_config

ATOL = 1e-4


def batches(checkpoint: Path, examples, batch_size: int = 5):
    """The held-out windows, collated as inference collates them (longest first)."""
    from structqa.text.annotate import Annotator

    model, tokenizer, cfg = model_from_checkpoint(checkpoint)
    fc = feature_config(cfg)
    annotator = Annotator(fc.spacy_model) if fc.token_tags else None
    features, _ = featurize(examples, tokenizer, fc, annotator=annotator)
    order = sorted_batches([len(f) for f in features], batch_size)
    return model, [collate(features, idx) for idx in order]


@pytest.mark.parametrize("case", list(CASES))
def test_onnx_fp32_matches_torch(case, checkpoint_of, heldout, tmp_path) -> None:
    ckpt = checkpoint_of(case)
    done = export_onnx(ckpt, tmp_path / "onnx")
    assert done.max_abs_diff["fp32"] <= ATOL
    meta = read_export(done.directory)
    joint = "joint" in case
    assert ("span_scores" in meta["outputs"]) == joint
    assert ("pos_tag_ids" in meta["inputs"]) == case.startswith("tagged")

    onnx_model = OnnxSpanModel(done.directory)
    model, collated = batches(ckpt, heldout.examples)
    assert len({b.input_ids.shape[1] for b in collated}) > 1  # several lengths, all dynamic
    for batch in collated:
        with torch.inference_mode():
            ref = model(batch)
        got = onnx_model(batch)
        fields = ["start_logits", "end_logits"] + (["span_scores", "null_scores"] if joint else [])
        for name in fields:
            r, o = getattr(ref, name), getattr(got, name)
            assert r.shape == o.shape, name
            assert torch.allclose(r, o, rtol=0, atol=ATOL), (name, float((r - o).abs().max()))

    torch_answers = Predictor.from_checkpoint(ckpt, runtime="torch-fp32")
    onnx_answers = Predictor.from_checkpoint(done.directory, runtime="onnx-fp32")
    assert onnx_answers.runtime == "onnx-fp32" and torch_answers.runtime == "torch-fp32"
    ref_p = torch_answers.predict_examples(heldout.examples)
    got_p = onnx_answers.predict_examples(heldout.examples)
    assert {k: p.text for k, p in got_p.items()} == {k: p.text for k, p in ref_p.items()}
    for k, p in ref_p.items():
        assert got_p[k].null_odds == pytest.approx(p.null_odds, abs=2 * ATOL)


@pytest.mark.parametrize("case", ["independent", "dyrex"])
def test_int8_export_is_smaller_and_answers(case, checkpoint_of, heldout, tmp_path) -> None:
    done = export_onnx(checkpoint_of(case), tmp_path / "onnx", quantize="int8")
    assert set(done.sizes) == {"fp32", "int8"}
    graph = onnx.load(str(done.directory / "model.int8.onnx")).graph
    int8_weights = [t.name for t in graph.initializer if t.data_type == onnx.TensorProto.INT8]
    quantized = [n.name for n in graph.node if n.op_type == "MatMulInteger"]
    # every encoder matrix product is int8 (4 per SA -> FFN layer: Q, K, V and the output
    # projection are fused or not, so at least the two FFN products per layer), the head not
    assert len(int8_weights) >= 2 * 2 and len(quantized) >= 2 * 2
    assert not [n for n in quantized if "/head/" in n]
    # int8 moves the scores (that is its cost), but stays near them on a healthy graph
    assert 0 < done.max_abs_diff["int8"] < 1.0
    predictor = Predictor.from_checkpoint(done.directory, runtime="onnx")
    assert predictor.runtime == "onnx-int8"
    answers = predictor.predict_examples(heldout.examples)
    assert set(answers) == {ex.id for ex in heldout.examples}
    assert all(np.isfinite(p.null_odds) for p in answers.values())


def test_a_graph_that_misses_the_tolerance_is_refused(checkpoint_of, tmp_path) -> None:
    out = tmp_path / "onnx"
    with pytest.raises(ExportRefused, match="differs from torch"):
        export_onnx(checkpoint_of("dyrex"), out, atol=1e-12)
    assert not out.exists() and not out.with_name("onnx.tmp").exists()


def test_only_int8_quantization_exists(checkpoint_of, tmp_path) -> None:
    with pytest.raises(ExportRefused, match="only int8"):
        export_onnx(checkpoint_of("independent"), tmp_path / "x", quantize="int4")


def test_a_directory_without_a_checkpoint_is_named(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="not a structqa checkpoint"):
        export_onnx(tmp_path, tmp_path / "onnx")


def test_a_drop_checkpoint_is_refused(checkpoint_of, tmp_path) -> None:
    from dataclasses import asdict

    from structqa.ncbert.config import DropConfig

    drop = tmp_path / "drop"
    shutil.copytree(checkpoint_of("independent"), drop)
    (drop / "structqa_config.json").write_text(json.dumps(asdict(DropConfig())))
    with pytest.raises(ExportRefused, match="drop-train checkpoint"):
        export_onnx(drop, tmp_path / "onnx")


def test_an_export_carries_a_manifest_and_an_altered_graph_is_refused(
    checkpoint_of, tmp_path
) -> None:
    from structqa.manifest import MANIFEST, ManifestMismatch

    done = export_onnx(checkpoint_of("independent"), tmp_path / "onnx")
    assert (done.directory / MANIFEST).is_file()
    Predictor.from_checkpoint(done.directory, runtime="onnx-fp32")  # intact: loads
    graph = done.directory / "model.onnx"
    data = bytearray(graph.read_bytes())
    data[-1] ^= 0x01  # one bit of the last weight
    graph.write_bytes(bytes(data))
    with pytest.raises(ManifestMismatch, match="model.onnx"):
        Predictor.from_checkpoint(done.directory, runtime="onnx-fp32")


def test_an_export_keeps_the_checkpoints_calibration(checkpoint_of, tmp_path) -> None:
    from structqa.calibration import Calibrator, load_calibration, save_calibration

    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint_of("independent"), ckpt)
    cal = Calibrator("temperature", None, t_span=2.0)
    save_calibration(ckpt, cal)
    done = export_onnx(ckpt, tmp_path / "onnx")
    assert load_calibration(done.directory) == cal
    assert Predictor.from_checkpoint(done.directory, runtime="onnx-fp32").calibrator == cal
