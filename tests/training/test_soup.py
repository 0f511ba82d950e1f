"""`structqa soup`: the mean of runs' weights as a checkpoint of its own, and what it refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny import mini_train_args

from structqa.cli import main
from structqa.manifest import verify_manifest, write_manifest
from structqa.prediction.predictor import Predictor
from structqa.training.soup import SoupRefused, make_soup

pytestmark = pytest.mark.usefixtures("one_thread")
MINI = "fixtures/squad-v1.1-mini.json"


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path, shared_data: Path
) -> dict[str, Path]:
    """best/ of three tiny runs: seeds 0 and 1 from one start (init_seed 0), and seed 2
    from its own (init_seed 2)."""
    root = tmp_path_factory.mktemp("soup-runs")
    made = {}
    for name, seed, init in (("a", 0, 0), ("b", 1, 0), ("apart", 2, 2)):
        out = root / name
        args = mini_train_args("train", shared_data, tiny_checkpoint, out, MINI, steps=3)
        code = main([*args, f"--train.seed={seed}", f"--train.init_seed={init}", "--no-progress"])
        assert code == 0
        made[name] = out / "best"
    return made


def test_the_soup_is_the_mean_of_its_members_and_reads_as_a_checkpoint(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = make_soup([runs["a"], runs["b"]], tmp_path / "soup")
    a, b = (load_file(str(runs[k] / "model.safetensors")) for k in ("a", "b"))
    soup = load_file(str(out / "model.safetensors"))
    assert set(soup) == set(a)
    moved = [k for k in a if a[k].is_floating_point() and not torch.equal(a[k], b[k])]
    assert moved  # the two members trained apart, so the mean is a third set of weights
    for key in a:
        expected = (a[key].double() + b[key].double()) / 2 if a[key].is_floating_point() else a[key]
        torch.testing.assert_close(soup[key], expected.to(a[key].dtype))
    assert verify_manifest(out)
    assert not (out / "metrics.json").exists() and not (out / "calibration.json").exists()
    record = json.loads((out / "soup.json").read_text())
    assert [m["seed"] for m in record["members"]] == [0, 1]
    assert all(len(m["weights_sha256"]) == 64 for m in record["members"])
    answer = Predictor.from_checkpoint(out, runtime="torch").predict(
        "What is it?", "It is a test of the soup."
    )
    assert answer.text in "It is a test of the soup."


def test_a_members_test_scores_stay_with_the_member(runs: dict[str, Path], tmp_path: Path) -> None:
    """A member's end-of-training test (best/eval/) is its own: copied into the soup, it
    read as the soup's scores and was sealed into its manifest, so scoring the soup into
    eval/ (the command soup prints) made the soup unloadable."""
    import shutil

    members = []
    for name in ("a", "b"):
        member = tmp_path / name
        shutil.copytree(runs[name], member)
        (member / "eval").mkdir(exist_ok=True)
        (member / "eval" / "metrics.json").write_text('{"f1": 12.5}')
        members.append(member)
    out = make_soup(members, tmp_path / "soup")
    assert not (out / "eval").exists()
    sealed = json.loads((out / "manifest.json").read_text())["files"]
    assert sealed and not any(p.startswith("eval") for p in sealed)
    (out / "eval").mkdir()
    (out / "eval" / "metrics.json").write_text('{"f1": 20.0}')  # the soup's own score, later
    assert verify_manifest(out)


def test_a_soup_of_one_model_twice_answers_as_that_model(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(runs["a"], copy)
    out = make_soup([runs["a"], copy], tmp_path / "soup")
    a = load_file(str(runs["a"] / "model.safetensors"))
    soup = load_file(str(out / "model.safetensors"))
    assert all(torch.equal(a[k], soup[k]) for k in a)


def test_runs_from_other_starts_are_refused_unless_forced(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    with pytest.raises(SoupRefused, match="--train.init_seed"):
        make_soup([runs["a"], runs["apart"]], tmp_path / "soup")
    assert not (tmp_path / "soup").exists()
    assert make_soup([runs["a"], runs["apart"]], tmp_path / "soup", force=True).is_dir()


def test_another_architecture_a_run_directory_and_an_existing_out_are_refused(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    other = tmp_path / "other"
    shutil.copytree(runs["b"], other)
    config = json.loads((other / "structqa_config.json").read_text())
    config["model"]["block"] = ["sa", "sa", "ffn"]
    (other / "structqa_config.json").write_text(json.dumps(config))
    write_manifest(other)
    with pytest.raises(SoupRefused, match="model.block"):
        make_soup([runs["a"], other], tmp_path / "soup")
    with pytest.raises(SoupRefused, match="it is a run directory: give .*best"):
        make_soup([runs["a"], runs["b"].parent], tmp_path / "soup")
    with pytest.raises(SoupRefused, match="at least two"):
        make_soup([runs["a"]], tmp_path / "soup")
    (tmp_path / "taken").mkdir()
    with pytest.raises(SoupRefused, match="exists"):
        make_soup([runs["a"], runs["b"]], tmp_path / "taken")


def test_the_command_writes_the_soup_and_says_how_to_score_it(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["soup", str(runs["a"]), str(runs["b"]), "--out", str(tmp_path / "soup")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "mean of 2 checkpoints" in printed and "structqa evaluate" in printed
    assert main(["soup", str(runs["a"]), str(runs["apart"]), "--out", str(tmp_path / "x")]) != 0


def _distance_score(target: dict[str, torch.Tensor]):
    """A checkpoint's closeness to ``target``'s weights (higher is closer): a score whose best
    soup is known in advance."""

    def score(checkpoint: Path) -> float:
        weights = load_file(str(checkpoint / "model.safetensors"))
        return -sum(
            float((weights[k].double() - target[k].double()).square().sum())
            for k in target
            if target[k].is_floating_point()
        )

    return score


def test_greedy_soup_keeps_a_member_only_when_the_soup_scores_no_lower(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    from structqa.training.soup import greedy_soup

    a, b = (load_file(str(runs[k] / "model.safetensors")) for k in ("a", "b"))
    mean = {k: (a[k].double() + b[k].double()) / 2 if a[k].is_floating_point() else a[k] for k in a}
    path = greedy_soup([runs["b"], runs["a"]], tmp_path / "mean", _distance_score(mean))
    assert set(path["kept"]) == {str(runs["a"]), str(runs["b"])}
    assert path["steps"][0]["kept"] and path["score"] > max(path["member_scores"])
    # near a's own weights, adding b only moves away: the soup is a's copy
    path = greedy_soup([runs["b"], runs["a"]], tmp_path / "a", _distance_score(a))
    assert path["order"][0] == str(runs["a"]) and path["kept"] == [str(runs["a"])]
    assert not path["steps"][0]["kept"]
    soup = load_file(str(tmp_path / "a" / "model.safetensors"))
    assert all(torch.equal(soup[k], a[k]) for k in a)
    assert verify_manifest(tmp_path / "a")
    assert json.loads((tmp_path / "a" / "soup.json").read_text())["kind"] == "greedy"
    assert not (tmp_path / "a.trial").exists()


def test_a_members_evaluations_of_other_files_are_its_own() -> None:
    from structqa.training.soup import member_only

    assert member_only("eval") and member_only("eval-dev") and not member_only("tokenizer.json")


def test_a_soups_calibration_slice_leaves_out_every_members_training_questions(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """Each member of a soup drew its own training subset (train.seed): `calibrate
    --pool-slice` on the soup draws from paragraphs none of them trained on, not only the
    first member's (whose config the soup carries)."""
    from structqa.data import parse_train_size, train_subset
    from structqa.data.records import Answer, Example
    from structqa.models.build import checkpoint_config
    from structqa.prediction.calibrate import trained_seeds, unseen_pool_slice

    out = make_soup([runs["a"], runs["b"]], tmp_path / "soup")
    cfg = checkpoint_config(out)
    assert cfg.train.seed == 0 and trained_seeds(out, cfg) == [0, 1]
    # a greedy soup's record names its members by path: their configs are read
    record = json.loads((out / "soup.json").read_text())
    record["kept"] = [str(runs["b"]), str(runs["apart"])]
    (out / "soup.json").write_text(json.dumps(record))
    assert trained_seeds(out, cfg) == [1, 2]
    pool = [
        Example(f"q{i}", "Who?", f"passage {i}", (Answer("passage", 0),), ("passage",))
        for i in range(60)
    ]
    drawn = {
        s: {ex.context for ex in train_subset(pool, parse_train_size("20"), s)} for s in (0, 1)
    }
    assert drawn[0] != drawn[1]
    sliced = {ex.context for ex in unseen_pool_slice(pool, "20", [0, 1], 60)}
    assert sliced and sliced.isdisjoint(drawn[0] | drawn[1])
    assert sliced | drawn[0] | drawn[1] == {ex.context for ex in pool}
