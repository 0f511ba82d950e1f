"""Process-wide CPU settings: the allocator and the OpenMP thread teams (structqa.cpu)."""

from __future__ import annotations

import platform
import threading

import pytest
import torch

from structqa.cpu import release_openmp_threads, tune_allocator

linux = pytest.mark.skipif(platform.system() != "Linux", reason="glibc and /proc are Linux's")


@linux
def test_tune_allocator_sets_glibc_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tune_allocator.__wrapped__() is True
    monkeypatch.setenv("STRUCTQA_MALLOC_TUNING", "off")
    assert tune_allocator.__wrapped__() is False


@linux
def test_release_openmp_threads_frees_this_threads_team_and_torch_still_runs() -> None:
    x = torch.randn(512, 512)
    expected = x @ x
    results: dict[str, object] = {}

    def on_a_thread() -> None:
        torch.set_num_threads(2)
        (x @ x).sum()  # makes this thread's team (where the runtime uses more than one thread)
        results["freed"] = release_openmp_threads()
        results["after"] = x @ x  # a team is made again when needed

    t = threading.Thread(target=on_a_thread)
    t.start()
    t.join()
    assert results["freed"] is True
    torch.testing.assert_close(results["after"], expected)
