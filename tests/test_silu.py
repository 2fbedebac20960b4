"""The kernel's silu (SwiGLU gate): close to the exact function, and an element's bits its own."""
from __future__ import annotations

import numpy as np
import pytest

from impl import kernels
from impl.model.llama import silu, swiglu


@pytest.fixture
def kernel():
    k = kernels.load()
    if k is None:
        pytest.skip(f"kernel unavailable: {kernels.status()}")
    return k


def exact_silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x) in float64, written by sign so neither branch overflows."""
    x = x.astype(np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, x / (1 + e), x * e / (1 + e))


def test_close_to_the_exact_function_over_the_float32_range(kernel):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(20000) * 4, rng.uniform(-120, 120, 5000),
                        [0.0, -0.0, 1e-30, -1e-30, 87.0, 88.0, 89.0, -87.0, -88.0, -104.0, 3e38, -3e38]]).astype(np.float32)
    got = kernel.silu(x).astype(np.float64)
    want = exact_silu(x)
    # a few float32 ulps of the result (exp about 1 ulp, then a divide and a multiply), and tiny absolute
    # error where silu underflows (x < -87: exp(-|x|) is flushed to 0 and silu to -0)
    tol = 4 * np.finfo(np.float32).eps * np.abs(want) + 1e-35
    bad = np.abs(got - want) > tol
    assert not bad.any(), list(zip(x[bad][:5], got[bad][:5], want[bad][:5]))
    assert np.signbit(kernel.silu(np.array([-0.0], np.float32)))[0]


def test_an_elements_bits_do_not_depend_on_shape_offset_or_threads(kernel):
    rng = np.random.default_rng(2)
    gu = (rng.standard_normal((37, 2 * 101)) * 5).astype(np.float32)  # 101: a tail past whole vectors
    full = kernel.silu(gu[:, :101], gu[:, 101:])
    for threads in (1, 2, 3):
        assert np.array_equal(kernel.silu(gu[:, :101], gu[:, 101:], threads=threads), full)
    for i in (0, 5, 36):
        assert np.array_equal(kernel.silu(gu[i, :101], gu[i, 101:]), full[i])
        for c in (0, 3, 100):  # one element alone: a tail of one lane
            assert kernel.silu(gu[i, c : c + 1], gu[i, 101 + c : 102 + c])[0] == full[i, c]
    big = np.tile(gu, (64, 1))  # enough work for the threaded loop
    assert np.array_equal(kernel.silu(big[:, :101], big[:, 101:])[-37:], full)


def test_swiglu_and_silu_agree_with_the_kernel_loaded(kernel):
    gu = (np.random.default_rng(3).standard_normal((9, 2 * 40)) * 3).astype(np.float32)
    assert np.array_equal(swiglu(gu, 40), silu(gu[:, :40]) * gu[:, 40:])
    assert np.array_equal(silu(gu[:, :40]), kernel.silu(np.ascontiguousarray(gu[:, :40])))
