"""How far continued pre-training moved an encoder's pretrained weights (the ANNA study).

    python scripts/weight_drift.py runs/anna/pretrain/combined/final \\
        runs/anna/pretrain/sa-sa-ffn/final [--base DIR]

Each checkpoint is compared with its own step 0: the starting encoder (``--base``, default the
shipped all-MiniLM-L6-v2) converted to the checkpoint's block and attention options exactly as
``structqa pretrain`` converts it (``convert_stacking``, with the run's ``model.added_init``),
so the LayerNorm hand-off of an added sub-layer is not counted as a change. Reported per
group, as the relative change ||W - W0|| / ||W0|| (Frobenius, pooled over the group's
tensors): the embeddings; the sub-layers that came from the starting encoder, attention
(SA, or an NAA that took SA's weights) and FFN apart; all of those together. For sub-layers
the stacking added, the output projection starts at zero, so their growth is given as the
norm of that projection over the norm of the pretrained attention output projection of the
same block (mean over blocks; an added FFN sub-layer is refused). The MLM head is left out:
it is created at step 0. With an extended vocabulary (``model.np_vocab``) the word embeddings
are compared on their original rows.

With ``--data FILE`` (any QA file the readers know), also how far the *function* moved, over
the tokens of the first ``--passages`` distinct passages of FILE (each cut to 256 tokens): the
mean cosine between the checkpoint's and the starting encoder's last hidden states, and two
measures of how spread out the last hidden states are (the starting encoder gets a row too):
the mean cosine between two tokens of the same passage (1 = all alike) and the participation
ratio of the token states' covariance spectrum, (sum s^2)^2 / sum s^4 (about the number of
directions in use). Prints one markdown row per checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch

from structqa.data import read_examples
from structqa.encoders import (
    attention_options,
    convert_stacking,
    load_encoder,
    parse_stacking,
    plan_stacking,
)
from structqa.encoders.bert import BertEncoder
from structqa.models.build import load_tokenizer
from structqa.paths import default_encoder_path

GROUPS = ("embeddings", "attention", "ffn")


def step_zero(
    checkpoint: Path, base: Path | BertEncoder, trained: BertEncoder | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], tuple[tuple[str, int | None], ...]]:
    """(trained state, step-0 state, per-sub-layer (kind, source index or None if added)).

    ``base`` and ``trained`` may be given already loaded (``trained`` is ``checkpoint``'s
    encoder) so that a caller measuring several things loads each directory once.
    """
    trained = trained if trained is not None else load_encoder(checkpoint)
    start = base if isinstance(base, BertEncoder) else load_encoder(base)
    cfg_file = checkpoint / "structqa_pretrain_config.json"
    added_init = "copy"
    if cfg_file.exists():
        added_init = json.loads(cfg_file.read_text()).get("model", {}).get("added_init", "copy")
    block = parse_stacking(trained.config.block)
    ref = convert_stacking(start, block, attention_options(trained), added_init=added_init)
    plan = plan_stacking(parse_stacking(start.config.block), block)
    return trained.state_dict(), ref.state_dict(), tuple(zip(block, plan, strict=True))


def drift(
    checkpoint: Path, base: Path | BertEncoder, trained: BertEncoder | None = None
) -> dict[str, float]:
    """Relative weight change per group, and the added sub-layers' output-projection ratio."""
    state, ref, subs = step_zero(checkpoint, base, trained)
    diff = dict.fromkeys(GROUPS, 0.0)
    norm = dict.fromkeys(GROUPS, 0.0)
    ratios: list[float] = []
    for name, w0 in ref.items():
        w = state[name].float()
        w0 = w0.float()
        if w.shape != w0.shape and w.shape[1:] == w0.shape[1:]:
            w = w[: w0.shape[0]]  # an extended vocabulary (model.np_vocab): the original rows
        if name.startswith("embeddings."):
            group = "embeddings"
        elif name.startswith("layers."):
            _, layer, _, j, *_ = name.split(".")
            kind, source = subs[int(j)]
            if source is None:  # added: grows from a zero output projection
                if kind == "ffn":
                    raise ValueError(f"{checkpoint}: added FFN sub-layers are not measured")
                if name.endswith("attn.output.weight"):
                    kept = [i for i, (k, s) in enumerate(subs) if k != "ffn" and s is not None]
                    if not kept:
                        raise ValueError(f"{checkpoint}: no attention sub-layer kept to compare")
                    pre = state[f"layers.{layer}.sublayers.{kept[0]}.attn.output.weight"]
                    ratios.append(float(w.norm() / pre.float().norm()))
                continue
            group = "ffn" if kind == "ffn" else "attention"
        else:
            continue
        if not torch.is_floating_point(w0):
            continue
        diff[group] += float((w - w0).pow(2).sum())
        norm[group] += float(w0.pow(2).sum())
    out = {g: math.sqrt(diff[g] / norm[g]) if norm[g] else float("nan") for g in GROUPS}
    out["all"] = math.sqrt(sum(diff.values()) / sum(norm.values()))
    out["added_out_ratio"] = statistics.mean(ratios) if ratios else float("nan")
    return out


@torch.inference_mode()
def last_hidden(encoder: BertEncoder, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    was_training = encoder.training
    encoder.eval()
    out = encoder(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    encoder.train(was_training)
    return out


def spread(hidden: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(mean within-passage token cosine, participation ratio) of last hidden states."""
    within = []
    for states, keep in zip(hidden, mask, strict=True):
        x = torch.nn.functional.normalize(states[keep], dim=-1)
        n = len(x)
        if n > 1:
            within.append(float(((x @ x.T).sum() - n) / (n * n - n)))
    tokens = hidden[mask]
    s = torch.linalg.svdvals(tokens - tokens.mean(0))
    return statistics.mean(within), float(s.pow(2).sum() ** 2 / s.pow(4).sum())


def representation(
    encoder: BertEncoder, batch: dict[str, torch.Tensor], reference: torch.Tensor
) -> tuple[float, float, float]:
    """(cosine to the starting encoder's states, within-passage cosine, participation ratio)."""
    mask = batch["attention_mask"].bool()
    hidden = last_hidden(encoder, batch)
    to_start = float(torch.cosine_similarity(hidden[mask], reference[mask], dim=-1).mean())
    return (to_start, *spread(hidden, mask))


def passages_batch(data: Path, base: Path, n: int) -> dict[str, torch.Tensor]:
    contexts = list(dict.fromkeys(ex.context for ex in read_examples(data).examples))[:n]
    if not contexts:
        raise ValueError(f"{data}: no passages")
    tokenizer = load_tokenizer(base)
    enc = tokenizer(contexts, truncation=True, max_length=256, padding=True, return_tensors="pt")
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoints", nargs="+", type=Path)
    ap.add_argument("--base", type=Path, default=None, help="starting encoder directory")
    ap.add_argument("--data", type=Path, default=None, help="QA file whose passages to encode")
    ap.add_argument("--passages", type=int, default=32, help="distinct passages (with --data)")
    args = ap.parse_args(argv)
    base = args.base or default_encoder_path()
    start = load_encoder(base)
    batch = reference = None
    if args.data is not None:
        batch = passages_batch(args.data, base, args.passages)
        reference = last_hidden(start, batch)
    extra = " cosine to start | within-passage cosine | participation ratio |" if batch else ""
    head = "| checkpoint | embeddings | attention | FFN | all | added out-proj / SA out-proj |"
    print(head + extra)
    print("|---|---|---|---|---|---|" + ("---|---|---|" if extra else ""))
    if batch is not None and reference is not None:
        within, ratio = spread(reference, batch["attention_mask"].bool())
        print(f"| {base} (start) | | | | | | 1 | {within:.3f} | {ratio:.1f} |")
    for ckpt in args.checkpoints:
        trained = load_encoder(ckpt)  # once, for the weights and for the states
        d = drift(ckpt, start, trained)
        cells = " | ".join(f"{100 * d[k]:.2f} %" for k in (*GROUPS, "all"))
        added = d["added_out_ratio"]
        row = f"| {ckpt} | {cells} | {'—' if math.isnan(added) else f'{added:.3f}'} |"
        if batch is not None and reference is not None:
            to_start, within, ratio = representation(trained, batch, reference)
            row += f" {to_start:.4f} | {within:.3f} | {ratio:.1f} |"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
