"""Keep freed memory in the process, so activations are not page-faulted in afresh every layer.

NOTE: why. A 512-token prefill allocates and frees about 20 MB of
activations per layer (qkv, the gate/up product, the gated product, ...).
glibc's malloc serves blocks above its mmap threshold (128 KiB, adapted up
to 32 MiB as blocks are freed) with a fresh mmap and unmaps them at free,
and trims the heap's top back to the OS past twice that: the next layer
faults the same memory back in and the kernel zeroes every page. Measured
on the 2-core machine (getrusage around 512-token prefills, described in
the issue 15 note): about 3,000 page faults and 0.1-0.2 s of system time
per prefill with glibc's defaults; with the settings below, ~60 faults.

:func:`configure` (called by ``impl.model.load_model``, once per process)
raises the mmap threshold to glibc's maximum (32 MiB: larger blocks, such
as a prefill's (T, vocab) logits, still come from mmap) and the trim
threshold to 1 GiB, so freed blocks stay in the heap for the next layer.
The cost: the process keeps its high-water mark of freed memory (tens of
MB for SmolLM2) instead of returning it between layers.
``KVPROOF_MALLOC=system`` leaves glibc's defaults alone; on a C library
without ``mallopt`` nothing changes. :func:`status` says which is in force.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from impl.errors import SettingError, setting

ENV = "KVPROOF_MALLOC"  # "auto" (default: keep where glibc's mallopt exists), "keep", or "system"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's upper limit for M_MMAP_THRESHOLD on 64-bit
TRIM_THRESHOLD = 1 << 30

_status: str | None = None


def configure() -> str:
    """Apply the setting once per process; returns :func:`status`. SettingError for an unknown value."""
    global _status

    choice = setting(
        ENV,
        ("auto", "keep", "system"),
        "an allocator setting",
        "auto/keep = keep freed memory in the process (glibc mallopt), system = glibc's defaults",
    )
    if _status is not None:
        return _status
    if choice == "system":
        _status = f"system malloc defaults ({ENV}=system)"
        return _status
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
            libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        )
    except (OSError, AttributeError):
        ok = False
    if ok:
        _status = "glibc malloc keeps freed memory (mmap threshold 32 MiB, trim threshold 1 GiB)"
    elif choice == "keep":
        raise SettingError(f"{ENV}=keep but this C library has no mallopt (not glibc); unset it")
    else:
        _status = "system malloc defaults (no glibc mallopt)"
    return _status


def status() -> str:
    """The allocator policy in force, e.g. for bench headers (configures it if nothing has yet)."""
    return _status if _status is not None else configure()
