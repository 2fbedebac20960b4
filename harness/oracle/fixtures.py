"""pytest plugin: the ``oracle`` fixture witnesses use to read the reference.

Register it with ``pytest_plugins = [..., "harness.oracle.fixtures"]``.
A missing, damaged or stale export never fails and never passes a witness:
the fixture skips with the reason and the command that fixes it, and the
harness turns the skip into UNVERIFIED.
"""

from __future__ import annotations

import os

import pytest

from harness.errors import OracleError
from harness.oracle.store import Oracle, open_oracle


def oracle_or_skip(root: str | os.PathLike | None = None) -> Oracle:
    """``open_oracle(root)`` with every user-fixable problem turned into a skip."""
    from impl.errors import WeightsError

    try:
        return open_oracle(root)
    except OracleError as e:
        pytest.skip(f"{type(e).__name__}: {e}")
    except WeightsError as e:
        pytest.skip(f"oracle unusable, the weights are unavailable: {e}")


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    """The checked transformers reference (see harness.oracle.store)."""
    return oracle_or_skip()
