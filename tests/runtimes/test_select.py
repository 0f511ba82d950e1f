"""Which runtime answers for a path, and the CLI commands that take an export."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from structqa import runtime as hardware
from structqa.cli import main
from structqa.runtimes.onnx_export import export_onnx
from structqa.runtimes.select import choose

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def with_export(checkpoint_of, tmp_path_factory) -> Path:
    """An Independent checkpoint with its int8 export where `auto` looks (CHECKPOINT/onnx)."""
    ckpt = tmp_path_factory.mktemp("with-export") / "best"
    shutil.copytree(checkpoint_of("independent"), ckpt)
    assert main(["export", str(ckpt), "--quantize", "int8"]) == 0
    return ckpt


def test_auto_without_native_bf16_or_export_is_torch_fp32(checkpoint_of) -> None:
    choice = choose(checkpoint_of("independent"), "auto", CPU, bf16="off")
    assert choice.runtime == "torch-fp32" and "no ONNX export" in choice.reason


def test_auto_takes_bf16_torch_where_bf16_is_on(with_export, monkeypatch) -> None:
    monkeypatch.setattr(hardware, "onednn_has_bf16", lambda: True)  # as on a bf16 CPU
    assert choose(with_export, "auto", CPU, bf16="on").runtime == "torch-bf16"


def test_auto_takes_the_int8_export_without_bf16(with_export, monkeypatch) -> None:
    monkeypatch.setattr(hardware, "onednn_has_bf16", lambda: True)
    choice = choose(with_export, "auto", CPU, bf16="off")
    assert choice.runtime == "onnx-int8" and choice.onnx_dir == with_export / "onnx"
    assert choose(with_export / "onnx", "auto", CPU, bf16="on").runtime == "onnx-int8"


def test_auto_takes_the_int8_export_where_bf16_instructions_are_slow(
    with_export, monkeypatch
) -> None:
    """bf16 instructions that compute slower than fp32 (measured): auto answers with the
    int8 export, as on a CPU without them, and says why."""
    import structqa.runtimes.select as select

    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(hardware, "bf16_speedup", lambda: 0.74)
    monkeypatch.setattr(select, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(select, "bf16_speedup", lambda: 0.74)
    choice = choose(with_export, "auto", CPU)
    assert choice.runtime == "onnx-int8"
    assert "bf16 runs at 0.74x fp32's speed on this CPU" in choice.reason
    monkeypatch.setattr(hardware, "bf16_speedup", lambda: 2.8)
    monkeypatch.setattr(hardware, "onednn_has_bf16", lambda: True)
    assert choose(with_export, "auto", CPU).runtime == "torch-bf16"


def test_an_fp32_only_export_gives_onnx_fp32(checkpoint_of, tmp_path) -> None:
    export_onnx(checkpoint_of("dyref"), tmp_path / "onnx")
    assert choose(tmp_path / "onnx", "auto", CPU).runtime == "onnx-fp32"
    with pytest.raises(FileNotFoundError, match="no int8 graph"):
        from structqa.runtimes.select import load

        load(tmp_path / "onnx", "onnx-int8")


def test_explicit_runtimes(with_export) -> None:
    assert choose(with_export, "onnx", CPU).runtime == "onnx-int8"
    assert choose(with_export, "onnx-fp32", CPU).runtime == "onnx-fp32"
    assert choose(with_export, "torch", CPU, bf16="off").runtime == "torch-fp32"
    with pytest.raises(FileNotFoundError, match="holds no torch weights"):
        choose(with_export / "onnx", "torch-bf16", CPU)
    with pytest.raises(ValueError, match="unknown runtime"):
        choose(with_export, "tensorrt", CPU)


def test_torch_bf16_on_a_cpu_without_bf16_kernels_names_the_runtimes_to_use(
    with_export, monkeypatch
) -> None:
    import structqa.runtimes.select as select

    monkeypatch.setattr(select, "onednn_has_bf16", lambda: False)  # as on an AVX2 CPU
    with pytest.raises(ValueError, match="use --runtime auto .* or torch-fp32"):
        choose(with_export, "torch-bf16", CPU, bf16="off")
    assert choose(with_export, "torch-fp32", CPU).runtime == "torch-fp32"


def test_a_damaged_export_record_is_named_and_leaves_the_weights_answering(
    with_export, tmp_path, caplog
) -> None:
    from structqa.io import UnreadableFile

    ckpt = tmp_path / "best"
    shutil.copytree(with_export, ckpt)
    record = ckpt / "onnx" / "structqa_export.json"
    record.write_text('{"format": "onnx", "fi')  # cut short
    with caplog.at_level("WARNING"):
        choice = choose(ckpt, "auto", CPU, bf16="off")
    assert choice.runtime == "torch-fp32" and str(record) in caplog.text
    assert choose(ckpt, "torch", CPU, bf16="off").runtime == "torch-fp32"
    with pytest.raises(UnreadableFile, match="structqa_export.json: invalid JSON.*export"):
        choose(ckpt / "onnx", "auto", CPU)
    with pytest.raises(FileNotFoundError, match="its export's record in .* cannot be read"):
        choose(ckpt, "onnx", CPU)
    record.write_text("[]")  # JSON, not a record
    with pytest.raises(UnreadableFile, match="not a JSON object"):
        choose(ckpt / "onnx", "auto", CPU)


def test_neither_checkpoint_nor_export_is_named(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="not a structqa checkpoint.*nor an export"):
        choose(tmp_path, "auto", CPU)


def test_evaluate_an_export_gives_the_checkpoints_metrics(
    with_export, shared_data, tmp_path
) -> None:
    common = [f"--data={shared_data}", "--eval", "splits/squad1-heldout.mrqa.jsonl.gz"]
    common += ["--eval-size", "40"]
    scores = {}
    for name, path, runtime in (
        ("torch", with_export, "torch-fp32"),
        ("onnx", with_export / "onnx", "onnx-fp32"),
    ):
        out = tmp_path / name
        code = main(["evaluate", str(path), *common, "--runtime", runtime, "--out", str(out)])
        assert code == 0
        scores[name] = (
            json.loads((out / "metrics.json").read_text()),
            json.loads((out / "predictions.json").read_text()),
        )
    (onnx_metrics, onnx_answers), (torch_metrics, torch_answers) = scores["onnx"], scores["torch"]
    assert onnx_answers == torch_answers
    # the same answers give the same scores; the calibration error also reads the
    # probabilities, equal to float rounding (1e-9) across the two runtimes
    assert onnx_metrics.keys() == torch_metrics.keys()
    # metrics.json names the runtime that answered
    assert (torch_metrics.pop("runtime"), onnx_metrics.pop("runtime")) == (
        "torch-fp32",
        "onnx-fp32",
    )
    for key, value in torch_metrics.items():
        assert onnx_metrics[key] == (pytest.approx(value) if isinstance(value, float) else value)


def test_predict_runs_an_export(with_export, capsys) -> None:
    question = "Who won Super Bowl 50?"
    context = "The Denver Broncos defeated the Carolina Panthers to win Super Bowl 50."
    args = ["--question", question, "--context", context]
    for path in (with_export / "onnx", with_export):
        assert main(["predict", str(path), *args, "--runtime", "onnx-int8"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["answer"] and answer["answer"] in context


def test_predict_makes_and_keeps_an_int8_export_where_bf16_is_not_native(
    checkpoint_of, shared_data, tmp_path, monkeypatch, capsys, caplog
) -> None:
    """On a CPU without native bf16, `predict` on a torch checkpoint writes its int8 export
    once beside it and answers with it; `evaluate` keeps torch; weights written again since
    make the export stale, so it is not used."""
    import structqa.runtimes.select as select
    from structqa.manifest import write_manifest

    monkeypatch.setenv(select.AUTO_EXPORT_ENV, "on")
    monkeypatch.setattr(select, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: False)  # (bf16 auto: off)
    ckpt = tmp_path / "best"
    shutil.copytree(checkpoint_of("dyrex"), ckpt)
    context = "The Denver Broncos defeated the Carolina Panthers to win Super Bowl 50."
    args = ["predict", str(ckpt), "--question", "Who won Super Bowl 50?", "--context", context]
    with caplog.at_level("INFO"):
        assert main([*args, "--bf16", "auto"]) == 0
    assert "making its export once" in caplog.text and "runtime onnx-int8" in caplog.text
    first = json.loads(capsys.readouterr().out)
    assert (ckpt / "onnx" / "model.int8.onnx").is_file() and first["answer"] in context
    stamp = (ckpt / "onnx" / "model.int8.onnx").stat().st_mtime_ns
    caplog.clear()
    with caplog.at_level("INFO"):
        assert main(args) == 0
    assert "making its export" not in caplog.text  # loaded, not made again
    assert (ckpt / "onnx" / "model.int8.onnx").stat().st_mtime_ns == stamp
    assert json.loads(capsys.readouterr().out)["answer"] == first["answer"]
    # evaluate keeps torch, and says so
    common = ["--data", str(shared_data), "--eval", "fixtures/squad-v1.1-mini.json"]
    assert main(["evaluate", str(ckpt), *common, "--out", str(tmp_path / "ev")]) == 0
    assert "runtime torch-fp32" in capsys.readouterr().err
    # the checkpoint trained again (other weights, a new manifest): its old export is stale
    from safetensors.torch import load_file, save_file

    weights = load_file(ckpt / "model.safetensors")
    name = next(iter(weights))
    weights[name] = weights[name] + 0.01
    save_file(weights, ckpt / "model.safetensors")
    write_manifest(ckpt)
    monkeypatch.setenv(select.AUTO_EXPORT_ENV, "off")
    caplog.clear()
    with caplog.at_level("INFO"):
        assert main(args) == 0
    assert "made from other weights" in caplog.text and "runtime torch-fp32" in caplog.text


def test_a_server_over_a_graph_passes_windows_of_one_length(with_export) -> None:
    """onnxruntime computes every padded position and has next to no fixed cost per pass, so
    the server's batcher cuts a batch of mixed lengths into passes of (nearly) one padded
    length, where torch's unpacked passes share more; the answers are the Predictor's."""
    from structqa.prediction.predictor import Predictor
    from structqa.serving.batcher import (
        GRAPH_PASS_OVERHEAD_TOKENS,
        PASS_OVERHEAD_TOKENS,
        Batcher,
        BatchStats,
        Featurizer,
        length_groups,
    )

    graph = Predictor.from_checkpoint(with_export, runtime="onnx-int8")
    torch_side = Predictor.from_checkpoint(with_export, runtime="torch", bf16="off")
    context = "The Denver Broncos defeated the Carolina Panthers to win Super Bowl 50. "
    pairs = [("Who won?", context * k) for k in (1, 3, 6)]
    stats: list[BatchStats] = []
    batcher = Batcher(graph, max_batch_windows=8, max_wait_ms=50, on_batch=stats.append)
    try:
        assert batcher.pass_overhead == GRAPH_PASS_OVERHEAD_TOKENS
        examples, features = Featurizer(graph, 1).featurize(pairs)
        got = batcher.submit(examples, features).future.result(60)
    finally:
        batcher.close()
    lengths = sorted((len(f) for f in features), reverse=True)
    assert stats[0].windows == len(features)  # one batch, cut into passes:
    assert stats[0].passes == len(length_groups(lengths, GRAPH_PASS_OVERHEAD_TOKENS)) > 1
    assert len(length_groups(lengths, PASS_OVERHEAD_TOKENS)) == 1  # torch's: one pass
    assert [a.text for a in got] == [a.text for a in graph.predict_batch(pairs)]
    tb = Batcher(torch_side, max_batch_windows=8, max_wait_ms=0)
    try:
        assert tb.pass_overhead == PASS_OVERHEAD_TOKENS
    finally:
        tb.close()


def test_a_failing_int8_export_leaves_torch_answering(checkpoint_of, tmp_path, monkeypatch, caplog):
    """Whatever stops the automatic int8 export (here the int8 rewrite refusing the graph),
    the command answers with torch fp32 and says how to skip trying; nothing half-written
    is left beside the checkpoint."""
    import structqa.runtimes.onnx_export as onnx_export
    import structqa.runtimes.select as select

    def refuse(*_args, **_kwargs):
        raise ValueError("an initializer the rewrite does not know")

    monkeypatch.setattr(onnx_export, "quantize_int8", refuse)
    monkeypatch.setenv(select.AUTO_EXPORT_ENV, "on")
    monkeypatch.setattr(select, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: False)
    ckpt = tmp_path / "best"
    shutil.copytree(checkpoint_of("dyrex"), ckpt)
    before = sorted(p.name for p in ckpt.iterdir())
    with caplog.at_level("WARNING"):
        assert select.load(ckpt, make_int8_export=True).choice.runtime == "torch-fp32"
    assert "ValueError: an initializer the rewrite does not know" in caplog.text
    assert f"{select.AUTO_EXPORT_ENV}=off" in caplog.text
    assert f"`structqa export {ckpt} --quantize int8 --out DIR`" in caplog.text  # the remedy
    # only the hidden lock file is new
    assert sorted(p.name for p in ckpt.iterdir()) == sorted([*before, ".onnx.lock"])
    # with the fp32 graph alone exported there, that graph answers
    export_onnx(ckpt, ckpt / "onnx")
    assert select.load(ckpt, make_int8_export=True).choice.runtime == "onnx-fp32"


def test_an_export_kept_apart_names_a_newer_calibration_of_its_checkpoint(
    checkpoint_of, tmp_path, caplog
) -> None:
    """An export written elsewhere answers as it was made; once its checkpoint is calibrated
    again (or trained again), loading the export says so and how to follow it."""
    from structqa.calibration.fit import Calibrator
    from structqa.calibration.report import save_calibration

    ckpt = tmp_path / "best"
    shutil.copytree(checkpoint_of("dyrex"), ckpt)
    out = tmp_path / "served"
    export_onnx(ckpt, out, quantize="int8")
    with caplog.at_level("WARNING"):
        choose(out, "auto", CPU)
    assert "has new" not in caplog.text
    save_calibration(ckpt, Calibrator("temperature", null_threshold=1.5))
    with caplog.at_level("WARNING"):
        assert choose(out, "auto", CPU).runtime == "onnx-int8"  # used all the same
    assert "has new calibration" in caplog.text
    assert f"structqa export {ckpt} --out {out} --quantize int8" in caplog.text


def test_a_transformers_export_is_not_taken_for_a_checkpoint(
    checkpoint_of, tmp_path, capsys
) -> None:
    from structqa.runtimes.hf_export import export_transformers

    out = tmp_path / "hf"
    export_transformers(checkpoint_of("independent"), out)
    assert main(["predict", str(out), "--question", "Who?", "--context", "Ann."]) == 2
    err = capsys.readouterr().err
    assert f"{out}: a transformers export" in err and "transformers.pipeline" in err


def test_predict_adds_int8_to_a_checkpoints_fp32_export_where_bf16_is_not_native(
    checkpoint_of, tmp_path, monkeypatch, caplog
) -> None:
    """`structqa export CKPT` without --quantize leaves the fp32 graph alone in CKPT/onnx;
    on a CPU where bf16 does not pay, `predict` adds the int8 graph the runtime choice
    prefers there, once, rather than answering with fp32 for good."""
    import structqa.runtimes.select as select

    monkeypatch.setenv(select.AUTO_EXPORT_ENV, "on")
    monkeypatch.setattr(select, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: False)
    ckpt = tmp_path / "best"
    shutil.copytree(checkpoint_of("dyrex"), ckpt)
    assert main(["export", str(ckpt)]) == 0
    assert choose(ckpt, "auto", CPU).runtime == "onnx-fp32"
    with caplog.at_level("INFO"):
        loaded = select.load(ckpt, make_int8_export=True)
    assert "making its export once" in caplog.text
    assert loaded.choice.runtime == "onnx-int8" and (ckpt / "onnx" / "model.int8.onnx").is_file()


def test_an_int8_export_from_before_per_token_activations_is_made_again(
    checkpoint_of, tmp_path, caplog
) -> None:
    """An export made by an older structqa (its int8 graph quantizes activations per tensor,
    and answers one window per call) is not taken by `auto` from a checkpoint: it is out of
    date, as one made from other weights is."""
    from structqa.io import write_json
    from structqa.manifest import write_manifest
    from structqa.runtimes.onnx_model import EXPORT_FILE

    ckpt = tmp_path / "best"
    shutil.copytree(checkpoint_of("dyrex"), ckpt)
    export_onnx(ckpt, ckpt / "onnx", quantize="int8")
    assert choose(ckpt, "auto", CPU, bf16="off").runtime == "onnx-int8"
    record = json.loads((ckpt / "onnx" / EXPORT_FILE).read_text())
    del record["files"]["int8"]["activations"]  # as written before per-token activations
    write_json(ckpt / "onnx" / EXPORT_FILE, record)
    write_manifest(ckpt / "onnx")
    with caplog.at_level("WARNING"):
        assert choose(ckpt, "auto", CPU, bf16="off").runtime == "torch-fp32"
    assert "from before per-token activations" in caplog.text


def test_a_model_reading_token_tags_answers_without_writing_its_training_cache(
    checkpoint_of, tmp_path, monkeypatch
) -> None:
    """Its tagger starts empty (no cache file where it answers): the Predictor's own tagger
    is used all the same, never the training one that appends people's text to
    data.annotation_cache (here a relative path whose folder does not exist)."""
    from structqa.manifest import write_manifest
    from structqa.prediction import Predictor

    ckpt = tmp_path / "best"
    shutil.copytree(checkpoint_of("tagged-dyrex+joint"), ckpt)
    shutil.rmtree(ckpt / "onnx", ignore_errors=True)
    config = ckpt / "structqa_config.json"
    settings = json.loads(config.read_text())
    settings["data"]["annotation_cache"] = "runs/elsewhere/annotations.jsonl"
    config.write_text(json.dumps(settings))
    write_manifest(ckpt)
    monkeypatch.chdir(tmp_path)
    predictor = Predictor.from_checkpoint(ckpt, bf16="off", runtime="torch")
    assert predictor.annotator is not None and len(predictor.annotator) == 0
    answer = predictor.predict("Who won the game?", "The Denver Broncos won the game.")
    assert answer.text is not None
    assert predictor.annotator.misses == 2  # the Predictor's tagger parsed both texts
    assert not (tmp_path / "runs").exists()  # and nothing was written
