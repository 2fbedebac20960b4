"""TGT-LOSSY's logit-level bound for a target that is not exact (harness/targets/logitbound.py).

The bound has three parts, each checked here against something it does not compute itself:

- the float64 forward is impl's model (its logits are the float32 runtime's within float32 rounding);
- its derivatives are the model's (central finite differences of the same forward with one read moved);
- the first-order bound with its factor 2 holds where it is weakest: at the corner of the read box that
  drives one logit furthest to first order (every read at its stated bound, signed by its derivative),
  for int8-sized bounds and for bounds four times as wide.

Then the claim itself on a cache that quantizes (impl's int8 ring under a project's name, so it runs over
its verbs like any project's cache) is PROVEN, and caches that hand attention something else fail it:
a neighbour's row, an error past the stated bound, a row dropped. The rows check names the row; the logit
check alone (rows check skipped) is measured on the neighbour-row cache.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import settings

from harness.targets import logitbound, model
from harness.targets.claims import _within_the_first_order_bound
from harness.targets.claims import test_a_quantized_cache_decodes_within_the_bound_derived_from_its_own as lossy_claim
from harness.targets.own import TARGETS as OWN
from harness.wire.evidence import Evidence

INT8 = dataclasses.replace(OWN["impl.ring-int8"], name="int8copy", distribution="int8copy", own=True)


def decode(target, prompt, chunks, steps, window=None):
    toks, dec, reads = model.recorded_decode(target, prompt, chunks, steps, window)
    return toks, dec, model.impl_recompute(target, toks, window, through=model.REFERENCE), reads


def cases(n: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        t = int(rng.integers(2, 7))
        prompt = [int(x) for x in rng.integers(0, model.VOCAB, t)]
        cut = int(rng.integers(1, t + 1))
        chunks = [cut, t - cut] if cut < t else [t]
        window = None if rng.random() < 0.5 else int(rng.integers(1, 6))
        yield prompt, chunks, int(rng.integers(1, 6)), window


def test_the_float64_forward_is_impls_model():
    for prompt, chunks, steps, window in cases(6, 1):
        toks, dec, ref, reads = decode(model.REFERENCE, prompt, chunks, steps, window)
        exact, _ = logitbound.forward(model.impl_model(), toks, window, reads, actual=False)
        assert np.abs(exact.v - ref).max() <= 2.0**-18 * max(1.0, np.abs(ref).max())
        assert np.abs(exact.t).max() == 0.0  # the reference states no error: no read may move


def test_the_derivatives_are_central_differences_of_the_same_forward():
    """At the written rows themselves (a cache that reads exactly but states int8's bound), so the two are taken
    at the same point."""
    stated = dataclasses.replace(
        model.REFERENCE, name="exact-stating-int8", numerics=INT8.numerics, capabilities=INT8.capabilities
    )
    toks, dec, ref, reads = decode(stated, [5, 9, 2, 33], [4], 2)
    m = model.impl_model()
    exact, _ = logitbound.forward(m, toks, None, reads, actual=False)
    table, bounds = logitbound.symbols(reads)
    rng = np.random.default_rng(0)
    h = 1e-5
    for _ in range(6):
        li, a = int(rng.integers(0, len(reads))), int(rng.integers(0, len(reads[0].appends)))
        ek = reads[li].appends[a][5]
        which = int(rng.integers(0, 2))
        row, col = int(rng.integers(0, len(ek))), int(rng.integers(0, ek.shape[1]))
        var = int(table[li][a][which][row]) + col
        moved = []
        for sign in (1, -1):
            shifts = []
            for lj, r in enumerate(reads):
                layer = []
                for b, e in enumerate(r.appends):
                    dk, dv = np.zeros(e[5].shape), np.zeros(e[6].shape)
                    if lj == li:  # every append of this layer that read this row with these bits shares the variable
                        hit = np.flatnonzero(table[lj][b][which] == var - col)
                        (dk, dv)[which][hit, col] = sign * h
                    layer.append((dk, dv))
                shifts.append(layer)
            moved.append(logitbound.forward(m, toks, None, reads, actual=False, shifts=shifts)[0].v)
        numeric = (moved[0] - moved[1]) / (2 * h)
        analytic = exact.t[..., var] / bounds[var]
        assert np.allclose(numeric, analytic, rtol=1e-4, atol=1e-6 * np.abs(analytic).max() + 1e-9)


@pytest.mark.parametrize("widen", [1.0, 4.0])
def test_twice_the_first_order_bound_holds_at_the_worst_corner(widen):
    """Every read at its stated bound (times ``widen``), signed so the chosen logit moves furthest to first order:
    the true change stays within 2 B1 (B1 = the first-order bound), for the logit with the largest B1 and for a
    random one of every position."""
    m = model.impl_model()
    worst = 0.0
    for prompt, chunks, steps, window in cases(8, 2):
        toks, dec, ref, reads = decode(INT8, prompt, chunks, steps, window)
        for r in reads:
            r.appends[:] = [e[:5] + (e[5] * widen, e[6] * widen) for e in r.appends]
        exact, _ = logitbound.forward(m, toks, window, reads, actual=False)
        table, bounds = logitbound.symbols(reads)
        b1 = np.abs(exact.t).sum(axis=-1)
        rng = np.random.default_rng(len(toks))
        picks = [np.unravel_index(int(np.argmax(b1)), b1.shape)]
        picks += [(p, int(rng.integers(0, b1.shape[1]))) for p in range(len(toks))]
        for p, j in picks:
            sign = np.sign(exact.t[p, j])  # (m,): each variable at the corner that raises logit (p, j)
            shifts = []
            for li, r in enumerate(reads):
                layer = []
                for a, e in enumerate(r.appends):
                    n, w = e[5].shape
                    var = [table[li][a][which][:, None] + np.arange(w)[None, :] for which in (0, 1)]
                    layer.append(tuple(sign[x] * bounds[x] for x in var))
                shifts.append(layer)
            moved = logitbound.forward(m, toks, window, reads, actual=False, shifts=shifts)[0].v
            change = abs(moved[p, j] - exact.v[p, j])
            assert change <= 2 * b1[p, j] + 1e-12, (prompt, chunks, steps, window, p, j, change, b1[p, j])
            worst = max(worst, change / max(b1[p, j], 1e-300))
    assert 0.5 < worst <= 2.0  # the corner reaches about B1: the first-order bound is neither loose nor exceeded


def judge(target, prompt, chunks, steps, window=None, rows=True) -> str:
    where = f"prompt {prompt}"
    try:
        toks, dec, ref, reads = decode(target, prompt, chunks, steps, window)
        if rows:
            _within_the_first_order_bound(target, Evidence(), where, prompt, toks, dec, ref, window, reads)
        else:
            real = logitbound.misread
            logitbound.misread = lambda *a: ""
            try:
                _within_the_first_order_bound(target, Evidence(), where, prompt, toks, dec, ref, window, reads)
            finally:
                logitbound.misread = real
    except AssertionError as e:
        return str(e)
    return ""


def corrupting(name: str, change) -> object:
    """INT8 whose every append hands attention ``change(k, v, positions)`` of what it would have."""
    build = INT8.build

    class Handle:
        def __init__(self, h):
            self.h = h

        def __getattr__(self, attr):
            return getattr(self.h, attr)

        def __len__(self):
            return len(self.h)

        def append(self, k, v):
            vis = self.h.append(k, v)
            k2, v2, pos = change(vis.k.copy(), vis.v.copy(), vis.positions.copy())
            return dataclasses.replace(vis, k=k2, v=v2, positions=pos)

    def built(g, batch, window, capacity, trace=None):
        return Handle(build(g, batch, window, capacity, trace=trace))

    return dataclasses.replace(INT8, name=name, build=built)


def neighbour(k, v, pos):
    if k.shape[3] > 1:
        k[:, :, :, 0] = k[:, :, :, 1]  # the first row read is the second position's
    return k, v, pos


def past_the_bound(k, v, pos):
    return k, v + 0.05 * np.abs(v).max(), pos  # an error of 5% of the largest |V|, past int8's absmax / 254


def dropped(k, v, pos):
    return k[:, :, :, 1:], v[:, :, :, 1:], pos[1:]  # the oldest row is never handed over


def test_a_quantizing_cache_is_proven_and_one_handing_over_something_else_fails_with_the_row_named():
    before = settings._current_profile
    settings.load_profile("ci")
    try:
        evidence = Evidence()
        lossy_claim(INT8, evidence)  # the whole claim, as TGT-LOSSY runs it
    finally:
        settings.load_profile(before or "default")
    v = evidence.values
    assert v["examples"] >= 10 and v["greedy_checked"] >= 20 and v["delta_over_bound"]["max"] <= 1.0
    assert 0 < v["bound_over_logit"]["max"] < 0.05  # int8's bound is a fraction of a percent of the logits
    for case in cases(5, 3):
        assert judge(INT8, *case) == ""
    prompt, chunks, steps = [7, 1, 40, 22], [2, 2], 3
    assert "handed attention a K row for position 0" in judge(corrupting("nb", neighbour), prompt, chunks, steps)
    says = judge(corrupting("past", past_the_bound), prompt, chunks, steps)
    assert "a V row" in says and "past the stated bound" in says
    says = judge(corrupting("drop", dropped), prompt, chunks, steps)
    assert "rows from position 1 on" in says, says


def test_the_logit_check_alone_catches_a_neighbours_row_where_it_moves_the_logits():
    """Without the rows check, the logit bound alone must still fail most decodes of a cache that hands attention
    a neighbour's row (where the neighbour's row moves the logits at all: prompts of 2 tokens or more)."""
    liar = corrupting("nb", neighbour)
    caught = [bool(judge(liar, *case, rows=False)) for case in cases(20, 4)]
    assert sum(caught) >= 16, caught


def test_a_cache_that_states_a_bound_of_0_for_exact_rows_is_not_failed_by_rounding():
    """A KIVI-style cache keeps some rows exact and says so (bound 0): where a logit's reads all state 0, B1 is 0
    and F(actual) - F(exact) is the float32 writes' rounding, which must not count as using the bound."""
    from harness.targets.protocol import Numerics

    zero = dataclasses.replace(
        model.REFERENCE,
        name="exact-stating-0",
        numerics=Numerics.lossy(lambda c, r: np.zeros(r.shape), "rows kept exact"),
        capabilities=INT8.capabilities - {"window"},
    )
    evidence = Evidence()
    for prompt, chunks, steps, _ in cases(4, 6):
        toks, dec, ref, reads = decode(zero, prompt, chunks, steps)
        _within_the_first_order_bound(zero, evidence, "zero", prompt, toks, dec, ref, None, reads)
    assert evidence.values["first_order_used"]["max"] <= 2.0


def nan_rows(k, v, pos):
    v[:, :, :, 0] = np.nan  # the oldest row read as NaN
    return k, v, pos


def test_a_nan_read_is_never_within_a_bound():
    says = judge(corrupting("nan", nan_rows), [3, 8, 1], [3], 2)
    assert "handed attention a V row for position 0" in says and "past the stated bound" in says, says
