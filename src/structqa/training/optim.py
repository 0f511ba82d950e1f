"""AdamW with decoupled weight decay (none on biases and norms) and a linear schedule."""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR


def build_optimizer(
    model: nn.Module, lr: float, head_lr: float | None, weight_decay: float
) -> torch.optim.AdamW:
    """Four groups: (encoder | head) x (decayed | not decayed); head params may get their own lr."""
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_head = not name.startswith("encoder.")
        no_decay = p.ndim < 2 or "LayerNorm" in name
        groups.setdefault((is_head, no_decay), []).append(p)
    params = [
        {
            "params": ps,
            "lr": (lr if head_lr is None else head_lr) if is_head else lr,
            "weight_decay": 0.0 if no_decay else weight_decay,
        }
        for (is_head, no_decay), ps in sorted(groups.items())
    ]
    return torch.optim.AdamW(params, lr=lr)


def linear_warmup_decay(optimizer: torch.optim.Optimizer, warmup: int, total: int) -> LambdaLR:
    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return LambdaLR(optimizer, factor)
