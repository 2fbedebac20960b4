"""What every witness module shares: the harness plugins (evidence, oracle, kv_target) and the real SmolLM2 weights."""

import pytest

pytest_plugins = ["harness.plugin", "harness.oracle.fixtures", "harness.targets.fixture"]


@pytest.fixture(scope="session")
def smollm2():
    """impl's SmolLM2-135M (``load_model()``), loaded once per witness process.

    Missing or unusable weights skip the witness, so its card is UNVERIFIED,
    never PROVEN and never ERROR: like a missing oracle export.
    """
    from impl.errors import WeightsError
    from impl.model import load_model

    try:
        return load_model()
    except WeightsError as e:
        pytest.skip(f"weights unavailable: {e}")
