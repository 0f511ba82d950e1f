"""The set-level no-answer decision: the fitted threshold is the best one for the fitting
questions (checked against every possible threshold), it is saved with the reader it belongs
to, and `ask` and the service decide with it."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from structqa.cli import main
from structqa.data.records import Example
from structqa.documents.ask import AskResult, SourcedAnswer, decide
from structqa.documents.no_answer import fit, for_reader, load, reader_id, scores_at


def _result(question: str, text: str, score: float) -> AskResult:
    a = SourcedAnswer(
        text=text,
        probability=score,
        score=0.0,
        doc_id="d",
        title="",
        source="f.txt",
        page=None,
        start=0,
        end=len(text),
        chunk_id=0,
        chunk_start=0,
        chunk_end=len(text),
        chunk_text=text,
        rank_score=score,
    )
    return AskResult(question, [a])


def test_the_fit_is_the_best_threshold():
    rng = random.Random(0)
    results, examples = [], []
    for i in range(60):
        impossible = rng.random() < 0.4
        right = not impossible and rng.random() < 0.6
        text = "gold" if right else "wrong"
        score = rng.choice([0.1, 0.2, 0.3, 0.5, 0.7, 0.9])  # ties, as probabilities have
        results.append(_result(f"q{i}", text, score))
        gold = () if impossible else ("gold",)
        examples.append(Example(f"q{i}", f"q{i}", "ctx", (), gold, impossible))
    threshold, f1, always = fit(results, examples)
    candidates = sorted({r.answers[0].rank_score for r in results}) + [1.0]
    brute = max(scores_at(results, examples, t)["f1"] for t in candidates)
    assert f1 == pytest.approx(brute)
    assert scores_at(results, examples, threshold)["f1"] == pytest.approx(f1)
    assert always == pytest.approx(scores_at(results, examples, None)["f1"])
    assert decide(results[0], 2.0).no_answer and not decide(results[0], 0.0).no_answer


def test_fit_no_answer_is_saved_for_its_reader_and_used(
    shared_data: Path, tmp_path: Path, tiny_trained_run: Path, capsys
):
    mini = shared_data / "fixtures" / "squad-v1.1-mini.json"
    index = tmp_path / "index"
    assert main(["index", str(mini), "--out", str(index), "--no-progress"]) == 0
    capsys.readouterr()
    doc = json.loads(mini.read_text(encoding="utf-8"))
    for article in doc["data"]:
        for para in article["paragraphs"]:
            para["qas"].append(
                {
                    "id": f"none-{len(para['qas'])}",
                    "question": "Who painted the moon?",
                    "answers": [],
                    "is_impossible": True,
                }
            )
    doc["version"] = "v2.0"
    labelled = tmp_path / "labelled.json"
    labelled.write_text(json.dumps(doc), encoding="utf-8")
    reader = tiny_trained_run / "best"
    args = ["fit-no-answer", str(index), "--questions", str(labelled), "--test", str(labelled)]
    args += ["--checkpoint", str(reader), "--bf16", "off", "--no-progress", "--top-k-chunks", "2"]
    assert main(args) == 0
    said = capsys.readouterr()
    out = json.loads(said.out)
    assert "set-level threshold" in said.err and "delete it to go back" in said.err
    assert "warning" not in said.err  # fitted and tested on the same questions: no worse
    fitted = load(index)
    assert fitted is not None and fitted.reader == reader_id(reader)
    assert fitted.questions == 7 and fitted.unanswerable == 2
    # on the fitting questions themselves, the fit is at least as good as either default
    test = out["test"]
    assert test["set_level"]["f1"] == pytest.approx(fitted.f1)
    assert test["set_level"]["f1"] >= test["always_answer"]["f1"] - 1e-9
    assert test["set_level"]["f1"] >= test["passage_threshold"]["f1"] - 1e-9
    assert for_reader(index, reader, "hybrid", 2) == fitted
    assert for_reader(index, reader, "hybrid", 10) is None  # fitted for 2 chunks
    assert for_reader(index, tmp_path, "hybrid", 2) is None  # another reader
    assert fitted.bm25_weight == 0.5  # the hybrid's weight it was fitted under
    assert fitted.runtime == "torch-fp32"  # the probabilities it was fitted on (--bf16 off)
    (index / "fusion.json").write_text(json.dumps({"bm25_weight": 0.7}), encoding="utf-8")
    assert for_reader(index, reader, "hybrid", 2) is None  # `fit-fusion` changed the ranking
    assert for_reader(index, reader, "bm25", 2) is None and load(index) == fitted
    (index / "fusion.json").unlink()
    ask = ["ask", str(index), "--question", "Who painted the moon?", "--json"]
    ask += ["--checkpoint", str(reader), "--bf16", "off", "--top-k-chunks", "2"]
    assert main(ask) == 0
    reply = json.loads(capsys.readouterr().out)
    from structqa.documents import DocumentIndex
    from structqa.documents.ask import ask as ask_index
    from structqa.prediction import Predictor

    predictor = Predictor.from_checkpoint(reader, bf16="off")
    with DocumentIndex.open(index) as ix:
        (want,) = ask_index(
            ix, predictor, ["Who painted the moon?"], 2, set_threshold=fitted.threshold
        )
    assert reply["no_answer"] == want.no_answer
    assert not any(a["declined"] for a in reply["answers"])  # this reader never declines
    # one that declines every chunk: under a set-level decision its spans are taken anyway,
    # each saying so (its probability is then the span's share of the n-best)
    declining = Predictor.from_checkpoint(reader, bf16="off", null_threshold=-1e9)
    with DocumentIndex.open(index) as ix:
        (per_chunk,) = ask_index(ix, declining, ["Who painted the moon?"], 2, set_threshold=None)
        (set_level,) = ask_index(ix, declining, ["Who painted the moon?"], 2, set_threshold=0.0)
    assert per_chunk.no_answer and set_level.answers
    assert all(a.declined for a in set_level.answers)
    assert [a["text"] for a in reply["answers"]] == [a.text for a in want.answers[:5]]
    # the Python API decides as the command does by default: with the index's fit for this
    # reader (here one that abstains on everything), and with none for another depth
    from dataclasses import replace

    from structqa.documents.no_answer import save

    save(index, replace(fitted, threshold=2.0))  # above any rank score
    assert main(ask) == 0
    assert json.loads(capsys.readouterr().out)["no_answer"]
    with DocumentIndex.open(index) as ix:
        (fit_used,) = ask_index(ix, predictor, ["Who painted the moon?"], 2)
        (passage,) = ask_index(ix, predictor, ["Who painted the moon?"], 2, set_threshold=None)
        (deeper,) = ask_index(ix, predictor, ["Who painted the moon?"], 3)
    assert fit_used.no_answer and not passage.no_answer and not deeper.no_answer
    # a reader loaded from an export directory has no torch checkpoint beside it, but the fit
    # is matched to the directory it was loaded from, as `structqa ask --checkpoint` does
    assert predictor.source == reader
    predictor.checkpoint = None
    with DocumentIndex.open(index) as ix:
        (export_like,) = ask_index(ix, predictor, ["Who painted the moon?"], 2)
    assert export_like.no_answer


def test_a_fit_made_on_another_runtimes_probabilities_is_used_and_said(
    tmp_path: Path, caplog
) -> None:
    import logging

    from structqa.documents.no_answer import SetThreshold, save

    index = tmp_path / "index"
    index.mkdir()
    fitted = SetThreshold(0.5, reader_id(tmp_path), "bm25", 3, "q.json", 10, 4, 60.0, 50.0)
    save(index, replace(fitted, runtime="torch-bf16"))
    with caplog.at_level(logging.WARNING):
        assert for_reader(index, tmp_path, "bm25", 3, "onnx-int8") is not None
    assert "torch-bf16 runtime's probabilities, these come from onnx-int8" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert for_reader(index, tmp_path, "bm25", 3, "torch-bf16") is not None
        save(index, fitted)  # a fit from before the runtime was kept: nothing to compare
        assert for_reader(index, tmp_path, "bm25", 3, "onnx-int8") is not None
    assert "runtime" not in caplog.text
