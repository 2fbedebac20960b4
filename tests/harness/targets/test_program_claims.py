"""The program claims (TGT-HANDLES, TGT-OCCUPANCY) catch what no focused claim sees, on caches written here.

A small cache of our own (``Buf``: per-handle buffers that start at ``capacity`` positions and double, a
counter of positions in use shared by every handle of one ``make``) is PROVEN clean; each planted slip is a
kind issue 37 names and must FAIL with a message that says what went wrong:

- aliasing: a read hands out a view of storage a later truncate and append write over; an append keeps the
  caller's arrays instead of copying them (the caller overwrites them once it returns);
- growth: a grow that forgets the rows held (reached only with a capacity below the work, "grow" declared);
- occupancy: a truncate or a release that does not give back what it held (a leak no read shows).

The claims are called as functions with a fake ``evidence`` and ``kv_repro`` (no pytest plumbing), on the
ci Hypothesis profile.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings

from harness.targets.claims import Step
from harness.targets.claims import (
    test_every_live_handle_agrees_after_every_step as handles_claim,
)
from harness.targets.claims import (
    test_occupancy_is_bounded_by_what_live_handles_hold as occupancy_claim,
)
from harness.targets.fixture import ReproSink
from harness.targets.protocol import Numerics, Occupancy, Rows, Target, Visible, check_rows
from harness.wire.evidence import Evidence


class Buf:
    """(L, B, H, cap, D) buffers that double when full; ``used`` is shared by the handles of one make."""

    def __init__(self, target, geometry, batch, window, capacity, used):
        self.target, self.geometry, self.batch, self.window = target, geometry, batch, window
        self.k = np.zeros(geometry.rows_shape(batch, capacity), np.float32)
        self.v = np.zeros_like(self.k)
        self.n, self.used, self.live = 0, used, True

    def __len__(self):
        return self.n

    def mask_sizes(self, q):
        return self.n + q, 0

    def _grow(self, need):
        cap = max(need, 2 * self.k.shape[3])
        k = np.zeros(self.k.shape[:3] + (cap,) + self.k.shape[4:], np.float32)
        v = np.zeros_like(k)
        k[:, :, :, : self.n], v[:, :, :, : self.n] = self.k[:, :, :, : self.n], self.v[:, :, :, : self.n]
        self.k, self.v = k, v

    def append(self, k, v):
        t = check_rows(self.geometry, self.batch, k, v)
        if self.n + t > self.k.shape[3]:
            self._grow(self.n + t)
        self.k[:, :, :, self.n : self.n + t], self.v[:, :, :, self.n : self.n + t] = k, v
        self.n += t
        self.used[0] += t * self.batch
        rows = self.read()
        return Visible(rows.k, rows.v, rows.positions, self.n, 0)

    def read(self):
        n = self.n
        return Rows(self.k[:, :, :, :n].copy(), self.v[:, :, :, :n].copy(), np.arange(n, dtype=np.int64))

    def truncate(self, n):
        if not 0 <= n <= self.n:
            raise ValueError(f"truncate({n}) outside 0..{self.n}")
        self.used[0] -= (self.n - n) * self.batch
        self.n = n

    def fork(self):
        h = Buf(self.target, self.geometry, self.batch, self.window, 1, self.used)
        h.k, h.v, h.n = self.k.copy(), self.v.copy(), self.n
        self.used[0] += self.n * self.batch
        return h

    def occupancy(self):
        return self.used[0]

    def release(self):
        self.used[0] -= self.n * self.batch
        self.live = False


class ReadView(Buf):
    def read(self):
        n = self.n
        return Rows(self.k[:, :, :, :n], self.v[:, :, :, :n], np.arange(n, dtype=np.int64))


class KeepsInput(Buf):
    """Holds the appended chunks as given (a list of the caller's arrays), concatenated on read."""

    def append(self, k, v):
        vis = super().append(k, v)
        self.chunks = [*getattr(self, "chunks", []), (k, v)]
        return vis

    def read(self):
        chunks = getattr(self, "chunks", [])
        if not chunks or self.n != sum(c[0].shape[3] for c in chunks):
            return super().read()
        k = np.concatenate([c[0] for c in chunks], axis=3)
        v = np.concatenate([c[1] for c in chunks], axis=3)
        return Rows(k, v, np.arange(self.n, dtype=np.int64))

    def truncate(self, n):
        super().truncate(n)
        self.chunks = []

    def fork(self):
        h = super().fork()
        h.chunks = list(getattr(self, "chunks", []))
        return h


class GrowForgets(Buf):
    def _grow(self, need):
        cap = max(need, 2 * self.k.shape[3])
        self.k = np.zeros(self.k.shape[:3] + (cap,) + self.k.shape[4:], np.float32)
        self.v = np.zeros_like(self.k)


class GrowDoublesOnly(Buf):
    """Doubles its storage, whatever the append needs: wrong only when one append needs more than twice it."""

    def _grow(self, need):
        cap = 2 * self.k.shape[3]
        k = np.zeros(self.k.shape[:3] + (cap,) + self.k.shape[4:], np.float32)
        v = np.zeros_like(k)
        k[:, :, :, : self.n], v[:, :, :, : self.n] = self.k[:, :, :, : self.n], self.v[:, :, :, : self.n]
        self.k, self.v = k, v


class TruncateLeaks(Buf):
    def truncate(self, n):
        if not 0 <= n <= self.n:
            raise ValueError(f"truncate({n}) outside 0..{self.n}")
        self.n = n


class ReleaseLeaks(Buf):
    def release(self):
        self.live = False


def target(cls, name):
    caps = frozenset({"append", "read", "truncate", "fork", "mask", "grow", "occupancy"})

    def build(geometry, batch, window, capacity, trace=None):
        return cls(TARGETS[name], geometry, batch, window, capacity, [0])

    TARGETS[name] = Target(
        name, f"{cls.__name__}: test cache", "kvproof", caps, Numerics.exact(), (), build,
        occupancy=Occupancy("positions", block=1),
    )  # fmt: skip
    return TARGETS[name]


TARGETS: dict[str, Target] = {}


def run(claim, tgt):
    """(the AssertionError's text or "", the evidence) of ``claim`` on ``tgt``."""
    evidence = Evidence()
    before = settings._current_profile  # restored after: the ci profile must not leak into other tests
    settings.load_profile("ci")  # registered by harness.plugin (the tests' conftest loads it)
    try:
        claim(tgt, ReproSink(tgt, "test", None), evidence)
    except AssertionError as e:
        return str(e), evidence.values
    finally:
        settings.load_profile(before or "default")
    return "", evidence.values


@pytest.mark.parametrize("claim", [handles_claim, occupancy_claim], ids=["handles", "occupancy"])
def test_the_clean_cache_is_proven_and_crosses_its_capacity(claim):
    said, ev = run(claim, target(Buf, "test.clean"))
    assert said == "", said
    assert ev["examples"] >= 10 and ev["past_the_capacity"] >= 1 and ev["capacity_below"] >= 1, ev
    if claim is occupancy_claim:
        assert ev["released_back_to_start"] == ev["examples"], ev


@pytest.mark.parametrize(
    "cls, says",
    [
        (ReadView, "changed since it was returned"),
        (KeepsInput, "nan"),
        (GrowForgets, "values differ"),
        (GrowDoublesOnly, "raised ValueError"),
    ],
    ids=["read-view", "keeps-input", "grow-forgets", "grow-doubles-only"],
)
def test_handles_fails_each_planted_slip_naming_it(cls, says):
    said, _ = run(handles_claim, target(cls, f"test.{cls.__name__.lower()}"))
    assert said.startswith("after the steps 1. make("), said
    assert says in said, said


@pytest.mark.parametrize(
    "cls, says",
    [
        (TruncateLeaks, "storage no live handle holds is still in use"),
        (ReleaseLeaks, "what the handles held was not returned (a leak)"),  # shrunk: append, then release
    ],
    ids=["truncate-leaks", "release-leaks"],
)
def test_occupancy_fails_a_leak_naming_it(cls, says):
    said, _ = run(occupancy_claim, target(cls, f"test.{cls.__name__.lower()}"))
    assert says in said, said


def test_without_grow_the_capacity_is_never_below_the_work():
    caps = frozenset({"append", "read", "truncate", "fork", "mask"})

    class NoGrow(Buf):
        def _grow(self, need):
            raise AssertionError(f"grew past the capacity it was promised ({self.k.shape[3]} < {need})")

    tgt = Target(
        "test.static", "static", "kvproof", caps, Numerics.exact(), (),
        lambda g, b, w, c, trace=None: NoGrow(tgt, g, b, w, c, [0]),
    )  # fmt: skip
    said, ev = run(handles_claim, tgt)
    assert said == "" and ev["past_the_capacity"] == 0 and "capacity_below" not in ev, (said, ev)


def test_a_leak_under_a_loose_bound_is_caught_once_every_handle_is_released():
    """With a factor no program reaches, only the end check can see ReleaseLeaks: it must."""
    tgt = target(ReleaseLeaks, "test.loose")
    tgt = Target(
        tgt.name, tgt.title, tgt.distribution, tgt.capabilities, tgt.numerics, (), tgt.build,
        occupancy=Occupancy("positions", block=1, factor=1000),
    )  # fmt: skip
    TARGETS[tgt.name] = tgt
    said, _ = run(occupancy_claim, tgt)
    assert "every handle is released, yet occupancy() is" in said, said


# ---- a lossy bound that depends on history --------------------------------------------------------------


class RunningInt8(Buf):
    """Reads back every row quantized to int8 with one scale for K and one for V, absmax / 127 over every row
    ever appended (a running maximum that never shrinks, truncated rows included): a row's error depends on
    the history, not on the row or the first chunk."""

    absmax = (0.0, 0.0)

    def append(self, k, v):
        self.absmax = (max(self.absmax[0], float(np.abs(k).max())), max(self.absmax[1], float(np.abs(v).max())))
        return super().append(k, v)

    def read(self):
        rows = super().read()
        sk, sv = (np.float32(m / 127.0) or np.float32(1.0) for m in self.absmax)
        return Rows(np.rint(rows.k / sk) * sk, np.rint(rows.v / sv) * sv, rows.positions)

    def fork(self):
        h = super().fork()
        h.absmax = self.absmax
        return h


def from_history(calibration, rows, history):
    """|error| <= scale / 2 (plus float32 roundings), scale = absmax over every chunk appended / 127."""
    scale = max(float(np.abs(c).max()) for c in history) / 127.0
    x = np.abs(rows.astype(np.float64))
    return np.full(rows.shape, scale / 2 * (1 + 2.0**-15)) + 2.0**-22 * x


def from_calibration(calibration, rows):
    """The same scheme's bound with the scale frozen on the first chunk: wrong once a larger chunk comes."""
    scale = float(np.abs(calibration).max()) / 127.0
    return np.full(rows.shape, scale / 2 * (1 + 2.0**-15)) + 2.0**-22 * np.abs(rows.astype(np.float64))


def lossy_target(bound, name):
    caps = frozenset({"append", "read", "truncate", "fork", "mask", "grow", "quantized"})
    tgt = Target(
        name, "running int8", "kvproof", caps, Numerics.lossy(bound, "one int8 scale over the history"), (),
        lambda g, b, w, c, trace=None: RunningInt8(TARGETS[name], g, b, w, c, [0]),
    )  # fmt: skip
    TARGETS[name] = tgt
    return tgt


def test_a_lossy_bound_may_depend_on_the_history_and_must_when_the_quantizer_does():
    said, ev = run(handles_claim, lossy_target(from_history, "test.running-history"))
    assert said == "", said
    assert 0.3 < ev["error_over_bound"]["max"] <= 1, ev["error_over_bound"]  # the bound is reached, not vacuous
    said, _ = run(handles_claim, lossy_target(from_calibration, "test.running-calibration"))
    assert "the rows" in said and "values differ" in said, said


def test_a_lossy_bound_looser_than_its_quantizer_fails_numerics():
    from harness.targets.claims import test_read_back_within_the_numerics_bound_over_magnitudes as numerics

    said, ev = run(numerics, lossy_target(from_history, "test.running-tight"))
    assert said == "" and ev["lossy_bound_reached"] > 0.5, (said, ev)

    def ten_times(calibration, rows, history):
        return 10 * from_history(calibration, rows, history)

    said, _ = run(numerics, lossy_target(ten_times, "test.running-loose"))
    assert "the bound is looser than the quantizer it describes" in said, said


def test_a_failing_program_is_shrunk_to_the_steps_it_needs():
    """Hypothesis shrinks the seeds a program is drawn from; the claim drops the steps the failure does not need
    (TruncateLeaks fails as soon as one truncate drops a position: a handful of steps, not the 3-16 drawn)."""
    said, _ = run(occupancy_claim, target(TruncateLeaks, "test.shrunk"))
    steps = said.split(": test.shrunk")[0].split("; ")
    assert len(steps) <= 4, said  # make, an append, the truncate (and at most one more)
    assert any("truncate(" in s for s in steps), said


# ---- a verb on an emptied handle ---------------------------------------------------------------------------


class Batched(Buf):
    """Buf with the batch verbs: each takes the batch elements ``idx`` of the storage (a copy)."""

    def _take(self, idx):
        self.k, self.v = self.k[:, idx].copy(), self.v[:, idx].copy()
        self.batch = len(idx)

    def reorder(self, idx):
        self._take([int(i) for i in idx])

    def select(self, idx):
        self._take([int(i) for i in idx])

    def repeat(self, r):
        self._take([b for b in range(self.batch) for _ in range(r)])

    def fork(self):
        h = super().fork()
        h.__class__ = type(self)  # Buf.fork makes a Buf
        return h


class BatchSkipsEmpty(Batched):
    """transformers' DynamicLayer (5.25.0): a batch verb acts on the storage only while the cache holds positions,
    so one truncated to 0 keeps storage of the old batch and the next append of the new batch fails."""

    def _take(self, idx):
        if self.n > 0:
            super()._take(idx)
        self.batch = len(idx)

    def read(self):  # holding nothing, it reads as nothing of the batch it was told (get_seq_length() == 0)
        if self.n == 0:
            empty = np.zeros(self.geometry.rows_shape(self.batch, 0), np.float32)
            return Rows(empty, empty.copy(), np.arange(0, dtype=np.int64))
        return super().read()


def batched_target(cls, name):
    caps = frozenset({"append", "read", "truncate", "fork", "mask", "grow", "reorder", "select", "repeat"})
    TARGETS[name] = Target(
        name, f"{cls.__name__}: test cache", "kvproof", caps, Numerics.exact(), (),
        lambda g, b, w, c, trace=None: cls(TARGETS[name], g, b, w, c, [0]),
    )  # fmt: skip
    return TARGETS[name]


def test_a_batch_verb_that_skips_an_emptied_handle_fails_handles():
    """transformers' batch-verbs-skip-an-emptied-layer, planted: the clean batch verbs are PROVEN, the ones that
    skip an emptied cache FAIL on the ci profile, the failure shrunk to an append, truncate(0), the batch verb
    and the append it breaks (with truncate(0), the verb and the append left to separate draws, the 50 examples
    missed it: measured)."""
    said, ev = run(handles_claim, batched_target(Batched, "test.batched"))
    assert said == "" and ev["verbs_on_an_emptied_handle"] >= 10, (said, ev)
    said, _ = run(handles_claim, batched_target(BatchSkipsEmpty, "test.batch-skips-empty"))
    steps = said.split(": test.batch-skips-empty")[0].split("; ")
    assert any("truncate(0)" in s for s in steps), said
    assert any("select(" in s or "repeat(" in s for s in steps), said
    assert len(steps) <= 6, said  # make, an append, truncate(0), the batch verb, the append (and one more)


def emptied_then_new_batch(steps, batch):
    """Does a program append to a handle that holds nothing after a batch verb changed its batch while it was
    empty (the case BatchSkipsEmpty and transformers' DynamicLayer fail)?"""
    hs = [[0, batch, batch]]  # per handle: length, batch, batch its storage was shaped for
    for s in steps:
        h = hs[s.handle]
        if s.verb == "append":
            if h[0] == 0 and h[2] != h[1]:
                return True
            h[0], h[2] = h[0] + s.arg, h[1]
        elif s.verb == "truncate":
            h[0] = s.arg
        elif s.verb == "fork":
            hs.append(list(h))
        elif s.verb in ("reorder", "select", "repeat"):
            h[1] = len(s.arg) if s.verb != "repeat" else h[1] * s.arg
            h[2] = h[1] if h[0] > 0 else h[2]
    return False


def test_programs_reach_a_batch_verb_on_an_emptied_handle_often():
    """The generator, not one lucky example: over 2000 programs of transformers.dynamic's verbs, a batch verb
    that changes the batch of an emptied handle and then an append to it come in at least 1 program of 8
    (measured about 1 of 5; as separate draws it was about 1 of 80), and every other verb the target declares
    follows a truncate to 0 on its handle."""
    from harness.targets.claims import COMPOUNDS, VERBS, _plan

    verbs = [*VERBS, *COMPOUNDS]
    weight = {"append": 3, "truncate": 2, "rewind": 3, "empty": 2, "fork": 2}
    found, after = 0, set()
    for seed in range(2000):
        pick = np.random.default_rng(seed)
        batch = 1 + seed % 3
        steps, _ = _plan(verbs, weight, pick, batch, False)
        found += emptied_then_new_batch(steps, batch)
        for a, b in zip(steps, steps[1:], strict=False):
            if a == Step("truncate", a.handle, 0) and b.handle == a.handle:
                after.add(b.verb)
    assert found >= 2000 / 8, found
    assert after >= {"truncate", "fork", "reorder", "select", "repeat"}, after


def test_the_first_append_is_never_shrunk_away():
    """A failure that needs only a truncate(0) of a handle that never held rows (transformers.dynamic-sliding's
    crop-0-on-an-empty-cache, TGT-TRUNCATE's) must not stand in for the one found: the first append stays."""
    from harness.targets.claims import _shrunk

    steps = [Step("append", 0, 4), Step("truncate", 0, 0), Step("select", 0, [0]), Step("append", 0, 2)]
    shrunk = _shrunk(steps, lambda c: any(s.verb == "truncate" for s in c), 2, None)
    assert shrunk == [Step("append", 0, 1), Step("truncate", 0, 0)], shrunk


def test_a_step_is_dropped_only_when_the_rest_still_runs():
    from harness.targets.claims import Step, _valid, _without

    steps = [Step("append", 0, 3), Step("fork", 0, 1), Step("truncate", 1, 2), Step("fork", 0, 2), Step("append", 2, 1)]
    assert _without(steps, 1) is None  # handle 1 is truncated later
    assert _without(steps, 2) == [Step("append", 0, 3), Step("fork", 0, 1), Step("fork", 0, 2), Step("append", 2, 1)]
    dropped = _without([Step("append", 0, 3), Step("fork", 0, 1), Step("fork", 0, 2), Step("append", 2, 1)], 1)
    assert dropped == [Step("append", 0, 3), Step("fork", 0, 1), Step("append", 1, 1)]  # handle 2 is now 1
    assert not _valid([Step("truncate", 0, 1)], 1, None)  # nothing to truncate
    assert not _valid([Step("append", 0, 5)], 1, 4)  # past a capacity that does not grow
    assert _valid([Step("append", 0, 5)], 1, None)
