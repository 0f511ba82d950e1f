"""A compact BERT-family encoder that loads Hugging Face BERT checkpoints.

Blocks are stacks of post-layer-norm sub-layers named by a spec such as ``("sa", "ffn")``
(BERT), ``("sa", "naa", "ffn")`` (ANNA) or ``("sa", "xa", "ffn")`` (a decoder block that
cross-attends to an encoder). Extra vectors can be inserted after the embedding layer
(DyReF) and an extra mask function can restrict attention everywhere or per layer. An optional
POS-tag embedding (``pos_vocab_size`` rows, ANNA Table 7's word + POS input) is added to the
input embeddings; it starts at zero, so adding it leaves a trained encoder's function unchanged.

Dimension letters: B batch, N tokens, P inserted prefix vectors, H heads, D width.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from structqa.attention.kernels import cpu_kernels_enabled, fast_path, linear
from structqa.attention.masks import MaskMod, and_masks, and_no_self, key_padding, materialize
from structqa.attention.module import MultiHeadAttention
from structqa.io import UnreadableFile, read_json, read_safetensors

log = logging.getLogger(__name__)

SUBLAYER_KINDS = ("sa", "naa", "xa", "ffn")
SELF_ATTENTION_KINDS = ("sa", "naa")  # the plain and the neighbor-aware self-attention


@dataclass
class EncoderConfig:
    vocab_size: int = 30522
    hidden_size: int = 384
    num_layers: int = 6
    num_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    pad_token_id: int = 0
    hidden_act: str = "gelu"
    block: tuple[str, ...] = ("sa", "ffn")
    pos_vocab_size: int = 0  # rows of the POS-tag input embedding (0: none; id 0 = no word)

    def __post_init__(self) -> None:
        self.block = tuple(self.block)
        bad = [k for k in self.block if k not in SUBLAYER_KINDS]
        if bad:
            raise ValueError(f"unknown sub-layer kind(s) {bad}; known: {SUBLAYER_KINDS}")
        if self.pos_vocab_size < 0:
            raise ValueError(f"pos_vocab_size must be >= 0, got {self.pos_vocab_size}")

    @classmethod
    def from_hf(cls, hf: dict) -> EncoderConfig:
        if hf.get("model_type", "bert") not in ("bert",):
            log.warning("checkpoint model_type %r is treated as BERT", hf.get("model_type"))
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported for HF checkpoints")
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"],
            intermediate_size=hf["intermediate_size"],
            max_position_embeddings=hf.get("max_position_embeddings", 512),
            type_vocab_size=hf.get("type_vocab_size", 2),
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            hidden_dropout=hf.get("hidden_dropout_prob", 0.1),
            attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
            pad_token_id=hf.get("pad_token_id", 0) or 0,
            hidden_act=hf.get("hidden_act", "gelu"),
            block=tuple(hf.get("structqa_block", ("sa", "ffn"))),
            pos_vocab_size=hf.get("structqa_pos_vocab_size", 0),
        )

    def to_hf(self) -> dict:
        hf = {
            "architectures": ["BertModel"],
            "model_type": "bert",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "layer_norm_eps": self.layer_norm_eps,
            "hidden_dropout_prob": self.hidden_dropout,
            "attention_probs_dropout_prob": self.attention_dropout,
            "pad_token_id": self.pad_token_id,
            "hidden_act": self.hidden_act,
            "position_embedding_type": "absolute",
            "structqa_block": list(self.block),
        }
        if self.pos_vocab_size:
            hf["structqa_pos_vocab_size"] = self.pos_vocab_size
        return hf

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> EncoderConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _activation(name: str):
    if name == "gelu":
        return F.gelu
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    raise ValueError(f"unsupported hidden_act {name!r}")


class Embeddings(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.pos_tag_embeddings = (
            nn.Embedding(cfg.pos_vocab_size, cfg.hidden_size) if cfg.pos_vocab_size else None
        )
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor | None, pos_tag_ids: Tensor | None = None
    ) -> Tensor:
        n = input_ids.shape[1]
        positions = torch.arange(n, device=input_ids.device)[None, :]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        if self.pos_tag_embeddings is not None:
            if pos_tag_ids is None:
                raise ValueError(
                    "this encoder has a POS-tag input embedding: pass pos_tag_ids (fine-tuning "
                    "computes them with spaCy, data.token_tags=[pos])"
                )
            x = x + self.pos_tag_embeddings(pos_tag_ids)
        elif pos_tag_ids is not None:
            raise ValueError("pos_tag_ids given to an encoder without a POS-tag embedding")
        return self.dropout(self.LayerNorm(x))


class AttentionSublayer(nn.Module):
    """Attention + dropout + residual + layer norm. ``neighbor_aware`` removes the diagonal."""

    def __init__(
        self,
        cfg: EncoderConfig,
        neighbor_aware: bool = False,
        cross: bool = False,
        fold_memory: bool = False,
    ):
        super().__init__()
        self.attn = MultiHeadAttention(
            cfg.hidden_size, cfg.num_heads, cfg.attention_dropout, fold_memory=cross and fold_memory
        )
        self.neighbor_aware, self.cross = neighbor_aware, cross
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        memory: Tensor | None,
        memory_mask: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        if self.cross:
            out, probs = self.attn(x, memory_mask, memory=memory, need_weights=need_weights)
        else:
            if self.neighbor_aware:
                mask = and_no_self(mask, x.shape[1], x.device)
            out, probs = self.attn(x, mask, need_weights=need_weights)
        return self.LayerNorm(x + self.dropout(out)), probs

    def forward_packed(self, x: Tensor, rows: Sequence[tuple[int, int]]) -> Tensor:
        """Inference over packed windows (see :meth:`BertEncoder.forward`): x (T, D)."""
        return self.LayerNorm(x + self.attn.forward_packed(x, rows, self.neighbor_aware))


class FeedForward(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.intermediate = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.act = _activation(cfg.hidden_act)
        self.gelu = cfg.hidden_act == "gelu"  # exact (erf) GELU, as F.gelu
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: Tensor) -> Tensor:
        if self.gelu:  # the BERT activation: fused into the product on the CPU fast path
            hidden = linear(x, self.intermediate, gelu=True)
        else:
            hidden = self.act(self.intermediate(x))
        return self.LayerNorm(x + self.dropout(linear(hidden, self.output)))


class Block(nn.Module):
    """One encoder (or decoder) layer: the sub-layers of ``cfg.block`` in order."""

    def __init__(
        self, cfg: EncoderConfig, spec: Sequence[str] | None = None, fold_memory: bool = False
    ):
        """``fold_memory``: cross-attention sub-layers use the folded path (few queries)."""
        super().__init__()
        self.spec = tuple(spec or cfg.block)
        subs: list[nn.Module] = []
        for kind in self.spec:
            if kind == "ffn":
                subs.append(FeedForward(cfg))
            else:
                subs.append(
                    AttentionSublayer(
                        cfg,
                        neighbor_aware=kind == "naa",
                        cross=kind == "xa",
                        fold_memory=fold_memory,
                    )
                )
        self.sublayers = nn.ModuleList(subs)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[Tensor]]:
        weights: list[Tensor] = []
        for kind, sub in zip(self.spec, self.sublayers, strict=True):
            if kind == "ffn":
                x = sub(x)
            else:
                x, probs = sub(x, mask, memory, memory_mask, need_weights)
                if probs is not None:
                    weights.append(probs)
        return x, weights

    def forward_packed(self, x: Tensor, rows: Sequence[tuple[int, int]]) -> Tensor:
        """Inference over packed windows (see :meth:`BertEncoder.forward`): x (T, D)."""
        for kind, sub in zip(self.spec, self.sublayers, strict=True):
            x = sub(x) if kind == "ffn" else sub.forward_packed(x, rows)
        return x


#: The packed path rounds its token count up to a multiple of this (with rows that no window
#: reads): every new matrix shape keeps memory for its compiled kernels, and a server would
#: otherwise meet every count of tokens (see structqa.serving.batcher.SHAPE_MULTIPLE).
PACKED_MULTIPLE = 32


def packable(layers: Sequence[Block]) -> bool:
    """Whether the packed inference path computes ``layers``: plain self-attention (or
    neighbor-aware) and feed-forward sub-layers only. Cross-attention reads another sequence,
    and the attention variants (relative positions, entity-aware keys) have their own
    forward."""
    return all(
        type(sub) is FeedForward or (type(sub) is AttentionSublayer and not sub.cross)
        for layer in layers
        for sub in layer.sublayers
    )


def packed_rows(valid: Tensor) -> list[tuple[int, int]] | None:
    """The (start, end) of each row's real tokens once they are packed one row after
    another, or None where some row's real tokens are not a prefix of it (left padding, holes)
    or a row has fewer than two (neighbor-aware attention needs a neighbour)."""
    lengths = valid.sum(1)
    prefix = torch.arange(valid.shape[1], device=valid.device)[None, :] < lengths[:, None]
    if not bool(torch.equal(prefix, valid)) or bool((lengths < 2).any()):
        return None
    ends = lengths.cumsum(0).tolist()
    return [(end - n, end) for end, n in zip(ends, lengths.tolist(), strict=True)]


@dataclass
class EncoderOutput:
    last_hidden_state: Tensor  # (B, P + N, D)
    hidden_states: tuple[Tensor, ...] = ()
    attentions: tuple[Tensor, ...] = ()  # per attention sub-layer: (B, H, Q, K)
    mask: Tensor | None = field(default=None, repr=False)


class BertEncoder(nn.Module):
    """Embeddings + a stack of blocks (+ optional extra blocks on top)."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.apply(self._init_weights)
        if self.embeddings.pos_tag_embeddings is not None:
            nn.init.zeros_(self.embeddings.pos_tag_embeddings.weight)  # function-preserving

    @torch.no_grad()
    def add_pos_tag_embeddings(self, num_tags: int) -> None:
        """Give the encoder a zero-initialized POS-tag input embedding of ``num_tags`` rows
        (in place): its outputs are unchanged until the table is trained."""
        if self.embeddings.pos_tag_embeddings is not None:
            raise ValueError("the encoder already has a POS-tag embedding")
        ref = self.embeddings.word_embeddings.weight
        table = nn.Embedding(num_tags, self.config.hidden_size)
        nn.init.zeros_(table.weight)
        self.embeddings.pos_tag_embeddings = table.to(device=ref.device, dtype=ref.dtype)
        self.config = replace(self.config, pos_vocab_size=num_tags)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    def packs_at_inference(self, device: torch.device) -> bool:
        """Whether inference on ``device`` takes the packed path of :meth:`forward` (the CPU
        inference kernels on, and only sub-layers the path computes), so that windows of any
        lengths share a forward pass without paying for padding."""
        return device.type == "cpu" and cpu_kernels_enabled() and packable(self.layers)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        prefix: Tensor | None = None,
        extra_mask: MaskMod | None = None,
        layer_masks: Sequence[MaskMod | None] | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        pos_tag_ids: Tensor | None = None,
    ) -> EncoderOutput:
        """Encode a batch.

        prefix: (B, P, D) vectors inserted after the embedding layer, before the tokens; token
        position ids are unchanged. attention_mask: (B, N), 1 for real tokens. extra_mask and
        layer_masks are mask functions over the full (P + N) sequence, AND-ed with padding.
        pos_tag_ids: (B, N) POS ids of the tokens' words, required by (and only by) an encoder
        with a POS-tag embedding.
        """
        x = self.embeddings(input_ids, token_type_ids, pos_tag_ids)  # (B, N, D)
        b, n = input_ids.shape
        valid = (
            torch.ones(b, n, dtype=torch.bool, device=x.device)
            if attention_mask is None
            else attention_mask.bool()
        )
        if prefix is not None:
            x = torch.cat([prefix.to(x.dtype), x], dim=1)  # (B, P + N, D)
            valid = torch.cat([valid.new_ones(b, prefix.shape[1]), valid], dim=1)
        total = x.shape[1]
        heads = self.config.num_heads
        base_mod = key_padding(valid)
        if extra_mask is not None:
            base_mod = and_masks(base_mod, extra_mask)
        base = materialize(base_mod, b, heads, total, total, x.device)
        pack = (
            not self.training  # (no dropout on the packed path)
            and fast_path(x)
            and extra_mask is None
            and not any(m is not None for m in layer_masks or ())
            and not (output_attentions or output_hidden_states)
            and packable(self.layers)
        )
        rows = packed_rows(valid) if pack else None
        if rows is not None:
            # inference on the CPU: the windows' real tokens packed into one (T, D) matrix,
            # so the projections and feed-forward layers run once over every token of the
            # batch and no padded position is computed; each window attends over its own
            # tokens. The padded positions of the output are zeros (the heads mask them).
            packed = x[valid]
            tokens = packed.shape[0]
            spare = -tokens % PACKED_MULTIPLE  # rows no window reads: bounded shapes
            if spare:
                packed = torch.cat([packed, packed.new_zeros(spare, packed.shape[1])])
            for layer in self.layers:
                packed = layer.forward_packed(packed, rows)
            x = packed.new_zeros((*x.shape[:2], packed.shape[-1]))
            x[valid] = packed[:tokens]
            return EncoderOutput(last_hidden_state=x, mask=base)
        hidden, attns = [x], []
        for i, layer in enumerate(self.layers):
            mask = base
            if layer_masks is not None and layer_masks[i] is not None:
                mask = base & materialize(layer_masks[i], b, heads, total, total, x.device)
            x, w = layer(x, mask, need_weights=output_attentions)
            attns.extend(w)
            if output_hidden_states:
                hidden.append(x)
        return EncoderOutput(
            last_hidden_state=x,
            hidden_states=tuple(hidden) if output_hidden_states else (),
            attentions=tuple(attns),
            mask=base,
        )

    # ---- checkpoints -------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | Path, block: Sequence[str] | None = None) -> BertEncoder:
        """Load an HF BERT checkpoint directory (config.json + model.safetensors or .bin)."""
        path = Path(path)
        cfg_file = path / "config.json"
        if not cfg_file.exists():
            raise FileNotFoundError(f"{path}: no config.json; is this an HF BERT checkpoint dir?")
        cfg = EncoderConfig.from_hf(read_json(cfg_file))
        if block is not None:
            cfg = replace(cfg, block=tuple(block))  # re-runs the validation
        model = cls(cfg)
        state = load_state_dict(path)
        model.load_hf_state_dict(state)
        return model

    def load_hf_state_dict(self, state: dict[str, Tensor]) -> None:
        """Load HF BertModel weights; sub-layers that HF lacks keep their initialization."""
        mapped = {}
        for key, value in state.items():
            new = hf_to_structqa_key(key, self.config.block)
            if new is not None:
                mapped[new] = value
        missing, unexpected = self.load_state_dict(mapped, strict=False)
        if unexpected:
            raise ValueError(f"unexpected weights in checkpoint: {unexpected[:5]}")
        if missing:
            log.info(
                "%d parameters not in the checkpoint keep their initialization: %s",
                len(missing),
                missing[:4],
            )


def load_state_dict(path: Path) -> dict[str, Tensor]:
    """Read model.safetensors or pytorch_model.bin from an HF checkpoint directory."""
    st = path / "model.safetensors"
    if st.exists():
        return read_safetensors(st, "copy the checkpoint again from its source")
    pt = path / "pytorch_model.bin"
    if pt.exists():
        try:
            return torch.load(pt, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError) as err:
            raise UnreadableFile(
                pt,
                f"not a readable weights-only PyTorch file ({str(err).splitlines()[0]})",
                "copy the checkpoint again from its source, or convert it to model.safetensors",
            ) from None
    raise FileNotFoundError(f"{path}: neither model.safetensors nor pytorch_model.bin found")


_HF_ATTN = {
    "attention.self.query": "attn.query",
    "attention.self.key": "attn.key",
    "attention.self.value": "attn.value",
    "attention.output.dense": "attn.output",
    "attention.output.LayerNorm": "LayerNorm",
}
_HF_FFN = {
    "intermediate.dense": "intermediate",
    "output.dense": "output",
    "output.LayerNorm": "LayerNorm",
}


def pretrained_sublayer(block: Sequence[str], kind: str) -> int:
    """The sub-layer of ``block`` that holds HF BERT's feed-forward (``kind`` "ffn") or its
    self-attention (any other kind): the first "ffn"; the first "sa", else the first "naa"
    (ANNA's SA -> NAA replacement reuses BERT's attention)."""
    if kind == "ffn":
        return block.index("ffn")
    return block.index("sa") if "sa" in block else block.index("naa")


def hf_to_structqa_key(key: str, block: Sequence[str]) -> str | None:
    """Map an HF BertModel parameter name to ours (None for weights we do not use).

    HF's self-attention goes to the first "sa" sub-layer; when the block has no "sa" but a
    "naa", the neighbor-aware sub-layer reuses those weights (ANNA's SA -> NAA replacement).
    """
    for prefix in ("bert.", "model."):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    if key.startswith(("pooler.", "cls.", "qa_outputs.")) or key.endswith("position_ids"):
        return None
    if key.startswith("embeddings."):
        return key
    if not key.startswith("encoder.layer."):
        return None
    rest = key[len("encoder.layer.") :]
    idx, _, name = rest.partition(".")
    if name.startswith("sublayers."):  # sub-layers HF has no name for, saved under ours
        return f"layers.{idx}.{name}"
    for kind, names in (("sa", _HF_ATTN), ("ffn", _HF_FFN)):
        for hf_name, ours in names.items():
            if name.startswith(hf_name + "."):
                sub = pretrained_sublayer(block, kind)
                return f"layers.{idx}.sublayers.{sub}.{ours}{name[len(hf_name) :]}"
    return None


def encoder_hf_state(encoder: BertEncoder, prefix: str = "") -> dict[str, Tensor]:
    """``encoder``'s weights under HF BertModel names where HF has them (the sub-layers that
    :func:`hf_to_structqa_key` maps HF weights onto), else ``encoder.layer.{i}.sublayers.{j}.*``.

    The inverse of :func:`hf_to_structqa_key`: every key maps back to the parameter it came
    from. A block other than SA -> FFN (ANNA's NAA sub-layers) has no HF class: its weights
    are saved where HF BertModel would read them as plain self-attention, and HF loads such
    a checkpoint as plain BERT (warning of unexpected keys at most). Load it with structqa.
    """
    block = encoder.config.block
    hf_sub: dict[int, dict[str, str]] = {}
    for kind, names in (("sa", _HF_ATTN), ("ffn", _HF_FFN)):
        if kind in block or (kind == "sa" and "naa" in block):
            hf_sub[pretrained_sublayer(block, kind)] = {ours: hf for hf, ours in names.items()}
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
