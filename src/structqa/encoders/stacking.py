"""Block stackings of paper Table 9 made from a trained encoder: an extension of the BERT encoder.

A stacking is a block spec: ``SA -> NAA -> FFN`` (ANNA) is ``("sa", "naa", "ffn")``.
:func:`convert_stacking` builds an encoder with another block spec from a pretrained one (by
:func:`structqa.encoders.build.build_encoder`, with Table 8 attention variants if asked) and
gives it the old weights; :func:`structqa.encoders.build.save_encoder` /
:func:`~structqa.encoders.build.load_encoder` keep every sub-layer through an HF-format
directory.

Which weights go where
----------------------
Sub-layers of the new block are matched to the old block's by kind, in order (the i-th new
"sa" takes the i-th old "sa"; likewise "naa" and "ffn"); a new "sa"/"naa" left over then takes
a left-over old "naa"/"sa" (a replacement: NAA -> FFN from SA -> FFN reuses SA's weights and
changes the function). Every other new sub-layer is *added*. From BERT's ``SA -> FFN`` this is
the placement HF weights get (``bert.pretrained_sublayer``): the pretrained attention goes to the
first "sa", or to the first "naa" when the block has no "sa"; an added sub-layer copies that one.

Identity at step 0: the layer-norm hand-off
-------------------------------------------
Every sub-layer is post-layer-norm, ``y = LN(x + f(x))``. An added sub-layer starts with its
output projection at zero, so ``f(x) = 0``; but ``LN(x) != x``, and no LayerNorm is the
identity. Write ``n(z) = (z - mean z) / sqrt(var z + eps)``; the stream entering the added
sub-layer is itself a LayerNorm output, ``x = g * n(z) + b``. The *hand-off* moves that
LayerNorm's affine ``(g, b)`` onto the added sub-layer's LayerNorm and leaves a plain
normalization ``(1, 0)`` behind:

    before:  x = g * n(z) + b
    after:   u = n(z),  y = LN_added(u + 0) = g * n(n(z)) + b

and ``n(n(z)) = n(z)`` up to eps: ``n(z)`` has mean 0 and variance ``var / (var + eps)``, so the
relative error is about ``eps / 2 * |1 - 1 / var|``. With BERT's eps = 1e-12 that is far below
float32 rounding: in float64 the converted all-MiniLM-L6-v2 differs from the original by at most
4e-10 (its embedding sums have a small variance), in float32 by rounding only (2.5e-6 on outputs
up to 5.7). With eps = 1e-5 expect ~5e-6 relative. A run of several added sub-layers hands the
affine to the last of them. Where the stream enters the block from the embeddings or from the
previous block's feed-forward, that LayerNorm is the one handing off.

Why not a residual gate (``y = x + a * (LN(x + f(x)) - x)`` with a learned ``a = 0``)? It is
exact too, but it adds a parameter that the paper's post-LN sub-layer does not have: the
converted encoder would no longer be a ``BertEncoder`` of its block spec, so it would not reload
from ``config.json``'s ``structqa_block`` nor from structqa training checkpoints (which rebuild
``BertEncoder(EncoderConfig)``), and the trained model would keep the gate as a deviation from
the architecture under study. The hand-off adds nothing: the result is exactly the paper's
architecture with particular initial values. Its costs, stated: intermediate hidden states at a
hand-off point are normalized without the affine (``output_hidden_states`` differs at the block
boundaries where a block starts with an added sub-layer, e.g. NAA -> SA -> FFN; the last hidden
state is preserved), and DyReF prefix vectors, which enter after the embedding LayerNorm, pass
through the handed-off LayerNorm when the first block starts with an added sub-layer.

Training dynamics: with the output projection at zero the added branch behaves like a
zero-initialized residual branch (Fixup, ReZero): the projection gets a gradient at step 0
(``dL/dW_o = delta @ context.T``; its LayerNorm, on the main path, does too) and the query,
key and value projections from step 1 on. These are copied from the layer's pretrained
attention (``added_init="copy"``) or keep a fresh N(0, 0.02) draw (``"random"``).

Dimension letters: B batch, N tokens, H heads, Q queries, K keys, D width, E head width.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from structqa.encoders.bert import (
    SELF_ATTENTION_KINDS,
    AttentionSublayer,
    BertEncoder,
    pretrained_sublayer,
)
from structqa.encoders.build import build_encoder
from structqa.encoders.variants import AttentionOptions, attention_options

log = logging.getLogger(__name__)

#: The stackings of paper Table 9, by the names used there.
STACKINGS: dict[str, tuple[str, ...]] = {
    "SA->FFN": ("sa", "ffn"),
    "NAA->FFN": ("naa", "ffn"),
    "SA->SA->FFN": ("sa", "sa", "ffn"),
    "NAA->NAA->FFN": ("naa", "naa", "ffn"),
    "NAA->SA->FFN": ("naa", "sa", "ffn"),
    "SA->NAA->FFN": ("sa", "naa", "ffn"),
}
ANNA_BLOCK = STACKINGS["SA->NAA->FFN"]

_CONVERTIBLE = ("sa", "naa", "ffn")
_ADDED_INITS = ("copy", "random")


def parse_stacking(spec: str | Sequence[str]) -> tuple[str, ...]:
    """A block spec from a Table 9 name (``"SA->NAA->FFN"``, ``"SA → NAA → FFN"``, any case),
    a comma list (``"sa,naa,ffn"``) or a sequence of kinds."""
    if isinstance(spec, str):
        spec = spec.replace("→", "->")
        sep = "->" if "->" in spec else ","
        spec = [part.strip().lower() for part in spec.split(sep)]
    block = tuple(spec)
    bad = [k for k in block if k not in _CONVERTIBLE]
    if bad or not block:
        raise ValueError(
            f"block {block!r}: stackings are made of {_CONVERTIBLE}; known: {list(STACKINGS)}"
        )
    return block


def plan_stacking(old: Sequence[str], new: Sequence[str]) -> tuple[int | None, ...]:
    """For each sub-layer of ``new``, the index of the ``old`` sub-layer whose weights it takes,
    or None for an added sub-layer (see the module docstring for the rule)."""
    old, new = parse_stacking(old), parse_stacking(new)
    plan: list[int | None] = [None] * len(new)
    used: set[int] = set()
    for kind in _CONVERTIBLE:  # same kind, in order
        olds = [i for i, k in enumerate(old) if k == kind]
        news = [j for j, k in enumerate(new) if k == kind]
        for i, j in zip(olds, news, strict=False):
            plan[j] = i
            used.add(i)
    spare = [i for i, k in enumerate(old) if k in SELF_ATTENTION_KINDS and i not in used]
    for j, kind in enumerate(new):  # SA <-> NAA replacement
        if plan[j] is None and kind in SELF_ATTENTION_KINDS and spare:
            plan[j] = spare.pop(0)
            used.add(plan[j])
    dropped = [old[i] for i in range(len(old)) if i not in used]
    if dropped:
        log.warning("converting %s -> %s drops the old %s sub-layer(s)", old, new, dropped)
    return tuple(plan)


# ---- conversion ----------------------------------------------------------------------------


def _zero_output(sub: nn.Module) -> None:
    proj = sub.attn.output if isinstance(sub, AttentionSublayer) else sub.output
    nn.init.zeros_(proj.weight)
    nn.init.zeros_(proj.bias)


def _hand_off(norms: list[tuple[nn.LayerNorm, bool]]) -> None:
    """For each run of added sub-layers, move the affine of the LayerNorm before the run to the
    run's last LayerNorm; the others become plain normalizations (weight 1, bias 0)."""
    i = 0
    while i < len(norms):
        j = i
        while j + 1 < len(norms) and norms[j + 1][1]:
            j += 1
        if j > i:
            source, last = norms[i][0], norms[j][0]
            last.weight.copy_(source.weight)
            last.bias.copy_(source.bias)
            for ln, _ in norms[i:j]:
                nn.init.ones_(ln.weight)
                nn.init.zeros_(ln.bias)
        i = j + 1


@torch.no_grad()
def convert_stacking(
    encoder: BertEncoder,
    new_block: str | Sequence[str],
    attention: AttentionOptions | None = None,
    added_init: str = "copy",
) -> BertEncoder:
    """A new encoder with block spec ``new_block`` made from ``encoder`` (left unchanged).

    Kept sub-layers take their old weights; added ones start as the identity via a zero output
    projection and the layer-norm hand-off (module docstring), so where the new block only adds
    sub-layers the function is preserved at step 0 up to LayerNorm rounding. ``attention``
    gives the self-attention sub-layers Table 8 variant options (None keeps ``encoder``'s);
    their new parameters start at zero, which also preserves the function.
    """
    if added_init not in _ADDED_INITS:
        raise ValueError(f"added_init must be one of {_ADDED_INITS}, got {added_init!r}")
    old_block = parse_stacking(encoder.config.block)
    block = parse_stacking(new_block)
    plan = plan_stacking(old_block, block)
    if attention is None:
        attention = attention_options(encoder)
    ref = encoder.embeddings.word_embeddings.weight
    new = build_encoder(replace(encoder.config, block=block), attention)
    new.to(device=ref.device, dtype=ref.dtype)
    new.embeddings.load_state_dict(encoder.embeddings.state_dict())

    norms: list[tuple[nn.LayerNorm, bool]] = [(new.embeddings.LayerNorm, False)]
    for old_layer, new_layer in zip(encoder.layers, new.layers, strict=True):
        for j, (kind, source) in enumerate(zip(block, plan, strict=True)):
            sub = new_layer.sublayers[j]
            copy_from = source
            if source is None and added_init == "copy":
                copy_from = pretrained_sublayer(old_block, kind)
            if copy_from is not None:
                _copy_matching(old_layer.sublayers[copy_from], sub)
            if source is None:
                _zero_output(sub)
            norms.append((sub.LayerNorm, source is None))
    _hand_off(norms)
    new.train(encoder.training)
    return new


def _copy_matching(src: nn.Module, dst: nn.Module) -> None:
    """Copy the parameters both modules have (a variant's extra tables keep their zeros)."""
    mine = dst.state_dict()
    shared = {k: v for k, v in src.state_dict().items() if k in mine}
    dst.load_state_dict(shared, strict=False)


__all__ = ["ANNA_BLOCK", "STACKINGS", "convert_stacking", "parse_stacking", "plan_stacking"]
