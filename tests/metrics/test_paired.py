"""Paired bootstrap over questions, and per-question scoring that the comparison relies on."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from structqa.cli import main
from structqa.config import ConfigError
from structqa.metrics.paired import paired_bootstrap
from structqa.scoring import compare_files, question_scores, score_file

MINI = "fixtures/squad-v1.1-mini.json"


def test_identical_systems_differ_by_nothing():
    rng = np.random.default_rng(1)
    scores = rng.uniform(0, 100, size=500)
    r = paired_bootstrap(scores, scores, resamples=2000)
    assert r.difference == 0.0 and r.ci_low == 0.0 and r.ci_high == 0.0
    assert r.p_value == 1.0


def test_a_constant_gain_is_certain():
    rng = np.random.default_rng(2)
    b = rng.uniform(0, 100, size=300)
    r = paired_bootstrap(b + 5.0, b, resamples=999)
    assert r.difference == pytest.approx(5.0)
    assert r.ci_low == pytest.approx(5.0) and r.ci_high == pytest.approx(5.0)
    assert r.p_value == pytest.approx(1 / 1000)


def test_pairing_cancels_what_both_systems_share():
    # Question difficulty dominates the scores (std 30) but the gap is a steady +1 with
    # little noise: paired, the interval is tight around +1; unpaired it would span ~±5.
    rng = np.random.default_rng(3)
    difficulty = rng.normal(50, 30, size=1000)
    a = difficulty + 1.0 + rng.normal(0, 1, size=1000)
    r = paired_bootstrap(a, difficulty, resamples=2000)
    assert 0.8 < r.ci_low < r.difference < r.ci_high < 1.2
    assert r.p_value < 0.001


def test_interval_width_matches_the_standard_error():
    rng = np.random.default_rng(4)
    n, sigma = 2000, 10.0
    d = rng.normal(0.3, sigma, size=n)
    r = paired_bootstrap(d, np.zeros(n), resamples=4000, confidence=0.95)
    expected = 2 * 1.96 * d.std(ddof=1) / np.sqrt(n)
    assert r.ci_high - r.ci_low == pytest.approx(expected, rel=0.1)
    assert r.ci_low < r.difference < r.ci_high


def test_a_gap_within_noise_is_not_significant():
    rng = np.random.default_rng(5)
    d = rng.normal(0.0, 10.0, size=800)
    r = paired_bootstrap(d, np.zeros(800), resamples=2000)
    assert r.ci_low < 0 < r.ci_high
    assert r.p_value > 0.05


def test_runs_are_averaged_per_question_and_the_seed_fixes_the_draw():
    a = np.array([[100.0, 0.0, 50.0], [0.0, 100.0, 50.0]])
    b = np.array([[50.0, 50.0, 0.0], [50.0, 50.0, 0.0]])
    r = paired_bootstrap(a, b, resamples=500, seed=7)
    assert r.n_runs == 2 and r.n_questions == 3
    assert r.mean_a == pytest.approx(50.0) and r.mean_b == pytest.approx(100 / 3)
    assert r.difference == pytest.approx(50.0 / 3)
    assert paired_bootstrap(a, b, resamples=500, seed=7) == r
    rng = np.random.default_rng(6)
    x, y = rng.uniform(0, 100, size=(2, 400))
    one, other = (paired_bootstrap(x, y, resamples=500, seed=s) for s in (7, 8))
    assert one.difference == other.difference and one.ci_low != other.ci_low


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        (np.zeros(3), np.zeros(4), "pair up"),
        (np.zeros((2, 3)), np.zeros((1, 3)), "pair up"),
        (np.zeros(0), np.zeros(0), "at least one"),
        (np.array([1.0, np.nan]), np.zeros(2), "finite"),
    ],
)
def test_bad_inputs_are_clear_errors(a, b, match):
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(a, b)


def test_unequal_runs_are_averaged_each_on_their_own_when_asked():
    a = np.array([[100.0, 0.0, 50.0]])
    b = np.array([[50.0, 50.0, 0.0], [0.0, 50.0, 100.0], [100.0, 50.0, 50.0]])
    r = paired_bootstrap(a, b, resamples=500, unequal_runs=True)
    assert (r.n_runs, r.n_runs_b) == (1, 3)
    assert r.mean_a == pytest.approx(50.0) and r.mean_b == pytest.approx(50.0)
    assert r.difference == pytest.approx(0.0) and r.p_value == 1.0
    assert type(r).from_dict(r.to_dict()) == r
    same = paired_bootstrap(a, a, resamples=10)
    assert same.n_runs_b is None and type(same).from_dict({**same.to_dict()}) == same
    legacy = {k: v for k, v in same.to_dict().items() if k != "n_runs_b"}
    assert type(same).from_dict(legacy) == same
    with pytest.raises(ValueError, match="pair up"):
        paired_bootstrap(a, np.zeros((2, 4)), unequal_runs=True)


def test_bad_settings_are_clear_errors():
    with pytest.raises(ValueError, match="resamples"):
        paired_bootstrap([1.0], [0.0], resamples=0)
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap([1.0], [0.0], confidence=1.0)


def _mini_gold(shared_data) -> dict[str, list[str]]:
    data = json.loads((shared_data / MINI).read_text())
    return {
        qa["id"]: [a["text"] for a in qa["answers"]]
        for art in data["data"]
        for p in art["paragraphs"]
        for qa in p["qas"]
    }


def _predictions(gold: dict[str, list[str]], right_every: int) -> dict[str, str]:
    """The first gold answer on every ``right_every``-th question, a wrong word elsewhere."""
    return {
        qid: answers[0] if i % right_every == 0 else "zebra"
        for i, (qid, answers) in enumerate(gold.items())
    }


def test_question_scores_average_to_the_official_total(tmp_path, shared_data):
    gold = _mini_gold(shared_data)
    preds = _predictions(gold, 2)
    preds.pop(next(iter(gold)))  # a missing prediction scores 0, as officially
    path = tmp_path / "p.json"
    path.write_text(json.dumps(preds))
    scores = question_scores(shared_data / MINI, preds)
    official = score_file(shared_data / MINI, path)
    assert scores.scheme == "squad1" and scores.ids == list(gold)
    assert scores.f1.mean() == pytest.approx(official["f1"])
    assert scores.exact_match.mean() == pytest.approx(official["exact_match"])
    assert scores.f1[0] == 0.0


def test_question_scores_v2_match_the_v2_metric(shared_data):
    path = shared_data / "splits" / "squad2-heldout.v2.0.json"
    data = json.loads(path.read_text())
    qas = [qa for art in data["data"] for p in art["paragraphs"] for qa in p["qas"]]
    preds = {
        qa["id"]: (qa["answers"][0]["text"] if qa["answers"] and i % 3 else "")
        for i, qa in enumerate(qas)
    }
    scores = question_scores(path, preds)
    assert scores.scheme == "squad2" and len(scores.ids) == len(qas)
    gold = {qa["id"]: [a["text"] for a in qa["answers"]] for qa in qas}
    from structqa.metrics.squad import squad_v2

    official = squad_v2(gold, preds)
    assert scores.f1.mean() == pytest.approx(official["f1"])
    assert scores.exact_match.mean() == pytest.approx(official["exact"])


def test_compare_files_pairs_runs_in_order(tmp_path, shared_data):
    gold = _mini_gold(shared_data)
    paths = {}
    for name, every in (("a0", 1), ("a1", 2), ("b0", 3), ("b1", 4)):
        paths[name] = tmp_path / name / "best" / "predictions.json"  # a checkpoint layout
        paths[name].parent.mkdir(parents=True)
        paths[name].write_text(json.dumps(_predictions(gold, every)))
    c = compare_files(
        shared_data / MINI,
        [tmp_path / "a0", paths["a1"]],
        [tmp_path / "b0", paths["b1"]],
        resamples=500,
    )
    f1 = {k: score_file(shared_data / MINI, p)["f1"] for k, p in paths.items()}
    assert c.run_differences == pytest.approx([f1["a0"] - f1["b0"], f1["a1"] - f1["b1"]])
    assert c.bootstrap.difference == pytest.approx(sum(c.run_differences) / 2)
    # one run against two: each side averaged on its own, no run pairs
    one = compare_files(
        shared_data / MINI, [paths["a0"]], [paths["b0"], paths["b1"]], resamples=500
    )
    assert one.run_differences == []
    assert one.bootstrap.n_runs == 1 and one.bootstrap.n_runs_b == 2
    assert one.bootstrap.difference == pytest.approx(f1["a0"] - (f1["b0"] + f1["b1"]) / 2)
    with pytest.raises(FileNotFoundError, match="no predictions.json"):
        compare_files(shared_data / MINI, [tmp_path], [paths["b0"]])


def test_compare_cli_prints_and_writes_json(tmp_path, shared_data, capsys):
    gold = _mini_gold(shared_data)
    (tmp_path / "a.json").write_text(json.dumps(_predictions(gold, 1)))
    (tmp_path / "b.json").write_text(json.dumps(_predictions(gold, 2)))
    out = tmp_path / "cmp.json"
    argv = ["compare", str(shared_data / MINI), "--a", str(tmp_path / "a.json")]
    argv += ["--b", str(tmp_path / "b.json"), "--resamples", "300", "--json", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "A - B +" in printed and "interval over questions" in printed
    got = json.loads(out.read_text())
    assert got["metric"] == "f1" and got["n_runs"] == 1 and got["resamples"] == 300
    assert got["difference"] > 0 and got["ci_low"] <= got["difference"] <= got["ci_high"]


def test_compare_names_the_file_that_does_not_fit(tmp_path, shared_data):
    gold = _mini_gold(shared_data)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_predictions(gold, 1)))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"not-a-question": "x"}))
    with pytest.raises(ValueError, match="other.json: none of its 1 answers"):
        compare_files(shared_data / MINI, [good], [other])
    listed = tmp_path / "listed.json"
    listed.write_text(json.dumps({qid: ["a", "b"] for qid in gold}))
    with pytest.raises(ValueError, match="listed.json: "):
        compare_files(shared_data / MINI, [good], [listed])


def test_gzipped_predictions_score_as_the_plain_file(tmp_path, shared_data):
    """A run's kept answers (answers/<run>.json.gz) read as its predictions.json does."""
    gold = _mini_gold(shared_data)
    plain = tmp_path / "p.json"
    plain.write_text(json.dumps(_predictions(gold, 2)))
    packed = tmp_path / "p.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert score_file(shared_data / MINI, packed) == score_file(shared_data / MINI, plain)
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(plain.read_bytes())  # not compressed at all
    with pytest.raises(ValueError, match=r"broken.json.gz: the predictions file is not valid gzip"):
        score_file(shared_data / MINI, broken)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(packed.read_bytes()[:-12])  # truncated mid-stream
    with pytest.raises(ValueError, match=r"cut.json.gz: the predictions file is not valid"):
        score_file(shared_data / MINI, cut)


def test_bootstrap_reads_a_validation_split_by_its_recorded_path(tmp_path, monkeypatch):
    from structqa.experiments.bootstrap import _Scores
    from structqa.experiments.store import Paths

    monkeypatch.chdir(tmp_path)
    val = Path("runs/x/_validation/val.json")  # relative, as resolve_config records it
    val.parent.mkdir(parents=True)
    val.write_text("{}")
    scores = _Scores("f1", None, Paths(tmp_path / "results", tmp_path / "runs"))
    result = {"run": "r", "config": {"data": {"eval": str(val), "dir": None, "eval_size": None}}}
    assert scores.eval_file(result) == val
    result["config"]["data"]["eval_size"] = 10
    with pytest.raises(ConfigError, match="eval_size=10"):
        scores.eval_file(result)
