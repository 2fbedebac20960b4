"""The kernel's row-wise steps (silu, rmsnorm, rope): close to the exact functions (rope: numpy's bits),
and a row's bits its own, whatever the shape, offset or threads."""

from __future__ import annotations

import numpy as np
import pytest

from impl import kernels
from impl.model.llama import rmsnorm, silu, swiglu
from impl.rope import RopeTable, apply_rope


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
    x = np.concatenate(
        [
            rng.standard_normal(20000) * 4,
            rng.uniform(-120, 120, 5000),
            [0.0, -0.0, 1e-30, -1e-30, 87.0, 88.0, 89.0, -87.0, -88.0, -104.0, 3e38, -3e38],
        ]
    ).astype(np.float32)
    got = kernel.silu(x).astype(np.float64)
    want = exact_silu(x)
    # a few float32 ulps of the result (exp about 1 ulp, then a divide and a multiply), and tiny absolute
    # error where silu underflows (x < -87: exp(-|x|) is flushed to 0 and silu to -0)
    tol = 4 * np.finfo(np.float32).eps * np.abs(want) + 1e-35
    bad = np.abs(got - want) > tol
    assert not bad.any(), list(zip(x[bad][:5], got[bad][:5], want[bad][:5], strict=True))
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


def test_rmsnorm_is_close_to_float64_and_row_invariant(kernel):
    rng = np.random.default_rng(4)
    for h in (576, 37, 8, 1):
        x = (rng.standard_normal((70, h)) * rng.uniform(0.01, 50, (70, 1))).astype(np.float32)
        w = (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)
        got = kernel.rmsnorm(x, w, 1e-5)
        x64 = x.astype(np.float64)
        want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-5) * w
        assert np.abs(got - want).max() <= 8 * np.finfo(np.float32).eps * np.abs(want).max()
        for threads in (1, 2, 3):
            assert np.array_equal(kernel.rmsnorm(x, w, 1e-5, threads=threads), got)
        for i in (0, 9, 69):
            assert np.array_equal(kernel.rmsnorm(x[i : i + 1], w, 1e-5)[0], got[i])
        big = np.tile(x, (80, 1))  # past the threading threshold
        assert np.array_equal(kernel.rmsnorm(big, w, 1e-5)[-70:], got)
    assert np.array_equal(rmsnorm(x, w, 1e-5), kernel.rmsnorm(x, w, 1e-5))  # the model's rmsnorm is this one


@pytest.mark.parametrize("d", [64, 16, 6])
def test_rope_kernel_has_numpys_bits(kernel, d):
    """kv_rope computes x1*c - x2*s and x2*c + x1*s, which are apply_rope's float32 operations."""
    rng = np.random.default_rng(d)
    table = RopeTable(10000.0, d, 4096)
    qkv = (rng.standard_normal((300, 9 * d)) * 3).astype(np.float32)  # heads as views into a wider row
    x = qkv[:, 2 * d : 7 * d].reshape(300, 5, d)
    pos = rng.integers(0, 4096, 300)
    want = apply_rope(x, *table.rows(pos))
    for threads in (1, 2):
        got = kernel.rope(x, table.cos, table.sin, pos, threads=threads)
        assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(table.apply(x, pos), want)
    with pytest.raises(ValueError, match="RoPE position out of range"):
        table.apply(x[:1], np.array([4096]))
