"""How long ``structqa reader build`` will train: a step timed on this machine, times the steps
each run has left (a run stopped part way counts only what it has still to take)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch

from structqa.config import Config
from structqa.io import recover_dir
from structqa.runtime import default_device, use_bf16

#: windows per question (SQuAD passages rarely need a second window at 384 tokens)
WINDOWS_PER_QUESTION = 1.05


def typical_length(cfg: Config, tokenizer: Any, sample: int = 256) -> int:
    """The mean window length of ``cfg``'s training file (question + passage tokens, cut to
    data.max_seq_len) over ``sample`` questions drawn evenly: batches group windows of like
    length, so a step costs about what a batch of this length costs."""
    from structqa.data.readers import read_extractive

    examples = read_extractive(cfg.data.train).examples
    picked = examples[:: max(1, len(examples) // sample)]
    lengths = [
        min(cfg.data.max_seq_len, len(tokenizer(ex.question, ex.context)["input_ids"]))
        for ex in picked
    ]
    return max(16, round(sum(lengths) / max(1, len(lengths))))


def seconds_per_step(cfg: Config, repeats: int = 6) -> tuple[float, int]:
    """One optimisation step of ``cfg``'s model on a batch of windows of the training file's
    typical length, timed here (forward, backward, the precision training will use): the
    median of ``repeats`` after a warm-up step (6: a median of three was once 30 % above the
    run's own rate, four medians of six within 10 % of it); and that length."""
    from structqa.models.build import build_model

    model, tokenizer = build_model(cfg)
    length = typical_length(cfg, tokenizer)
    device = default_device()
    model.to(device).train()
    n = cfg.train.batch_size
    ids = torch.randint(5, min(len(tokenizer), 2000), (n, length), device=device)
    mask = torch.ones_like(ids)
    types = torch.zeros_like(ids)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    bf16 = use_bf16(cfg.train.bf16, device)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            hidden = model.encoder(ids, mask, types).last_hidden_state
        hidden.float().square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return sorted(times[1:])[len(times[1:]) // 2], length


def estimate_seconds(
    questions: int, cfg: Config, step: float, validation_questions: int = 0
) -> float:
    """Training time left of ``questions`` under ``cfg`` at ``step`` seconds per step, plus a
    validation pass per epoch over a fraction of them or ``validation_questions`` (a forward
    pass is about a third of a step); a run stopped part way (its ``last/``) counts only the
    share of its steps still to take."""
    windows = questions * WINDOWS_PER_QUESTION
    steps = cfg.train.max_steps or math.ceil(windows / cfg.train.batch_size) * cfg.train.epochs
    fraction = cfg.data.validation
    if fraction is not None and str(fraction).replace(".", "", 1).isdigit():
        validation_windows = windows * float(fraction)
    else:
        validation_windows = validation_questions * WINDOWS_PER_QUESTION
    validation = validation_windows / cfg.train.batch_size * step / 3 * cfg.train.epochs
    taken = int((last_state(cfg) or {}).get("global_step", 0))
    left = max(0.0, 1.0 - taken / steps) if steps else 1.0
    return (steps * step + validation) * left


def last_state(cfg: Config) -> dict[str, Any] | None:
    """The train state the run in cfg's output directory last saved (``last/``, recovered
    first from a stop in the middle of its swap), or None."""
    last = Path(cfg.train.output_dir) / "last"
    recover_dir(last)
    state = last / "train_state.json"
    return json.loads(state.read_text()) if state.is_file() else None
