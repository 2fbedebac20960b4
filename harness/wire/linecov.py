"""Which lines of chosen files a witness process runs: the witness side of mutate's reachability.

``run_obligations.py mutate`` needs, per witness, the lines of the code a
card claims that the witness's test body runs (:class:`harness.wire.messages.LinesRun`):
a mutant on a line no witness runs is *not reached* and never run, and a
mutant runs against the witnesses that run its line only
(:mod:`harness.mutation.reach`).

How, cheaply: Python 3.11 has no ``sys.monitoring`` (3.12), and a trace
function written in Python is called for every Python frame of the process
(Hypothesis, numpy's wrappers, pytest), not only the traced files': measured
over every card, such a tracer made ``mutate``'s honest run 26% slower than
the gate (71.8 s against 56.9 s, -j 2). :class:`LineTracer` uses coverage.py's
C tracer instead, restricted to the traced files (``include``): a frame of
any other file costs one lookup in C, and a line of a traced file is recorded
in C. Each *bucket* is a coverage context; :meth:`LineTracer.take` closes it
(switching to the next) and reads its lines, which is how
:mod:`harness.plugin` tells a node's test body from set-up, tear-down and
collection. Threads a witness starts are traced too (coverage's
``threading.settrace``). No data file is read or written; the user's
coverage configuration (.coveragerc, pyproject's [tool.coverage]) is not
read.

Keys are paths relative to the project root, values line numbers: a C file
traced later (gcov, a counter build) reports into the same shape.

Part of the witness side: imports nothing of the harness.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import coverage

# coverage's own warnings are not the witness's output: a bucket with no traced line is an answer, not a problem
_QUIET = ["no-data-collected", "module-not-imported", "module-not-measured", "couldnt-parse", "no-ctracer"]


class LineTracer:
    """Records the lines of ``files`` (relative to ``root``) that run between :meth:`start` and :meth:`stop`."""

    def __init__(self, root: Path, files: Iterable[str]) -> None:
        self.shown: dict[str, str] = {}  # a measured file's name (as coverage reports it) -> the path relative to root
        for rel in files:
            path = Path(root) / rel
            for name in {str(path), os.path.abspath(path), str(path.resolve())}:
                self.shown[name] = rel
        self.cov: coverage.Coverage | None = None
        if self.shown:
            self.cov = coverage.Coverage(
                data_file=None, config_file=False, include=sorted(self.shown), branch=False, auto_data=False
            )
            self.cov.set_option("run:disable_warnings", _QUIET)
        self.bucket = 0  # the number of the open bucket: its coverage context is "b<n>"
        self.running = False

    def start(self) -> None:
        if self.cov is None or self.running:
            return
        self.running = True
        self.cov.start()
        self.cov.switch_context(f"b{self.bucket}")

    def stop(self) -> None:
        if not self.running or self.cov is None:
            return
        self.running = False
        self.cov.stop()

    def take(self) -> dict[str, list[int]]:
        """The lines run since the last call (path relative to root -> ascending lines); opens a new bucket."""
        if self.cov is None:
            return {}
        closed = f"b{self.bucket}"
        self.bucket += 1
        if self.running:
            self.cov.switch_context(f"b{self.bucket}")
        data = self.cov.get_data()
        data.set_query_context(closed)
        out: dict[str, set[int]] = {}
        for name in data.measured_files():
            rel = self.shown.get(name) or self.shown.get(os.path.abspath(name))
            lines = data.lines(name) if rel is not None else None
            if lines:
                out.setdefault(rel, set()).update(lines)
        return {path: sorted(lines) for path, lines in sorted(out.items())}


__all__ = ["LineTracer"]
