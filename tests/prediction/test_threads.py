"""The Python API's Predictor called from several threads at once (a web framework's worker
threads): each call answers as it would alone."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from structqa.prediction import Predictor


def test_threads_sharing_a_predictor_get_the_answers_each_call_gets_alone(
    tiny_trained_run: Path, shared_data: Path
) -> None:
    data = json.loads((shared_data / "fixtures/squad-v1.1-mini.json").read_text())
    pairs = [
        (qa["question"], paragraph["context"])
        for article in data["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    # long contexts (several windows) beside short ones: a call that read the shared fast
    # tokenizer with another call's truncation settings would window them otherwise
    long = [(q, " ".join([c] * 6)) for q, c in pairs[:4]]
    short = [(q, c[:80]) for q, c in pairs[:4]]
    asked = (long + short) * 6
    predictor = Predictor.from_checkpoint(tiny_trained_run / "best", bf16="off", runtime="torch")
    alone = [predictor.predict(q, c) for q, c in asked]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda pair: predictor.predict(*pair), asked))
    assert [(a.text, a.start) for a in together] == [(a.text, a.start) for a in alone]
    assert [round(a.probability, 5) for a in together] == [round(a.probability, 5) for a in alone]
