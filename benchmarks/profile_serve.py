"""Where the time of `structqa serve` goes at 16 clients: a sampling profile of the server.

    pip install -e ".[profile]"      # py-spy, the sampling profiler
    python benchmarks/profile_serve.py CHECKPOINT [--clients 16] [--seconds 30]

Starts `structqa serve CHECKPOINT` (the batched default) as a subprocess, drives it with
closed-loop clients over loopback (benchmarks/bench_serve.py's client: SQuAD held-out questions)
and meanwhile samples every thread of the server with ``py-spy record --threads --idle
--format raw`` (100 samples a second). Each sample's stack is put in one part of the answer
path by its innermost frame that belongs to a part, checked in this order:

- ``model``: the forward pass (torch, the encoder and head modules, the CPU kernels);
- ``tokenize``: questions and passages into windows (tokenizers, features, the featurizer);
- ``decode``: windows' scores into answers, probabilities, the verifier (decoding, calibration,
  the Predictor's answers);
- ``http``: the event loop's work on a request (uvicorn, h11, starlette, fastapi, pydantic,
  json, the routes, parsing, metrics);
- ``waiting``: a thread blocked (queue gets, locks, selectors, sleeps);
- ``other``.

Shares are of the samples of all threads of the server, so with 2 cores up to 2 threads' worth
of samples are on the CPU at once; ``busy`` leaves out ``waiting``. The client runs beside it
on the same cores (its load is what the rest of the machine carries). Writes the shares and
the throughput to ``--out`` (JSON) and the raw stacks beside it. Time it on an idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench_serve import DEFAULT_DATA, Record, Server, _bodies, _client, _summary
from harness import Provenance, pick_device

# (part, substrings of a frame "function (file:line)"), first match from the innermost frame
PARTS: list[tuple[str, tuple[str, ...]]] = [
    (
        "waiting",
        (
            "wait (threading.py",
            "get (queue.py",
            "select (selectors.py",
            "_worker (concurrent/futures",
            "acquire",
            "sleep",
        ),
    ),
    (
        "model",
        (
            "torch/",
            "structqa/encoders/",
            "structqa/heads/",
            "structqa/attention/",
            "structqa/runtimes/",
            "structqa/inference.py",
            "onnxruntime",
        ),
    ),
    ("tokenize", ("tokenizers", "structqa/features/", "Featurizer", "featurize")),
    ("decode", ("structqa/decoding", "structqa/calibration/", "structqa/prediction/")),
    (
        "http",
        (
            "uvicorn/",
            "h11/",
            "starlette/",
            "fastapi/",
            "pydantic",
            "json/",
            "structqa/serving/",
            "asyncio/",
        ),
    ),
]


def part_of(stack: list[str]) -> str:
    """The part of a sampled stack (outermost frame first): the innermost frame that names one."""
    for frame in reversed(stack):
        for part, needles in PARTS:
            if any(n in frame for n in needles):
                return part
    return "other"


def summarize(raw: Path) -> dict[str, Any]:
    """Shares of the samples by part, from py-spy's raw (collapsed) output:
    ``frame;frame;frame count`` per line."""
    parts: Counter = Counter()
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        parts[part_of(stack.split(";"))] += int(count)
    total = sum(parts.values()) or 1
    busy = total - parts["waiting"] or 1
    return {
        "samples": total,
        "share_of_all": {p: parts[p] / total for p in sorted(parts)},
        "share_of_busy": {p: parts[p] / busy for p in sorted(parts) if p != "waiting"},
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("checkpoint")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--out", default="docs/results/serve/profile.json")
    p.add_argument("--flags", nargs=argparse.REMAINDER, default=[], help="more serve flags")
    args = p.parse_args()
    if shutil.which("py-spy") is None:
        sys.exit("py-spy is not installed: pip install -e '.[profile]'")
    prov = Provenance.start(args, pick_device())
    bodies, _ = _bodies(Path(args.data), 400)
    server = Server(args.checkpoint, args.flags)
    out = Path(args.out)
    raw = out.with_suffix(".stacks.txt")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        warm_until = time.monotonic() + 5  # first passes (allocator, OpenMP) left out

        async def load(stop_at: float, rec: Record, clients: int) -> None:
            await asyncio.gather(
                *(_client(server.port, bodies, 7 * c, stop_at, rec) for c in range(clients))
            )

        asyncio.run(load(warm_until, Record(), 4))
        spy = subprocess.Popen(
            ["py-spy", "record", "--pid", str(server.proc.pid), "--threads", "--idle"]
            + ["--rate", "100", "--format", "raw", "--duration", str(int(args.seconds))]
            + ["--output", str(raw)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        rec = Record()
        asyncio.run(load(time.monotonic() + args.seconds, rec, args.clients))
        _, err = spy.communicate(timeout=args.seconds + 60)
        if spy.returncode != 0:
            sys.exit(f"py-spy failed: {err.strip()[-400:]}")
        served = _summary(rec, args.seconds)
    finally:
        server.stop()
    result = {"clients": args.clients, "load": served, **summarize(raw)}
    print(json.dumps(result, indent=2))
    prov.write(out, **result)
    print(f"wrote {out} and {raw}")


if __name__ == "__main__":
    main()
