"""CPU inference kernels for the encoder: oneDNN linear layers (GELU fused) and attention one
batch row at a time.

On the CPUs this project is measured on, for MiniLM-sized layers and windows of a few hundred
tokens, the stock operators leave speed on the table at inference:

- ``F.linear`` in fp32 goes to MKL, which on AMD CPUs takes a path at about half the speed of
  oneDNN's (the fp32 encoder ran 1.8x faster on oneDNN's linear); in bf16 both reach the
  matrix units, and fusing the bias and GELU into the product saves a pass over the FFN's
  widest activations.
- ``F.scaled_dot_product_attention``'s fused CPU kernel is slow for 32-wide heads: on the
  held-out windows it took a third of the bf16 encoder's time; two batched products per batch
  row with an fp32 softmax between them take half as long.

``python benchmarks/bench_kernels.py`` measures both against the stock operators on the same
inputs in one process. The fast path is taken only where it computes the same function: no
autograd (training keeps the stock operators and their backward), no dropout, a CPU tensor,
eager execution (an ONNX export or ``torch.compile`` traces the stock operators), and only
while :func:`cpu_kernels_enabled` (``STRUCTQA_CPU_KERNELS=off`` or :func:`stock_kernels`
turn it off, e.g. to compare).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_ENABLED = os.environ.get("STRUCTQA_CPU_KERNELS", "on").lower() not in ("0", "off", "false")


def _onednn_linear_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


_ONEDNN_LINEAR = _onednn_linear_available()
#: dtypes oneDNN's fused linear computes here: fp32 always, bf16 only where oneDNN has bf16
#: kernels (on an AVX2 CPU it has none and refuses to build the primitive; the stock
#: operators then compute bf16 correctly, if slowly)
_ONEDNN_DTYPES = (
    (torch.float32, torch.bfloat16)
    if _ONEDNN_LINEAR and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    else (torch.float32,)
)


def cpu_kernels_enabled() -> bool:
    """Whether the fast CPU inference path is on (``STRUCTQA_CPU_KERNELS``, default on)."""
    return _ENABLED


@contextlib.contextmanager
def stock_kernels() -> Iterator[None]:
    """Within this block, the stock torch operators run everywhere (for comparisons)."""
    global _ENABLED
    before, _ENABLED = _ENABLED, False
    try:
        yield
    finally:
        _ENABLED = before


def fast_path(x: Tensor) -> bool:
    """True when ``x`` may take the CPU inference kernels (see the module's docstring)."""
    return (
        _ENABLED
        and x.device.type == "cpu"
        and not torch.is_grad_enabled()
        and not (torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling())
    )


def linear(x: Tensor, layer: nn.Linear, gelu: bool = False) -> Tensor:
    """``layer(x)``, then exact (erf) GELU when ``gelu``; on the fast path one oneDNN call."""
    if (
        _ONEDNN_LINEAR
        and fast_path(x)
        and x.dtype in _ONEDNN_DTYPES
        and layer.weight.dtype == x.dtype
    ):
        flat = x.reshape(-1, x.shape[-1])
        attr, algorithm = ("gelu", "none") if gelu else ("none", "")
        out = torch.ops.mkldnn._linear_pointwise(
            flat, layer.weight, layer.bias, attr, [], algorithm
        )
        return out.view(*x.shape[:-1], out.shape[-1])
    out = layer(x)
    return F.gelu(out) if gelu else out


def attend_by_rows(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
    """softmax(q k^T / sqrt(E) + bias) v for q, k, v of shape (B, H, N|K, E) and an additive
    ``bias`` broadcastable to (B, H, N, K): one batch row at a time, the scaling, bias and
    softmax in fp32 (fp64 for fp64 inputs). A row's (H, N, K) scores stay in the cache, where
    a whole batch's would not."""
    device = q.device.type
    if torch.is_autocast_enabled(device):
        # under autocast the products would run in its dtype whatever their inputs' (fp32
        # queries from a decoder, say), and the preallocated output below would not match:
        # take the operands to that dtype here, and run the rest without autocast
        dtype = torch.get_autocast_dtype(device)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    with torch.autocast(device, enabled=False):
        return _attend_by_rows(q, k, v, bias)


def _attend_by_rows(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
    scale = 1.0 / math.sqrt(q.shape[-1])
    b, h, n, _ = q.shape
    # one copy of each operand per call, not one per row (the heads are a strided view)
    q, k_t, v = q.contiguous(), k.transpose(-1, -2).contiguous(), v.contiguous()
    wide = torch.promote_types(q.dtype, torch.float32)  # fp32, or fp64 for fp64 inputs
    bias = None if bias is None else bias.to(wide)
    out = torch.empty((b, h, n, v.shape[-1]), dtype=q.dtype, device=q.device)
    for i in range(b):
        scores = torch.matmul(q[i], k_t[i]).to(wide)  # (H, N, K)
        if bias is None:
            scores.mul_(scale)
        else:
            scores = torch.add(bias[i if bias.shape[0] > 1 else 0], scores, alpha=scale)
        torch.matmul(scores.softmax(-1).to(q.dtype), v[i], out=out[i])
    return out


def attend_packed(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    rows: Sequence[tuple[int, int]],
    heads: int,
    no_self: bool = False,
) -> Tensor:
    """Self-attention over packed windows: ``q``, ``k``, ``v`` of shape (T, D) hold the real
    tokens of every window one after another, ``rows`` the (start, end) of each window. Each
    window attends over its own tokens only (``no_self``: not to itself, ANNA's
    neighbor-aware attention), so no padded position is ever computed; the result is the
    (T, D) input of the output projection. Scaling and softmax in fp32, as
    :func:`attend_by_rows`. Every window needs two tokens or more under ``no_self``."""
    _, d = q.shape
    e = d // heads
    scale = 1.0 / math.sqrt(e)
    wide = torch.promote_types(q.dtype, torch.float32)
    out = torch.empty_like(q)
    for start, end in rows:
        n = end - start
        qi = q[start:end].view(n, heads, e).transpose(0, 1)  # (H, n, E)
        ki = k[start:end].view(n, heads, e).permute(1, 2, 0)  # (H, E, n)
        vi = v[start:end].view(n, heads, e).transpose(0, 1)
        scores = torch.matmul(qi, ki).to(wide).mul_(scale)  # (H, n, n)
        if no_self:
            scores.diagonal(dim1=-2, dim2=-1).fill_(float("-inf"))
        probs = scores.softmax(-1).to(q.dtype)
        out[start:end].view(n, heads, e).copy_(torch.matmul(probs, vi).transpose(0, 1))
    return out
