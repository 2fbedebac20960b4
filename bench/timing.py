"""Timing helpers shared by the benchmarks (figures only; nothing here asserts)."""
from __future__ import annotations

import time


def best_of(fn, repeats: int) -> float:
    """Fastest of ``repeats`` timings of fn() in seconds (the least disturbed run)."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)
