"""How much of a Joint span score is the question-blind bilinear term (the Joint study).

    python scripts/joint_terms.py runs/lowdata/head=joint,train_size=256,seed=0/best \\
        --data runs/lowdata-recipe-joint-w2/_validation/squad1-train-val0.2-seed1234/val.json

For each checkpoint (a Joint-family head in band mode; or any other head, as a reference for the
linear part, whose bilinear part is then 0), on
the first ``--features`` windows of ``--data`` (featurized with the checkpoint's own
max_seq_len/doc_stride), over the valid spans of each window (inside the passage, at most L
tokens): the spread (std) of the linear part q_s.h_i + q_e.h_j and of the bilinear part
h_i^T W h_j, averaged over windows; and the share of windows whose best span changes when the
bilinear part is dropped. Also the spectral norm of W. Prints one markdown row per checkpoint.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from pathlib import Path

import torch

from structqa.data import read_examples
from structqa.features.batching import collate
from structqa.features.squad import FeatureConfig, featurize
from structqa.heads.base import dot_logits, span_band
from structqa.heads.joint import BandJointScorer, passage_mask, valid_band
from structqa.models.build import model_from_checkpoint


def measure(checkpoint: Path, data: Path, n_features: int, batch_size: int) -> dict[str, float]:
    model, tokenizer, cfg = model_from_checkpoint(checkpoint)
    scorer = model.head.scorer
    joint = isinstance(scorer, BandJointScorer)
    if cfg.model.head.endswith("joint") and not joint:
        raise SystemExit(f"{checkpoint}: only the band Joint scorer is measured")
    examples = list(read_examples(data).examples)
    features, _ = featurize(
        examples[: n_features * 2],
        tokenizer,
        FeatureConfig(cfg.data.max_seq_len, cfg.data.doc_stride),
    )
    features = features[:n_features]
    captured: list[tuple] = []
    hook = scorer.register_forward_pre_hook(lambda mod, args: captured.append(args))
    lin_std, bil_std, flips = [], [], 0
    L = cfg.decode.max_answer_length
    with torch.no_grad():
        for i in range(0, len(features), batch_size):
            batch = collate(features, list(range(i, min(i + batch_size, len(features)))))
            captured.clear()
            model(batch)
            states, _ = captured[0]
            start, end = dot_logits(states)
            lin = span_band(start, end, L)
            bil = scorer.bilinear_band(states.tokens.float()) if joint else torch.zeros_like(lin)
            valid = valid_band(passage_mask(batch), L)
            for row in range(len(batch)):
                ok = valid[row]
                if ok.sum() < 2:
                    continue
                lin_std.append(lin[row][ok].std().item())
                bil_std.append(bil[row][ok].std().item())
                both = (lin[row] + bil[row]).masked_fill(~ok, float("-inf")).argmax()
                alone = lin[row].masked_fill(~ok, float("-inf")).argmax()
                flips += int(both != alone)
    hook.remove()
    return {
        "spectral_norm": torch.linalg.matrix_norm(scorer.W.float(), ord=2).item()
        if joint
        else float("nan"),
        "linear_std": statistics.mean(lin_std),
        "bilinear_std": statistics.mean(bil_std),
        "flipped": flips / len(lin_std),
        "windows": len(lin_std),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path, help="best/ (or final/) directories")
    parser.add_argument("--data", type=Path, required=True, help="a SQuAD/MRQA file to score on")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.getLogger("structqa").setLevel(logging.ERROR)  # the reader's per-answer notes
    print(
        "| checkpoint | ‖W‖₂ | std of q·h terms | std of hᵀWh | top span changed by hᵀWh "
        "| windows |"
    )
    print("|---|---|---|---|---|---|")
    for ckpt in args.checkpoints:
        m = measure(ckpt, args.data, args.features, args.batch_size)
        print(
            f"| {ckpt.parent.name} | {m['spectral_norm']:.3f} | {m['linear_std']:.2f} | "
            f"{m['bilinear_std']:.2f} | {100 * m['flipped']:.1f}% | {m['windows']} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
