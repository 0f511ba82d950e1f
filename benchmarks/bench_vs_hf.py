"""structqa vs the standard Hugging Face QA recipe: same data, same machine, one run.

    python benchmarks/bench_vs_hf.py --quick            # throughput only, minutes on a CPU
    python benchmarks/bench_vs_hf.py --full             # 2 epochs on all 8,330 questions (hours)
    python benchmarks/bench_vs_hf.py --full --side hf   # one side only; resumable

Prints training throughput, inference throughput, post-processing time and held-out EM/F1
for both, and ends with three ratio lines (structqa / HF; above 1 means structqa is faster).
See benchmarks/README.md for what is timed and how.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hf_recipe  # noqa: E402

from structqa.config import Config  # noqa: E402
from structqa.data import read_examples, train_subset  # noqa: E402
from structqa.data.records import Example  # noqa: E402
from structqa.decoding import DecodeConfig, Prediction, SpanCollector  # noqa: E402
from structqa.features.batching import collate, sorted_batches  # noqa: E402
from structqa.features.squad import Feature, featurize  # noqa: E402
from structqa.metrics.squad import squad_v1  # noqa: E402
from structqa.paths import default_encoder_path, resolve_data_dir, resolve_data_file  # noqa: E402
from structqa.runtime import autocast, use_bf16  # noqa: E402

log = logging.getLogger("bench_vs_hf")

TRAIN_FILE = "splits/squad1-train.mrqa.jsonl.gz"
HELDOUT_FILE = "splits/squad1-heldout.mrqa.jsonl.gz"
ROOT = Path(__file__).resolve().parents[1]


# ---- facts about the run ---------------------------------------------------------------------


POSTPROCESS_REPEATS = 5  # both sides; each run takes milliseconds, so one is noise
INTERLEAVED_ROUNDS = 8  # --quick: alternating blocks of both post-processings (the ratio)
BLOCK_TIMED = 2  # timed runs per side and block, after one untimed
INFERENCE_ROUNDS = 2  # --quick: alternating re-timed forward passes per side (the ratio)


def machine_info(device: torch.device) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        # other processes share these cores: the 1/5/15-minute load when this was written
        "load_average": list(os.getloadavg()),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover
        pass
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def git_commit() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def write_json(path: Path, obj: Any) -> None:
    from structqa.io import write_json as atomic_write

    atomic_write(path, obj)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("nan")


# ---- data ------------------------------------------------------------------------------------


def read_split(data_dir: Path, name: str) -> list[Example]:
    return list(read_examples(resolve_data_file(name, data_dir)).examples)  # (it logs a report)


def quick_training_set(
    pool: Sequence[Example], tokenizer, fc, n_windows: int, seed: int
) -> tuple[list[Example], list[Feature]]:
    """Questions chosen by seed (with a located answer) whose windows number >= n_windows;
    structqa's windows cut to exactly n_windows. The HF side tokenizes the same questions."""
    n_questions = min(n_windows, len(pool))
    while True:
        examples = [ex for ex in train_subset(pool, n_questions, seed) if ex.answers]
        feats, _ = featurize(examples, tokenizer, fc, training=True)
        if len(feats) >= n_windows or n_questions == len(pool):
            break
        n_questions = min(len(pool), n_questions * 2)
    feats = feats[:n_windows]
    used = max(f.example_index for f in feats) + 1
    return examples[:used], feats


# ---- structqa side ---------------------------------------------------------------------------


def structqa_config(args: argparse.Namespace, output_dir: Path, bf16: str) -> Config:
    """structqa's default config (Independent head, its own dropout and eval batch size) with
    the benchmark's shared settings."""
    cfg = Config()
    cfg.data.dir = args.data
    cfg.data.max_seq_len, cfg.data.doc_stride = args.max_seq_len, args.doc_stride
    tc = cfg.train
    tc.output_dir, tc.seed, tc.bf16 = str(output_dir), args.seed, bf16
    tc.lr, tc.weight_decay, tc.warmup_ratio = args.lr, args.weight_decay, args.warmup_ratio
    tc.batch_size = args.batch_size
    tc.eval_every_epoch = False
    if args.structqa_eval_batch_size:
        tc.eval_batch_size = args.structqa_eval_batch_size
    return cfg


@torch.inference_mode()
def structqa_forward(
    model, features: Sequence[Feature], batch_size: int, bf16: bool, device: torch.device
) -> tuple[list[tuple[Any, torch.Tensor, torch.Tensor]], float]:
    """run_inference's loop without the decoding: the raw HeadOutputs of every batch."""
    from structqa.inference import bf16_weights

    was_training = model.training
    model.eval()
    outputs = []
    sync(device)
    t0 = time.perf_counter()
    net = bf16_weights(model) if bf16 else model  # as run_inference: the copy is timed too
    for idx in sorted_batches([len(f) for f in features], batch_size):
        batch = collate(features, idx).to(device)
        with autocast(device, bf16):
            out = net(batch)
        out.attentions = ()
        outputs.append((out, batch.feature_index, batch.answer_mask))
    sync(device)
    seconds = time.perf_counter() - t0
    model.train(was_training)
    return outputs, seconds


def structqa_decode(
    outputs,
    examples: Sequence[Example],
    features: Sequence[Feature],
    decode: DecodeConfig,
    device: torch.device,
) -> tuple[dict[str, Prediction], float, float]:
    """SpanCollector.add over recorded outputs, then predictions(): (preds, add s, merge s)."""
    collector = SpanCollector(decode)
    sync(device)
    t0 = time.perf_counter()
    for out, feature_index, answer_mask in outputs:
        collector.add(out, feature_index, answer_mask)
    t1 = time.perf_counter()
    preds = collector.predictions(examples, features)
    t2 = time.perf_counter()
    for ex in examples:  # as evaluate_model: a question whose windows all vanished
        if ex.id not in preds:
            preds[ex.id] = Prediction(ex.id, "", -1, -1, 0.0, 0.0, 0.0, ())
    return preds, t1 - t0, t2 - t1


def structqa_evaluate(
    model,
    cfg: Config,
    examples: Sequence[Example],
    features: Sequence[Feature],
    bf16: bool,
    device: torch.device,
    check_end_to_end: bool = True,
    replay: dict[str, Callable[[], float]] | None = None,
) -> dict[str, Any]:
    """Timed inference (forward only) and decoding (add + predictions), then EM/F1.

    With ``replay``, leaves there closures that re-time one decoding run (key "structqa")
    and one forward pass (key "structqa-forward"), for :func:`interleaved_postprocess` and
    :func:`interleaved_inference`."""
    from structqa.inference import run_inference

    decode = DecodeConfig.from_settings(cfg.decode)
    bs = cfg.train.eval_batch_size
    # warm-up: one batch through the model and the decoder
    warm = features[: min(len(features), bs)]
    warm_out, _ = structqa_forward(model, warm, bs, bf16, device)
    structqa_decode(warm_out, examples, warm, decode, device)
    del warm_out
    outputs, fwd_s = structqa_forward(model, features, bs, bf16, device)
    runs = sorted(  # milliseconds each: the median of a few runs, as for HF
        (
            structqa_decode(outputs, examples, features, decode, device)
            for _ in range(POSTPROCESS_REPEATS)
        ),
        key=lambda r: r[1] + r[2],
    )
    preds, add_s, merge_s = runs[len(runs) // 2]
    if replay is not None:
        replay["structqa-forward"] = lambda: structqa_forward(model, features, bs, bf16, device)[1]
        replay["structqa"] = lambda: sum(
            structqa_decode(outputs, examples, features, decode, device)[1:]
        )
    else:
        del outputs
    gold = {ex.id: list(ex.gold_texts) for ex in examples}
    metrics = squad_v1(gold, {k: p.text for k, p in preds.items()})
    n_win, n_q = len(features), len(examples)
    res: dict[str, Any] = {
        "eval_questions": n_q,
        "eval_windows": n_win,
        "eval_batch_size": bs,
        "inference_seconds": fwd_s,
        "inference_features_per_s": rate(n_win, fwd_s),
        "inference_questions_per_s": rate(n_q, fwd_s),
        "postprocess_seconds": add_s + merge_s,
        "postprocess_seconds_runs": [r[1] + r[2] for r in runs],
        "postprocess_add_seconds": add_s,
        "postprocess_predictions_seconds": merge_s,
        "postprocess_questions_per_s": rate(n_q, add_s + merge_s),
        "exact_match": metrics["exact_match"],
        "f1": metrics["f1"],
    }
    if check_end_to_end:  # the library's own entry points, timed end to end
        sync(device)
        t0 = time.perf_counter()
        collector = run_inference(model, features, decode, bs, bf16)
        t1 = time.perf_counter()
        e2e = collector.predictions(examples, features)
        t2 = time.perf_counter()
        res["run_inference_seconds"] = t1 - t0
        res["run_inference_predictions_seconds"] = t2 - t1
        res["end_to_end_same_answers"] = all(
            e2e[k].text == p.text for k, p in preds.items() if k in e2e
        )
    return res


class _TimedEval:
    """Wraps the training loop's evaluation steps (``run_inference``, then ``score_collector``)
    to know how long they took (subtracted from the training time: the loop evaluates on the
    held-out set after its last epoch)."""

    def __init__(self) -> None:
        self.seconds, self.metrics = 0.0, None

    def wrap(self, fn):
        def timed(*a, **k):
            t0 = time.perf_counter()
            result = fn(*a, **k)
            self.seconds += time.perf_counter() - t0
            if hasattr(result, "metrics"):
                self.metrics = result.metrics
            return result

        return timed


def call_structqa_train(cfg: Config, model, tokenizer, data, resume: bool, progress: bool):
    """structqa.training.loop.train, restoring global torch flags it sets, timing its eval."""
    import structqa.training.loop as loop

    timed = _TimedEval()
    originals = {name: getattr(loop, name) for name in ("run_inference", "score_collector")}
    deterministic = torch.are_deterministic_algorithms_enabled()
    for name, fn in originals.items():
        setattr(loop, name, timed.wrap(fn))
    t0 = time.perf_counter()
    try:
        result = loop.train(cfg, model, tokenizer, data, resume=resume, progress=progress)
    finally:
        seconds = time.perf_counter() - t0
        for name, fn in originals.items():
            setattr(loop, name, fn)
        torch.use_deterministic_algorithms(deterministic)
    return result, seconds, timed


def structqa_batch_sizes(features: Sequence[Feature], cfg: Config, epoch: int) -> list[int]:
    from structqa.training.loop import epoch_batches

    return [len(b) for b in epoch_batches(list(features), cfg, epoch, 1)]


def structqa_features_in_steps(features, cfg: Config, first: int, last: int) -> int:
    """Windows consumed by optimizer steps first..last-1 (grad_accum 1, one process)."""
    per_epoch = len(structqa_batch_sizes(features, cfg, 0))
    total, cache = 0, {}
    for step in range(first, last):
        epoch, b = divmod(step, per_epoch)
        if epoch not in cache:
            cache[epoch] = structqa_batch_sizes(features, cfg, epoch)
        total += cache[epoch][b]
    return total


def structqa_quick(
    args,
    device,
    train_ex: list[Example],
    train_feats: list[Feature],
    eval_ex: list[Example],
    out: Path,
    replay: dict[str, Callable[[], float]] | None = None,
) -> dict[str, Any]:
    from structqa.models.build import build_model
    from structqa.training.data import TrainData, feature_config

    work = out / "quick-work" / "structqa"
    if work.exists():
        shutil.rmtree(work)
    cfg = structqa_config(args, work, args.structqa_bf16)
    steps = math.ceil(len(train_feats) / args.batch_size)
    cfg.train.epochs = 1
    cfg.train.max_steps = steps
    cfg.train.log_every_steps = 1
    seed_all(args.seed)
    model, tokenizer = build_model(cfg)
    fc = feature_config(cfg)
    eval_feats, _ = featurize(eval_ex, tokenizer, fc)
    probe_feats, _ = featurize(eval_ex[:1], tokenizer, fc)  # the loop's end-of-training eval
    data = TrainData(train_ex, train_feats, eval_ex[:1], probe_feats, False)
    bf16 = use_bf16(cfg.train.bf16, device)
    log.info("structqa: training %d steps on %d windows (bf16 %s)", steps, len(train_feats), bf16)
    _, call_s, _ = call_structqa_train(cfg, model, tokenizer, data, resume=False, progress=False)
    # The loop logs, every step, throughput since the epoch began: recover the time at each
    # step (windows so far / rate) and measure from the end of the warm-up steps.
    entries = [json.loads(x) for x in (work / "metrics.jsonl").read_text().splitlines()]
    entries = {e["step"]: e for e in entries if "features_per_s" in e}
    sizes = structqa_batch_sizes(train_feats, cfg, 0)
    seen = np.cumsum([0, *sizes])
    w, last = args.warmup_steps, max(entries)
    t_w = seen[w] / entries[w]["features_per_s"] if w else 0.0
    t_last = seen[last] / entries[last]["features_per_s"]
    tok_w = entries[w]["tokens_per_s"] * t_w if w else 0.0
    tok_last = entries[last]["tokens_per_s"] * t_last
    measured = int(seen[last] - seen[w])
    train_s = t_last - t_w
    res: dict[str, Any] = {
        "precision": "bf16" if bf16 else "fp32",
        "bf16_setting": cfg.train.bf16,
        "train_questions": len(train_ex),
        "train_windows": len(train_feats),
        "train_steps": last,
        "warmup_steps": w,
        "train_windows_measured": measured,
        "train_seconds_measured": train_s,
        "train_features_per_s": rate(measured, train_s),
        "train_questions_per_s_est": rate(measured, train_s) * len(train_ex) / len(train_feats),
        "train_tokens_per_s": rate(tok_last - tok_w, train_s),
        "train_mean_window_tokens": float(np.mean([len(f) for f in train_feats])),
        "train_call_seconds": call_s,
    }
    res.update(structqa_evaluate(model, cfg, eval_ex, eval_feats, bf16, device, replay=replay))
    res["config"] = cfg.to_dict()
    shutil.rmtree(work.parent, ignore_errors=True)  # quick-work: checkpoints not kept
    return res


def structqa_full(args, device, out: Path, key: str) -> dict[str, Any] | None:
    from structqa.models.build import build_model
    from structqa.training.data import prepare_data

    work = out / key
    cfg = structqa_config(args, work, args.structqa_bf16)
    cfg.data.train_size = str(args.train_questions) if args.train_questions else "all"
    cfg.data.eval_size = args.eval_questions
    cfg.train.epochs = args.epochs
    cfg.train.save_every_steps = args.save_every
    seed_all(args.seed)
    model, tokenizer = build_model(cfg)
    data = prepare_data(cfg, tokenizer)
    bf16 = use_bf16(cfg.train.bf16, device)
    state_file = work / "last" / "train_state.json"
    before = json.loads(state_file.read_text())["global_step"] if state_file.exists() else 0
    log.info("structqa: training (bf16 %s) into %s, from step %d", bf16, work, before)
    result, call_s, timed = call_structqa_train(
        cfg, model, tokenizer, data, resume=True, progress=sys.stderr.isatty()
    )
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    after = state.get("global_step", before)
    sessions_file = work / "bench_sessions.json"
    sessions = json.loads(sessions_file.read_text()) if sessions_file.exists() else []
    if after > before:
        sessions.append(
            {
                "first_step": before,
                "last_step": after,
                "features": structqa_features_in_steps(data.train_features, cfg, before, after),
                "seconds": call_s - timed.seconds,  # the loop's held-out evaluation excluded
                "loop_eval_seconds": timed.seconds,
            }
        )
        write_json(sessions_file, sessions)
    if not state.get("finished"):
        log.warning("structqa: stopped at step %d; run the same command again to resume", after)
        return None
    features = sum(s["features"] for s in sessions)
    seconds = sum(s["seconds"] for s in sessions)
    res: dict[str, Any] = {
        "precision": "bf16" if bf16 else "fp32",
        "bf16_setting": cfg.train.bf16,
        "train_questions": len(data.train_examples),
        "train_windows": len(data.train_features),
        "train_steps": after,
        "train_windows_processed": features,
        "train_seconds": seconds,
        "train_features_per_s": rate(features, seconds),
        "train_questions_per_s_est": rate(features, seconds)
        * len(data.train_examples)
        / len(data.train_features),
        "train_sessions": sessions,
        "loop_eval_metrics": timed.metrics,
    }
    res.update(structqa_evaluate(model, cfg, data.eval_examples, data.eval_features, bf16, device))
    res["config"] = cfg.to_dict()
    return res


# ---- HF side ---------------------------------------------------------------------------------


def hf_train_config(args, checkpoint_dir: Path | None) -> hf_recipe.HFTrainConfig:
    return hf_recipe.HFTrainConfig(
        lr=args.lr,
        weight_decay=args.weight_decay,
        warmup_ratio=args.warmup_ratio,
        batch_size=args.batch_size,
        epochs=args.epochs,
        seed=args.seed,
        save_every_steps=args.save_every,
        checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None,
    )


def hf_tokenizer():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(default_encoder_path()), use_fast=True)
    assert tok.is_fast
    return tok


def hf_evaluate(
    model,
    tokenizer,
    examples: Sequence[Example],
    args,
    device,
    replay: dict[str, Callable[[], float]] | None = None,
) -> dict[str, Any]:
    """As :func:`structqa_evaluate`, for the HF recipe (replay keys "hf", "hf-forward")."""
    feats = hf_recipe.prepare_validation_features(
        examples, tokenizer, args.max_seq_len, args.doc_stride
    )
    bs = args.hf_eval_batch_size
    # warm-up: one batch through the model and the post-processing
    warm = hf_recipe.HFEvalFeatures(
        feats.input_ids[:bs],
        feats.attention_mask[:bs],
        feats.token_type_ids[:bs],
        feats.example_index[:bs],
        feats.offsets[:bs],
    )
    w_start, w_end, _ = hf_recipe.hf_forward(model, warm, bs, device)
    warm_examples = examples[: max(warm.example_index) + 1]
    hf_recipe.postprocess_predictions(warm_examples, warm, w_start, w_end, 20, 30)
    start, end, fwd_s = hf_recipe.hf_forward(model, feats, bs, device)
    post_runs = []
    for _ in range(POSTPROCESS_REPEATS):  # milliseconds each: the median of a few runs
        t0 = time.perf_counter()
        answers, _ = hf_recipe.postprocess_predictions(examples, feats, start, end, 20, 30)
        post_runs.append(time.perf_counter() - t0)
    post_s = float(np.median(post_runs))
    if replay is not None:

        def one_run() -> float:
            t0 = time.perf_counter()
            hf_recipe.postprocess_predictions(examples, feats, start, end, 20, 30)
            return time.perf_counter() - t0

        replay["hf"] = one_run
        replay["hf-forward"] = lambda: hf_recipe.hf_forward(model, feats, bs, device)[2]
    gold = {ex.id: list(ex.gold_texts) for ex in examples}
    metrics = squad_v1(gold, answers)
    n_win, n_q = len(feats), len(examples)
    return {
        "eval_questions": n_q,
        "eval_windows": n_win,
        "eval_batch_size": bs,
        "inference_seconds": fwd_s,
        "inference_features_per_s": rate(n_win, fwd_s),
        "inference_questions_per_s": rate(n_q, fwd_s),
        "postprocess_seconds": post_s,
        "postprocess_seconds_runs": post_runs,
        "postprocess_questions_per_s": rate(n_q, post_s),
        "exact_match": metrics["exact_match"],
        "f1": metrics["f1"],
    }


def hf_model_info(model) -> dict[str, Any]:
    c = model.config
    return {
        "attn_implementation": getattr(c, "_attn_implementation", None),
        "attention_probs_dropout_prob": c.attention_probs_dropout_prob,
        "hidden_dropout_prob": c.hidden_dropout_prob,
    }


def hf_quick(
    args,
    device,
    train_ex: list[Example],
    n_total: int,
    eval_ex: list[Example],
    replay: dict[str, Callable[[], float]] | None = None,
) -> dict[str, Any]:
    tokenizer = hf_tokenizer()
    feats = hf_recipe.prepare_train_features(
        train_ex, tokenizer, args.max_seq_len, args.doc_stride
    ).subset(n_total)
    if len(feats) != n_total:
        log.warning("HF: %d training windows from the same questions, not %d", len(feats), n_total)
    seed_all(args.seed)
    model = hf_recipe.load_hf_model(default_encoder_path(), args.hf_attention_dropout)
    cfg = hf_train_config(args, None)
    cfg.max_steps = math.ceil(n_total / args.batch_size)
    log.info("HF: training %d steps on %d windows (fp32, padded)", cfg.max_steps, len(feats))
    tr = hf_recipe.train_hf(model, feats, cfg, device, log=log.info)
    w = args.warmup_steps
    measured = sum(tr.step_features[w:])
    train_s = sum(tr.step_times[w:])
    res: dict[str, Any] = {
        "precision": "fp32",
        "train_questions": len(train_ex),
        "train_windows": len(feats),
        "train_steps": tr.global_step,
        "warmup_steps": w,
        "train_windows_measured": measured,
        "train_seconds_measured": train_s,
        "train_features_per_s": rate(measured, train_s),
        "train_questions_per_s_est": rate(measured, train_s) * len(train_ex) / len(feats),
        "train_tokens_per_s": rate(measured * args.max_seq_len, train_s),
        "train_tokens_per_s_nonpad": rate(
            float(feats.attention_mask.sum()) * measured / len(feats), train_s
        ),
        "fused_adamw": tr.fused_adamw,
        "model": hf_model_info(model),
    }
    res.update(hf_evaluate(model, tokenizer, eval_ex, args, device, replay=replay))
    res["config"] = asdict(cfg) | {"eval_batch_size": args.hf_eval_batch_size}
    return res


def interleaved_inference(
    replay: dict[str, Callable[[], float]], sq: dict[str, Any], hf: dict[str, Any], rounds: int
) -> None:
    """Re-time both sides' forward passes over the held-out windows alternately (structqa,
    HF, structqa, HF, ...) and record ``inference_interleaved_features_per_s`` (windows over
    the summed seconds); the ratio uses them. The first timing of each side is ~15 s
    apart from the other's, long enough for this VM's speed to drift (it moved the
    inference ratio between 3.5x and 5.2x over 17 idle runs)."""
    seconds = {"structqa": 0.0, "hf": 0.0}
    runs: dict[str, list[float]] = {"structqa": [], "hf": []}
    for _ in range(rounds):
        for side in ("structqa", "hf"):
            t = replay[f"{side}-forward"]()
            seconds[side] += t
            runs[side].append(t)
    for side, res in (("structqa", sq), ("hf", hf)):
        res["inference_interleaved_features_per_s"] = rate(
            res["eval_windows"] * rounds, seconds[side]
        )
        res["inference_interleaved_runs"] = runs[side]


def interleaved_postprocess(
    replay: dict[str, Callable[[], float]], sq: dict[str, Any], hf: dict[str, Any], rounds: int
) -> None:
    """Re-time both sides' post-processing in alternating blocks and record the medians in
    each side's result as ``postprocess_interleaved_seconds``; the ratio uses them.

    Each side's own median (``postprocess_seconds``) is taken minutes apart from the other's,
    and this machine's speed drifts by up to ~1.5x between minutes; alternating every few
    runs puts both sides under the same conditions. Within a block a side runs once
    untimed, then ``BLOCK_TIMED`` times timed, so both are measured warm: alternating single
    runs instead timed structqa's few milliseconds right after HF's loop had churned the
    caches (+1 ms, ~35 %), while HF's run never followed anything comparable."""
    times: dict[str, list[float]] = {"structqa": [], "hf": []}
    for _ in range(rounds):
        for side in ("structqa", "hf"):
            replay[side]()  # warm-up, untimed
            times[side].extend(replay[side]() for _ in range(BLOCK_TIMED))
    for side, res in (("structqa", sq), ("hf", hf)):
        res["postprocess_interleaved_seconds"] = float(np.median(times[side]))
        res["postprocess_interleaved_runs"] = times[side]


def hf_full(args, device, data_dir: Path, out: Path) -> dict[str, Any] | None:
    work = out / "hf"
    pool = read_split(data_dir, TRAIN_FILE)
    train_ex = list(
        train_subset(pool, args.train_questions, args.seed) if args.train_questions else pool
    )
    heldout = read_split(data_dir, HELDOUT_FILE)
    if args.eval_questions:
        heldout = heldout[: args.eval_questions]
    tokenizer = hf_tokenizer()
    feats = hf_recipe.prepare_train_features(train_ex, tokenizer, args.max_seq_len, args.doc_stride)
    seed_all(args.seed)
    model = hf_recipe.load_hf_model(default_encoder_path(), args.hf_attention_dropout)
    cfg = hf_train_config(args, work / "checkpoint")
    log.info("HF: training on %d windows (fp32, padded) into %s", len(feats), work)
    tr = hf_recipe.train_hf(model, feats, cfg, device, log=log.info)
    sessions_file = work / "bench_sessions.json"
    sessions = json.loads(sessions_file.read_text()) if sessions_file.exists() else []
    if tr.steps_done:
        sessions.append(
            {
                "first_step": tr.global_step - tr.steps_done,
                "last_step": tr.global_step,
                "features": tr.features,
                "seconds": tr.seconds,
                "mean_loss": float(np.mean(tr.losses)),
            }
        )
        write_json(sessions_file, sessions)
    if not tr.finished:
        log.warning("HF: stopped at step %d; run the same command again to resume", tr.global_step)
        return None
    features = sum(s["features"] for s in sessions)
    seconds = sum(s["seconds"] for s in sessions)
    res: dict[str, Any] = {
        "precision": "fp32",
        "train_questions": len(train_ex),
        "train_windows": len(feats),
        "train_steps": tr.global_step,
        "train_windows_processed": features,
        "train_seconds": seconds,
        "train_features_per_s": rate(features, seconds),
        "train_questions_per_s_est": rate(features, seconds) * len(train_ex) / len(feats),
        "train_sessions": sessions,
        "fused_adamw": tr.fused_adamw,
        "model": hf_model_info(model),
    }
    res.update(hf_evaluate(model, tokenizer, heldout, args, device))
    res["config"] = asdict(cfg) | {"eval_batch_size": args.hf_eval_batch_size}
    return res


# ---- report ----------------------------------------------------------------------------------

ROWS = [
    ("precision", "precision", "{}"),
    ("train questions", "train_questions", "{}"),
    ("train windows", "train_windows", "{}"),
    ("train windows timed", "train_windows_measured", "{}"),
    ("train windows timed", "train_windows_processed", "{}"),
    ("train seconds timed", "train_seconds_measured", "{:.1f}"),
    ("train seconds timed", "train_seconds", "{:.1f}"),
    ("train features/s", "train_features_per_s", "{:.2f}"),
    ("train questions/s (est.)", "train_questions_per_s_est", "{:.2f}"),
    ("eval questions", "eval_questions", "{}"),
    ("eval windows", "eval_windows", "{}"),
    ("eval batch size", "eval_batch_size", "{}"),
    ("inference seconds", "inference_seconds", "{:.2f}"),
    ("inference features/s", "inference_features_per_s", "{:.2f}"),
    ("inference questions/s", "inference_questions_per_s", "{:.2f}"),
    ("inference f/s, interleaved", "inference_interleaved_features_per_s", "{:.2f}"),
    ("postprocess seconds", "postprocess_seconds", "{:.3f}"),
    ("postprocess s, interleaved", "postprocess_interleaved_seconds", "{:.4f}"),
    ("postprocess questions/s", "postprocess_questions_per_s", "{:.1f}"),
    ("held-out EM", "exact_match", "{:.2f}"),
    ("held-out F1", "f1", "{:.2f}"),
]


def ratios(sq: dict[str, Any] | None, hf: dict[str, Any] | None) -> dict[str, float | None]:
    """structqa / HF throughput (post-processing: HF seconds / structqa seconds)."""
    if not sq or not hf:
        return {"train": None, "inference": None, "postprocess": None}
    inf = (
        "inference_interleaved_features_per_s"
        if "inference_interleaved_features_per_s" in sq
        and "inference_interleaved_features_per_s" in hf
        else "inference_features_per_s"
    )
    key = (
        "postprocess_interleaved_seconds"
        if "postprocess_interleaved_seconds" in sq and "postprocess_interleaved_seconds" in hf
        else "postprocess_seconds"
    )
    return {
        "train": sq["train_features_per_s"] / hf["train_features_per_s"],
        "inference": sq[inf] / hf[inf],
        "postprocess": hf[key] / sq[key] if key in sq and key in hf else None,
    }


def print_report(
    title: str,
    sq: dict[str, Any] | None,
    hf: dict[str, Any] | None,
    machine: dict[str, Any],
    full: bool,
) -> dict[str, float | None]:
    print()
    print(f"== {title} ==")
    where = machine.get("gpu") or f"{machine['cpu']}, {machine['torch_threads']} torch threads"
    print(f"machine: {where} ({machine['device']})")
    if sq:
        print(
            f"structqa precision: {sq['precision']} (--structqa-bf16 {sq['bf16_setting']}); "
            "dynamic padding, length-grouped batches"
        )
    if hf:
        m = hf.get("model", {})
        print(
            "HF precision: fp32; every window padded to max_length; attention "
            f"{m.get('attn_implementation')}, attention dropout "
            f"{m.get('attention_probs_dropout_prob')}"
        )
    print(
        "features = windows, each side counting its own (same questions, max_len, stride: "
        "same windows; HF pads each to max_len, structqa pads per batch)"
    )
    print(f"{'':28s}{'structqa':>14s}{'HF':>14s}")
    for label, key, fmt in ROWS:
        if not ((sq and key in sq) or (hf and key in hf)):
            continue
        cells = [fmt.format(d[key]) if d and key in d else "-" for d in (sq, hf)]
        print(f"{label:28s}{cells[0]:>14s}{cells[1]:>14s}")
    if sq and "run_inference_seconds" in sq:
        print(
            f"structqa run_inference end to end (forward + add): {sq['run_inference_seconds']:.2f}"
            f" s, + predictions() {sq['run_inference_predictions_seconds']:.3f} s; same answers "
            f"as the timed replay: {sq['end_to_end_same_answers']}"
        )
    if full and sq and hf:
        print(f"F1 difference (structqa - HF): {sq['f1'] - hf['f1']:+.2f}")
        print(f"EM difference (structqa - HF): {sq['exact_match'] - hf['exact_match']:+.2f}")
    r = ratios(sq, hf)
    for name in ("train", "inference", "postprocess"):
        value = r[name]
        print(f"ratio {name}: " + (f"{value:.2f}x" if value is not None else "n/a"))
    return r


# ---- main ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--quick", action="store_true", help="throughput on a fixed slice")
    mode.add_argument("--full", action="store_true", help="full training + held-out accuracy")
    p.add_argument("--side", choices=["structqa", "hf", "both"], default="both")
    p.add_argument("--out", default="runs/bench_vs_hf", help="results directory")
    p.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--structqa-bf16",
        choices=["auto", "on", "off"],
        help="structqa precision (default: auto for --quick, off for --full)",
    )
    p.add_argument(
        "--train-features",
        type=int,
        default=96,
        help="--quick: training windows timed per side (after the warm-up steps)",
    )
    p.add_argument("--warmup-steps", type=int, default=2, help="--quick: untimed first steps")
    p.add_argument(
        "--eval-questions",
        type=int,
        help="held-out questions to evaluate (default: 200 for --quick, all for --full)",
    )
    p.add_argument("--train-questions", type=int, help="--full: training questions (default all)")
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--warmup-ratio", type=float, default=0.0, help="linear warm-up, both sides")
    p.add_argument("--max-seq-len", type=int, default=384)
    p.add_argument("--doc-stride", type=int, default=128)
    p.add_argument("--hf-eval-batch-size", type=int, default=12)
    p.add_argument(
        "--structqa-eval-batch-size", type=int, help="default: structqa's train.eval_batch_size"
    )
    p.add_argument(
        "--hf-attention-dropout",
        type=float,
        help="override the checkpoint's attention dropout (0.1) on the HF side",
    )
    p.add_argument(
        "--save-every", type=int, default=200, help="--full: resumable checkpoint every N steps"
    )
    p.add_argument("--threads", type=int, help="torch.set_num_threads")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("transformers", "accelerate", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.structqa_bf16 is None:
        args.structqa_bf16 = "off" if args.full else "auto"
    if args.quick and args.eval_questions is None:
        args.eval_questions = 200
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.time()
    t_wall = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data_dir = resolve_data_dir(args.data)
    machine = machine_info(device)
    run_sides = ["structqa", "hf"] if args.side == "both" else [args.side]
    sq: dict[str, Any] | None = None
    hf: dict[str, Any] | None = None
    status = 0
    if args.quick:
        from structqa.features.squad import FeatureConfig
        from structqa.models.build import load_tokenizer

        pool = read_split(data_dir, TRAIN_FILE)
        eval_ex = read_split(data_dir, HELDOUT_FILE)[: args.eval_questions]
        n_total = args.train_features + args.warmup_steps * args.batch_size
        # one choice of questions and windows for both sides (structqa's featurizer)
        fc = FeatureConfig(args.max_seq_len, args.doc_stride)
        tok = load_tokenizer(default_encoder_path())
        train_ex, train_feats = quick_training_set(pool, tok, fc, n_total, args.seed)
        replay: dict[str, Callable[[], float]] = {}
        if "structqa" in run_sides:
            sq = structqa_quick(args, device, train_ex, train_feats, eval_ex, out, replay)
        if "hf" in run_sides:
            hf = hf_quick(args, device, train_ex, n_total, eval_ex, replay)
        if sq and hf:
            interleaved_postprocess(replay, sq, hf, INTERLEAVED_ROUNDS)
            interleaved_inference(replay, sq, hf, INFERENCE_ROUNDS)
        title = "bench_vs_hf --quick (throughput; EM/F1 after a few steps mean nothing)"
    else:
        key = "structqa-bf16" if use_bf16(args.structqa_bf16, device) else "structqa"
        paths = {"structqa": out / f"{key}.json", "hf": out / "hf.json"}
        results: dict[str, dict[str, Any] | None] = {}
        for side in ("structqa", "hf"):
            path = paths[side]
            if path.exists():
                log.info("%s: result exists (%s); not rerun", side, path)
                results[side] = json.loads(path.read_text())["result"]
                continue
            if side not in run_sides:
                results[side] = None
                continue
            t0 = time.perf_counter()
            res = (
                structqa_full(args, device, out, key)
                if side == "structqa"
                else hf_full(args, device, data_dir, out)
            )
            if res is None:
                status = 3  # interrupted: rerun to resume
                results[side] = None
                break
            write_json(
                path,
                {
                    "side": side,
                    "command": sys.argv,
                    "args": vars(args),
                    "seed": args.seed,
                    "git": git_commit(),
                    "machine": machine,
                    "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "session_wall_seconds": time.perf_counter() - t0,
                    "result": res,
                },
            )
            results[side] = res
        sq, hf = results.get("structqa"), results.get("hf")
        title = f"bench_vs_hf --full ({out})"
    r = print_report(title, sq, hf, machine, args.full)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    write_json(
        out / f"{'quick' if args.quick else 'full'}-{stamp}.json",
        {
            "mode": "quick" if args.quick else "full",
            "command": sys.argv,
            "args": vars(args),
            "seed": args.seed,
            "git": git_commit(),
            "machine": machine,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
            "wall_seconds": time.perf_counter() - t_wall,
            "structqa": sq,
            "hf": hf,
            "ratios": r,
            "exit_status": status,
        },
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
