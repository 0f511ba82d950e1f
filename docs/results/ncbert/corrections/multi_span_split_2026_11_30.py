"""The saved contrast-set answers of the DROP runs scored as they were (one string) and with a
generated multi-span answer split into its spans (" , "), as DROP scoring now reads it. Run
from the repository root."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from structqa.metrics.drop import drop_score, gold_from_drop_json

RESULTS = ("ncbert-drop3k-gpu", "ncbert-drop3k-recipe")


def main() -> None:
    contrast = Path("../shared/data/drop/drop-contrast-sets.json")
    gold = gold_from_drop_json(json.loads(contrast.read_text(encoding="utf-8")))
    for results in RESULTS:
        for path in sorted(Path("docs/results", results, "answers").glob("*.json.gz")):
            answers = json.loads(gzip.decompress(path.read_bytes()))
            split = {k: v.split(" , ") if " , " in v else v for k, v in answers.items()}
            a, b = drop_score(gold, answers), drop_score(gold, split)
            spans_a = a["per_type"].get("spans", {}).get("f1", 0.0)
            spans_b = b["per_type"].get("spans", {}).get("f1", 0.0)
            print(
                f"{results}/{path.name}: F1 {100 * a['global_f1']:.2f} -> "
                f"{100 * b['global_f1']:.2f}, spans F1 {100 * spans_a:.1f} -> {100 * spans_b:.1f}"
            )


if __name__ == "__main__":
    main()
