"""Entry point of a witness subprocess: ``python -m harness._pytest_main [pytest args]``.

First thing, the watchdog (:func:`harness.procs.watch_runner`): when the
runner that started this process dies, however it died, this process and
everything it started are killed, so no witness outlives its runner; and
when pytest is done, whatever the witnesses started and left running is
killed too.

NOTE: imports heavy libraries *before* pytest installs its assertion-rewriting
import hook; under the hook every import is inspected and Hypothesis alone
takes about three times as long to import (0.6 s instead of 0.2 s), which is
paid once per card and per liar.
"""
import os
import sys

from harness.procs import kill_descendants, watch_runner

if __name__ == "__main__":
    watch_runner()

import hypothesis  # noqa: E402, F401

try:
    import numpy  # noqa: F401
except ImportError:  # the harness itself does not need numpy
    pass

import pytest  # noqa: E402

if __name__ == "__main__":
    code = pytest.main(sys.argv[1:])
    kill_descendants(os.getpid())  # nothing a witness started outlives it
    sys.exit(code)
