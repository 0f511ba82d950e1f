"""Does `transformers.pipeline("question-answering")` on a transformers export answer as
structqa does? Held-out questions, one process for structqa, one for the pipeline.

    STRUCTQA_HF4_PATH=DIR python benchmarks/hf_agreement.py CHECKPOINT --questions 300

Exports CHECKPOINT (an Independent-head checkpoint) with ``structqa export --format
transformers``, runs the pipeline from transformers 4.x (``$STRUCTQA_HF4_PATH``, see
:mod:`structqa.runtimes.hf_pipeline`) with the checkpoint's window and answer-length settings,
and counts identical answers (text and char span) against structqa's, decoded exactly over the
band (``candidates="all"``, the pipeline's search) and with the default top-20 starts x ends.
Questions whose context spans one window are counted apart: across windows the pipeline ranks
spans by per-window probabilities, structqa by scores. Also the held-out F1 of each.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from structqa.data import read_examples
from structqa.features.squad import featurize
from structqa.io import write_json
from structqa.metrics.squad import squad_v1
from structqa.paths import resolve_data_dir, resolve_data_file
from structqa.prediction.predictor import Predictor
from structqa.runtimes.hf_export import export_transformers
from structqa.runtimes.hf_pipeline import hf4_path, pipeline_answers, pipeline_settings

HELDOUT = "splits/squad1-heldout.mrqa.jsonl.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--data")
    parser.add_argument("--out", default="runs/hf_agreement")
    args = parser.parse_args()
    path = hf4_path()
    if path is None:
        sys.exit("no transformers 4.x: set STRUCTQA_HF4_PATH (see structqa.runtimes.hf_pipeline)")
    t0 = time.perf_counter()
    out = Path(args.out)
    hf_dir = export_transformers(args.checkpoint, out / "transformers").directory
    examples = list(read_examples(resolve_data_file(HELDOUT, resolve_data_dir(args.data))).examples)
    examples = examples[: args.questions]
    predictor = Predictor.from_checkpoint(args.checkpoint, runtime="torch-fp32")
    settings = pipeline_settings(predictor.config)
    version, theirs = pipeline_answers(hf_dir, examples, settings, path)
    features, _ = featurize(examples, predictor.tokenizer, predictor.features)
    windows = [0] * len(examples)
    for f in features:
        windows[f.example_index] += 1
    gold = {ex.id: list(ex.gold_texts) for ex in examples}
    record = {
        "command": " ".join(["python", *sys.argv]),
        "transformers_pipeline": version,
        "questions": len(examples),
        "single_window": sum(w == 1 for w in windows),
        "pipeline_f1": squad_v1(gold, {k: v[0] for k, v in theirs.items()})["f1"],
    }
    for candidates in ("all", "topk"):
        predictor.decode = dataclasses.replace(predictor.decode, candidates=candidates)
        ours = predictor.predict_examples(examples)
        same = [
            theirs[ex.id] == (ours[ex.id].text, ours[ex.id].start_char, ours[ex.id].end_char)
            for ex in examples
        ]
        record[candidates] = {
            "same_all": sum(same) / len(same),
            "same_single_window": sum(s for s, w in zip(same, windows, strict=True) if w == 1)
            / max(1, record["single_window"]),
            "f1": squad_v1(gold, {k: p.text for k, p in ours.items()})["f1"],
        }
    record["wall_seconds"] = time.perf_counter() - t0
    for k, v in record.items():
        print(f"{k}: {v}")
    write_json(out / "agreement.json", record)


if __name__ == "__main__":
    main()
