"""Which lines of chosen files a witness process runs: the witness side of mutate's reachability.

``run_obligations.py mutate`` needs, per witness, the lines of the code a
card claims that the witness's test body runs (:class:`harness.protocol.LinesRun`):
a mutant on a line no witness runs is *not reached* and never run, and a
mutant runs against the witnesses that run its line only
(:mod:`harness.mutation.reach`).

How, cheaply: Python 3.11 has no ``sys.monitoring`` (3.12) and coverage.py
is not a dependency, so :class:`LineTracer` installs a global trace function
(``sys.settrace``, and ``threading.settrace`` for threads a witness starts)
that returns a line tracer only for frames whose code comes from one of the
traced files and ``None`` for every other frame. Only the traced files pay
for line events; every other Python call pays one dictionary lookup of its
file name (measured on RING-T3, PKV-MACHINE, KV-T4 and GGUF-DEQUANT: within
the noise of a run). Lines go into the open *bucket*; :meth:`LineTracer.take`
closes it and opens the next, which is how :mod:`harness.plugin` tells a
node's test body from set-up, tear-down and collection.

Keys are paths relative to the project root, values line numbers: a C file
traced later (gcov, a counter build) reports into the same shape.

Part of the witness side: imports nothing of the harness.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import Any


class LineTracer:
    """Records the lines of ``files`` (relative to ``root``) that run between :meth:`start` and :meth:`stop`."""

    def __init__(self, root: Path, files: Iterable[str]) -> None:
        self.shown: dict[str, str] = {}  # a code object's co_filename -> the path relative to root
        for rel in files:
            path = Path(root) / rel
            for name in {str(path), os.path.abspath(path), str(path.resolve())}:
                self.shown[name] = rel
        self.bucket: dict[str, set[int]] = {}  # co_filename -> lines run since the last take()
        self.running = False

    def _call(self, frame: FrameType, event: str, arg: Any):
        # NOTE: called for every Python frame while tracing; the frames of other files get no line tracer. A
        # traced frame's lines go to the bucket open when it was entered (or resumed: a generator's resumption
        # is a new call): buckets change between pytest's phases, when no frame of the traced code runs.
        name = frame.f_code.co_filename
        if name not in self.shown:
            return None
        lines = self.bucket.get(name)
        if lines is None:
            lines = self.bucket[name] = set()
        add = lines.add

        def line(frame: FrameType, event: str, arg: Any):
            if event == "line":
                add(frame.f_lineno)
            return line

        return line

    def start(self) -> None:
        if not self.shown or self.running:
            return
        self.running = True
        threading.settrace(self._call)
        sys.settrace(self._call)

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]  # None clears the hook for new threads

    def take(self) -> dict[str, list[int]]:
        """The lines run since the last call (path relative to root -> ascending lines); opens a new bucket."""
        bucket, self.bucket = self.bucket, {}
        out: dict[str, set[int]] = {}
        for name, lines in bucket.items():
            out.setdefault(self.shown[name], set()).update(lines)
        return {path: sorted(lines) for path, lines in sorted(out.items())}


__all__ = ["LineTracer"]
