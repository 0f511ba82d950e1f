"""Does widening answers to whole words (``decode.whole_words``) change held-out EM/F1?

    python benchmarks/whole_words.py runs/lowdata-precision/*/best \\
        --eval splits/squad1-heldout.mrqa.jsonl.gz --out docs/results/whole-words/result.json

For each checkpoint: one inference pass over the evaluation file, then the same collected
spans decoded twice, as trained (spans may start or end inside a word: WordPiece pieces) and
with ``whole_words`` (a cut inside a word moves out to the word's edge), both scored with the
official SQuAD v1.1 metric. Prints EM/F1 of each, the difference, and how many answers changed.
The decoding is the only difference: the logits are the same ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from typing import Any

import harness
import torch

from structqa.decoding import DecodeConfig
from structqa.evaluation import score_collector
from structqa.features.squad import featurize
from structqa.inference import run_inference
from structqa.models.build import model_from_checkpoint
from structqa.runtime import use_bf16
from structqa.training.data import feature_config, load_eval_examples


def measure(checkpoint: str, eval_file: str | None, data: str | None, bf16: str) -> dict:
    model, tokenizer, cfg = model_from_checkpoint(checkpoint)
    if data:
        cfg.data.dir = data
    cfg.data.eval_size = None  # the whole file
    examples, v2 = load_eval_examples(cfg, eval_file)
    if v2:
        raise SystemExit(f"{checkpoint}: SQuAD 2.0 data; this comparison is for v1.1 files")
    features, _ = featurize(examples, tokenizer, feature_config(cfg))
    as_trained = DecodeConfig.from_settings(cfg.decode)
    on_bf16 = use_bf16(bf16, next(model.parameters()).device)
    collector, seconds = harness.timed(
        lambda: run_inference(model, features, as_trained, cfg.train.eval_batch_size, on_bf16)
    )
    row: dict[str, Any] = {"checkpoint": checkpoint, "questions": len(examples)}
    answers = {}
    for name, whole in (("as_trained", False), ("whole_words", True)):
        collector.cfg = dataclasses.replace(as_trained, whole_words=whole)
        result = score_collector(collector, examples, features, v2)
        answers[name] = result.answers()
        row[name] = {"em": result.metrics["exact_match"], "f1": result.metrics["f1"]}
    row["delta_f1"] = row["whole_words"]["f1"] - row["as_trained"]["f1"]
    row["delta_em"] = row["whole_words"]["em"] - row["as_trained"]["em"]
    row["answers_changed"] = sum(
        answers["as_trained"][k] != answers["whole_words"][k] for k in answers["as_trained"]
    )
    row["inference_s"] = round(seconds, 1)
    row["bf16"] = on_bf16
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--eval", help="dataset file (default: each checkpoint's data.eval)")
    ap.add_argument("--data", help="data root (default: the checkpoint's)")
    ap.add_argument("--bf16", default="auto", choices=["auto", "on", "off"])
    ap.add_argument("--threads", type=int)
    ap.add_argument("--out", help="write the rows and their provenance here (JSON)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    prov = harness.Provenance.start(args)
    rows = []
    for ckpt in args.checkpoints:
        row = measure(ckpt, args.eval, args.data, args.bf16)
        rows.append(row)
        print(
            f"{ckpt}: F1 {row['as_trained']['f1']:.2f} -> {row['whole_words']['f1']:.2f} "
            f"({row['delta_f1']:+.2f}), EM {row['as_trained']['em']:.2f} -> "
            f"{row['whole_words']['em']:.2f} ({row['delta_em']:+.2f}), "
            f"{row['answers_changed']} of {row['questions']} answers changed",
            flush=True,
        )
    deltas = [r["delta_f1"] for r in rows]
    print(f"F1 difference, mean over {len(rows)}: {statistics.mean(deltas):+.2f}")
    if args.out:
        prov.write(args.out, eval=args.eval, mean_delta_f1=statistics.mean(deltas), rows=rows)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
