"""`structqa export --format onnx`: a checkpoint's encoder + span head as one ONNX graph.

The directory written holds:

- ``model.onnx``: the fp32 graph (:class:`~structqa.runtimes.graph.SpanGraph`), dynamic batch
  and length axes; ``model.int8.onnx`` with ``--quantize int8`` (onnxruntime's dynamic int8
  quantization of the encoder's matrix products, activations quantized per token, the
  word-embedding table in fp16; the head stays fp32:
  :func:`structqa.runtimes.quantize.quantize_int8`);
- the tokenizer, ``structqa_config.json`` (windows, token tags and decoding settings, as in the
  checkpoint), ``encoder_config.json`` and ``metrics.json`` (the tuned no-answer threshold);
- ``structqa_export.json``: what the graphs take and return, where they came from, and the
  check that the fp32 graph computes what torch computes.

Exporter: the TorchScript exporter (``dynamo=False``). The model's Python control flow is fixed
per model (head, stacking, masks), which tracing records exactly, and its dynamic axes are the
documented ``dynamic_axes``; the ``torch.export`` path would need every size-dependent branch
rewritten for symbolic shapes. A trace is only trusted after the check: the graph is run on
batches of other sizes than the traced one (longer and shorter than the joint band) and must
match torch within ``atol`` on every output, else the export is refused.
"""

from __future__ import annotations

import logging
import platform
import shutil
import time
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from structqa.features.batching import Batch
from structqa.features.squad import TOKEN_TAGS
from structqa.heads.base import NEG
from structqa.io import read_json, write_json, writing_dir
from structqa.manifest import read_manifest, write_manifest
from structqa.models.extractive import ExtractiveQAModel
from structqa.provenance import INIT_RECORD
from structqa.runtimes.graph import GraphSignature, SpanGraph, batch_inputs, signature
from structqa.runtimes.onnx_model import EXPORT_FILE, ONNX_FILES, session
from structqa.runtimes.quantize import PER_TOKEN, quantize_int8

log = logging.getLogger(__name__)

OPSET = 17
TRACE_SHAPE = (2, 23)  # (B, N) of the traced batch
CHECK_SHAPES = ((3, 61), (1, 9), (4, 140))  # other sizes the graph must also get right
# calibration.json: the no-answer threshold and probability map fitted on validation questions
# (structqa.calibration), so that an export answers as its checkpoint does
COPIED = (
    "structqa_config.json",
    "encoder_config.json",
    "metrics.json",
    "calibration.json",
    INIT_RECORD,
)


class ExportRefused(ValueError):
    """A checkpoint that cannot be exported in the asked format, and why."""


def check_target(checkpoint: Path, out: Path, earlier_export: bool) -> None:
    """Refuse an ``--out`` whose contents the export would delete: the checkpoint itself or
    a folder holding it, or an existing folder that is not an earlier export of this kind
    (``earlier_export``, which is replaced whole)."""
    src, dst = checkpoint.resolve(), out.resolve()
    if dst == src or dst in src.parents:
        raise ExportRefused(
            f"--out {out}: the export would replace the checkpoint {checkpoint} (it replaces "
            "its folder whole); give a new folder, e.g. the default inside the checkpoint"
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not earlier_export:
        raise ExportRefused(
            f"--out {out}: exists and is not an earlier export of this kind, which the export "
            "would replace whole; give a new or empty folder, or remove this one first"
        )


@dataclass(frozen=True)
class Exported:
    directory: Path
    seconds: float
    sizes: dict[str, int]  # precision -> bytes
    max_abs_diff: dict[str, float]  # precision -> largest |onnx - torch| over the checks
    scale: float = 1.0  # the largest |torch output| over the checks, for scale


def sample_batch(
    b: int, n: int, vocab: int, tags: tuple[str, ...], seed: int, max_len: int = 512
) -> Batch:
    """A random but well-formed batch: [CLS] at 0, a 3-token question, a passage, padding
    (row lengths vary, the first row is full), random token tags where the graph reads them."""
    n = min(n, max_len)
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(5, n // 2), n + 1, (b,), generator=g)
    lengths[0] = n
    pos = torch.arange(n)[None, :]
    real = pos < lengths[:, None]
    ids = torch.randint(5, max(vocab, 6), (b, n), generator=g) * real
    passage = (pos > 4) & (pos < lengths[:, None] - 1)
    answer = passage.clone()
    answer[:, 0] = True
    zeros = torch.zeros(b, dtype=torch.long)
    extra = {}
    if "pos_tag_ids" in tags:
        extra["pos_tag_ids"] = torch.randint(0, 8, (b, n), generator=g) * real
    if "entity_mask" in tags:
        extra["entity_mask"] = (torch.rand(b, n, generator=g) < 0.3) & real
    return Batch(ids, real.long(), passage.long(), answer, zeros, zeros, zeros, **extra)


def tag_fields(token_tags: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The Batch fields filled by the config's token tags (``data.token_tags``)."""
    return tuple(TOKEN_TAGS[t][0] for t in token_tags or ())


def load_span_model(checkpoint: Path) -> tuple[ExtractiveQAModel, Any, Any]:
    """The model, tokenizer and config of a span-extraction checkpoint (``structqa train``);
    other checkpoints are refused with the reason."""
    from structqa.models.build import model_from_checkpoint

    cfg_file = checkpoint / "structqa_config.json"
    if cfg_file.is_file() and "head" not in read_json(cfg_file).get("model", {}):
        raise ExportRefused(
            f"{checkpoint}: a drop-train checkpoint (GenBERT / NC-BERT: answers come from a "
            "decoder and arithmetic, not from span scores); only span-extraction checkpoints "
            "(`structqa train`) export"
        )
    model, tokenizer, cfg = model_from_checkpoint(checkpoint)
    if not isinstance(model, ExtractiveQAModel):  # pragma: no cover (the loader builds one)
        raise ExportRefused(f"{checkpoint}: {type(model).__name__} is no span model")
    return model, tokenizer, cfg


def trace(graph: SpanGraph, sig: GraphSignature, batch: Batch, path: Path) -> list[str]:
    """Export ``graph`` traced on ``batch`` to ``path``; returns the tracer's warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.onnx.export(
            graph,
            batch_inputs(batch, sig),
            str(path),
            dynamo=False,
            input_names=list(sig.inputs),
            output_names=list(sig.outputs),
            dynamic_axes=sig.dynamic_axes,
            opset_version=OPSET,
            do_constant_folding=True,
        )
    notes = {str(w.message).splitlines()[0] for w in caught if w.category is not DeprecationWarning}
    return sorted(notes)


@dataclass(frozen=True)
class Check:
    """How far an exported graph is from torch on the check batches, per output."""

    max_abs_diff: dict[str, float]  # largest |onnx - torch|
    scale: dict[str, float]  # largest |torch| over unmasked values (at least 1)
    moved_answers: dict[str, int]  # rows whose best position (argmax) differs beyond a tie

    def allowed(self, name: str, atol: float, rtol: float) -> float:
        return max(atol, rtol * self.scale[name])

    def failures(self, atol: float, rtol: float) -> list[str]:
        """What misses the tolerance, in words (empty when the graph passes)."""
        out = []
        for name, diff in self.max_abs_diff.items():
            allowed = self.allowed(name, atol, rtol)
            if not diff <= allowed:
                out.append(
                    f"{name} differs by {diff:.3g} (allowed {allowed:.3g}: the larger of "
                    f"atol {atol:g} and rtol {rtol:g} x its scale {self.scale[name]:.3g})"
                )
            if self.moved_answers[name]:
                out.append(f"{name}: the best position moved on {self.moved_answers[name]} rows")
        return out


def compare(
    graph: SpanGraph,
    sig: GraphSignature,
    path: Path,
    batches: list[Batch],
    int8: bool = False,
    tie: float = 1e-4,
) -> Check:
    """The graph at ``path`` against torch over ``batches``: per output, the largest
    |onnx - torch|, the torch values' scale, and the rows whose best position moved (the
    argmax over each row, which decoding starts from; a move to a position torch scores within
    ``tie`` x the scale of its best is a tie, not a change). A shape mismatch raises."""
    sess = session(path, int8=int8)
    worst = {name: 0.0 for name in sig.outputs}
    scale = {name: 1.0 for name in sig.outputs}
    moved = {name: 0 for name in sig.outputs}
    ranked: list[tuple[str, np.ndarray, np.ndarray]] = []
    for batch in batches:
        inputs = batch_inputs(batch, sig)
        with torch.inference_mode():
            ref = graph(*inputs)
        got = sess.run(
            list(sig.outputs), {k: v.numpy() for k, v in zip(sig.inputs, inputs, strict=True)}
        )
        for name, r, o in zip(sig.outputs, ref, got, strict=True):
            if tuple(r.shape) != o.shape:
                raise ExportRefused(
                    f"{path.name}: output {name} has shape {o.shape} on a batch where torch "
                    f"gives {tuple(r.shape)}: the trace fixed a size that must stay dynamic"
                )
            r = r.numpy().astype(np.float64)
            if not o.size:
                continue
            worst[name] = max(worst[name], float(np.abs(r - o).max()))
            real = r[r > NEG / 2]
            if real.size:
                scale[name] = max(scale[name], float(np.abs(real).max()))
            if r.ndim > 1:
                ranked.append((name, r.reshape(len(r), -1), o.reshape(len(o), -1)))
    for name, r, o in ranked:
        best = r.max(axis=1)
        at_onnx_best = np.take_along_axis(r, o.argmax(axis=1)[:, None], axis=1)[:, 0]
        moved[name] += int((best - at_onnx_best > tie * scale[name]).sum())
    return Check(worst, scale, moved)


def export_onnx(
    checkpoint: str | Path,
    out: str | Path,
    quantize: str | None = None,
    atol: float = 1e-4,
    rtol: float = 1e-4,
) -> Exported:
    """Export ``checkpoint`` (a training checkpoint directory) to the directory ``out``. The
    fp32 graph must match torch on every output within the larger of ``atol`` and ``rtol``
    times the output's scale (fp32 kernels of two CPUs differ in the last bits of large
    logits), with the same best positions (:func:`compare`), or the export is refused."""
    if quantize not in (None, "int8"):
        raise ExportRefused(f"--quantize {quantize}: only int8 is supported")
    t0 = time.perf_counter()
    checkpoint, out = Path(checkpoint), Path(out)
    check_target(checkpoint, out, (out / EXPORT_FILE).is_file())
    model, tokenizer, cfg = load_span_model(checkpoint)
    model = model.float().eval()
    tags = tag_fields(cfg.data.token_tags)
    sig = signature(model, tags)
    graph = SpanGraph(model, sig).eval()
    enc = model.encoder.config
    vocab, positions = enc.vocab_size, enc.max_position_embeddings

    # and a full window of the checkpoint's length, the one long passages are cut into
    shapes = (*CHECK_SHAPES, (2, min(cfg.data.max_seq_len, positions)))
    with writing_dir(out) as tmp:  # swapped in whole at the end; removed if anything fails
        fp32 = tmp / ONNX_FILES["fp32"]
        notes = trace(graph, sig, sample_batch(*TRACE_SHAPE, vocab, tags, 0, positions), fp32)
        checks = [
            sample_batch(b, n, vocab, tags, seed, positions)
            for seed, (b, n) in enumerate(shapes, start=1)
        ]
        checked = {"fp32": compare(graph, sig, fp32, checks, tie=rtol)}
        bad = checked["fp32"].failures(atol, rtol)
        if bad:
            fp = checked["fp32"]
            worst = max(fp.max_abs_diff[n] / fp.scale[n] for n in sig.outputs)
            raise ExportRefused(
                f"{checkpoint}: the ONNX graph differs from torch on batches of shapes "
                f"{list(shapes)}: {'; '.join(bad)}. Not exported. A graph this close may "
                f"still answer the same: export with --rtol {_round_up(worst)} and compare "
                f"`structqa evaluate` of the export with the checkpoint's. Tracer notes: {notes}"
            )
        files = {"fp32": fp32}
        if quantize == "int8":
            files["int8"] = tmp / ONNX_FILES["int8"]
            quantize_int8(fp32, files["int8"])
            checked["int8"] = compare(graph, sig, files["int8"], checks, int8=True, tie=rtol)
        diffs = {p: c.max_abs_diff for p, c in checked.items()}

        tokenizer.save_pretrained(str(tmp))
        for name in COPIED:
            if (checkpoint / name).is_file():
                shutil.copy2(checkpoint / name, tmp / name)
        sizes = {p: f.stat().st_size for p, f in files.items()}
        seconds = time.perf_counter() - t0
        write_json(
            tmp / EXPORT_FILE,
            {
                "format": "onnx",
                "files": {
                    p: {"file": f.name, "bytes": sizes[p]}
                    | ({"activations": PER_TOKEN, "embeddings": "fp16"} if p == "int8" else {})
                    for p, f in files.items()
                },
                "inputs": list(sig.inputs),
                "outputs": list(sig.outputs),
                "dynamic_axes": sig.dynamic_axes,
                "head": cfg.model.head,
                "joint_mode": cfg.model.joint_mode,
                "block": list(enc.block),
                "max_answer_length": cfg.decode.max_answer_length,
                "checkpoint": str(checkpoint.resolve()),
                # the weights exported: an export inside its checkpoint is stale once they change
                "source_weights_sha256": source_weights_sha256(checkpoint),
                "exporter": f"torch.onnx.export(dynamo=False), opset {OPSET}",
                "check": {
                    "shapes": [list(s) for s in shapes],
                    "atol": atol,
                    "rtol": rtol,
                    "max_abs_diff": diffs,
                    "scale": checked["fp32"].scale,
                    # int8 moves scores by design: where its best positions moved, for the record
                    "moved_answers": {p: c.moved_answers for p, c in checked.items()},
                },
                "tracer_notes": notes,
                "versions": _versions(),
                "created": datetime.now(UTC).isoformat(timespec="seconds"),
                "export_seconds": round(seconds, 2),
            },
        )
        write_manifest(tmp)  # last: it records every file above, verified at loading
    log.info("exported %s to %s in %.1f s (%s)", checkpoint, out, seconds, sizes)
    scale = max(checked["fp32"].scale.values())
    return Exported(out, seconds, sizes, {p: max(d.values()) for p, d in diffs.items()}, scale)


def source_weights_sha256(checkpoint: Path) -> str | None:
    """The SHA-256 of the checkpoint's weights as its manifest records them (None without)."""
    records = read_manifest(checkpoint)
    weights = records.get("model.safetensors") if records else None
    return weights.sha256 if weights else None


def _round_up(x: float) -> str:
    """``x`` rounded up to one significant digit, for a suggested tolerance."""
    exponent = int(np.floor(np.log10(x))) if x > 0 else -8
    return f"{np.ceil(x / 10.0**exponent) * 10.0**exponent:.1g}"


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    return {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "python": platform.python_version(),
    }
