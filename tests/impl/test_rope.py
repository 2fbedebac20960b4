import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.rope import RopeTable, apply_rope, rotate_half


def reference_rope(x: np.ndarray, pos: int, theta: float) -> np.ndarray:
    """Independent float64 half-split rotation: pair (x[i], x[i + D/2]) turns by pos * theta^(-2i/D)."""
    d = x.shape[-1]
    i = np.arange(d // 2)
    ang = pos * theta ** (-2.0 * i / d)
    a, b = x[..., : d // 2].astype(np.float64), x[..., d // 2 :].astype(np.float64)
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], axis=-1)


def test_position_zero_is_the_identity_bit_for_bit():
    t = RopeTable(100000.0, 64, 16)
    x = np.random.default_rng(0).standard_normal((1, 3, 64)).astype(np.float32)
    cos, sin = t.rows(np.array([0]))
    assert np.array_equal(apply_rope(x, cos, sin), x)


def test_rotate_half_twice_negates():
    x = np.random.default_rng(1).standard_normal((2, 3, 8)).astype(np.float32)
    assert np.array_equal(rotate_half(rotate_half(x)), -x)


@settings(max_examples=40, deadline=None)
@given(pos=st.integers(0, 8191), theta=st.sampled_from([10000.0, 100000.0, 500000.0]), seed=st.integers(0, 2**16))
def test_rotation_matches_float64_reference_and_keeps_norm(pos, theta, seed):
    t = RopeTable(theta, 64, 8192)
    x = np.random.default_rng(seed).standard_normal((1, 2, 64)).astype(np.float32)
    cos, sin = t.rows(np.array([pos]))
    y = apply_rope(x, cos, sin)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, reference_rope(x, pos, theta), atol=2e-6, rtol=0)
    # a rotation keeps the length of every (i, i + D/2) pair
    pair = lambda z: z[..., :32].astype(np.float64) ** 2 + z[..., 32:].astype(np.float64) ** 2  # noqa: E731
    np.testing.assert_allclose(pair(y), pair(x), rtol=1e-5, atol=1e-6)


def test_composed_rotation_is_close_but_not_the_same_bits_as_one_rotation():
    # Why eviction re-derives K from k_raw: rotating an already-rotated key
    # by the difference of positions drifts (measured ~1e-6).
    t = RopeTable(100000.0, 64, 4096)
    x = np.random.default_rng(2).standard_normal((64, 3, 64)).astype(np.float32)
    p_old, p_new = np.arange(1000, 1064), np.arange(900, 964)
    once = apply_rope(x, *t.rows(p_new))
    back = apply_rope(apply_rope(x, *t.rows(p_old)), *RopeTable(100000.0, 64, 4096).rows(np.zeros(64, int)))
    assert np.array_equal(back, apply_rope(x, *t.rows(p_old)))  # pos 0 adds nothing
    c_old, s_old = t.rows(p_old)
    # undo p_old - p_new by rotating with the negative angle difference in float64 tables
    ang = (p_new - p_old)[:, None] * (100000.0 ** (-np.arange(0, 64, 2) / 64.0))[None, :]
    ang = np.concatenate([ang, ang], axis=1)
    composed = apply_rope(apply_rope(x, c_old, s_old), np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32))
    d = np.abs(composed - once).max()
    assert 0 < d < 1e-4


def test_out_of_range_position_raises_with_the_allowed_range():
    t = RopeTable(10000.0, 8, 16)
    with pytest.raises(ValueError, match=r"0\.\.15"):
        t.rows(np.array([16]))
