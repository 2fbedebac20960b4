"""Entry point of a witness subprocess: ``python -m harness.execute.pytest_main [pytest args]``.

First thing, the watchdog (:func:`harness.execute.procs.watch_runner`): when the
runner that started this process dies, however it died, this process and
everything it started are killed, so no witness outlives its runner; and
when pytest is done, whatever the witnesses started and left running is
killed too.

The fork server (:mod:`harness.execute.forkserver`) runs the same two steps in each
child it forks: :func:`preload` once in the server, :func:`main` per job.

NOTE: imports heavy libraries *before* pytest installs its assertion-rewriting
import hook; under the hook every import is inspected and Hypothesis alone
takes about three times as long to import (0.6 s instead of 0.2 s), which is
paid once per card and per liar.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from harness.execute.procs import kill_descendants, watch_runner


def preload() -> None:
    """Import the heavy third-party libraries every witness process uses, before pytest's import hook exists."""
    import hypothesis  # noqa: F401

    try:
        import numpy  # noqa: F401
    except ImportError:  # the harness itself does not need numpy
        pass


def main(args: Sequence[str]) -> int:
    """Run pytest with ``args``, then kill whatever the witnesses started and left running; pytest's exit code."""
    import pytest

    code = pytest.main(list(args))
    kill_descendants(os.getpid())  # nothing a witness started outlives it
    return int(code)


if __name__ == "__main__":
    watch_runner()
    preload()
    sys.exit(main(sys.argv[1:]))
