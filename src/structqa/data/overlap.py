"""Keep held-out passages out of training data drawn from another file.

Public QA files often share passages: SQuAD 2.0's dev articles are SQuAD 1.1's, so a pool cut
from the v1.1 dev set holds passages (and the very questions) of a SQuAD 2.0 test split. A
reader trained on such a pool and scored on that split has seen its answers. ``data.exclude``
names the files whose passages must never be trained on; every training question whose
context, case-folded with punctuation and spacing ignored, is one of theirs is dropped, and
how many were dropped is logged.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from structqa.data.readers import read_extractive
from structqa.data.records import Example

log = logging.getLogger(__name__)


def passage_key(text: str) -> str:
    """``text`` NFKC-normalized and case-folded, every run of non-word characters one space."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(re.findall(r"[^\W_]+", text))


@dataclass(frozen=True)
class OverlapReport:
    """What ``drop_overlap`` kept and dropped, per excluded file."""

    kept: int
    dropped: int
    dropped_by_file: dict[str, int]

    def summary(self) -> str:
        files = ", ".join(f"{n} in {path}" for path, n in self.dropped_by_file.items())
        return f"kept {self.kept}, dropped {self.dropped} questions on excluded passages ({files})"


def passages(path: str | Path) -> set[str]:
    """The passage keys of an extractive QA file (SQuAD JSON or MRQA jsonl)."""
    # only the passages count: a repeated question id is no reason to refuse the file
    return {passage_key(ex.context) for ex in read_extractive(path, dedupe_ids=True).examples}


def drop_overlap(
    examples: Iterable[Example], excluded: Sequence[str | Path]
) -> tuple[list[Example], OverlapReport]:
    """``examples`` less those whose context is a passage of one of the ``excluded`` files."""
    keys = {str(path): passages(path) for path in excluded}
    kept: list[Example] = []
    by_file = dict.fromkeys(keys, 0)
    for ex in examples:
        key = passage_key(ex.context)
        hit = next((path for path, found in keys.items() if key in found), None)
        if hit is None:
            kept.append(ex)
        else:
            by_file[hit] += 1
    report = OverlapReport(len(kept), sum(by_file.values()), by_file)
    return kept, report
