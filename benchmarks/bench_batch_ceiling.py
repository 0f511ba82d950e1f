"""How much can batching windows across requests gain on this machine? The model alone, in one
process, on held-out windows, without HTTP, tokenization or decoding (not a test).

Times the checkpoint's forward pass (encoder + head, the runtime the server would pick) over
the same held-out windows three ways, in alternating rounds:

- ``one``: one window per forward pass, as a server that scores one request at a time does
  for single-window requests (padded to a multiple of ``SHAPE_MULTIPLE`` tokens, as the
  server pads);
- ``server``: the windows in the order requests would bring them (random), ``--batch`` at a
  time, each batch sorted and cut into length groups exactly as ``structqa serve``'s
  micro-batcher does (``structqa.serving.batcher.length_groups``, and padded as it pads);
- ``arrival``: the same random batches of ``--batch`` windows, each one forward pass as it
  comes, as the server runs them when the model packs its windows (torch on the CPU: the
  encoder computes only the real tokens, so padding costs nothing; ``padded/real`` below is
  the batch tensors' padding, which such a model does not compute);
- ``sorted``: all windows sorted by length, in passes of ``--batch``: the best an offline
  evaluation can do.

``ratio server/one`` is what batching adds to the model's own throughput on this CPU when
requests arrive ``--batch`` at a time, ``ratio sorted/one`` the same with perfectly sorted
full batches. A server's throughput ratio also depends on the per-request work around the model
(HTTP, tokenization, decoding), which a one-request-at-a-time server does in series with it.

    python benchmarks/bench_batch_ceiling.py CHECKPOINT [--windows 240] [--batch 16]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence

import harness
import torch
from bench_runtimes import cpu_flags

from structqa.data import read_examples
from structqa.features.batching import Batch, collate
from structqa.features.squad import featurize
from structqa.paths import resolve_data_dir, resolve_data_file
from structqa.prediction.predictor import Predictor
from structqa.runtime import autocast
from structqa.serving.batcher import SHAPE_MULTIPLE, length_groups

HELDOUT = "splits/squad1-heldout.mrqa.jsonl.gz"


def passes(features: Sequence, groups: list[list[int]], multiple: int = 1) -> list[Batch]:
    return [collate(features, idx, pad_to_multiple=multiple) for idx in groups]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--runtime", default="auto")
    parser.add_argument("--data", help="data dir (default ../shared/data or $STRUCTQA_DATA)")
    parser.add_argument("--windows", type=int, default=240)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/bench_batch_ceiling")
    args = parser.parse_args()
    prov = harness.Provenance.start(args, torch.device("cpu"))
    heldout = resolve_data_file(HELDOUT, resolve_data_dir(args.data))
    examples = list(read_examples(heldout).examples)[: args.windows * 2]
    predictor = Predictor.from_checkpoint(args.checkpoint, runtime=args.runtime)
    features, _ = featurize(examples, predictor.tokenizer, predictor.features)
    rng = random.Random(args.seed)
    chosen = rng.sample(range(len(features)), min(args.windows, len(features)))
    lengths = {i: len(features[i]) for i in chosen}

    server_groups: list[list[int]] = []
    for start in range(0, len(chosen), args.batch):
        batch = sorted(chosen[start : start + args.batch], key=lambda i: -lengths[i])
        cuts = length_groups([lengths[i] for i in batch])
        server_groups += [batch[lo:hi] for lo, hi in cuts]
    by_length = sorted(chosen, key=lambda i: -lengths[i])
    plans = {
        "one": passes(features, [[i] for i in chosen], SHAPE_MULTIPLE),
        "server": passes(features, server_groups, SHAPE_MULTIPLE),
        "arrival": passes(
            features,
            [chosen[s : s + args.batch] for s in range(0, len(chosen), args.batch)],
            SHAPE_MULTIPLE,
        ),
        "sorted": passes(
            features,
            [by_length[s : s + args.batch] for s in range(0, len(by_length), args.batch)],
        ),
    }
    model = predictor.model

    def arm(batches: list[Batch]) -> Callable[[], float]:
        @torch.inference_mode()
        def run() -> float:
            t0 = time.perf_counter()
            with autocast(predictor.device, predictor.bf16):
                for b in batches:
                    model(b.to(predictor.device))
            return time.perf_counter() - t0

        return run

    times = harness.alternate({k: arm(v) for k, v in plans.items()}, args.rounds, warm_round=True)
    n = len(chosen)
    real = sum(lengths.values())
    print(
        f"{n} held-out windows ({real / n:.0f} tokens on average), runtime {predictor.runtime}, "
        f"{torch.get_num_threads()} threads, CPU flags {' '.join(cpu_flags())}"
    )
    rates = {}
    for name, sec in times.items():
        med = statistics.median(sec)
        rates[name] = n / med
        padded = sum(b.input_ids.numel() for b in plans[name])
        print(
            f"{name:<7} {len(plans[name]):>4} passes  padded/real {padded / real:.2f}  "
            f"{rates[name]:7.1f} windows/s  ({' '.join(f'{s:.2f}' for s in sec)} s)"
        )
    print(f"ratio server/one: {rates['server'] / rates['one']:.2f}x")
    print(f"ratio arrival/one: {rates['arrival'] / rates['one']:.2f}x")
    print(f"ratio sorted/one: {rates['sorted'] / rates['one']:.2f}x")
    print(f"model packs its windows: {predictor.packs_windows}")
    path = prov.write_stamped(
        args.out,
        "ceiling",
        cpu_flags=cpu_flags(),
        runtime=predictor.runtime,
        windows=n,
        passes={k: len(v) for k, v in plans.items()},
        seconds=times,
        windows_per_s=rates,
        packs_windows=predictor.packs_windows,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
