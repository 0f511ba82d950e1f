"""The encoder with structqa's CPU inference kernels against torch's stock operators, on the
same held-out windows, in one process (not a test).

The kernels (``structqa.attention.kernels``): oneDNN linear layers with the FFN's GELU fused,
and attention one batch row at a time with an fp32 softmax, in place of ``F.linear`` and
``F.scaled_dot_product_attention``. Both arms run the same weights in bf16 and in fp32,
alternating rounds (fast, stock, fast, stock, ...) so that drift in the machine's speed falls
on both; the medians give the ratio lines. Also prints the useful-token matrix rate against
the bf16 and fp32 matrix peaks measured at the start, and the largest difference between the
arms' encoder outputs.

    python benchmarks/bench_kernels.py CHECKPOINT [--questions 256] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import harness
import torch
from bench_runtimes import cpu_flags, encoder_flops, matmul_peak, paused

from structqa.attention.kernels import stock_kernels
from structqa.data import read_examples
from structqa.features.batching import collate, sorted_batches
from structqa.features.squad import featurize
from structqa.inference import bf16_weights
from structqa.paths import resolve_data_dir, resolve_data_file
from structqa.prediction.predictor import Predictor

HELDOUT = "splits/squad1-heldout.mrqa.jsonl.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--data", help="data dir (default ../shared/data or $STRUCTQA_DATA)")
    parser.add_argument("--questions", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pause-pids", help="file of PIDs to SIGSTOP while timing")
    parser.add_argument("--out", default="runs/bench_kernels")
    args = parser.parse_args()
    pids = []
    if args.pause_pids and Path(args.pause_pids).is_file():
        pids = [int(x) for x in Path(args.pause_pids).read_text().split() if x.isdigit()]
    prov = harness.Provenance.start(args, torch.device("cpu"))
    heldout = resolve_data_file(HELDOUT, resolve_data_dir(args.data))
    examples = list(read_examples(heldout).examples)[: args.questions]
    predictor = Predictor.from_checkpoint(args.checkpoint, runtime="torch-fp32")
    features, _ = featurize(examples, predictor.tokenizer, predictor.features)
    batches = [
        collate(features, i) for i in sorted_batches([len(f) for f in features], args.batch_size)
    ]
    models = {"bf16": bf16_weights(predictor.model), "fp32": predictor.model}
    cfg = predictor.model.encoder.config
    gflop = encoder_flops(features, cfg.hidden_size, cfg.intermediate_size, cfg.num_layers) / 1e9

    def arm(precision: str, stock: bool) -> Callable[[], float]:
        encoder = models[precision].encoder

        @torch.inference_mode()
        def run() -> float:
            t0 = time.perf_counter()
            if stock:
                with stock_kernels():
                    for b in batches:
                        encoder(b.input_ids, b.attention_mask, b.token_type_ids)
            else:
                for b in batches:
                    encoder(b.input_ids, b.attention_mask, b.token_type_ids)
            return time.perf_counter() - t0

        return run

    arms = {
        f"{'stock' if stock else 'kernels'}-{p}": arm(p, stock)
        for p in ("bf16", "fp32")
        for stock in (False, True)
    }
    with paused(pids):
        peaks = {"bf16": matmul_peak(torch.bfloat16), "fp32": matmul_peak(torch.float32)}
        times = harness.alternate(arms, args.rounds, warm_round=True)
        diffs = {}
        with torch.inference_mode():
            for p, model in models.items():
                b = batches[len(batches) // 2]
                fast = model.encoder(b.input_ids, b.attention_mask, b.token_type_ids)
                with stock_kernels():
                    slow = model.encoder(b.input_ids, b.attention_mask, b.token_type_ids)
                real = b.attention_mask.bool()
                diff = (fast.last_hidden_state - slow.last_hidden_state).float().abs()[real]
                diffs[p] = float(diff.max())
    print(
        f"{len(features)} windows of {len(examples)} held-out questions, {gflop:.0f} GFLOP of "
        f"useful-token matrix work; {torch.get_num_threads()} threads; CPU flags "
        f"{' '.join(cpu_flags())}"
    )
    print(f"matrix peak: bf16 {peaks['bf16']:.0f} GFLOP/s, fp32 {peaks['fp32']:.0f} GFLOP/s")
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{'arm':<14} {'windows/s':>10} {'GFLOP/s':>9} {'of peak':>8}  seconds (rounds)")
    for name, sec in medians.items():
        peak = peaks[name.rsplit("-", 1)[1]]
        runs = " ".join(f"{t:.3f}" for t in times[name])
        print(
            f"{name:<14} {len(features) / sec:>10.1f} {gflop / sec:>9.0f} "
            f"{gflop / sec / peak:>8.0%}  {runs}"
        )
    for p in ("bf16", "fp32"):
        print(f"largest |kernels - stock| of the encoder output, {p}: {diffs[p]:.2e}")
    ratios = {p: medians[f"stock-{p}"] / medians[f"kernels-{p}"] for p in ("bf16", "fp32")}
    for p, r in ratios.items():
        print(f"ratio kernels/stock {p}: {r:.2f}x")
    path = prov.write_stamped(
        args.out,
        "kernels",
        cpu_flags=cpu_flags(),
        paused_pids=pids,
        windows=len(features),
        useful_gflop=gflop,
        peaks_gflops=peaks,
        seconds=times,
        median_seconds=medians,
        max_abs_diff=diffs,
        ratios=ratios,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
