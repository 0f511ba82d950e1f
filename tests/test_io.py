"""Atomic writes (structqa.io): whole files or nothing, with a new file's usual permissions."""

from __future__ import annotations

import json
import os
import stat

import pytest

from structqa import io


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_written_files_get_the_permissions_of_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        io.write_text(tmp_path / "a" / "t.txt", "x\n")
        io.write_json(tmp_path / "j.json", {"a": 1})
        io.write_bytes(tmp_path / "b.bin", b"\x00\x01")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a" / "t.txt") == 0o640  # not mkstemp's 0o600
    assert _mode(tmp_path / "j.json") == 0o640
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert json.loads((tmp_path / "j.json").read_text()) == {"a": 1}


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    io.write_json(target, {"v": 1})

    def broken_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(io.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        io.write_json(target, {"v": 2})
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # the temporary is removed


def test_a_directory_swap_is_on_disk_before_the_old_one_goes(tmp_path, monkeypatch):
    """Every file of the new directory, the directory and the swap are flushed before
    ``.old`` is removed: a power cut cannot leave a checkpoint of files cut short and nothing
    to go back to."""
    target, tmp = tmp_path / "last", tmp_path / "last.tmp"
    (target).mkdir()
    (target / "model.safetensors").write_bytes(b"old")
    (tmp / "sub").mkdir(parents=True)
    (tmp / "model.safetensors").write_bytes(b"new")
    (tmp / "sub" / "state.json").write_text("{}")
    synced, real_fsync = [], os.fsync
    events = []

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        events.append("sync")
        real_fsync(fd)

    real_rmtree = io.shutil.rmtree

    def rmtree(path, *a, **k):
        events.append(f"rm {os.path.basename(path)}")
        real_rmtree(path, *a, **k)

    monkeypatch.setattr(io.os, "fsync", fsync)
    monkeypatch.setattr(io.shutil, "rmtree", rmtree)
    io.replace_dir(tmp, target)
    names = {os.path.relpath(p, tmp_path) for p in synced}
    assert {"last.tmp/model.safetensors", "last.tmp/sub/state.json", "last.tmp"} <= names
    assert "." in names  # the parent, after the renames
    assert events[-1] == "rm last.old" and events[-2] == "sync"
    assert (target / "model.safetensors").read_bytes() == b"new"
    assert not (tmp_path / "last.old").exists()


def test_a_directory_written_aside_is_swapped_in_whole_or_not_at_all(tmp_path) -> None:
    import subprocess
    import sys

    from structqa.io import dir_lock, writing_dir

    target = tmp_path / "out"
    with writing_dir(target) as tmp:
        (tmp / "a.txt").write_text("one")
    assert (target / "a.txt").read_text() == "one"
    with pytest.raises(RuntimeError), writing_dir(target) as tmp:
        (tmp / "a.txt").write_text("half")
        raise RuntimeError("stopped")
    assert (target / "a.txt").read_text() == "one"  # the earlier one stands
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "out"]
    # a writer killed mid-way (no Python cleanup) leaves its scratch folder: the next removes it
    (tmp_path / ".out.abc123.tmp").mkdir()
    (tmp_path / ".out.abc123.tmp" / "part.onnx").write_text("half")
    with writing_dir(target) as tmp:
        (tmp / "a.txt").write_text("two")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "out"]
    # while one writer holds the lock another process cannot take it; the holder may again
    take = [
        sys.executable,
        "-c",
        "import fcntl, sys; fcntl.flock(open(sys.argv[1], 'a'), fcntl.LOCK_EX | fcntl.LOCK_NB)",
        str(tmp_path / ".out.lock"),
    ]
    with dir_lock(target), dir_lock(target):
        busy = subprocess.run(take, capture_output=True, text=True)
    assert busy.returncode == 1 and "BlockingIOError" in busy.stderr
    assert subprocess.run(take).returncode == 0
