"""Shared fixtures for tests of impl and harness that no card names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from impl.model.config import ModelConfig
from impl.model.llama import Llama

# Test modules whose helpers other test modules import by name (tests/ has no packages: pytest puts only a
# test's own folder on sys.path, so a test run alone could not find a helper in another folder).
_HERE = Path(__file__).resolve().parent
for _folder in ("e2e", "harness/ledger", "harness/report"):
    if str(_HERE / _folder) not in sys.path:
        sys.path.insert(0, str(_HERE / _folder))

TINY = ModelConfig(
    n_layers=2, hidden=32, n_heads=4, n_kv_heads=2, head_dim=8, ffn=48, vocab=97, rope_theta=10000.0, max_pos=512
)


@pytest.fixture(scope="session")
def tiny() -> Llama:
    """A 2-layer random-weight llama built with the same code as SmolLM2."""
    return Llama.random(TINY, seed=1)


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M weights (loaded once per test process)."""
    from impl.model import load_model

    return load_model()
