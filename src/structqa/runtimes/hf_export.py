"""`structqa export --format transformers`: an Independent-head checkpoint as a
``BertForQuestionAnswering`` directory that ``transformers.pipeline("question-answering")``
loads (config.json, model.safetensors, tokenizer).

The Independent head is BERT's: start_i = q_s . h_i, end_i = q_e . h_i over the plain encoder's
last hidden states. Its learned queries are the rows of ``qa_outputs.weight`` and the bias is 0
(structqa drops it: a constant shift of every start or end logit changes no prediction). Other
heads or encoders have no place in that class and are refused, with the reason.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import torch

from structqa.encoders import attention_options
from structqa.encoders.bert import encoder_hf_state
from structqa.heads.base import QueryHead
from structqa.heads.independent import IndependentScorer, StaticQueries
from structqa.io import read_json, write_json, writing_dir
from structqa.manifest import write_manifest
from structqa.runtimes.onnx_export import (
    COPIED,
    Exported,
    ExportRefused,
    check_target,
    load_span_model,
)

log = logging.getLogger(__name__)


def refusal(model, head_name: str) -> str | None:
    """Why ``model`` has no ``BertForQuestionAnswering`` form (None when it has one)."""
    head = model.head
    if not (
        isinstance(head, QueryHead)
        and isinstance(head.queries, StaticQueries)
        and isinstance(head.scorer, IndependentScorer)
    ):
        return (
            f"the {head_name!r} head has no BertForQuestionAnswering form: that class scores "
            "start and end with one linear layer over the last hidden state (the Independent "
            "head); export it with --format onnx"
        )
    cfg = model.encoder.config
    if tuple(cfg.block) != ("sa", "ffn"):
        return (
            f"the encoder's block {'->'.join(cfg.block).upper()} is not BERT's SA->FFN; "
            "BertModel cannot run it: export with --format onnx"
        )
    if not attention_options(model.encoder).plain:
        return "the encoder's attention variants (relative positions, entity bias) are not BERT's"
    if cfg.pos_vocab_size:
        return "the encoder reads POS-tag inputs, which BertModel has no embedding for"
    return None


def _is_transformers_export(out: Path) -> bool:
    """Whether ``out`` holds an earlier export of this kind (a BertForQuestionAnswering
    config beside a manifest), which a new one may replace."""
    config = out / "config.json"
    if not (config.is_file() and (out / "manifest.json").is_file()):
        return False
    try:
        return "BertForQuestionAnswering" in read_json(config).get("architectures", [])
    except (ValueError, AttributeError):  # (read_json's UnreadableFile is a ValueError)
        return False


def export_transformers(checkpoint: str | Path, out: str | Path) -> Exported:
    from safetensors.torch import save_file

    t0 = time.perf_counter()
    checkpoint, out = Path(checkpoint), Path(out)
    check_target(checkpoint, out, _is_transformers_export(out))
    model, tokenizer, cfg = load_span_model(checkpoint)
    why = refusal(model, cfg.model.head)
    if why:
        raise ExportRefused(f"{checkpoint}: {why}")
    with writing_dir(out) as tmp:  # swapped in whole at the end; removed if anything fails
        state = encoder_hf_state(model.encoder, prefix="bert.")
        q0 = model.head.queries.q0.detach().float().contiguous()  # (2, D): q_s, q_e
        state["qa_outputs.weight"] = q0
        state["qa_outputs.bias"] = torch.zeros(2)
        state = {k: v.float().contiguous() for k, v in state.items()}
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        hf = model.encoder.config.to_hf()
        hf.pop("structqa_block", None)
        hf["architectures"] = ["BertForQuestionAnswering"]
        write_json(tmp / "config.json", hf)
        tokenizer.save_pretrained(str(tmp))
        for name in COPIED:  # structqa's settings travel along (transformers ignores them)
            if (checkpoint / name).is_file():
                shutil.copy2(checkpoint / name, tmp / name)
        write_manifest(tmp)  # last: it records every file above, verified at loading
    seconds = time.perf_counter() - t0
    size = (out / "model.safetensors").stat().st_size
    log.info("exported %s as BertForQuestionAnswering to %s in %.1f s", checkpoint, out, seconds)
    return Exported(out, seconds, {"fp32": size}, {})
