"""Prepare a *fold reader*: a run of a reader build's recipe trained without some of the
training split's articles as well as the build's validation slice, for
``scripts/threshold_offset.py`` to measure how far the slice's no-answer threshold sits from
the one that is best on articles the reader never saw.

It writes into ``--out``:

- ``seen-slice.v2.json``: the build's validation slice (its first run's
  ``members/m0/validation.v2.json``) less every passage of the fold's questions;
- ``fold.yaml``: that run's config (``members/m0/config.json``) with the fold's and the
  slice's passages excluded from training (``data.exclude``), chosen on the seen slice, its
  output in ``OUT/run``;

and prints the two commands that follow. The fold's questions: ``data/slice.v2.json`` of
``structqa reader build --slice articles`` (every question of a quarter of SQuAD 2.0's training
articles; its data stage writes it before training starts).

    python scripts/fold_reader.py /work/reader-seed0 \\
        --fold /work/reader-art-seed0/data/slice.v2.json --out /work/fold-a
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import yaml

from structqa.io import write_json, write_text


def seen_slice(slice_file: Path, fold_file: Path) -> tuple[dict, int, int]:
    """The slice's SQuAD 2.0 JSON without the passages of the fold's questions, and the
    questions kept and dropped."""
    fold = json.loads(fold_file.read_text(encoding="utf-8"))
    passages = {p["context"] for a in fold["data"] for p in a["paragraphs"]}
    data = json.loads(slice_file.read_text(encoding="utf-8"))

    def questions() -> int:
        return sum(len(p["qas"]) for a in data["data"] for p in a["paragraphs"])

    total = questions()
    for article in data["data"]:
        article["paragraphs"] = [p for p in article["paragraphs"] if p["context"] not in passages]
    data["data"] = [a for a in data["data"] if a["paragraphs"]]
    kept = questions()
    return data, kept, total - kept


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", type=Path, help="a reader build's folder (members/m0)")
    parser.add_argument("--fold", type=Path, required=True, help="the fold's questions")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    run = args.build / "members" / "m0"
    if not (run / "config.json").is_file():
        run = args.build / "run"  # a one-run build
    slice_file, config_file = run / "validation.v2.json", run / "config.json"
    for path in (slice_file, config_file, args.fold):
        if not path.is_file():
            parser.error(f"{path} is missing")
    args.out.mkdir(parents=True, exist_ok=True)
    data, kept, dropped = seen_slice(slice_file, args.fold)
    seen = args.out / "seen-slice.v2.json"
    write_json(seen, data)
    cfg = json.loads(config_file.read_text(encoding="utf-8"))
    excluded = [str(args.fold.resolve()), str(slice_file.resolve())]
    cfg["data"]["exclude"] = [*(cfg["data"].get("exclude") or []), *excluded]
    cfg["data"]["validation"] = str(seen.resolve())
    cfg["train"]["output_dir"] = str((args.out / "run").resolve())
    config = args.out / "fold.yaml"
    write_text(config, yaml.safe_dump(cfg, sort_keys=False))
    print(f"{seen}: {kept} questions of the slice kept, {dropped} on the fold's passages dropped")
    print(f"train:   structqa train {config} --no-progress")
    print(
        f"measure: python scripts/threshold_offset.py {args.out / 'run'} --seen {seen} "
        f"--unseen {args.fold} --out {args.out / 'offset'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
