"""Is bf16 autocast worth it on this machine? fp32 vs bf16-autocast matrix products.

    python benchmarks/bench_bf16.py                 # 1 and all threads, 20 repeats each
    python benchmarks/bench_bf16.py --threads 1 --repeats 5
    python benchmarks/bench_bf16.py --train-step   # also whole training steps, both ways

Times ``x @ w`` for the feed-forward shape of the default encoder at a fine-tuning batch
(12 windows x 384 tokens, hidden 384 -> 1536), in fp32 and under
``torch.autocast("cpu", dtype=torch.bfloat16)``, alternating the two in rounds so that the
machine's drift cancels out of the ratio. Prints the CPU's vector ISA as torch reports it,
whether ``structqa.runtime.cpu_has_native_bf16`` sees AVX512-BF16/AMX, what
``--train.bf16=auto`` takes here, the median time of each and the ratio bf16 / fp32 (below 1:
bf16 is faster). On a CPU without native bf16 the products are emulated and the ratio is far
above 1, which is why ``auto`` stays in fp32 there; and a CPU with AVX512-BF16 but no AMX
may run them slower than fp32 (a Xeon whose AMX a virtual machine hides: bf16 / fp32 1.92
on 2 threads, 1.72 on 1, idle), so ``auto`` follows ``structqa.runtime.cpu_bf16_pays``, a
measurement of this product (2,048 tokens) made once per machine, not the flag alone.
"""

from __future__ import annotations

import argparse
import os

import harness
import torch

from structqa.runtime import cpu_bf16_pays, onednn_has_bf16


def measure(threads: int, repeats: int, rounds: int) -> dict[str, float]:
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(12 * 384, 384, generator=gen)
    w = torch.randn(384, 1536, generator=gen)

    def fp32() -> torch.Tensor:
        return x @ w

    def bf16() -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x @ w

    arms = {"fp32": harness.timing(fp32, repeats), "bf16": harness.timing(bf16, repeats)}
    times = harness.alternate(arms, rounds, warm_round=True)
    fm, bm = harness.median(times["fp32"]), harness.median(times["bf16"])
    return {"threads": threads, "fp32_ms": fm * 1e3, "bf16_ms": bm * 1e3, "ratio": bm / fm}


def train_steps(rounds: int) -> dict[str, float]:
    """Seconds per training step of the general reader's recipe (``structqa reader build``:
    forward, backward and optimiser, a batch of 12 windows of its training data's typical
    length), with ``train.bf16`` off and on, alternated; medians."""
    from pathlib import Path

    from structqa.paths import resolve_data_dir, resolve_data_file
    from structqa.reader.build import RECIPE, BuildOptions, seconds_per_step, train_config

    data = resolve_data_file("splits/squad1-train.mrqa.jsonl.gz", resolve_data_dir(None))
    out = Path("/tmp/structqa-bench-bf16")
    cfgs = {
        arm: train_config(BuildOptions(out, overrides=(f"train.bf16={flag}",)), RECIPE, data, "r")
        for arm, flag in (("fp32", "off"), ("bf16", "on"))
    }
    lengths: dict[str, int] = {}

    def arm(name: str):
        def run() -> float:
            seconds, lengths[name] = seconds_per_step(cfgs[name], repeats=3)
            return seconds

        return run

    times = harness.alternate({name: arm(name) for name in cfgs}, rounds)
    fm, bm = harness.median(times["fp32"]), harness.median(times["bf16"])
    return {"fp32_s": fm, "bf16_s": bm, "ratio": bm / fm, "tokens": lengths["fp32"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="*", default=None)
    parser.add_argument("--repeats", type=int, default=20, help="products per timing")
    parser.add_argument("--rounds", type=int, default=3, help="alternating fp32/bf16 rounds")
    parser.add_argument(
        "--train-step", action="store_true", help="also time whole training steps both ways"
    )
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args()
    prov = harness.Provenance.start(args, torch.device("cpu"))
    threads = args.threads or sorted({1, os.cpu_count() or 1})
    runs = [measure(t, args.repeats, args.rounds) for t in threads]
    machine = prov.machine
    print(
        f"CPU capability {machine['cpu_capability']}, native bf16 {machine['native_bf16']}, "
        f"bf16 auto means {'bf16' if cpu_bf16_pays() else 'fp32'} here"
    )
    for r in runs:
        print(
            f"{r['threads']} thread(s): fp32 {r['fp32_ms']:.1f} ms, bf16 autocast "
            f"{r['bf16_ms']:.1f} ms, bf16/fp32 {r['ratio']:.2f}"
        )
    step = None
    if args.train_step and not onednn_has_bf16():
        print("training step: not timed, oneDNN has no bf16 kernels here (bf16 is emulated)")
    elif args.train_step:
        step = train_steps(args.rounds)
    if step:
        print(
            f"training step ({torch.get_num_threads()} threads, 12 windows of {step['tokens']} "
            f"tokens): fp32 {step['fp32_s']:.2f} s, bf16 autocast {step['bf16_s']:.2f} s, "
            f"bf16/fp32 {step['ratio']:.2f}"
        )
    if args.out:
        prov.write(args.out, runs=runs, train_step=step)


if __name__ == "__main__":
    main()
