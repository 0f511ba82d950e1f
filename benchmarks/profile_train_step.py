"""Where an fp32 training step of the default reader spends its time on this CPU: torch's
profiler over a few steps of length-sorted batches (the Trainer's batching), grouped by
operator.

    python benchmarks/profile_train_step.py --steps 3
    ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 \\
        python benchmarks/profile_train_step.py      # as an AVX2 CPU without bf16 runs it
"""

from __future__ import annotations

import argparse
import time

import harness
import torch
from torch.profiler import ProfilerActivity, profile

from structqa.config import load_config
from structqa.data import read_examples, train_subset
from structqa.features.batching import collate, sorted_batches
from structqa.features.squad import featurize
from structqa.models.build import build_model
from structqa.paths import resolve_data_dir, resolve_data_file
from structqa.training.data import feature_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--head", default="dyrex")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=12)
    ap.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    args = ap.parse_args()
    prov = harness.Provenance.start(args, torch.device("cpu"))
    cfg = load_config(None, [f"model.head={args.head}"])
    model, tokenizer = build_model(cfg)
    model.train()
    pool = read_examples(
        resolve_data_file("splits/squad1-train.mrqa.jsonl.gz", resolve_data_dir(args.data))
    )
    examples = train_subset(list(pool.examples), args.steps * args.batch_size * 2, 0)
    features, _ = featurize(examples, tokenizer, feature_config(cfg))
    order = sorted_batches([len(f) for f in features], args.batch_size)[: args.steps]
    batches = [collate(features, idx) for idx in order]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step(batch) -> None:
        model(batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    step(batches[0])  # warm-up
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches:
            step(batch)
    seconds = time.perf_counter() - t0
    tokens = sum(b.input_ids.numel() for b in batches)  # padded: what the products compute
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
    print(table)
    events = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    total = sum(events.values())
    products = events.get("aten::mm", 0.0) + events.get("aten::addmm", 0.0)
    print(
        f"{args.steps} steps, {tokens} tokens (padded), {seconds:.2f} s "
        f"({seconds / args.steps:.2f} s a step, under the profiler); matrix products "
        f"{100 * products / total:.0f} % of operator time"
    )
    prov.write_stamped(
        "runs/profile-train",
        "train-step",
        seconds=seconds,
        tokens=tokens,
        share={k: v / total for k, v in sorted(events.items(), key=lambda kv: -kv[1])[:12]},
    )


if __name__ == "__main__":
    main()
