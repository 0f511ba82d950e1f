"""Does a fine-tune's held-out F1 follow how well it fitted its training data?

    python scripts/fit_vs_f1.py runs/anna docs/results/anna --only variant=

For every run directory under RUNS (named as the experiment runner names them) that has a
result JSON under RESULTS/runs/: its held-out F1 and the mean of the last 5 training losses
in its ``metrics.jsonl`` (the fit at the end of fine-tuning), one markdown row per run sorted
by that loss, then the Spearman rank correlation between the two over all runs listed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path


def ranks(values: list[float]) -> list[float]:
    """Ranks from 1, ties given their mean rank; NaN is not allowed (it has no order)."""
    if any(math.isnan(v) for v in values):
        raise ValueError("cannot rank NaN")
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation; a ValueError if either side is constant (undefined)."""
    rx, ry = ranks(x), ranks(y)
    if len(set(rx)) < 2 or len(set(ry)) < 2:
        raise ValueError("rank correlation is undefined: one side is constant")
    return statistics.correlation(rx, ry)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("results", type=Path)
    ap.add_argument("--only", default="", help="only run names containing this")
    ap.add_argument("--last", type=int, default=5, help="training losses averaged at the end")
    args = ap.parse_args(argv)
    rows = []
    for run in sorted(p for p in args.runs.iterdir() if p.is_dir() and args.only in p.name):
        result = args.results / "runs" / f"{run.name}.json"
        log = run / "metrics.jsonl"
        if not result.exists() or not log.exists():
            continue
        losses = [r["loss"] for r in map(json.loads, log.read_text().splitlines()) if "loss" in r]
        if not losses:
            continue
        f1 = json.loads(result.read_text())["metrics"]["f1"]
        loss = statistics.mean(losses[-args.last :])
        if not math.isfinite(loss):  # a run that diverged fitted worst of all
            print(f"{run.name}: non-finite training loss at the end, ranked as the worst fit")
            loss = math.inf
        rows.append((run.name, f1, loss))
    if len(rows) < 3:
        print(f"{len(rows)} finished runs with a training log: too few to correlate")
        return 1
    rows.sort(key=lambda r: r[2])
    print(f"| run | held-out F1 | mean of the last {args.last} training losses |")
    print("|---|---|---|")
    for name, f1, loss in rows:
        print(f"| {name} | {f1:.2f} | {loss:.2f} |")
    try:
        rho = spearman([r[1] for r in rows], [r[2] for r in rows])
    except ValueError as err:
        print(f"\n{err}")
        return 1
    print(f"\nSpearman rank correlation over {len(rows)} runs: {rho:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
