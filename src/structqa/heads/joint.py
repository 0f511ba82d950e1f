"""The Joint objective: one softmax over answer spans (paper, Eqs. 2-3).

    phi(i, j) = q_s . h_i + q_e . h_j + h_i^T W h_j

The softmax runs over every valid span (start <= end, both in the passage) plus the no-answer
span (0, 0) at [CLS], whose score is phi(0, 0); the loss is -log p(gold span), with a gold
(0, 0) meaning "no answer in this window".

Two ways to score, chosen when the head is built (:func:`joint_scorer`):

- ``band`` (:class:`BandJointScorer`): spans of at most L tokens, the ones decoding keeps.
  Memory is O(B N (D + L)): ``HW = H W`` once, then blocks of L starts against the 2L - 1
  ends they can reach (:meth:`BandJointScorer.bilinear_band`); no (N, N) tensor exists.
  A gold span longer than L is not in the softmax, so its row is left out of the loss and
  flagged in ``HeadOutput.loss_skipped``; with L = 30 that is 8 of the 8,366 answer windows
  of splits/squad1-train (384/128, MiniLM vocabulary), 0.1%.
- ``full`` (:class:`FullJointScorer`): the paper's formulation, an (N, N) score matrix of every
  span i <= j of any length, O(B N^2) memory. Every gold span in the passage is representable.
  For decoding it also returns its band view; longer spans are not decoded, as standard.

W starts at zero: the head then starts exactly as the Independent objective (whose scores are
phi without the bilinear term) instead of adding random span preferences: a random W of std
0.02 gives h_i^T W h_j a spread of 0.02 |h_i| |h_j|, about 3 logits for the default MiniLM
(|h| ~ 12). The gradient at W = 0, the sum over spans of (1[gold] - p(span)) h_i h_j^T, is
not zero, so W still learns.

Dimension letters: B batch, N tokens, D width, L max answer length, S scored spans.
"""

from __future__ import annotations

import difflib

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from structqa.features.batching import Batch
from structqa.heads.base import (
    NEG,
    HeadOutput,
    QueryStates,
    Scorer,
    at_least_fp32,
    dot_logits,
    masked_start_end,
    sliding_windows,
    span_band,
)

_exact = at_least_fp32  # bf16 scores become float32, a float64 check stays float64


def passage_mask(batch: Batch) -> Tensor:
    """(B, N) bool: tokens a span may start or end on ([CLS] is the null span, not a token)."""
    ctx = batch.answer_mask.clone()
    ctx[:, 0] = False
    return ctx


def valid_band(ctx: Tensor, max_len: int) -> Tensor:
    """(B, N, L) bool: span (i, i + l) lies in the passage (the passage is contiguous)."""
    b = ctx.shape[0]
    end_ok = sliding_windows(torch.cat([ctx, ctx.new_zeros(b, max_len - 1)], 1), max_len, 1)
    return ctx[:, :, None] & end_ok


def _scored(valid: Tensor, gold: Tensor) -> Tensor:
    """(B,) bool: ``valid`` (B, ...) flattened, read at ``gold``; the null index is clamped
    into range, its answer is decided by the caller."""
    flat = valid.reshape(valid.shape[0], -1)
    return flat.gather(1, gold.clamp(max=flat.shape[1] - 1)[:, None]).squeeze(1)


def _nll(flat: Tensor, gold: Tensor, ok: Tensor) -> Tensor:
    """Mean -log softmax(flat)[gold] over rows where ``ok``; no host sync, 0 when none is ok.

    flat: (B, S + 1) span scores with the null score last; gold: (B,) index into it.
    """
    logp = flat.log_softmax(-1)
    nll = -logp.gather(1, gold[:, None]).squeeze(1)  # (B,), finite: masked scores are NEG
    ok_f = ok.to(nll.dtype)
    return (nll * ok_f).sum() / ok_f.sum().clamp(min=1)


class JointScorer(Scorer):
    """Shared parameters of the joint scorers: W (D, D) and the max answer length L."""

    def __init__(self, hidden: int, max_answer_length: int = 30):
        super().__init__()
        if max_answer_length < 1:
            raise ValueError(f"max_answer_length must be >= 1, got {max_answer_length}")
        self.max_answer_length = max_answer_length
        self.W = nn.Parameter(torch.zeros(hidden, hidden))  # zero: see the module docstring

    def extra_repr(self) -> str:
        return f"hidden={self.W.shape[0]}, max_answer_length={self.max_answer_length}"


class BandJointScorer(JointScorer):
    """Spans of at most L tokens, memory linear in N."""

    def bilinear_band(self, h: Tensor) -> Tensor:
        """(B, N, L): h_i^T W h_{i+l}; offsets past the sequence end get NEG.

        Starts go in blocks of C = L tokens; the ends a block can reach are the C + L - 1
        tokens from its first start, so one batched matmul scores every block against its own
        window, (B, N/C, C, C + L - 1), and a gather keeps each row's L offsets: memory about
        2 N L scores plus one copy of H, linear in N. (One elementwise product per offset
        instead is ~6x slower on CPU and, as einsum copies the shifted slices and autograd
        keeps them, holds L copies of H for the backward pass: 400 MB against 42 MB for
        B=12, N=384, D=384.)
        """
        b, n, d = h.shape
        L = c = self.max_answer_length
        # float32 outside autocast: the bilinear term ranks spans, bf16 would tie them
        with torch.autocast(h.device.type, enabled=False):
            return self._bilinear_band_fp32(at_least_fp32(h), b, n, d, L, c)

    def _bilinear_band_fp32(self, h: Tensor, b: int, n: int, d: int, L: int, c: int) -> Tensor:
        hw = h @ self.W.to(h.dtype)  # (B, N, D), once for all spans
        k = (n + c - 1) // c  # blocks
        tail = k * c - n
        starts = F.pad(hw, (0, 0, 0, tail)).view(b, k, c, d)  # (B, K, C, D)
        ends = sliding_windows(F.pad(h, (0, 0, 0, tail + L - 1)), c + L - 1, c)  # (B,K,D,C+L-1)
        block = starts @ ends  # (B, K, C, C + L - 1)
        arange = torch.arange(c, device=h.device)
        offsets = arange[:, None] + arange[None, :L]  # (C, L): row r's end r + l
        band = block.gather(3, offsets.expand(b, k, c, L)).reshape(b, k * c, L)[:, :n]
        past_end = torch.arange(n, device=h.device)[:, None] + arange[None, :L] >= n  # (N, L)
        return _exact(band).masked_fill(past_end, NEG)  # (B, N, L)

    def forward(self, states: QueryStates, batch: Batch) -> HeadOutput:
        h, L = states.tokens, self.max_answer_length
        b, n, _ = h.shape
        start, end = (_exact(x) for x in dot_logits(states))  # (B, N) each
        bil = self.bilinear_band(h)  # (B, N, L)
        valid = valid_band(passage_mask(batch), L)  # (B, N, L)
        spans = (span_band(start, end, L) + bil).masked_fill(~valid, NEG)  # (B, N, L)
        null = start[:, 0] + end[:, 0] + bil[:, 0, 0]  # (B,) phi(0, 0)

        s, e = batch.start_positions, batch.end_positions
        is_null = (s == 0) & (e == 0)
        length = e - s
        in_band = (length >= 0) & (length < L)
        gold = torch.where(is_null, n * L, s * L + length.clamp(0, L - 1))  # (B,)
        ok = is_null | (in_band & _scored(valid, gold))  # else the gold span is out of the band
        flat = torch.cat([spans.reshape(b, n * L), null[:, None]], dim=1)  # (B, N L + 1)
        return _output(start, end, batch, (flat, gold, ok), spans, null)


class FullJointScorer(JointScorer):
    """The paper's formulation: every span i <= j of the passage, memory quadratic in N."""

    def forward(self, states: QueryStates, batch: Batch) -> HeadOutput:
        h, L = states.tokens, self.max_answer_length
        b, n, _ = h.shape
        start, end = (_exact(x) for x in dot_logits(states))  # (B, N) each
        # float32 outside autocast, as the band scorer: bf16 would tie spans it ranks
        with torch.autocast(h.device.type, enabled=False):
            hf = _exact(h)
            bil = (hf @ _exact(self.W)) @ hf.transpose(1, 2)  # (B, N, N): h_i^T W h_j
        ctx = passage_mask(batch)
        upper = torch.ones(n, n, dtype=torch.bool, device=h.device).triu()  # j >= i
        valid = ctx[:, :, None] & ctx[:, None, :] & upper  # (B, N, N)
        scores = (start[:, :, None] + end[:, None, :] + bil).masked_fill(~valid, NEG)
        null = start[:, 0] + end[:, 0] + bil[:, 0, 0]  # (B,)

        s, e = batch.start_positions, batch.end_positions
        is_null = (s == 0) & (e == 0)
        gold = torch.where(is_null, n * n, s * n + e)  # (B,)
        ok = is_null | _scored(valid, gold)
        flat = torch.cat([scores.reshape(b, n * n), null[:, None]], dim=1)  # (B, N N + 1)

        # the band view for decoding: ends j = i + l, l < L; past the sequence end -> NEG
        ends = torch.arange(n, device=h.device)[:, None] + torch.arange(L, device=h.device)
        band = scores.gather(2, ends.clamp(max=n - 1).expand(b, n, L))  # (B, N, L)
        band = band.masked_fill(~valid_band(ctx, L), NEG)
        return _output(start, end, batch, (flat, gold, ok), band, null)


def _output(
    start: Tensor,
    end: Tensor,
    batch: Batch,
    target: tuple[Tensor, Tensor, Tensor],
    band: Tensor,
    null: Tensor,
) -> HeadOutput:
    """Both formulations' output: the masked start/end logits, the loss over the flat span
    scores (``target`` = flat scores, gold index, rows whose gold is scored), the (B, N, L)
    band for decoding and the no-answer span's score."""
    flat, gold, ok = target
    start_logits, end_logits = masked_start_end(start, end, batch)
    return HeadOutput(
        start_logits,
        end_logits,
        loss=_nll(flat, gold, ok),
        span_scores=band,
        null_scores=null,
        loss_skipped=~ok,
    )


JOINT_MODES: dict[str, type[JointScorer]] = {"band": BandJointScorer, "full": FullJointScorer}


def joint_scorer(hidden: int, max_answer_length: int = 30, mode: str = "band") -> JointScorer:
    """The joint scorer for ``mode`` ("band" or "full")."""
    if mode not in JOINT_MODES:
        close = difflib.get_close_matches(mode, JOINT_MODES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown joint mode {mode!r}{hint} (known: {', '.join(JOINT_MODES)})")
    return JOINT_MODES[mode](hidden, max_answer_length)
