"""The structqa side of ``bench_vs_hf.py``: its own training loop, forward pass and decoding,
timed as benchmarks/README.md describes."""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from harness import rate, seed_all, sync

from structqa.config import Config
from structqa.data.records import Example
from structqa.decoding import DecodeConfig, Prediction, SpanCollector
from structqa.features.batching import collate, sorted_batches
from structqa.features.squad import Feature, featurize
from structqa.io import write_json
from structqa.metrics.squad import squad_v1
from structqa.runtime import autocast, use_bf16

log = logging.getLogger("bench_vs_hf")


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
    repeats: int,
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
        (structqa_decode(outputs, examples, features, decode, device) for _ in range(repeats)),
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
    runtime = quick_runtime(getattr(args, "structqa_runtime", "torch"), device)
    res["runtime"] = runtime
    if runtime == "onnx-int8":  # the user's default where bf16 is not native: export, run it
        model, bf16 = int8_of(work, device), False
    res.update(
        structqa_evaluate(
            model, cfg, eval_ex, eval_feats, bf16, device, args.postprocess_repeats, replay=replay
        )
    )
    res["config"] = cfg.to_dict()
    shutil.rmtree(work.parent, ignore_errors=True)  # quick-work: checkpoints not kept
    return res


def quick_runtime(setting: str, device: torch.device) -> str:
    """``torch`` or ``onnx-int8``; ``auto``: what ``predict`` and ``serve`` run by default, the
    int8 export on a CPU where bf16 does not pay (none, or slower than fp32), else torch
    (bf16)."""
    from structqa.runtime import cpu_bf16_pays

    if setting == "auto":
        return "onnx-int8" if device.type == "cpu" and not cpu_bf16_pays() else "torch"
    return setting


def int8_of(work: Path, device: torch.device):
    """The int8 ONNX graph of the run's last checkpoint, exported as ``predict`` would."""
    from structqa.runtimes.onnx_export import export_onnx
    from structqa.runtimes.onnx_model import OnnxSpanModel

    if device.type != "cpu":
        raise ValueError("--structqa-runtime onnx-int8 runs on the CPU only")
    checkpoint = next(
        d for d in (work / "last", work / "best") if (d / "model.safetensors").is_file()
    )
    done = export_onnx(checkpoint, work / "onnx", quantize="int8")
    log.info("structqa: int8 export in %.1f s (not timed)", done.seconds)
    return OnnxSpanModel(done.directory, "int8")


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
    res.update(
        structqa_evaluate(
            model,
            cfg,
            data.eval_examples,
            data.eval_features,
            bf16,
            device,
            args.postprocess_repeats,
        )
    )
    res["config"] = cfg.to_dict()
    return res
