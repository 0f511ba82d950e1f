"""`structqa export --format onnx`: a checkpoint's encoder + span head as one ONNX graph.

The directory written holds:

- ``model.onnx``: the fp32 graph (:class:`~structqa.runtimes.graph.SpanGraph`), dynamic batch
  and length axes; ``model.int8.onnx`` with ``--quantize int8`` (onnxruntime's dynamic int8
  quantization of the encoder's matrix products, activations quantized per token; the head
  stays fp32: :func:`structqa.runtimes.quantize.quantize_int8`);
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

import json
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
from structqa.io import replace_dir, write_json
from structqa.manifest import write_manifest
from structqa.models.extractive import ExtractiveQAModel
from structqa.runtimes.graph import GraphSignature, SpanGraph, batch_inputs, signature
from structqa.runtimes.onnx_model import EXPORT_FILE, ONNX_FILES, session
from structqa.runtimes.quantize import PER_TOKEN, quantize_int8

log = logging.getLogger(__name__)

OPSET = 17
TRACE_SHAPE = (2, 23)  # (B, N) of the traced batch
CHECK_SHAPES = ((3, 61), (1, 9), (4, 140))  # other sizes the graph must also get right
# calibration.json: the no-answer threshold and probability map fitted on validation questions
# (structqa.calibration), so that an export answers as its checkpoint does
COPIED = ("structqa_config.json", "encoder_config.json", "metrics.json", "calibration.json")


class ExportRefused(ValueError):
    """A checkpoint that cannot be exported in the asked format, and why."""


@dataclass(frozen=True)
class Exported:
    directory: Path
    seconds: float
    sizes: dict[str, int]  # precision -> bytes
    max_abs_diff: dict[str, float]  # precision -> largest |onnx - torch| over the checks


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
    if cfg_file.is_file() and "head" not in json.loads(cfg_file.read_text()).get("model", {}):
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


def compare(graph: SpanGraph, sig: GraphSignature, path: Path, batches: list[Batch]) -> dict:
    """Largest |onnx - torch| per output over ``batches``; a shape mismatch raises."""
    sess = session(path)
    worst = {name: 0.0 for name in sig.outputs}
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
            diff = float(np.abs(r.numpy().astype(np.float64) - o).max()) if o.size else 0.0
            worst[name] = max(worst[name], diff)
    return worst


def export_onnx(
    checkpoint: str | Path,
    out: str | Path,
    quantize: str | None = None,
    atol: float = 1e-4,
) -> Exported:
    """Export ``checkpoint`` (a training checkpoint directory) to the directory ``out``."""
    if quantize not in (None, "int8"):
        raise ExportRefused(f"--quantize {quantize}: only int8 is supported")
    t0 = time.perf_counter()
    checkpoint, out = Path(checkpoint), Path(out)
    model, tokenizer, cfg = load_span_model(checkpoint)
    model = model.float().eval()
    tags = tag_fields(cfg.data.token_tags)
    sig = signature(model, tags)
    graph = SpanGraph(model, sig).eval()
    enc = model.encoder.config
    vocab, positions = enc.vocab_size, enc.max_position_embeddings

    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    fp32 = tmp / ONNX_FILES["fp32"]
    notes = trace(graph, sig, sample_batch(*TRACE_SHAPE, vocab, tags, 0, positions), fp32)
    checks = [
        sample_batch(b, n, vocab, tags, seed, positions)
        for seed, (b, n) in enumerate(CHECK_SHAPES, start=1)
    ]
    diffs = {"fp32": compare(graph, sig, fp32, checks)}
    bad = {k: v for k, v in diffs["fp32"].items() if not v <= atol}
    if bad:
        shutil.rmtree(tmp)
        raise ExportRefused(
            f"{checkpoint}: the ONNX graph differs from torch by {bad} (> {atol}) on batches "
            f"of shapes {list(CHECK_SHAPES)}; not exported. Tracer notes: {notes}"
        )
    files = {"fp32": fp32}
    if quantize == "int8":
        files["int8"] = tmp / ONNX_FILES["int8"]
        quantize_int8(fp32, files["int8"])
        diffs["int8"] = compare(graph, sig, files["int8"], checks)

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
                | ({"activations": PER_TOKEN} if p == "int8" else {})
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
            "exporter": f"torch.onnx.export(dynamo=False), opset {OPSET}",
            "check": {
                "shapes": [list(s) for s in CHECK_SHAPES],
                "atol": atol,
                "max_abs_diff": diffs,
            },
            "tracer_notes": notes,
            "versions": _versions(),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "export_seconds": round(seconds, 2),
        },
    )
    write_manifest(tmp)  # last: it records every file above, verified at loading
    replace_dir(tmp, out)
    log.info("exported %s to %s in %.1f s (%s)", checkpoint, out, seconds, sizes)
    return Exported(out, seconds, sizes, {p: max(d.values()) for p, d in diffs.items()})


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    return {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "python": platform.python_version(),
    }
