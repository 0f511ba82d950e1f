"""Where an exported graph spends its time on this CPU: onnxruntime's own profiler, by operator.

    python benchmarks/profile_onnx.py CHECKPOINT                  # the int8 graph
    python benchmarks/profile_onnx.py CHECKPOINT --precision fp32 --questions 120

Loads CHECKPOINT's ONNX export (``CHECKPOINT/onnx`` or an export directory) as ``predict``
loads it (the weight format this CPU takes, torch's thread count) with the profiler on,
featurizes the first ``--questions`` held-out SQuAD questions, runs their windows in
length-sorted batches of ``--batch`` (padded to the multiple a server pads them to) twice
(the first to warm up, left out), and prints each operator type's share of the node time,
largest first. ``--out`` also writes the shares with the machine record (JSON).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import harness
import torch

from structqa.data import read_examples
from structqa.features.batching import collate, sorted_batches
from structqa.features.squad import featurize
from structqa.models.build import load_tokenizer
from structqa.paths import resolve_data_dir, resolve_data_file
from structqa.reader.data import HELDOUT_SQUAD1
from structqa.runtimes.onnx_model import read_export, session
from structqa.runtimes.select import choose
from structqa.serving.batcher import SHAPE_MULTIPLE


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("checkpoint")
    p.add_argument("--precision", choices=["int8", "fp32"], default="int8")
    p.add_argument("--questions", type=int, default=60)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    p.add_argument("--out", help="also write the shares as JSON here")
    args = p.parse_args()
    prov = harness.Provenance.start(args, torch.device("cpu"))
    export = choose(args.checkpoint, f"onnx-{args.precision}", torch.device("cpu")).onnx_dir
    assert export is not None  # (choose names what is missing when there is no export)
    meta = read_export(export)
    heldout = resolve_data_file(HELDOUT_SQUAD1, resolve_data_dir(args.data))
    examples = read_examples(heldout).examples[: args.questions]
    features, _ = featurize(examples, load_tokenizer(export))
    batches = sorted_batches([len(f) for f in features], args.batch)
    feeds = []
    for idx in batches:
        batch = collate(features, idx, pad_to_multiple=SHAPE_MULTIPLE)
        feeds.append({n: getattr(batch, n).numpy() for n in meta["inputs"]})
    graph_file = export / meta["files"][args.precision]["file"]
    profiled = session(
        graph_file, int8=args.precision == "int8", profile="/tmp/structqa-onnx-profile"
    )
    for feed in feeds:  # warm-up: its events are left out below
        profiled.run(None, feed)
    t0 = time.perf_counter()
    for feed in feeds:
        profiled.run(None, feed)
    seconds = time.perf_counter() - t0
    trace = Path(profiled.end_profiling())
    events = json.loads(trace.read_text())
    runs = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    timed_from = runs[len(feeds)] if len(runs) > len(feeds) else 0  # the second pass over them
    per_op: Counter[str] = Counter()
    for event in events:
        if event.get("cat") == "Node" and event["ts"] >= timed_from:
            per_op[event["args"].get("op_name", "?")] += event["dur"]
    trace.unlink()
    total = sum(per_op.values()) or 1
    windows = len(features)
    rate = harness.rate(windows, seconds)
    print(
        f"CPU: {prov.machine['cpu_kind']}; {args.precision} graph, {windows} windows in "
        f"{len(batches)} passes, {seconds:.2f} s ({rate:.1f} windows/s, profiling on)"
    )
    shares = {op: dur / total for op, dur in per_op.most_common()}
    for op, share in list(shares.items())[: args.top]:
        print(f"{op:28s} {per_op[op] / 1000:9.1f} ms {100 * share:5.1f} %")
    if args.out:
        prov.write(args.out, windows=windows, seconds=seconds, shares=shares)


if __name__ == "__main__":
    main()
