"""What the answer path asks of a model that runs outside torch (ONNX Runtime today)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from structqa.features.batching import Batch
from structqa.heads.base import HeadOutput


@runtime_checkable
class GraphRuntime(Protocol):
    """An exported graph behind the torch model's call signature: a collated batch in, the
    head's outputs out. It names its runtime (``onnx-int8``, ``onnx-fp32``) and the device it
    computes on; its precision is its own (no bf16 conversion, no autocast)."""

    runtime: str
    device: torch.device

    def __call__(self, batch: Batch) -> HeadOutput: ...

    def eval(self) -> GraphRuntime: ...
