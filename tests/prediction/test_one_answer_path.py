"""One answer path: 200 held-out SQuAD 2.0 questions (multi-window contexts, unanswerable
questions, Unicode edge cases, over-long questions) asked of a checkpoint with an
answerability verifier through every entry point, on torch fp32 and on its int8 export.

Each entry point must give the same answers and spans, probabilities within 1e-4, or the
outcome the policy gives it for an over-long question: answered cut to data.max_query_len and
counted by the file commands (``evaluate``, ``predict --file``), refused by the pair APIs
(:class:`QuestionTooLong` from ``Predictor.predict_batch``, 422 from both serving modes).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from structqa.calibration import Calibrator, save_calibration
from structqa.calibration.verifier import FEATURES, Verifier
from structqa.cli import main
from structqa.prediction import Predictor, QuestionTooLong
from structqa.runtimes.onnx_export import export_onnx

QUESTIONS = 200
HELDOUT_V2 = "splits/squad2-heldout.v2.0.json"
UNICODE = [" — café naïve 東京 🚀?", " (Zürich, São Paulo, Ångström)?", " e\u0301t\u00e9 שלום?"]


def _negation_verifier() -> Verifier:
    """Abstains exactly on questions with a negation (log-odds +50 against -50)."""
    coef = [100.0 if name == "negation" else 0.0 for name in FEATURES]
    zeros, ones = [0.0] * len(FEATURES), [1.0] * len(FEATURES)
    return Verifier(list(FEATURES), zeros, ones, coef, -50.0)


@pytest.fixture(scope="module")
def setup(tiny_trained_run: Path, shared_data: Path, tmp_path_factory) -> dict:
    """The checkpoint (with a verifier), its int8 export, and the question file."""
    root = tmp_path_factory.mktemp("one-path")
    ckpt = Path(shutil.copytree(tiny_trained_run / "best", root / "best"))
    save_calibration(ckpt, Calibrator("temperature", 0.0, verifier=_negation_verifier()))
    export_onnx(ckpt, root / "export", quantize="int8")
    limit = Predictor.from_checkpoint(ckpt, bf16="off", runtime="torch-fp32").features
    data = json.loads((shared_data / HELDOUT_V2).read_text())
    kept, n = [], 0
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            if n >= QUESTIONS:
                break
            qas = paragraph["qas"][: QUESTIONS - n]
            paragraph["context"] += " Ceci n'est pas une pipe — 東京 🚀."  # after every answer
            for qa in qas:
                k = n
                if k % 50 == 7:  # over-long: longer than the model reads
                    qa["question"] = " ".join(["which"] * (limit.max_query_len + 20)) + "?"
                elif k % 17 == 3:  # Unicode edge cases
                    qa["question"] = qa["question"].rstrip("?") + UNICODE[k % len(UNICODE)]
                elif k % 23 == 5:  # the verifier abstains on negations
                    qa["question"] = qa["question"].rstrip("?") + ", or not?"
                n += 1
            paragraph["qas"] = qas
            kept.append({"title": article["title"], "paragraphs": [paragraph]})
    path = root / "questions.json"
    path.write_text(json.dumps({"version": "v2.0", "data": kept}, ensure_ascii=False))
    items = [
        (qa["id"], qa["question"], p["context"])
        for a in kept
        for p in a["paragraphs"]
        for qa in p["qas"]
    ]
    assert len(items) == QUESTIONS
    # over-long by the model's own tokenizer (the tiny one cuts words into many pieces)
    tokenizer = Predictor.from_checkpoint(ckpt, bf16="off", runtime="torch-fp32").tokenizer
    long_ids = {
        i
        for i, q, _ in items
        if len(tokenizer(q, add_special_tokens=False)["input_ids"]) > limit.max_query_len
    }
    assert {i for i, q, _ in items if q.startswith("which which")} <= long_ids
    assert 4 <= len(long_ids) < QUESTIONS // 4
    return {"root": root, "ckpt": ckpt, "file": path, "items": items, "long": long_ids}


def _file_paths(where: Path, runtime: str, setup: dict, capsys) -> tuple[dict, dict]:
    """``evaluate`` and ``predict --file``: id -> answer text, and evaluate's metrics."""
    ev, pr = setup["root"] / f"ev-{runtime}", setup["root"] / f"pr-{runtime}.json"
    args = ["--runtime", runtime, "--bf16", "off"]
    assert (
        main(["evaluate", str(where), "--eval", str(setup["file"]), "--out", str(ev), *args]) == 0
    )
    capsys.readouterr()
    data = ["--file", str(setup["file"])]
    assert main(["predict", str(where), *data, "--out", str(pr), *args]) == 0
    err = capsys.readouterr().err
    assert f"{len(setup['long'])} of {QUESTIONS} questions were longer than" in err
    evaluated = json.loads((ev / "predictions.json").read_text(encoding="utf-8"))
    predicted = json.loads(pr.read_text(encoding="utf-8"))
    assert evaluated == predicted  # every question, the over-long ones cut and answered
    metrics = json.loads((ev / "metrics.json").read_text())
    return evaluated, metrics


def _served(predictor: Predictor, setup: dict, one_at_a_time: bool) -> dict:
    """Each paragraph's questions in one request to the service: id -> reply (or status)."""
    from fastapi.testclient import TestClient

    from structqa.serving.app import create_app
    from structqa.serving.settings import ServeSettings

    app = create_app(predictor, ServeSettings(one_at_a_time=one_at_a_time, max_questions=64))
    out: dict = {}
    with TestClient(app, raise_server_exceptions=False) as client:
        assert app.state.service.wait_ready(60), app.state.service.status
        for qid, question, context in setup["items"]:
            reply = client.post("/v1/answer", json={"question": question, "context": context})
            out[qid] = reply.json() if reply.status_code == 200 else reply.status_code
    return out


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["torch-fp32", "onnx-int8"])
def test_every_entry_point_gives_the_same_answer_or_the_same_refusal(
    setup: dict, runtime: str, capsys
) -> None:
    where = setup["ckpt"] if runtime.startswith("torch") else setup["root"] / "export"
    files, metrics = _file_paths(where, runtime, setup, capsys)
    assert metrics["questions_truncated"] == len(setup["long"])
    predictor = Predictor.from_checkpoint(where, bf16="off", runtime=runtime)
    assert predictor.runtime == runtime and predictor.calibrator.verifier is not None
    short = [(i, q, c) for i, q, c in setup["items"] if i not in setup["long"]]
    replies = predictor.predict_batch([(q, c) for _, q, c in short])
    answers = dict(zip([i for i, _, _ in short], replies, strict=True))
    for i, q, c in setup["items"]:
        if i in setup["long"]:
            with pytest.raises(QuestionTooLong, match="this model reads"):
                predictor.predict_batch([(q, c)])
    batched = _served(predictor, setup, one_at_a_time=False)
    whole = _served(predictor, setup, one_at_a_time=True)
    negated = [i for i, q, _ in short if q.endswith(", or not?")]
    assert negated and all(answers[i].no_answer for i in negated)  # the verifier applied
    assert sum(not a.no_answer for a in answers.values()) > len(short) // 2
    for qid, _, _ in setup["items"]:
        if qid in setup["long"]:
            assert batched[qid] == whole[qid] == 422
            continue
        a = answers[qid]
        assert files[qid] == a.text, qid
        for reply in (batched[qid], whole[qid]):
            assert (reply["answer"], reply["start"], reply["end"]) == (a.text, a.start, a.end)
            assert reply["no_answer"] == a.no_answer
            assert reply["probability"] == pytest.approx(a.probability, abs=1e-4)
