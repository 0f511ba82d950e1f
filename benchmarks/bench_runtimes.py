"""structqa's runtimes on the same held-out windows, in one process: torch fp32 / bf16 and
ONNX fp32 / int8, end to end, against the bare encoder forward.

    python benchmarks/bench_runtimes.py                       # both quickstart checkpoints
    python benchmarks/bench_runtimes.py --models dyrex --timed-questions 128 --repeats 3
    python benchmarks/bench_runtimes.py --pause-pids FILE     # SIGSTOP those PIDs while timing
    python benchmarks/bench_runtimes.py --runs torch-fp32 onnx-int8 onnx-int8-fp32-embeddings \
        onnx-int8-int8-embeddings

For each checkpoint (Independent and DyREx, trained with the quickstart recipe):

- the export (``structqa export --quantize int8``), timed, and its file sizes;
- the bare encoder forward in bf16 and fp32 (the collated windows through ``model.encoder``
  only, bf16 weights as inference uses them);
- end to end, raw (question, context) -> answers through ``Predictor.predict_examples``
  (featurize, batch, forward, decode) for torch-fp32, torch-bf16, onnx-fp32 and onnx-int8;
- onnx-int8 with activations quantized per token (the export's graph) and, beside it,
  onnxruntime's per-tensor graph of earlier exports, run in whole batches per call
  (``onnx-int8-per-tensor``: a window's answer depends on the windows beside it) and one
  window per call (``onnx-int8-per-tensor-per-window``, how structqa runs such an export);
- onnx-int8 with the word-embedding table as exports made before it was fp16 held it (fp32,
  ``onnx-int8-fp32-embeddings``) and in int8 with a scale per row
  (``onnx-int8-int8-embeddings``);
- the held-out F1 of each runtime (``--f1-questions``, default every held-out question) and
  the share of answers identical to torch fp32's.

Timings are the median of ``--repeats`` rounds; in each round every measurement runs once, in
turn, so that drift in the machine's load falls on all of them alike. The useful-token rate
counts the encoder's matrix FLOPs on non-padding tokens only (2 N (4 D^2 + 2 D F) + 4 N^2 D per
layer and window of N tokens) against the bf16 and fp32 matrix peaks measured at the start of
the run. Prints a table, the ratio lines and writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

from structqa.attention.kernels import stock_kernels  # noqa: E402
from structqa.data import read_examples  # noqa: E402
from structqa.data.records import Example  # noqa: E402
from structqa.features.batching import Batch, collate, sorted_batches  # noqa: E402
from structqa.features.squad import Feature, featurize  # noqa: E402
from structqa.inference import bf16_weights  # noqa: E402
from structqa.manifest import write_manifest  # noqa: E402
from structqa.metrics.squad import squad_v1  # noqa: E402
from structqa.paths import resolve_data_dir, resolve_data_file  # noqa: E402
from structqa.prediction.predictor import Predictor  # noqa: E402
from structqa.runtimes.onnx_export import export_onnx  # noqa: E402
from structqa.runtimes.quantize import quantize_int8  # noqa: E402

log = logging.getLogger("bench_runtimes")

HELDOUT = "splits/squad1-heldout.mrqa.jsonl.gz"
RUNTIMES = ("torch-fp32", "torch-bf16", "onnx-fp32", "onnx-int8")
# the export's int8 graph with its word-embedding table in fp32 (exports before it was fp16)
# and in int8 with a scale per row
FP32_TABLE, INT8_TABLE = "onnx-int8-fp32-embeddings", "onnx-int8-int8-embeddings"
TABLES = {FP32_TABLE: "fp32", INT8_TABLE: "int8"}
RUNS = (
    "bare-bf16",
    "bare-fp32",
    *RUNTIMES,
    "onnx-int8-per-tensor",
    "onnx-int8-per-tensor-per-window",
    FP32_TABLE,
    INT8_TABLE,
    "torch-fp32-stock",
)
# (label, wall or CPU time, A, B, unit): printed where both ran
RATIOS = (
    ("int8/fp32", "wall", "onnx-int8", "torch-fp32", "x"),
    ("int8/fp32-stock", "wall", "onnx-int8", "torch-fp32-stock", "x"),
    ("fp32/fp32-stock (the CPU kernels)", "wall", "torch-fp32", "torch-fp32-stock", "x"),
    ("int8/bf16", "wall", "onnx-int8", "torch-bf16", "x"),
    ("int8 per-token / per-tensor", "wall", "onnx-int8", "onnx-int8-per-tensor", "x"),
    (
        "int8 per-tensor, one window per call / whole batches",
        "wall",
        "onnx-int8-per-tensor-per-window",
        "onnx-int8-per-tensor",
        "x",
    ),
    ("int8, fp16 embeddings / fp32 embeddings", "wall", "onnx-int8", FP32_TABLE, "x"),
    ("int8, int8 embeddings / fp32 embeddings", "wall", INT8_TABLE, FP32_TABLE, "x"),
    ("onnx-fp32/torch-fp32", "wall", "onnx-fp32", "torch-fp32", "x"),
    ("end-to-end/bare-bf16", "wall", "torch-bf16", "bare-bf16", ""),
    ("end-to-end/bare-fp32", "wall", "torch-fp32", "bare-fp32", ""),
    ("end-to-end/bare-bf16, CPU time", "cpu", "torch-bf16", "bare-bf16", ""),
    ("int8/fp32, CPU time", "cpu", "onnx-int8", "torch-fp32", "x"),
)
DEFAULT_MODELS = {
    "independent": "/work/ckpt/qs-indep/best",
    "dyrex": "/work/ckpt/qs-dyrex/best",
}


# ---- the machine -----------------------------------------------------------------------------


def cpu_flags() -> list[str]:
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if "flags" in ln), [])
    return [f for f in wanted if f in flags]


def matmul_peak(dtype: torch.dtype, size: int = 1536, seconds: float = 2.0) -> float:
    """GFLOP/s of square ``dtype`` matrix products at torch's thread count: the best of ~2 s
    of ``a @ b`` and, where torch has it, of oneDNN's linear (which the encoder's CPU kernels
    use; on AMD CPUs MKL's fp32 ``a @ b`` runs at about half oneDNN's speed). oneDNN has no
    bf16 linear on a CPU without AVX512 (it refuses to build one): there ``a @ b`` alone."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    products: list[Callable[[], object]] = [lambda: a @ b]
    if hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        products.append(lambda: torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], ""))
    best = 0.0
    for product in products:
        try:
            product()
        except RuntimeError:  # (oneDNN: "could not create a primitive descriptor")
            continue
        start = time.perf_counter()
        while time.perf_counter() - start < seconds / len(products):
            t0 = time.perf_counter()
            product()
            best = max(best, 2 * size**3 / (time.perf_counter() - t0) / 1e9)
    return best


@contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    """SIGSTOP ``pids`` for the block, SIGCONT after, also on errors and SIGINT/SIGTERM."""

    def resume(*_: object) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(signum: int, frame: Any) -> None:
        resume()
        raise KeyboardInterrupt

    for s in previous:
        signal.signal(s, on_signal)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    try:
        yield
    finally:
        resume()
        for s, handler in previous.items():
            signal.signal(s, handler)


# ---- what is measured ------------------------------------------------------------------------


def encoder_flops(features: list[Feature], hidden: int, ffn: int, layers: int) -> float:
    """Matrix FLOPs of the encoder on the windows' real tokens (no padding)."""
    total = 0.0
    for f in features:
        n = len(f)
        total += layers * (2 * n * (4 * hidden * hidden + 2 * hidden * ffn) + 4 * n * n * hidden)
    return total


def bare_encoder(model: torch.nn.Module, batches: list[Batch], bf16: bool) -> Callable[[], None]:
    encoder = (bf16_weights(model) if bf16 else model).encoder

    @torch.inference_mode()
    def run() -> None:
        for b in batches:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                encoder(b.input_ids, b.attention_mask, b.token_type_ids)

    return run


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call. On a shared machine CPU time is the
    steadier measure of the work done (it still counts OpenMP threads spinning while they
    wait)."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def f1_of(predictor: Predictor, examples: list[Example]) -> tuple[float, dict[str, str]]:
    preds = predictor.predict_examples(examples)
    answers = {ex.id: preds[ex.id].text if ex.id in preds else "" for ex in examples}
    gold = {ex.id: list(ex.gold_texts) for ex in examples}
    return squad_v1(gold, answers)["f1"], answers


def bench_model(
    name: str,
    checkpoint: Path,
    export_dir: Path,
    timed_examples: list[Example],
    f1_examples: list[Example],
    args: argparse.Namespace,
    pids: list[int],
) -> dict[str, Any]:
    meta_file = export_dir / "structqa_export.json"
    if not meta_file.is_file() or args.re_export:
        with paused(pids):
            export_onnx(checkpoint, export_dir, quantize="int8")
    meta = json.loads(meta_file.read_text())
    wanted = set(args.runs) | {"torch-fp32"}  # (the reference of the answers and the model)
    predictors = {
        r: Predictor.from_checkpoint(checkpoint if r.startswith("torch") else export_dir, runtime=r)
        for r in RUNTIMES
        if r in wanted
    }
    old = variant_export(export_dir, "per-tensor", "fp32")
    for key, per_window in (
        ("onnx-int8-per-tensor", False),
        ("onnx-int8-per-tensor-per-window", True),
    ):
        if key in wanted:
            predictors[key] = Predictor.from_checkpoint(old, runtime="onnx-int8")
            predictors[key].model.per_window = per_window
    tables = {key: variant_export(export_dir, "per-token", kind) for key, kind in TABLES.items()}
    for key, directory in tables.items():
        if key in wanted:
            predictors[key] = Predictor.from_checkpoint(directory, runtime="onnx-int8")
    torch_model = predictors["torch-fp32"].model
    features, _ = featurize(
        timed_examples, predictors["torch-fp32"].tokenizer, predictors["torch-fp32"].features
    )
    order = sorted_batches([len(f) for f in features], args.batch_size)
    batches = [collate(features, idx) for idx in order]
    for p in predictors.values():
        p.batch_size = args.batch_size
    every: dict[str, Callable[[], Any]] = {
        "bare-bf16": bare_encoder(torch_model, batches, True),
        "bare-fp32": bare_encoder(torch_model, batches, False),
        **{r: (lambda p=p: p.predict_examples(timed_examples)) for r, p in predictors.items()},
        # torch fp32 on torch's stock operators, as before structqa's CPU kernels
        "torch-fp32-stock": lambda: stock_predict(predictors["torch-fp32"], timed_examples),
    }
    runs = {k: fn for k, fn in every.items() if k in wanted}
    for fn in runs.values():  # warm-up: first calls allocate and pick kernels
        fn()
    seconds: dict[str, list[float]] = {k: [] for k in runs}
    cpu_seconds: dict[str, list[float]] = {k: [] for k in runs}
    with paused(pids):
        for _ in range(args.repeats):
            for key, fn in runs.items():
                wall, cpu = timed(fn)
                seconds[key].append(wall)
                cpu_seconds[key].append(cpu)
    enc = torch_model.encoder.config
    flops = encoder_flops(features, enc.hidden_size, enc.intermediate_size, enc.num_layers)
    windows = len(features)
    result: dict[str, Any] = {
        "checkpoint": str(checkpoint),
        "export": {
            "dir": str(export_dir),
            "seconds": meta["export_seconds"],
            "bytes": {p: f["bytes"] for p, f in meta["files"].items()}
            | {
                f"int8-{TABLES[key]}-embeddings": (d / "model.int8.onnx").stat().st_size
                for key, d in tables.items()
            },
            "max_abs_diff": meta["check"]["max_abs_diff"],
        },
        "windows": windows,
        "real_tokens": sum(len(f) for f in features),
        "padded_tokens": sum(b.input_ids.numel() for b in batches),
        "encoder_gflop": flops / 1e9,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "windows_per_cpu_s": {k: windows / statistics.median(v) for k, v in cpu_seconds.items()},
        "windows_per_s": {k: windows / statistics.median(v) for k, v in seconds.items()},
        "useful_gflops": {k: flops / statistics.median(v) / 1e9 for k, v in seconds.items()},
    }
    if f1_examples:
        reference: dict[str, str] = {}
        result["f1"], result["same_answers_as_torch_fp32"] = {}, {}
        for r in predictors:
            f1, answers = f1_of(predictors[r], f1_examples)
            result["f1"][r] = f1
            if r == "torch-fp32":
                reference = answers
            same = sum(answers[k] == reference[k] for k in reference) / len(reference)
            result["same_answers_as_torch_fp32"][r] = same
    result["alone_vs_batched"] = {
        r: alone_vs_batched(predictors[r], timed_examples, args.batch_size)
        for r in (
            "torch-bf16",
            "onnx-int8",
            "onnx-int8-per-tensor",
            "onnx-int8-per-tensor-per-window",
            FP32_TABLE,
            INT8_TABLE,
        )
        if r in predictors
    }
    return result


def alone_vs_batched(predictor: Predictor, examples: list[Example], batch_size: int) -> dict:
    """The share of questions whose answer, and whose null odds to the bit, are the same asked
    one window per batch as in batches of ``batch_size`` (what a micro-batching server mixes)."""
    predictor.batch_size = batch_size
    together = predictor.predict_examples(examples)
    predictor.batch_size = 1
    alone = predictor.predict_examples(examples)
    predictor.batch_size = batch_size
    ids = list(together)
    return {
        "same_answer": sum(together[k].text == alone[k].text for k in ids) / len(ids),
        "same_null_odds": sum(together[k].null_odds == alone[k].null_odds for k in ids) / len(ids),
    }


def variant_export(export_dir: Path, activations: str, embeddings: str) -> Path:
    """A copy of ``export_dir`` whose int8 graph is quantized otherwise: activations per
    tensor with an fp32 word-embedding table (exports before per-token activations), or per
    token with the table in ``embeddings`` (fp32: exports before the fp16 table). Written
    once, beside it."""
    suffix = "-per-tensor" if activations == "per-tensor" else f"-{embeddings}-embeddings"
    old = export_dir.with_name(export_dir.name + suffix)
    if not (old / "structqa_export.json").is_file():
        tmp = old.with_name(old.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(export_dir, tmp)
        quantize_int8(tmp / "model.onnx", tmp / "model.int8.onnx", activations, embeddings)
        meta = json.loads((tmp / "structqa_export.json").read_text())
        meta["files"]["int8"]["embeddings"] = embeddings
        if activations == "per-tensor":
            meta["files"]["int8"].pop("activations", None)
        meta["files"]["int8"]["bytes"] = (tmp / "model.int8.onnx").stat().st_size
        (tmp / "structqa_export.json").write_text(json.dumps(meta, indent=1))
        write_manifest(tmp)
        tmp.rename(old)
    return old


def stock_predict(predictor: Predictor, examples: list[Example]) -> Any:
    with stock_kernels():
        return predictor.predict_examples(examples)


def report(name: str, r: dict[str, Any], peaks: dict[str, float]) -> None:
    w, g = r["windows_per_s"], r["useful_gflops"]
    print(
        f"\n== {name}: {r['windows']} windows, {r['real_tokens']} real of "
        f"{r['padded_tokens']} padded tokens, encoder {r['encoder_gflop']:.0f} GFLOP"
    )
    e = r["export"]
    sizes = ", ".join(f"{p} {b / 1e6:.1f} MB" for p, b in e["bytes"].items())
    print(f"export: {e['seconds']:.1f} s, {sizes}")
    print(f"{'run':<32} {'windows/s':>10} {'GFLOP/s':>9} {'F1':>7} {'same':>6}")
    for k in w:
        f1 = r.get("f1", {}).get(k)
        same = r.get("same_answers_as_torch_fp32", {}).get(k)
        print(
            f"{k:<32} {w[k]:>10.1f} {g[k]:>9.1f} "
            f"{'' if f1 is None else f'{f1:.2f}':>7} {'' if same is None else f'{same:.3f}':>6}"
        )
    if "torch-bf16" in g:
        print(
            f"useful-token rate, torch bf16 end to end: {g['torch-bf16']:.0f} GFLOP/s = "
            f"{g['torch-bf16'] / peaks['bf16']:.0%} of the bf16 matrix peak ({peaks['bf16']:.0f})"
        )
    c = r["windows_per_cpu_s"]
    for label, rates, a, b, unit in RATIOS:
        rate = {"wall": w, "cpu": c}[rates]
        if a in rate and b in rate:
            print(f"ratio {label}: {rate[a] / rate[b]:.2f}{unit}")
    f1 = r.get("f1", {})
    for a, b in (
        ("onnx-int8", "torch-fp32"),
        (FP32_TABLE, "torch-fp32"),
        (INT8_TABLE, "torch-fp32"),
    ):
        if a in f1 and b in f1:
            print(f"F1 {a} - {b}: {f1[a] - f1[b]:+.2f}")
    for k, v in r["alone_vs_batched"].items():
        print(
            f"{k}: alone and batched, same answer {v['same_answer']:.3f}, "
            f"same null odds {v['same_null_odds']:.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--models", nargs="+", default=list(DEFAULT_MODELS), choices=list(DEFAULT_MODELS)
    )
    parser.add_argument("--independent", default=DEFAULT_MODELS["independent"])
    parser.add_argument("--dyrex", default=DEFAULT_MODELS["dyrex"])
    parser.add_argument("--data", help="data dir (default ../shared/data or $STRUCTQA_DATA)")
    parser.add_argument("--timed-questions", type=int, default=256)
    parser.add_argument(
        "--f1-questions",
        type=int,
        default=None,
        help="held-out questions scored per runtime (default all; 0: none)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--re-export", action="store_true", help="export even if present")
    parser.add_argument("--pause-pids", help="file of PIDs to SIGSTOP while timing")
    parser.add_argument(
        "--runs",
        nargs="+",
        choices=RUNS,
        default=list(RUNS),
        help="the runs to time and score (default all; torch-fp32 always runs, as the "
        "reference). On a CPU without native bf16 leave out bare-bf16 and torch-bf16: "
        "emulated, they take most of the time",
    )
    parser.add_argument("--out", default="runs/bench_runtimes")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    pids = []
    if args.pause_pids and Path(args.pause_pids).is_file():
        pids = [int(x) for x in Path(args.pause_pids).read_text().split() if x.isdigit()]
    data = resolve_data_dir(args.data)
    heldout = list(read_examples(resolve_data_file(HELDOUT, data)).examples)
    timed_examples = heldout[: args.timed_questions]
    f1_examples = heldout if args.f1_questions is None else heldout[: args.f1_questions]
    out = Path(args.out)
    prov = harness.Provenance.start(args, torch.device("cpu"))  # command, commit, machine
    with paused(pids):
        peaks = {"bf16": matmul_peak(torch.bfloat16), "fp32": matmul_peak(torch.float32)}
    print(
        f"matrix peak: bf16 {peaks['bf16']:.0f} GFLOP/s, fp32 {peaks['fp32']:.0f} GFLOP/s "
        f"({torch.get_num_threads()} threads; CPU flags {' '.join(cpu_flags())})"
    )
    results = {}
    for name in args.models:
        ckpt = Path(getattr(args, name))
        results[name] = bench_model(
            name, ckpt, out / "exports" / name, timed_examples, f1_examples, args, pids
        )
        report(name, results[name], peaks)
    path = prov.write_stamped(
        out,
        "runtimes",
        cpu_flags=cpu_flags(),
        paused_pids=pids,
        peaks_gflops=peaks,
        results=results,
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
