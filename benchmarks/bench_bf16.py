"""Is bf16 autocast worth it on this machine? fp32 vs bf16-autocast matrix products.

    python benchmarks/bench_bf16.py                 # 1 and all threads, 20 repeats each
    python benchmarks/bench_bf16.py --threads 1 --repeats 5

Times ``x @ w`` for the feed-forward shape of the default encoder at a fine-tuning batch
(12 windows x 384 tokens, hidden 384 -> 1536), in fp32 and under
``torch.autocast("cpu", dtype=torch.bfloat16)``, alternating the two in rounds so that the
machine's drift cancels out of the ratio. Prints the CPU's vector ISA as torch reports it,
whether ``structqa.runtime.cpu_has_native_bf16`` sees AVX512-BF16/AMX (which is what
``--train.bf16=auto`` follows), the median time of each and the ratio bf16 / fp32 (below 1:
bf16 is faster). On a CPU without native bf16 the products are emulated and the ratio is far
above 1, which is why ``auto`` stays in fp32 there.
"""

from __future__ import annotations

import argparse
import os

import harness
import torch


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="*", default=None)
    parser.add_argument("--repeats", type=int, default=20, help="products per timing")
    parser.add_argument("--rounds", type=int, default=3, help="alternating fp32/bf16 rounds")
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args()
    prov = harness.Provenance.start(args, torch.device("cpu"))
    threads = args.threads or sorted({1, os.cpu_count() or 1})
    runs = [measure(t, args.repeats, args.rounds) for t in threads]
    machine = prov.machine
    print(f"CPU capability {machine['cpu_capability']}, native bf16 {machine['native_bf16']}")
    for r in runs:
        print(
            f"{r['threads']} thread(s): fp32 {r['fp32_ms']:.1f} ms, bf16 autocast "
            f"{r['bf16_ms']:.1f} ms, bf16/fp32 {r['ratio']:.2f}"
        )
    if args.out:
        prov.write(args.out, runs=runs)


if __name__ == "__main__":
    main()
