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


def test_bf16_on_without_bf16_kernels_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forcing bf16 on a CPU whose oneDNN has no bf16 kernels (AVX2) names the cause and the
    settings that work, instead of a oneDNN primitive error deep in a forward pass."""
    monkeypatch.setattr(runtime, "onednn_has_bf16", lambda: False)
    with pytest.raises(ValueError, match="no bf16 kernels.*use bf16 auto"):
        runtime.use_bf16("on", torch.device("cpu"))
    assert not runtime.use_bf16("auto", torch.device("cpu")) or runtime.cpu_has_native_bf16()
    monkeypatch.setattr(runtime, "onednn_has_bf16", lambda: True)
    assert runtime.use_bf16("on", torch.device("cpu"))


def test_onednns_isa_cap_stands_for_an_avx2_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_bf16"}))
    runtime.cpu_has_native_bf16.cache_clear()
    try:
        monkeypatch.delenv(runtime.MAX_ISA_ENV, raising=False)
        assert runtime.cpu_has_native_bf16()
        monkeypatch.setenv(runtime.MAX_ISA_ENV, "AVX2")
        runtime.cpu_has_native_bf16.cache_clear()
        assert not runtime.cpu_has_native_bf16()
        assert "no native bf16" in runtime.cpu_kind() and "AVX2" in runtime.cpu_kind()
        monkeypatch.setenv(runtime.MAX_ISA_ENV, "AVX512_CORE_BF16")
        runtime.cpu_has_native_bf16.cache_clear()
        assert runtime.cpu_has_native_bf16()
    finally:
        runtime.cpu_has_native_bf16.cache_clear()
