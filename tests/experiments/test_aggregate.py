"""Aggregation: mean ± sample std over seeds, the table.md header and the summary.json schema,
checked on hand-made result files."""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest

from structqa.config import ConfigError
from structqa.experiments.aggregate import cell_stats, refresh, render_table, summary
from structqa.experiments.grid import experiment_from_dict
from structqa.experiments.results import load_results, metric_value, result_metric, sample_std
from structqa.experiments.spec import plan
from structqa.io import write_json

HEADS = {
    "name": "lowdata",
    "grid": {
        "model.head": ["independent", "dyrex+joint"],
        "data.train_size": [256, 512],
        "train.seed": [0, 1, 2],
    },
    "table": {"rows": ["model.head"], "columns": "data.train_size", "summary": True},
}


def result(name: str, f1: float, em: float, *, wall: float = 60.0, dirty: bool = False):
    return {
        "run": name,
        "metrics": {"exact_match": em, "f1": f1},
        "wall_time_s": wall,
        "git": {"commit": "0123456789abcdef0123", "dirty": dirty},
        "machine": {"cpu": "Test CPU", "cores": 2, "torch_threads": 2, "torch": "2.x"},
        "device": "cpu",
        "bf16": False,
    }


def heads_results() -> dict[str, dict[str, Any]]:
    return {
        # independent @256: three seeds; F1 80/82/84 -> 82 ± 2 (ddof=1; population std 1.63)
        "head=independent,train_size=256,seed=0": result("a", 80.0, 70.0),
        "head=independent,train_size=256,seed=1": result("b", 82.0, 71.0),
        "head=independent,train_size=256,seed=2": result("c", 84.0, 75.0, dirty=True),
        # independent @512: one seed -> std n/a
        "head=independent,train_size=512,seed=1": result("d", 90.0, 85.5),
        # dyrex+joint @256: two seeds
        "head=dyrex+joint,train_size=256,seed=0": result("e", 60.0, 50.0),
        "head=dyrex+joint,train_size=256,seed=2": result("f", 61.0, 52.0),
        # dyrex+joint @512: nothing yet
    }


def test_sample_std_uses_ddof_1_and_is_none_for_one_value():
    assert sample_std([80.0, 82.0, 84.0]) == pytest.approx(2.0)
    assert sample_std([1.0, 2.0]) == pytest.approx(statistics.stdev([1.0, 2.0]))
    assert sample_std([5.0]) is None and sample_std([]) is None


def test_metric_value_reads_v1_and_v2_names():
    assert metric_value({"exact_match": 1.0, "f1": 2.0}, "em") == 1.0
    assert metric_value({"exact": 3.0, "f1": 2.0, "best_f1": 4.0}, "em") == 3.0
    assert metric_value({"exact": 3.0, "f1": 2.0, "best_f1": 4.0}, "best_f1") == 4.0
    with pytest.raises(KeyError, match="f1"):
        metric_value({"exact": 3.0}, "f1")


def test_cell_stats_mean_std_and_seeds():
    exp = experiment_from_dict(HEADS)
    results = heads_results()
    cell = [r for r in exp.runs() if r.name.startswith("head=independent,train_size=256")]
    stats = cell_stats(cell, results, ("f1", "em"))
    assert stats.seeds == (0, 1, 2) and stats.expected == 3
    assert stats.means["f1"] == pytest.approx(82.0) and stats.stds["f1"] == pytest.approx(2.0)
    assert stats.means["em"] == pytest.approx(72.0)
    assert stats.stds["em"] == pytest.approx(statistics.stdev([70.0, 71.0, 75.0]))
    assert stats.format("f1") == "82.00 ± 2.00 (3)"
    one = [r for r in exp.runs() if r.name.startswith("head=independent,train_size=512")]
    assert cell_stats(one, results, ("f1",)).format("f1") == "90.00 ± n/a (1)"
    none = [r for r in exp.runs() if r.name.startswith("head=dyrex+joint,train_size=512")]
    assert cell_stats(none, results, ("f1",)).format("f1") == "—"


def test_machine_line_tells_apart_cpus_sold_under_one_name():
    """Two machines both reporting "AMD EPYC" differ in vector ISA and bf16 support, which
    decide whether bf16 autocast is on: the table's machine line must show it."""
    exp = experiment_from_dict(HEADS, source="configs/lowdata/heads.yaml")
    old = result("a", 80.0, 70.0)  # recorded before cpu_capability existed
    wide = result("b", 82.0, 71.0) | {"bf16": True}
    wide["machine"] = wide["machine"] | {"cpu_capability": "AVX512", "native_bf16": True}
    narrow = result("c", 84.0, 75.0)
    narrow["machine"] = narrow["machine"] | {"cpu_capability": "AVX2", "native_bf16": False}
    slow_bf16 = result("d", 83.0, 74.0)
    slow_bf16["machine"] = slow_bf16["machine"] | {
        "cpu": "Other CPU",
        "cpu_capability": "AVX512",
        "native_bf16": True,
        "cpu_kind": "avx512f, native bf16 but 0.74x fp32's speed, VNNI",
    }
    results = {
        "head=independent,train_size=256,seed=0": old,
        "head=independent,train_size=256,seed=1": wide,
        "head=independent,train_size=256,seed=2": narrow,
        "head=dyrex+joint,train_size=256,seed=0": slow_bf16,
    }
    text = render_table(exp, exp.runs(), results, "configs/lowdata/heads.yaml")
    line = next(x for x in text.splitlines() if x.startswith("- machine(s):"))
    assert "Test CPU · 2 cores" in line  # the old record, as before
    assert "Test CPU (AVX512, native bf16) · 2 cores" in line and "cpu, bf16 on" in line
    assert "Test CPU (AVX2) · 2 cores" in line
    # where the kind was recorded, it says whether bf16 is also fast there
    assert "Other CPU (avx512f, native bf16 but 0.74x fp32's speed, VNNI) · 2 cores" in line
    # one run under bf16, two in fp32: the header says the table mixes formats, and which
    assert (
        "- precision: mixed, bf16 autocast in 1 run and fp32 in 3 "
        "(bf16: `head=independent,train_size=256,seed=1`)"
    ) in text
    uniform = render_table(exp, exp.runs(), heads_results(), "configs/lowdata/heads.yaml")
    assert "- precision:" not in uniform


def test_summary_schema_for_the_lowdata_grid():
    exp = experiment_from_dict(HEADS)
    out = summary(exp, exp.runs(), heads_results())
    assert list(out) == ["independent", "dyrex+joint"]
    assert list(out["independent"]) == ["256", "512"]
    assert list(out["dyrex+joint"]) == ["256"]  # cells without results are left out
    cell = out["independent"]["256"]
    assert set(cell) == {"f1_mean", "f1_std", "em_mean", "em_std", "seeds"}
    assert cell["f1_mean"] == pytest.approx(82.0) and cell["f1_std"] == pytest.approx(2.0)
    assert cell["seeds"] == [0, 1, 2]
    single = out["independent"]["512"]
    assert single["f1_std"] is None and single["em_std"] is None and single["seeds"] == [1]
    assert out["dyrex+joint"]["256"]["em_mean"] == pytest.approx(51.0)
    json.dumps(out)  # plain JSON


def test_summary_names_rename_rows_and_unknown_rows_are_refused():
    named = {**HEADS, "table": {**HEADS["table"], "summary_names": {"dyrex+joint": "dyrex/joint"}}}
    exp = experiment_from_dict(named)
    out = summary(exp, exp.runs(), heads_results())
    assert list(out) == ["independent", "dyrex/joint"]
    assert out["dyrex/joint"]["256"]["em_mean"] == pytest.approx(51.0)
    typo = {**HEADS, "table": {**HEADS["table"], "summary_names": {"dyrex": "dyrex/joint"}}}
    with pytest.raises(ConfigError, match=r"summary_names.*dyrex"):
        experiment_from_dict(typo)
    clash = {
        **HEADS,
        "table": {**HEADS["table"], "summary_names": {"dyrex+joint": "x", "independent": "x"}},
    }
    with pytest.raises(ConfigError, match="same name"):
        experiment_from_dict(clash)


def test_table_markdown_has_header_and_both_metric_tables(tmp_path):
    exp = experiment_from_dict(HEADS, source="configs/lowdata/heads.yaml")
    results = heads_results()
    text = render_table(exp, exp.runs(), results, "configs/lowdata/heads.yaml")
    assert "- config: `configs/lowdata/heads.yaml`" in text
    assert "- reproduce: `structqa experiment configs/lowdata/heads.yaml`" in text
    assert "`0123456789ab` (clean)" in text and "`0123456789ab` (dirty)" in text
    assert "Test CPU · 2 cores · 2 torch threads · torch 2.x · cpu, bf16 off" in text
    assert "6 of 12 finished" in text and "total wall time 6 min" in text
    assert "sample std (ddof=1)" in text and "n/a" in text
    assert "head=independent, train_size=512 (1 of 3)" in text
    assert "head=dyrex+joint, train_size=512 (0 of 3)" in text
    assert "head=independent, train_size=256 (" not in text  # complete
    f1, em = text.split("## F1")[1].split("## EM")
    assert "| head | train_size=256 | train_size=512 |" in f1
    assert "| independent | 82.00 ± 2.00 (3) | 90.00 ± n/a (1) |" in f1
    assert "| dyrex+joint | 60.50 ± 0.71 (2) | — |" in f1
    assert "| independent | 72.00 ± 2.65 (3) | 85.50 ± n/a (1) |" in em


def test_reproduce_line_keeps_the_path_options_the_results_were_made_with():
    exp = experiment_from_dict(HEADS, source="configs/lowdata/heads.yaml")
    results = heads_results()
    for r in results.values():
        r["command"] = (
            "structqa experiment configs/lowdata/heads.yaml --only seed=0 --threads 1 "
            "--results out/res '--runs-dir=/scratch/my runs' --data ../data"
        )
    text = render_table(exp, exp.runs(), results, "configs/lowdata/heads.yaml")
    # --only/--threads are how one worker ran, not where the grid lives: left out
    assert (
        "- reproduce: `structqa experiment configs/lowdata/heads.yaml --results out/res "
        "--runs-dir '/scratch/my runs' --data ../data`"
    ) in text
    # a result reused from another experiment keeps that one's command: not this table's
    others = list(results.values())
    others[1]["reused_from"] = {"result": "docs/results/other/runs/x.json"}
    others[1]["command"] = "structqa experiment configs/other.yaml --results docs/results/other"
    text = render_table(exp, exp.runs(), results, "configs/lowdata/heads.yaml")
    assert "docs/results/other" not in text.split("- reproduce:")[1].splitlines()[0]
    first = next(iter(results.values()))
    first["command"] = "structqa experiment configs/lowdata/heads.yaml"
    mixed = render_table(exp, exp.runs(), results, "configs/lowdata/heads.yaml")
    line = next(x for x in mixed.splitlines() if x.startswith("- reproduce:"))
    assert "`structqa experiment configs/lowdata/heads.yaml`;" in line
    assert "--results out/res" in line and "different path options" in line


def test_rows_only_table_puts_metrics_in_columns():
    exp = experiment_from_dict(
        {
            "name": "masks",
            "variants": [
                {"name": "static", "model.head": "independent"},
                {"name": "dyrex-causal", "model.head": "dyrex"},
            ],
            "grid": {"train.seed": [0, 1]},
            "table": {"rows": ["variant"]},
        }
    )
    results = {
        "variant=static,seed=0": result("s0", 50.0, 40.0),
        "variant=static,seed=1": result("s1", 52.0, 42.0),
        "variant=dyrex-causal,seed=0": result("d0", 55.0, 45.0),
    }
    text = render_table(exp, exp.runs(), results, "configs/masks.yaml")
    assert "| variant | F1 | EM |" in text
    assert "| static | 51.00 ± 1.41 (2) | 41.00 ± 1.41 (2) |" in text
    assert "| dyrex-causal | 55.00 ± n/a (1) | 45.00 ± n/a (1) |" in text


def test_last_epoch_metric_reads_the_final_evaluation_of_the_history():
    exp = experiment_from_dict(
        {
            "name": "recipe",
            "grid": {"train.lr": [1e-4], "train.seed": [0, 1, 2]},
            "table": {"rows": ["train.lr"], "metrics": ["last_f1", "f1"]},
        }
    )

    def run(best: float, history: list[tuple[int, float]], steps: int = 20):
        hist = [
            {"epoch": i + 1, "step": st, "exact_match": 0.0, "f1": f}
            for i, (st, f) in enumerate(history)
        ]
        return {**result("r", best, 0.0), "eval_history": hist, "steps": steps}

    results = {
        # best epoch 60, last epoch 50
        "lr=0.0001,seed=0": run(60.0, [(10, 60.0), (20, 50.0)]),
        "lr=0.0001,seed=1": run(70.0, [(10, 40.0), (20, 70.0)]),
        # interrupted history: its last evaluation is not at the final step -> no last_f1
        "lr=0.0001,seed=2": run(80.0, [(10, 80.0)]),
    }
    assert result_metric(results["lr=0.0001,seed=0"], "last_f1") == 50.0
    assert result_metric(results["lr=0.0001,seed=0"], "last_em") == 0.0
    assert result_metric(results["lr=0.0001,seed=2"], "last_f1") is None
    assert result_metric(result("x", 1.0, 2.0), "last_f1") is None  # no history at all
    text = render_table(exp, exp.runs(), results, "configs/recipe.yaml")
    assert "| lr | F1 after the last epoch | F1 |" in text
    assert "| 0.0001 | 60.00 ± 14.14 (2) | 70.00 ± 10.00 (3) |" in text
    assert "'after the last epoch' is the final checkpoint's" in text


def test_refresh_writes_table_and_summary_and_ignores_stale_results(tmp_path):
    exp = experiment_from_dict(HEADS)
    for name, res in heads_results().items():
        write_json(tmp_path / "runs" / f"{name}.json", {**res, "run": name})
    write_json(tmp_path / "runs" / "old.json", {**result("old", 1.0, 1.0), "run": "old"})
    results = load_results(tmp_path)
    assert len(results) == 7
    refresh(exp, plan(exp, results), results, tmp_path, "configs/lowdata/heads.yaml")
    table = (tmp_path / "table.md").read_text()
    assert "not in this grid (ignored): 1" in table
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["independent"]["256"]["f1_mean"] == pytest.approx(82.0)
    assert "old" not in json.dumps(data)


def test_extra_seed_runs_count_in_their_cell():
    data = {
        **HEADS,
        "grid": {"model.head": ["independent"], "data.train_size": [256], "train.seed": [0, 1, 2]},
        "seeds_if_noisy": {"std_above": 2.0, "seeds": [3, 4]},
    }
    exp = experiment_from_dict(data)
    results = {
        f"head=independent,train_size=256,seed={s}": result(str(s), f1, 0.0)
        for s, f1 in [(0, 70.0), (1, 80.0), (2, 75.0), (3, 75.0)]
    }
    runs = plan(exp, results)
    assert len(runs) == 5
    cell = summary(exp, runs, results)["independent"]["256"]
    assert cell["seeds"] == [0, 1, 2, 3] and cell["f1_mean"] == pytest.approx(75.0)
    text = render_table(exp, runs, results, "x.yaml")
    assert "incl. 2 extra-seed runs" in text and "(4 of 5)" in text


def test_baseline_differences_pair_runs_by_seed():
    exp = experiment_from_dict({**HEADS, "table": {**HEADS["table"], "baseline": "independent"}})
    text = render_table(exp, exp.runs(), heads_results(), "configs/lowdata/heads.yaml")
    section = text.split("## F1 minus independent, paired by seed", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| dyrex+joint")]
    # pairs: seed 0 (60 - 80) and seed 2 (61 - 84); seed 1 has no dyrex+joint result
    diffs = [60.0 - 80.0, 61.0 - 84.0]
    std = statistics.stdev(diffs)
    assert rows == [
        f"| dyrex+joint | {statistics.fmean(diffs):+.2f} ± {std:.2f} (2; 0 higher) | — |"
    ]
    # the baseline has no row of its own in the difference table
    assert "| independent |" not in section


def test_baseline_must_be_a_row():
    with pytest.raises(ConfigError, match="'indep' is not a row.*did you mean 'independent'"):
        experiment_from_dict({**HEADS, "table": {**HEADS["table"], "baseline": "indep"}})
    with pytest.raises(ConfigError, match="'zzz' is not a row; rows: 'independent', 'dyrex"):
        experiment_from_dict({**HEADS, "table": {**HEADS["table"], "baseline": "zzz"}})


def test_contrasts_list_each_seed_pair_of_two_rows():
    exp = experiment_from_dict(
        {
            "name": "arms",
            "variants": [{"name": n} for n in ("none", "token", "anna")],
            "grid": {"train.seed": [0, 1, 2]},
            "table": {"rows": ["variant"], "baseline": "none", "contrasts": [["anna", "token"]]},
        }
    )
    assert exp.table.contrasts == (("anna", "token"),)
    f1 = {"none": [50.0, 51.0, 49.0], "token": [30.0, 40.0, 20.0], "anna": [35.0, 39.0, 45.0]}
    results = {
        f"variant={v},seed={s}": result(f"{v}{s}", x, 0.0)
        for v, xs in f1.items()
        for s, x in enumerate(xs)
        if (v, s) != ("token", 1)  # seed 1 unpaired: left out
    }
    text = render_table(exp, exp.runs(), results, "x.yaml")
    section = text.split("## F1 contrasts, paired by seed", 1)[1]
    diffs = [35.0 - 30.0, 45.0 - 20.0]
    mean, std = statistics.fmean(diffs), statistics.stdev(diffs)
    assert f"| anna − token | {mean:+.2f} ± {std:.2f} (2; 2 higher) — 0: +5.00, 2: +25.00 |" in (
        section
    )
    # the baseline section is still there, and a contrast names no baseline row
    assert "## F1 minus none, paired by seed" in text and "none −" not in section


def test_contrasts_must_name_two_different_rows():
    base = {
        "name": "arms",
        "variants": [{"name": "token"}, {"name": "anna"}],
        "grid": {"train.seed": [0]},
    }
    table = {"rows": ["variant"]}
    with pytest.raises(
        ConfigError, match=r"contrasts\[0\]: 'ana' is not a row.*did you mean 'anna'"
    ):
        experiment_from_dict({**base, "table": {**table, "contrasts": [["ana", "token"]]}})
    with pytest.raises(ConfigError, match=r"contrasts\[0\]: expected \[row, row\]"):
        experiment_from_dict({**base, "table": {**table, "contrasts": [["anna"]]}})
    with pytest.raises(ConfigError, match="both sides are the row 'anna'"):
        experiment_from_dict({**base, "table": {**table, "contrasts": [["anna", "anna"]]}})
    with pytest.raises(ConfigError, match="expected a list of"):
        experiment_from_dict({**base, "table": {**table, "contrasts": "anna - token"}})


def test_baseline_is_read_as_its_row_keys_type_and_works_without_columns():
    exp = experiment_from_dict(
        {
            "name": "rec",
            "grid": {"train.lr": [3e-5, 1e-4], "train.seed": [0, 1, 2]},
            "table": {"rows": ["train.lr"], "baseline": "1e-4"},  # YAML's string form
        }
    )
    assert exp.table.baseline == "0.0001"
    results = {
        "lr=3e-05,seed=0": result("a", 50.0, 40.0),
        "lr=3e-05,seed=1": result("b", 54.0, 40.0),
        "lr=0.0001,seed=0": result("c", 60.0, 50.0),
        "lr=0.0001,seed=1": result("d", 61.0, 50.0),
        "lr=0.0001,seed=2": result("e", 70.0, 50.0),  # no partner: left out of the pairs
    }
    text = render_table(exp, exp.runs(), results, "x.yaml")
    section = text.split("## F1 minus 0.0001, paired by seed", 1)[1]
    diffs = [50.0 - 60.0, 54.0 - 61.0]
    mean, std = statistics.fmean(diffs), statistics.stdev(diffs)
    assert f"| 3e-05 | {mean:+.2f} ± {std:.2f} (2; 0 higher) |" in section


def test_baseline_with_several_row_keys_is_a_list():
    exp = experiment_from_dict(
        {
            "name": "two",
            "grid": {"model.head": ["independent", "dyrex"], "train.lr": [1e-4], "train.seed": [0]},
            "table": {"rows": ["model.head", "train.lr"], "baseline": ["independent", 1.0e-4]},
        }
    )
    assert exp.table.baseline == "independent,0.0001"
    results = {
        "head=independent,lr=0.0001,seed=0": result("a", 50.0, 40.0),
        "head=dyrex,lr=0.0001,seed=0": result("b", 53.0, 40.0),
    }
    text = render_table(exp, exp.runs(), results, "x.yaml")
    assert "| dyrex | 0.0001 | +3.00 ± n/a (1; 1 higher) |" in text


def test_a_commit_nobody_checked_is_not_shown_as_clean():
    from structqa.experiments.aggregate import _commit

    stated = {"git": {"commit": "d23f4ef", "dirty": None, "source": "STRUCTQA_GIT_COMMIT"}}
    assert _commit(stated) == ("`d23f4ef` (stated by STRUCTQA_GIT_COMMIT, not checked for edits)")
    assert "not checked" in _commit({"git": {"commit": "abc", "dirty": None}})
    assert _commit({"git": {"commit": "abc", "dirty": False}}) == "`abc` (clean)"
    assert _commit({"git": {"commit": None}}) == "`unknown` (not a git checkout)"


def test_the_header_names_a_cut_evaluation_file_and_the_model_init_weights():
    exp = experiment_from_dict(HEADS, source="configs/lowdata/heads.yaml")
    results = heads_results()
    text = render_table(exp, exp.runs(), results, "c.yaml")
    assert "data.eval_size" not in text and "model.init)" not in text  # neither was recorded
    eval_file = "splits/squad1-heldout.mrqa.jsonl.gz"
    for r in results.values():
        r["config"] = {"data": {"eval": eval_file, "eval_size": 64}}
    text = render_table(exp, exp.runs(), results, "c.yaml")
    assert f"scored on the first 64 questions of `{eval_file}` (data.eval_size)" in text
    results["head=independent,train_size=256,seed=0"]["config"]["data"]["eval_size"] = None
    text = render_table(exp, exp.runs(), results, "c.yaml")
    assert f"the first 64 questions of `{eval_file}` (5 of 6 runs)" in text
    # a DROP grid's start (model.init), by the digest its results recorded (older ones: none)
    start = "runs/ncbert/pretrain-synthetic/best"
    digest = "ab12" * 16
    for name in list(results)[:3]:
        results[name]["local_weights"] = {"model.init": {"path": start, "weights_sha256": digest}}
    text = render_table(exp, exp.runs(), results, "c.yaml")
    assert f"- started from (model.init): `{start}` (weights sha256 `{digest[:12]}`)" in text
