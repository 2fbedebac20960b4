"""RING-T5: a rolling conv tail's step form equals the whole-sequence causal convolution."""
from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from impl.conv import ConvTail, causal_conv

convs = st.fixed_dictionaries({
    "taps": st.integers(1, 5),
    "dilation": st.integers(1, 4),
    "channels": st.integers(1, 8),
    "t": st.integers(1, 40),
    "chunks": st.lists(st.integers(1, 9), min_size=1, max_size=10),
    "seed": st.integers(0, 9999),
})


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
        delta = max(float(np.max(np.abs(steps.astype(np.float64) - want))),
                    float(np.max(np.abs(chunks.astype(np.float64) - want))))
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
            want = np.concatenate([np.zeros((max(0, reach - t - 1), 3), np.float32), seen[max(0, t + 1 - reach):]])
            assert tail.tail.shape == (reach, 3) and np.array_equal(tail.tail, want[len(want) - reach:]), (taps_n, dil, t)
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
