"""The shared training scaffold on a toy regression task: evaluation cadence and epoch labels,
best/last/final checkpoints, gradient accumulation, exact resume after a real SIGINT (inside
an epoch, at an epoch end, in the last step), the stop flag across processes, refused
resumes, and the log a resumed run keeps."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from structqa.io import replace_dir, write_json
from structqa.training import trainer
from structqa.training.checkpoint import TrainState, save_resume_state
from structqa.training.trainer import Env, Evaluation, Settings, fit

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIG = {"train": {"seed": 0, "lr": 0.05}}  # what a run records (config.json, checkpoints)


@dataclass
class ToyBatch:
    input_ids: torch.Tensor  # (B, 1): a row count for the scaffold's throughput log
    attention_mask: torch.Tensor  # (B, 1)
    x: torch.Tensor  # (B, 4)
    y: torch.Tensor  # (B,)

    def to(self, device: torch.device) -> ToyBatch:
        return ToyBatch(
            *(t.to(device) for t in (self.input_ids, self.attention_mask, self.x, self.y))
        )


class Toy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 1)
        self.dropout = torch.nn.Dropout(0.2)  # draws from the RNG that resume restores

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(torch.tanh(self.encoder(x)))).squeeze(-1)


class ToyTask:
    """y = x . w on 10 training rows; the score is 1 / (1 + held-out squared error). Sends
    itself a real SIGINT in the forward pass of step ``interrupt_at`` (0-based) when set."""

    def __init__(self, interrupt_at: int | None = None, scored: bool = True) -> None:
        g = torch.Generator().manual_seed(0)
        w = torch.randn(4, generator=g)
        self.x, self.heldout = torch.randn(10, 4, generator=g), torch.randn(6, 4, generator=g)
        self.y, self.heldout_y = self.x @ w, self.heldout @ w
        self.lengths = [1 + i % 3 for i in range(10)]
        self.interrupt_at, self.scored = interrupt_at, scored
        self.config = CONFIG
        self.steps: list[tuple[int, int]] = []  # (step, micro) of every loss computed

    def batch(self, indices: list[int], epoch: int) -> ToyBatch:  # noqa: ARG002
        ones = torch.ones(len(indices), 1, dtype=torch.long)
        return ToyBatch(ones, ones, self.x[indices], self.y[indices])

    def loss(self, model, batch: ToyBatch, env: Env, step: int, micro: int) -> torch.Tensor:  # noqa: ARG002
        self.steps.append((step, micro))
        if step == self.interrupt_at and micro == 0:
            os.kill(os.getpid(), signal.SIGINT)
        return torch.nn.functional.mse_loss(model(batch.x), batch.y)

    def evaluate(self, model, env: Env) -> Evaluation | None:  # noqa: ARG002
        with torch.no_grad():
            model.eval()
            mse = float(torch.nn.functional.mse_loss(model(self.heldout), self.heldout_y))
        metrics = {"mse": mse}
        score = 1 / (1 + mse) if self.scored else None
        return Evaluation(metrics, f"mse {mse:.4f}", score=score, saved=metrics, value=metrics)

    def save(self, target: Path, model, state: TrainState, optimizer, scheduler, metrics) -> None:
        tmp = target.with_name(target.name + ".tmp")
        tmp.mkdir(parents=True)
        save_file(
            {k: v.contiguous() for k, v in model.state_dict().items()},
            str(tmp / "model.safetensors"),
        )
        files = {"structqa_config.json": self.config, "train_state.json": asdict(state)}
        for name, content in (files | {"metrics.json": metrics}).items():
            if content is not None:
                write_json(tmp / name, content)
        if optimizer is not None:
            save_resume_state(tmp, optimizer, scheduler)
        replace_dir(tmp, target)

    def load(self, model, path: Path) -> None:
        model.load_state_dict(load_file(str(path / "model.safetensors")))


def settings(out: Path, **choices: Any) -> Settings:
    base = {"output_dir": str(out), "config": CONFIG}
    common = dict(
        lr=0.05, batch_size=2, grad_accum=2, warmup_ratio=0.0, bf16="off", log_every_steps=1
    )
    return Settings(**{**base, **common, **choices})


def train_toy(out: Path, task: ToyTask | None = None, resume: bool = False, **choices: Any):
    torch.manual_seed(0)
    model = Toy()
    return fit(task or ToyTask(), model, settings(out, **choices), resume=resume, progress=False)


def read_log(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def untimed(log: list[dict]) -> list[dict]:
    return [{k: v for k, v in x.items() if not k.endswith("_per_s")} for x in log]


def evals(out: Path) -> list[tuple[int, int]]:
    return [(x["step"], x["epoch"]) for x in read_log(out) if "eval" in x]


def state(out: Path, name: str = "last") -> dict:
    return json.loads((out / name / "train_state.json").read_text())


def test_an_epoch_budget_evaluates_inside_epochs_and_at_their_ends(tmp_path):
    """5 batches an epoch, 2 per step: 3 steps an epoch (the third takes one micro-batch)."""
    task = ToyTask()
    best = train_toy(tmp_path, task, epochs=2, eval_every_steps=2)
    assert [s for s, m in task.steps] == [0, 0, 1, 1, 2, 3, 3, 4, 4, 5]
    assert [x["step"] for x in read_log(tmp_path) if "loss" in x] == [1, 2, 3, 4, 5, 6]
    # labels: the 1-based epoch in progress (step 2, step 4) or just finished (3, 6)
    assert evals(tmp_path) == [(2, 1), (3, 1), (4, 2), (6, 2)]
    scores = [x["eval"]["mse"] for x in read_log(tmp_path) if "eval" in x]
    assert best == {"mse": min(scores)}
    assert json.loads((tmp_path / "best" / "metrics.json").read_text()) == best
    assert (
        not (tmp_path / "best" / "resume.pt").exists()
        and (tmp_path / "last" / "resume.pt").exists()
    )
    assert state(tmp_path)["finished"] and state(tmp_path)["epoch"] == 2
    assert state(tmp_path, "best")["best_f1"] == 1 / (1 + min(scores))
    assert json.loads((tmp_path / "config.json").read_text()) == CONFIG


def test_a_step_budget_evaluates_at_the_start_every_n_steps_and_at_the_end(tmp_path):
    """Pre-training's cadence: no best/, a non-resumable final/; the budget ends mid-epoch."""
    choices = dict(max_steps=4, eval_at_start=True, eval_every_steps=3, eval_every_epoch=False)
    final = train_toy(tmp_path, ToyTask(scored=False), grad_accum=1, final_dir="final", **choices)
    # labels: the epochs completed (5 batches an epoch: the first is still under way)
    assert evals(tmp_path) == [(0, 0), (3, 0), (4, 0)]
    assert final == read_log(tmp_path)[-1]["eval"]
    assert not (tmp_path / "best").exists() and not (tmp_path / "final" / "resume.pt").exists()
    assert state(tmp_path, "final") == state(tmp_path) | {"finished": True}
    assert state(tmp_path)["batch_in_epoch"] == 4 and state(tmp_path)["epoch"] == 0


def test_frozen_parameters_stay_fixed_for_the_freeze_steps(tmp_path):
    torch.manual_seed(0)
    model = Toy()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    s = settings(tmp_path, max_steps=2, frozen=tuple(model.encoder.parameters()), freeze_steps=2)
    fit(ToyTask(), model, s, progress=False)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in ("encoder.weight", "encoder.bias"))
    assert not torch.equal(before["head.weight"], after["head.weight"])


@pytest.mark.parametrize(
    "stop_after", [2, 3, 6], ids=["inside-an-epoch", "at-an-epoch-end", "in-the-last-step"]
)
def test_resume_after_sigint_is_exact(tmp_path, stop_after):
    choices = dict(epochs=2, eval_every_steps=2, save_every_steps=4)
    train_toy(tmp_path / "a", **choices)
    expected = load_file(str(tmp_path / "a" / "last" / "model.safetensors"))

    train_toy(tmp_path / "b", ToyTask(interrupt_at=stop_after - 1), **choices)
    stopped = state(tmp_path / "b")
    assert stopped["global_step"] == stop_after and not stopped["finished"]
    train_toy(tmp_path / "b", resume=True, **choices)
    assert state(tmp_path / "b")["finished"]
    resumed = load_file(str(tmp_path / "b" / "last" / "model.safetensors"))
    assert all(torch.equal(expected[k], resumed[k]) for k in expected)
    # the same steps and evaluations (none lost, none twice), with the same numbers
    assert untimed(read_log(tmp_path / "b")) == untimed(read_log(tmp_path / "a"))
    for name in ("best", "last"):  # the same state but its wall time and its starts
        resumed_state, straight_state = state(tmp_path / "b", name), state(tmp_path / "a", name)
        assert resumed_state.pop("seconds") >= 0 and straight_state.pop("seconds") >= 0
        resumed_stints, straight_stints = resumed_state.pop("stints"), straight_state.pop("stints")
        assert resumed_state == straight_state
    assert [x["from_step"] for x in straight_stints] == [0]
    assert [x["from_step"] for x in resumed_stints] == [0, stop_after]
    assert all(x["bf16"] is False and x["device"] == "cpu" for x in resumed_stints)


def test_resume_refuses_to_go_on_in_another_precision(tmp_path):
    """train.bf16=auto follows the machine and its threads: a run that trained in bf16 and
    would go on in fp32 (or the reverse) is refused, saying where it may go on."""
    choices = dict(epochs=2, eval_every_steps=2, save_every_steps=2)
    train_toy(tmp_path, ToyTask(interrupt_at=2), **choices)
    saved = state(tmp_path)
    assert saved["bf16"] is False  # recorded: it trained in fp32
    record = tmp_path / "last" / "train_state.json"
    record.write_text(json.dumps({**saved, "bf16": True}))  # as a run that trained in bf16
    with pytest.raises(ValueError, match=r"trained in bf16 and would go on in fp32.*as it did"):
        train_toy(tmp_path, resume=True, **choices)
    record.write_text(json.dumps(saved))
    train_toy(tmp_path, resume=True, **choices)  # in the precision it trained in: goes on
    assert state(tmp_path)["finished"] and len(state(tmp_path)["stints"]) == 2


def test_a_finished_run_resumes_to_nothing_and_a_fresh_one_is_refused(tmp_path):
    train_toy(tmp_path, max_steps=1)
    assert train_toy(tmp_path, resume=True, max_steps=1) is None
    with pytest.raises(ValueError, match=r"already holds a run \(best, last\).*--resume"):
        train_toy(tmp_path, max_steps=1)
    changed = settings(tmp_path, max_steps=1, config={"train": {"seed": 0, "lr": 0.1}})
    with pytest.raises(ValueError, match=r"cannot resume.*train\.lr: 0\.05 -> 0\.1"):
        fit(ToyTask(), Toy(), changed, resume=True)


def test_resume_refuses_other_training_data_and_continues_on_the_same(tmp_path):
    """A changed data.dir may resolve a relative data.train to another file, which the config
    comparison cannot see (data.dir may change: the data moved): the windows' digest does."""
    choices = dict(epochs=2, eval_every_steps=2, save_every_steps=2)
    train_toy(tmp_path, ToyTask(interrupt_at=2), **choices)
    saved = state(tmp_path)
    assert saved["data_windows"] == 10 and saved["data_fingerprint"]
    other = ToyTask()
    other.lengths = [*other.lengths[1:], other.lengths[0]]  # as many windows, other ones
    with pytest.raises(ValueError, match=r"training windows differ.*\(10 then, 10 now"):
        train_toy(tmp_path, other, resume=True, **choices)
    assert state(tmp_path) == saved  # nothing trained or saved by the refused start
    train_toy(tmp_path, resume=True, **choices)
    assert state(tmp_path)["finished"]
    assert state(tmp_path)["data_fingerprint"] == saved["data_fingerprint"]


def test_no_training_example_is_an_error_that_says_why(tmp_path):
    """Zero windows come from data without a located answer, not from the batch size (a
    partial batch still trains; only more processes than examples leave none)."""
    task = ToyTask()
    task.lengths = task.lengths[:0]
    with pytest.raises(ValueError, match="nothing to train on.*answer_start"):
        fit(task, Toy(), settings(tmp_path, max_steps=1), progress=False)


def _stop_flag_worker(rank: int, init_file: str, results) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        flag = trainer.StopFlag()
        first = flag.synced(torch.device("cpu"))  # nobody signalled yet
        if rank == 1:
            flag(signal.SIGTERM, None)  # the signal reaches rank 1 only
        results[rank] = (first, flag.synced(torch.device("cpu")))
    finally:
        dist.destroy_process_group()


def test_stop_flag_is_agreed_across_processes(tmp_path):
    import torch.multiprocessing as mp

    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_stop_flag_worker, args=(str(tmp_path / "init"), results), nprocs=2)
        assert dict(results) == {0: (False, True), 1: (False, True)}


def test_resume_refuses_changed_learning_rate_groups(tmp_path):
    """torch loads optimizer groups by position: a changed head_lr_exclude whose groups happen
    to have the same sizes would resume silently with the saved rates; it must be refused."""
    from torch.optim.lr_scheduler import LambdaLR

    from structqa.training.checkpoint import _check_param_groups
    from structqa.training.optim import build_optimizer

    model = torch.nn.Module()
    model.encoder = torch.nn.Linear(2, 2)
    model.head = torch.nn.Module()
    model.head.W = torch.nn.Parameter(torch.zeros(3, 3))
    model.head.v = torch.nn.Parameter(torch.zeros(3, 3))

    def groups(exclude: list[str]) -> list[dict]:
        opt = build_optimizer(model, 1e-4, 1e-3, 0.01, exclude)
        LambdaLR(opt, lambda step: 1.0)  # sets initial_lr, as the loops' scheduler does
        return opt.state_dict()["param_groups"], opt.param_groups

    saved, _ = groups([])
    _, same = groups([])
    _check_param_groups(tmp_path, saved, same)  # unchanged settings resume
    _, changed = groups(["head.W"])  # W moves into a group of its own, at lr
    with pytest.raises(ValueError, match="head_lr_exclude"):
        _check_param_groups(tmp_path, saved, changed)


def test_start_log_keeps_what_the_checkpoint_saw(tmp_path):
    from structqa.training.checkpoint import start_log

    log = tmp_path / "metrics.jsonl"
    lines = [{"step": s, "loss": 1.0} for s in (1, 2, 3, 4)] + [{"step": 4, "eval": {}}]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 5, "lo')
    start_log(log, 3)  # resumed from step 3: steps 4 and the cut line go
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [1, 2, 3]
    start_log(log, 0)  # a fresh run: a new log
    assert not log.exists()
