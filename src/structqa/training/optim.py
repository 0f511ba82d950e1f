"""AdamW with decoupled weight decay (none on biases and norms) and a linear schedule."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Mapping, Sequence

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

log = logging.getLogger(__name__)


def build_optimizer(
    model: nn.Module,
    lr: float,
    head_lr: float | None,
    weight_decay: float,
    head_lr_exclude: Sequence[str] = (),
    param_lr: Mapping[str, float] | None = None,
) -> torch.optim.AdamW:
    """Parameter groups (encoder | head | head at the encoder rate) x (decayed | not decayed),
    then one group per ``param_lr`` glob x (decayed | not decayed).

    Head parameters (every name outside ``encoder.``) train at ``head_lr`` when it is set, except
    those whose name matches one of the ``head_lr_exclude`` globs (e.g. ``head.scorer.W``, the
    Joint head's bilinear form): they train at ``lr``. A parameter matching a ``param_lr`` glob
    (first match in the mapping's order) trains at that glob's rate instead, whatever it is.
    Without exclusions and overrides the groups, and their order, are those of earlier
    checkpoints, so their optimizer state still loads on resume.
    """
    overrides = list((param_lr or {}).items())
    groups: dict[tuple[bool, bool, bool], list[nn.Parameter]] = {}
    own: dict[tuple[int, bool], list[nn.Parameter]] = {}
    matched: dict[str, list[str]] = {pattern: [] for pattern in head_lr_exclude}
    own_matched: dict[str, list[str]] = {pattern: [] for pattern, _ in overrides}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        no_decay = p.ndim < 2 or "LayerNorm" in name
        hit = next(
            (i for i, (pattern, _) in enumerate(overrides) if fnmatch.fnmatchcase(name, pattern)),
            None,
        )
        if hit is not None:
            own_matched[overrides[hit][0]].append(name)
            own.setdefault((hit, no_decay), []).append(p)
            continue
        is_head = not name.startswith("encoder.")
        at_lr = False
        if is_head and head_lr is not None:  # (without head_lr every parameter is at lr)
            for pattern in head_lr_exclude:
                if fnmatch.fnmatchcase(name, pattern):
                    matched[pattern].append(name)
                    at_lr = True
        groups.setdefault((is_head, at_lr, no_decay), []).append(p)
    for pattern, names in matched.items():
        if names:
            log.info("head_lr_exclude %r: %s train at lr %g", pattern, ", ".join(names), lr)
        elif head_lr is not None:
            # a grid may share one exclusion across heads that lack the parameter, so this is
            # no error; but a typo would leave the parameter at head_lr: say it loudly
            log.warning(
                "head_lr_exclude %r matches no head parameter of this model (expected if it "
                "has none such, e.g. a non-Joint head; else check the name)",
                pattern,
            )
    for (pattern, rate), names in zip(overrides, own_matched.values(), strict=True):
        if names:
            log.info("param_lr %r: %s train at lr %g", pattern, ", ".join(names), rate)
        else:
            log.warning(
                "param_lr %r matches no parameter of this model (expected if it has none "
                "such, e.g. a non-Joint head; else check the name)",
                pattern,
            )
    params = [
        {
            "params": ps,
            "lr": lr if not is_head or at_lr or head_lr is None else head_lr,
            "weight_decay": 0.0 if no_decay else weight_decay,
        }
        for (is_head, at_lr, no_decay), ps in sorted(groups.items())
    ]
    params += [
        {
            "params": ps,
            "lr": float(overrides[hit][1]),
            "weight_decay": 0.0 if no_decay else weight_decay,
        }
        for (hit, no_decay), ps in sorted(own.items())
    ]
    return torch.optim.AdamW(params, lr=lr)


def linear_warmup_decay(optimizer: torch.optim.Optimizer, warmup: int, total: int) -> LambdaLR:
    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return LambdaLR(optimizer, factor)
