"""Which runtime answers: torch (bf16 or fp32) or onnxruntime (int8 or fp32), and loading it.

A path is a training checkpoint (``model.safetensors``: the torch runtimes, plus the ONNX
export in its ``onnx/`` folder when there is one, the default ``structqa export --out``) or an
export directory (``structqa_export.json``: its ONNX graphs only).

``auto`` (docs/results/runtimes/README.md has the measurements):

1. torch bf16, where the device computes bf16 natively (AVX512-BF16/AMX CPUs, bf16 GPUs) and
   torch weights are at hand: fp32 accuracy (ONNX int8 measured 2.2-2.7x faster on the 2-core
   AVX512-BF16 CPU, but about 1 F1 lower, so it is not chosen over bf16);
2. else ONNX int8, when exported: 3.8-4.4x torch fp32 end to end there;
3. else ONNX fp32, when exported: 2.3-2.6x torch fp32;
4. else torch fp32.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from structqa.io import UnreadableFile, dir_lock, read_json
from structqa.manifest import verify_manifest
from structqa.runtime import (
    bf16_speedup,
    cpu_bf16_pays,
    cpu_has_native_bf16,
    default_device,
    onednn_has_bf16,
    use_bf16,
)
from structqa.runtimes.onnx_model import EXPORT_FILE, OnnxSpanModel, read_export
from structqa.runtimes.quantize import PER_TOKEN

log = logging.getLogger(__name__)

#: ``off`` keeps ``predict`` and ``serve`` from writing an int8 export into a checkpoint
#: (a read-only checkpoint, or answers that must not depend on the CPU kind)
AUTO_EXPORT_ENV = "STRUCTQA_AUTO_EXPORT"
RUNTIMES = ("auto", "torch", "torch-bf16", "torch-fp32", "onnx", "onnx-int8", "onnx-fp32")
DEFAULT_EXPORT_DIR = "onnx"  # inside a checkpoint: where `structqa export` writes by default


@dataclass(frozen=True)
class Choice:
    runtime: str  # one of torch-bf16, torch-fp32, onnx-int8, onnx-fp32
    reason: str
    onnx_dir: Path | None = None


@dataclass
class Loaded:
    model: Any  # ExtractiveQAModel (torch) or OnnxSpanModel
    tokenizer: Any
    config: Any  # structqa.config.Config
    choice: Choice

    @property
    def bf16(self) -> bool:
        return self.choice.runtime == "torch-bf16"


def is_export(path: str | Path) -> bool:
    return (Path(path) / EXPORT_FILE).is_file()


def onnx_export_of(path: Path) -> Path | None:
    """The ONNX export a path holds: itself, or a checkpoint's ``onnx/`` folder. A
    checkpoint's export whose record cannot be read is passed over (warned): the torch
    weights still answer; an export directory given itself is refused naming the file."""
    if is_export(path) and read_export(path).get("format") == "onnx":
        return path
    inside = path / DEFAULT_EXPORT_DIR
    if not is_export(inside):
        return None
    try:
        record = read_export(inside)
    except UnreadableFile as err:
        log.warning("%s; not used", err)
        return None
    return inside if record.get("format") == "onnx" else None


def _current(checkpoint: Path, export: Path) -> Path | None:
    """A checkpoint's own export (``CHECKPOINT/onnx``) if it was made from the weights the
    checkpoint holds now, else None (logged): a checkpoint written again since its export
    answers with its new weights. The checkpoint's files are checked against its manifest
    too, so a damaged checkpoint is refused whatever its export holds."""
    from structqa.runtimes.onnx_export import source_weights_sha256

    verify_manifest(checkpoint)
    record = read_export(export)  # (read once: every check below asks it)
    made_from = record.get("source_weights_sha256")
    now = source_weights_sha256(checkpoint)
    int8 = record.get("files", {}).get("int8")
    if made_from and now and made_from != now:
        why = f"made from other weights than {checkpoint} holds now"
    elif int8 is not None and int8.get("activations") != PER_TOKEN:
        why = "an int8 graph from before per-token activations (it answers one window per call)"
    elif _classifier_left_out(checkpoint, record):
        why = (
            "exported before a model's answerability classifier was part of the graph (it "
            "would never abstain)"
        )
    else:
        return export
    log.warning(
        "%s: %s; not used (export again, or predict/serve make it again where bf16 is not native)",
        export,
        why,
    )
    return None


def _warn_if_source_changed(export: Path) -> None:
    """An export loaded from its own folder answers as it was made; where the checkpoint it
    was made from is still here and has new weights or a new calibration since, say so (it
    is used all the same: an export may be kept apart on purpose)."""
    from structqa.runtimes.onnx_export import source_weights_sha256

    record = read_export(export)
    source = Path(record.get("checkpoint") or "")
    if not source.parts or not (source / "model.safetensors").is_file():
        return
    made_from = record.get("source_weights_sha256")
    try:
        now = source_weights_sha256(source)
    except (OSError, ValueError) as err:  # that folder's own trouble, not this export's
        log.debug("%s: its checkpoint's manifest not read (%s)", export, err)
        return
    changed = []
    if made_from and now and made_from != now:
        changed.append("weights")
    mine, theirs = export / "calibration.json", source / "calibration.json"
    if theirs.is_file() and (not mine.is_file() or mine.read_bytes() != theirs.read_bytes()):
        changed.append("calibration (no-answer threshold, probabilities)")
    if changed:
        log.warning(
            "%s: its checkpoint %s has new %s since this export was made; it answers as it "
            "was made (export again to follow it: `structqa export %s --out %s%s`)",
            export,
            source,
            " and ".join(changed),
            source,
            export,
            " --quantize int8" if "int8" in record.get("files", {}) else "",
        )


def _classifier_left_out(checkpoint: Path, record: dict[str, Any]) -> bool:
    """Whether ``checkpoint`` decides no-answer by its own classifier (``model.null_head``
    cls or queries) and the export's ``record`` has no ``null_odds`` output for it."""
    config = checkpoint / "structqa_config.json"
    if not config.is_file():
        return False
    null_head = (read_json(config).get("model") or {}).get("null_head", "span")
    return null_head != "span" and "null_odds" not in record.get("outputs", [])


def choose(
    path: str | Path, runtime: str = "auto", device: torch.device | None = None, bf16: str = "auto"
) -> Choice:
    """The runtime for ``path`` (see the module docstring); ``bf16`` (auto|on|off) is the
    torch precision setting, which ``auto`` and ``torch`` honour."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    path = Path(path)
    device = device or default_device()
    has_torch = (path / "model.safetensors").is_file()
    export = found = onnx_export_of(path)
    if export is not None and export != path and has_torch:
        export = _current(path, export)
    elif export == path:
        _warn_if_source_changed(export)
    precisions = set(read_export(export)["files"]) if export else set()
    if not has_torch and export is None:
        from structqa.models.build import not_a_checkpoint

        raise FileNotFoundError(f"{not_a_checkpoint(path)}; nor an export ({EXPORT_FILE})")
    if runtime.startswith("torch"):
        if not has_torch:
            raise FileNotFoundError(
                f"{path}: an ONNX export holds no torch weights; use --runtime onnx, or give "
                "the checkpoint it was exported from"
            )
        on = {"torch-bf16": True, "torch-fp32": False}.get(runtime, None)
        if on is None:
            on = use_bf16(bf16, device)
        elif on and device.type == "cpu" and not onednn_has_bf16():
            raise ValueError(
                "--runtime torch-bf16: this CPU has no bf16 kernels (an AVX2 CPU, or "
                "ONEDNN_MAX_CPU_ISA caps it), so bf16 would be emulated, 30x to 100x slower "
                "than fp32; use --runtime auto (int8 where exported) or torch-fp32"
            )
        return Choice("torch-bf16" if on else "torch-fp32", f"--runtime {runtime}")
    if runtime.startswith("onnx"):
        if export is None:
            if found is not None:
                what = f"its export {found} is out of date (see the warning above)"
            elif is_export(path / DEFAULT_EXPORT_DIR):
                what = f"its export's record in {path / DEFAULT_EXPORT_DIR} cannot be read"
            else:
                what = f"no ONNX export here or in {path / DEFAULT_EXPORT_DIR}"
            raise FileNotFoundError(
                f"{path}: {what}; write one with `structqa export {path} --quantize int8` "
                "(int8 and fp32 graphs; the fp32 graph alone without --quantize)"
            )
        default = "int8" if "int8" in precisions else "fp32"
        wanted = runtime.removeprefix("onnx").lstrip("-") or default
        return Choice(f"onnx-{wanted}", f"--runtime {runtime}", export)
    # auto
    if has_torch and use_bf16(bf16, device):
        why = "the GPU computes bf16" if device.type == "cuda" else "the CPU computes bf16 natively"
        return Choice("torch-bf16", f"auto: {why}")
    if device.type == "cuda" and has_torch:
        return Choice("torch-fp32", "auto: a GPU without bf16 (onnxruntime here runs on the CPU)")
    if not cpu_has_native_bf16():
        no_bf16 = "no native bf16"
    elif not cpu_bf16_pays():
        no_bf16 = f"bf16 runs at {bf16_speedup():.2f}x fp32's speed on this CPU"
    else:
        no_bf16 = f"bf16 {bf16}"
    if "int8" in precisions:
        return Choice("onnx-int8", f"auto: {no_bf16}, an int8 ONNX export is at hand", export)
    if "fp32" in precisions:
        return Choice("onnx-fp32", f"auto: {no_bf16}, an fp32 ONNX export is at hand", export)
    return Choice("torch-fp32", f"auto: {no_bf16} and no ONNX export")


def cache_int8_export(path: Path) -> Path | None:
    """Write ``path``'s int8 ONNX export where ``auto`` finds it (``CHECKPOINT/onnx``), once;
    returns it, or None (logged with why) where the checkpoint cannot be exported or written."""
    from structqa.runtimes.onnx_export import ExportRefused, export_onnx

    out = path / DEFAULT_EXPORT_DIR
    try:
        # one process exports, others that start beside it (servers) wait and load its graph
        with dir_lock(out):
            made = onnx_export_of(path)
            if (
                made is not None
                and _current(path, made) is not None
                and "int8" in read_export(made)["files"]
            ):
                return made
            log.warning(
                "%s: no fast bf16 on this CPU, so the int8 ONNX runtime answers fastest; "
                "making its export once, into %s (about half a minute; later runs load it)",
                path,
                out,
            )
            # an fp32 export there was checked at its own tolerances (--atol/--rtol): kept
            check = read_export(made).get("check", {}) if made is not None else {}
            tolerances = {k: float(check[k]) for k in ("atol", "rtol") if k in check}
            done = export_onnx(path, out, quantize="int8", **tolerances)
    except ExportRefused as err:
        log.warning(
            "%s: no int8 export (%s); it answers without one, slower (%s=off skips trying "
            "on each start)",
            path,
            err,
            AUTO_EXPORT_ENV,
        )
        return None
    except Exception as err:  # onnx left out, a read-only folder, a graph the rewrite refuses
        log.warning(
            "%s: the int8 export failed (%s: %s); it answers without one, slower. Where the "
            "checkpoint cannot be written (a read-only mount), export it elsewhere once, "
            "`structqa export %s --quantize int8 --out DIR`, and answer from DIR (%s=off "
            "skips trying on each start)",
            path,
            type(err).__name__,
            err,
            path,
            AUTO_EXPORT_ENV,
        )
        return None
    log.info("int8 export written to %s in %.0f s", done.directory, done.seconds)
    return done.directory


def load(
    path: str | Path,
    runtime: str = "auto",
    device: str | None = None,
    bf16: str = "auto",
    make_int8_export: bool = False,
) -> Loaded:
    """The model (torch or onnxruntime), tokenizer and config that answer for ``path``.
    ``make_int8_export``: where ``auto`` would run torch fp32 (or the fp32 graph of the
    checkpoint's own export) on a CPU where bf16 does not pay for want of an int8 export,
    write the int8 export beside the checkpoint first and run that
    (``predict`` and ``serve`` do, unless ``STRUCTQA_AUTO_EXPORT=off``; ``evaluate`` keeps
    torch unless told)."""
    from structqa.config import config_from_dict
    from structqa.models.build import load_tokenizer, model_from_checkpoint

    dev = torch.device(device) if device else default_device()
    choice = choose(path, runtime, dev, bf16)
    if (
        make_int8_export
        and os.environ.get(AUTO_EXPORT_ENV, "on").lower() not in ("0", "off", "false")
        and runtime == "auto"
        # no export, or the checkpoint's own holding the fp32 graph alone (int8 is added)
        and (choice.runtime == "torch-fp32" or choice.onnx_dir == Path(path) / DEFAULT_EXPORT_DIR)
        and choice.runtime != "onnx-int8"
        and dev.type == "cpu"
        and not cpu_bf16_pays()
    ):
        # loaded first: a damaged checkpoint is refused as any load refuses it
        model, tokenizer, cfg = model_from_checkpoint(path)
        if cache_int8_export(Path(path)) is not None:
            choice = choose(path, runtime, dev, bf16)
        elif choice.onnx_dir is None:
            return Loaded(model.to(dev), tokenizer, cfg, choice)
    if choice.onnx_dir is not None:
        d = choice.onnx_dir
        verify_manifest(d, warn_if_absent=True)  # refuses a missing or altered file
        model = OnnxSpanModel(d, choice.runtime.removeprefix("onnx-"))
        cfg = config_from_dict(json.loads((d / "structqa_config.json").read_text()))
        return Loaded(model, load_tokenizer(d), cfg, choice)
    model, tokenizer, cfg = model_from_checkpoint(path)
    return Loaded(model.to(dev), tokenizer, cfg, choice)
