"""pytest plugin for witnesses (skeleton: the harness issue fills it in).

Provides the ``evidence`` fixture: ``evidence.record("max_abs_delta", 0.0)``
stores any JSON-able value measured by a witness.
"""
from __future__ import annotations

import pytest


class Evidence:
    """Measured values one witness records, keyed by name."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def record(self, key: str, value: object) -> None:
        self.values[key] = value


@pytest.fixture
def evidence() -> Evidence:
    return Evidence()
