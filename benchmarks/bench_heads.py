"""Span heads side by side: throughput and peak memory on the same batches (paper, Table 2).

    python benchmarks/bench_heads.py            # 96 held-out windows, batch 12, N up to 2048
    python benchmarks/bench_heads.py --quick    # 24 windows, N up to 512: checks that it runs
    python benchmarks/bench_heads.py --parts 3 --features 48   # interleaved inference only

Part 1, per head (independent, joint, dyrex, dyref, dyrex+joint, dyref+joint): the default
encoder with that head, built as ``structqa train`` builds it (``build_model``), trained for
one untimed step and then timed over every batch (forward, backward, AdamW step), then timed
at inference (forward + ``SpanCollector.add``, one untimed batch first), on the same fixed
slice of ``splits/squad1-heldout`` featurized 384/128, in order. bf16 follows
``runtime.use_bf16`` (``--bf16``, default auto). Ratios are against the independent head.

Part 3 (printed after part 1): inference again, all heads in one process, alternating head
by head over ``--rounds`` rounds, so that the machine's drift between minutes cancels out of the
ratios.

Part 2: the joint scorer alone (B=1, D=384, L=30, float32, forward + backward) in band and
full mode at N = 256/512/1024/2048 tokens: band memory grows linearly in N, full memory
quadratically.

Peak memory: growth over the measured part, in a separate untimed pass (the probe costs time).
On CUDA ``torch.cuda.max_memory_allocated``; on CPU, where PyTorch keeps no allocator
statistics, the glibc heap in use (``mallinfo2``) read after every operator through a dispatch
mode. Training memory is the growth over one step on the longest batch, after the warm-up step,
on top of the weights and AdamW state (see the parameter counts); inference memory is the
growth over one forward + decode of that batch. Each head runs in a fresh process. Results are also
written as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import harness
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from structqa.config import Config
from structqa.data import read_examples
from structqa.decoding import DecodeConfig, SpanCollector
from structqa.features.batching import Batch, collate
from structqa.features.squad import Feature, FeatureConfig, featurize
from structqa.heads.base import QueryStates
from structqa.heads.joint import joint_scorer
from structqa.models.build import build_model, load_tokenizer
from structqa.paths import default_encoder_path, resolve_data_dir
from structqa.runtime import autocast, use_bf16
from structqa.training.optim import build_optimizer

HEADS = ("independent", "joint", "dyrex", "dyref", "dyrex+joint", "dyref+joint")
HELDOUT = "splits/squad1-heldout.mrqa.jsonl.gz"
MB = 2**20


# ---- memory ------------------------------------------------------------------------------


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
        )
    ]


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _MallInfo2


def heap_bytes() -> int:
    """Bytes in use from glibc malloc (heap + mmapped chunks): where CPU tensors live."""
    info = _libc.mallinfo2()
    return info.uordblks + info.hblkhd


class _HeapSampler(TorchDispatchMode):
    """Reads the heap after every operator (forward, backward, optimizer): tensors are freed
    between operators, so the peak is right after one returns."""

    def __init__(self) -> None:
        super().__init__()
        self.peak = heap_bytes()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, heap_bytes())
        return out


class PeakMemory:
    """Peak memory growth over a block: the CUDA allocator's peak, or on CPU the glibc heap
    sampled after every operator (temporaries inside one operator are not seen)."""

    def __init__(self, device: torch.device):
        self.device, self.peak = device, 0

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
        else:
            self._base = heap_bytes()
            self._sampler = _HeapSampler().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self._base
        else:
            self._sampler.__exit__(*exc)
            self.peak = max(self._sampler.peak, heap_bytes()) - self._base


def peak_growth(step, device: torch.device) -> float:
    """Peak memory growth of ``step()`` in MB, measured twice and the second kept: the first
    pass through the dispatch mode also allocates its own per-operator bookkeeping."""
    for _ in range(2):
        with PeakMemory(device) as mem:
            step()
    return mem.peak / MB


# ---- part 1: one head (runs in its own process) ------------------------------------------


def bench_head(name: str, features: list[Feature], batch_size: int, bf16_setting: str) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bf16 = use_bf16(bf16_setting, device)
    torch.manual_seed(0)
    cfg = Config()
    cfg.model.head = name
    model, _ = build_model(cfg)
    model.to(device)
    n_head = sum(p.numel() for p in model.head.parameters())
    optimizer = build_optimizer(model, cfg.train.lr, None, cfg.train.weight_decay)
    batches = [
        collate(features, list(range(i, min(i + batch_size, len(features))))).to(device)
        for i in range(0, len(features), batch_size)
    ]
    longest = max(range(len(batches)), key=lambda i: batches[i].input_ids.numel())

    def train_step(batch: Batch) -> float:
        with autocast(device, bf16):
            loss = model(batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    model.train()
    first_loss = train_step(batches[0])  # untimed: creates AdamW's state
    train_s = harness.timing(lambda: [train_step(b) for b in batches], device=device)()
    train_mb = peak_growth(lambda: train_step(batches[longest]), device)

    model.eval()
    collector = SpanCollector(DecodeConfig.from_settings(cfg.decode))

    def infer(batch: Batch) -> None:
        with autocast(device, bf16):
            out = model(batch)
        collector.add(out, batch.feature_index, batch.answer_mask)

    with torch.inference_mode():
        infer(batches[0])  # untimed
        infer_s = harness.timing(lambda: [infer(b) for b in batches], device=device)()
        infer_mb = peak_growth(lambda: infer(batches[longest]), device)
    return {
        "head": name,
        "head_params": n_head,
        "first_loss": first_loss,
        "train_samples_per_s": len(features) / train_s,
        "infer_samples_per_s": len(features) / infer_s,
        "train_peak_mb": train_mb,
        "infer_peak_mb": infer_mb,
        "bf16": bf16,
        "device": str(device),
    }


def interleaved_inference(
    names: list[str], features: list[Feature], batch_size: int, bf16_setting: str, rounds: int
) -> dict[str, dict[str, Any]]:
    """Part 3: every head's inference (forward + ``SpanCollector.add``) timed in one process,
    round-robin over ``rounds`` rounds; samples/s from each head's median round.

    Part 1 times the heads one after another in separate processes, minutes apart, and this
    VM's speed drifts between minutes; alternating the heads puts every ratio under the
    same conditions. (Untrained heads: inference cost does not depend on the weights.)"""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bf16 = use_bf16(bf16_setting, device)
    batches = [
        collate(features, list(range(i, min(i + batch_size, len(features))))).to(device)
        for i in range(0, len(features), batch_size)
    ]
    models = {}
    for name in names:
        torch.manual_seed(0)
        cfg = Config()
        cfg.model.head = name
        model, _ = build_model(cfg)
        models[name] = (
            model.to(device).eval(),
            DecodeConfig.from_settings(cfg.decode),
        )

    def infer(model: torch.nn.Module, decode: DecodeConfig) -> None:
        collector = SpanCollector(decode)
        for batch in batches:
            with autocast(device, bf16):
                out = model(batch)
            collector.add(out, batch.feature_index, batch.answer_mask)

    arms = {
        name: harness.timing(lambda m=model, d=decode: infer(m, d), device=device)
        for name, (model, decode) in models.items()
    }
    with torch.inference_mode():
        times = harness.alternate(arms, rounds, warm_round=True)
    return {
        name: {"infer_samples_per_s": len(features) / harness.median(t), "runs_seconds": t}
        for name, t in times.items()
    }


# ---- part 2: the joint scorer alone ------------------------------------------------------


def scorer_inputs(n: int, d: int, device: torch.device) -> tuple[QueryStates, Batch]:
    g = torch.Generator().manual_seed(0)
    states = QueryStates(
        torch.randn(1, 2, d, generator=g).to(device).requires_grad_(),
        torch.randn(1, n, d, generator=g).to(device).requires_grad_(),
    )
    passage = torch.ones(1, n, dtype=torch.bool)
    passage[0, 1:17] = False  # a 16-token question after [CLS]
    ones = torch.ones(1, n, dtype=torch.long)
    batch = Batch(
        input_ids=ones,
        attention_mask=ones,
        token_type_ids=ones,
        answer_mask=passage,
        start_positions=torch.tensor([n // 2]),
        end_positions=torch.tensor([n // 2 + 5]),
        feature_index=torch.tensor([0]),
    )
    return states, batch.to(device)


def bench_scorer(mode: str, n: int, d: int = 384, max_len: int = 30) -> dict:
    """Forward + backward of one joint scorer on random states: milliseconds, peak MB."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    scorer = joint_scorer(d, max_len, mode).to(device)
    with torch.no_grad():
        scorer.W.normal_(0.0, 0.02)
    states, batch = scorer_inputs(n, d, device)
    scorer(states, batch).loss.backward()  # warm-up
    ms = harness.timing(lambda: scorer(states, batch).loss.backward(), 3, device)() * 1000

    def step() -> None:
        states.queries.grad = states.tokens.grad = scorer.W.grad = None
        scorer(states, batch).loss.backward()

    return {"mode": mode, "n": n, "peak_mb": peak_growth(step, device), "ms": ms}


# ---- driver ------------------------------------------------------------------------------


def load_slice(n_features: int) -> list[Feature]:
    """The first ``n_features`` windows (384/128) of the held-out questions, in file order."""
    examples = list(read_examples(resolve_data_dir(None) / HELDOUT).examples)
    tokenizer = load_tokenizer(default_encoder_path())
    features: list[Feature] = []
    taken = 0
    while len(features) < n_features and taken < len(examples):
        chunk = examples[taken : taken + 64]
        feats, _ = featurize(chunk, tokenizer, FeatureConfig(384, 128))
        # example_index is relative to the chunk; only windows matter for throughput
        features.extend(feats)
        taken += len(chunk)
    return features[:n_features]


def in_subprocess(args: list[str]) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="24 windows, N up to 512")
    p.add_argument("--features", type=int, default=None, help="windows (default 96, quick 24)")
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--bf16", default="auto", help="auto | on | off (runtime.use_bf16)")
    p.add_argument("--heads", default=",".join(HEADS))
    p.add_argument("--sizes", default=None, help="scorer N values (default 256,512,1024,2048)")
    p.add_argument("--out", default="runs/bench_heads")
    p.add_argument("--threads", type=int, default=None, help="torch threads in every worker")
    p.add_argument("--rounds", type=int, default=5, help="part 3: interleaved inference rounds")
    p.add_argument(
        "--parts",
        default="1,2,3",
        help="which parts to run (1: per-head processes, 2: joint scorer memory, 3: interleaved "
        "inference), e.g. --parts 3",
    )
    p.add_argument("--worker-head", help=argparse.SUPPRESS)
    p.add_argument("--features-file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    prov = harness.Provenance.start(args)
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.worker_head:
        features = pickle.loads(Path(args.features_file).read_bytes())
        print(json.dumps(bench_head(args.worker_head, features, args.batch_size, args.bf16)))
        return 0

    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    if not parts or parts - {"1", "2", "3"}:
        p.error(f"--parts: choose from 1, 2, 3 (got {args.parts!r})")
    n_features = args.features or (24 if args.quick else 96)
    default_sizes = "256,512" if args.quick else "256,512,1024,2048"
    sizes = [int(x) for x in (args.sizes or default_sizes).split(",")]
    threads = ["--threads", str(args.threads)] if args.threads else []
    common = ["--batch-size", str(args.batch_size), "--bf16", args.bf16, *threads]
    features = load_slice(n_features)
    tokens = sum(len(f) for f in features)
    print(f"{len(features)} windows ({tokens} tokens), batch {args.batch_size}, bf16 {args.bf16}")

    heads: list[dict[str, Any]] = []
    if "1" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            feats_file = Path(tmp) / "features.pkl"
            feats_file.write_bytes(pickle.dumps(features))
            for name in args.heads.split(","):
                heads.append(
                    in_subprocess(
                        ["--worker-head", name, "--features-file", str(feats_file), *common]
                    )
                )
        base = heads[0]
        print(f"\ndevice {base['device']}, bf16 in use: {base['bf16']}")
        print(
            f"{'head':<13}{'params':>9}{'train/s':>9}{'ratio':>7}{'infer/s':>9}{'ratio':>7}"
            f"{'train MB':>10}{'ratio':>7}{'infer MB':>10}{'loss0':>8}"
        )
        for r in heads:
            print(
                f"{r['head']:<13}{r['head_params']:>9}"
                f"{r['train_samples_per_s']:>9.2f}"
                f"{harness.ratio(r['train_samples_per_s'], base['train_samples_per_s']):>7}"
                f"{r['infer_samples_per_s']:>9.2f}"
                f"{harness.ratio(r['infer_samples_per_s'], base['infer_samples_per_s']):>7}"
                f"{r['train_peak_mb']:>10.1f}"
                f"{harness.ratio(r['train_peak_mb'], base['train_peak_mb']):>7}"
                f"{r['infer_peak_mb']:>10.1f}{r['first_loss']:>8.2f}"
            )

    names = args.heads.split(",")
    inter: dict[str, Any] = {}
    if "3" in parts:
        inter = interleaved_inference(names, features, args.batch_size, args.bf16, args.rounds)
        base_inter = inter[names[0]]["infer_samples_per_s"]
        print(f"\ninference, heads interleaved in one process ({args.rounds} rounds, median)")
        print(f"{'head':<13}{'infer/s':>9}{'ratio':>7}")
        for name in names:
            rate = inter[name]["infer_samples_per_s"]
            print(f"{name:<13}{rate:>9.2f}{harness.ratio(rate, base_inter):>7}")

    scorer: list[dict[str, Any]] = []
    if "2" in parts:
        scorer = [bench_scorer(mode, n) for n in sizes for mode in ("band", "full")]
        print("\njoint scorer alone, forward + backward (B=1, D=384, L=30, float32)")
        print(
            f"{'N':>6}{'band MB':>10}{'band ms':>9}{'full MB':>10}{'full ms':>9}{'full/band':>11}"
        )
        for n in sizes:
            band = next(r for r in scorer if r["n"] == n and r["mode"] == "band")
            full = next(r for r in scorer if r["n"] == n and r["mode"] == "full")
            print(
                f"{n:>6}{band['peak_mb']:>10.1f}{band['ms']:>9.1f}{full['peak_mb']:>10.1f}"
                f"{full['ms']:>9.1f}{harness.ratio(full['peak_mb'], band['peak_mb']):>11}"
            )

    kind = (
        "quick"
        if args.quick
        else "full"
        if parts == {"1", "2", "3"}
        else "parts" + "".join(sorted(parts))
    )
    path = prov.write_stamped(
        args.out,
        kind,
        features=len(features),
        tokens=tokens,
        batch_size=args.batch_size,
        heads=heads,
        interleaved_inference=inter,
        scorer=scorer,
    )
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
