"""structqa.runtime: the bf16 setting and the default inference device."""

from __future__ import annotations

import pytest
import torch

from structqa import runtime


def test_default_device_is_the_gpu_when_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runtime.default_device() == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runtime.default_device() == torch.device("cpu")


@pytest.mark.parametrize("setting", ["off", False, "OFF"])
def test_bf16_off_is_off_everywhere(setting) -> None:
    assert not runtime.use_bf16(setting, torch.device("cpu"))
    assert not runtime.use_bf16(setting, torch.device("cuda"))


def test_bf16_auto_on_cuda_asks_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert runtime.use_bf16("auto", torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert not runtime.use_bf16("auto", torch.device("cuda"))


def test_bf16_auto_on_the_cpu_follows_native_support(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    assert runtime.use_bf16("auto", torch.device("cpu"))
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: False)
    assert not runtime.use_bf16("auto", torch.device("cpu"))


def test_a_bad_bf16_setting_is_named() -> None:
    with pytest.raises(ValueError, match="'maybe'"):
        runtime.use_bf16("maybe", torch.device("cpu"))
