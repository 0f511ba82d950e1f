"""Pre-training data: corpus chunks -> tokens with char offsets -> masked, padded batches.

Input is either a ``structqa corpus`` directory (``corpus-*.jsonl`` lines ``{"id", "text",
"source"}`` and ``annotations-*.jsonl`` lines ``{"id", <Annotation.to_dict fields>}``) or, for
small runs, one JSONL file of ``{"id"?, "text"}`` lines or a text file with one chunk per
non-empty line; chunks without an annotation are annotated on the fly (spaCy, cached) when the
masking scheme needs one.

* Held-out split: a chunk is held out when the SHA-1 of its id falls below
  ``heldout_fraction`` (a stable function of the id: adding chunks never moves old ones).
* A chunk longer than ``max_seq_len`` tokens becomes several windows ``id``, ``id#1``, ...;
  offsets stay relative to the chunk's text, so its annotation serves every window.
* Masks are drawn by :class:`~structqa.pretrain.masking.Masker` from ``(seed, window id,
  epoch)`` alone: any worker, any resume, the same masks. Held-out windows are always masked
  as in epoch 0, so every evaluation scores the same positions.
* Batches are padded to their longest sequence (dynamic padding). They carry the inputs the
  encoder needs besides the tokens: the entity key mask (entity-aware attention) and the POS
  id of each token's word (a POS-tag embedding, ``word_pos``), both from the annotation.

Dimension letters: B batch, N tokens.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from structqa.features.coverage import check_covered, covered_ends
from structqa.pretrain.config import PretrainConfig, PretrainMaskingConfig
from structqa.pretrain.masking import IGNORE_INDEX, Masker, get_scheme
from structqa.text.annotate import (
    Annotation,
    Annotator,
    entity_token_mask,
    pos_tag_ids,
    text_key,
)

log = logging.getLogger(__name__)

CORPUS_GLOB = "corpus-*.jsonl"
ANNOTATIONS_GLOB = "annotations-*.jsonl"


@dataclass(frozen=True)
class Chunk:
    """One passage of the corpus and, when known, its annotation."""

    id: str
    text: str
    annotation: Annotation | None = None


@dataclass(frozen=True)
class TokenizedChunk:
    """One window of a chunk: ``input_ids`` (T,) with [CLS] ... [SEP] and their (T, 2) char
    ``offsets`` in the chunk's text (special tokens ``(0, 0)``)."""

    id: str
    input_ids: np.ndarray
    offsets: np.ndarray
    annotation: Annotation | None

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass
class MLMBatch:
    input_ids: Tensor  # (B, N) masked inputs
    attention_mask: Tensor  # (B, N) 1 for real tokens
    labels: Tensor  # (B, N) original id on the selected tokens, IGNORE_INDEX elsewhere
    entity_mask: Tensor | None = None  # (B, N) bool, tokens inside named entities
    pos_tag_ids: Tensor | None = None  # (B, N) POS id of each token's word (0: none)

    def to(self, device: torch.device | str) -> MLMBatch:
        return MLMBatch(**{k: None if v is None else v.to(device) for k, v in vars(self).items()})

    @property
    def num_masked(self) -> int:
        return int((self.labels != IGNORE_INDEX).sum())


# ---- reading ---------------------------------------------------------------------------------


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, record); an unreadable line (e.g. the last one of a killed writer) is
    skipped with a warning."""
    from structqa.data.squad import numbered_lines

    with _open_text(path) as f:
        for i, line in numbered_lines(f, str(path)):  # a corrupt .gz: DataError
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                log.warning("%s:%d: unreadable line skipped", path, i)
                continue
            yield i, record


def read_annotations(paths: Sequence[Path]) -> dict[str, Annotation]:
    """Chunk id -> Annotation from ``annotations-*.jsonl`` shards."""
    return {chunk_id: a for chunk_id, (a, _) in _annotation_records(paths).items()}


def _annotation_records(paths: Sequence[Path]) -> dict[str, tuple[Annotation, str | None]]:
    """Chunk id -> (Annotation, the key of the text it was made for, when recorded)."""
    out: dict[str, tuple[Annotation, str | None]] = {}
    for path in paths:
        for i, record in _read_jsonl(path):
            try:
                key = record.get("key")
                out[str(record["id"])] = (Annotation.from_dict(record), key and str(key))
            except (AttributeError, KeyError, TypeError, ValueError) as err:
                log.warning("%s:%d: bad annotation skipped (%s)", path, i, err)
    return out


def read_corpus(path: str | Path) -> list[Chunk]:
    """Chunks of a corpus directory, a JSONL file or a text file (module docstring)."""
    path = Path(path)
    if path.is_dir():
        shards = sorted(path.glob(CORPUS_GLOB))
        if not shards:
            raise FileNotFoundError(
                f"{path}: no {CORPUS_GLOB} shards (build the corpus with `structqa corpus`)"
            )
        annotations = _annotation_records(sorted(path.glob(ANNOTATIONS_GLOB)))
        records = [(s, i, r) for s in shards for i, r in _read_jsonl(s)]
    elif path.name.endswith((".jsonl", ".jsonl.gz")):
        annotations = {}
        records = [(path, i, r) for i, r in _read_jsonl(path)]
    elif path.is_file():
        with _open_text(path) as f:
            lines = [(i, line.strip()) for i, line in enumerate(f, 1)]
        return [Chunk(f"{path.stem}:{i}", text) for i, text in lines if text]
    else:
        raise FileNotFoundError(f"corpus {path} does not exist")
    chunks: list[Chunk] = []
    seen: set[str] = set()
    for shard, i, record in records:
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise ValueError(f"{shard}:{i}: expected an object with a 'text' string")
        chunk_id = str(record.get("id", f"{shard.stem}:{i}"))
        if chunk_id in seen:
            log.warning("%s:%d: duplicate chunk id %r skipped", shard, i, chunk_id)
            continue
        seen.add(chunk_id)
        annotation, key = annotations.get(chunk_id, (None, None))
        if annotation is not None:
            _check_annotation(f"{shard}:{i}", chunk_id, record["text"], annotation, key)
        chunks.append(Chunk(chunk_id, record["text"], annotation))
    return chunks


def _check_annotation(
    where: str, chunk_id: str, text: str, annotation: Annotation, key: str | None
) -> None:
    again = "build the corpus again with `structqa corpus`"
    if key is not None and key != text_key(text):
        raise ValueError(
            f"{where}: chunk {chunk_id!r}: its annotation was made for another text "
            f"(annotation shards of another build beside these corpus shards?); {again}"
        )
    end = max((w[1] for w in annotation.words), default=0)
    if end > len(text):
        raise ValueError(
            f"{where}: chunk {chunk_id!r}: annotation reaches char {end} of a {len(text)}-char "
            f"text (annotations of another corpus?); {again}"
        )


def annotate_missing(
    chunks: list[Chunk], model: str, cache_file: str | Path | None = None
) -> list[Chunk]:
    """Chunks with every annotation filled in (spaCy on those that have none)."""
    todo = [i for i, c in enumerate(chunks) if c.annotation is None]
    if not todo:
        return chunks
    log.info("annotating %d of %d chunks with %s", len(todo), len(chunks), model)
    annotator = Annotator(model, cache_file=cache_file)
    found = annotator.annotate(chunks[i].text for i in todo)
    out = list(chunks)
    for i, annotation in zip(todo, found, strict=True):
        out[i] = Chunk(chunks[i].id, chunks[i].text, annotation)
    return out


# ---- splitting and tokenizing ----------------------------------------------------------------


def _id_hash(chunk_id: str) -> float:
    """The SHA-1 of a chunk id read as a number in [0, 1)."""
    digest = hashlib.sha1(chunk_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_heldout(chunk_id: str, fraction: float) -> bool:
    """Whether a chunk belongs to the held-out split: its id's hash is below ``fraction``."""
    return _id_hash(chunk_id) < fraction


def split_heldout(chunks: list[Chunk], fraction: float) -> tuple[list[Chunk], list[Chunk]]:
    """(train, held-out). With fraction > 0 and at least two chunks, each side gets at least
    one chunk (tiny corpora), still chosen by the id hash."""
    held = [is_heldout(c.id, fraction) for c in chunks]
    if fraction > 0 and len(chunks) >= 2 and (not any(held) or all(held)):
        order = sorted(range(len(chunks)), key=lambda i: _id_hash(chunks[i].id))
        if not any(held):
            held[order[0]] = True  # the chunk closest to being held out
        else:
            held[order[-1]] = False
    train = [c for c, h in zip(chunks, held, strict=True) if not h]
    heldout = [c for c, h in zip(chunks, held, strict=True) if h]
    return train, heldout


def tokenize_chunks(
    chunks: Sequence[Chunk], tokenizer, max_seq_len: int, batch_size: int = 256
) -> list[TokenizedChunk]:
    """Windows of at most ``max_seq_len`` tokens (with [CLS]/[SEP]) covering every chunk."""
    out: list[TokenizedChunk] = []
    for s in range(0, len(chunks), batch_size):
        part = chunks[s : s + batch_size]
        enc = tokenizer(
            [c.text for c in part],
            truncation=True,
            max_length=max_seq_len,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        offsets = [np.asarray(o, dtype=np.int64).reshape(-1, 2) for o in enc["offset_mapping"]]
        samples = list(enc["overflow_to_sample_mapping"])
        check_covered(
            [c.text for c in part],
            covered_ends(samples, offsets, len(part)),
            [f"chunk {c.id!r}" for c in part],
        )
        window_of: dict[int, int] = {}
        for ids, offs, j in zip(enc["input_ids"], offsets, samples, strict=True):
            k = window_of.get(j, 0)
            window_of[j] = k + 1
            chunk = part[j]
            if len(ids) <= 2:  # nothing but special tokens
                continue
            out.append(
                TokenizedChunk(
                    id=chunk.id if k == 0 else f"{chunk.id}#{k}",
                    input_ids=np.asarray(ids, dtype=np.int64),
                    offsets=offs,
                    annotation=chunk.annotation,
                )
            )
    return out


# ---- masking and batching --------------------------------------------------------------------


def mask_seed(seed: int, epoch: int) -> int:
    """The Masker seed of an epoch: distinct for every (seed, epoch) pair of a run."""
    return seed * 100_003 + epoch


class MLMDataset:
    """Tokenized windows that mask themselves per (seed, window id, epoch) when batched."""

    def __init__(
        self,
        windows: list[TokenizedChunk],
        masking: PretrainMaskingConfig,
        seed: int,
        tokenizer,
        entity_masks: bool = False,
        pos_tags: bool = False,
    ) -> None:
        self.windows = windows
        self.masking, self.seed = masking, seed
        self.entity_masks, self.pos_tags = entity_masks, pos_tags
        self.pad_id = int(tokenizer.pad_token_id or 0)
        if tokenizer.mask_token_id is None:
            raise ValueError("the tokenizer has no mask token")
        self._facts = (tokenizer.mask_token_id, len(tokenizer), tokenizer.all_special_ids)
        self._maskers: dict[int, Masker] = {}

    def __len__(self) -> int:
        return len(self.windows)

    @property
    def lengths(self) -> list[int]:
        return [len(w) for w in self.windows]

    def masker(self, epoch: int) -> Masker:
        if epoch not in self._maskers:
            self._maskers = {  # keep one: epochs are visited in order
                epoch: Masker(self.masking.masking(mask_seed(self.seed, epoch)), *self._facts)
            }
        return self._maskers[epoch]

    def batch(self, indices: Sequence[int], epoch: int) -> MLMBatch:
        """Masked, padded windows ``indices`` as masked in ``epoch``."""
        masker = self.masker(epoch)
        rows = [self.windows[i] for i in indices]
        n = max(len(w) for w in rows)
        ids = np.full((len(rows), n), self.pad_id, dtype=np.int64)
        labels = np.full((len(rows), n), IGNORE_INDEX, dtype=np.int64)
        attn = np.zeros((len(rows), n), dtype=np.int64)
        ents = np.zeros((len(rows), n), dtype=bool) if self.entity_masks else None
        tags = np.zeros((len(rows), n), dtype=np.int64) if self.pos_tags else None
        for r, w in enumerate(rows):
            masked = masker(w.id, w.input_ids, w.offsets, w.annotation)
            t = len(w)
            ids[r, :t], labels[r, :t], attn[r, :t] = masked.input_ids, masked.labels, 1
            if ents is not None and w.annotation is not None:
                ents[r, :t] = entity_token_mask(w.annotation, w.offsets)
            if tags is not None and w.annotation is not None:
                tags[r, :t] = pos_tag_ids(w.annotation, w.offsets)
        return MLMBatch(
            torch.from_numpy(ids),
            torch.from_numpy(attn),
            torch.from_numpy(labels),
            None if ents is None else torch.from_numpy(ents),
            None if tags is None else torch.from_numpy(tags),
        )


@dataclass
class PretrainData:
    train: MLMDataset
    heldout: MLMDataset
    report: dict[str, int] = field(default_factory=dict)


def resolve_corpus(cfg: PretrainConfig) -> Path:
    """An absolute or existing path as is; else under the data directory."""
    path = Path(cfg.data.corpus).expanduser()
    if path.is_absolute() or path.exists():
        if not path.exists():
            raise FileNotFoundError(
                f"corpus {path} does not exist (build a corpus directory with `structqa corpus`)"
            )
        return path
    from structqa.paths import resolve_data_dir

    under = resolve_data_dir(cfg.data.dir) / path
    if not under.exists():
        raise FileNotFoundError(
            f"corpus {path} not found here nor under the data directory "
            "(build one with `structqa corpus`)"
        )
    return under


def prepare_pretrain_data(
    cfg: PretrainConfig,
    tokenizer,
    entity_masks: bool | None = None,
    pos_tags: bool | None = None,
    on_train_chunks: Callable[[list[Chunk]], Any] | None = None,
) -> PretrainData:
    """Read, annotate where needed, split, tokenize; log a report. ``entity_masks``: whether
    batches carry the entity key mask (entity-aware attention; default model.entity_bias);
    ``pos_tags``: whether they carry POS ids (a POS-tag embedding; default: scheme word_pos).
    ``on_train_chunks(train_chunks)`` runs before tokenization and may return the tokenizer
    to use instead (the noun-phrase vocabulary is collected from the training chunks)."""
    ents = cfg.model.entity_bias if entity_masks is None else entity_masks
    tags = cfg.masking.scheme == "word_pos" if pos_tags is None else pos_tags
    path = resolve_corpus(cfg)
    chunks = read_corpus(path)
    if not chunks:
        raise ValueError(f"corpus {path} holds no text")
    needs_annotation = (
        get_scheme(cfg.masking.scheme) != ("token",) or ents or tags or cfg.model.np_vocab > 0
    )
    given = sum(c.annotation is not None for c in chunks)
    if needs_annotation:
        chunks = annotate_missing(chunks, cfg.data.spacy_model, cfg.data.annotation_cache)
    train_chunks, held_chunks = split_heldout(chunks, cfg.data.heldout_fraction)
    if on_train_chunks is not None:
        tokenizer = on_train_chunks(train_chunks) or tokenizer
    seq = cfg.data.max_seq_len
    train_windows = tokenize_chunks(train_chunks, tokenizer, seq)
    held_windows = tokenize_chunks(held_chunks, tokenizer, seq)
    report = {
        "chunks": len(chunks),
        "annotated_in_corpus": given,
        "train_chunks": len(train_chunks),
        "heldout_chunks": len(held_chunks),
        "train_windows": len(train_windows),
        "heldout_windows": len(held_windows),
        "train_tokens": sum(len(w) for w in train_windows),
    }
    log.info("pretraining corpus %s: %s", path, report)
    seed, masking = cfg.train.seed, cfg.masking
    inputs = {"entity_masks": ents, "pos_tags": tags}
    return PretrainData(
        train=MLMDataset(train_windows, masking, seed, tokenizer, **inputs),
        heldout=MLMDataset(held_windows, masking, seed, tokenizer, **inputs),
        report=report,
    )


__all__ = [
    "Chunk",
    "MLMBatch",
    "MLMDataset",
    "PretrainData",
    "TokenizedChunk",
    "annotate_missing",
    "is_heldout",
    "mask_seed",
    "prepare_pretrain_data",
    "read_annotations",
    "read_corpus",
    "resolve_corpus",
    "split_heldout",
    "tokenize_chunks",
]
