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
from structqa.heads.base import NEG
from structqa.manifest import write_manifest
from structqa.models.build import model_from_checkpoint
from structqa.prediction.predictor import Predictor
from structqa.runtimes.onnx_export import ExportRefused, export_onnx
from structqa.runtimes.onnx_model import OnnxSpanModel, read_export
from structqa.runtimes.quantize import quantize_int8
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
    classifier = case.startswith("classifier")
    assert ("span_scores" in meta["outputs"]) == joint
    assert ("null_odds" in meta["outputs"]) == classifier
    assert ("pos_tag_ids" in meta["inputs"]) == case.startswith("tagged")
    # checked on a full window of the checkpoint's length too, the one long passages fill
    window = json.loads((ckpt / "structqa_config.json").read_text())["data"]["max_seq_len"]
    positions = json.loads((ckpt / "encoder_config.json").read_text())["max_position_embeddings"]
    assert meta["check"]["shapes"][-1] == [2, min(window, positions)]

    onnx_model = OnnxSpanModel(done.directory)
    model, collated = batches(ckpt, heldout.examples)
    assert len({b.input_ids.shape[1] for b in collated}) > 1  # several lengths, all dynamic
    for batch in collated:
        with torch.inference_mode():
            ref = model(batch)
        got = onnx_model(batch)
        fields = ["start_logits", "end_logits"] + (["span_scores", "null_scores"] if joint else [])
        fields += ["null_odds"] if classifier else []
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


@pytest.mark.parametrize("case", list(CASES))
def test_the_export_check_holds_with_the_stock_operators(case, checkpoint_of, tmp_path) -> None:
    """The graph is compared with torch's stock operators too (STRUCTQA_CPU_KERNELS=off: the
    reference a CPU without structqa's kernels computes), in fp32, on every head and stacking:
    within the tolerance of each output's scale and with the same best positions."""
    from structqa.attention.kernels import stock_kernels

    with stock_kernels():
        done = export_onnx(checkpoint_of(case), tmp_path / "onnx")
    check = read_export(done.directory)["check"]
    assert not any(check["moved_answers"]["fp32"].values())
    for name, diff in check["max_abs_diff"]["fp32"].items():
        assert diff <= max(1e-4, 1e-4 * check["scale"][name]), name


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


def _by_window(model, batch, alone, fields):
    """Each window's outputs in one call with ``batch`` and in a call of its own, cut to its
    own tokens: [(name, together, apart, n)]."""
    together, apart = model(batch), [model(one) for one in alone]
    out = []
    for i, one in enumerate(alone):
        n = int(one.attention_mask.sum())
        for name in fields:
            full = getattr(together, name)
            cut = slice(None, n) if full.ndim > 1 else ...  # (B, N, ...) or (B,)
            out.append((name, full[i][cut], getattr(apart[i], name)[0][cut], full[i], n))
    return out


@pytest.mark.parametrize("case", ["dyrex", "joint", "joint-full", "dyref"])
def test_an_int8_window_answers_the_same_whatever_shares_its_batch(
    case, checkpoint_of, heldout, tmp_path
) -> None:
    """The int8 graph quantizes activations per token, so a window's logits do not move with
    its neighbours in a batch. An older per-tensor graph's do; for it, one window per call (its
    default) makes them the window's own, bit for bit."""
    ckpt = checkpoint_of(case)
    done = export_onnx(ckpt, tmp_path / "onnx", quantize="int8")
    assert read_export(done.directory)["files"]["int8"]["activations"] == "per-token"
    _, collated = batches(ckpt, heldout.examples, batch_size=4)
    batch = next(b for b in collated if len(b) == 4 and len(set(b.attention_mask.sum(1))) > 1)
    alone = [collate_row(batch, i) for i in range(len(batch))]
    fields = ["start_logits", "end_logits"] + (
        ["span_scores", "null_scores"] if "joint" in case else []
    )
    int8 = OnnxSpanModel(done.directory, "int8")
    assert not int8.per_window  # batched: per-token scales need no help
    for name, together, apart, _, _ in _by_window(int8, batch, alone, fields):
        assert torch.allclose(together, apart, rtol=0, atol=ATOL), name

    # an export from before per-token activations: onnxruntime's per-tensor graph
    old = tmp_path / "old"
    shutil.copytree(done.directory, old)
    quantize_int8(old / "model.onnx", old / "model.int8.onnx", activations="per-tensor")
    meta = read_export(old)
    del meta["files"]["int8"]["activations"]
    (old / "structqa_export.json").write_text(json.dumps(meta))
    write_manifest(old)
    per_tensor = OnnxSpanModel(old, "int8")
    assert per_tensor.activations == "per-tensor" and per_tensor.per_window
    for name, together, apart, row, n in _by_window(per_tensor, batch, alone, fields):
        assert torch.equal(together, apart), name  # bit for bit
        if row.ndim:
            assert (row[n:] == NEG).all()  # padding, masked as the model masks it
    whole = OnnxSpanModel(old, "int8", per_window=False)
    moved = max(
        float((t - a).abs().max()) for _, t, a, _, _ in _by_window(whole, batch, alone, fields)
    )
    assert moved > 1e-3  # whole batches: a window's logits depend on its neighbours
    # fp32 one window per call gives the batched call's logits
    fp32, fp32_rows = OnnxSpanModel(done.directory), OnnxSpanModel(done.directory, per_window=True)
    assert not fp32.per_window
    for name in fields:
        r, o = getattr(fp32(batch), name), getattr(fp32_rows(batch), name)
        assert torch.allclose(r, o, rtol=0, atol=ATOL), name


def collate_row(batch, i: int):
    """Window ``i`` of ``batch`` as a batch of its own, cut to its own tokens."""
    from structqa.features.batching import Batch

    n = int(batch.attention_mask[i].sum())
    return Batch(
        **{
            k: None if v is None else (v[i : i + 1, :n] if v.ndim == 2 else v[i : i + 1])
            for k, v in vars(batch).items()
        }
    )


def test_a_graph_that_misses_the_tolerance_is_refused(checkpoint_of, tmp_path) -> None:
    out = tmp_path / "onnx"
    with pytest.raises(ExportRefused, match="differs from torch") as refused:
        export_onnx(checkpoint_of("dyrex"), out, atol=1e-12, rtol=1e-12)
    # no scratch folder left: only the hidden lock that writers of `out` take turns by
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == [".onnx.lock"]
    # it names the output, by how much, and the tolerance that would pass
    message = str(refused.value)
    assert "start_logits differs by" in message and "its scale" in message
    suggested = float(message.split("export with --rtol ")[1].split()[0])
    assert export_onnx(checkpoint_of("dyrex"), out, atol=0.0, rtol=suggested).directory == out


def test_the_tolerance_is_relative_to_the_logits_scale(checkpoint_of, tmp_path) -> None:
    """A difference that is large in absolute terms but small beside the logits' size passes:
    fp32 kernels of two CPUs differ in the last bits of large logits."""
    done = export_onnx(checkpoint_of("independent"), tmp_path / "onnx")
    check = read_export(done.directory)["check"]
    scale, diff = check["scale"]["start_logits"], check["max_abs_diff"]["fp32"]["start_logits"]
    assert scale >= 1.0 and check["moved_answers"]["fp32"]["start_logits"] == 0
    if diff > 0:  # an absolute floor below the difference, a relative one above it
        again = export_onnx(
            checkpoint_of("independent"), tmp_path / "again", atol=diff / 2, rtol=2 * diff / scale
        )
        assert again.max_abs_diff["fp32"] == pytest.approx(diff, rel=0.5)


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


def test_calibrating_again_renews_the_export_inside_the_checkpoint(checkpoint_of, tmp_path):
    """The export's copy of calibration.json was left as it was: the export, loaded by its
    own path (`serve CHECKPOINT/onnx`), answered with the old threshold and map."""
    from structqa.calibration import Calibrator, load_calibration, save_calibration

    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint_of("independent"), ckpt)
    save_calibration(ckpt, Calibrator("temperature", None, t_span=2.0))
    done = export_onnx(ckpt, ckpt / "onnx")
    renewed = Calibrator("temperature", None, t_span=3.0)
    save_calibration(ckpt, renewed)
    assert load_calibration(done.directory) == renewed
    # sealed again: the export still loads, with the new calibration
    assert Predictor.from_checkpoint(done.directory, runtime="onnx-fp32").calibrator == renewed


def test_an_export_without_the_classifiers_odds_is_not_used(checkpoint_of, tmp_path) -> None:
    """An export made before the answerability classifier's odds were a graph output never
    abstains: predict and serve do not answer with it (they export again)."""
    import json

    from structqa.runtimes import select
    from structqa.runtimes.onnx_model import EXPORT_FILE

    ckpt = checkpoint_of("classifier-dyrex")
    done = export_onnx(ckpt, tmp_path / "onnx")
    assert select._current(ckpt, done.directory) == done.directory
    meta = json.loads((done.directory / EXPORT_FILE).read_text())
    meta["outputs"] = [o for o in meta["outputs"] if o != "null_odds"]  # as an older export
    (done.directory / EXPORT_FILE).write_text(json.dumps(meta))
    assert select._current(ckpt, done.directory) is None


def test_an_export_never_replaces_what_it_should_not(checkpoint_of, tmp_path) -> None:
    from structqa.runtimes.onnx_export import ExportRefused

    ckpt = checkpoint_of("independent")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("important")
    for out, said in (
        (mine, "is not an earlier export"),
        (ckpt, "would replace the checkpoint"),
        (ckpt.parent, "would replace the checkpoint"),
    ):
        with pytest.raises(ExportRefused, match=said):
            export_onnx(ckpt, out)
    assert (mine / "notes.txt").read_text() == "important"
    assert (ckpt / "model.safetensors").is_file()
    again = export_onnx(ckpt, tmp_path / "onnx")  # an earlier export is replaced
    assert export_onnx(ckpt, again.directory).directory == again.directory
