"""RING-T5: a rolling conv tail's step form equals the whole-sequence causal convolution."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from impl.conv import ConvTail, causal_conv

convs = st.fixed_dictionaries(
    {
        "taps": st.integers(1, 5),
        "dilation": st.integers(1, 4),
        "channels": st.integers(1, 8),
        "t": st.integers(1, 40),
        "chunks": st.lists(st.integers(1, 9), min_size=1, max_size=10),
        "seed": st.integers(0, 9999),
    }
)


def _case(p):
    rng = np.random.default_rng(p["seed"])
    taps = rng.standard_normal((p["taps"], p["channels"])).astype(np.float32)
    x = rng.standard_normal((p["t"], p["channels"])).astype(np.float32)
    return taps, x


def test_step_form_equals_the_sequence_convolution_bit_for_bit(evidence):
    """One position at a time, and in random chunks, against causal_conv over the whole sequence."""

    @given(p=convs)
    def prop(p):
        taps, x = _case(p)
        want = causal_conv(x, taps, p["dilation"])
        stepper, chunker = ConvTail(taps, p["dilation"]), ConvTail(taps, p["dilation"])
        steps = np.stack([stepper.step(row) for row in x])
        parts, i = [], 0
        for c in p["chunks"] * (p["t"] // max(1, sum(p["chunks"])) + 1):
            if i >= p["t"]:
                break
            parts.append(chunker.feed(x[i : i + c]))
            i += c
        chunks = np.concatenate(parts)
        delta = max(
            float(np.max(np.abs(steps.astype(np.float64) - want))),
            float(np.max(np.abs(chunks.astype(np.float64) - want))),
        )
        evidence.observe("max_abs_delta", delta)
        evidence.count("examples")
        assert np.array_equal(steps, want) and np.array_equal(chunks, want), f"max|delta|={delta}"

    prop()


def test_sequence_convolution_matches_the_definition(evidence):
    """causal_conv against y[t] = sum_j taps[j] * x[t - j*dilation] computed in float64."""

    @given(p=convs)
    def prop(p):
        taps, x = _case(p)
        got = causal_conv(x, taps, p["dilation"])
        want = np.zeros(x.shape, np.float64)
        for t in range(p["t"]):
            for j in range(p["taps"]):
                if t - j * p["dilation"] >= 0:
                    want[t] += taps[j].astype(np.float64) * x[t - j * p["dilation"]]
        scale = np.sum(np.abs(taps), axis=0).astype(np.float64) * np.max(np.abs(x)) + 1e-30
        rel = float(np.max(np.abs(got - want) / scale))
        evidence.observe("max_rel_delta", rel)
        evidence.count("examples")
        assert rel <= 1e-6, f"causal_conv departs from the definition by {rel:.2e} (relative)"

    prop()


def test_the_tail_holds_exactly_the_last_reach_inputs(evidence):
    rng = np.random.default_rng(0)
    checked = 0
    for taps_n, dil in [(1, 1), (2, 1), (3, 2), (4, 3), (5, 1)]:
        taps = rng.standard_normal((taps_n, 3)).astype(np.float32)
        tail = ConvTail(taps, dil)
        reach = (taps_n - 1) * dil
        x = rng.standard_normal((17, 3)).astype(np.float32)
        for t in range(17):
            tail.step(x[t])
            seen = x[: t + 1]
            want = np.concatenate([np.zeros((max(0, reach - t - 1), 3), np.float32), seen[max(0, t + 1 - reach) :]])
            assert tail.tail.shape == (reach, 3) and np.array_equal(tail.tail, want[len(want) - reach :]), (
                taps_n,
                dil,
                t,
            )
            checked += 1
    evidence.record("tails_checked", checked)


def test_a_step_without_its_tail_differs(evidence):
    """Control: the history matters (a fresh tail per step is not the sequence convolution)."""
    rng = np.random.default_rng(1)
    taps = rng.standard_normal((3, 4)).astype(np.float32)
    x = rng.standard_normal((10, 4)).astype(np.float32)
    want = causal_conv(x, taps, 2)
    got = np.stack([ConvTail(taps, 2).step(row) for row in x])
    delta = float(np.max(np.abs(got.astype(np.float64) - want)))
    evidence.record("max_abs_delta", delta)
    assert delta > 0


def test_seeded_tail_float64_inputs_memory_and_bad_arguments(evidence):
    """A tail seeded with earlier inputs continues exactly as the sequence convolution over (history; x);
    float64 inputs, float64 taps and lists are cast to float32 first (the float32 result, dtype float32); the
    tail's nbytes is reach * channels * 4 however long it runs; x that is not (T, channels) (feed), (channels,)
    (step), and taps not (K >= 1, channels) or a dilation that is not an int >= 1 raise ConvError, leaving the
    tail as it was."""
    from impl.conv import ConvError

    @given(p=convs, h=st.integers(0, 12))
    def prop(p, h):
        taps, x = _case(p)
        d, c = p["dilation"], p["channels"]
        reach = (p["taps"] - 1) * d
        hist = np.random.default_rng(p["seed"] + 1).standard_normal((h, c)).astype(np.float32)
        whole = causal_conv(np.concatenate([hist, x]), taps, d)[h:]
        tail = ConvTail(taps, d)
        tail.seed(hist)
        got = tail.feed(x)
        assert np.array_equal(got, whole), f"seeded with {h} inputs (reach {reach}): differs from the sequence form"
        assert tail.nbytes == reach * c * 4, f"nbytes {tail.nbytes}, want reach {reach} x {c} channels x 4"
        x64 = x.astype(np.float64) + 1e-12  # not float32-representable: a missing cast shows in the bits
        for fed in (x64, x64.tolist()):
            y = causal_conv(fed, taps, d)
            assert y.dtype == np.float32 and np.array_equal(y, causal_conv(x, taps, d)), "float64 x not cast"
            t2 = ConvTail(taps, d)
            y2 = t2.feed(fed)
            assert y2.dtype == np.float32 and np.array_equal(y2, causal_conv(x, taps, d)), "feed: float64 x not cast"
        taps64 = taps.astype(np.float64) + 1e-12  # float64 taps (and lists) are cast to float32 too
        for t64 in (taps64, taps64.tolist()):
            y = causal_conv(x, t64, d)
            y2 = ConvTail(t64, d).feed(x)
            assert y.dtype == y2.dtype == np.float32, "float64 taps not cast"
            assert np.array_equal(y, causal_conv(x, taps, d)) and np.array_equal(y2, y), "float64 taps not cast"
        before = tail.tail.copy()
        for bad in (np.ones((2, c + 1), np.float32), np.ones(c, np.float32), np.ones((1, 1, c), np.float32)):
            for fn in (tail.feed, lambda a: causal_conv(a, taps, d)):
                try:
                    fn(bad)
                except ConvError:
                    evidence.count("refused")
                else:
                    raise AssertionError(f"x of shape {bad.shape} accepted with {c} channels")
        for bad in (np.ones(c + 1, np.float32), np.ones((1, c), np.float32)):
            try:
                tail.step(bad)
            except ConvError:
                evidence.count("refused")
            else:
                raise AssertionError(f"step(x of shape {bad.shape}) accepted with {c} channels")
        assert np.array_equal(tail.tail, before), "a refused input changed the tail"
        for bad_taps, bad_d in (
            (np.ones((0, c), np.float32), 1),
            (np.ones(c, np.float32), 1),
            (taps, 0),
            (taps, -1),
            (taps, 1.0),
            (taps, True),
        ):
            for make in (
                lambda bad_taps=bad_taps, bad_d=bad_d: ConvTail(bad_taps, bad_d),
                lambda bad_taps=bad_taps, bad_d=bad_d: causal_conv(x, bad_taps, bad_d),
            ):
                try:
                    make()
                except ConvError:
                    evidence.count("refused")
                else:
                    raise AssertionError(f"taps {np.shape(bad_taps)}, dilation {bad_d!r} accepted")
        evidence.count("examples")

    prop()
