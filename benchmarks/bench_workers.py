"""One training process using every core vs one single-threaded worker per core.

    python benchmarks/bench_workers.py                 # 2 rounds, 16 timed steps per worker
    python benchmarks/bench_workers.py --head dyrex --steps 8 --rounds 1

``structqa experiment --threads 1`` lets several workers share a grid (one per core). This
measures whether that pays on this machine: the default encoder with ``--head``, built as
``structqa train`` builds it, trains (forward, backward, AdamW step; bf16 as ``--bf16``
resolves) on the first 48 windows (384/128) of ``splits/squad1-heldout`` in batches of 12,
cycling. Arm "one": one process with ``torch.set_num_threads(cores)``. Arm "workers": ``cores``
processes with one thread each, started together behind a barrier after their untimed warm-up
step. Throughput is windows per second summed over the processes; the arms alternate over
``--rounds`` rounds so that drift cancels out of the ratio. Needs an otherwise idle machine.
Results are also written as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import harness
import torch

from structqa.config import Config
from structqa.features.batching import collate
from structqa.models.build import build_model
from structqa.runtime import autocast, use_bf16
from structqa.training.optim import build_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_heads import load_slice  # noqa: E402

N_FEATURES = 48
BATCH = 12


def worker(
    threads: int, head: str, steps: int, bf16_setting: str, barrier: Any, queue: Any
) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    features = load_slice(N_FEATURES)
    cfg = Config()
    cfg.model.head = head
    model, _ = build_model(cfg)
    model.train()
    device = torch.device("cpu")
    bf16 = use_bf16(bf16_setting, device)
    optimizer = build_optimizer(model, cfg.train.lr, None, cfg.train.weight_decay)
    batches = [
        collate(features, list(range(i, min(i + BATCH, len(features)))))
        for i in range(0, len(features), BATCH)
    ]

    def step(i: int) -> None:
        with autocast(device, bf16):
            loss = model(batches[i % len(batches)]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step(0)  # untimed: creates AdamW's state
    barrier.wait()
    _, seconds = harness.timed(lambda: [step(i) for i in range(steps)])
    windows = sum(len(batches[i % len(batches)]) for i in range(steps))
    queue.put({"windows": windows, "seconds": seconds, "bf16": bf16})


def run_arm(processes: int, threads: int, args: argparse.Namespace) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes)
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(threads, args.head, args.steps, args.bf16, barrier, queue))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    reports = [queue.get() for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a worker exited with {p.exitcode}")
    # every process ran the same number of steps; the slowest one bounds the arm
    wall = max(r["seconds"] for r in reports)
    total = sum(r["windows"] for r in reports)
    return {
        "processes": processes,
        "threads_each": threads,
        "windows": total,
        "wall_s": round(wall, 3),
        "windows_per_s": round(total / wall, 3),
        "bf16": reports[0]["bf16"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", default="independent")
    parser.add_argument("--steps", type=int, default=16, help="timed steps per process")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--bf16", default="auto", choices=["auto", "on", "off"])
    parser.add_argument("--out", default="runs/bench_workers")
    args = parser.parse_args()
    prov = harness.Provenance.start(args, torch.device("cpu"))

    def report(i: int, arms: dict[str, list[dict[str, Any]]]) -> None:
        one, many = arms["one"][0], arms["workers"][0]
        print(
            f"round {i + 1}: one process x {args.cores} threads {one['windows_per_s']:.2f} "
            f"windows/s; {args.cores} workers x 1 thread {many['windows_per_s']:.2f} windows/s "
            f"in all; ratio {many['windows_per_s'] / one['windows_per_s']:.3f}",
            flush=True,
        )

    arms = {
        "one": lambda: run_arm(1, args.cores, args),
        "workers": lambda: run_arm(args.cores, 1, args),
    }
    runs = harness.alternate(arms, args.rounds, on_round=report)
    rounds = [
        {
            "one": one,
            "workers": many,
            "ratio": round(many["windows_per_s"] / one["windows_per_s"], 3),
        }
        for one, many in zip(runs["one"], runs["workers"], strict=True)
    ]
    ratios = [r["ratio"] for r in rounds]
    print(
        f"workers / one process, training throughput: {statistics.mean(ratios):.3f} "
        f"(rounds: {', '.join(f'{x:.3f}' for x in ratios)})"
    )
    path = prov.write_stamped(
        args.out,
        f"workers-{args.head}",
        rounds=rounds,
        mean_ratio=round(statistics.mean(ratios), 3),
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
