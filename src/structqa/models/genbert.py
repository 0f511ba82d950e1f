"""GenBERT (Geva et al., 2020) as NC-BERT's base model (NC-BERT Sec. 3.2, Eqs. 1-4), with
NC-BERT's options (Sec. 3.3): an extra NC-Mask encoder layer, the decoder-number channel and
the DICE regularizer.

Architecture::

    M     = Encoder([CLS] q [SEP] p [SEP])      (+ extra layer N+1 with the NC-Mask)   Eq. 1
    H_enc = ffn_enc(M)                          type, span heads; decoder memory
    type  = Linear(H_enc[CLS])                  generate | question span | passage span
    spans = Linear(H_enc) per segment           start/end logits on q (resp. p) tokens  Eq. 2
    dec   = shared blocks over the answer prefix, causal, + cross-attention to H_enc   Eq. 3
    p(y)  = softmax(ffn_dec(dec) E^T + b)       E: the word embeddings (tied)

Decoder weight sharing: GenBERT uses one BERT as both encoder and decoder. Here decoder layer
i *runs the same sub-modules* as encoder block i (its self-attention with a causal mask, its
feed-forward, the embeddings) and owns only a new cross-attention sub-layer ("xa", placed
after the self-attention as in Vaswani et al.) that the encoder lacks. The decoder never
registers the shared modules, so every parameter exists once (state dicts and safetensors stay
plain) and a gradient from the decoder lands on the encoder's own Parameters. The separate
``ffn_enc`` / ``ffn_dec`` transforms (Linear + GELU + LayerNorm) give the two roles distinct
output spaces on top of the shared stack.

Cross-attention init: ``xa_init="random"`` (default) draws the new sub-layers like BERT's
(normal 0.02, zero biases), as HF's BERT2BERT does for its cross-attention. ``"zero"`` zeroes
their output projection so that at step 0 the decoder adds no encoder information and is the
pretrained stack run causally, up to the new sub-layer's post-LayerNorm (which post-LN BERT
cannot make an identity); the projection still gets a gradient, so learning starts at once.

NC-Mask placement (Figure 2, Sec. 5.4): a randomly initialized extra block on top of the
pretrained encoder ("layer N+1") whose self-attention masks number-token query rows with the
enabled encoder channels on ``nc_heads`` of the H heads, the other heads unrestricted
(:func:`~structqa.attention.nc_masks.nc_layer_masks`). The decoder-number channel restricts
every cross-attention layer's keys to number and question tokens (AND key padding). DICE
(Eq. 7) is computed on M, the last encoder states (after the NC layer, before ``ffn_enc``),
at the first digit of each passage number.

Loss (Eq. 4), per example: ``-log sum_t p(type=t) p(answer | t)``; ``p(answer | generate)``
is the teacher-forced likelihood of the decoder target, ``p(answer | span type)`` sums
``p_start(i) p_end(j)`` over every gold span of that segment, a type with no realization
contributes probability 0, and examples with no realization at all are left out of the mean.

Dimension letters: B batch, N encoder tokens, T decoder tokens, V vocabulary, D width,
H heads, S gold spans, M numbers, K answer types (3).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from structqa.attention.masks import MaskMod, and_masks, causal, key_padding, materialize
from structqa.attention.nc_masks import (
    NCMaskConfig,
    decoder_number,
    encoder_channels,
    nc_layer_masks,
)
from structqa.encoders.bert import AttentionSublayer, BertEncoder, Block
from structqa.features.drop_features import (
    ANSWER_TYPES,
    GENERATE,
    PASSAGE_SPAN,
    QUESTION_SPAN,
    DropBatch,
    DropFeature,
)
from structqa.features.numbers import WordPieceTokenizer, from_lsdf
from structqa.heads.base import NEG
from structqa.heads.dice import dice_loss

IMPOSSIBLE = -1e9  # log-probability of a type with no realization (finite: no NaN gradients)


@dataclass(frozen=True)
class GenBERTConfig:
    xa_init: str = "random"  # "random" | "zero" (see the module docs)
    nc_layer: bool = False  # extra randomly initialized encoder block with the NC-Mask
    nc_heads: tuple[int, ...] = ()  # heads of that block that get the mask (k of H)
    nc_mask: NCMaskConfig = field(default_factory=NCMaskConfig)
    # NC-Mask on heads of the pretrained layers instead (Table 4): None | all_layers |
    # last_all | last_single | last_odd | last_even (see :func:`replaced_heads`)
    nc_replace: str | None = None
    decoder_number_mask: bool = False  # decoder-number channel on the cross-attention
    dice_weight: float = 0.0  # L = L_ans + dice_weight * L_num
    dice_pairs: int = 4  # sampled number pairs per example
    dice_seed: int = 0
    max_decode_len: int = 14  # greedy decoding: answer tokens before [SEP]
    max_span_len: int = 30  # span extraction: tokens per span
    lsdf: bool = False  # decoder targets are least significant digit first

    def __post_init__(self) -> None:
        if self.xa_init not in ("random", "zero"):
            raise ValueError(f"xa_init must be 'random' or 'zero', got {self.xa_init!r}")
        if self.nc_replace is not None and self.nc_replace not in NC_REPLACE:
            raise ValueError(
                f"nc_replace must be one of {NC_REPLACE} or None, got {self.nc_replace!r}"
            )
        object.__setattr__(self, "nc_heads", tuple(self.nc_heads))


NC_REPLACE = ("all_layers", "last_all", "last_single", "last_odd", "last_even")


def replaced_heads(placement: str, num_layers: int, num_heads: int) -> dict[int, list[int]]:
    """NC-BERT Table 4: which heads of which pretrained layers get the NC-Mask (layer index ->
    heads). ``all_layers``: every head of every layer; ``last_all``: every head of the last
    layer; ``last_single``: head 0 of the last layer; ``last_odd`` / ``last_even``: the odd /
    even heads (1, 3, ... / 0, 2, ...) of the last layer."""
    every = list(range(num_heads))
    last = num_layers - 1
    return {
        "all_layers": dict.fromkeys(range(num_layers), every),
        "last_all": {last: every},
        "last_single": {last: [0]},
        "last_odd": {last: every[1::2]},
        "last_even": {last: every[0::2]},
    }[placement]


class Transform(nn.Module):
    """GenBERT's ffn_enc / ffn_dec: Linear + GELU + LayerNorm."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


@dataclass
class GenBERTOutput:
    type_logits: Tensor  # (B, K) float32
    question_start_logits: Tensor  # (B, N), NEG off the question tokens
    question_end_logits: Tensor  # (B, N)
    passage_start_logits: Tensor  # (B, N), NEG off the passage tokens
    passage_end_logits: Tensor  # (B, N)
    decoder_logits: Tensor | None = None  # (B, T - 1, V): predicts decoder_target[:, 1:]
    type_log_likelihood: Tensor | None = None  # (B, K): log p(answer | type), IMPOSSIBLE if none
    loss: Tensor | None = None  # answer_loss + dice_weight * dice
    answer_loss: Tensor | None = None
    dice: Tensor | None = None
    encoder_states: Tensor | None = field(default=None, repr=False)  # (B, N, D): M


@dataclass(frozen=True)
class GenBERTPrediction:
    text: str
    answer_type: str  # one of ANSWER_TYPES
    type_probs: tuple[float, float, float]
    span: tuple[int, int] | None = None  # inclusive token positions for span types
    tokens: tuple[str, ...] = ()  # decoded tokens for the generate type
    spans: tuple[str, ...] = ()  # a generated multi-span answer's spans (see generated_spans)
    capped: bool = False  # generated without ending ([SEP]): cut at model.max_decode_len

    @property
    def answer(self) -> str | list[str]:
        """The answer as DROP scores it: a generated multi-span answer's list, else the text."""
        return list(self.spans) if self.spans else self.text


def _squashed(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"\s*,\s*", ",", text)).strip().lower()


def generated_spans(text: str, question: str, passage: str) -> tuple[str, ...]:
    """The spans of a generated answer that joins several (trained as the spans joined by
    ", ", decoded as " , "); () when it is one: no joiner, or the whole text, commas and
    all, is written in the passage or question ("jacksonville , florida")."""
    if DECODED_SPANS_JOINER not in text:
        return ()
    whole = _squashed(text)
    if whole in _squashed(passage) or whole in _squashed(question):
        return ()
    return tuple(part for part in text.split(DECODED_SPANS_JOINER) if part.strip())


class GenBERT(nn.Module):
    """Encoder-decoder over one shared BERT, with type and span heads (see the module docs)."""

    def __init__(self, encoder: BertEncoder, cfg: GenBERTConfig = GenBERTConfig()):
        super().__init__()
        ecfg = encoder.config
        if "xa" in ecfg.block or not ({"sa", "naa"} & set(ecfg.block)):
            raise ValueError(
                f"GenBERT needs encoder blocks with self-attention, no 'xa': got {ecfg.block}"
            )
        bad = [h for h in cfg.nc_heads if not 0 <= h < ecfg.num_heads]
        if bad:
            raise ValueError(f"nc_heads {bad} out of range for {ecfg.num_heads} heads")
        self.config, self.encoder = cfg, encoder
        d, eps = ecfg.hidden_size, ecfg.layer_norm_eps
        self.nc_layer = Block(ecfg, ("sa", "ffn")) if cfg.nc_layer else None
        self.cross_attention = nn.ModuleList(
            AttentionSublayer(ecfg, cross=True) for _ in range(ecfg.num_layers)
        )
        self.ffn_enc = Transform(d, eps)
        self.ffn_dec = Transform(d, eps)
        self.lm_bias = nn.Parameter(torch.zeros(ecfg.vocab_size))
        self.type_head = nn.Linear(d, len(ANSWER_TYPES))
        self.question_span = nn.Linear(d, 2)
        self.passage_span = nn.Linear(d, 2)
        for module in self._new_modules():
            module.apply(encoder._init_weights)
        if cfg.xa_init == "zero":
            for xa in self.cross_attention:
                nn.init.zeros_(xa.attn.output.weight)
                nn.init.zeros_(xa.attn.output.bias)
        self.dice_generator = torch.Generator().manual_seed(cfg.dice_seed)

    def _new_modules(self) -> list[nn.Module]:
        new: list[nn.Module] = [self.cross_attention, self.ffn_enc, self.ffn_dec]
        new += [self.type_head, self.question_span, self.passage_span]
        return new + ([self.nc_layer] if self.nc_layer is not None else [])

    # ---- encoder ------------------------------------------------------------------------

    def encode(self, batch: DropBatch) -> Tensor:
        """M: the last encoder states (B, N, D), after the NC layer when there is one."""
        enc = self.encoder(
            batch.input_ids,
            batch.attention_mask,
            batch.token_type_ids,
            layer_masks=self.replaced_layer_masks(batch),
        )
        states = enc.last_hidden_state  # (B, N, D)
        if self.nc_layer is None:
            return states
        states, _ = self.nc_layer(states, self.nc_layer_mask(batch))
        return states

    def encoder_channels(self, batch: DropBatch) -> list[MaskMod]:
        """The enabled entity-number / type-number mask functions for this batch."""
        return encoder_channels(
            self.config.nc_mask,
            batch.is_number,
            batch.is_entity,
            batch.sentence_id,
            batch.is_word,
            batch.number_index,
            batch.is_passage,
        )

    def replaced_layer_masks(self, batch: DropBatch) -> list[MaskMod | None] | None:
        """Per pretrained layer, the NC-Mask on the heads chosen by ``nc_replace`` (Table 4),
        other heads and layers unrestricted; None when the mask is not placed there."""
        cfg, ecfg = self.config, self.encoder.config
        if cfg.nc_replace is None:
            return None
        channels = self.encoder_channels(batch)
        heads = replaced_heads(cfg.nc_replace, ecfg.num_layers, ecfg.num_heads)
        return [
            nc_layer_masks(channels, heads[i], ecfg.num_heads) if i in heads else None
            for i in range(ecfg.num_layers)
        ]

    def nc_layer_mask(self, batch: DropBatch) -> Tensor:
        """The NC layer's boolean attention mask (B, H, N, N): the enabled encoder channels on
        ``nc_heads`` (number-token query rows), every other head unrestricted, AND padding."""
        cfg, heads = self.config, self.encoder.config.num_heads
        channels = self.encoder_channels(batch)
        mod = and_masks(
            key_padding(batch.attention_mask.bool()),
            nc_layer_masks(channels, cfg.nc_heads, heads),
        )
        b, n = batch.input_ids.shape
        return materialize(mod, b, heads, n, n, batch.input_ids.device)

    def memory_mask(self, batch: DropBatch) -> Tensor:
        """Keys the decoder's cross-attention may use: (B, 1, 1, N)."""
        mod = key_padding(batch.attention_mask.bool())
        if self.config.decoder_number_mask:
            mod = and_masks(mod, decoder_number(batch.is_number, batch.is_question))
        b, n = batch.input_ids.shape
        return materialize(mod, b, 1, 1, n, batch.input_ids.device)

    # ---- decoder ------------------------------------------------------------------------

    def decoder_sublayers(self, i: int) -> list[tuple[str, nn.Module]]:
        """Decoder layer i in run order: encoder block i's sub-modules (shared) with the
        layer's own cross-attention inserted after the last self-attention sub-layer."""
        block = self.encoder.layers[i]
        spec = list(block.spec)
        last_attn = max(k for k, kind in enumerate(spec) if kind in ("sa", "naa"))
        out: list[tuple[str, nn.Module]] = []
        for k, (kind, sub) in enumerate(zip(spec, block.sublayers, strict=True)):
            out.append((kind, sub))
            if k == last_attn:
                out.append(("xa", self.cross_attention[i]))
        return out

    def decode(self, prefix: Tensor, memory: Tensor, memory_mask: Tensor) -> Tensor:
        """Next-token logits (B, T, V) for every prefix position; prefix (B, T) token ids,
        memory (B, N, D) = H_enc. Padding after a target's [SEP] is only ever seen by later
        padding positions (causal), whose logits the loss ignores."""
        x = self.encoder.embeddings(prefix, None)  # (B, T, D), shared embeddings
        t = prefix.shape[1]
        self_mask = materialize(causal, 1, 1, t, t, prefix.device)  # (1, 1, T, T)
        for i in range(len(self.encoder.layers)):
            for kind, sub in self.decoder_sublayers(i):
                if kind == "ffn":
                    x = sub(x)
                elif kind == "xa":
                    x, _ = sub(x, None, memory, memory_mask, False)
                else:
                    x, _ = sub(x, self_mask, None, None, False)
        h = self.ffn_dec(x)
        return F.linear(h, self.encoder.embeddings.word_embeddings.weight, self.lm_bias)

    # ---- heads and loss -----------------------------------------------------------------

    def forward(self, batch: DropBatch) -> GenBERTOutput:
        """Logits of every head; the loss when the batch carries any decoder target or span
        (teacher forcing on ``decoder_target``)."""
        states = self.encode(batch)  # (B, N, D)
        h = self.ffn_enc(states)  # (B, N, D)
        type_logits = self.type_head(h[:, 0]).float()  # (B, K)
        qs, qe = self.question_span(h).float().unbind(-1)  # (B, N) each
        ps, pe = self.passage_span(h).float().unbind(-1)
        q_mask, p_mask = ~batch.is_question.bool(), ~batch.is_passage.bool()
        out = GenBERTOutput(
            type_logits=type_logits,
            question_start_logits=qs.masked_fill(q_mask, NEG),
            question_end_logits=qe.masked_fill(q_mask, NEG),
            passage_start_logits=ps.masked_fill(p_mask, NEG),
            passage_end_logits=pe.masked_fill(p_mask, NEG),
            encoder_states=states,
        )
        has_target = bool(batch.decoder_mask.any())
        if (
            not has_target
            and not bool((batch.question_spans[..., 0] >= 0).any())
            and not bool((batch.passage_spans[..., 0] >= 0).any())
        ):
            return out
        if has_target:
            out.decoder_logits = self.decode(
                batch.decoder_target[:, :-1], h, self.memory_mask(batch)
            )  # (B, T - 1, V)
        out.type_log_likelihood = self.type_log_likelihood(out, batch)  # (B, K)
        out.answer_loss = marginal_loss(out.type_logits, out.type_log_likelihood)
        out.loss = out.answer_loss
        if self.config.dice_weight > 0:
            out.dice = dice_loss(
                states,
                batch.number_positions,
                batch.number_values,
                self.config.dice_pairs,
                self.dice_generator,
            )
            out.loss = out.loss + self.config.dice_weight * out.dice
        return out

    def type_log_likelihood(self, out: GenBERTOutput, batch: DropBatch) -> Tensor:
        """log p(answer | type) for each type: (B, K), IMPOSSIBLE without a realization."""
        b = batch.input_ids.shape[0]
        gen = torch.full((b,), IMPOSSIBLE, device=out.type_logits.device)
        if out.decoder_logits is not None:
            logp = out.decoder_logits.float().log_softmax(-1)  # (B, T - 1, V)
            labels = batch.decoder_target[:, 1:]  # (B, T - 1)
            tok = logp.gather(-1, labels[..., None]).squeeze(-1)  # (B, T - 1)
            keep = batch.decoder_mask[:, 1:]
            seq = torch.where(keep, tok, 0.0).sum(-1)  # (B,)
            gen = torch.where(batch.decoder_mask[:, 0], seq, gen)
        q = span_log_likelihood(
            out.question_start_logits, out.question_end_logits, batch.question_spans
        )
        p = span_log_likelihood(
            out.passage_start_logits, out.passage_end_logits, batch.passage_spans
        )
        order = {GENERATE: gen, QUESTION_SPAN: q, PASSAGE_SPAN: p}
        return torch.stack([order[k] for k in range(len(ANSWER_TYPES))], dim=-1)

    # ---- inference ----------------------------------------------------------------------

    @torch.no_grad()
    def greedy_decode(
        self, memory: Tensor, memory_mask: Tensor, cls_id: int, sep_id: int
    ) -> Tensor:
        """Greedy decoding from [CLS]: (B, L) generated ids (L <= max_decode_len + 1), each
        row ending at its first [SEP] (later positions are whatever followed)."""
        b = memory.shape[0]
        ys = torch.full((b, 1), cls_id, dtype=torch.long, device=memory.device)
        done = torch.zeros(b, dtype=torch.bool, device=memory.device)
        for _ in range(self.config.max_decode_len + 1):
            nxt = self.decode(ys, memory, memory_mask)[:, -1].argmax(-1)  # (B,)
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            done |= nxt == sep_id
            if bool(done.all()):
                break
        return ys[:, 1:]

    @torch.no_grad()
    def predict(
        self, batch: DropBatch, features: Sequence[DropFeature], tokenizer: WordPieceTokenizer
    ) -> list[GenBERTPrediction]:
        """The argmax type's answer for each row (``features`` indexed by feature_index)."""
        states = self.encode(batch)
        h = self.ffn_enc(states)
        type_probs = self.type_head(h[:, 0]).float().softmax(-1)  # (B, K)
        q_mask, p_mask = ~batch.is_question.bool(), ~batch.is_passage.bool()
        qs, qe = self.question_span(h).float().masked_fill(q_mask[..., None], NEG).unbind(-1)
        ps, pe = self.passage_span(h).float().masked_fill(p_mask[..., None], NEG).unbind(-1)
        q_best = best_spans(qs, qe, self.config.max_span_len)  # (B, 2)
        p_best = best_spans(ps, pe, self.config.max_span_len)
        kinds = type_probs.argmax(-1)
        cls_id = int(tokenizer.convert_tokens_to_ids("[CLS]"))
        sep_id = int(tokenizer.convert_tokens_to_ids("[SEP]"))
        # decode only the rows that answer by generation: decoding is most of the inference cost
        gen_rows = (kinds == GENERATE).nonzero().squeeze(-1).tolist()
        generated: dict[int, list[int]] = {}
        if gen_rows:
            memory_mask = self.memory_mask(batch)[gen_rows]
            decoded = self.greedy_decode(h[gen_rows], memory_mask, cls_id, sep_id)
            generated = dict(zip(gen_rows, decoded.tolist(), strict=True))
        preds = []
        for row in range(len(batch)):
            feature = features[int(batch.feature_index[row])]
            kind = int(kinds[row])
            probs = tuple(float(x) for x in type_probs[row].tolist())
            if kind == GENERATE:
                ids = generated[row]  # to its [SEP]; else (none) the longest answer allowed
                ids = (
                    ids[: ids.index(sep_id)] if sep_id in ids else ids[: self.config.max_decode_len]
                )
                tokens = tuple(tokenizer.convert_ids_to_tokens(ids))
                text, spans = read_generated(
                    tokens, self.config.lsdf, feature.question, feature.passage
                )
                preds.append(
                    GenBERTPrediction(
                        text,
                        ANSWER_TYPES[kind],
                        probs,
                        tokens=tokens,
                        spans=spans,
                        capped=sep_id not in generated[row],
                    )
                )
                continue
            s, e = (q_best if kind == QUESTION_SPAN else p_best)[row].tolist()
            text = feature.span_text(s, e)
            preds.append(GenBERTPrediction(text, ANSWER_TYPES[kind], probs, span=(s, e)))
        return preds


# ---- pure functions -------------------------------------------------------------------------


def span_log_likelihood(start_logits: Tensor, end_logits: Tensor, spans: Tensor) -> Tensor:
    """log sum over gold spans (i, j) of p_start(i) p_end(j): (B,); IMPOSSIBLE for a row
    without spans. start/end_logits (B, N); spans (B, S, 2), -1 padded."""
    ls, le = start_logits.float().log_softmax(-1), end_logits.float().log_softmax(-1)
    valid = spans[..., 0] >= 0  # (B, S)
    s, e = spans[..., 0].clamp_min(0), spans[..., 1].clamp_min(0)
    scores = ls.gather(1, s) + le.gather(1, e)  # (B, S)
    scores = torch.where(valid, scores, IMPOSSIBLE)
    return torch.where(valid.any(-1), scores.logsumexp(-1), IMPOSSIBLE)


def marginal_loss(type_logits: Tensor, type_log_likelihood: Tensor) -> Tensor:
    """Eq. 4: mean over rows with a realization of -log sum_t p(t) p(answer | t)."""
    log_type = type_logits.float().log_softmax(-1)  # (B, K)
    possible = type_log_likelihood > IMPOSSIBLE / 2  # (B, K)
    joint = torch.where(possible, log_type + type_log_likelihood, IMPOSSIBLE)
    rows = possible.any(-1)  # (B,)
    if not bool(rows.any()):
        return type_logits.sum() * 0.0
    return -joint.logsumexp(-1)[rows].mean()


def best_spans(start_logits: Tensor, end_logits: Tensor, max_len: int) -> Tensor:
    """argmax over i <= j < i + max_len of start[i] + end[j]: (B, 2) inclusive positions."""
    n = start_logits.shape[1]
    scores = start_logits[:, :, None] + end_logits[:, None, :]  # (B, N, N)
    i = torch.arange(n, device=scores.device)
    ok = (i[None, :] >= i[:, None]) & (i[None, :] < i[:, None] + max_len)  # (N, N)
    flat = scores.masked_fill(~ok, 2 * NEG).flatten(1).argmax(-1)  # (B,)
    return torch.stack([flat // n, flat % n], dim=-1)


# One number as written: digits, thousands groups of three, a decimal part, a sign.
_ONE_NUMBER = re.compile(r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")
#: How the decoder's text joins the spans of a multi-span answer (", " once tokenized).
DECODED_SPANS_JOINER = " , "


def tokens_to_text(tokens: Sequence[str], use_lsdf: bool = False) -> str:
    """Decoded WordPiece tokens -> answer text. LSDF numbers are read back with
    :func:`from_lsdf`; the digit tokens of one plain number are glued ("1 ##2 ##7" -> "127",
    "- 7" -> "-7", "1 , 000" -> "1,000"); other pieces join as WordPiece does, so two
    numbers stay apart ("3 , 5", not "3,5", which DROP would read as 35)."""
    if use_lsdf and tokens:
        try:
            return from_lsdf(tokens)
        except ValueError:
            pass
    text = _wordpiece_text(tokens)
    glued = text.replace(" ", "")
    return glued if _ONE_NUMBER.fullmatch(glued) else text


def _wordpiece_text(tokens: Sequence[str]) -> str:
    return "".join(t[2:] if t.startswith("##") else " " + t for t in tokens).strip()


def _written(number: str, text: str) -> bool:
    """Whether ``number`` is written in ``text`` as a whole number (not inside a larger one)."""
    return re.search(rf"(?<![0-9.,]){re.escape(number)}(?![0-9]|[.,][0-9])", text) is not None


def read_generated(
    tokens: Sequence[str], use_lsdf: bool, question: str, passage: str
) -> tuple[str, tuple[str, ...]]:
    """A generated answer's text and, for one that joins several spans, its spans
    (:func:`generated_spans`). Numbers joined by the spans' joiner decode as one number with
    thousands groups ("100 , 200" -> "100,200"): they are read as two spans where the passage
    or question writes each of them and not the one number."""
    text = tokens_to_text(tokens, use_lsdf)
    spans = generated_spans(text, question, passage)
    plain = _wordpiece_text(tokens)
    if spans or plain == text or DECODED_SPANS_JOINER not in plain:
        return text, spans
    parts = [part.strip() for part in plain.split(DECODED_SPANS_JOINER)]
    source = f"{question} {passage}"
    if _written(text, source) or not all(_written(part, source) for part in parts):
        return text, spans
    return plain, tuple(parts)
