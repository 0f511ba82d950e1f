"""The project speaks in dates, commits and commands: no process words such as a numbered
work session or an issue number in the README, the docs, the sources or the configs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = {".md", ".py", ".yaml", ".yml", ".json", ".txt", ".html", ".css", ".js", ".toml"}
EVERYWHERE = [
    re.compile(r"\bsessions? \d", re.IGNORECASE),  # "session 11", "sessions 7-9"
    re.compile(r"\bsession-\d", re.IGNORECASE),  # "session-8 runs"
    re.compile(r"\bissues? #?\d", re.IGNORECASE),  # "issue 3", "issue #24"
    re.compile(r"\(#\d+\)"),  # "(#24)"
]
# a bare "#24" outside code (in code it is e.g. a colour, #999)
PROSE = [re.compile(r"(?:^|\s)#\d{1,4}(?=[\s,.;:)]|$)", re.MULTILINE)]


def files() -> list[Path]:
    found = [ROOT / "README.md"]
    for folder in ("docs", "src", "configs", "scripts", "benchmarks"):
        found += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in TEXT]
    return found


def test_no_session_or_issue_numbers() -> None:
    hits = []
    for path in files():
        text = path.read_text(encoding="utf-8", errors="replace")
        patterns = EVERYWHERE + (
            PROSE if path.suffix not in (".py", ".css", ".js", ".html") else []
        )
        for pattern in patterns:
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                hits.append(f"{path.relative_to(ROOT)}:{line}: {m.group().strip()!r}")
    assert hits == []


def test_the_check_catches_what_it_is_for() -> None:
    for bad in ("since session 11", "Sessions 7-9 ran", "the session-8 runs", "issue 3", "(#24)"):
        assert any(p.search(bad) for p in EVERYWHERE), bad
    assert PROSE[0].search("fixed in #24.")
    for fine in ('"sessions": 1', "color: #999;", "ID#2", "2026-11-23 (3107a66)"):
        assert not any(p.search(fine) for p in EVERYWHERE), fine
    assert not PROSE[0].search("ID#2") and not PROSE[0].search("commit 3107a66")
