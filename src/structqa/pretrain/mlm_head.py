"""BERT's masked-LM head, tied to the encoder's word embeddings, and an encoder + head model.

The head is ``dense -> activation -> LayerNorm -> decoder + bias`` with the decoder's weight
*being* the word-embedding matrix (one Parameter, one storage), as in ``BertForMaskedLM``.
Checkpoints use Hugging Face's names (``cls.predictions.transform.dense``,
``cls.predictions.transform.LayerNorm``, ``cls.predictions.bias``; the tied decoder weight is
not stored), so a ``BertForMaskedLM`` directory loads with its head and a directory saved here
loads in ``transformers`` and in ``BertEncoder.from_pretrained`` (which skips ``cls.*``).

Dimension letters: B batch, N tokens, D width, V vocabulary.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from structqa.encoders import convert_stacking, load_encoder, save_encoder
from structqa.encoders.bert import BertEncoder, EncoderConfig, _activation, load_state_dict
from structqa.pretrain.masking import IGNORE_INDEX

log = logging.getLogger(__name__)

HF_PREFIX = "cls.predictions."
# our name -> HF name, after HF_PREFIX
_HF_NAMES = {
    "dense.weight": "transform.dense.weight",
    "dense.bias": "transform.dense.bias",
    "LayerNorm.weight": "transform.LayerNorm.weight",
    "LayerNorm.bias": "transform.LayerNorm.bias",
    "bias": "bias",
}
_TIED = "decoder.weight"


class MLMHead(nn.Module):
    """Hidden states (B, N, D) -> vocabulary logits (B, N, V)."""

    def __init__(self, cfg: EncoderConfig, word_embeddings: nn.Embedding) -> None:
        super().__init__()
        d, v = cfg.hidden_size, cfg.vocab_size
        if word_embeddings.weight.shape != (v, d):
            raise ValueError(f"word embeddings {tuple(word_embeddings.weight.shape)} != {(v, d)}")
        self.dense = nn.Linear(d, d)
        self.act = _activation(cfg.hidden_act)
        self.LayerNorm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.decoder = nn.Linear(d, v, bias=False)
        self.decoder.weight = word_embeddings.weight  # tied: the same Parameter
        self.bias = nn.Parameter(torch.zeros(v))
        nn.init.normal_(self.dense.weight, std=0.02)  # BERT's initializer_range
        nn.init.zeros_(self.dense.bias)
        ref = word_embeddings.weight
        self.to(device=ref.device, dtype=ref.dtype)

    def forward(self, hidden: Tensor) -> Tensor:
        h = self.LayerNorm(self.act(self.dense(hidden)))
        return self.decoder(h) + self.bias  # (B, N, V)

    def hf_state(self) -> dict[str, Tensor]:
        """The head's weights under HF names (the tied decoder weight left out)."""
        own = self.state_dict()
        return {HF_PREFIX + hf: own[ours].detach().contiguous() for ours, hf in _HF_NAMES.items()}

    def load_hf_state(self, state: Mapping[str, Tensor]) -> None:
        """Load ``cls.predictions.*`` weights (any leading model prefix already removed)."""
        got = {k[len(HF_PREFIX) :]: v for k, v in state.items() if k.startswith(HF_PREFIX)}
        if "bias" not in got and "decoder.bias" in got:  # older checkpoints store it there
            got["bias"] = got["decoder.bias"]
        missing = [hf for hf in _HF_NAMES.values() if hf not in got]
        if missing:
            raise ValueError(f"incomplete MLM head in checkpoint: missing {missing}")
        if "decoder.weight" in got and not torch.equal(
            got["decoder.weight"].to(self.decoder.weight), self.decoder.weight.detach()
        ):
            log.warning("checkpoint's decoder weight differs from the word embeddings; tying")
        mapped = {ours: got[hf] for ours, hf in _HF_NAMES.items()}
        missing, _ = self.load_state_dict(mapped, strict=False)
        assert missing == [_TIED], missing  # the tied weight is the encoder's, already loaded


def _strip_model_prefix(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    out = {}
    for key, value in state.items():
        for prefix in ("bert.", "model."):
            if key.startswith(prefix + HF_PREFIX):
                key = key[len(prefix) :]
        out[key] = value
    return out


def ensure_mlm_head(
    encoder: BertEncoder, source: str | Path | Mapping[str, Tensor] | None = None
) -> MLMHead:
    """An MLM head tied to ``encoder``: loaded from ``source`` (a checkpoint directory or a
    state dict with HF names) when it holds one, else freshly initialized."""
    head = MLMHead(encoder.config, encoder.embeddings.word_embeddings)
    if source is None:
        state: Mapping[str, Tensor] = {}
    elif isinstance(source, str | Path):
        state = load_state_dict(Path(source))
    else:
        state = source
    state = _strip_model_prefix(state)
    if any(k.startswith(HF_PREFIX) for k in state):
        head.load_hf_state(state)
        log.info("MLM head loaded from the checkpoint")
    else:
        log.info("no MLM head in the checkpoint: created one (tied to the word embeddings)")
    return head


@dataclass
class MLMOutput:
    """Without labels: logits of every token (B, N, V). With labels: logits of the labeled
    tokens only, (M, V) in row-major order (``logits == full_logits[labels != -100]``)."""

    logits: Tensor  # (B, N, V), or (M, V) when labels were given
    loss: Tensor | None = None  # mean cross-entropy over labeled tokens


class MaskedLM(nn.Module):
    """An encoder with a tied MLM head."""

    def __init__(self, encoder: BertEncoder, head: MLMHead | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head if head is not None else ensure_mlm_head(encoder)
        if self.head.decoder.weight is not encoder.embeddings.word_embeddings.weight:
            raise ValueError("the MLM head is not tied to this encoder's word embeddings")

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        pos_tag_ids: Tensor | None = None,
    ) -> MLMOutput:
        hidden = self.encoder(
            input_ids, attention_mask, token_type_ids, pos_tag_ids=pos_tag_ids
        ).last_hidden_state
        if labels is None:
            return MLMOutput(logits=self.head(hidden))  # (B, N, V)
        # only the labeled tokens (~15%) go through the vocabulary projection: the full
        # (B, N, V) logits were most of a step's time and memory (12 GB at batch 32 x 384)
        sel = labels != IGNORE_INDEX  # (B, N)
        logits = self.head(hidden[sel])  # (M, V)
        if logits.shape[0] == 0:
            # no token to predict (a short window whose one word outran the masking budget):
            # a zero loss that keeps the graph, where the mean over nothing was NaN
            return MLMOutput(logits=logits, loss=logits.float().sum() * 0.0)
        loss = F.cross_entropy(logits.float(), labels[sel])
        return MLMOutput(logits=logits, loss=loss)

    @classmethod
    def from_pretrained(cls, path: str | Path, block: Sequence[str] | None = None) -> MaskedLM:
        """Load an HF BERT directory with or without an MLM head (created when absent).

        ``block`` converts the encoder with :func:`convert_stacking` (added sub-layers start as
        the identity), e.g. to continue pre-training BERT as ANNA.
        """
        encoder = load_encoder(path)
        if block is not None and tuple(block) != encoder.config.block:
            encoder = convert_stacking(encoder, block)
        return cls(encoder, ensure_mlm_head(encoder, path))

    def save_pretrained(self, path: str | Path) -> Path:
        """A ``BertForMaskedLM``-layout directory (config.json + model.safetensors)."""
        return save_encoder(
            self.encoder,
            path,
            extra=self.head.hf_state(),
            prefix="bert.",
            architecture="BertForMaskedLM",
        )
