"""Score the finished runs of SQuAD 2.0 grids on the held-out split, at the threshold and
calibration fitted on their validation slice, and write the summary.

For every finished run of each experiment YAML (its result JSON under docs/results/NAME/runs):

1. its best/ checkpoint gets calibration.json if it has none, fitted on the validation slice
   it was scored on (from the saved n-best answers: no model run);
2. ``structqa evaluate`` scores it on the held-out file at that threshold (best/heldout/:
   metrics.json with ece and ece_uncalibrated, reliability.png), once;
3. OUT/summary.json (``{head: {train_size: {f1_mean, f1_std, hasans_f1_mean, noans_auc_mean,
   ece_mean, seeds}}}``), OUT/table.md and OUT/reliability/RUN.png are rewritten from all
   held-out scores found.

The held-out file is read by step 2 only, after training and calibration have finished.
Resumable: a run already calibrated or scored is not done again, and a run scored earlier
whose checkpoint is not here (runs/ is not kept between machines) keeps its rows in OUT.

    python scripts/squad2_heldout.py configs/squad2/grid.yaml --out docs/results/squad2

``--only variant=NAME`` keeps one variant of a grid whose variants share a head (their rows
would otherwise share the summary's cell).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from structqa.calibration.report import calibrate_evaluated, load_calibration
from structqa.cli import main as structqa
from structqa.config import config_from_dict
from structqa.experiments.grid import load_experiment
from structqa.io import write_text
from structqa.training.data import load_eval_examples

log = logging.getLogger("squad2_heldout")
HELDOUT = "splits/squad2-heldout.v2.0.json"


def finished_runs(config: Path, results_root: Path, runs_root: Path) -> list[dict[str, Any]]:
    experiment = load_experiment(config)
    folder = results_root / experiment.name / "runs"
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        result = json.loads(path.read_text())
        result["best"] = runs_root / experiment.name / result["run"] / "best"
        out.append(result)
    return out


def score(result: dict[str, Any], data: str | None) -> dict[str, Any] | None:
    best: Path = result["best"]
    if not (best / "model.safetensors").exists():
        log.warning("%s: no checkpoint at %s (trained elsewhere?)", result["run"], best)
        return None
    if load_calibration(best) is None:
        cfg = config_from_dict(result["config"])
        if data:
            cfg.data.dir = data
        examples, v2 = load_eval_examples(cfg)
        calibrate_evaluated(best, examples, v2, source=cfg.data.eval)
    target = best / "heldout" / "metrics.json"
    if not target.exists():
        args = ["evaluate", str(best), "--eval", HELDOUT, "--out", str(best / "heldout")]
        if structqa(args + ([f"--data={data}"] if data else [])) != 0:
            raise RuntimeError(f"{result['run']}: held-out evaluation failed")
    return json.loads(target.read_text())


def _earlier_rows(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows of an earlier heldout.json by (experiment, run): a run whose checkpoint is
    not on this machine keeps its scores rather than dropping out of the summary."""
    if not path.is_file():
        return {}
    return {(r["experiment"], r["run"]): r for r in json.loads(path.read_text())}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    cells: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for row in rows:
        cells.setdefault(row["head"], {}).setdefault(row["train_size"], []).append(row)
    out: dict[str, Any] = {}
    for head, sizes in cells.items():
        for size, runs in sizes.items():
            f1 = [r["metrics"]["f1"] for r in runs]

            def mean(key: str, runs: list[dict[str, Any]] = runs) -> float:
                return statistics.fmean(r["metrics"][key] for r in runs)

            out.setdefault(head, {})[size] = {
                "f1_mean": statistics.fmean(f1),
                "f1_std": statistics.stdev(f1) if len(f1) > 1 else None,
                "hasans_f1_mean": mean("HasAns_f1"),
                "noans_f1_mean": mean("NoAns_f1"),
                "noans_auc_mean": mean("NoAns_auc"),
                "forced_hasans_f1_mean": mean("forced_HasAns_f1"),
                "ece_mean": mean("ece"),
                "ece_uncalibrated_mean": mean("ece_uncalibrated"),
                "seeds": sorted(r["seed"] for r in runs),
                "runs": sorted(r["run"] for r in runs),
            }
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| experiment | run | seed | F1 | EM | HasAns F1 | NoAns F1 | no-answer AUC | "
        "forced HasAns F1 | threshold (val) | ECE | ECE uncal. |\n" + "|---" * 12 + "|\n"
    )
    lines = []
    for r in rows:
        m = r["metrics"]
        # (None: a calibration fitted to answer every question)
        threshold = "none" if m["null_threshold"] is None else f"{m['null_threshold']:.3f}"
        lines.append(
            f"| {r['experiment']} | {r['run']} | {r['seed']} | {m['f1']:.2f} | {m['exact']:.2f} "
            f"| {m['HasAns_f1']:.2f} | {m['NoAns_f1']:.2f} | {m['NoAns_auc']:.1f} | "
            f"{m['forced_HasAns_f1']:.2f} | {threshold} | {m['ece']:.3f} | "
            f"{m['ece_uncalibrated']:.3f} |"
        )
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("configs", nargs="+", type=Path, help="experiment YAMLs (SQuAD 2.0 grids)")
    p.add_argument("--out", type=Path, default=Path("docs/results/squad2"))
    p.add_argument("--results", type=Path, default=Path("docs/results"))
    p.add_argument("--runs", type=Path, default=Path("runs"))
    p.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    p.add_argument(
        "--only",
        default="",
        help="score only runs whose name has every KEY=VALUE given, e.g. variant=gentle",
    )
    args = p.parse_args(argv)
    wanted = {part.strip() for part in args.only.split(",") if part.strip()}
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    earlier = _earlier_rows(args.out / "heldout.json")
    rows = []
    for config in args.configs:
        for result in finished_runs(config, args.results, args.runs):
            if not wanted <= set(result["run"].split(",")):
                continue
            metrics = score(result, args.data)
            if metrics is None:
                kept = earlier.get((result["experiment"], result["run"]))
                if kept is not None:  # scored before, on a machine that had its checkpoint
                    log.info("%s: held-out scores kept from %s", result["run"], args.out)
                    rows.append(kept)
                continue
            cfg = result["config"]
            rows.append(
                {
                    "experiment": result["experiment"],
                    "run": result["run"],
                    "seed": result["seed"],
                    "head": cfg["model"]["head"],
                    "null_head": cfg["model"].get("null_head", "span"),
                    "train_size": str(cfg["data"]["train_size"]),
                    "metrics": metrics,
                }
            )
            png = result["best"] / "heldout" / "reliability.png"
            if png.exists():
                (args.out / "reliability").mkdir(parents=True, exist_ok=True)
                name = f"{result['experiment']}--{result['run']}.png".replace("=", "-")
                shutil.copyfile(png, args.out / "reliability" / name.replace(",", "_"))
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "summary.json", json.dumps(summarize(rows), indent=1) + "\n")
    write_text(args.out / "heldout.md", table(rows))
    write_text(args.out / "heldout.json", json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
