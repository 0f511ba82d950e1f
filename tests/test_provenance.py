"""structqa.provenance.git_info: the commit, and which tracked edits a result ran with."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from structqa.provenance import COMMIT_ENV, MAX_CHANGED, git_info

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git not on PATH")


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _repo(tmp_path: Path, n_files: int = 2) -> Path:
    repo = tmp_path / "repo"
    (repo / "docs" / "results").mkdir(parents=True)
    for i in range(n_files):
        (repo / f"f{i}.py").write_text(f"x = {i}\n")
    (repo / "docs" / "results" / "r.json").write_text("{}\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "start")
    return repo


def test_clean_tree_and_results_edits_are_not_dirty(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    head = _git(repo, "rev-parse", "HEAD").strip()
    assert git_info(repo) == {"commit": head, "dirty": False}
    (repo / "docs" / "results" / "r.json").write_text('{"f1": 1}\n')  # the runner writes here
    (repo / "untracked.txt").write_text("scratch\n")
    assert git_info(repo) == {"commit": head, "dirty": False}


def test_dirty_tree_names_the_changed_files(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "f1.py").write_text("x = 'edited'\n")
    _git(repo, "mv", "f0.py", "g0.py")
    info = git_info(repo)
    assert info["dirty"] is True
    assert info["n_changed"] == 2 and info["changed"] == ["f1.py", "g0.py"]


def test_odd_paths_come_back_as_written(tmp_path: Path) -> None:
    """Spaces, non-ASCII and an arrow in a name: no C-quoting, no split at " -> "."""
    repo = _repo(tmp_path)
    odd = ["sub dir/a b.py", "\u00e9t\u00e9.py", "x -> y.py"]
    for name in odd:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "odd names")
    for name in odd:
        (repo / name).write_text("2\n")
    _git(repo, "mv", "x -> y.py", "renamed -> here.py")
    info = git_info(repo)
    assert info["changed"] == sorted(["sub dir/a b.py", "\u00e9t\u00e9.py", "renamed -> here.py"])


def test_the_list_is_capped_but_the_count_is_exact(tmp_path: Path) -> None:
    n = MAX_CHANGED + 5
    repo = _repo(tmp_path, n_files=n)
    for i in range(n):
        (repo / f"f{i}.py").write_text("x = -1\n")
    info = git_info(repo)
    assert info["n_changed"] == n and len(info["changed"]) == MAX_CHANGED


def test_outside_a_repository_nothing_is_claimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(COMMIT_ENV, raising=False)
    assert git_info(tmp_path) == {"commit": None, "dirty": None}


def test_outside_a_repository_the_stated_commit_is_recorded_as_stated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(COMMIT_ENV, " abc123 \n")
    assert git_info(tmp_path) == {"commit": "abc123", "dirty": None, "source": COMMIT_ENV}
    monkeypatch.setenv(COMMIT_ENV, "")
    assert git_info(tmp_path) == {"commit": None, "dirty": None}


def test_a_checkout_wins_over_the_stated_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _repo(tmp_path)
    monkeypatch.setenv(COMMIT_ENV, "not-this")
    assert git_info(repo)["commit"] != "not-this"
