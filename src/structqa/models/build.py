"""Build a model and its tokenizer from a config, or load both from a checkpoint.

The encoder keeps the structure it was pre-trained with (``structqa pretrain`` outputs: block
stacking, attention variants, POS-tag embedding), and so does a training checkpoint
(``encoder_config.json``). Inputs beyond the tokens that such an encoder reads are computed at
featurization: ``data.token_tags`` is resolved from the encoder (:func:`resolve_token_tags`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from structqa.attention.module import MultiHeadAttention
from structqa.config import Config, ConfigError
from structqa.encoders import (
    attention_options,
    convert_stacking,
    encoder_from_config_dict,
    load_encoder,
    parse_stacking,
)
from structqa.encoders.bert import BertEncoder
from structqa.features.squad import TOKEN_TAGS
from structqa.heads import build_head
from structqa.io import UnreadableFile, read_json, read_safetensors
from structqa.manifest import MANIFEST, listed_sha256, verify_manifest
from structqa.models.extractive import ExtractiveQAModel
from structqa.paths import READER_CARD, find_reader, no_reader_message, reader_checkpoint_of
from structqa.provenance import INIT_RECORD

log = logging.getLogger(__name__)


def resolve_encoder_path(name: str) -> Path:
    if name == "default":
        from structqa.paths import default_encoder_path

        return default_encoder_path()
    path = Path(name).expanduser()
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"encoder {name!r}: not a local HF BERT checkpoint directory (no config.json); "
            "models are loaded from local paths only"
        )
    return path


def load_tokenizer(path: str | Path):
    """The fast tokenizer saved in ``path``. Its vocabulary file must be there: without
    ``tokenizer.json`` (or ``vocab.txt``) transformers builds a tokenizer with an empty
    vocabulary from ``tokenizer_config.json`` alone, and every answer would be wrong."""
    from transformers import AutoTokenizer

    path = Path(path)
    if not (path / "tokenizer.json").is_file() and not (path / "vocab.txt").is_file():
        raise UnreadableFile(
            path / "tokenizer.json",
            "missing (and no vocab.txt): the directory holds no tokenizer vocabulary",
            "copy the directory again from its source, with its tokenizer files",
        )
    try:
        tok = AutoTokenizer.from_pretrained(str(path), use_fast=True)
    except (OSError, ValueError):
        raise
    except Exception as err:  # the tokenizers library's parse errors are bare Exceptions
        raise UnreadableFile(
            path,
            f"the tokenizer files cannot be read ({type(err).__name__}: {err})",
            "copy the directory again from its source",
        ) from None
    if not tok.is_fast:
        raise ValueError(f"{path}: a fast tokenizer (tokenizer.json or vocab.txt) is required")
    return tok


def required_token_tags(encoder: BertEncoder) -> list[str]:
    """The token tags (``features.squad.TOKEN_TAGS``) ``encoder`` reads, sorted."""
    tags = []
    if attention_options(encoder).entity_bias:
        tags.append("entities")
    if encoder.config.pos_vocab_size:
        tags.append("pos")
    return tags


def resolve_token_tags(cfg: Config, encoder: BertEncoder) -> None:
    """Set ``cfg.data.token_tags`` to the tags ``encoder`` reads when it is null; a value
    given that differs is an error (the encoder needs exactly its inputs)."""
    needed = required_token_tags(encoder)
    given = cfg.data.token_tags
    if given is None:
        cfg.data.token_tags = needed
        if needed:
            log.info("the encoder reads spaCy token tags %s (%s)", needed, cfg.data.spacy_model)
        return
    unknown = sorted(set(given) - set(TOKEN_TAGS))
    if unknown:
        raise ConfigError(f"data.token_tags: unknown {unknown}; known: {sorted(TOKEN_TAGS)}")
    if sorted(set(given)) != needed:
        raise ConfigError(
            f"data.token_tags={sorted(set(given))}, but the encoder reads {needed} "
            "(leave it null to use the encoder's)"
        )


def head_from_config(cfg: Config, encoder: BertEncoder):
    """The span head ``cfg.model`` names, for ``encoder`` (a fresh init)."""
    m = cfg.model
    return build_head(
        m.head,
        encoder.config,
        query_mask=m.query_mask,
        dyrex_layers=m.dyrex_layers,
        joint_mode=m.joint_mode,
        max_answer_length=cfg.decode.max_answer_length,
        query_init_std=m.query_init_std,
        null_head=m.null_head,
        null_loss_weight=m.null_loss_weight,
        null_balanced=m.null_balanced,
    )


def build_model(cfg: Config) -> tuple[ExtractiveQAModel, object]:
    """A pretrained encoder (from cfg.model.encoder, with the structure it was saved with)
    plus a freshly initialized head; resolves ``cfg.data.token_tags`` from the encoder.

    ``cfg.model.block`` other than the encoder's converts it with
    :func:`~structqa.encoders.stacking.convert_stacking`: a sub-layer it adds starts as the
    identity (the model starts from the checkpoint's function), an NAA that replaces SA takes
    SA's weights. With ``cfg.model.init_from`` and no ``block``, the stacking is that
    checkpoint's, so that its weights have their places (a reader built with an SA sub-layer)."""
    path = resolve_encoder_path(cfg.model.encoder)
    encoder = load_encoder(path)
    init = resolve_init_from(cfg.model.init_from) if cfg.model.init_from else None
    block = cfg.model.block
    if block is None and init is not None:  # the stacking of the checkpoint it starts from
        block = _saved_block(init)
    if block is not None and parse_stacking(block) != encoder.config.block:
        # as `structqa pretrain` does: kept sub-layers keep their weights, added ones start as
        # the identity, so the fine-tune starts from the checkpoint's own function. The new
        # modules' throwaway init must not consume the global RNG: under one train.seed the
        # head's init and the dropout stream are those of the unconverted build.
        with torch.random.fork_rng(devices=[]):
            encoder = convert_stacking(encoder, block)
    positions = encoder.config.max_position_embeddings
    if cfg.data.max_seq_len > positions:
        raise ValueError(
            f"data.max_seq_len {cfg.data.max_seq_len} exceeds the {positions} positions of the "
            f"encoder {cfg.model.encoder}; windows longer than that cannot be encoded"
        )
    resolve_token_tags(cfg, encoder)
    head = head_from_config(cfg, encoder)
    model = ExtractiveQAModel(encoder, head)
    if init is not None:
        init_from_checkpoint(model, init)
    # after the head exists: DyREx's layers take the checkpoint's dropout from its config
    set_dropout(model, cfg.train.dropout, cfg.train.attention_dropout)
    return model, load_tokenizer(path)


_TRAINED_CONFIG = "structqa_config.json"  # the resolved config a trained checkpoint keeps


def _saved_head(checkpoint: Path) -> str:
    """ ", it was trained with model.head=X[, model.null_head=Y]" where the checkpoint says."""
    try:
        model = read_json(checkpoint / _TRAINED_CONFIG).get("model") or {}
    except (OSError, ValueError):  # UnreadableFile is a ValueError
        return ""
    parts = [f"model.{k}={model[k]}" for k in ("head", "null_head") if model.get(k)]
    return f"; it was trained with {', '.join(parts)}" if parts else ""


def _saved_block(checkpoint: Path) -> list[str] | None:
    """The encoder stacking a training checkpoint was saved with (None: not recorded)."""
    saved = checkpoint / "encoder_config.json"
    return read_json(saved).get("block") if saved.is_file() else None


def resolve_init_from(value: str) -> Path:
    """``model.init_from``: a checkpoint directory, a built reader directory, or ``reader``
    (the general reader: $STRUCTQA_READER, else the one `structqa reader build` made)."""
    if value == "reader":
        found = find_reader(None)
        if found is None:
            raise FileNotFoundError(f"model.init_from=reader: {no_reader_message()}")
        return found
    return reader_checkpoint_of(value)


def describe_start(value: str) -> dict[str, Any]:
    """What ``model.init_from=value`` resolves to now, for a run's record: the checkpoint, the
    SHA-256 of its weights (from its manifest, else hashed), and for a built general reader its
    card's commit, command and held-out scores, since ``reader`` names whichever reader is
    built on the machine and a result must say which one it started from; and, where that
    checkpoint was itself started from another, that one's record (``started_from``)."""
    checkpoint = resolve_init_from(value)
    start: dict[str, Any] = {
        "given": value,
        "checkpoint": str(checkpoint),
        "weights_sha256": listed_sha256(checkpoint, "model.safetensors"),
    }
    card_file = checkpoint.parent.parent / READER_CARD
    if card_file.is_file():
        card = read_json(card_file)
        commit = card.get("commit")
        start["reader"] = {
            "card": str(card_file),
            "commit": commit.get("commit") if isinstance(commit, dict) else commit,
            "command": card.get("command"),
            "heldout": {
                split: {k: v for k, v in scores.items() if k in ("f1", "NoAns_auc")}
                for split, scores in (card.get("heldout") or {}).items()
                if isinstance(scores, dict)
            },
        }
    earlier = checkpoint / INIT_RECORD  # the checkpoint was itself started from another
    if earlier.is_file():
        start["started_from"] = read_json(earlier)
    return start


def init_from_checkpoint(model: ExtractiveQAModel, checkpoint: str | Path) -> None:
    """Start ``model`` from a trained checkpoint's weights (``model.init_from``).

    Every tensor of the checkpoint must fit a parameter of the same name and shape. A span
    head's tensors also fit the same head inside an answerability classifier
    (``head.X`` -> ``head.span.X``), so a model trained with ``null_head: span`` can start the
    answerability stage. Parameters the checkpoint lacks keep their fresh init and are listed
    in the log."""
    path = Path(checkpoint)
    file = path / "model.safetensors"
    if not file.exists():
        raise FileNotFoundError(f"model.init_from: {not_a_checkpoint(path)}")
    if (path / "config.json").is_file() and not (path / _TRAINED_CONFIG).is_file():
        raise ValueError(
            f"model.init_from: {path} is an encoder (a transformers config.json, no "
            f"{_TRAINED_CONFIG}), not a trained structqa reader; start from it with "
            f"--model.encoder={path}"
        )
    verify_manifest(path)  # weights changed since they were saved are refused, not loaded
    saved = read_safetensors(file)
    own = model.state_dict()
    state: dict[str, torch.Tensor] = {}
    for name, tensor in saved.items():
        target = name
        if target not in own and name.startswith("head."):
            target = "head.span." + name.removeprefix("head.")
        if target not in own:
            raise ValueError(
                f"model.init_from: {file} holds {name!r}, which this model has no place for "
                f"(another head or encoder?{_saved_head(path)}); train with the same "
                "model.head and model.encoder as the checkpoint"
            )
        if own[target].shape != tensor.shape:
            raise ValueError(
                f"model.init_from: {file}: {name!r} has shape {tuple(tensor.shape)}, this "
                f"model's {target!r} {tuple(own[target].shape)}; the encoders differ"
            )
        state[target] = tensor
    missing = sorted(set(own) - set(state))
    model.load_state_dict(state, strict=False)
    log.info(
        "model.init_from: %d tensors from %s; fresh: %s",
        len(state),
        path,
        ", ".join(missing) if missing else "none",
    )


def set_dropout(module: nn.Module, hidden: float | None, attention: float | None) -> None:
    """Override hidden (nn.Dropout) and attention-probability dropout; None keeps the
    checkpoint's value."""
    for m in module.modules():
        if hidden is not None and isinstance(m, nn.Dropout):
            m.p = hidden
        if attention is not None and isinstance(m, MultiHeadAttention):
            m.dropout = attention


def not_a_checkpoint(path: Path, missing: str = "model.safetensors") -> str:
    """The error for a directory without a checkpoint (``missing`` is the file it lacks),
    pointing into a run directory's."""
    if not path.exists():
        made_by = (
            " (made by `structqa quickstart`: run it first)" if "quickstart" in path.parts else ""
        )
        return f"{path}: no such folder{made_by}; give a checkpoint directory, e.g. RUN/best"
    held = [d for d in ("best", "last", "final") if (path / d / missing).exists()]
    hint = f"; it is a run directory: give {path / held[0]}" if held else ""
    if (path / READER_CARD).is_file():
        best = path / "run" / "best"
        hint = (
            f"; it is a reader built by `structqa reader build`: give {best}"
            if (best / missing).is_file()
            else "; it is a reader whose build has not finished: run the same `structqa reader "
            f"build --out {path}` again to resume it"
        )
    return f"{path}: not a structqa checkpoint (no {missing}){hint}"


def checkpoint_config(path: str | Path) -> Config:
    """The settings a checkpoint was trained with (its structqa_config.json), without loading
    its weights."""
    from structqa.config import config_from_dict

    path = Path(path)
    if not (path / "structqa_config.json").is_file():
        raise FileNotFoundError(not_a_checkpoint(path, "structqa_config.json"))
    return config_from_dict(read_json(path / "structqa_config.json"))


def model_from_checkpoint(path: str | Path) -> tuple[ExtractiveQAModel, object, Config]:
    """Rebuild the exact model saved by the trainer (weights, config, tokenizer), after checking
    its files against its manifest (:func:`structqa.manifest.verify_manifest`)."""
    path = Path(path)
    if not (path / "model.safetensors").exists() and not (path / MANIFEST).exists():
        raise FileNotFoundError(not_a_checkpoint(path))
    verify_manifest(path)
    _refuse_other_kinds(path)
    cfg, encoder, head = _saved_structure(path)
    resolve_token_tags(cfg, encoder)  # null in checkpoints from before token tags
    model = ExtractiveQAModel(encoder, head)
    model.load_state_dict(read_safetensors(path / "model.safetensors"))
    model.eval()
    tokenizer = load_tokenizer(path)
    check_vocabulary(path, tokenizer, encoder.config.vocab_size)
    return model, tokenizer, cfg


def _refuse_other_kinds(path: Path) -> None:
    """Folders that look like checkpoints but hold another model, named with what answers
    with them: a drop-train checkpoint (GenBERT), and the BertForQuestionAnswering folder
    ``structqa export --format transformers`` writes (its own weight names)."""
    trained = path / "structqa_config.json"
    model = read_json(trained).get("model") if trained.is_file() else None
    if isinstance(model, dict) and "head" not in model and "max_decode_len" in model:
        raise ValueError(
            f"{path}: a drop-train checkpoint (GenBERT / NC-BERT: answers come from a decoder "
            "and arithmetic, not from span scores); answer with `structqa drop-predict "
            f"{path} --question Q --passage P`, or a DROP file in place of both"
        )
    config = path / "config.json"
    saved = read_json(config) if config.is_file() else None
    if isinstance(saved, dict) and "BertForQuestionAnswering" in str(saved.get("architectures")):
        raise ValueError(
            f"{path}: a transformers export (BertForQuestionAnswering), not a structqa "
            "checkpoint; answer with it through `transformers.pipeline('question-answering', "
            f"model='{path}')`, or give structqa the checkpoint it was exported from"
        )


def checkpoint_head(path: str | Path) -> nn.Module:
    """The head a checkpoint's config builds, on the meta device: what kind of head it holds,
    asked without loading or allocating its weights."""
    with torch.device("meta"):
        return _saved_structure(Path(path))[2]


def _saved_structure(path: Path) -> tuple[Config, BertEncoder, nn.Module]:
    """A checkpoint's config, and the encoder and head it describes, freshly initialized (on
    the current default device); the weights are the caller's to load."""
    cfg = checkpoint_config(path)
    encoder = encoder_from_config_dict(read_json(path / "encoder_config.json"))
    return cfg, encoder, head_from_config(cfg, encoder)


def check_vocabulary(path: Path, tokenizer, rows: int) -> None:
    """Refuse a tokenizer whose ids run past the model's embedding rows (another model's)."""
    if len(tokenizer) > rows:
        raise UnreadableFile(
            path,
            f"the tokenizer has {len(tokenizer)} ids, the model's embeddings {rows} rows: the "
            "tokenizer files belong to another model",
            "copy the checkpoint again from its source",
        )
