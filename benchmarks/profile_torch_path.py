"""Where the torch bf16 path from raw text to answers spends its time: featurize, the
encoder, the head, decoding. Wall time, median of ``--repeats`` (process CPU time would count
OpenMP workers spinning between the head's many small operations as work).

    python benchmarks/profile_torch_path.py /work/ckpt/qs-dyrex/best --questions 64
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from structqa.data import read_examples
from structqa.decoding import SpanCollector
from structqa.features.batching import collate, sorted_batches
from structqa.features.squad import featurize
from structqa.paths import resolve_data_dir, resolve_data_file
from structqa.prediction.predictor import Predictor


def wall(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--data")
    args = parser.parse_args()
    heldout = resolve_data_file("splits/squad1-heldout.mrqa.jsonl.gz", resolve_data_dir(args.data))
    examples = list(read_examples(heldout).examples)[: args.questions]
    p = Predictor.from_checkpoint(args.checkpoint, runtime="torch-bf16")
    features, _ = featurize(examples, p.tokenizer, p.features)
    order = sorted_batches([len(f) for f in features], args.batch_size)
    batches = [collate(features, idx) for idx in order]
    m = p.model
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = [m.encoder(b.input_ids, b.attention_mask, b.token_type_ids) for b in batches]
        outputs = [m.head(h.last_hidden_state, b) for h, b in zip(hidden, batches, strict=True)]

        def encoder() -> None:
            for b in batches:
                m.encoder(b.input_ids, b.attention_mask, b.token_type_ids)

        def head() -> None:
            for h, b in zip(hidden, batches, strict=True):
                m.head(h.last_hidden_state, b)

        def decode() -> None:
            collector = SpanCollector(p.decode)
            for o, b in zip(outputs, batches, strict=True):
                collector.add(o, b.feature_index, b.answer_mask)
            collector.predictions(examples, features)

        parts = {
            "featurize": lambda: featurize(examples, p.tokenizer, p.features),
            "collate": lambda: [collate(features, idx) for idx in order],
            "encoder": encoder,
            "head": head,
            "decode": decode,
        }
        times = {k: [] for k in parts}
        for _ in range(args.repeats):
            for k, fn in parts.items():
                times[k].append(wall(fn))
    med = {k: statistics.median(v) for k, v in times.items()}
    total = sum(med.values())
    print(f"{len(features)} windows, {args.checkpoint}, runtime {p.runtime}")
    for k, v in med.items():
        print(f"{k:<10} {v:7.3f} s  {v / total:6.1%}")
    print(f"encoder share of the path: {med['encoder'] / total:.2f}")


if __name__ == "__main__":
    main()
