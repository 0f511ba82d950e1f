"""The Hugging Face side of ``bench_vs_hf.py``: the ``run_qa.py`` recipe (``hf_recipe.py``)
trained, run and post-processed, timed as benchmarks/README.md describes."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hf_recipe
import numpy as np
from harness import rate, seed_all

from structqa.data.records import Example
from structqa.io import write_json
from structqa.metrics.squad import squad_v1
from structqa.paths import default_encoder_path

log = logging.getLogger("bench_vs_hf")


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
    for _ in range(args.postprocess_repeats):  # milliseconds each: the median of a few runs
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


def hf_full(
    args, device, train_ex: list[Example], heldout: list[Example], out: Path
) -> dict[str, Any] | None:
    work = out / "hf"
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
