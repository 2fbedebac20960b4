"""IMPL-ARGS: quantize's bit widths, RingConfig's windows and a session's window normalisation.

Each witness tries every value on a grid around the documented range (and
values of the wrong type) and compares what impl accepts, refuses and
returns with the rule as written in its docstring, evaluated here.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from impl.cache import KVGeometry
from impl.errors import CacheError
from impl.model.session import Session
from impl.quant import QuantError, fake_quant, quantize
from impl.ring import RingConfig
from witnesses.synthetic import tiny_llama, token_ids
from witnesses.test_kv_contracts import refuses

WRONG_TYPES = (8.0, 4.5, True, False, None, "8", np.float32(4.0), [8])


def is_int(x) -> bool:
    """The impl's word for an int: Python or numpy integers, not bools."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


# ---- quantize ------------------------------------------------------------------------------------


def test_quantize_takes_bits_2_to_8_and_refuses_every_other_width(evidence):
    """quantize and fake_quant accept exactly the ints 2..8 (int8 storage): for those, q is int8 within
    [-2**(bits-1), 2**(bits-1) - 1] and each vector's largest |x| maps to +-(2**(bits-1) - 1); every other
    int (-3..20, numpy ints too), a bool, a float or anything else raises QuantError (a ValueError)."""

    @given(
        x=arrays(
            np.float32,
            st.tuples(st.integers(1, 4), st.integers(1, 12)),
            # no subnormals: where absmax / qmax underflows the scale is raised to the least positive
            # float32 (RING-T3 checks that); this witness is about which widths are taken
            elements=st.floats(-100, 100, width=32, allow_nan=False, allow_subnormal=False),
        )
    )
    def prop(x):
        for bits in [*range(-3, 21), np.int64(8), np.int8(2), np.int32(9), *WRONG_TYPES]:
            ok = is_int(bits) and 2 <= bits <= 8
            for fn in (quantize, fake_quant):
                try:
                    out = fn(x, bits)
                except QuantError as e:
                    assert isinstance(e, ValueError)
                    assert not ok, f"{fn.__name__}(x, bits={bits!r}) refused a supported width"
                    evidence.count("refused")
                    continue
                assert ok, f"{fn.__name__}(x, bits={bits!r}) was accepted; only ints 2..8 are supported"
                evidence.count("accepted")
                if fn is quantize:
                    q, scale = out
                    qmax = 2 ** (int(bits) - 1) - 1
                    assert q.dtype == np.int8 and q.shape == x.shape and scale.shape == x.shape[:-1]
                    assert int(q.min()) >= -qmax - 1 and int(q.max()) <= qmax, (
                        f"bits={bits}: q spans {q.min()}..{q.max()}, allowed {-qmax - 1}..{qmax}"
                    )
                    peak = np.argmax(np.abs(x), axis=-1)  # each vector's largest |x|
                    at_peak = np.take_along_axis(q, peak[:, None], axis=-1)[:, 0].astype(int)
                    nonzero = np.abs(x).max(axis=-1) > 0
                    assert np.all(np.abs(at_peak[nonzero]) == qmax), (
                        f"bits={bits}: the largest |x| quantised to {at_peak[nonzero]}, want +-{qmax}"
                    )
                else:  # round to nearest within the range: |fake_quant(x) - x| <= scale / 2, scale = absmax / qmax
                    qmax = 2 ** (int(bits) - 1) - 1
                    absmax = np.abs(x.astype(np.float64)).max(axis=-1, keepdims=True)
                    step = np.where(absmax > 0, absmax / qmax, 1.0)
                    err = np.abs(out.astype(np.float64) - x)
                    assert out.dtype == np.float32 and out.shape == x.shape
                    assert np.all(err <= step * (0.5 + 1e-4)), (
                        f"bits={bits}: fake_quant moved x by {float((err / step).max())} steps, at most 1/2 allowed"
                    )

    prop()

    # x is cast to float32 first: a float64 x (or a list) quantises exactly as x.astype(np.float32). Here
    # 2.5 + 1e-9 is 2.5 in float32, which rounds half to even (2) at scale 1; in float64 it would round to 3.
    x64 = np.array([[127.0, 2.5 + 1e-9, -1.5 - 1e-9]], np.float64)
    x32 = x64.astype(np.float32)
    for bits in (8, np.int64(8)):
        q32, s32 = quantize(x32, bits)
        assert q32.tolist() == [[127, 2, -2]] and s32.tolist() == [1.0], (q32, s32)
        for given_x in (x64, x64.tolist()):
            q, scale = quantize(given_x, bits)
            assert (
                q.dtype == np.int8
                and np.array_equal(q, q32)
                and scale.dtype == np.float32
                and np.array_equal(scale, s32)
            ), f"quantize(float64 x) = {q}, {scale}; want {q32}, {s32}"
            fq = fake_quant(given_x, bits)
            assert fq.dtype == np.float32 and fq.tolist() == [[127.0, 2.0, -2.0]], f"fake_quant(float64 x) = {fq}"
            evidence.count("accepted")


# ---- RingConfig ----------------------------------------------------------------------------------


def test_ring_config_refuses_bad_windows_and_reaches(evidence):
    """RingConfig(window=W) accepts None or an int >= 1 (numpy ints too), a local layer's cap then being
    min(W, max_seq_len) and a global layer's max_seq_len; W <= 0, a bool, a float, a str or a list raises
    CacheError. max_seq_len must be an int >= 1 and every global layer inside 0..n_layers-1 (CacheError
    otherwise); global_layers come back sorted without repeats."""

    @given(
        n_layers=st.integers(1, 4),
        max_seq_len=st.integers(1, 12),
        global_layers=st.lists(st.integers(-2, 5), max_size=4),
    )
    def prop(n_layers, max_seq_len, global_layers):
        g = KVGeometry(n_layers, 1, 2)
        gl_ok = all(0 <= i < n_layers for i in global_layers)
        for w in [None, *range(-3, max_seq_len + 4), np.int64(3), *WRONG_TYPES]:
            ok = gl_ok and (w is None or (is_int(w) and w >= 1))
            try:
                cfg = RingConfig(g, max_seq_len=max_seq_len, window=w, global_layers=tuple(global_layers))
            except CacheError:
                assert not ok, f"RingConfig(window={w!r}, global_layers={global_layers}) was refused"
                evidence.count("refused")
                continue
            assert ok, (
                f"RingConfig(window={w!r}, max_seq_len={max_seq_len}, global_layers={global_layers}) was accepted"
            )
            evidence.count("accepted")
            assert cfg.global_layers == tuple(sorted(set(global_layers)))
            for layer in range(n_layers):
                glob = w is None or layer in global_layers
                want = max_seq_len if glob else min(int(w), max_seq_len)
                assert cfg.cap(layer) == want, f"window={w!r} layer {layer}: cap {cfg.cap(layer)}, want {want}"
        for m in (0, -1, 2.0, True, None):
            assert refuses(lambda m=m: RingConfig(g, max_seq_len=m, window=None)), (
                f"RingConfig(max_seq_len={m!r}) accepted"
            )
            evidence.count("refused")

    prop()


# ---- the session's window ------------------------------------------------------------------------


def test_session_window_is_normalised_as_documented(evidence):
    """Session(model, window=...) takes None (no window), one W for every layer, or a list or tuple with one
    entry per layer (None or W each), and keeps it as a list of per-layer Python ints or None; W <= 0, a
    bool, a float, a str, a dict, an array or a list of the wrong length raises CacheError. One W and the
    list [W] * n_layers give the same logits bit for bit."""

    @given(
        n_layers=st.integers(1, 3),
        w=st.integers(1, 6),
        per_layer=st.lists(st.one_of(st.none(), st.integers(-1, 6)), min_size=1, max_size=4),
    )
    def prop(n_layers, w, per_layer):
        model = tiny_llama(n_layers=n_layers, n_kv_heads=1, group=2, head_dim=4)
        good = [
            (None, [None] * n_layers),
            (w, [w] * n_layers),
            (np.int64(w), [w] * n_layers),
            ([w] * n_layers, [w] * n_layers),
            (tuple([None] * n_layers), [None] * n_layers),
        ]
        if len(per_layer) == n_layers and all(x is None or x >= 1 for x in per_layer):
            good.append((list(per_layer), list(per_layer)))
        bad = [
            0,
            -w,
            True,
            float(w),
            str(w),
            {0: w},
            np.array([w] * n_layers),
            [w] * (n_layers + 1),
            [w] * (n_layers - 1),
            [0] * n_layers,
            [True] * n_layers,
            [float(w)] * n_layers,
        ]
        if len(per_layer) != n_layers or any(x is not None and x < 1 for x in per_layer):
            bad.append(list(per_layer))
        for window, want in good:
            s = Session(model, window=window)
            assert s.window == want and all(x is None or type(x) is int for x in s.window), (
                f"Session(window={window!r}).window = {s.window!r}, want {want!r}"
            )
            evidence.count("accepted")
        for window in bad:
            assert refuses(lambda window=window: Session(model, window=window)), (
                f"Session(window={window!r}) on {n_layers} layers was accepted"
            )
            evidence.count("refused")
        ids = token_ids(w + 3, w)
        one, per = Session(model, window=w), Session(model, window=[w] * n_layers)
        assert np.array_equal(one.prefill(ids), per.prefill(ids)), "window=W and [W] * n_layers differ"
        # cache options go with a design name only; generate takes n >= 0 and, on an empty session, a prompt
        assert refuses(lambda: Session(model, window=w, cache=one.cache, hint=4)), (
            "Session(cache=<a ready store>, hint=4) accepted options it cannot apply"
        )
        fresh = Session(model, window=w)
        for call in (lambda: per.generate(ids[:1], -1), lambda: per.generate([], -2), lambda: fresh.generate([], 1)):
            n_before = len(per)
            try:
                call()
            except ValueError:
                evidence.count("refused")
            else:
                raise AssertionError("generate(n < 0), or generate([], n) on an empty session, was accepted")
            assert len(per) == n_before and len(fresh) == 0, "a refused generate fed tokens"
        evidence.count("refused")

    prop()
