"""structqa.runtime: the bf16 setting and the default inference device."""

from __future__ import annotations

import json
import math

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
    monkeypatch.setattr(runtime, "bf16_speedup", lambda: 2.8)
    assert runtime.use_bf16("auto", torch.device("cpu"))
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: False)
    assert not runtime.use_bf16("auto", torch.device("cpu"))


def test_bf16_auto_takes_fp32_where_bf16_instructions_are_not_faster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AVX512-BF16 without AMX can run bf16 products slower than fp32 (a Xeon whose AMX a
    virtual machine hides: 0.74-0.93x, training steps 0.57x): auto means fp32 there, on
    the measurement, not the flag; and the CPU's description says so."""
    # (the CPU described, whatever this machine is: an AMX one once failed this test)
    monkeypatch.setattr(
        runtime, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16", "avx512_vnni"})
    )
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(runtime, "bf16_speedup", lambda: 0.74)
    assert not runtime.use_bf16("auto", torch.device("cpu"))
    assert not runtime.cpu_bf16_pays()
    assert "native bf16 but 0.74x fp32's speed" in runtime.cpu_kind()
    monkeypatch.setattr(runtime, "onednn_has_bf16", lambda: True)
    assert runtime.use_bf16("on", torch.device("cpu"))  # asked for, it is given


def test_the_cpu_description_names_amx_unless_onednn_is_capped_below_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Figures measured with AMX (bf16 products 2.44x fp32 on a lent Xeon) and with
    AVX512-BF16 alone (0.74x) differ: the one-line description tells them apart."""
    monkeypatch.setattr(
        runtime,
        "cpu_flags",
        lambda: frozenset({"avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni"}),
    )
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(runtime, "bf16_speedup", lambda: 2.44)
    monkeypatch.delenv(runtime.MAX_ISA_ENV, raising=False)
    assert runtime.cpu_kind() == "avx512f, native bf16 (AMX), VNNI"
    monkeypatch.setenv(runtime.MAX_ISA_ENV, "AVX512_CORE_BF16")
    assert runtime.cpu_kind() == "avx512f, native bf16, VNNI"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    monkeypatch.delenv(runtime.MAX_ISA_ENV)
    assert "AMX" not in runtime.cpu_kind()


def test_the_bf16_measurement_is_made_once_and_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """Measured on first use, kept in $STRUCTQA_HOME per CPU, torch version and thread count,
    read back by the next process; another thread count is measured apart; a file that is
    not a map is measured over; STRUCTQA_BF16_SPEEDUP stands for it."""
    monkeypatch.setenv("STRUCTQA_HOME", str(tmp_path))
    monkeypatch.delenv(runtime.BF16_SPEEDUP_ENV, raising=False)
    calls: list[int] = []

    def fake(tokens: int = 2048, rounds: int = 5) -> float:
        calls.append(torch.get_num_threads())
        return 1.7

    monkeypatch.setattr(runtime, "_time_products", fake)
    threads = torch.get_num_threads()
    runtime._bf16_speedup_at.cache_clear()
    try:
        assert runtime.bf16_speedup() == 1.7
        runtime._bf16_speedup_at.cache_clear()  # a new process
        assert runtime.bf16_speedup() == 1.7
        assert calls == [threads]
        kept = json.loads((tmp_path / "cpu-bf16.json").read_text())
        assert list(kept.values()) == [1.7] and torch.__version__ in next(iter(kept))
        torch.set_num_threads(1 if threads > 1 else 2)
        assert runtime.bf16_speedup() == 1.7 and len(calls) == 2  # measured at that count
        assert len(json.loads((tmp_path / "cpu-bf16.json").read_text())) == 2
        torch.set_num_threads(threads)
        (tmp_path / "cpu-bf16.json").write_text("[1]")
        runtime._bf16_speedup_at.cache_clear()
        assert runtime.bf16_speedup() == 1.7 and len(calls) == 3
        monkeypatch.setenv(runtime.BF16_SPEEDUP_ENV, "3")
        assert runtime.bf16_speedup() == 3.0
        monkeypatch.setenv(runtime.BF16_SPEEDUP_ENV, "fast")
        with pytest.raises(ValueError, match="STRUCTQA_BF16_SPEEDUP='fast': give a number"):
            runtime.bf16_speedup()
    finally:
        torch.set_num_threads(threads)
        runtime._bf16_speedup_at.cache_clear()


def test_validating_a_config_does_not_measure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checking train.bf16 in a config (a dry run, each grid worker) resolves nothing."""
    from structqa.config import load_config, validate

    def boom(*args: object, **kwargs: object) -> float:
        raise AssertionError("measured")

    monkeypatch.setattr(runtime, "_time_products", boom)
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    runtime._bf16_speedup_at.cache_clear()
    try:
        validate(load_config(None, ["train.bf16=auto"]))
        with pytest.raises(ValueError, match="bf16 must be auto, on or off"):
            runtime.check_bf16("maybe")
    finally:
        runtime._bf16_speedup_at.cache_clear()


def test_the_bf16_measurement_times_real_products() -> None:
    """The measurement itself runs the products both ways and returns a ratio (its value is
    the machine's: not asserted)."""
    ratio = runtime._time_products(256, rounds=1)
    assert math.isfinite(ratio) and ratio > 0


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
