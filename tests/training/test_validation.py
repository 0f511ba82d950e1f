"""Choosing best/ on validation data, never on the test file: data.validation as a fraction
of the training file (split by context), as a file, or none; the test file read once, after
training; the own-data path from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from structqa.cli import main
from structqa.config import ConfigError, load_config, validate
from structqa.training import data as training_data
from structqa.training.data import load_validation_examples, split_training_file

OWN_DATA = Path(__file__).resolve().parents[1] / "data" / "files" / "own-data"
TRAIN, TEST = OWN_DATA / "bees-train.json", OWN_DATA / "bees-test.json"


def bees_config(*extra: str):
    return load_config(overrides=[f"data.train={TRAIN}", "data.train_size=all", *extra])


def test_a_validation_fraction_takes_whole_contexts_by_its_seed() -> None:
    pool, val, where = split_training_file(bees_config("data.validation=0.2"))
    assert val is not None and "split off" in where
    assert len(pool) + len(val) == 40 and len(val) >= 8  # whole paragraphs of 5 questions
    assert not {e.context for e in pool} & {e.context for e in val}
    again = split_training_file(bees_config("data.validation=0.2"))[1]
    assert [e.id for e in again] == [e.id for e in val]  # deterministic
    seeds = {
        tuple(e.id for e in split_training_file(bees_config(f"data.validation_seed={s}"))[1])
        for s in range(5)
    }
    assert len(seeds) > 1  # the seed chooses the contexts
    # the function other work after training calls gives the same questions
    examples, v2 = load_validation_examples(bees_config("data.validation=0.2"))
    assert [e.id for e in examples] == [e.id for e in val] and v2 is False


def test_a_validation_file_is_read_whole_and_none_means_data_eval() -> None:
    pool, val, where = split_training_file(bees_config(f"data.validation={TEST}"))
    assert len(pool) == 40 and len(val) == 15 and where == str(TEST)
    cfg = bees_config("data.validation=none", f"data.eval={TEST}")
    assert split_training_file(cfg)[1] is None
    assert len(load_validation_examples(cfg)[0]) == 15  # best/ is chosen on data.eval


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["data.validation=none"], "data.eval is not set"),
        (["data.validation=1.5"], "between 0 and 1"),
        (["data.validation=0"], "between 0 and 1"),
    ],
)
def test_bad_validation_settings_are_refused_up_front(overrides, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        validate(bees_config(*overrides))


def test_best_is_chosen_on_validation_and_the_test_file_is_read_once_after_training(
    tmp_path, tiny_checkpoint, monkeypatch
) -> None:
    """The reads of every file during `structqa train`, and what the run had written when
    the test file was read."""
    out = tmp_path / "run"
    reads: list[tuple[str, bool]] = []
    real_read = training_data.read_extractive

    def spy(path, *args, **kwargs):
        state = out / "last" / "train_state.json"
        finished = state.is_file() and json.loads(state.read_text())["finished"]
        reads.append((Path(path).name, finished))
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(training_data, "read_extractive", spy)
    args = [
        "train",
        f"--model.encoder={tiny_checkpoint}",
        f"--data.train={TRAIN}",
        f"--data.eval={TEST}",
        "--data.validation=0.2",
        "--data.train_size=all",
        "--data.max_seq_len=256",
        f"--train.output_dir={out}",
        "--train.epochs=2",
        "--train.batch_size=8",
        "--train.bf16=off",
        "--no-progress",
    ]
    assert main(args) == 0
    # the test file parsed before training (a malformed record fails then, not after hours;
    # nothing of it is scored or featurized), and scored once after training and after the
    # calibration (its null threshold is the one the test is scored at) took its validation
    # questions from the training file again (the same seeded split), never from the test
    # file; that one fit is the one kept
    assert reads == [
        ("bees-train.json", False),
        ("bees-test.json", False),
        ("bees-train.json", True),
        ("bees-test.json", True),
    ]
    # best/ was chosen on the validation questions: its outputs answer exactly those
    val_ids = {e.id for e in split_training_file(bees_config("data.validation=0.2"))[1]}
    best = out / "best"
    assert set(json.loads((best / "predictions.json").read_text())) == val_ids
    history = [
        json.loads(line)
        for line in (out / "metrics.jsonl").read_text().splitlines()
        if '"eval"' in line
    ]
    assert len(history) == 2  # one validation score per epoch
    assert json.loads((best / "metrics.json").read_text())["f1"] == max(
        h["eval"]["f1"] for h in history
    )
    # ... and scored once on the test file, as `structqa evaluate` would
    test_answers = json.loads((best / "eval" / "predictions.json").read_text())
    assert set(test_answers) == {e.id for e in training_data.read_extractive(TEST).examples}


def test_own_data_from_the_command_line(tmp_path, tiny_checkpoint, capsys) -> None:
    """The README's own-data path, on a tiny encoder: train on the file (best/ chosen on a
    slice of it, no test file given), then score the test file once with best/."""
    out = tmp_path / "bees"
    train = [
        "train",
        f"--model.encoder={tiny_checkpoint}",
        f"--data.train={TRAIN}",
        "--data.train_size=all",
        f"--train.output_dir={out}",
        "--train.max_steps=3",
        "--train.batch_size=8",
        "--train.bf16=off",
        "--no-progress",
    ]
    assert main(train) == 0
    printed = capsys.readouterr().out
    # train fits the answers' probabilities on the validation questions that chose best/
    assert (out / "best" / "calibration.json").is_file()
    assert "on the data that chose it" in printed
    assert not (out / "best" / "eval").exists()  # no test file yet
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["validation"] == "0.1" and config["data"]["eval"] is None
    test = ["evaluate", str(out / "best"), "--eval", str(TEST), "--bf16", "off"]
    assert main([*test, "--out", str(tmp_path / "test")]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert {"exact_match", "f1"} <= set(metrics) and metrics["calibrated"] is True
    assert len(json.loads((tmp_path / "test" / "predictions.json").read_text())) == 15
    # the scores are those of the written answers, as the official script computes them
    assert main(["score", str(TEST), str(tmp_path / "test" / "predictions.json")]) == 0
    official = {k: metrics[k] for k in ("exact_match", "f1")}
    assert json.loads(capsys.readouterr().out) == pytest.approx(official)
    # without --eval, evaluate needs the checkpoint's data.eval, which is unset here
    assert main(test[:2]) == 2
    assert "give --eval FILE" in capsys.readouterr().err


def test_a_train_size_beyond_what_validation_left_names_both(tmp_path, tiny_checkpoint, capsys):
    args = [
        "train",
        f"--model.encoder={tiny_checkpoint}",
        f"--data.train={TRAIN}",
        "--data.train_size=40",  # the whole file, but validation takes 5 of it
        f"--train.output_dir={tmp_path / 'run'}",
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "data.train_size" in err and "pool of 35 questions" in err
    assert "after data.validation took 5" in err


def test_a_squad2_test_file_is_scored_at_the_threshold_fitted_on_validation(
    tmp_path, tiny_checkpoint
) -> None:
    """`train` fits the calibration (threshold and verifier) on the validation questions
    before it reads the test file, and scores the test at that threshold, re-scored by the
    verifier: never at a threshold tuned on the test file itself."""
    from structqa.calibration import load_calibration

    train_v2 = _as_squad2(TRAIN, tmp_path / "bees-v2.json")
    out = tmp_path / "run"
    args = [
        "train",
        f"--model.encoder={tiny_checkpoint}",
        f"--data.train={train_v2}",
        f"--data.eval={train_v2}",
        "--data.validation=0.5",
        "--data.train_size=all",
        "--data.max_seq_len=256",
        "--decode.verifier=lexical",
        f"--train.output_dir={out}",
        "--train.max_steps=2",
        "--train.batch_size=8",
        "--train.bf16=off",
        "--no-progress",
    ]
    assert main(args) == 0
    cal = load_calibration(out / "best")
    assert cal is not None and cal.verifier is not None
    tested = json.loads((out / "best" / "eval" / "metrics.json").read_text())
    assert tested["null_threshold"] == cal.null_threshold
    odds = json.loads((out / "best" / "eval" / "null_odds.json").read_text())
    raw = json.loads((out / "best" / "null_odds.json").read_text())  # validation, the model's
    assert set(odds.values()).isdisjoint(raw.values())  # the verifier's odds on the test


def _as_squad2(source: Path, out: Path) -> Path:
    """``source`` with every other question made unanswerable, as SQuAD 2.0."""
    data = json.loads(source.read_text())
    i = 0
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if i % 2:
                    qa["is_impossible"], qa["answers"] = True, []
                i += 1
    data["version"] = "v2.0"
    out.write_text(json.dumps(data))
    return out


def test_a_run_chosen_on_answerable_questions_answers_every_test_question(
    tmp_path, tiny_checkpoint
) -> None:
    """Trained and chosen on answerable questions, a run scores a test file that has
    unanswerable ones as predict answers them, every question answered: its no-answer
    threshold was tuned on the test file itself."""
    from structqa.prediction.predictor import Predictor

    test_v2 = _as_squad2(TEST, tmp_path / "bees-test-v2.json")
    out = tmp_path / "run"
    extra = ["--data.validation=0.5", f"--data.eval={test_v2}"]
    assert main(_bees_args(tiny_checkpoint, out, *extra)) == 0
    tested = json.loads((out / "best" / "eval" / "metrics.json").read_text())
    assert tested["null_threshold_source"].startswith("none: chosen on answerable questions")
    assert tested["NoAns_f1"] == 0.0 and tested["null_threshold"] is None
    answers = json.loads((out / "best" / "eval" / "predictions.json").read_text())
    assert answers and all(answers.values())
    assert Predictor.from_checkpoint(out / "best", bf16="off").null_threshold is None


def test_a_test_file_that_is_the_validation_file_is_refused_before_training(
    tmp_path, tiny_checkpoint, capsys
) -> None:
    out = tmp_path / "run"
    args = _bees_args(tiny_checkpoint, out, f"--data.validation={TEST}", f"--data.eval={TEST}")
    assert main(args) == 2
    assert "data.validation and data.eval are the same file" in capsys.readouterr().err
    assert not (out / "last").exists()


def test_squad1_scoring_of_unanswerable_questions_is_refused_when_read(tmp_path) -> None:
    """``decode.version_2=false`` cannot score a question without an answer: said when the file
    is read, naming it, not after an epoch of training."""
    test_v2 = _as_squad2(TEST, tmp_path / "bees-test-v2.json")
    cfg = bees_config(f"data.eval={test_v2}", "decode.version_2=false")
    with pytest.raises(ValueError, match=r"data.eval: .*bees-test-v2.json holds \d+ unanswer"):
        training_data.load_eval_examples(cfg)
    train_v2 = _as_squad2(TRAIN, tmp_path / "bees-train-v2.json")
    cfg = load_config(
        overrides=[f"data.train={train_v2}", "data.validation=0.5", "decode.version_2=false"]
    )
    with pytest.raises(ValueError, match=r"data.validation=0.5: .*holds \d+ unanswerable"):
        split_training_file(cfg)


def test_validation_the_calibration_cannot_use_is_refused_before_training(
    tmp_path, tiny_checkpoint, capsys
) -> None:
    """One validation question, or none unanswerable to weight to a share: the calibration
    after training failed, and a resume could not change the share; refused up front."""
    one = json.loads(TEST.read_text())
    paragraph = one["data"][0]["paragraphs"][0]
    paragraph["qas"] = paragraph["qas"][:1]
    one["data"] = [{"title": one["data"][0]["title"], "paragraphs": [paragraph]}]
    single = tmp_path / "one.json"
    single.write_text(json.dumps(one))
    out = tmp_path / "run"
    assert main(_bees_args(tiny_checkpoint, out, f"--data.validation={single}")) == 2
    assert "1 question; the calibration" in capsys.readouterr().err
    train_v2 = _as_squad2(TRAIN, tmp_path / "bees-train-v2.json")
    args = _bees_args(tiny_checkpoint, out, f"--data.train={train_v2}")
    assert main([*args, f"--data.validation={TEST}", "--decode.unanswerable_share=0.5"]) == 2
    assert "cannot weight them to decode.unanswerable_share=0.5" in capsys.readouterr().err
    none_answerable = json.loads(TEST.read_text())
    for article in none_answerable["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["is_impossible"], qa["answers"] = True, []
    none_answerable["version"] = "v2.0"
    (tmp_path / "none.json").write_text(json.dumps(none_answerable))
    val = f"--data.validation={tmp_path / 'none.json'}"
    assert main([*args, val, "--decode.unanswerable_share=0.5"]) == 2
    assert "no answerable question among" in capsys.readouterr().err
    assert not (out / "last").exists()


def _bees_args(encoder: Path, out: Path, *extra: str) -> list[str]:
    """`structqa train` on the bees file, one step, with ``extra`` settings."""
    return [
        "train",
        f"--model.encoder={encoder}",
        f"--data.train={TRAIN}",
        "--data.train_size=all",
        f"--train.output_dir={out}",
        "--train.max_steps=1",
        "--train.bf16=off",
        "--no-progress",
        *extra,
    ]


def test_a_broken_test_file_fails_before_training(tmp_path, tiny_checkpoint, capsys) -> None:
    """data.eval is read when the data is, not after hours of training: a record without
    its answers stops the run at once, naming it, and nothing is trained."""
    doc = json.loads(Path(TEST).read_text())
    del doc["data"][0]["paragraphs"][0]["qas"][0]["answers"]
    broken = tmp_path / "test.json"
    broken.write_text(json.dumps(doc))
    out = tmp_path / "run"
    assert main(_bees_args(tiny_checkpoint, out, f"--data.eval={broken}")) == 2
    assert "field 'answers'" in capsys.readouterr().err
    assert not (out / "last").exists() and not (out / "best").exists()


def test_an_excluded_file_with_a_repeated_question_id_still_excludes(tmp_path) -> None:
    from structqa.data.overlap import passages

    doc = json.loads(Path(TEST).read_text())
    first, second = (a["paragraphs"][0]["qas"][0] for a in doc["data"][:2])
    second["id"] = first["id"]  # an id asked twice
    repeated = tmp_path / "test.json"
    repeated.write_text(json.dumps(doc))
    assert len(passages(repeated)) == len(passages(TEST)) > 1


def test_a_validation_file_that_is_the_training_file_is_warned(
    tmp_path, tiny_checkpoint, caplog
) -> None:
    import logging

    args = _bees_args(tiny_checkpoint, tmp_path / "run", f"--data.validation={TRAIN}")
    with caplog.at_level(logging.WARNING):
        assert main(args) == 0
    assert "the validation questions: 40 of 40 questions ask about passages the run trains on" in (
        caplog.text
    )


def test_an_empty_validation_or_test_file_is_refused_before_training(tmp_path) -> None:
    """A file with no question fails when the data is read, naming the file and its key, not
    after an epoch with "no gold questions to score"."""
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"version": "1.1", "data": []}))
    with pytest.raises(ValueError, match=r"data.validation: .*empty.json holds no question"):
        split_training_file(bees_config(f"data.validation={empty}"))
    with pytest.raises(ValueError, match=r"data.eval: .*empty.json holds no question"):
        training_data.load_eval_examples(bees_config(f"data.eval={empty}"))
    with pytest.raises(ValueError, match=r"data.train: .*empty.json holds no question"):
        split_training_file(load_config(overrides=[f"data.train={empty}"]))


def test_unanswerable_questions_in_training_make_validation_squad2_even_if_it_drew_none(
    tmp_path, caplog
) -> None:
    """Whether best/ is chosen by SQuAD 2.0 scores (and a no-answer threshold fitted) is the
    data's property, not the luck of which paragraphs the validation slice drew."""
    import logging

    doc = json.loads(Path(TRAIN).read_text())
    qa = doc["data"][0]["paragraphs"][0]["qas"][0]
    qa["answers"], qa["is_impossible"] = [], True  # one unanswerable question in training
    train = tmp_path / "train.json"
    train.write_text(json.dumps(doc))
    cfg = load_config(overrides=[f"data.train={train}", f"data.validation={TEST}"])
    with caplog.at_level(logging.WARNING):
        val, v2 = load_validation_examples(cfg)
    assert not any(ex.is_impossible for ex in val) and v2
    assert "hold no unanswerable question, but the training data does" in caplog.text
    cfg.decode.version_2 = False  # said outright, it stands
    assert not load_validation_examples(cfg)[1]
    cfg.decode.version_2, cfg.data.answerable_only = None, True  # trained without them
    assert not load_validation_examples(cfg)[1]


def test_a_mistyped_training_file_is_named_in_the_error(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(overrides=["data.train=mydata/train.jsn"])
    with pytest.raises(FileNotFoundError, match=r"^mydata/train.jsn: no such file in "):
        split_training_file(cfg)


def test_no_located_answer_anywhere_says_so_not_lower_the_batch_size(
    tmp_path, tiny_checkpoint, capsys
) -> None:
    doc = json.loads(Path(TRAIN).read_text())
    for article in doc["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["answers"] = [{"text": "zzz not in the text", "answer_start": 0}]
    unlocated = tmp_path / "train.json"
    unlocated.write_text(json.dumps(doc))
    args = _bees_args(tiny_checkpoint, tmp_path / "run", f"--data.train={unlocated}")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "nothing to train on" in err and "answer_start" in err and "batch_size" not in err


def test_with_validation_none_the_test_file_is_scored_as_itself(tmp_path) -> None:
    """best/ chosen on data.eval (a SQuAD 1.1 file) is scored as SQuAD 1.1 even when the
    training data has unanswerable questions: the run's reported test score is that file's."""
    doc = json.loads(Path(TRAIN).read_text())
    qa = doc["data"][0]["paragraphs"][0]["qas"][0]
    qa["answers"], qa["is_impossible"] = [], True
    train = tmp_path / "train.json"
    train.write_text(json.dumps(doc))
    cfg = load_config(
        overrides=[f"data.train={train}", "data.validation=none", f"data.eval={TEST}"]
    )
    assert load_validation_examples(cfg)[1] is False
