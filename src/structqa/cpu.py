"""Process-wide CPU settings for inference and training: the C allocator, and the OpenMP
thread teams torch runs its operators on (no torch import: the CLI calls it before anything
loads)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import platform
import re
from pathlib import Path

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Freed memory kept in the process before glibc hands it back to the system.
TRIM_THRESHOLD_BYTES = 64 << 20
#: Blocks at least this large come from their own mmap (glibc's upper limit on 64-bit).
MMAP_THRESHOLD_BYTES = 32 << 20


@functools.cache
def tune_allocator() -> bool:
    """Keep memory freed by large tensors in the process instead of handing it back to the
    system after each one (glibc only; ``STRUCTQA_MALLOC_TUNING=off`` leaves the allocator
    alone). Returns whether the allocator was tuned.

    Why: CPU inference frees and allocates tensors of a few MB at every layer (attention
    scores, feed-forward activations). By default glibc serves them with fresh mmaps or
    trims the heap after each free, so every layer pays page faults on new memory: on the
    2-core test machine one 384-token window took 56 ms instead of 24 ms (and attention over
    a 256-token window 2.35 ms instead of 0.45), the time spent in the kernel. A fixed mmap
    threshold of 32 MB and a 64 MB trim threshold make the freed blocks reusable. The cost
    is up to 64 MB of freed memory kept in each of the process's heaps. jemalloc or
    tcmalloc (LD_PRELOAD) do the same for a whole process, but are not on every machine;
    this is one call at start."""
    if os.environ.get("STRUCTQA_MALLOC_TUNING", "on").lower() in ("0", "off", "false"):
        return False
    name = ctypes.util.find_library("c")
    if platform.system() != "Linux" or not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    log.debug("allocator tuned: %s", ok)
    return ok


#: omp_pause_soft (OpenMP 5.0): free the calling thread's team; it is made again when needed.
_OMP_PAUSE_SOFT = 1


def release_openmp_threads() -> bool:
    """Free the calling thread's OpenMP thread team, e.g. after loading a model on the main
    thread when the model will run on another thread. Returns whether a team was freed.

    Why: each thread that runs torch operators gets a team of OpenMP threads, kept as long as
    that thread lives. Once teams hold more threads than the machine has cores, GNU OpenMP
    stops spinning and puts its threads to sleep after every parallel region, and every
    small operator pays a wake-up: on the 2-core test machine the server's inference thread
    ran the model at half the speed of the main thread, only because the main thread had
    loaded the model (element-wise operators and softmax 2x slower, 50 % of the time in the
    kernel). Calls ``omp_pause_resource_all`` on the OpenMP runtime that is loaded (GNU,
    LLVM or Intel); a no-op where there is none."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux
        return False
    libs = sorted(set(re.findall(r"(/\S*lib(?:gomp|iomp5|omp)[-.\w]*\.so[.\d]*)", maps)))
    for path in libs:
        try:
            pause = ctypes.CDLL(path).omp_pause_resource_all
        except (OSError, AttributeError):
            continue
        freed = pause(_OMP_PAUSE_SOFT) == 0
        log.debug("OpenMP team of this thread freed (%s): %s", path, freed)
        return freed
    return False
