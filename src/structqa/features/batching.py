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

    def to(self, device: torch.device | str) -> Batch:
        return Batch(**{k: v.to(device) for k, v in self.__dict__.items()})

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def collate(features: Sequence[Feature], indices: Sequence[int], pad_id: int = 0) -> Batch:
    n = max(len(features[i]) for i in indices)
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
    return Batch(
        input_ids=torch.from_numpy(ids),
        attention_mask=torch.from_numpy(attn),
        token_type_ids=torch.from_numpy(types),
        answer_mask=torch.from_numpy(ans),
        start_positions=torch.tensor([features[i].start_position for i in indices]),
        end_positions=torch.tensor([features[i].end_position for i in indices]),
        feature_index=torch.tensor(list(indices)),
    )


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
