"""Hardware facts the rest of the package asks about: native bf16, devices."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import time
from pathlib import Path

import torch

from structqa.io import write_json
from structqa.paths import structqa_home

log = logging.getLogger(__name__)

#: oneDNN's own switch to use no instructions past the ISA it names; ``AVX2`` on an
#: AVX512-BF16 machine reproduces an ordinary AVX2 CPU's missing bf16 and VNNI kernels
MAX_ISA_ENV = "ONEDNN_MAX_CPU_ISA"
#: the int8 weight format the ONNX runtime loads, whatever the CPU (for tests and comparisons)
INT8_WEIGHTS_ENV = "STRUCTQA_INT8_WEIGHTS"
INT8_WEIGHT_TYPES = ("s8", "s7", "u8")
#: ``bf16 auto`` on a CPU with bf16 instructions takes bf16 only where its matrix products run
#: at least this much faster than fp32 here: AVX512-BF16 without AMX (e.g. a Xeon whose AMX a
#: virtual machine hides) ran them at 0.52-0.93x fp32's speed on 2 threads, a training step at
#: 0.56x
MIN_BF16_SPEEDUP = 1.25
#: a number here stands for the measurement (tests, or a user who knows the answer)
BF16_SPEEDUP_ENV = "STRUCTQA_BF16_SPEEDUP"


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def _isa_capped_below(feature: str) -> bool:
    """Whether ``ONEDNN_MAX_CPU_ISA`` caps the instructions below ``feature`` (``bf16``, ``amx`` or
    ``vnni``): AVX2, AVX, SSE41 and the like; an AVX512 value names bf16 or AMX to reach it."""
    cap = os.environ.get(MAX_ISA_ENV, "").upper()
    if not cap or cap in ("ALL", "DEFAULT"):
        return False
    if feature == "vnni":
        return not ("VNNI" in cap or "BF16" in cap or "AMX" in cap)
    if feature == "amx":
        return "AMX" not in cap
    return not ("BF16" in cap or "AMX" in cap)


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True when the CPU executes bf16 matrix products natively (AVX512-BF16 or AMX) and
    oneDNN may use them (``ONEDNN_MAX_CPU_ISA`` below them says no)."""
    flags = cpu_flags()
    if not flags:
        return platform.machine() == "arm64"  # Apple silicon and Graviton3+ have bf16 dot
    if _isa_capped_below("bf16"):
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


@functools.cache
def onednn_has_bf16() -> bool:
    """Whether torch's oneDNN has bf16 kernels on this CPU (under ``ONEDNN_MAX_CPU_ISA``):
    its fused linear layers refuse bf16 where it has none; torch's stock operators then
    emulate bf16, correct but 30x to 100x slower than fp32."""
    if not torch.backends.mkldnn.is_available():
        return False
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; an Arm board's ``Hardware`` line)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _time_products(tokens: int = 2048, rounds: int = 5) -> float:
    """fp32 time / bf16-autocast time of the default encoder's feed-forward product
    (``tokens`` x 384 by 384 x 1,536) at the current torch thread count, the two alternated
    round by round so that drift cancels; the median round."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, 384, generator=gen)
    w = torch.randn(384, 1536, generator=gen)
    ratios = []
    for i in range(rounds + 1):
        spent = []
        for bf16 in (False, True):
            t0 = time.perf_counter()
            for _ in range(3):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    x @ w
            spent.append(time.perf_counter() - t0)
        if i:  # the first round warms both kernels up
            ratios.append(spent[0] / spent[1])
    return sorted(ratios)[len(ratios) // 2]


def bf16_speedup() -> float:
    """How much faster bf16 autocast computes the encoder's matrix products than fp32 on this
    CPU, at the current torch thread count (above 1: faster): measured once (about half a
    second) and kept in ``$STRUCTQA_HOME/cpu-bf16.json`` per CPU model, flags, oneDNN ISA cap,
    torch version and thread count (delete the file to measure again, e.g. after measuring on
    a busy machine). ``STRUCTQA_BF16_SPEEDUP`` gives the number instead."""
    forced = os.environ.get(BF16_SPEEDUP_ENV)
    if forced:
        try:
            return float(forced)
        except ValueError:
            raise ValueError(f"{BF16_SPEEDUP_ENV}={forced!r}: give a number, e.g. 2.5") from None
    return _bf16_speedup_at(torch.get_num_threads())


@functools.cache
def _bf16_speedup_at(threads: int) -> float:
    flags = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:12]
    cap = os.environ.get(MAX_ISA_ENV, "")
    key = (
        f"{cpu_model()} | flags {flags}{f' | {MAX_ISA_ENV}={cap}' if cap else ''} | "
        f"torch {torch.__version__} | {threads} threads"
    )
    path = structqa_home() / "cpu-bf16.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):  # a file not written here: measured again, rewritten
        known = {}
    if isinstance(known.get(key), (int, float)):
        return float(known[key])
    speedup = round(_time_products(), 3)
    log.info(
        "bf16 matrix products on this CPU: %.2fx the speed of fp32 (%d threads); bf16 auto "
        "means %s here",
        speedup,
        threads,
        "bf16" if speedup >= MIN_BF16_SPEEDUP else "fp32",
    )
    try:
        write_json(path, {**known, key: speedup})
    except OSError as err:  # a read-only home: measured again next time
        log.debug("could not keep the bf16 measurement in %s: %s", path, err)
    return speedup


def cpu_bf16_pays() -> bool:
    """True where bf16 autocast is worth it on this CPU: bf16 instructions (see
    :func:`cpu_has_native_bf16`) that run the encoder's products at least
    ``MIN_BF16_SPEEDUP`` times as fast as fp32 (:func:`bf16_speedup`). What ``bf16 auto``,
    the runtime choice and ``predict``'s int8 export follow."""
    return cpu_has_native_bf16() and bf16_speedup() >= MIN_BF16_SPEEDUP


#: CPU flags of integer products summed in 32 bits without saturating (what onnxruntime's
#: kernels look for in CPUID, whatever ISA cap torch is under)
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def cpu_has_vnni() -> bool:
    """True where the CPU multiplies uint8 by int8 into int32 sums without saturating
    (AVX512-VNNI, AVX-VNNI, AMX); not on x86 CPUs with AVX2 only."""
    if _isa_capped_below("vnni"):
        return False
    return bool(cpu_flags() & VNNI_FLAGS)


def int8_weight_type() -> str:
    """The int8 weight format the ONNX runtime loads on this CPU: ``s8`` (int8 as exported),
    or ``s7`` (7-bit weights, onnxruntime's ``reduce_range``) on x86 CPUs without VNNI.

    Why: there, onnxruntime's uint8 x int8 kernel adds pairs of products in 16 bits
    (``vpmaddubsw``), which saturate at 32,767: 255 x 127 x 2 does not fit, and a token
    with large activations gets wrong sums (measured: 26 of 288 values off by up to 56).
    7-bit weights fit (255 x 64 x 2 = 32,640) and keep that fast kernel; ``u8`` (uint8
    weights, zero point 128: the same numbers through the uint8 x uint8 kernel, which sums
    in 32 bits) is exact too but ran at 0.66x the speed. ``STRUCTQA_INT8_WEIGHTS``
    (s8|s7|u8) overrides the choice."""
    forced = os.environ.get(INT8_WEIGHTS_ENV, "").lower()
    if forced in INT8_WEIGHT_TYPES:
        return forced
    if forced:
        raise ValueError(
            f"{INT8_WEIGHTS_ENV}={forced!r}: use one of {', '.join(INT8_WEIGHT_TYPES)} "
            "(or leave it unset)"
        )
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
    return "s7" if x86 and not cpu_has_vnni() else "s8"


def cpu_kind() -> str:
    """One line for benchmark and result files: the CPU's bf16, VNNI and AVX class, as the
    code sees it (after ``ONEDNN_MAX_CPU_ISA``)."""
    flags = cpu_flags()
    isa = next((f for f in ("avx512f", "avx2", "avx", "asimd") if f in flags), "unknown ISA")
    capped = (
        f", capped by {MAX_ISA_ENV}={os.environ[MAX_ISA_ENV]}"
        if _isa_capped_below("bf16") and os.environ.get(MAX_ISA_ENV)
        else ""
    )
    bf16 = "native bf16" if cpu_has_native_bf16() else "no native bf16"
    if cpu_has_native_bf16() and "amx_bf16" in flags and not _isa_capped_below("amx"):
        bf16 += " (AMX)"
    if cpu_has_native_bf16() and not cpu_bf16_pays():
        bf16 += f" but {bf16_speedup():.2f}x fp32's speed"
    vnni = "VNNI" if cpu_has_vnni() else "no VNNI"
    return f"{isa}, {bf16}, {vnni}{capped}"


def _parse_bf16(setting: str | bool) -> str:
    # YAML reads a bare on/off as a boolean
    setting = {"true": "on", "false": "off"}.get(str(setting).lower(), str(setting).lower())
    if setting not in ("auto", "on", "off"):
        raise ValueError(f"bf16 must be auto, on or off, not {setting!r}")
    return setting


def _refuse_emulated_bf16() -> None:
    if not onednn_has_bf16():
        raise ValueError(
            "bf16 on: this CPU has no bf16 kernels (oneDNN reports none: an AVX2 CPU, or "
            f"{MAX_ISA_ENV} caps it), so bf16 would be emulated, 30x to 100x slower than "
            "fp32; use bf16 auto (fp32 here) or off"
        )


def check_bf16(setting: str | bool) -> str:
    """The ``bf16`` setting as auto|on|off, checked for the CPU without resolving ``auto``
    (which may measure): a bad value, or ``on`` where oneDNN has no bf16 kernels, is a
    ValueError. For validating a config."""
    setting = _parse_bf16(setting)
    if setting == "on":
        _refuse_emulated_bf16()
    return setting


def use_bf16(setting: str | bool, device: torch.device) -> bool:
    """Resolve the ``bf16`` setting (auto|on|off) for a device."""
    setting = _parse_bf16(setting)
    if setting == "off":
        return False
    if setting == "on":
        if device.type == "cpu":
            _refuse_emulated_bf16()
        return True
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_bf16_pays()


def default_device() -> torch.device:
    """Where inference runs unless told: the first GPU when there is one, else the CPU (the
    training loops get the same from Accelerate)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def autocast(device: torch.device, enabled: bool):
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled)
