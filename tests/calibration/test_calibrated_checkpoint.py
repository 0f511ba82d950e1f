"""A checkpoint's saved threshold and calibration are what evaluate, predict and serve use;
calibration and the SQuAD 2.0 grids never read the held-out file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from structqa.calibration import CALIBRATION_FILE, Calibrator, load_calibration, save_calibration
from structqa.cli import main
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.manifest import write_manifest
from structqa.prediction.calibrate import calibrate_checkpoint, unseen_pool_slice
from structqa.prediction.predictor import Predictor
from structqa.serving.app import create_app

MINI = "fixtures/squad-v1.1-mini.json"


@pytest.fixture
def checkpoint(tiny_trained_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_trained_run / "best", tmp_path / "best"))


@pytest.fixture
def v2_file(shared_data: Path, tmp_path: Path) -> Path:
    """The mini fixture as SQuAD 2.0: every other question made unanswerable."""
    data = json.loads((shared_data / MINI).read_text())
    i = 0
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["is_impossible"] = i % 2 == 1
                if qa["is_impossible"]:
                    qa["answers"] = []
                i += 1
    data["version"] = "v2.0"
    path = tmp_path / "mini-v2.json"
    path.write_text(json.dumps(data))
    return path


def test_calibrating_on_the_passages_it_trained_on_is_warned(checkpoint, v2_file, caplog):
    """A calibration fitted on questions about the training passages is over-confident: the
    training file is read again, split and drawn as the run did, and the overlap warned."""
    caplog.set_level("WARNING")
    calibrate_checkpoint(checkpoint, on=str(v2_file), bf16="off", verifier=False)
    said = [r.getMessage() for r in caplog.records if "passages the run trains on" in r.message]
    assert len(said) == 1 and said[0].startswith(f"{v2_file}: ")


def test_a_calibrate_stopped_before_its_record_is_mended_by_the_next(
    checkpoint, v2_file, caplog, monkeypatch
):
    """calibration.json is written, then its record in the manifest: a stop between the two
    left a checkpoint that refused to load as damaged, and refused the calibrate that would
    mend it. The refusal now names the remedy, and calibrate loads without the stray file,
    which only a new fit replaces."""
    import structqa.manifest as manifest

    first = calibrate_checkpoint(checkpoint, on=str(v2_file), bf16="off", verifier=False)
    monkeypatch.setattr(manifest, "seal_file", lambda *a: None)  # the stop
    data = json.loads(v2_file.read_text())
    data["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"] = True  # another fit
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"] = []
    other = v2_file.with_name("other.json")
    other.write_text(json.dumps(data))
    second = calibrate_checkpoint(checkpoint, on=str(other), bf16="off", verifier=False)
    assert second != first
    monkeypatch.undo()
    remedy = "run `structqa calibrate` on this directory again"
    with pytest.raises(Exception, match=remedy):
        Predictor.from_checkpoint(checkpoint, bf16="off")  # not the one recorded: refused
    with pytest.raises(FileNotFoundError):  # a calibrate that fails leaves it as it was
        calibrate_checkpoint(checkpoint, on=str(other) + ".typo", bf16="off", verifier=False)
    with pytest.raises(Exception, match=remedy):
        Predictor.from_checkpoint(checkpoint, bf16="off")
    caplog.set_level("WARNING")
    again = calibrate_checkpoint(checkpoint, on=str(other), bf16="off", verifier=False)
    assert "fitting it again" in caplog.text
    assert load_calibration(checkpoint) == again  # mended: written and recorded
    Predictor.from_checkpoint(checkpoint, bf16="off")


def test_calibrate_saves_what_the_predictor_then_uses(checkpoint, v2_file):
    cal = calibrate_checkpoint(checkpoint, on=str(v2_file), bf16="off")
    assert (checkpoint / CALIBRATION_FILE).is_file()
    assert load_calibration(checkpoint) == cal and cal.null_threshold is not None
    predictor = Predictor.from_checkpoint(checkpoint, bf16="off")
    assert predictor.null_threshold == cal.null_threshold
    ans = predictor.predict("Who won?", "The Denver Broncos won the game.")
    assert ans.calibrated and 0.0 <= ans.probability <= 1.0


def test_a_calibration_on_few_passages_says_so(checkpoint, v2_file, caplog):
    """The mini file's questions share two passages: the fit records it and warns."""
    with caplog.at_level("WARNING", logger="structqa.calibration.report"):
        cal = calibrate_checkpoint(checkpoint, on=str(v2_file), bf16="off", verifier=False)
    assert cal.fit["passages"] == 2
    assert "only 2 passage(s)" in caplog.text and "spread over 15 or more" in caplog.text


def test_a_checkpoint_trained_without_an_evaluation_file_calibrates_on_a_file(checkpoint, v2_file):
    """A run that only had a validation slice (the general reader's) has no data.eval."""
    config = checkpoint / "structqa_config.json"
    saved = json.loads(config.read_text())
    saved["data"]["eval"] = None
    config.write_text(json.dumps(saved))
    write_manifest(checkpoint)  # an edit made on purpose: sealed again
    cal = calibrate_checkpoint(checkpoint, on=str(v2_file), bf16="off")
    assert cal.null_threshold is not None and cal.fit["source"] == str(v2_file)


@pytest.mark.parametrize("threshold", [-1e9, 1e9])
def test_predict_and_serve_use_the_saved_threshold(checkpoint, threshold):
    save_calibration(checkpoint, Calibrator("temperature", threshold, t_span=2.0))
    predictor = Predictor.from_checkpoint(checkpoint, bf16="off")
    ans = predictor.predict("Who won?", "The Denver Broncos won the game.")
    abstains = threshold < 0
    assert ans.no_answer is abstains and ans.answerable is not abstains
    from fastapi.testclient import TestClient

    app = create_app(predictor)
    with TestClient(app) as client:  # the service's own answer path
        assert app.state.service.wait_ready(60), app.state.service.status
        reply = client.post(
            "/v1/answer", json={"question": "Who won?", "context": "The Denver Broncos won."}
        )
    assert reply.status_code == 200
    body = reply.json()
    assert body["calibrated"] is True and body["answerable"] is not abstains
    assert body["no_answer"] is abstains and 0.0 <= body["probability"] <= 1.0


def test_evaluate_scores_at_the_saved_threshold_and_reports_ece(checkpoint, v2_file, tmp_path):
    save_calibration(checkpoint, Calibrator("temperature", 1e9))  # never abstain
    out = tmp_path / "eval"
    assert main(["evaluate", str(checkpoint), "--eval", str(v2_file), "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["null_threshold"] == 1e9 and metrics["NoAns_f1"] == 0.0
    assert metrics["null_threshold_source"].startswith("validation")
    assert 0.0 <= metrics["ece"] <= 1.0 and 0.0 <= metrics["ece_uncalibrated"] <= 1.0
    assert (out / "reliability.png").stat().st_size > 0
    # without a calibration, a checkpoint chosen on answerable questions (its last evaluation
    # fixed no threshold) answers every question, as predict answers them: nothing is tuned
    # on the scored file
    (checkpoint / CALIBRATION_FILE).unlink()
    write_manifest(checkpoint)  # (calibration.json is sealed in with the checkpoint)
    assert Predictor.from_checkpoint(checkpoint, bf16="off").null_threshold is None
    assert main(["evaluate", str(checkpoint), "--eval", str(v2_file), "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["null_threshold_source"].startswith("none: chosen on answerable questions")
    assert metrics["NoAns_f1"] == 0.0 and metrics["calibrated"] is False
    assert all(json.loads((out / "predictions.json").read_text()).values())
    # with no record at all (neither calibration nor evaluation) it is the file's own best,
    # and said so
    (checkpoint / "metrics.json").unlink()
    write_manifest(checkpoint)
    assert main(["evaluate", str(checkpoint), "--eval", str(v2_file), "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["null_threshold_source"] == "this file" and metrics["calibrated"] is False


def test_an_abstaining_checkpoint_is_not_calibrated_into_answering_all_unless_asked(
    checkpoint, v2_file, shared_data, tmp_path, capsys
):
    """Answerable questions fit no threshold: refused for a checkpoint that abstains, unless
    --answer-all; then predict, serve and evaluate all answer every question with the map."""
    metrics = json.loads((checkpoint / "metrics.json").read_text())
    # as a SQuAD 2.0 run's last evaluation leaves it: a threshold under which all abstain
    (checkpoint / "metrics.json").write_text(json.dumps({**metrics, "null_threshold": -1e9}))
    write_manifest(checkpoint)
    fitted = calibrate_checkpoint(checkpoint, on=str(v2_file), bf16="off", verifier=False)
    answerable = str(shared_data / MINI)
    args = ["calibrate", str(checkpoint), "--on", answerable, "--bf16=off", "--no-verifier"]
    assert main(args) == 2
    assert "every question is answerable" in capsys.readouterr().err
    assert load_calibration(checkpoint) == fitted  # left as it was
    assert main([*args, "--answer-all"]) == 0
    cal = load_calibration(checkpoint)
    assert cal is not None and cal.null_threshold is None and cal.answers_all
    # (before, the Predictor fell back to metrics.json's threshold and dropped the map)
    predictor = Predictor.from_checkpoint(checkpoint, bf16="off")
    assert predictor.null_threshold is None and predictor.calibrator == cal
    ans = predictor.predict("Who won?", "The Denver Broncos won the game.")
    assert ans.answerable and not ans.no_answer and ans.calibrated
    out = tmp_path / "eval"
    assert main(["evaluate", str(checkpoint), "--eval", str(v2_file), "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["null_threshold"] is None and metrics["NoAns_f1"] == 0.0
    assert all(json.loads((out / "predictions.json").read_text()).values())
    assert metrics["null_threshold_source"].startswith("none: the calibration answers every")
    # fitted so once, it is fitted again on answerable questions without asking twice
    assert main(args) == 0 and load_calibration(checkpoint).answers_all
    # a calibration of that kind written before the mark existed: the Predictor takes the
    # last evaluation's threshold (and drops the map), and evaluate scores at it too (it
    # tuned one on the scored file)
    save_calibration(checkpoint, Calibrator("temperature", None, t_span=2.0))
    assert Predictor.from_checkpoint(checkpoint, bf16="off").null_threshold == -1e9
    assert main(["evaluate", str(checkpoint), "--eval", str(v2_file), "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["null_threshold_source"].startswith("the checkpoint's last evaluation")
    assert metrics["null_threshold"] == -1e9 and metrics["HasAns_f1"] == 0.0
    assert metrics["calibrated"] is False  # its map is not what the Predictor serves
    assert main(args) == 2  # so it abstains: refused as before
    assert "every question is answerable" in capsys.readouterr().err
    assert main([*args, "--answer-all"]) == 0 and load_calibration(checkpoint).answers_all


def test_calibrating_on_saved_answers_fits_what_answering_again_fits(checkpoint, v2_file, tmp_path):
    """--predictions: the answers `evaluate` saved stand in for a second pass of the model."""
    (checkpoint / CALIBRATION_FILE).unlink(missing_ok=True)
    write_manifest(checkpoint)
    out = tmp_path / "answers"
    evaluate = ["evaluate", str(checkpoint), "--eval", str(v2_file), "--out", str(out)]
    assert main([*evaluate, "--bf16", "off"]) == 0
    again = calibrate_checkpoint(checkpoint, on=str(v2_file), bf16="off", verifier=False)
    saved = calibrate_checkpoint(checkpoint, on=str(v2_file), verifier=False, predictions_dir=out)
    assert saved.method == again.method
    assert saved.null_threshold == pytest.approx(again.null_threshold, abs=1e-4)
    assert saved.t_span == pytest.approx(again.t_span, rel=1e-3)
    assert saved.fit["ece"] == pytest.approx(again.fit["ece"], abs=1e-4)
    assert again.fit["answered_by"] == "torch-fp32"
    assert saved.fit["answered_by"] == f"saved answers in {out}"
    # a question the directory never answered is named
    data = json.loads(v2_file.read_text())
    data["data"][0]["paragraphs"][0]["qas"][0]["id"] = "never-asked"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="no answer to question 'never-asked'"):
        calibrate_checkpoint(checkpoint, on=str(other), predictions_dir=out)
    with pytest.raises(FileNotFoundError, match="nbest_predictions.json is missing"):
        calibrate_checkpoint(checkpoint, on=str(v2_file), predictions_dir=tmp_path)
    # null odds a verifier re-scored are not the model's own: refused
    metrics = json.loads((out / "metrics.json").read_text())
    assert "null_odds_verified" not in metrics  # the model's own odds
    (out / "metrics.json").write_text(json.dumps({**metrics, "null_odds_verified": True}))
    with pytest.raises(ValueError, match="null odds may be the verifier's"):
        calibrate_checkpoint(checkpoint, on=str(v2_file), predictions_dir=out)


def test_calibration_reads_the_torch_weights_when_an_int8_export_sits_beside_them(
    checkpoint, v2_file, caplog
):
    """The fit is applied to torch's scores by evaluate and the general reader's card: it is
    fitted on them too, whatever ``auto`` would pick for answering on this CPU."""
    from structqa.runtimes.onnx_export import export_onnx

    before = calibrate_checkpoint(checkpoint, on=str(v2_file), bf16="off", verifier=False)
    export_onnx(checkpoint, checkpoint / "onnx", quantize="int8")
    with caplog.at_level("INFO", logger="structqa.prediction.predictor"):
        after = calibrate_checkpoint(checkpoint, on=str(v2_file), bf16="off", verifier=False)
    assert "runtime torch-fp32" in caplog.text and "onnx" not in caplog.text
    assert load_calibration(checkpoint).fit["answered_by"] == "torch-fp32"  # recorded
    assert after.null_threshold == before.null_threshold and after.t_span == before.t_span


def test_pool_slice_leaves_out_every_trained_paragraph(shared_data):
    from structqa.data import train_subset

    pool = read_extractive(shared_data / "splits/squad1-train.mrqa.jsonl.gz").examples
    sliced = unseen_pool_slice(pool, "512", 0, 300)
    trained = {ex.context for ex in train_subset(pool, 512, 0)}
    assert len(sliced) == 300 and not trained & {ex.context for ex in sliced}


def test_a_pool_slice_holds_no_paragraph_the_run_trained_on(shared_data):
    """The run's training subset was drawn after the validation split (and data.exclude)
    took their questions off the file: the slice is drawn from that same pool, not from the
    whole file, whose subset of the same size and seed is other paragraphs."""
    from structqa.config import load_config
    from structqa.data import train_subset
    from structqa.prediction.calibrate import pool_slice_examples
    from structqa.training.data import split_training_file

    cfg = load_config(
        None,
        [
            f"data.dir={shared_data}",
            "data.train=splits/squad1-train.mrqa.jsonl.gz",
            "data.train_size=512",
            "data.validation=0.1",
        ],
    )
    pool, _, _ = split_training_file(cfg)
    trained = {ex.context for ex in train_subset(pool, 512, cfg.train.seed)}
    sliced = pool_slice_examples(cfg, 300)
    assert len(sliced) == 300 and not trained & {ex.context for ex in sliced}
    whole = read_extractive(shared_data / "splits/squad1-train.mrqa.jsonl.gz").examples
    assert trained - {ex.context for ex in train_subset(whole, 512, cfg.train.seed)}


def test_calibrating_on_a_pool_slice_never_reads_the_evaluation_file(checkpoint, monkeypatch):
    import structqa.prediction.calibrate as command

    read = []
    real = command.read_extractive

    def spy(path, *args, **kwargs):
        read.append(Path(path).name)
        return real(path, *args, **kwargs)

    import structqa.training.data as training_data

    monkeypatch.setattr(command, "read_extractive", spy)
    monkeypatch.setattr(training_data, "read_extractive", spy)
    cfg = json.loads((checkpoint / "structqa_config.json").read_text())
    cfg["data"]["eval"] = "splits/squad1-heldout.mrqa.jsonl.gz"
    cfg["data"]["train"] = "splits/squad1-train.mrqa.jsonl.gz"
    cfg["data"]["train_size"] = "512"
    (checkpoint / "structqa_config.json").write_text(json.dumps(cfg))
    write_manifest(checkpoint)  # an edit made on purpose: sealed again
    calibrate_checkpoint(checkpoint, pool_slice=20, bf16="off")
    assert read == ["squad1-train.mrqa.jsonl.gz"]


def test_squad2_grids_train_and_choose_on_the_training_file_only(shared_data, tmp_path):
    from structqa.experiments.grid import load_experiment
    from structqa.experiments.run_config import resolve_config
    from structqa.experiments.spec import plan
    from structqa.experiments.store import Paths

    configs = sorted(Path("configs/squad2").glob("*.yaml"))
    assert configs
    for path in configs:
        experiment = load_experiment(path)
        assert experiment.validation is not None, f"{path}: no validation split"
        paths = Paths(tmp_path / "results", tmp_path / "runs")
        for run in plan(experiment, {}):
            wanted = experiment.config_for(run).data
            if not wanted.train.endswith("squad2-train.v2.0.json"):
                # a reader on another pool (configs/squad2/reader.yaml): it must drop every
                # passage of the held-out split, and the split it is chosen on holds none
                assert "splits/squad2-heldout.v2.0.json" in wanted.exclude, (path, run.name)
                if not (shared_data / wanted.train).is_file():
                    continue  # written by `structqa negatives` first (the config says how)
            cfg, split = resolve_config(experiment, run, paths, str(shared_data))
            assert "heldout" not in cfg.data.train + cfg.data.eval, (path, run.name)
            if split["source"].endswith("squad2-train.v2.0.json"):
                continue
            assert any(e.endswith("squad2-heldout.v2.0.json") for e in split["exclude"])
            assert split["excluded_questions"] > 0


def test_saved_answers_give_the_models_predictions(checkpoint, shared_data, capsys):
    """best/'s n-best files stand in for running the model (the runner calibrates from them)."""
    from structqa.calibration.report import predictions_from_files

    saved = predictions_from_files(checkpoint)
    # best/ holds the answers to the questions that chose it (the validation slice)
    examples = [ex for ex in read_extractive(shared_data / MINI).examples if ex.id in saved]
    assert examples
    fresh = Predictor.from_checkpoint(checkpoint, bf16="off").predict_examples(examples)
    assert set(saved) == set(fresh)
    for qid, p in fresh.items():
        assert saved[qid].text == p.text and saved[qid].null_odds == pytest.approx(p.null_odds)
        assert [c.score for c in saved[qid].nbest] == pytest.approx([c.score for c in p.nbest])
    args = ["calibrate", str(checkpoint), "--on", str(shared_data / MINI), "--bf16", "off"]
    assert main([*args, "--method", "temperature"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["null_threshold"] is None and printed["method"] == "temperature"
    assert load_calibration(checkpoint).t_span == pytest.approx(printed["t_span"])


def test_a_grid_with_a_validation_split_saves_its_calibration(
    tiny_checkpoint, shared_data, tmp_path
):
    """The runner fits the threshold and probabilities on the validation part of the split
    (the part it scored best/ on) and saves them in best/."""
    from tiny import tiny_finetune_base

    from structqa.experiments.grid import experiment_from_dict
    from structqa.experiments.runner import run_experiment
    from structqa.experiments.store import Paths

    raw = {
        "name": "tiny-val",
        "base": tiny_finetune_base(tiny_checkpoint, shared_data),
        "grid": {"train.seed": [0]},
        "validation": {"fraction": 0.4, "seed": 0},
    }
    exp = experiment_from_dict(raw, source="configs/tiny.yaml")
    paths = Paths(tmp_path / "results", tmp_path / "runs")
    assert run_experiment(exp, paths, command="x", progress=False) == 0
    run = exp.runs()[0]
    result = json.loads(paths.result(run).read_text())
    cal = load_calibration(paths.output(run) / "best")
    assert cal is not None and result["calibration"]["t_span"] == pytest.approx(cal.t_span)
    assert result["calibration"]["fit"]["source"].endswith("val.json")


def test_calibrate_command_fits_a_similarity_verifier_the_predictor_applies(
    checkpoint, shared_data, tmp_path, capsys
):
    data = json.loads((shared_data / MINI).read_text())  # each question 4x, 2x unanswerable
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [
                qa
                | {"id": f"{qa['id']}-{k}", "is_impossible": k % 2 == 1}
                | ({"answers": []} if k % 2 else {})
                for qa in paragraph["qas"]
                for k in range(4)
            ]
    data["version"] = "v2.0"
    larger = tmp_path / "mini-v2-x4.json"
    larger.write_text(json.dumps(data))
    args = ["calibrate", str(checkpoint), "--on", str(larger), "--bf16", "off"]
    assert main([*args, "--verifier", "similarity"]) == 0
    saved = load_calibration(checkpoint)
    assert saved.verifier is not None and saved.verifier.encoder == "default"
    assert json.loads(capsys.readouterr().out)["verifier"]["names"][-1] == "similarity_gap"
    predictor = Predictor.from_checkpoint(checkpoint, bf16="off")
    context = "The Denver Broncos won the game."
    raw = predictor.predict_examples([Example("q", "Who won?", context)], verify=False)["q"]
    verified = predictor.predict_examples([Example("q", "Who won?", context)])["q"]
    assert verified.null_odds != raw.null_odds  # the verifier re-scored the model's odds
    assert main([*args, "--no-verifier"]) == 0
    assert load_calibration(checkpoint).verifier is None


def test_calibrating_an_exported_evaluated_checkpoint_leaves_it_loadable_after_more_work(
    checkpoint, v2_file, tmp_path
):
    """Sealing calibration.json into a checkpoint records that file alone: an export and an
    eval/ folder written into the checkpoint before are not listed, so exporting or evaluating
    again afterwards does not make the checkpoint refuse to load."""
    from structqa.manifest import read_manifest
    from structqa.runtimes.onnx_export import export_onnx

    export_onnx(checkpoint, checkpoint / "onnx")
    assert main(["evaluate", str(checkpoint), "--eval", str(v2_file), "--bf16", "off"]) == 0
    before = set(read_manifest(checkpoint) or {})
    save_calibration(checkpoint, Calibrator("temperature", 0.0))
    assert set(read_manifest(checkpoint) or {}) == before | {CALIBRATION_FILE}
    export_onnx(checkpoint, checkpoint / "onnx")  # a new export: other bytes
    assert main(["evaluate", str(checkpoint), "--eval", str(v2_file), "--bf16", "off"]) == 0
    Predictor.from_checkpoint(checkpoint, bf16="off")  # verified, and loads
    (checkpoint / CALIBRATION_FILE).write_text("{}")  # an edit after sealing is still refused
    with pytest.raises(Exception, match="calibration.json"):
        Predictor.from_checkpoint(checkpoint, bf16="off")


def test_calibrate_renames_repeated_ids_when_asked_as_its_error_says(
    checkpoint, shared_data, tmp_path, capsys
):
    data = json.loads((shared_data / MINI).read_text())
    qas = data["data"][0]["paragraphs"][0]["qas"]
    qas.append(dict(qas[0]))  # one question asked twice under one id
    repeated = tmp_path / "repeated.json"
    repeated.write_text(json.dumps(data))
    args = ["calibrate", str(checkpoint), "--on", str(repeated), "--bf16", "off"]
    assert main([*args, "--method", "temperature"]) == 2
    assert "--dedupe-ids for predict, calibrate, score and compare" in capsys.readouterr().err
    assert main([*args, "--method", "temperature", "--dedupe-ids"]) == 0
    assert load_calibration(checkpoint).fit["source"].endswith("repeated.json")


def test_calibrate_fits_for_an_unanswerable_share_and_records_it(checkpoint, v2_file):
    """`structqa calibrate --unanswerable-share P` weights the questions to P (2 of the mini
    file's 5 are unanswerable) and writes P and the file's own share into calibration.json;
    without the flag, the file's own share is fitted for."""
    args = ["calibrate", str(checkpoint), "--on", str(v2_file), "--bf16", "off", "--no-verifier"]
    assert main([*args, "--unanswerable-share", "0.2"]) == 0
    low = load_calibration(checkpoint).null_threshold
    assert main([*args, "--unanswerable-share", "0.8"]) == 0
    fit = load_calibration(checkpoint).fit
    assert load_calibration(checkpoint).null_threshold <= low  # abstains at least as often
    assert fit["unanswerable_share"] == 0.8
    assert fit["unanswerable_share_of_questions"] == pytest.approx(0.4)
    assert main(args) == 0
    assert "unanswerable_share" not in load_calibration(checkpoint).fit


def test_calibrate_moves_the_fitted_threshold_by_the_offset_given(checkpoint, v2_file):
    """`--threshold-offset D` adds D to the threshold fitted on the questions and records it;
    the probability map is fitted at the moved threshold (what the checkpoint then does)."""
    args = ["calibrate", str(checkpoint), "--on", str(v2_file), "--bf16", "off", "--no-verifier"]
    assert main(args) == 0
    fitted = load_calibration(checkpoint)
    assert "threshold_offset" not in fitted.fit
    assert main([*args, "--threshold-offset", "-0.75"]) == 0
    moved = load_calibration(checkpoint)
    assert moved.null_threshold == pytest.approx(fitted.null_threshold - 0.75)
    assert moved.fit["threshold_offset"] == -0.75
