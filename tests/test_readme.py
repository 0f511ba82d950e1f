"""The README stays a user guide: short enough to read, narratives live in docs/results/."""

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
MAX_LINES = 250


def test_readme_is_at_most_250_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_LINES}): move the longest readings "
        "to their docs/results/ page and link them"
    )


def test_readme_links_point_at_files_that_exist() -> None:
    import re

    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(((?:docs|tests|configs|benchmarks)/[^)#]+)", text)
    missing = [t for t in targets if not (README.parent / t).exists()]
    assert targets and not missing, f"README.md links to missing files: {missing}"
