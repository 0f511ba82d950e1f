"""Whether two calibrations of one checkpoint are the same fit: every field of the two
``calibration.json`` files (method, no-answer threshold, temperatures, Platt or isotonic map,
verifier coefficients, fit statistics) compared, numbers by their largest difference.

Used to show that a calibration fitted at one commit is the one a later commit fits on the
same questions (copy the checkpoint, ``structqa calibrate COPY --on FILE``, compare):

    python scripts/compare_calibrations.py RUN/best/calibration.json COPY/calibration.json \\
        --out same.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from structqa.io import write_json
from structqa.provenance import git_info, machine_info


def leaves(value: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every leaf; list items are indexed (``coef.3``)."""
    if isinstance(value, dict):
        for key in sorted(value):
            yield from leaves(value[key], f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from leaves(item, f"{where}.{i}")
    else:
        yield where, value


def compare(a: dict[str, Any], b: dict[str, Any], ignore: Sequence[str]) -> dict[str, Any]:
    """The fields that differ (numbers: by how much), those in one file only, and the largest
    numeric difference; ``ignore``: path prefixes left out (a file's own path)."""
    kept = [dict(leaves(x)) for x in (a, b)]
    kept = [{k: v for k, v in x.items() if not k.startswith(tuple(ignore))} for x in kept]
    first, second = kept
    differ: dict[str, Any] = {}
    largest = 0.0
    for key in sorted(set(first) & set(second)):
        x, y = first[key], second[key]
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (x, y))
        if numbers:
            gap = abs(float(x) - float(y))
            largest = max(largest, gap)
            if gap:
                differ[key] = {"a": x, "b": y, "difference": gap}
        elif x != y:
            differ[key] = {"a": x, "b": y}
    only = sorted(set(first) ^ set(second))
    return {
        "fields": len(set(first) | set(second)),
        "differ": differ,
        "in_one_only": only,
        "largest_numeric_difference": largest,
        "identical": not differ and not only,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("a", help="a calibration.json")
    ap.add_argument("b", help="another calibration.json of the same checkpoint")
    ap.add_argument(
        "--ignore",
        action="append",
        default=[],
        help="a field path prefix to leave out (repeatable), e.g. fit.source",
    )
    ap.add_argument("--out", help="JSON file to write (default: print)")
    given = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(given)
    start = time.time()
    files = [Path(args.a), Path(args.b)]
    result = {
        "a": str(files[0]),
        "b": str(files[1]),
        **compare(*(json.loads(f.read_text()) for f in files), ignore=args.ignore),
        "command": " ".join(["python", "scripts/compare_calibrations.py", *given]),
        "commit": git_info(),
        "machine": machine_info(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "seconds": round(time.time() - start, 2),
    }
    if args.out:
        write_json(Path(args.out), result)
    print(json.dumps({k: result[k] for k in ("fields", "identical", "differ")}, indent=1))
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
