"""The `structqa` command: score, train -> evaluate -> predict, and its error messages."""

from __future__ import annotations

import json
import re

import pytest
from tiny import mini_train_args

from structqa.cli import main
from structqa.manifest import write_manifest
from structqa.metrics.squad import squad_v2

MINI = "fixtures/squad-v1.1-mini.json"


def _stdout_json(capsys) -> dict:
    out = capsys.readouterr().out
    return json.loads(out[out.index("{") :])


def test_score_v1_perfect_and_empty(tmp_path, shared_data, capsys):
    data = json.loads((shared_data / MINI).read_text())
    gold = {
        qa["id"]: qa["answers"][0]["text"]
        for art in data["data"]
        for p in art["paragraphs"]
        for qa in p["qas"]
    }
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps(gold))
    assert main(["score", str(shared_data / MINI), str(preds)]) == 0
    assert _stdout_json(capsys) == {"exact_match": 100.0, "f1": 100.0}
    preds.write_text(json.dumps(dict.fromkeys(gold, "")))
    assert main(["score", str(shared_data / MINI), str(preds)]) == 0
    assert _stdout_json(capsys) == {"exact_match": 0.0, "f1": 0.0}


def test_score_and_compare_rename_repeated_ids_as_evaluate_named_them(tmp_path, capsys):
    """A file asking one id twice (different questions): evaluate --data.dedupe_ids=true
    answers ``q1`` and ``q1#2``; score --dedupe-ids scores both, as two questions. Without it
    the repeat keeps the last answers, as the official script does, and ``q1#2`` is not read."""
    qas = [
        {"id": "q1", "question": "Who?", "answers": [{"text": "Ann", "answer_start": 0}]},
        {"id": "q1", "question": "Where?", "answers": [{"text": "Oslo", "answer_start": 12}]},
    ]
    data = {
        "version": "1.1",
        "data": [{"title": "t", "paragraphs": [{"context": "Ann lives in Oslo.", "qas": qas}]}],
    }
    path = tmp_path / "rep.json"
    path.write_text(json.dumps(data))
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({"q1": "Ann", "q1#2": "Oslo"}))
    assert main(["score", str(path), str(preds), "--dedupe-ids"]) == 0
    assert _stdout_json(capsys) == {"exact_match": 100.0, "f1": 100.0}
    assert main(["score", str(path), str(preds)]) == 0
    assert _stdout_json(capsys) == {"exact_match": 0.0, "f1": 0.0}  # q1 is "Oslo" there
    wrong = tmp_path / "w.json"
    wrong.write_text(json.dumps({"q1": "Ann", "q1#2": "Ann"}))
    assert (
        main(
            [
                "compare",
                str(path),
                "--a",
                str(preds),
                "--b",
                str(wrong),
                "--dedupe-ids",
                "--resamples",
                "200",
            ]
        )
        == 0
    )
    assert "A 100.00   B 50.00" in capsys.readouterr().out


def test_score_v2_with_na_probs_matches_metric(tmp_path, shared_data, capsys):
    path = shared_data / "splits" / "squad2-heldout.v2.0.json"
    data = json.loads(path.read_text())
    qas = [qa for art in data["data"] for p in art["paragraphs"] for qa in p["qas"]]
    preds = {
        qa["id"]: (qa["answers"][0]["text"] if qa["answers"] and i % 3 else "x")
        for i, qa in enumerate(qas)
    }
    probs = {qa["id"]: (i % 7) / 7 for i, qa in enumerate(qas)}
    (tmp_path / "p.json").write_text(json.dumps(preds))
    (tmp_path / "na.json").write_text(json.dumps(probs))
    assert (
        main(
            ["score", str(path), str(tmp_path / "p.json"), "--na-probs", str(tmp_path / "na.json")]
        )
        == 0
    )
    got = _stdout_json(capsys)
    gold = {qa["id"]: [a["text"] for a in qa["answers"]] for qa in qas}
    assert got == pytest.approx(squad_v2(gold, preds, probs))
    assert list(got)[:3] == ["exact", "f1", "total"] and got["total"] == 2672
    assert "best_f1_thresh" in got


def test_unknown_config_key_names_the_closest(capsys):
    assert main(["train", "--train.lrr=0.1"]) == 2
    err = capsys.readouterr().err
    assert "train.lrr" in err and "'lr'" in err


def test_missing_data_dir_is_a_clear_error(tmp_path, capsys):
    assert main(["train", f"--data={tmp_path / 'nope'}"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_train_evaluate_predict_end_to_end(tmp_path, tiny_checkpoint, shared_data, capsys):
    out = tmp_path / "run"
    args = [
        *mini_train_args("train", shared_data, tiny_checkpoint, out, MINI, steps=3),
        "--no-progress",
        "--train.batch_size=2",
    ]
    assert main(args) == 0
    metrics = _stdout_json(capsys)
    assert set(metrics) == {"exact_match", "f1", "questions_truncated"}
    assert metrics["questions_truncated"] == 0  # counted, none here
    best = out / "best"
    assert (
        main(
            [
                "evaluate",
                str(best),
                f"--data={shared_data}",
                "--out",
                str(tmp_path / "ev"),
                "--bf16",
                "off",
            ]
        )
        == 0
    )
    evaluated = _stdout_json(capsys)
    assert {k: evaluated[k] for k in metrics} == pytest.approx(metrics)  # same model and data
    # train fitted the probabilities on its validation questions (best/calibration.json)
    assert 0.0 <= evaluated["ece"] <= 1.0 and evaluated["calibrated"] is True
    preds = json.loads((tmp_path / "ev" / "predictions.json").read_text())
    assert len(preds) == 5
    for name in ("nbest_predictions.json", "null_odds.json", "metrics.json"):
        assert (tmp_path / "ev" / name).exists()
    # scoring the written predictions reproduces the evaluation metrics
    assert main(["score", str(shared_data / MINI), str(tmp_path / "ev" / "predictions.json")]) == 0
    scored = {k: v for k, v in metrics.items() if k != "questions_truncated"}
    assert _stdout_json(capsys) == pytest.approx(scored)
    context = "Denver Broncos defeated the Carolina Panthers to win the title."
    assert main(["predict", str(best), "--question", "Who won?", "--context", context]) == 0
    answer = _stdout_json(capsys)
    assert answer["answer"] == context[answer["start"] : answer["end"]]
    assert answer["answer"] and len(answer["nbest"]) >= 1
    out_file = tmp_path / "answers.json"
    assert (
        main(
            [
                "predict",
                str(best),
                "--file",
                str(shared_data / MINI),
                "--out",
                str(out_file),
                "--bf16",
                "off",  # as evaluate above: the same float32 model gives the same answers
            ]
        )
        == 0
    )
    assert json.loads(out_file.read_text()) == preds


def test_quickstart_trains_dyrex_and_shows_answers_by_a_fixed_rule(
    tmp_path, tiny_checkpoint, shared_data, capsys
):
    """The quickstart's own path (config, training, choosing on validation, one test score,
    the shown answers), shrunk to a tiny encoder and 3 steps by the same overrides a user can
    pass."""
    from structqa.commands.quickstart import shown_indices

    out = tmp_path / "qs"
    args = [
        *mini_train_args("quickstart", shared_data, tiny_checkpoint, out, MINI, steps=3),
        "--train.batch_size=2",
    ]
    assert main(args) == 0
    config = json.loads((out / "config.json").read_text())
    # the quickstart's own choices survive the user's overrides of other keys
    assert config["model"]["head"] == "dyrex" and config["train"]["head_lr"] == 1e-3
    assert config["train"]["seed"] == 0 and config["data"]["validation"] == "0.02"
    printed = capsys.readouterr().out
    metrics = json.loads((out / "best" / "eval" / "metrics.json").read_text())
    assert f"held-out EM {metrics['exact_match']:.2f}  F1 {metrics['f1']:.2f}" in printed
    # the shown questions: every k-th of the test file, each with gold and model answers
    data = json.loads((shared_data / MINI).read_text())
    qas = [qa for art in data["data"] for p in art["paragraphs"] for qa in p["qas"]]
    answers = json.loads((out / "best" / "eval" / "predictions.json").read_text())
    picked = shown_indices(len(qas))
    assert picked == [0, 1, 2, 3, 4]  # 5 questions: all of them
    assert shown_indices(2177) == [0, 435, 870, 1305, 1740]
    assert "not chosen for being right" in printed
    for i in picked:
        qa = qas[i]
        assert f"[{i + 1}] Q: {qa['question']}" in printed
        assert f"gold: {qa['answers'][0]['text']}" in printed
        assert f"model: {answers[qa['id']] or '(no answer)'} (probability" in printed
    # the probability shown is the one predict returns: calibrated on the validation slice
    from structqa.prediction.predictor import Predictor

    predictor = Predictor.from_checkpoint(out / "best")
    assert predictor.calibrator is not None
    context = data["data"][0]["paragraphs"][0]["context"]
    shown = re.search(r"\[1\] Q: .*\n.*\n.*\(probability ([\d.]+)%", printed).group(1)
    returned = predictor.predict(qas[0]["question"], context).probability
    assert abs(float(shown) - 100 * returned) < 0.2
    assert "Next:" in printed and "structqa evaluate" in printed and (out / "best").is_dir()
    # and a user's override of one of them wins
    # (as from a script writing a log file: log lines, no progress bars)
    second = [*args, "--no-progress", "--model.head=independent"]
    assert main([*second, f"--train.output_dir={tmp_path / 'q2'}"]) == 0
    assert json.loads((tmp_path / "q2" / "config.json").read_text())["model"]["head"] == (
        "independent"
    )


def test_predictor_batch_matches_single(tiny_trained_run):
    from structqa.prediction.predictor import Predictor

    predictor = Predictor.from_checkpoint(tiny_trained_run / "best", bf16="off")
    pairs = [
        ("Who won?", "The Broncos won the game in Denver."),
        ("Where is the grotto?", "The grotto is a replica of the grotto at Lourdes. " * 30),
    ]
    batch = predictor.predict_batch(pairs)
    for (q, c), b in zip(pairs, batch, strict=True):
        single = predictor.predict(q, c)
        assert single.text == b.text and single.score == pytest.approx(b.score, abs=1e-4)
        assert c[b.start : b.end] == b.text
    with pytest.raises(ValueError, match="non-empty"):
        predictor.predict("", "context")


def test_predictor_whole_words_answers_on_word_boundaries(tiny_trained_run, monkeypatch):
    from structqa.prediction.predictor import Predictor

    ckpt = tiny_trained_run / "best"
    assert Predictor.from_checkpoint(ckpt, bf16="off").decode.whole_words is False
    predictor = Predictor.from_checkpoint(ckpt, bf16="off", whole_words=True)
    assert predictor.decode.whole_words is True
    contexts = [
        "Superbowl50 was won by the DenverBroncos in 2016, unbeatable.",
        "The grotto is a replica of the grotto at Lourdes, France, built in the 1990s. " * 3,
    ]
    for context in contexts:
        ans = predictor.predict("Who won in which yearly thing?", context)
        assert context[ans.start : ans.end] == ans.text
        for c in ans.nbest:  # no answer starts or ends between two letters or digits
            span = context[c.start_char : c.end_char]
            assert span == c.text
            before = context[c.start_char - 1 : c.start_char + 1]
            after = context[c.end_char - 1 : c.end_char + 1]
            assert not (len(before) == 2 and before.isalnum()), (span, before)
            assert not (len(after) == 2 and after.isalnum()), (span, after)
    # the CLI flag reaches the predictor (the real one, spied on)
    made: list[Predictor] = []
    real = Predictor.from_checkpoint.__func__

    def spy(cls, *a, **kw):
        made.append(real(cls, *a, **kw))
        return made[-1]

    monkeypatch.setattr(Predictor, "from_checkpoint", classmethod(spy))
    args = ["predict", str(ckpt), "--question", "Who won?", "--context", contexts[0]]
    assert main([*args, "--bf16", "off"]) == 0
    assert main([*args, "--whole-words", "--bf16", "off"]) == 0
    assert main([*args, "--no-whole-words", "--bf16", "off"]) == 0
    assert [p.decode.whole_words for p in made] == [False, True, False]


def test_score_drop_file(tmp_path, shared_data, capsys):
    path = shared_data / "drop" / "drop-mini.json"
    data = json.loads(path.read_text())
    preds = {}
    for passage in data.values():
        for qa in passage["qa_pairs"]:
            ans = qa["answer"]
            if ans["number"]:
                preds[qa["query_id"]] = ans["number"]
            elif ans["spans"]:
                preds[qa["query_id"]] = ans["spans"]
            else:
                d = ans["date"]
                preds[qa["query_id"]] = " ".join(x for x in (d["day"], d["month"], d["year"]) if x)
    (tmp_path / "p.json").write_text(json.dumps(preds))
    assert main(["score", str(path), str(tmp_path / "p.json")]) == 0
    out, err = capsys.readouterr()
    got = json.loads(out)  # the official DROP output's fractions; percent on stderr
    assert got["global_em"] == 1.0 and got["global_f1"] == 1.0
    assert "DROP: EM 100.00, F1 100.00 (percent, over" in err


def test_training_on_a_drop_file_is_a_clear_error(shared_data, capsys):
    code = main(["train", f"--data={shared_data}", "--data.train=drop/drop-mini.json"])
    assert code == 2
    assert "needs extractive QA data" in capsys.readouterr().err


def test_evaluate_scores_the_whole_file_and_refuses_model_overrides(
    tiny_trained_run, shared_data, tmp_path, capsys
):
    best = tiny_trained_run / "best"
    config = json.loads((best / "structqa_config.json").read_text())
    config["data"]["eval_size"] = 2  # as if trained with a quick held-out check
    (tmp_path / "ckpt").mkdir()
    for f in best.iterdir():
        if f.is_file():
            (tmp_path / "ckpt" / f.name).write_bytes(f.read_bytes())
    (tmp_path / "ckpt" / "structqa_config.json").write_text(json.dumps(config))
    write_manifest(tmp_path / "ckpt")  # the edit is deliberate: record it
    args = ["evaluate", str(tmp_path / "ckpt"), f"--data={shared_data}", "--bf16", "off"]
    assert main([*args, "--out", str(tmp_path / "ev")]) == 0
    assert len(json.loads((tmp_path / "ev" / "predictions.json").read_text())) == 5
    assert main([*args, "--eval-size", "3", "--out", str(tmp_path / "ev3")]) == 0
    assert len(json.loads((tmp_path / "ev3" / "predictions.json").read_text())) == 3
    capsys.readouterr()
    assert main([*args, "--model.head=dyrex"]) == 2
    assert "--model.head cannot change a trained model" in capsys.readouterr().err
    # settings of those sections that a score never reads are refused, not ignored
    assert main([*args, "--decode.verifier=none"]) == 2
    assert "--decode.verifier does not change a score" in capsys.readouterr().err
    assert main([*args, "--data.train_size=16"]) == 2
    assert "--data.train_size does not change a score" in capsys.readouterr().err
    # sizes below 1 are refused, never read as "all but the last" or empty answers
    for bad, said in (
        (["--eval-size", "-1"], "--eval-size must be 1 or more, got -1"),
        (["--decode.n_best=0"], "decode.n_best must be 1 or more"),
        (["--decode.max_answer_length=0"], "decode.max_answer_length must be 1 or more"),
    ):
        assert main([*args, *bad, "--out", str(tmp_path / "bad")]) == 2
        assert said in capsys.readouterr().err


def test_checkpoint_errors_point_into_a_run_directory(tiny_trained_run, capsys):
    assert main(["evaluate", str(tiny_trained_run)]) == 2
    err = capsys.readouterr().err
    assert "not a structqa checkpoint" in err and f"give {tiny_trained_run / 'best'}" in err


def test_predict_argument_errors_are_one_line(tiny_trained_run, shared_data, capsys):
    best = str(tiny_trained_run / "best")
    cases = [
        (["--question", "", "--context", "abc"], "--question is empty"),
        (["--question", "Who?", "--context", "  "], "--context is empty"),
        (["--question", "Who?"], "give --question and --context"),
        (["--question", "Who?", "--file", str(shared_data / MINI)], "not both"),
    ]
    for extra, needle in cases:
        assert main(["predict", best, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err, extra


def test_predict_reads_its_file_before_loading_the_model(tmp_path, capsys):
    """The file was read after the model loaded (and perhaps its int8 export was written): a
    malformed file failed only then. No model is here: the file's error comes first."""
    bad = tmp_path / "mine.jsonl"
    bad.write_text(json.dumps({"id": "q1", "question": "Who?", "context": 7}) + "\n")
    nowhere = str(tmp_path / "no-checkpoint")
    assert main(["predict", nowhere, "--file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: record 'q1 (line 1)', field 'context': expected string" in err
    assert "Traceback" not in err
    # the checkpoint's saved data.dedupe_ids is read without the model: a repeat is renamed
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "structqa_config.json").write_text(json.dumps({"data": {"dedupe_ids": True}}))
    twice = tmp_path / "twice.jsonl"
    record = {"id": "q1", "question": "Who?", "context": "Ann won."}
    twice.write_text((json.dumps(record) + "\n") * 2)
    assert main(["predict", str(saved), "--file", str(twice)]) == 2
    err = capsys.readouterr().err
    assert "duplicate question id" not in err and str(twice) not in err


def test_predict_file_keeps_null_odds_per_predictions_file(tiny_trained_run, shared_data, tmp_path):
    best = str(tiny_trained_run / "best")
    for name in ("a.json", "b.json", "predictions.json"):
        out = tmp_path / name
        args = ["predict", best, "--file", str(shared_data / MINI), "--out", str(out)]
        assert main([*args, "--bf16", "off"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "a.json",
        "a.null_odds.json",
        "b.json",
        "b.null_odds.json",
        "null_odds.json",
        "predictions.json",
    ]


def test_predict_file_answers_questions_that_have_no_answers(
    tiny_trained_run, shared_data, tmp_path
):
    """New questions come without answers: a table of question and context, or JSON lines of
    id, question and context, are answered as the same questions in a labelled file are."""
    import csv

    from structqa.data.readers import read_extractive

    best = str(tiny_trained_run / "best")
    examples = list(read_extractive(shared_data / MINI).examples)[:6]
    examples += [examples[0]]  # a repeat: renamed with --dedupe-ids
    table = tmp_path / "new.csv"
    with table.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "question", "context"])
        writer.writerows([ex.id, ex.question, ex.context] for ex in examples)
    lines = tmp_path / "new.jsonl"
    lines.write_text(
        "".join(
            json.dumps({"id": ex.id, "question": ex.question, "context": ex.context}) + "\n"
            for ex in examples
        ),
        encoding="utf-8",
    )
    labelled = tmp_path / "labelled.json"
    argv = ["predict", best, "--bf16", "off", "--no-progress", "--file"]
    assert main([*argv, str(shared_data / MINI), "--out", str(labelled)]) == 0
    want = json.loads(labelled.read_text())
    for source in (table, lines):
        out = tmp_path / f"{source.stem}-{source.suffix[1:]}.json"
        assert main([*argv, str(source), "--out", str(out)]) == 2  # the repeat, refused
        assert main([*argv, str(source), "--out", str(out), "--dedupe-ids"]) == 0
        got = json.loads(out.read_text())
        first = examples[0].id
        assert got == {**{ex.id: want[ex.id] for ex in examples}, f"{first}#2": want[first]}


def test_os_errors_are_one_line(tmp_path, capsys):
    assert main(["score", str(tmp_path), str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("structqa score: error:") and "Traceback" not in err


def test_compare_says_a_runs_answers_were_not_kept_and_what_to_do(tmp_path, shared_data, capsys):
    results = tmp_path / "docs" / "results" / "lowdata"
    run, other = "head=dyrex,train_size=1024,seed=0", "head=joint,train_size=1024,seed=1"
    (results / "runs").mkdir(parents=True)
    (results / "answers").mkdir()
    out = tmp_path / "runs" / run
    result = {"run": run, "config_file": "configs/lowdata/heads.yaml"}
    result["config"] = {"train": {"output_dir": str(out)}, "data": {"validation": None}}
    (results / "runs" / f"{run}.json").write_text(json.dumps(result))
    (results / "answers" / f"{other}.json.gz").write_bytes(b"")
    unkept = results / "answers" / f"{run}.json.gz"
    argv = ["compare", str(shared_data / MINI), "--a", str(unkept), "--b", str(unkept)]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{unkept}: no such predictions file" in err and "Errno" not in err
    assert "its answers were not kept" in err
    assert f"`structqa experiment configs/lowdata/heads.yaml --only {run}`" in err
    assert f"compare runs that kept theirs (1 in {results / 'answers'}/)" in err
    (out / "best").mkdir(parents=True)  # its output directory still has them
    (out / "best" / "predictions.json").write_text("{}")
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"compare {out / 'best' / 'predictions.json'}, or keep them with" in err
    assert main(["score", str(shared_data / MINI), str(tmp_path / "p.json")]) == 2
    assert (
        capsys.readouterr().err.strip().endswith("no such predictions file or checkpoint directory")
    )


def test_score_names_the_file_record_and_field(tmp_path, capsys):
    bad = tmp_path / "missing_id.json"
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"qas": [{"answers": []}]}]}]}))
    preds = tmp_path / "p.json"
    preds.write_text("{}")
    assert main(["score", str(bad), str(preds)]) == 2
    err = capsys.readouterr().err
    assert "missing_id.json: record 'data[0].paragraphs[0].qas[0]', field 'id'" in err
    listed = tmp_path / "list.json"
    listed.write_text("[]")
    assert main(["score", str(listed), str(preds)]) == 2
    assert "the top level must be an object" in capsys.readouterr().err


def test_predict_writes_only_its_json_to_stdout(tiny_trained_run):
    """Logs go to stderr, so `structqa predict ... | jq` works."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "structqa.cli", "predict", str(tiny_trained_run / "best")]
    cmd += ["--question", "Who won?", "--context", "The Denver Broncos won the game."]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    assert "answer" in json.loads(out.stdout)
    assert "runtime" in out.stderr  # the log line that used to precede the JSON


@pytest.mark.parametrize(
    "argv",
    [
        ["index", "docs", "--out", "idx"],
        ["search", "idx", "--query", "q"],
        ["ask", "idx", "--question", "q"],
        ["serve"],
        ["export", "ckpt"],
        ["corpus", "src", "--out", "c"],
    ],
    ids=lambda argv: argv[0],
)
def test_commands_without_config_refuse_a_stray_override(argv, tmp_path, capsys) -> None:
    # a mistyped option (or a training setting given to the wrong command) is an error before
    # the command reads or writes anything, never silently ignored
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--train.lr=3e-5"])
    assert stopped.value.code == 2
    assert f"{argv[0]} takes no config overrides: --train.lr=3e-5" in capsys.readouterr().err


def test_an_unknown_option_shows_the_commands_usage_and_the_option_meant(capsys) -> None:
    """It printed the whole command list; now the subcommand's usage and the nearest option."""
    with pytest.raises(SystemExit) as stopped:
        main(["search", "idx", "--query", "bees", "--top-k", "3"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: structqa search")
    assert "unrecognized arguments: --top-k 3; --top-k: did you mean --k?" in err
    with pytest.raises(SystemExit):
        main(["ask", "idx", "--question", "Who?", "stray"])
    err = capsys.readouterr().err
    assert err.startswith("usage: structqa ask") and "did you mean" not in err


def test_the_quickstarts_next_train_command_reads_every_question_from_its_reader():
    """The train command the quickstart prints must parse, and train on the whole of a user's
    file (the default train_size, 512, refuses a smaller file and cuts a larger one) from the
    quickstart's reader with its head."""
    import shlex
    from pathlib import Path

    from structqa.commands.quickstart import next_commands
    from structqa.config import load_config

    best = Path("runs/quickstart/best")
    line = next(x for x in next_commands(best) if x.strip().startswith("structqa train"))
    words = shlex.split(line, comments=True)
    cfg = load_config(None, words[2:])
    assert cfg.data.train_size == "all" and "YOUR_TRAIN.json" in str(cfg.data.train)
    assert cfg.model.init_from == str(best) and cfg.model.head == "dyrex"
    # the reader's line sets this run's own held-out F1 beside the reader's
    reader = next(x for x in next_commands(best, 45.25) if "reader build" in x)
    assert "against this reader's 45.2;" in reader or "against this reader's 45.3;" in reader


def test_a_setting_given_with_a_space_says_to_use_equals(capsys) -> None:
    """`--train.lr 3e-5` (a space, not '='): the hint says how settings are written, not an
    option of another name."""
    with pytest.raises(SystemExit):
        main(["quickstart", "--train.lr", "3e-5"])
    err = capsys.readouterr().err
    assert "--train.lr: a setting takes its value after '=' (--train.lr=VALUE" in err
    assert "did you mean" not in err
