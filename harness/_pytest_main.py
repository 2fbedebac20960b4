"""Entry point of a witness subprocess: ``python -m harness._pytest_main [pytest args]``.

NOTE: imports heavy libraries *before* pytest installs its assertion-rewriting
import hook; under the hook every import is inspected and Hypothesis alone
takes about three times as long to import (0.6 s instead of 0.2 s), which is
paid once per card and per liar.
"""
import sys

import hypothesis  # noqa: F401

try:
    import numpy  # noqa: F401
except ImportError:  # the harness itself does not need numpy
    pass

import pytest

if __name__ == "__main__":
    sys.exit(pytest.main(sys.argv[1:]))
