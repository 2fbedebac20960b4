"""impl.quant: the int8 arithmetic the ring cache stores."""

import numpy as np
import pytest

from impl.quant import QuantError, dequantize, fake_quant, quantize


def test_all_zero_vector_keeps_scale_one_and_stays_zero():
    q, s = quantize(np.zeros((2, 5), np.float32))
    assert np.all(s == 1) and np.all(q == 0)
    assert np.array_equal(fake_quant(np.zeros(5, np.float32)), np.zeros(5, np.float32))


def test_absmax_maps_to_qmax_and_sign_is_kept():
    x = np.array([-3.0, 1.0, 0.0, 3.0], np.float32)
    q, s = quantize(x, 8)
    assert s == np.float32(3.0) / np.float32(127) and q.tolist() == [-127, 42, 0, 127]


def test_each_vector_along_the_last_axis_has_its_own_scale():
    x = np.array([[1.0, -2.0], [100.0, 50.0]], np.float32)
    _, s = quantize(x)
    assert s.shape == (2,) and s[0] != s[1]


def test_rounding_is_half_to_even():
    x = np.array([127.0, 0.5, 1.5, 2.5], np.float32)  # scale exactly 1
    q, s = quantize(x)
    assert s == 1 and q.tolist() == [127, 0, 2, 2]


@pytest.mark.parametrize("bits", [0, 1, 9, 8.0, True])
def test_bad_bit_widths_are_rejected(bits):
    with pytest.raises(QuantError, match="bits="):
        fake_quant(np.ones(3, np.float32), bits)


def test_round_trip_of_stored_ints_is_fake_quant_at_every_width():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((50, 33)) * 10).astype(np.float32)
    for bits in range(2, 9):
        assert np.array_equal(dequantize(*quantize(x, bits)), fake_quant(x, bits))


def test_error_is_at_most_half_a_step():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((20, 64)).astype(np.float32)
    _, s = quantize(x)
    assert np.all(np.abs(fake_quant(x) - x) <= s[:, None] * 0.5 * (1 + 1e-6))
