"""`structqa export --format transformers`: BertForQuestionAnswering, and the QA pipeline.

transformers 5 dropped the question-answering pipeline. The pipeline check runs with
transformers 4.x (:mod:`structqa.runtimes.hf_pipeline`: ``$STRUCTQA_HF4_PATH``, which
``.ci/run`` provides); without it that test is skipped with the reason."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from export_cases import HELDOUT, make_checkpoint

from structqa.cli import main
from structqa.data import read_examples
from structqa.data.records import Example
from structqa.features.squad import featurize
from structqa.prediction.predictor import Predictor
from structqa.runtimes.hf_export import export_transformers
from structqa.runtimes.hf_pipeline import hf4_path, pipeline_answers, pipeline_settings
from structqa.runtimes.onnx_export import ExportRefused


@pytest.fixture(scope="module")
def wide(tmp_path_factory, tiny_checkpoint, shared_data) -> Path:
    """An Independent checkpoint with 384-token windows: most held-out contexts fit one."""
    windows = ["data.max_seq_len=384", "data.doc_stride=128", "data.max_query_len=64"]
    root = tmp_path_factory.mktemp("hf")
    return make_checkpoint(root / "best", tiny_checkpoint, windows, shared_data, seed=1)


@pytest.fixture(scope="module")
def hf_dir(wide: Path) -> Path:
    return export_transformers(wide, wide.parent / "transformers").directory


@pytest.fixture(scope="module")
def questions(shared_data: Path) -> list[Example]:
    return list(read_examples(shared_data / HELDOUT).examples)[:80]


def test_bert_for_qa_gives_the_heads_logits(hf_dir, wide, heldout) -> None:
    from transformers import AutoModelForQuestionAnswering

    from structqa.features.batching import collate
    from structqa.models.build import model_from_checkpoint

    hf = AutoModelForQuestionAnswering.from_pretrained(str(hf_dir)).eval()
    assert type(hf).__name__ == "BertForQuestionAnswering"
    model, tokenizer, cfg = model_from_checkpoint(wide)
    from structqa.training.data import feature_config

    features, _ = featurize(heldout.examples, tokenizer, feature_config(cfg))
    batch = collate(features, list(range(len(features))))
    with torch.inference_mode():
        ours = model(batch)
        theirs = hf(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            token_type_ids=batch.token_type_ids,
        )
    allowed = batch.answer_mask  # structqa masks the question and padding, HF does not
    pairs = ((ours.start_logits, theirs.start_logits), (ours.end_logits, theirs.end_logits))
    for mine, hfs in pairs:
        assert torch.allclose(mine[allowed], hfs[allowed], atol=1e-5)


def test_other_heads_and_encoders_are_refused(checkpoint_of, tmp_path) -> None:
    with pytest.raises(ExportRefused, match="dyrex.*no BertForQuestionAnswering form"):
        export_transformers(checkpoint_of("dyrex"), tmp_path / "a")
    with pytest.raises(ExportRefused, match="NAA->FFN is not BERT's"):
        export_transformers(checkpoint_of("naa-independent"), tmp_path / "c")


def test_cli_refuses_quantizing_a_transformers_export(checkpoint_of, capsys) -> None:
    code = main(
        [
            "export",
            str(checkpoint_of("independent")),
            "--format",
            "transformers",
            "--quantize",
            "int8",
        ]
    )
    assert code == 2 and "--quantize applies to --format onnx" in capsys.readouterr().err


def test_the_pipeline_answers_as_structqa(hf_dir, wide, questions) -> None:
    path = hf4_path()
    if path is None:
        pytest.skip(
            "no transformers 4.x with the question-answering pipeline (set STRUCTQA_HF4_PATH)"
        )
    predictor = Predictor.from_checkpoint(wide, runtime="torch-fp32")
    # the pipeline searches every span of the band exactly; so does candidates="all" (the
    # default "topk" pairs the 20 best starts and ends, which on a random model often miss it)
    predictor.decode = dataclasses.replace(predictor.decode, candidates="all")
    features, _ = featurize(questions, predictor.tokenizer, predictor.features)
    windows = [0] * len(questions)
    for f in features:
        windows[f.example_index] += 1
    # one window: the pipeline ranks spans across windows by per-window probabilities,
    # structqa by scores (BERT's run_squad), so only single-window answers must agree
    single = [ex for ex, w in zip(questions, windows, strict=True) if w == 1]
    assert len(single) >= 40
    settings = pipeline_settings(predictor.config)
    version, theirs = pipeline_answers(hf_dir, single, settings, path)
    assert version.startswith("4.")
    ours = predictor.predict_examples(single)
    for ex in single:
        p = ours[ex.id]
        assert theirs[ex.id] == (p.text, p.start_char, p.end_char), ex.id
