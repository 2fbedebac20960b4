"""impl.conv: shapes, errors, seeding a tail from history."""

import numpy as np
import pytest

from impl.conv import ConvError, ConvTail, causal_conv


def test_one_tap_is_a_channel_scale():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    taps = np.array([[2.0, -1.0, 0.5]], np.float32)
    assert np.array_equal(causal_conv(x, taps), x * taps[0])
    assert ConvTail(taps).tail.shape == (0, 3)


def test_dilation_reaches_back_by_its_stride():
    x = np.eye(6, 1, dtype=np.float32)  # an impulse at t = 0 on one channel
    taps = np.array([[1.0], [10.0], [100.0]], np.float32)
    y = causal_conv(x, taps, dilation=2)[:, 0]
    assert y.tolist() == [1.0, 0.0, 10.0, 0.0, 100.0, 0.0]


def test_seed_then_step_equals_the_sequence():
    rng = np.random.default_rng(0)
    taps = rng.standard_normal((3, 4)).astype(np.float32)
    x = rng.standard_normal((12, 4)).astype(np.float32)
    want = causal_conv(x, taps, 2)
    t = ConvTail(taps, 2)
    t.seed(x[:7])
    got = np.stack([t.step(r) for r in x[7:]])
    assert np.array_equal(got, want[7:])


def test_seed_shorter_than_the_reach_pads_with_zeros():
    taps = np.ones((4, 1), np.float32)
    t = ConvTail(taps, 1)
    t.seed(np.array([[5.0]], np.float32))
    assert t.tail[:, 0].tolist() == [0.0, 0.0, 5.0]


@pytest.mark.parametrize(
    "taps,dilation,match",
    [(np.ones(3), 1, "taps.shape"), (np.ones((0, 2)), 1, "taps.shape"), (np.ones((2, 2)), 0, "dilation=0")],
)
def test_bad_arguments_are_rejected(taps, dilation, match):
    with pytest.raises(ConvError, match=match):
        ConvTail(taps, dilation)


def test_channel_mismatch_is_rejected():
    with pytest.raises(ConvError, match="x.shape"):
        causal_conv(np.ones((3, 2)), np.ones((2, 3)))
