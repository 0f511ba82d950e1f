"""Dynamic padding and length-grouped batch order (never pad to max_seq_len)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from structqa.features.squad import Feature


@dataclass
class Batch:
    """A padded batch. Tensors are (B, N) unless noted."""

    input_ids: Tensor
    attention_mask: Tensor
    token_type_ids: Tensor
    answer_mask: Tensor  # bool: context tokens and [CLS] (the null answer)
    start_positions: Tensor  # (B,)
    end_positions: Tensor  # (B,)
    feature_index: Tensor  # (B,) index into the feature list
    pos_tag_ids: Tensor | None = None  # POS id of each token's word, 0 on padding (token_tags)
    entity_mask: Tensor | None = None  # bool: tokens inside named entities (token_tags)

    def to(self, device: torch.device | str) -> Batch:
        return Batch(**{k: None if v is None else v.to(device) for k, v in vars(self).items()})

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def collate(
    features: Sequence[Feature], indices: Sequence[int], pad_id: int = 0, pad_to_multiple: int = 1
) -> Batch:
    """The windows ``indices`` of ``features`` as one batch, padded to the longest (rounded up
    to a multiple of ``pad_to_multiple``: a server that sees few distinct shapes keeps fewer
    compiled kernels and allocator pools for them)."""
    n = max(len(features[i]) for i in indices)
    n = -(-n // pad_to_multiple) * pad_to_multiple
    b = len(indices)
    ids = np.full((b, n), pad_id, dtype=np.int64)
    types = np.zeros((b, n), dtype=np.int64)
    attn = np.zeros((b, n), dtype=np.int64)
    ans = np.zeros((b, n), dtype=bool)
    for row, i in enumerate(indices):
        f = features[i]
        k = len(f)
        ids[row, :k], types[row, :k], attn[row, :k] = f.input_ids, f.token_type_ids, 1
        ans[row, :k] = f.offsets[:, 0] >= 0
        ans[row, 0] = True
    tags = {
        name: _pad([getattr(features[i], name) for i in indices], n)
        for name in ("pos_tag_ids", "entity_mask")
        if getattr(features[indices[0]], name) is not None
    }
    return Batch(
        input_ids=torch.from_numpy(ids),
        attention_mask=torch.from_numpy(attn),
        token_type_ids=torch.from_numpy(types),
        answer_mask=torch.from_numpy(ans),
        start_positions=torch.tensor([features[i].start_position for i in indices]),
        end_positions=torch.tensor([features[i].end_position for i in indices]),
        feature_index=torch.tensor(list(indices)),
        **tags,
    )


def _pad(rows: Sequence[np.ndarray | None], n: int) -> Tensor:
    """(B, n): the rows, zero-padded on the right (every feature of a batch has the field)."""
    present = [r for r in rows if r is not None]
    if len(present) != len(rows):
        raise ValueError("features of one batch differ in their token tags")
    out = np.zeros((len(present), n), dtype=present[0].dtype)
    for row, values in enumerate(present):
        out[row, : len(values)] = values
    return torch.from_numpy(out)


def length_grouped_batches(
    lengths: Sequence[int], batch_size: int, seed: int, group_factor: int = 50
) -> list[list[int]]:
    """Shuffle, then sort by length inside mega-batches of ``group_factor * batch_size`` and
    shuffle the resulting batches: little padding, still random order. Deterministic per seed."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    lengths_arr = np.asarray(lengths)
    mega = batch_size * group_factor
    batches: list[list[int]] = []
    for s in range(0, len(order), mega):
        chunk = order[s : s + mega]
        chunk = chunk[np.argsort(-lengths_arr[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size].tolist() for i in range(0, len(chunk), batch_size))
    perm = rng.permutation(len(batches))
    return [batches[i] for i in perm]


def sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Evaluation order: longest first, so padding is minimal and memory peaks early."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]


def iterate(features: Sequence[Feature], batches: Sequence[list[int]]) -> Iterator[Batch]:
    for idx in batches:
        yield collate(features, idx)
