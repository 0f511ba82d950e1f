"""The ANNA pre-training corpus (Appendix B, Table 6): documents -> clean sentence chunks.

Steps, each counted in the report, in this order:

1. **read**: every source becomes documents made of passages. A text file holds one document
   per blank-line-separated block (or per line); JSONL holds ``{"text"}`` / ``{"id", "text"}``
   records; a QA dataset contributes its distinct contexts (SQuAD / MRQA) or passages (DROP).
   SQuAD JSON groups the paragraphs of one article (title) into one document, so the
   100-word document minimum applies to the article, not to each ~120-word paragraph; MRQA
   contexts and DROP passages have no usable title and are documents on their own.
2. **duplicate passages**: a passage whose normalized text was already read is dropped.
3. **exclusion**: a passage containing the text of any passage of an ``exclude`` file (the
   held-out evaluation data) is dropped. Exclusion works per passage rather than per document
   so that one held-out paragraph does not throw away the rest of its article; chunks are
   checked again in step 8.
4. **noise**: URLs, file paths, separator runs (``=====``, ``-----``), HTML-ish tags and MRQA
   markers (``[PAR]``) are cut out with regular expressions before parsing.
5. **sentences**: spaCy (:class:`structqa.text.Annotator`, cached in ``spacy-cache.jsonl``
   beside the shards) splits each passage; sentences under ``min_sentence_words``
   whitespace-delimited words are dropped.
6. **short documents**: documents with fewer than ``min_doc_words`` words left are dropped.
7. **chunks**: each document's sentences are packed greedily into chunks of at most
   ``chunk_words`` words (a longer sentence is a chunk of its own); ``overlap`` > 0 starts each
   chunk that many sentences before the previous one ended (Table 6's overlapping variant).
8. **excluded chunks**: a chunk sharing a normalized sentence (of at least
   ``_MIN_EXCLUDED_SENTENCE_WORDS`` words) with an excluded passage is dropped.
9. **duplicate chunks**: exact de-duplication by the hash of the normalized text.
10. **shards**: ``corpus-NNNNN.jsonl`` (``{"id", "text", "source"}`` per chunk) and
    ``annotations-NNNNN.jsonl`` (the chunk's :class:`Annotation`, keyed by chunk ``id`` and by
    ``key``/``model`` so an ``Annotator`` reads the file as a cache), then ``report.json``.
    The shards are written into ``.incoming`` and moved in only when all are written, so a
    build stopped on the way leaves the earlier corpus whole.

Chunk annotations are the passages' parses shifted into the chunk, not a re-parse: a chunk is
whole sentences joined by one space, so every sentence, word, noun chunk and entity inside a
sentence keeps its exact characters (entities crossing a sentence boundary are left out).
Everything is deterministic: sources in the order given, records in file order.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from structqa.data.overlap import passage_key
from structqa.data.records import DataError
from structqa.data.squad import numbered_lines, open_text, parse_json
from structqa.io import write_json, write_text
from structqa.text.annotate import DEFAULT_MODEL, Annotation, Annotator, text_key

log = logging.getLogger(__name__)

SHARD_PATTERN = "corpus-{:05d}.jsonl"
ANNOTATION_PATTERN = "annotations-{:05d}.jsonl"
REPORT_FILE = "report.json"
SPACY_CACHE = "spacy-cache.jsonl"
SWAPPING = "SWAPPING"  # in .incoming while a build moves its shards into place
_TEXT_SUFFIXES = {".txt", ".text", ".md"}
# Shorter held-out sentences ("Notes.", "See also.") are too common to mean a leak.
_MIN_EXCLUDED_SENTENCE_WORDS = 5
# Excluded passages are found by their first K normalized words, then verified in full.
_EXCLUDE_KEY_WORDS = 8

NOISE_PATTERNS: dict[str, re.Pattern[str]] = {
    "url": re.compile(r"(?:\b(?:https?|ftp)://|\bwww\.)[^\s<>\"]+", re.IGNORECASE),
    "path": re.compile(
        r"(?<!\S)(?:[A-Za-z]:\\|~?/)[\w.\-]+(?:[/\\][\w.\-]+)+[/\\]?(?=[\s,;:)\]]|$)"
    ),
    "separator": re.compile(r"([-=_*#~+.])\1{3,}"),
    "html": re.compile(r"<!--.*?-->|</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>", re.DOTALL),
    "marker": re.compile(r"\[(?:PAR|TLE|DOC|SEP)\]"),
}


@dataclass(frozen=True)
class CorpusConfig:
    """How :func:`build_corpus` filters and chunks; saved in ``report.json``."""

    chunk_words: int = 300
    overlap: int = 0  # sentences shared by consecutive chunks of a document (0: none)
    min_sentence_words: int = 10
    min_doc_words: int = 100
    lines: bool = False  # text files: one document per line instead of per blank-line block
    group_by_title: bool = True  # SQuAD JSON: one document per article
    shard_chunks: int = 10_000
    spacy_model: str = DEFAULT_MODEL
    progress: bool = True

    def __post_init__(self) -> None:
        if self.chunk_words < 1 or self.shard_chunks < 1:
            raise ValueError("chunk_words and shard_chunks must be positive")
        if self.overlap < 0 or self.min_sentence_words < 0 or self.min_doc_words < 0:
            raise ValueError("overlap, min_sentence_words and min_doc_words must be >= 0")


@dataclass(frozen=True)
class Document:
    """One source document: its passages (paragraphs) in order."""

    id: str
    source: str
    passages: tuple[str, ...]


@dataclass(frozen=True)
class Chunk:
    id: str
    text: str
    source: str
    annotation: Annotation


@dataclass
class CorpusReport:
    """What :func:`build_corpus` read, dropped and wrote (``counts`` in pipeline order)."""

    config: dict
    counts: dict[str, int] = field(default_factory=dict)
    noise: dict[str, int] = field(default_factory=dict)
    sources: list[dict] = field(default_factory=list)
    exclusions: dict = field(default_factory=dict)
    shards: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


# ---- text normalization ----------------------------------------------------------------


#: case-folded NFKC text with every run of non-alphanumerics made one space (the key that
#: ``data.exclude`` matches passages by, so both keep held-out text out the same way)
normalize = passage_key


def _hash(normalized: str) -> str:
    return hashlib.sha1(normalized.encode("utf-8")).hexdigest()


def clean_noise(text: str, counts: dict[str, int] | None = None) -> str:
    """``text`` with the :data:`NOISE_PATTERNS` cut out (matches counted per kind)."""
    changed = False
    for kind, pattern in NOISE_PATTERNS.items():
        text, n = pattern.subn(" ", text)
        if n:
            changed = True
            if counts is not None:
                counts[kind] = counts.get(kind, 0) + n
    if changed:
        text = "\n".join(re.sub(r"[ \t]{2,}", " ", line).strip() for line in text.split("\n"))
        text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return text


# ---- sources -----------------------------------------------------------------------------


def source_format(path: str | Path) -> str:
    """``text``, ``jsonl`` (records with a ``text`` field) or ``qa`` (a dataset reader's)."""
    path = Path(path)
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if last in _TEXT_SUFFIXES:
        return "text"
    if last == ".jsonl":
        with open_text(path) as handle:
            first = next((line for _, line in numbered_lines(handle, str(path))), "")
        record = parse_json(first, str(path), 1)
        if isinstance(record, dict) and "header" in record:
            return "qa"  # MRQA
        if isinstance(record, dict) and "text" in record:
            return "jsonl"
        raise ValueError(f"{path}: JSONL records need a 'text' field (or an MRQA header)")
    if last == ".json":
        return "qa"
    raise ValueError(
        f"{path}: unknown source type (use .txt/.md text, .jsonl with 'text', or a "
        "SQuAD/MRQA/DROP file)"
    )


def read_documents(path: str | Path, config: CorpusConfig) -> tuple[str, list[Document]]:
    """The documents of one source, in file order, and the source's format name."""
    path = Path(path)
    kind = source_format(path)
    name = path.name
    if kind == "text":
        with open_text(path) as handle:
            raw = "".join(line for _, line in numbered_lines(handle, str(path)))
        blocks = raw.split("\n") if config.lines else re.split(r"\n\s*\n", raw)
        texts = [b.strip() for b in blocks if b.strip()]
        return kind, [Document(f"{name}:{i}", name, (t,)) for i, t in enumerate(texts)]
    if kind == "jsonl":
        docs = []
        with open_text(path) as handle:
            for i, line in numbered_lines(handle, str(path)):
                if not line.strip():
                    continue
                record = parse_json(line, str(path), i)
                if not isinstance(record, dict):
                    raise DataError(str(path), f"line {i}", "(line)", "expected a JSON object")
                text = str(record.get("text", "")).strip()
                if text:
                    # (ids count lines from 0, as they always did)
                    docs.append(Document(f"{name}:{record.get('id', i - 1)}", name, (text,)))
        return kind, docs
    return _read_qa(path, config)


def _read_qa(path: Path, config: CorpusConfig) -> tuple[str, list[Document]]:
    from structqa.data.drop import DropDataset
    from structqa.data.readers import read_examples

    name = path.name
    ds = read_examples(path)
    if isinstance(ds, DropDataset):
        passages = {ex.passage_id: ex.passage for ex in ds}
        docs = [Document(f"{name}:{pid}", name, (p,)) for pid, p in passages.items()]
        return "drop", docs
    groups: dict[str, list[str]] = {}
    seen: set[str] = set()
    for k, ex in enumerate(ds):
        if ex.context in seen:  # one question of a context already read
            continue
        seen.add(ex.context)
        # MRQA (no titles): every distinct context is its own document.
        key = ex.title if (config.group_by_title and ex.title) else f"#{k}"
        groups.setdefault(key, []).append(ex.context)
    docs = [Document(f"{name}:{key}", name, tuple(ctx)) for key, ctx in groups.items() if ctx]
    return ds.version, docs


# ---- exclusion ---------------------------------------------------------------------------


class Exclusion:
    """Held-out passages: find passages that contain one, and sentences shared with one."""

    def __init__(self, passages: Iterable[str], sentences: Iterable[str] = ()) -> None:
        self.passages = sorted({n for p in passages if (n := normalize(p))})
        self._by_key: dict[tuple[str, ...], list[str]] = {}
        for p in self.passages:
            words = tuple(p.split()[:_EXCLUDE_KEY_WORDS])
            self._by_key.setdefault(words, []).append(p)
        self._key_lengths = sorted({len(k) for k in self._by_key})
        self.sentences = {
            _hash(n)
            for s in sentences
            if len((n := normalize(s)).split()) >= _MIN_EXCLUDED_SENTENCE_WORDS
        }

    def __bool__(self) -> bool:
        return bool(self.passages)

    def contains_passage(self, text: str) -> bool:
        """Whether ``text`` holds (after normalization) the text of an excluded passage."""
        if not self.passages:
            return False
        norm = normalize(text)
        words = norm.split()
        padded = f" {norm} "
        for k in self._key_lengths:
            for i in range(len(words) - k + 1):
                for p in self._by_key.get(tuple(words[i : i + k]), ()):
                    if f" {p} " in padded:
                        return True
        return False

    def shares_sentence(self, sentences: Iterable[str]) -> bool:
        return any(_hash(normalize(s)) in self.sentences for s in sentences)


def _excluded_passages(paths: Sequence[str | Path], config: CorpusConfig) -> list[str]:
    passages: list[str] = []
    for path in paths:
        _, docs = read_documents(path, config)
        passages.extend(p for d in docs for p in d.passages)
    return list(dict.fromkeys(passages))


# ---- sentences and chunks ----------------------------------------------------------------


@dataclass(frozen=True)
class _Sentence:
    text: str
    start: int  # char offset in its passage
    annotation: Annotation  # the passage's
    words: int


def _sentences(passage: str, annotation: Annotation) -> list[_Sentence]:
    out = []
    for s, e in annotation.sentences:
        raw = passage[s:e]
        lead = len(raw) - len(raw.lstrip())
        text = raw.strip()
        if text:
            out.append(_Sentence(text, s + lead, annotation, len(text.split())))
    return out


def chunk_sentences(lengths: Sequence[int], max_words: int, overlap: int = 0) -> list[range]:
    """Greedy chunks of consecutive sentences of at most ``max_words`` words in all (a longer
    sentence alone); with ``overlap`` each chunk after the first starts that many sentences
    before the previous one ended (never at or before the previous start)."""
    chunks: list[range] = []
    start, n = 0, len(lengths)
    while start < n:
        end, words = start, 0
        while end < n and (end == start or words + lengths[end] <= max_words):
            words += lengths[end]
            end += 1
        chunks.append(range(start, end))
        if end == n:
            break
        start = max(end - overlap, start + 1)
    return chunks


def _shift(spans: Iterable[tuple], lo: int, hi: int, delta: int) -> list[tuple]:
    return [(a + delta, b + delta, *rest) for a, b, *rest in spans if a >= lo and b <= hi]


def chunk_annotation(sentences: Sequence[_Sentence]) -> tuple[str, Annotation]:
    """The chunk text (sentences joined by one space) and its annotation, shifted from the
    passages' annotations."""
    parts: list[str] = []
    sents, ents, ncs, words, pos = [], [], [], [], []
    offset = 0
    for s in sentences:
        lo, hi, delta = s.start, s.start + len(s.text), offset - s.start
        a = s.annotation
        sents.append((offset, offset + len(s.text)))
        ents += _shift(a.entities, lo, hi, delta)
        ncs += _shift(a.noun_chunks, lo, hi, delta)
        for (ws, we), p in zip(a.words, a.pos, strict=True):
            if ws >= lo and we <= hi:
                words.append((ws + delta, we + delta))
                pos.append(p)
        parts.append(s.text)
        offset += len(s.text) + 1
    annotation = Annotation(tuple(sents), tuple(ents), tuple(ncs), tuple(words), tuple(pos))
    return " ".join(parts), annotation


# ---- the pipeline ------------------------------------------------------------------------


@contextmanager
def _progress(enabled: bool) -> Iterator:
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns) as bar:
        yield bar


def _annotate(
    annotator: Annotator, texts: list[str], bar, description: str, batch: int = 256
) -> list[Annotation]:
    task = bar.add_task(description, total=len(texts)) if bar is not None else None
    out: list[Annotation] = []
    for i in range(0, len(texts), batch):
        out += annotator.annotate(texts[i : i + batch])
        if bar is not None:
            bar.advance(task, len(texts[i : i + batch]))
    return out


def _unique_ids(
    docs: list[Document], taken: set[str], source_number: int, counts: dict[str, int]
) -> list[Document]:
    """``docs`` with ids no earlier document has (two sources of one file name, a JSONL
    file that repeats an id): a taken id gets the source's number (``notes.txt@2:0``), then a
    counter; ``taken`` grows by the ids given."""
    out = []
    for d in docs:
        new = d.id
        if new in taken:
            name, _, rest = d.id.partition(":")
            new = f"{name}@{source_number}:{rest}"
            n = 1
            while new in taken:
                n += 1
                new = f"{name}@{source_number}.{n}:{rest}"
            counts["renamed_ids"] += 1
        taken.add(new)
        out.append(d if new == d.id else Document(new, d.source, d.passages))
    return out


def build_corpus(
    sources: Sequence[str | Path],
    out_dir: str | Path,
    config: CorpusConfig | None = None,
    exclude: Sequence[str | Path] = (),
    annotator: Annotator | None = None,
) -> CorpusReport:
    """Build the corpus of ``sources`` in ``out_dir`` (see the module docstring)."""
    config = config or CorpusConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if annotator is None:
        annotator = Annotator(config.spacy_model, cache_file=out / SPACY_CACHE)
    report = CorpusReport(config=asdict(config))
    counts = report.counts

    with _progress(config.progress) as bar:
        # 1-2. read, drop duplicate passages
        documents: list[Document] = []
        seen: set[str] = set()
        ids: set[str] = set()  # document ids, unique: chunk ids are made from them
        counts.update(documents_in=0, passages_in=0, duplicate_passages=0, renamed_ids=0)
        for number, path in enumerate(sources, start=1):
            kind, docs = read_documents(path, config)
            docs = _unique_ids(docs, ids, number, counts)
            n_passages = sum(len(d.passages) for d in docs)
            report.sources.append(
                {"path": str(path), "format": kind, "documents": len(docs), "passages": n_passages}
            )
            counts["documents_in"] += len(docs)
            counts["passages_in"] += n_passages
            for d in docs:
                kept = []
                for p in d.passages:
                    h = _hash(normalize(p))
                    if h in seen:
                        counts["duplicate_passages"] += 1
                    else:
                        seen.add(h)
                        kept.append(p)
                if kept:
                    documents.append(Document(d.id, d.source, tuple(kept)))

        # 3. exclusion by passage
        held_out = _excluded_passages(exclude, config)
        held_sentences: list[str] = []
        if held_out:
            for text, a in zip(
                held_out, _annotate(annotator, held_out, bar, "parse held-out"), strict=True
            ):
                held_sentences += [s.text for s in _sentences(text, a)]
        exclusion = Exclusion(held_out, held_sentences)
        report.exclusions = {
            "files": [str(p) for p in exclude],
            "passages": len(exclusion.passages),
            "sentences": len(exclusion.sentences),
        }
        counts["excluded_passages"] = 0
        if exclusion:
            task = bar.add_task("exclude", total=len(documents)) if bar is not None else None
            kept_docs = []
            for d in documents:
                keep = tuple(p for p in d.passages if not exclusion.contains_passage(p))
                counts["excluded_passages"] += len(d.passages) - len(keep)
                if keep:
                    kept_docs.append(Document(d.id, d.source, keep))
                if bar is not None:
                    bar.advance(task)
            documents = kept_docs

        # 4. noise
        cleaned = [
            Document(d.id, d.source, tuple(clean_noise(p, report.noise) for p in d.passages))
            for d in documents
        ]
        counts["noise_matches"] = sum(report.noise.values())

        # 5. sentences
        passages = [p for d in cleaned for p in d.passages if p]
        parsed = dict(zip(passages, _annotate(annotator, passages, bar, "sentences"), strict=True))
        counts.update(sentences=0, short_sentences=0, short_documents=0, documents_kept=0)
        doc_sentences: list[tuple[Document, list[_Sentence]]] = []
        for d in cleaned:
            sents = [s for p in d.passages if p for s in _sentences(p, parsed[p])]
            counts["sentences"] += len(sents)
            long_enough = [s for s in sents if s.words >= config.min_sentence_words]
            counts["short_sentences"] += len(sents) - len(long_enough)
            # 6. short documents, counted after the short sentences are gone
            if sum(s.words for s in long_enough) < config.min_doc_words:
                counts["short_documents"] += 1
                continue
            counts["documents_kept"] += 1
            doc_sentences.append((d, long_enough))

        # 7-9. chunks, chunk exclusion, de-duplication
        counts.update(chunks=0, excluded_chunks=0, duplicate_chunks=0)
        chunks: list[Chunk] = []
        seen_chunks: set[str] = set()
        for d, sents in doc_sentences:
            spans = chunk_sentences([s.words for s in sents], config.chunk_words, config.overlap)
            for k, span in enumerate(spans):
                counts["chunks"] += 1
                members = [sents[i] for i in span]
                if exclusion.sentences and exclusion.shares_sentence(s.text for s in members):
                    counts["excluded_chunks"] += 1
                    continue
                text, annotation = chunk_annotation(members)
                h = _hash(normalize(text))
                if h in seen_chunks:
                    counts["duplicate_chunks"] += 1
                    continue
                seen_chunks.add(h)
                chunks.append(Chunk(f"{d.id}:{k}", text, d.source, annotation))

        # 10. shards
        counts["chunks_written"] = len(chunks)
        counts["words_written"] = sum(len(c.text.split()) for c in chunks)
        report.shards = _write_shards(chunks, out, config.shard_chunks, annotator.model_id, bar)
        counts["shards"] = len(report.shards)
    write_json(out / REPORT_FILE, report.to_dict())
    log.info("corpus: %s", ", ".join(f"{k}={v}" for k, v in counts.items()))
    return report


def _write_shards(
    chunks: Sequence[Chunk], out: Path, per_shard: int, model_id: str, bar
) -> list[str]:
    """Write every shard into ``out/.incoming`` first, then move them into ``out`` and drop
    the earlier build's other shards: a build stopped while writing leaves the earlier
    corpus whole (an unfinished ``.incoming`` is cleared by the next build)."""
    incoming = out / ".incoming"
    if incoming.exists():
        shutil.rmtree(incoming)
    incoming.mkdir()
    n_shards = max(1, -(-len(chunks) // per_shard))
    task = bar.add_task("write shards", total=n_shards) if bar is not None else None
    names = []
    for i in range(n_shards):
        part = chunks[i * per_shard : (i + 1) * per_shard]
        lines = [json.dumps({"id": c.id, "text": c.text, "source": c.source}) for c in part]
        write_text(incoming / SHARD_PATTERN.format(i), "".join(line + "\n" for line in lines))
        notes = [
            json.dumps(
                {"id": c.id, "key": text_key(c.text), "model": model_id, **c.annotation.to_dict()}
            )
            for c in part
        ]
        write_text(incoming / ANNOTATION_PATTERN.format(i), "".join(line + "\n" for line in notes))
        names += [SHARD_PATTERN.format(i), ANNOTATION_PATTERN.format(i)]
        if bar is not None:
            bar.advance(task)
    # from here until .incoming is gone, out/ holds shards of two builds: read_corpus refuses
    write_text(incoming / SWAPPING, "")
    # shards of an earlier, larger build would otherwise be read as part of this one
    for stale in sorted(out.glob("corpus-*.jsonl")) + sorted(out.glob("annotations-*.jsonl")):
        if stale.name not in names:
            stale.unlink()
    for name in names:
        os.replace(incoming / name, out / name)
    (incoming / SWAPPING).unlink()
    incoming.rmdir()
    return names[::2]


def read_corpus(out_dir: str | Path) -> Iterator[tuple[str, str, Annotation]]:
    """``(id, text, annotation)`` of every chunk of a built corpus, in shard order."""
    out = Path(out_dir)
    if (out / ".incoming" / SWAPPING).exists():
        raise ValueError(
            f"{out}: a corpus build stopped while moving its shards in; build it again "
            "(`structqa corpus` with the same sources and --out)"
        )
    for shard in sorted(out.glob("corpus-*.jsonl")):
        notes = out / shard.name.replace("corpus", "annotations")
        with open(shard, encoding="utf-8") as f, open(notes, encoding="utf-8") as g:
            for line, note in zip(f, g, strict=True):
                record, ann = json.loads(line), json.loads(note)
                if record["id"] != ann["id"]:
                    raise ValueError(f"{notes}: annotations out of step with {shard.name}")
                yield record["id"], record["text"], Annotation.from_dict(ann)
