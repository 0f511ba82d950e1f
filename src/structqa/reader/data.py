"""The general reader's training questions, from the public SQuAD files of the data directory.

- the SQuAD 1.1 training pool (``splits/squad1-train``), less every passage of both held-out
  splits: SQuAD 2.0's articles are SQuAD 1.1's, so 1,033 pool questions sit on passages of
  ``splits/squad2-heldout``;
- the SQuAD 2.0 training split (``splits/squad2-train``), less the same passages (643 of its
  questions sit on passages of ``splits/squad1-heldout``) and less the questions the pool already
  has (its answerable questions are mostly SQuAD 1.1's): what is left is mainly SQuAD 2.0's
  human-written unanswerable questions;
- one unanswerable rewrite (entity swap, antonym, negation) of each pool question where a rule
  applies (:mod:`structqa.training.negatives`);
- with ``--slice articles``, **less whole articles held out as the validation slice**
  (``slice.v2.json``; by default the slice is 5 % of the passages): every question
  on the passages of a quarter of the SQuAD 2.0 training split's articles (2 of its 9, chosen
  by :data:`SLICE_SEED`), from the pool and from SQuAD 2.0, none of them trained on, rewrites
  made of none of them. The reader is chosen and calibrated there. A slice of passages drawn
  from every article (the former recipe) shares its articles with training, and a reader
  answers there more surely than on articles it never read: the threshold fitted on it
  abstained too rarely on the held-out split's new articles. Held out whole, the threshold
  transfers, but the reader trains on 28 % fewer human-written unanswerable questions and
  ranks answerability worse (docs/results/reader: seed 0's first run).

The pool alone (``squad1-pool.json``, the slice's pool questions included: the baseline has no
slice to hold them for) is what the plain baseline trains on: the reader's SQuAD 1.1
questions and the slice's, without the additions.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from structqa.data.overlap import drop_overlap, passage_key
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.data.squad_json import write_squad_json
from structqa.paths import resolve_data_file
from structqa.text.annotate import Annotation
from structqa.training.negatives import REWRITE_MARK, make_negatives

log = logging.getLogger(__name__)

POOL = "splits/squad1-train.mrqa.jsonl.gz"
SQUAD2_TRAIN = "splits/squad2-train.v2.0.json"
HELDOUT_SQUAD1 = "splits/squad1-heldout.mrqa.jsonl.gz"
HELDOUT_SQUAD2 = "splits/squad2-heldout.v2.0.json"
HELDOUT = (HELDOUT_SQUAD1, HELDOUT_SQUAD2)

TRAIN_FILE = "train.v2.json"
POOL_FILE = "squad1-pool.json"
SLICE_FILE = "slice.v2.json"

#: the default slice, and the one where no article can be held out (a single SQuAD 2.0 article)
PASSAGE_SLICE: tuple[str, ...] = ("data.validation=0.05", "data.validation_seed=1234")

#: the seed that orders SQuAD 2.0's training articles for the slice (the same at every
#: ``--seed``: each start is chosen and calibrated on the same questions)
SLICE_SEED = 1234


@dataclass
class ReaderData:
    """What went into the training files, by source (question counts)."""

    pool: int = 0
    pool_dropped_heldout: int = 0
    squad2_answerable: int = 0
    squad2_unanswerable: int = 0
    squad2_dropped_heldout: int = 0
    squad2_repeated: int = 0
    rewrites: int = 0
    rewrites_by_rule: dict[str, int] = field(default_factory=dict)
    slice_articles: list[str] = field(default_factory=list)
    slice_questions: int = 0
    slice_unanswerable: int = 0
    pool_in_slice: int = 0

    @property
    def total(self) -> int:
        """The training file's questions (the pool less its questions in the slice)."""
        return (
            self.pool
            - self.pool_in_slice
            + self.squad2_answerable
            + self.squad2_unanswerable
            + self.rewrites
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total}

    def summary(self) -> str:
        return (
            f"{self.total} questions: {self.pool - self.pool_in_slice} of the SQuAD 1.1 "
            + (f"pool's {self.pool}" if self.pool_in_slice else "pool")
            + f" ({self.pool_dropped_heldout} dropped on held-out passages"
            + (f", {self.pool_in_slice} in the slice" if self.pool_in_slice else "")
            + "), "
            f"{self.squad2_answerable} answerable and {self.squad2_unanswerable} unanswerable "
            f"of the SQuAD 2.0 training split ({self.squad2_dropped_heldout} on held-out "
            f"passages and {self.squad2_repeated} repeating a question already there dropped), "
            f"{self.rewrites} unanswerable rewrites"
            + (
                f"; held out as the validation slice: {self.slice_questions} questions "
                f"({self.slice_unanswerable} unanswerable) of the articles "
                f"{', '.join(self.slice_articles)} ({self.pool_in_slice} of them the pool's)"
                if self.slice_articles
                else ""
            )
        )


def data_summary(record: dict[str, Any] | None) -> str:
    """The data stage's summary, told again from its counts (a record written by an earlier
    version's wording says the same in this one's); a record from before articles were held
    out, as recorded."""
    if not record:
        return "not built"
    counts = record.get("counts") or {}
    if "slice_articles" not in counts:
        return str(record.get("summary", "not built"))
    names = {f.name for f in fields(ReaderData)}
    try:
        return ReaderData(**{k: v for k, v in counts.items() if k in names}).summary()
    except (TypeError, ValueError):
        return str(record.get("summary", "not built"))


def squad2_unanswerable_share(data_dir: Path) -> float:
    """The share of unanswerable questions among SQuAD 2.0's own (its training split, the
    held-out splits' passages left out, as :func:`assemble` reads it)."""
    heldout = [resolve_data_file(name, data_dir) for name in HELDOUT]
    squad2, _ = drop_overlap(
        read_extractive(resolve_data_file(SQUAD2_TRAIN, data_dir)).examples, heldout
    )
    if not squad2:
        path = resolve_data_file(SQUAD2_TRAIN, data_dir)
        raise ValueError(
            f"{path}: no question outside the held-out splits' passages, so no unanswerable "
            "share to calibrate the reader for: restore the file from the data folder, or give "
            "the share (--decode.unanswerable_share=P)"
        )
    return sum(ex.is_impossible for ex in squad2) / len(squad2)


def _question_key(ex: Example) -> tuple[str, str]:
    return passage_key(ex.context), passage_key(ex.question)


def slice_articles(squad2: list[Example], seed: int = SLICE_SEED) -> list[str]:
    """The titles of the SQuAD 2.0 training articles held out as the validation slice: a
    quarter of them (at least one where there are two or more, none of a single article),
    first by ``sha1(f"{seed}:{title}")``."""
    titles = sorted({ex.title for ex in squad2})
    count = max(1, len(titles) // 4) if len(titles) >= 2 else 0
    ordered = sorted(titles, key=lambda t: hashlib.sha1(f"{seed}:{t}".encode()).hexdigest())
    return sorted(ordered[:count])


def assemble(
    data_dir: Path,
    out_dir: Path,
    annotate: Callable[[list[str]], list[Annotation]],
    seed: int = 0,
    hold_out_articles: bool = False,
) -> ReaderData:
    """Write ``out_dir/train.v2.json`` (what the reader trains on), ``out_dir/slice.v2.json``
    (with ``hold_out_articles``, the held-out articles' questions; not written where no
    article can be held out) and
    ``out_dir/squad1-pool.json`` (the pool alone) as SQuAD v2.0 JSON; return the counts."""
    heldout = [resolve_data_file(name, data_dir) for name in HELDOUT]
    counts = ReaderData()
    pool, dropped = drop_overlap(
        read_extractive(resolve_data_file(POOL, data_dir)).examples, heldout
    )
    counts.pool, counts.pool_dropped_heldout = len(pool), dropped.dropped
    squad2, dropped2 = drop_overlap(
        read_extractive(resolve_data_file(SQUAD2_TRAIN, data_dir)).examples, heldout
    )
    counts.squad2_dropped_heldout = dropped2.dropped
    counts.slice_articles = slice_articles(squad2) if hold_out_articles else []
    held_articles = set(counts.slice_articles)
    in_slice = {passage_key(ex.context) for ex in squad2 if ex.title in held_articles}
    pool_train: list[Example] = []
    sliced: list[Example] = []
    for ex in pool:  # (each passage keyed once)
        (sliced if passage_key(ex.context) in in_slice else pool_train).append(ex)
    counts.pool_in_slice = len(sliced)
    seen = {_question_key(ex) for ex in pool}
    ids = {ex.id for ex in pool}
    added: list[Example] = []
    for ex in squad2:
        key = _question_key(ex)  # (passage, question)
        if key in seen or ex.id in ids:
            counts.squad2_repeated += 1
            continue
        seen.add(key)
        if key[0] in in_slice:
            sliced.append(ex)
            continue
        added.append(ex)
        if ex.is_impossible:
            counts.squad2_unanswerable += 1
        else:
            counts.squad2_answerable += 1
    counts.slice_questions = len(sliced)
    counts.slice_unanswerable = sum(ex.is_impossible for ex in sliced)
    made, report = make_negatives(pool_train, annotate, seed=seed)
    # a question SQuAD asks twice of one passage gets the same rewrite twice: keep one, and
    # none that repeats a question already there
    rewrites = []
    for ex in made:
        if _question_key(ex) not in seen:
            seen.add(_question_key(ex))
            rewrites.append(ex)
    counts.rewrites = len(rewrites)
    # by rule among those kept (the ids end "-neg-RULE"), so the rules sum to the rewrites
    counts.rewrites_by_rule = dict(Counter(ex.id.rsplit(REWRITE_MARK, 1)[-1] for ex in rewrites))
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [(POOL_FILE, pool), (TRAIN_FILE, [*pool_train, *added, *rewrites])]
    if sliced:
        files.append((SLICE_FILE, sliced))
    for name, examples in files:
        write_squad_json(out_dir / name, examples)
    log.info("reader data: %s", counts.summary())
    return counts


def validation_settings(data_out: Path, held_out: int) -> tuple[str, ...]:
    """The settings that choose and calibrate the reader: the slice of held-out articles the
    data stage wrote (``held_out`` questions), else :data:`PASSAGE_SLICE`."""
    if held_out:
        return (f"data.validation={(data_out / SLICE_FILE).resolve()}",)
    return PASSAGE_SLICE
