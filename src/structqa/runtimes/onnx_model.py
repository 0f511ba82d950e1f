"""An exported span model running on onnxruntime, behind the torch model's call signature.

:class:`OnnxSpanModel` takes a collated :class:`~structqa.features.batching.Batch` and returns
the :class:`~structqa.heads.base.HeadOutput` fields decoding reads, so
:func:`~structqa.inference.run_inference`, :class:`~structqa.decoding.SpanCollector`, the
evaluation and the Predictor run it unchanged.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from structqa.features.batching import Batch
from structqa.heads.base import NEG, HeadOutput
from structqa.io import UnreadableFile, read_json
from structqa.runtime import int8_weight_type
from structqa.runtimes.quantize import PER_TENSOR, as_7bit_weights, as_uint8_weights

log = logging.getLogger(__name__)

EXPORT_FILE = "structqa_export.json"  # marks an export directory and describes it
ONNX_FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx"}


def read_export(directory: str | Path) -> dict:
    """The ``structqa_export.json`` of an export directory (an error naming it if absent)."""
    path = Path(directory) / EXPORT_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{directory}: not a structqa export (no {EXPORT_FILE}); "
            "write one with `structqa export CHECKPOINT --quantize int8 --out DIR`"
        )
    remedy = (
        "export the checkpoint again (`structqa export CHECKPOINT --quantize int8`; the "
        "default --out replaces a checkpoint's own onnx/ folder)"
    )
    record = read_json(path, remedy)
    if not isinstance(record, dict):
        raise UnreadableFile(path, "not a JSON object", remedy)
    return record


def session(path: Path, threads: int | None = None, int8: bool = False, profile: str = ""):
    """An onnxruntime CPU session with every graph optimization, ``threads`` intra-op threads
    (default: torch's, so both runtimes use the same cores). An ``int8`` graph gets the
    weight type of the CPU that loads it (:func:`structqa.runtime.int8_weight_type`), not of
    the one that exported it: on x86 CPUs without VNNI its weights are loaded as 7-bit ones.
    ``profile``: a file prefix for onnxruntime's profiler (benchmarks/profile_onnx.py)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    graph: str | bytes = str(path)
    weights = int8_weight_type() if int8 else "s8"
    if weights != "s8":
        import onnx

        model = onnx.load(str(path))
        changed = (as_uint8_weights if weights == "u8" else as_7bit_weights)(model)
        log.info("%s: %d integer products take %s weights here", path, changed, weights)
        graph = model.SerializeToString()
    return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])


class OnnxSpanModel:
    """The ``precision`` graph (``fp32`` or ``int8``) of an export directory on onnxruntime.

    ``per_window`` runs each window of a batch as its own call, cut to its own tokens. It is
    the default for an int8 graph that quantizes its activations per tensor (exports made
    before per-token activations, :mod:`structqa.runtimes.quantize`): such a graph takes one
    scale over everything in the call, so a window's logits would otherwise change with the
    windows and the padding beside it, and a service batching concurrent requests could answer
    the same question differently under other traffic (docs/results/runtimes).
    """

    training = False  # duck-types the parts of nn.Module that inference touches
    device = torch.device("cpu")

    def __init__(
        self,
        directory: str | Path,
        precision: str = "fp32",
        threads: int | None = None,
        per_window: bool | None = None,
    ):
        self.directory = Path(directory)
        meta = read_export(self.directory)
        if meta.get("format") != "onnx":
            raise ValueError(f"{self.directory}: a {meta.get('format')!r} export, not onnx")
        files = meta["files"]
        if precision not in files:
            held = ", ".join(sorted(files)) or "none"
            hint = " (export with --quantize int8)" if precision == "int8" else ""
            raise FileNotFoundError(
                f"{self.directory}: no {precision} graph in this export (it holds: {held}){hint}"
            )
        self.precision = precision
        # (an int8 graph from before per-token activations names none: per tensor)
        self.activations = (
            files[precision].get("activations", PER_TENSOR) if precision == "int8" else None
        )
        if per_window is None:
            per_window = self.activations == PER_TENSOR
        self.per_window = per_window
        self.runtime = f"onnx-{precision}"
        self.inputs: tuple[str, ...] = tuple(meta["inputs"])
        self.outputs: tuple[str, ...] = tuple(meta["outputs"])
        self.session = session(
            self.directory / files[precision]["file"], threads, int8=precision == "int8"
        )

    def eval(self) -> OnnxSpanModel:
        return self

    def train(self, mode: bool = True) -> OnnxSpanModel:
        if mode:
            raise ValueError("an exported ONNX model runs inference only; train the checkpoint")
        return self

    def __call__(self, batch: Batch) -> HeadOutput:
        feed = {}
        for name in self.inputs:
            value = getattr(batch, name)
            if value is None:
                raise ValueError(
                    f"{self.directory}: the graph reads {name!r} but the batch has none "
                    "(featurize with the export's structqa_config.json data.token_tags)"
                )
            feed[name] = value.numpy()
        if self.per_window:
            got = self._run_per_window(feed, batch.attention_mask.sum(dim=1).tolist())
        else:
            got = dict(zip(self.outputs, self.session.run(list(self.outputs), feed), strict=True))
        as_tensor = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in got.items()}
        return HeadOutput(
            as_tensor["start_logits"],
            as_tensor["end_logits"],
            span_scores=as_tensor.get("span_scores"),
            null_scores=as_tensor.get("null_scores"),
            null_odds=as_tensor.get("null_odds"),
        )

    def _run_per_window(self, feed: dict[str, np.ndarray], lengths: list[int]) -> dict:
        """The graph's outputs for each window run alone on its own ``lengths`` tokens (batches
        are padded on the right), laid out as one batched call's: per-token outputs are (B, N,
        ...) with NEG past each window's end, as the model masks padding."""
        rows = [
            self.session.run(list(self.outputs), {k: v[i : i + 1, :n] for k, v in feed.items()})
            for i, n in enumerate(lengths)
        ]
        b, n_tokens = next(iter(feed.values())).shape
        out = {}
        for j, name in enumerate(self.outputs):
            first = rows[0][j]
            if first.ndim == 1:  # (1,) per window
                out[name] = np.concatenate([r[j] for r in rows])
                continue
            full = np.full((b, n_tokens, *first.shape[2:]), NEG, dtype=first.dtype)
            for i, (r, n) in enumerate(zip(rows, lengths, strict=True)):
                full[i, :n] = r[j][0]
            out[name] = full
        return out
