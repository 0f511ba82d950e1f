"""scripts/compare_calibrations.py: two calibrations of one checkpoint compared field by
field, numbers by their difference, fields of one file only named."""

from __future__ import annotations

import json
from pathlib import Path

from tiny import load_script

CAL = {
    "method": "platt",
    "null_threshold": -1.65,
    "platt": {"a": 0.85, "b": 0.2},
    "verifier": {"names": ["null_odds", "top_margin"], "coef": [2.0, 0.25]},
    "fit": {"questions": 449, "source": "/a/validation.json"},
}


def test_the_same_fit_is_identical_and_a_moved_coefficient_is_named(tmp_path: Path) -> None:
    script = load_script("compare_calibrations")
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "same.json"
    a.write_text(json.dumps(CAL))
    moved = json.loads(json.dumps(CAL))
    moved["fit"]["source"] = "/b/validation.json"
    b.write_text(json.dumps(moved))
    assert script.main([str(a), str(b), "--ignore", "fit.source", "--out", str(out)]) == 0
    same = json.loads(out.read_text())
    assert same["identical"] and same["fields"] == 9 and same["largest_numeric_difference"] == 0
    assert same["command"].endswith(f"--ignore fit.source --out {out}")
    assert same["commit"] and same["machine"]

    moved["verifier"]["coef"][1] = 0.26
    moved["method"] = "isotonic"
    moved["isotonic"] = {"x": [0.1]}
    b.write_text(json.dumps(moved))
    assert script.main([str(a), str(b), "--out", str(out)]) == 1
    differ = json.loads(out.read_text())
    assert set(differ["differ"]) == {"verifier.coef.1", "method", "fit.source"}
    assert abs(differ["differ"]["verifier.coef.1"]["difference"] - 0.01) < 1e-12
    assert differ["in_one_only"] == ["isotonic.x.0"] and not differ["identical"]
