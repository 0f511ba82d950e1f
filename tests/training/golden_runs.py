"""Fixed tiny runs of every training task, recorded step by step.

Each run trains the tiny encoder of ``tests/tiny.py`` for a few steps with gradient
accumulation, an evaluation cadence, mid-run saves and dropout, and returns what it logged
and saved: every training step's loss and learning rate, every evaluation's metrics, the
``train_state.json`` and ``metrics.json`` of each checkpoint directory, and the value the
run returned. ``golden/*.json`` hold these records as the training code produced them on
2026-11-25 (commit 9addf9a, before the three task loops shared one scaffold), ``drop.json``
again on 2026-11-29 (after ``da08ba0`` corrected the NC-BERT inputs: its losses moved by
about 4e-5); ``test_golden.py`` reruns each and compares.

Record again (only when a change to a run's numbers is intended, and say why in the commit):

    PYTHONPATH=src python tests/training/golden_runs.py [NAME ...]
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent / "golden"
MINI_SQUAD = "fixtures/squad-v1.1-mini.json"
MINI_DROP = "drop/drop-mini.json"
#: throughput fields of the training log: wall-clock figures, never reproducible
TIMING_KEYS = ("features_per_s", "windows_per_s", "questions_per_s", "tokens_per_s")
CHECKPOINT_DIRS = ("best", "last", "final")


def _without_clock(state: dict[str, Any]) -> dict[str, Any]:
    """A train state without its wall time (recorded, never reproducible; a float >= 0),
    the digests of the training data and of the questions choosing best/, its precision and
    its starts, which train states keep since after these were recorded (the resume tests
    check them; here only that they are there)."""
    seconds = state.pop("seconds")
    assert isinstance(seconds, float) and seconds >= 0, seconds
    windows, digest = state.pop("data_windows"), state.pop("data_fingerprint")
    assert isinstance(windows, int) and windows > 0 and len(digest) == 16, (windows, digest)
    choice = state.pop("choice_fingerprint")  # (the same; "" for tasks that keep none)
    assert isinstance(choice, str) and len(choice) in (0, 16), choice
    # the precision it trained in and its starts, kept since (the same: checked by the
    # resume tests; they name the commit and the machine, so they are not recorded here)
    bf16, stints = state.pop("bf16"), state.pop("stints")
    assert isinstance(bf16, bool) and [x["from_step"] for x in stints] == [0], (bf16, stints)
    return state


def _record(out: Path, result: Any) -> dict[str, Any]:
    """What a finished run in ``out`` logged and saved, and its return value's metrics."""
    log = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    checkpoints: dict[str, Any] = {}
    for name in CHECKPOINT_DIRS:
        directory = out / name
        if not directory.is_dir():
            continue
        entry: dict[str, Any] = {
            "files": sorted(p.name for p in directory.iterdir()),
            "train_state": _without_clock(json.loads((directory / "train_state.json").read_text())),
        }
        if (directory / "metrics.json").exists():
            entry["metrics"] = json.loads((directory / "metrics.json").read_text())
        checkpoints[name] = entry
    metrics = getattr(result, "metrics", result)
    return {
        "log": [{k: v for k, v in x.items() if k not in TIMING_KEYS} for x in log],
        "checkpoints": checkpoints,
        "result": metrics,
    }


def span_v1(work: Path, ckpt: Path, data: Path) -> dict[str, Any]:
    """Extractive QA on the SQuAD 1.1 mini fixture: 3 epochs, evaluated at each epoch end."""
    from structqa.config import load_config
    from structqa.training import loop

    out = work / "span-v1"
    cfg = load_config(overrides=[*_span_overrides(ckpt, data, data / MINI_SQUAD, out)])
    cfg.train.epochs, cfg.train.grad_accum, cfg.train.save_every_steps = 3, 2, 1
    return _record(out, loop.run(cfg, progress=False))


def span_v2(work: Path, ckpt: Path, data: Path) -> dict[str, Any]:
    """Extractive QA with unanswerable questions (SQuAD 2.0 format, tuned null threshold):
    the step budget ends inside the second epoch; evaluated only then."""
    from structqa.config import load_config
    from structqa.training import loop

    squad = json.loads((data / MINI_SQUAD).read_text())
    qas = [qa for art in squad["data"] for par in art["paragraphs"] for qa in par["qas"]]
    for qa in qas:
        qa["is_impossible"] = False
    for qa in qas[1::2]:  # every second question loses its answer
        qa["is_impossible"], qa["plausible_answers"], qa["answers"] = True, qa["answers"], []
    (work / "squad2-mini.json").write_text(json.dumps(squad))
    out = work / "span-v2"
    cfg = load_config(overrides=[*_span_overrides(ckpt, data, work / "squad2-mini.json", out)])
    cfg.train.max_steps, cfg.train.eval_every_epoch = 5, False
    return _record(out, loop.run(cfg, progress=False))


def _span_overrides(ckpt: Path, data: Path, squad: Path, out: Path) -> list[str]:
    return [
        f"model.encoder={ckpt}",
        f"data.dir={data}",
        f"data.train={squad}",
        f"data.eval={squad}",
        "data.validation=none",  # as recorded: best/ chosen on data.eval, no test scoring
        "data.train_size=all",
        "data.max_seq_len=128",
        "data.doc_stride=32",
        f"train.output_dir={out}",
        "train.batch_size=2",
        "train.lr=1e-3",
        "train.warmup_ratio=0.2",
        "train.dropout=0.1",
        "train.bf16=off",
        "train.log_every_steps=1",
    ]


def pretrain(work: Path, ckpt: Path, data: Path) -> dict[str, Any]:
    """Masked-LM pre-training on the mini fixture's sentences: 7 steps over several epochs,
    held-out evaluation at step 0, every 3 steps and at the end, the encoder frozen for the
    first 2 steps."""
    from structqa.pretrain import loop
    from structqa.pretrain.config import load_pretrain_config

    squad = json.loads((data / MINI_SQUAD).read_text())
    texts = [
        s
        for art in squad["data"]
        for par in art["paragraphs"]
        for s in [*re.split(r"(?<=\.) ", par["context"]), *(q["question"] for q in par["qas"])]
        if s.strip()
    ]
    corpus = work / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"c{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    out = work / "pretrain"
    cfg = load_pretrain_config(
        overrides=[
            f"data.corpus={corpus}",
            "data.heldout_fraction=0.2",
            "data.max_seq_len=64",
            "masking.scheme=token",
            f"model.encoder={ckpt}",
            "train.batch_size=2",
            "train.bf16=off",
            "train.eval_batch_size=4",
            "train.eval_every_steps=3",
            "train.freeze_steps=2",
            "train.grad_accum=2",
            "train.log_every_steps=1",
            "train.lr=1e-3",
            "train.max_steps=7",
            f"train.output_dir={out}",
            "train.save_every_steps=4",
            "train.warmup_ratio=0.2",
        ]
    )
    return _record(out, loop.run(cfg, progress=False))


def drop(work: Path, ckpt: Path, data: Path) -> dict[str, Any]:
    """NC-BERT on synthetic numeric data and the DROP mini file: DICE (reseeded every
    micro-batch), an evaluation every 2 steps and at epoch ends, the best global F1 kept."""
    from structqa.cli import main
    from structqa.ncbert import loop
    from structqa.ncbert.config import load_drop_config

    synth = work / "synthetic.json"
    if main(["synth", f"--out={synth}", "--n=12", "--seed=0"]) != 0:
        raise RuntimeError("structqa synth failed")
    out = work / "drop"
    cfg = load_drop_config(
        overrides=[
            f"--data.dir={data}",
            f"--data.eval={MINI_DROP}",
            "--data.max_seq_len=96",
            "--data.test=null",
            f"--data.train=[{synth},{MINI_DROP}]",
            "--model.decoder_number_mask=true",
            "--model.dice_weight=0.1",
            "--model.dropout=0.1",
            f"--model.encoder={ckpt}",
            "--model.entity_channel=false",
            "--model.lsdf=true",
            "--model.max_decode_len=6",
            "--model.nc_heads=[0,1]",
            "--model.nc_layer=true",
            "--train.batch_size=4",
            "--train.bf16=off",
            "--train.eval_batch_size=16",
            "--train.eval_every_steps=2",
            "--train.grad_accum=2",
            "--train.log_every_steps=1",
            "--train.lr=1e-3",
            "--train.max_steps=6",
            f"--train.output_dir={out}",
            "--train.save_every_steps=3",
        ]
    )
    return _record(out, loop.run(cfg, progress=False))


RUNS: dict[str, Callable[[Path, Path, Path], dict[str, Any]]] = {
    "span-v1": span_v1,
    "span-v2": span_v2,
    "pretrain": pretrain,
    "drop": drop,
}


# SQuAD 2.0 diagnostics added to every evaluation after the recording (structqa.evaluation's
# answerability_metrics): new keys that change no recorded value
NEW_METRICS = frozenset({"NoAns_auc", "forced_HasAns_f1"})


def same(recorded: Any, now: Any, where: str = "") -> list[str]:
    """Where ``now`` differs from ``recorded``: numbers to 1e-6 (relative or absolute), the
    rest exactly. A checkpoint may hold files beyond the recorded ones (``files`` lists are
    compared as subsets, and a new ``metrics.json`` may appear: since the loops share one
    scaffold, DROP's ``last/`` carries the metrics of the weights it holds when they were just
    evaluated, as the other tasks' do); everything recorded must be there, with the recorded
    values."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        diffs = [f"{where}.{k}: missing" for k in recorded if k not in now]
        # (a checkpoint's metrics.json is one of its files: it may be new)
        extra_file_ok = re.fullmatch(r"\.checkpoints\.\w+", where) is not None
        diffs += [
            f"{where}.{k}: not recorded"
            for k in now
            if k not in recorded and not (extra_file_ok and k == "metrics") and k not in NEW_METRICS
        ]
        for k in recorded:
            if k in now:
                diffs += same(recorded[k], now[k], f"{where}.{k}")
        return diffs
    if where.endswith(".files") and isinstance(recorded, list) and isinstance(now, list):
        lacking = sorted(set(recorded) - set(now))
        return [f"{where}: lacks {lacking}"] if lacking else []
    if isinstance(recorded, list) and isinstance(now, list):
        if len(recorded) != len(now):
            return [f"{where}: {len(recorded)} entries recorded, {len(now)} now"]
        return [
            d
            for i, (a, b) in enumerate(zip(recorded, now, strict=True))
            for d in same(a, b, f"{where}[{i}]")
        ]
    numbers = (int, float)
    if (
        isinstance(recorded, numbers)
        and isinstance(now, numbers)
        and not isinstance(recorded, bool)
    ):
        if math.isclose(recorded, now, rel_tol=1e-6, abs_tol=1e-6):
            return []
    elif recorded == now:
        return []
    return [f"{where}: recorded {recorded!r}, now {now!r}"]


def main(names: list[str]) -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tiny import make_tiny_checkpoint, mini_squad_texts

    from structqa.paths import resolve_data_dir

    torch.set_num_threads(1)  # as the tests run them (tests/conftest.py one_thread)
    data = resolve_data_dir(None)
    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = make_tiny_checkpoint(Path(tmp) / "tiny-bert", mini_squad_texts(data))
        for name in names or list(RUNS):
            work = Path(tmp) / name
            work.mkdir()
            record = RUNS[name](work, ckpt, data)
            (GOLDEN / f"{name}.json").write_text(
                json.dumps(record, indent=1, sort_keys=True) + "\n"
            )
            print(f"recorded {GOLDEN / name}.json")


if __name__ == "__main__":
    main(sys.argv[1:])
