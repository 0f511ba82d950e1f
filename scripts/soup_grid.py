"""Soups of an experiment grid's runs: for each variant, the mean of its runs' weights
(`structqa soup`), scored once on a test file, beside the output ensemble of the same runs
(scripts/ensemble_nbest.py: K models' reading cost where the soup has one's).

The runs of a variant must share their start (``train.init_seed``) and differ in
``train.seed`` (configs/reader/soup-cpu.yaml, soup-gpu.yaml). For each variant V it writes
OUT/variant=V.json.gz (the soup's answers, for `structqa compare`),
OUT/variant=V.ensemble.json.gz (the ensemble's) and OUT/variant=V.json (both scores, the
members, their own scores, command, commit, machine and time).

    python scripts/soup_grid.py runs/reader-soup-cpu \\
        --eval ../shared/data/splits/squad1-heldout.mrqa.jsonl.gz \\
        --out docs/results/reader-soup-cpu/soups [--seeds 0,1] [--runtime torch]

Answers are forced (``decode.version_2=false``) on a SQuAD 1.1 file.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import shlex
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any


def _ensemble_module() -> Any:
    path = Path(__file__).with_name("ensemble_nbest.py")
    spec = importlib.util.spec_from_file_location("ensemble_nbest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def grid_runs(runs_dir: Path, seeds: set[int] | None) -> dict[str, list[tuple[int, Path]]]:
    """``{variant: [(seed, RUN/best), ...]}`` of the finished runs (a ``best/`` with weights)
    under ``runs_dir``, named ``variant=V,seed=S``, seeds in order."""
    groups: dict[str, list[tuple[int, Path]]] = defaultdict(list)
    for run in sorted(runs_dir.iterdir()):
        fields = dict(p.split("=", 1) for p in run.name.split(",") if "=" in p)
        if "variant" not in fields or "seed" not in fields:
            continue
        seed = int(fields["seed"])
        if (run / "best" / "model.safetensors").is_file() and (seeds is None or seed in seeds):
            groups[fields["variant"]].append((seed, run / "best"))
    return {v: sorted(members) for v, members in groups.items()}


def _test_answers(best: Path) -> Path:
    """The member's n-best answers to the test file: best/eval/ after a run chosen on a
    validation slice, best/ itself after a run scored on the test file (validation none)."""
    for where in (best / "eval", best):
        if (where / "nbest_predictions.json").is_file():
            return where
    raise FileNotFoundError(f"{best}: no nbest_predictions.json (score the run on the test file)")


def _write_gz(path: Path, answers: dict[str, str]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(answers, f)


def soup_variant(
    variant: str, members: list[tuple[int, Path]], eval_file: str, out: Path, runtime: str
) -> dict[str, Any]:
    from structqa.prediction.scoring import evaluate_checkpoint
    from structqa.scoring import score_file
    from structqa.training.soup import make_soup

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        soup = make_soup([best for _, best in members], Path(tmp) / "soup")
        metrics = evaluate_checkpoint(
            soup, eval_file, Path(tmp) / "eval", runtime, overrides=["decode.version_2=false"]
        )
        answers = json.loads((Path(tmp) / "eval" / "predictions.json").read_text())
        record = json.loads((soup / "soup.json").read_text())
        shutil.rmtree(soup)
    _write_gz(out / f"variant={variant}.json.gz", answers)
    nbests = [
        json.loads((_test_answers(best) / "nbest_predictions.json").read_text())
        for _, best in members
    ]
    ensemble = _ensemble_module().ensemble(nbests)
    _write_gz(out / f"variant={variant}.ensemble.json.gz", ensemble)
    ensemble_scores = score_file(eval_file, out / f"variant={variant}.ensemble.json.gz")
    own = [
        json.loads((_test_answers(best) / "metrics.json").read_text()).get("f1")
        for _, best in members
    ]
    return {
        "variant": variant,
        "seeds": [s for s, _ in members],
        "members": record["members"],
        "members_f1": own,
        "soup": {k: metrics[k] for k in ("exact_match", "f1") if k in metrics},
        "ensemble": ensemble_scores,
        "runtime": metrics.get("runtime"),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs_dir", help="the grid's runs directory (runs/NAME)")
    p.add_argument("--eval", required=True, help="the test file to score the soups on")
    p.add_argument("--out", required=True, help="directory of the soups' answers and scores")
    p.add_argument("--seeds", help="comma-separated train.seed values to average (default all)")
    p.add_argument("--runtime", default="torch", help="structqa evaluate's --runtime")
    args = p.parse_args(argv)
    from structqa.provenance import git_info, machine_info

    seeds = {int(s) for s in args.seeds.split(",")} if args.seeds else None
    groups = grid_runs(Path(args.runs_dir), seeds)
    groups = {v: m for v, m in groups.items() if len(m) >= 2}
    if not groups:
        p.error(f"{args.runs_dir}: no variant with two or more finished runs")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for variant, members in groups.items():
        result = soup_variant(variant, members, args.eval, out, args.runtime)
        result.update(
            command="python " + " ".join(shlex.quote(a) for a in sys.argv),
            commit=git_info(),
            machine=machine_info(),
        )
        (out / f"variant={variant}.json").write_text(json.dumps(result, indent=1))
        print(
            f"{variant}: soup of seeds {result['seeds']} F1 {result['soup']['f1']:.2f}, "
            f"ensemble {result['ensemble']['f1']:.2f}, members "
            + ", ".join(f"{f:.2f}" for f in result["members_f1"] if f is not None)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
