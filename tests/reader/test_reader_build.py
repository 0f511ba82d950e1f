"""`structqa reader build` on a small cut of the real SQuAD splits with a tiny encoder: the
training data leaves out both held-out splits' passages, the stages run in order and leave
their records, an interrupted build goes on from its last checkpoint when run again, and the
built reader is what `ask`, `serve` and `model.init_from=reader` find."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from structqa.calibration.report import load_calibration, save_calibration
from structqa.cli import main
from structqa.data.overlap import passage_key
from structqa.data.readers import read_extractive
from structqa.paths import find_reader
from structqa.provenance import git_info
from structqa.reader.data import HELDOUT_SQUAD1, HELDOUT_SQUAD2, POOL, SQUAD2_TRAIN, assemble

pytest.importorskip("spacy")


def _mrqa_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def _write_mrqa(path: Path, header: str, records: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join([header, *records]) + "\n")


def _squad2_cut(doc: dict, articles: int, paragraphs: int) -> dict:
    data = [{**a, "paragraphs": a["paragraphs"][:paragraphs]} for a in doc["data"][:articles]]
    return {**doc, "data": data}


@pytest.fixture(scope="module")
def small_data(shared_data: Path, tmp_path_factory) -> Path:
    """The four splits, cut small, keeping the overlaps the build must remove: a pool passage
    that SQuAD 2.0's held-out split also holds, and SQuAD 2.0 training questions that repeat
    the pool's."""
    out = tmp_path_factory.mktemp("reader-data")
    squad2_held = json.loads((shared_data / HELDOUT_SQUAD2).read_text())
    squad2_train = json.loads((shared_data / SQUAD2_TRAIN).read_text())
    held2 = _squad2_cut(squad2_held, 1, 2)
    train2 = _squad2_cut(squad2_train, 2, 3)  # one article is held out as the slice
    held2_keys = {passage_key(p["context"]) for a in held2["data"] for p in a["paragraphs"]}
    train2_keys = {passage_key(p["context"]) for a in train2["data"] for p in a["paragraphs"]}
    pool_lines = _mrqa_lines(shared_data / POOL)
    records = pool_lines[1:]
    keep = records[:8]
    keep += [r for r in records if passage_key(json.loads(r)["context"]) in held2_keys][:1]
    keep += [r for r in records if passage_key(json.loads(r)["context"]) in train2_keys][:2]
    _write_mrqa(out / POOL, pool_lines[0], keep)
    held1 = _mrqa_lines(shared_data / HELDOUT_SQUAD1)
    _write_mrqa(out / HELDOUT_SQUAD1, held1[0], held1[1:4])
    for name, doc in ((HELDOUT_SQUAD2, held2), (SQUAD2_TRAIN, train2)):
        (out / name).write_text(json.dumps(doc), encoding="utf-8")
    return out


def test_the_training_data_leaves_out_both_held_out_splits(small_data: Path, tmp_path: Path):
    from structqa.text.annotate import Annotator

    plain = tmp_path / "passages"
    by_passage = assemble(small_data, plain, Annotator().annotate, seed=0)  # the default
    assert not by_passage.slice_articles and not (plain / "slice.v2.json").exists()
    counts = assemble(small_data, tmp_path, Annotator().annotate, seed=0, hold_out_articles=True)
    train = read_extractive(tmp_path / "train.v2.json").examples
    pool = read_extractive(tmp_path / "squad1-pool.json").examples
    held = {
        passage_key(ex.context)
        for name in (HELDOUT_SQUAD1, HELDOUT_SQUAD2)
        for ex in read_extractive(small_data / name).examples
    }
    assert counts.pool_dropped_heldout > 0  # the cut holds a passage of SQuAD 2.0's held-out
    assert not any(passage_key(ex.context) in held for ex in train)
    assert len(pool) == counts.pool and len(train) == counts.total
    assert counts.squad2_repeated > 0  # SQuAD 2.0 repeats SQuAD 1.1's questions
    assert counts.squad2_unanswerable > 0 and counts.rewrites > 0
    assert sum(counts.rewrites_by_rule.values()) == counts.rewrites  # those kept, by rule
    assert len({ex.id for ex in train}) == len(train)
    # what the pool gains repeats no question (SQuAD itself asks a few twice of one passage)
    pool_keys = {(passage_key(ex.context), passage_key(ex.question)) for ex in pool}
    pool_ids = {ex.id for ex in pool}
    added = [
        (passage_key(ex.context), passage_key(ex.question)) for ex in train if ex.id not in pool_ids
    ]
    assert len(set(added)) == len(added) and not pool_keys & set(added)
    assert sum(ex.is_impossible for ex in train) == counts.squad2_unanswerable + counts.rewrites
    # the validation slice: whole articles of SQuAD 2.0's training split, none trained on
    sliced = read_extractive(tmp_path / "slice.v2.json").examples
    squad2 = read_extractive(small_data / SQUAD2_TRAIN).examples
    held_titles = set(counts.slice_articles)
    assert len(held_titles) == 1 and {ex.title for ex in squad2} > held_titles
    slice_passages = {passage_key(ex.context) for ex in sliced}
    article_passages = {passage_key(ex.context) for ex in squad2 if ex.title in held_titles}
    assert slice_passages == article_passages
    # by default (a slice of passages, drawn by the run) every article trains
    plain_train = read_extractive(plain / "train.v2.json").examples
    assert slice_passages <= {passage_key(ex.context) for ex in plain_train}
    assert len(plain_train) == by_passage.total > counts.total
    assert not slice_passages & {passage_key(ex.context) for ex in train}  # rewrites too
    assert len(sliced) == counts.slice_questions and 0 < counts.slice_unanswerable < len(sliced)
    assert counts.pool_in_slice == sum(ex.id in pool_ids for ex in sliced) > 0
    # the summary's parts add up to the training file
    trained_pool = counts.pool - counts.pool_in_slice
    assert counts.summary().startswith(
        f"{counts.total} questions: {trained_pool} of the SQuAD 1.1 pool's {counts.pool} "
    )
    parts = trained_pool + counts.squad2_answerable + counts.squad2_unanswerable
    assert parts + counts.rewrites == len(train)


def test_a_quarter_of_the_articles_is_held_out_and_none_of_a_single_one() -> None:
    from structqa.data.records import Example
    from structqa.reader.data import slice_articles

    def articles(n: int) -> list[Example]:
        return [Example(f"q{i}", "Who?", f"Text {i}.", title=f"A{i}") for i in range(n)]

    assert slice_articles(articles(1)) == []
    assert len(slice_articles(articles(2))) == 1
    nine = slice_articles(articles(9))
    assert len(nine) == 2 and nine == slice_articles(list(reversed(articles(9))))
    others = {tuple(slice_articles(articles(9), seed=s)) for s in (7, 8, 9)}
    assert others - {tuple(nine)}  # the seed orders the articles


def _build_args(out: Path, data: Path, encoder: Path) -> list[str]:
    return [
        "reader",
        "build",
        f"--out={out}",
        f"--data={data}",
        "--baseline",
        "--heldout-size=6",
        "--no-progress",
        f"--model.encoder={encoder}",
        "--data.max_seq_len=128",
        "--data.doc_stride=48",
        "--train.max_steps=3",
        "--train.batch_size=4",
        "--train.bf16=off",
        "--train.save_every_steps=1",
        "--decode.verifier=lexical",
        "--slice=articles",
    ]


def test_build_stops_resumes_and_is_found(
    small_data: Path, tiny_checkpoint: Path, tmp_path: Path, monkeypatch, capsys
):
    from tiny import interrupt_at_batch

    out = tmp_path / "reader"
    args = [*_build_args(out, small_data, tiny_checkpoint), "--members=1"]  # one run
    real_collate = interrupt_at_batch(monkeypatch, 2)
    assert main(args) == 130  # stopped inside training: resumable, not done
    assert "run the same command again" in capsys.readouterr().err
    assert (out / "stages" / "data.json").is_file()
    assert not (out / "stages" / "train.json").is_file()
    spent = json.loads((out / "stages" / "train.spent").read_text())  # the stopped start's time
    assert spent > 0
    state = json.loads((out / "run" / "last" / "train_state.json").read_text())
    assert not state.get("finished")
    steps_before = state["global_step"]

    from structqa.training import loop

    monkeypatch.setattr(loop, "collate", real_collate)
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "training will take about" in said
    state = json.loads((out / "run" / "last" / "train_state.json").read_text())
    assert state["finished"] and state["global_step"] == 3 > steps_before
    for stage in ("data", "train", "export", "heldout", "baseline"):
        assert (out / "stages" / f"{stage}.json").is_file(), stage
    assert not (out / "stages" / "train.spent").exists()
    assert json.loads((out / "stages" / "train.json").read_text())["seconds"] >= spent
    heldout = json.loads((out / "stages" / "heldout.json").read_text())
    assert set(heldout) >= {"squad1/torch", "squad1/onnx-int8", "squad2/torch", "squad2/onnx-int8"}
    assert "NoAns_f1" in heldout["squad2/torch"] and "ece" in heldout["squad2/torch"]
    assert "NoAns_f1" not in heldout["squad1/torch"]  # answers forced on SQuAD 1.1
    assert (out / "run" / "best" / "calibration.json").is_file()
    assert read_extractive(out / "run" / "validation.v2.json").examples
    assert (out / "run" / "best" / "onnx" / "model.int8.onnx").is_file()
    card = json.loads((out / "card.json").read_text())
    # chosen and calibrated on the held-out articles, as the card's recipe says
    run_cfg = json.loads((out / "run" / "best" / "structqa_config.json").read_text())
    assert run_cfg["data"]["validation"] == str((out / "data" / "slice.v2.json").resolve())
    assert "data.validation=data/slice.v2.json" in card["recipe"]  # named in the folder
    assert card["data"]["counts"]["pool"] > 0 and card["baseline"]["squad1/torch"]["f1"] >= 0
    # the baseline has no slice to fit a threshold on: tuned on the file, as its row says
    assert card["baseline"]["squad2/torch"]["null_threshold_source"] == "this file"
    assert "| reader, onnx-int8 |" in (out / "MODEL_CARD.md").read_text()
    # the card's training time is the run's over both starts, as its train state sums it
    assert card["training_seconds"] == state["seconds"]
    assert json.loads((out / "stages" / "train.json").read_text())["commit"] == git_info()
    assert "every start counted" in (out / "MODEL_CARD.md").read_text()

    # run again: every stage is done, nothing trains
    mtime = (out / "run" / "best" / "model.safetensors").stat().st_mtime_ns
    assert main(args) == 0
    assert "training will take" not in capsys.readouterr().out
    assert (out / "run" / "best" / "model.safetensors").stat().st_mtime_ns == mtime
    # another --heldout-size: both held-out stages scored again, nothing trained or read again
    from structqa.reader import build as build_module

    trained = []
    resized = [a for a in args if not a.startswith("--heldout-size")] + ["--heldout-size=4"]
    with monkeypatch.context() as patch:
        patch.setattr(build_module, "_train", lambda *a, **k: trained.append(a))
        assert main(resized) == 0
    assert not trained
    for stage in ("heldout", "baseline"):
        assert json.loads((out / "stages" / f"{stage}.json").read_text())["heldout_size"] == 4
    assert json.loads((out / "stages" / "baseline.json").read_text())["checkpoint"]

    # the built reader is the default reader
    monkeypatch.setenv("STRUCTQA_HOME", str(tmp_path))
    assert find_reader() == out / "run" / "best"
    monkeypatch.setenv("STRUCTQA_READER", str(out))
    assert find_reader() == out / "run" / "best"
    from structqa.config import load_config
    from structqa.models.build import build_model

    cfg = load_config(None, [f"model.encoder={tiny_checkpoint}", "model.init_from=reader"])
    build_model(cfg)  # starts from the reader's weights (a missing one would raise)
    # predict and the Python API take the reader's folder as serve and ask do
    from structqa.prediction import Predictor

    predictor = Predictor.from_checkpoint(out, bf16="off")
    assert predictor.source == out / "run" / "best"
    ask = ["--question", "Who won?", "--context", "The Broncos won.", "--bf16", "off"]
    capsys.readouterr()
    assert main(["predict", str(out), *ask]) == 0
    assert "answer" in json.loads(capsys.readouterr().out)
    from structqa.models.build import not_a_checkpoint

    assert f"give {out / 'run' / 'best'}" in not_a_checkpoint(out)  # the others' error
    from structqa.calibration import load_calibration
    from structqa.prediction.calibrate import calibrate_checkpoint

    slice_file = str(out / "run" / "validation.v2.json")
    cal = calibrate_checkpoint(out, on=slice_file, bf16="off", answer_all=True)
    assert not (out / "calibration.json").exists()  # fitted into the checkpoint that answers
    assert load_calibration(out / "run" / "best") == cal


def test_a_soup_of_runs_is_built_stopped_resumed_and_calibrated(
    small_data: Path, tiny_checkpoint: Path, tmp_path: Path, monkeypatch, capsys
):
    from tiny import interrupt_at_batch

    from structqa.training import loop

    out = tmp_path / "reader"
    args = [a for a in _build_args(out, small_data, tiny_checkpoint) if a != "--baseline"]
    # the default: two runs from one start
    real_collate = interrupt_at_batch(monkeypatch, 5)  # in the second run
    assert main(args) == 130
    assert (out / "stages" / "member-0.json").is_file()
    assert not (out / "stages" / "member-1.json").is_file()
    assert "(2 of 2 runs to train)" in capsys.readouterr().out
    monkeypatch.setattr(loop, "collate", real_collate)
    assert main(args) == 0
    assert "(1 of 2 runs to train)" in capsys.readouterr().out
    configs = [
        json.loads((out / "members" / f"m{i}" / "best" / "structqa_config.json").read_text())
        for i in (0, 1)
    ]
    assert [c["train"]["seed"] for c in configs] == [0, 1]
    assert [c["train"]["init_seed"] for c in configs] == [0, 0]
    best = out / "run" / "best"
    soup = json.loads((best / "soup.json").read_text())
    assert soup["kind"] == "greedy" and len(soup["members"]) == 2 and soup["kept"]
    assert soup["score"] >= max(soup["member_scores"])
    assert (best / "calibration.json").is_file() and (best / "onnx" / "model.int8.onnx").is_file()
    assert read_extractive(out / "run" / "validation.v2.json").examples
    card = json.loads((out / "card.json").read_text())
    assert card["soup"]["members"] == soup["members"] and card["heldout"]["squad1/torch"]
    states = [
        json.loads((out / "members" / f"m{i}" / "last" / "train_state.json").read_text())
        for i in (0, 1)
    ]
    # member 0 trained in the first command, member 1 in both: the card counts all of it
    assert card["training_seconds"] == pytest.approx(sum(s["seconds"] for s in states))
    assert "greedy soup" in (out / "MODEL_CARD.md").read_text()
    assert find_reader(str(out)) == best
    # calibrated by the calibrate stage, which the card follows
    calibrated = json.loads((out / "stages" / "calibrate.json").read_text())
    assert card["calibration"] == calibrated["calibration"]
    assert load_calibration(best).null_threshold == calibrated["calibration"]["null_threshold"]
    # a build finished before that stage existed: run again, it is calibrated and its
    # held-out scores taken again, at the new threshold; nothing trains
    from structqa.reader import build as build_module

    before = (out / "stages" / "heldout.json").stat().st_mtime_ns
    (out / "stages" / "calibrate.json").unlink()
    save_calibration(best, dataclasses.replace(load_calibration(best), null_threshold=99.0))
    trained: list = []
    with monkeypatch.context() as patch:
        patch.setattr(build_module, "_train", lambda *a, **k: trained.append(a))
        assert main(args) == 0
    assert not trained and (out / "stages" / "calibrate.json").is_file()
    threshold = load_calibration(best).null_threshold
    assert threshold != 99.0
    for runtime in ("torch", "onnx-int8"):
        scored = out / "heldout" / "reader" / f"squad2-{runtime}" / "metrics.json"
        assert json.loads(scored.read_text())["null_threshold"] == pytest.approx(threshold)
    exported = json.loads((best / "onnx" / "calibration.json").read_text())
    assert exported["null_threshold"] == pytest.approx(threshold)
    assert (out / "stages" / "heldout.json").stat().st_mtime_ns > before
    # the same directory with another --members is refused, naming what it holds
    single = [*args, "--members=1"]
    assert main(single) == 2
    assert "built with --members 2, not 1" in capsys.readouterr().err


def test_no_reader_is_a_clear_error(monkeypatch, tmp_path: Path, capsys):
    monkeypatch.setenv("STRUCTQA_HOME", str(tmp_path))
    assert find_reader() is None
    assert main(["serve"]) == 2
    assert "structqa reader build" in capsys.readouterr().err
    monkeypatch.setenv("STRUCTQA_READER", str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match="neither a checkpoint"):
        find_reader()


def test_the_estimate_counts_only_the_steps_a_stopped_run_has_left(tmp_path: Path):
    from structqa.config import load_config
    from structqa.reader.build import estimate_seconds

    cfg = load_config(
        None,
        [f"train.output_dir={tmp_path / 'run'}", "train.max_steps=100", "data.validation=null"],
    )
    whole = estimate_seconds(1000, cfg, 2.0)
    assert whole == 200.0
    last = tmp_path / "run" / "last"
    last.mkdir(parents=True)
    (last / "train_state.json").write_text(json.dumps({"global_step": 40, "finished": False}))
    assert estimate_seconds(1000, cfg, 2.0) == pytest.approx(120.0)
    (last / "train_state.json").write_text(json.dumps({"global_step": 100, "finished": True}))
    assert estimate_seconds(1000, cfg, 2.0) == 0.0
    # a validation file of 120 questions: a forward pass (a third of a step) per epoch
    fresh = load_config(None, [f"train.output_dir={tmp_path / 'other'}", "train.max_steps=100"])
    passes = 120 * 1.05 / fresh.train.batch_size * 2.0 / 3 * fresh.train.epochs
    fresh.data.validation = str(tmp_path / "slice.v2.json")
    assert estimate_seconds(1000, fresh, 2.0, 120) == pytest.approx(200.0 + passes)


def test_the_reader_is_chosen_on_the_held_out_articles_else_on_passages(tmp_path: Path):
    from structqa.reader.data import PASSAGE_SLICE, validation_settings

    assert validation_settings(tmp_path, 750) == (
        f"data.validation={(tmp_path / 'slice.v2.json').resolve()}",
    )
    assert validation_settings(tmp_path, 0) == PASSAGE_SLICE  # a single SQuAD 2.0 article


def test_the_build_time_counts_training_over_every_start() -> None:
    """A run stopped and resumed records only its last start in its stage's seconds; the
    card's build time takes the training time the run's train state summed over its starts,
    and falls back to the stage's time where a run did not record it."""
    from structqa.reader.card import build_seconds

    records = {
        "data": {"seconds": 60.0},
        "train": {"seconds": 600.0, "training_seconds": 3000.0},
        "export": {"seconds": 20.0},
        "heldout": {"seconds": 300.0},
        "baseline": None,
        "card": None,
    }
    assert build_seconds(records) == (3380.0, 3000.0)
    soup = {
        "seconds": 100.0,  # member 0 was trained by an earlier command
        "members": [{"training_seconds": 2000.0}, {"training_seconds": 2100.0}],
        "soup_seconds": 70.0,
    }
    assert build_seconds({**records, "train": soup}) == (60 + 20 + 300 + 4100 + 70.0, 4100.0)
    older = {"seconds": 600.0, "training_seconds": None}  # a run from before the count
    assert build_seconds({**records, "train": older}) == (980.0, None)
    # a stage that counted its stopped starts too (featurizing, calibrating each run) is
    # longer than its runs' training: its own time is the build's
    counted = {**soup, "seconds": 4400.0}
    assert build_seconds({**records, "train": counted}) == (60 + 20 + 300 + 4400.0, 4100.0)


def test_the_card_names_each_stages_commit_when_a_build_spans_commits() -> None:
    from structqa.reader.card import _commits

    here = {"commit": "a" * 40, "dirty": False}
    same = {"data": {"commit": here}, "train": {"commit": here}, "baseline": None}
    assert _commits(same, here) == f"commit: `{'a' * 12}`"
    b = {"commit": "b" * 40, "dirty": True}
    spans = {"data": {"seconds": 1.0}, "train": {"commit": b, "members": [{"commit": here}, {}]}}
    assert _commits(spans, here) == (
        f"commits: data `not recorded`, run 0 `{'a' * 12}`, run 1 `not recorded`, "
        f"train `{'b' * 12}+edits`, card `{'a' * 12}`"
    )


def test_a_skipped_calibrate_stage_leaves_the_runs_calibration_on_the_card(tmp_path: Path):
    from structqa.config import load_config
    from structqa.reader.card import write_card

    calibration = {"method": "temperature", "null_threshold": -0.5}
    records = {
        "data": {"summary": "10 questions", "seconds": 1.0},
        "train": {"seconds": 2.0, "calibration": calibration},
        "calibrate": {"skipped": "the slice's 4 questions are not of both kinds", "seconds": 0.1},
        "heldout": None,
        "baseline": None,
    }
    card = write_card(tmp_path, "structqa reader build", [], records, load_config(None, []), None)
    assert card["calibration"] == calibration
    shown = (tmp_path / "MODEL_CARD.md").read_text()
    assert "(the slice's 4 questions are not of both kinds)" in shown


def test_a_folder_built_with_another_recipe_or_slice_is_refused(tmp_path: Path) -> None:
    from structqa.reader.build import BuildOptions, _check_options, _options

    opts = BuildOptions(out=tmp_path)  # the default slice: passages
    recorded = {k: v for k, v in _options(opts).items() if k not in ("recipe", "slice")}
    (tmp_path / "build.json").write_text(json.dumps(recorded))  # before the recipe was kept
    _check_options(opts)  # the same recipe, a slice of passages: goes on
    with pytest.raises(ValueError, match="built with --slice passages, not articles"):
        _check_options(BuildOptions(out=tmp_path, slice="articles"))
    (tmp_path / "build.json").write_text(json.dumps({**recorded, "recipe": ["model.head=x"]}))
    with pytest.raises(ValueError, match="another recipe.*another --out"):
        _check_options(opts)
    (tmp_path / "build.json").write_text(json.dumps(_options(opts)))
    _check_options(opts)


def test_the_data_summary_is_told_from_the_counts_in_this_versions_words() -> None:
    from structqa.reader.data import ReaderData, data_summary

    counts = ReaderData(pool=10, pool_in_slice=3, rewrites=2, slice_articles=["A"])
    counts.slice_questions = 5
    record = {"counts": counts.to_json(), "summary": "10 questions: 10 of the SQuAD 1.1 pool"}
    assert data_summary(record) == counts.summary()
    assert data_summary(record).startswith("9 questions: 7 of the SQuAD 1.1 pool's 10 ")
    older = {"counts": {"pool": 10, "total": 10}, "summary": "as it was written"}
    assert data_summary(older) == "as it was written"  # before articles were held out
    assert data_summary(None) == "not built"
