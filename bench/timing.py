"""Timing helpers shared by the benchmarks (figures only; nothing here asserts)."""

from __future__ import annotations

import time

# The clock every figure is read with: wall time by default; bench/decode.py --single-thread
# switches it to this process's CPU time, which other processes on a shared machine barely move.
clock = time.perf_counter


def best_of(fn, repeats: int) -> float:
    """Fastest of ``repeats`` timings of fn() in seconds (the least disturbed run), by :data:`clock`."""
    times = []
    for _ in range(repeats):
        t = clock()
        fn()
        times.append(clock() - t)
    return min(times)
