"""Block stackings (paper Table 9) and attention variants (Table 8) made from a trained encoder.

A stacking is a block spec: ``SA -> NAA -> FFN`` (ANNA) is ``("sa", "naa", "ffn")``.
:func:`convert_stacking` builds an encoder with another block spec from a pretrained one, and
:func:`save_encoder` / :func:`load_encoder` keep every sub-layer through an HF-format directory
(``config.json`` with ``structqa_block`` + ``model.safetensors``) that
``BertEncoder.from_pretrained`` also reads.

Which weights go where
----------------------
Sub-layers of the new block are matched to the old block's by kind, in order (the i-th new
"sa" takes the i-th old "sa"; likewise "naa" and "ffn"); a new "sa"/"naa" left over then takes
a left-over old "naa"/"sa" (a replacement: NAA -> FFN from SA -> FFN reuses SA's weights and
changes the function). Every other new sub-layer is *added*. From BERT's ``SA -> FFN`` this is
the placement ``hf_to_structqa_key`` uses: the pretrained attention goes to the first "sa", or
to the first "naa" when the block has no "sa".

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

Attention variants (Table 8)
----------------------------
:class:`AttentionOptions` turns the self-attention sub-layers into
:class:`VariantAttentionSublayer`: relative positions on keys and/or values (Shaw et al., 2018:
distances clipped to ``[-k, k]``, learned ``(2k + 1, head_dim)`` tables shared by the heads)
and an entity-aware bias (a learned scalar per head added to the scores of keys inside named
entities; the key mask is supplied per call with :func:`entity_keys`). Their new parameters
start at zero, so adding a variant to a trained encoder also preserves its function at step 0.

Dimension letters: B batch, N tokens, H heads, Q queries, K keys, D width, E head width.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import Tensor, nn

from structqa.attention.masks import materialize, no_self, to_additive_bias
from structqa.encoders.bert import (
    AttentionSublayer,
    BertEncoder,
    EncoderConfig,
    load_state_dict,
)
from structqa.io import read_json, write_json
from structqa.manifest import verify_manifest

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

_SELF_ATTENTION = ("sa", "naa")
_CONVERTIBLE = ("sa", "naa", "ffn")
_ADDED_INITS = ("copy", "random")
_ATTENTION_KEY = "structqa_attention"  # config.json entry for the attention options


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
    spare = [i for i, k in enumerate(old) if k in _SELF_ATTENTION and i not in used]
    for j, kind in enumerate(new):  # SA <-> NAA replacement
        if plan[j] is None and kind in _SELF_ATTENTION and spare:
            plan[j] = spare.pop(0)
            used.add(plan[j])
    dropped = [old[i] for i in range(len(old)) if i not in used]
    if dropped:
        log.warning("converting %s -> %s drops the old %s sub-layer(s)", old, new, dropped)
    return tuple(plan)


# ---- attention variants --------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionOptions:
    """Table 8 variants of the self-attention sub-layers (all off = plain attention).

    max_distance: Shaw et al.'s clipping distance k (relative distances beyond +-k share an
    embedding); their experiments use k = 16 and found k >= 2 enough.
    """

    relative_keys: bool = False
    relative_values: bool = False
    max_distance: int = 16
    entity_bias: bool = False

    def __post_init__(self) -> None:
        if self.max_distance < 0:
            raise ValueError(f"max_distance must be >= 0, got {self.max_distance}")

    @property
    def plain(self) -> bool:
        return not (self.relative_keys or self.relative_values or self.entity_bias)


def relative_distance_index(q_len: int, k_len: int, k: int, device: torch.device) -> Tensor:
    """(Q, K) indices into a (2k + 1)-row table: ``clip(j - i, -k, k) + k``."""
    q = torch.arange(q_len, device=device)[:, None]
    kv = torch.arange(k_len, device=device)[None, :]
    return (kv - q).clamp(-k, k) + k


class VariantAttentionSublayer(AttentionSublayer):
    """An :class:`AttentionSublayer` with relative positions and/or an entity bias.

    Scores are ``q_i . (k_j + a^K_ij) / sqrt(E) + w_h * entity[j]`` and outputs
    ``sum_j p_ij (v_j + a^V_ij)`` (Shaw et al., 2018, eqs. 3-4), with ``a^K``, ``a^V`` read
    from (2k + 1, E) tables by clipped distance ``j - i`` and ``w`` one scalar per head. The
    tables and ``w`` start at zero: the sub-layer then computes exactly what its parent does.
    Parameter names of the parent are unchanged, so its weights load as they are.
    """

    def __init__(
        self, cfg: EncoderConfig, options: AttentionOptions, neighbor_aware: bool = False
    ) -> None:
        super().__init__(cfg, neighbor_aware=neighbor_aware)
        self.options = options
        head_dim = cfg.hidden_size // cfg.num_heads
        rows = 2 * options.max_distance + 1
        self.rel_keys = nn.Embedding(rows, head_dim) if options.relative_keys else None
        self.rel_values = nn.Embedding(rows, head_dim) if options.relative_values else None
        self.entity_bias = nn.Parameter(torch.zeros(cfg.num_heads)) if options.entity_bias else None
        self.reset_variant_parameters()
        self.entity_keys: Tensor | None = None  # (B, N) bool, set by `entity_keys(...)`

    def reset_variant_parameters(self) -> None:
        """Zero the variant's own parameters (called after BertEncoder's init)."""
        with torch.no_grad():
            for table in (self.rel_keys, self.rel_values):
                if table is not None:
                    table.weight.zero_()
            if self.entity_bias is not None:
                self.entity_bias.zero_()

    def _split(self, t: Tensor) -> Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.attn.heads, self.attn.head_dim).transpose(1, 2)  # (B, H, N, E)

    def _entity_scores(self, k_len: int) -> Tensor:
        if self.entity_keys is None:
            raise ValueError(
                "entity-aware attention needs the entity key mask: call the encoder inside "
                "`with entity_keys(encoder, mask):`"
            )
        ent = self.entity_keys.bool()
        if ent.shape[1] < k_len:  # prefix vectors (DyReF) come first and are no entities
            ent = torch.cat([ent.new_zeros(ent.shape[0], k_len - ent.shape[1]), ent], dim=1)
        assert self.entity_bias is not None
        return self.entity_bias[None, :, None, None] * ent[:, None, None, :]  # (B, H, 1, K)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        memory: Tensor | None,
        memory_mask: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        b, n, _ = x.shape
        if self.neighbor_aware:
            diag = materialize(no_self, 1, 1, n, n, x.device)
            mask = diag if mask is None else mask & diag
        attn = self.attn
        q, k, v = self._split(attn.query(x)), self._split(attn.key(x)), self._split(attn.value(x))
        scores = q @ k.transpose(-1, -2)  # (B, H, Q, K)
        dist = None
        if self.rel_keys is not None or self.rel_values is not None:
            dist = relative_distance_index(n, n, self.options.max_distance, x.device)  # (Q, K)
        if self.rel_keys is not None:
            scores = scores + torch.einsum("bhqe,qke->bhqk", q, self.rel_keys(dist))
        scores = scores / math.sqrt(attn.head_dim)
        if self.entity_bias is not None:
            scores = scores + self._entity_scores(n).to(scores.dtype)
        has_key = None
        if mask is not None:
            scores = scores + to_additive_bias(mask, scores.dtype)
            has_key = mask.any(-1, keepdim=True)  # (B|1, H|1, Q|1, 1)
        probs = scores.softmax(-1)
        if has_key is not None:
            probs = probs * has_key  # rows with no allowed key attend nowhere (no NaN)
        dropped = nn.functional.dropout(probs, attn.dropout, self.training)
        out = dropped @ v  # (B, H, Q, E)
        if self.rel_values is not None:
            out = out + torch.einsum("bhqk,qke->bhqe", dropped, self.rel_values(dist))
        out = out.transpose(1, 2).reshape(b, n, attn.heads * attn.head_dim)  # (B, Q, D)
        out = attn.output(out)
        return self.LayerNorm(x + self.dropout(out)), probs if need_weights else None


@contextmanager
def entity_keys(encoder: nn.Module, mask: Tensor) -> Iterator[None]:
    """Give the entity-aware sub-layers of ``encoder`` the (B, N) key mask for the calls inside
    the ``with`` block (True = the token lies inside a named entity)."""
    subs = [
        m
        for m in encoder.modules()
        if isinstance(m, VariantAttentionSublayer) and m.entity_bias is not None
    ]
    if not subs:
        raise ValueError("the encoder has no entity-aware attention sub-layer")
    for sub in subs:
        sub.entity_keys = mask
    try:
        yield
    finally:
        for sub in subs:
            sub.entity_keys = None


def entity_keys_if(encoder: nn.Module, mask: Tensor | None) -> AbstractContextManager[None]:
    """:func:`entity_keys` when a batch carries an entity mask, else nothing to enter (an
    encoder without entity-aware attention then runs as it is)."""
    return nullcontext() if mask is None else entity_keys(encoder, mask)


def attention_options(encoder: BertEncoder) -> AttentionOptions:
    """The variant options of ``encoder``'s self-attention sub-layers (plain if none)."""
    for m in encoder.modules():
        if isinstance(m, VariantAttentionSublayer):
            return m.options
    return AttentionOptions()


def build_encoder(cfg: EncoderConfig, attention: AttentionOptions | None = None) -> BertEncoder:
    """A freshly initialized encoder whose self-attention sub-layers carry ``attention``."""
    encoder = BertEncoder(cfg)
    if attention is None or attention.plain:
        return encoder
    for layer in encoder.layers:
        for j, kind in enumerate(layer.spec):
            if kind in _SELF_ATTENTION:
                sub = VariantAttentionSublayer(cfg, attention, neighbor_aware=kind == "naa")
                sub.apply(encoder._init_weights)
                sub.reset_variant_parameters()
                layer.sublayers[j] = sub
    return encoder


# ---- conversion ----------------------------------------------------------------------------


def _anchor(block: Sequence[str], kind: str) -> int:
    """The old sub-layer an added one of ``kind`` copies: the layer's pretrained attention (the
    first "sa", else the first "naa") or its first feed-forward."""
    if kind == "ffn":
        return block.index("ffn")
    return block.index("sa") if "sa" in block else block.index("naa")


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
                copy_from = _anchor(old_block, kind)
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


# ---- HF-format directories -----------------------------------------------------------------

_HF_ATTENTION_NAMES = {
    "attn.query": "attention.self.query",
    "attn.key": "attention.self.key",
    "attn.value": "attention.self.value",
    "attn.output": "attention.output.dense",
    "LayerNorm": "attention.output.LayerNorm",
}
_HF_FFN_NAMES = {
    "intermediate": "intermediate.dense",
    "output": "output.dense",
    "LayerNorm": "output.LayerNorm",
}


def encoder_hf_state(encoder: BertEncoder, prefix: str = "") -> dict[str, Tensor]:
    """``encoder``'s weights under HF BertModel names where HF has them (the sub-layers that
    ``hf_to_structqa_key`` maps HF weights onto), else ``encoder.layer.{i}.sublayers.{j}.*``.

    The inverse of ``hf_to_structqa_key``: every key maps back to the parameter it came from.
    """
    block = encoder.config.block
    hf_sub: dict[int, dict[str, str]] = {}
    if "sa" in block or "naa" in block:
        hf_sub[_anchor(block, "sa")] = _HF_ATTENTION_NAMES
    if "ffn" in block:
        hf_sub[_anchor(block, "ffn")] = _HF_FFN_NAMES
    out: dict[str, Tensor] = {}
    for key, value in encoder.state_dict().items():
        name = key
        if key.startswith("layers."):
            _, idx, _, sub, rest = key.split(".", 4)
            names = hf_sub.get(int(sub), {})
            module, _, kind = rest.rpartition(".")
            if module in names:
                name = f"encoder.layer.{idx}.{names[module]}.{kind}"
            else:
                name = f"encoder.layer.{idx}.sublayers.{sub}.{rest}"
        out[prefix + name] = value.detach().contiguous()
    return out


def save_encoder(
    encoder: BertEncoder,
    path: str | Path,
    extra: dict[str, Tensor] | None = None,
    prefix: str = "",
    architecture: str = "BertModel",
) -> Path:
    """Write ``config.json`` (with ``structqa_block`` and any attention options) and
    ``model.safetensors`` (``encoder_hf_state`` with ``prefix``, plus ``extra`` weights) to
    ``path``; ``prefix="bert."`` and ``extra`` heads make e.g. a ``BertForMaskedLM`` layout."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = encoder.config.to_hf()
    config["architectures"] = [architecture]
    options = attention_options(encoder)
    if not options.plain:
        config[_ATTENTION_KEY] = asdict(options)
    write_json(path / "config.json", config)
    state = encoder_hf_state(encoder, prefix)
    state.update(extra or {})
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def load_encoder(path: str | Path, block: Sequence[str] | None = None) -> BertEncoder:
    """Load what :func:`save_encoder` wrote (or any HF BERT directory), variants included.

    Plain encoders also load with ``BertEncoder.from_pretrained``; encoders with attention
    variants need this function, since their options live in ``config.json``. ``block``
    overrides the block spec as ``BertEncoder.from_pretrained`` does (weights placed by
    ``hf_to_structqa_key``, no function-preserving conversion: see :func:`convert_stacking`).
    """
    path = Path(path)
    verify_manifest(path)  # structqa's own saves carry one; an HF download has none
    hf = read_json(path / "config.json")
    options = AttentionOptions(**hf.get(_ATTENTION_KEY, {}))
    cfg = EncoderConfig.from_hf(hf)
    if block is not None:
        cfg = replace(cfg, block=tuple(block))  # re-runs the validation
    encoder = build_encoder(cfg, options)
    encoder.load_hf_state_dict(load_state_dict(path))
    return encoder


# ---- structqa checkpoints ------------------------------------------------------------------


def encoder_config_dict(encoder: BertEncoder) -> dict:
    """Everything that rebuilds ``encoder``'s structure (``encoder_config.json`` of training
    checkpoints): its :class:`EncoderConfig` fields and, under ``"attention"``, its variant
    options. Read back by :func:`encoder_from_config_dict`."""
    return {**encoder.config.to_dict(), "attention": asdict(attention_options(encoder))}


def encoder_from_config_dict(d: dict) -> BertEncoder:
    """A freshly initialized encoder of the structure :func:`encoder_config_dict` recorded
    (a dict without ``"attention"``, as older checkpoints wrote it, gives plain attention)."""
    return build_encoder(EncoderConfig.from_dict(d), AttentionOptions(**d.get("attention", {})))


__all__ = [
    "ANNA_BLOCK",
    "STACKINGS",
    "AttentionOptions",
    "VariantAttentionSublayer",
    "attention_options",
    "build_encoder",
    "convert_stacking",
    "encoder_config_dict",
    "encoder_from_config_dict",
    "encoder_hf_state",
    "entity_keys",
    "entity_keys_if",
    "load_encoder",
    "parse_stacking",
    "plan_stacking",
    "relative_distance_index",
    "save_encoder",
]
