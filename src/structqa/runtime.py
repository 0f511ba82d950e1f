"""Hardware facts the rest of the package asks about: native bf16, devices."""

from __future__ import annotations

import functools
import platform
from pathlib import Path

import torch


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True when the CPU executes bf16 matrix products natively (AVX512-BF16 or AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine() == "arm64"  # Apple silicon and Graviton3+ have bf16 dot
    return "avx512_bf16" in flags or "amx_bf16" in flags


def use_bf16(setting: str | bool, device: torch.device) -> bool:
    """Resolve the ``bf16`` setting (auto|on|off) for a device."""
    # YAML reads a bare on/off as a boolean
    setting = {"true": "on", "false": "off"}.get(str(setting).lower(), str(setting).lower())
    if setting not in ("auto", "on", "off"):
        raise ValueError(f"bf16 must be auto, on or off, not {setting!r}")
    if setting == "off":
        return False
    if setting == "on":
        return True
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_has_native_bf16()


def default_device() -> torch.device:
    """Where inference runs unless told: the first GPU when there is one, else the CPU (the
    training loops get the same from Accelerate)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def autocast(device: torch.device, enabled: bool):
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled)
