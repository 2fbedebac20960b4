"""What target witnesses share: rows, a handle beside its reference, the checks (public: a project's witnesses use it).

:mod:`harness.targets.claims` (kvproof's generic target witnesses, cards
``TGT-*``) is built on it, and so can a project's own witness: take the
``kv_target``, ``kv_repro`` and ``evidence`` fixtures, make a
``Judge(kv_target, evidence, kv_repro, claim, verbs)``, drive ``judge.pair(...)``
with ``judge.append`` / ``judge.call`` and check with ``judge.agree``.

Every known answer comes from the reference target (``reference``: a list of
rows in numpy, each verb its definition) fed the same calls, or from the
claim itself (which positions a window keeps, which arguments a verb must
refuse); never from the target under test. A check that fails on a traced
handle (a third-party target) is also written, as a boolean over the
library's own objects and literal expected values, into the handle's trace,
so ``kv_repro`` can turn the shrunk example into a standalone script.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st
from hypothesis.errors import UnsatisfiedAssumption

from harness.targets.own import TARGETS as OWN_TARGETS
from harness.targets.protocol import Geometry, Handle, Rows, Target, Visible
from harness.targets.replay import record
from harness.targets.repro import Check, held_rows_differ, visible_differs

REFERENCE = OWN_TARGETS["reference"]  # the list-of-rows known answers (not looked up by name: no project needed)
REFUSALS = (ValueError, RuntimeError)  # how the targets document a refusal (impl's CacheError is a ValueError)

geometries = st.builds(
    Geometry, n_layers=st.integers(1, 2), n_kv_heads=st.integers(1, 2), head_dim=st.sampled_from([2, 4])
)
chunk_sizes = st.lists(st.integers(1, 4), min_size=1, max_size=5)
batches = st.integers(1, 3)
seeds = st.integers(0, 2**16)


def random_rows(g: Geometry, batch: int, t: int, rng: np.random.Generator, scale: float = 1.0):
    """k, v (L, B, H, T, D) float32, standard normal times ``scale``."""
    shape = g.rows_shape(batch, t)
    k = (rng.standard_normal(shape) * scale).astype(np.float32)
    v = (rng.standard_normal(shape) * scale).astype(np.float32)
    return k, v


@dataclass
class Pair:
    """A target's handle and the reference handle, fed the same calls; ``calib`` is the first chunk (k, v),
    ``history`` every chunk appended to it and to the handles it was forked from (a lossy bound may need it)."""

    h: Handle
    ref: Handle
    calib: tuple[np.ndarray, np.ndarray] | None = None
    history: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def fork(self) -> Pair:
        return Pair(self.h.fork(), self.ref.fork(), self.calib, list(self.history))

    def follow(self, verb: str, arg) -> None:
        """Do batch ``verb`` (reorder, select, repeat; already done to both handles) to what a lossy bound is
        computed from too, so element i's bound is computed from element i's own calibration and history."""
        if verb not in ("reorder", "select", "repeat") or (self.calib is None and not self.history):
            return
        batch = (self.calib or self.history[0])[0].shape[1]
        idx = [b for b in range(batch) for _ in range(int(arg))] if verb == "repeat" else [int(i) for i in arg]
        if self.calib is not None:
            self.calib = (self.calib[0][:, idx], self.calib[1][:, idx])
        self.history = [(k[:, idx], v[:, idx]) for k, v in self.history]


class Judge:
    """The checks of one witness on one target; ``claim`` and ``verbs`` say what a reproduction claims."""

    def __init__(self, target: Target, evidence, repro, claim: str, verbs: tuple[str, ...]) -> None:
        self.target, self.evidence, self.repro, self.claim, self.verbs = target, evidence, repro, claim, verbs
        self.exact = target.numerics.kind == "exact"
        self.max_error_over_bound = 0.0  # over every agree() so far: worst |read - appended| / bound (K)

    # -- building

    def pair(self, g: Geometry, batch: int, window: int | None = None, capacity: int = 32) -> Pair:
        """The target's handle (recorded at the protocol level when its adapter traces no library calls, so a
        failure becomes a standalone script: :mod:`harness.targets.replay`) beside the reference's."""
        trace = self.repro.trace()
        h = self.target.make(g, batch, window, capacity, trace=trace)
        if getattr(h, "trace", None) is None:
            h = record(h, g, batch, window, capacity)
        return Pair(h, REFERENCE.make(g, batch, window, capacity))

    def fail(self, h: Handle, expr: str, says: str, shows: str = "") -> None:
        """Record the failing check on a traced handle, then fail the witness with ``says``."""
        self.repro.failed(h, Check(expr, says, shows), self.claim, self.verbs)
        raise AssertionError(f"{self.target.name}: {says}")

    def lit(self, h: Handle, a: np.ndarray) -> str:
        trace = getattr(h, "trace", None)
        return trace.tensor(a) if trace is not None else "..."

    def bounds(self, p: Pair, h: Handle) -> tuple[np.ndarray, np.ndarray, str, str]:
        """Per-element bounds on K and V of p.ref's rows, and their source in a script."""
        if self.exact or p.calib is None:
            z = np.zeros(p.ref.k.shape)
            return z, z, "0.0", "0.0"
        bk = self.target.numerics.allowed(p.calib[0], p.ref.k, [c[0] for c in p.history])
        bv = self.target.numerics.allowed(p.calib[1], p.ref.v, [c[1] for c in p.history])
        return bk, bv, self.lit(h, bk * (1 + 2.0**-20)), self.lit(h, bv * (1 + 2.0**-20))

    # -- verbs, as the reference does them

    def call(self, h: Handle, what: str, fn: Callable[[], object]) -> object:
        """``fn()``'s result; an exception from it fails the witness: the claim is that the call is accepted."""
        try:
            return fn()
        except UnsatisfiedAssumption:  # the adapter rejected the example: the target documents refusing it (n/a)
            raise
        except Exception as e:
            flag = getattr(h, "last_flag", "None")
            self.fail(h, f"{flag} is None", f"{what} raised {type(e).__name__}: {e}", flag)

    def append(self, p: Pair, k: np.ndarray, v: np.ndarray, check_visible: bool = True) -> Visible:
        """Append to both; the rows handed to attention must be right (visible_differs) when ``check_visible``."""
        if p.calib is None:
            p.calib = (k, v)
        if not self.exact:
            p.history.append((np.array(k), np.array(v)))
        first = len(p.ref)
        p.ref.append(k, v)
        vis = self.call(p.h, f"append of {k.shape[3]} position(s) at length {first}", lambda: p.h.append(k, v))
        if check_visible:
            self.visible(p, vis, first)
        self.evidence.count("appends")
        return vis

    def visible(self, p: Pair, vis: Visible, first: int) -> None:
        bk, bv, sbk, sbv = self.bounds(p, p.h)
        w = p.h.window
        msg = visible_differs(
            vis.k, vis.v, vis.positions, vis.mask_length, vis.mask_offset, p.ref.k, p.ref.v, bk, bv, first, w
        )
        if msg:
            seen = getattr(p.h, "last_seen", "seen")
            args = f"{self.lit(p.h, p.ref.k)}, {self.lit(p.h, p.ref.v)}, {sbk}, {sbv}, {first}, {w!r}"
            call = (
                f"visible_differs({seen}[0], {seen}[1], {seen}[3] + np.arange({seen}[0].shape[3]), "
                f"{seen}[2], {seen}[3], {args})"
            )
            self.fail(p.h, f"{call} == ''", f"the rows handed to attention: {msg}", call)

    def agree(self, p: Pair, what: str = "") -> Rows:
        """len and the rows held agree with the reference (within the target's numerics); returns the rows read."""
        h, n = p.h, len(p.ref)
        got_len = self.call(h, "len", h.__len__)  # not len(h): Python refuses a negative length before we see it
        if got_len != n:
            src = getattr(h, "src_len", lambda: "len")()
            self.fail(h, f"{src} == {n}", f"{what}length {got_len}, expected {n}", src)
        rows = self.call(h, "read", h.read)
        need = n if h.window is None else min(n, h.window - 1)
        bk, bv, sbk, sbv = self.bounds(p, h)
        msg = held_rows_differ((rows.k, rows.v, rows.positions), p.ref.k, p.ref.v, bk, bv, need)
        if msg:
            src = getattr(h, "src_rows", lambda: "rows")()
            call = f"held_rows_differ({src}, {self.lit(h, p.ref.k)}, {self.lit(h, p.ref.v)}, {sbk}, {sbv}, {need})"
            self.fail(h, f"{call} == ''", f"{what}the rows held: {msg}", call)
        self.observe_error(p, rows)
        return rows

    def observe_error(self, p: Pair, rows) -> None:
        """Evidence: the worst |read - appended| over its bound (0 when bit-exact; <= 1 within the bound)."""
        if not len(rows.positions):
            return
        sel = np.asarray(rows.positions, dtype=np.int64)
        err = np.abs(rows.k.astype(np.float64) - p.ref.k[:, :, :, sel])
        bk = self.bounds(p, p.h)[0][:, :, :, sel]
        ratio = np.where(err == 0, 0.0, err / np.where(bk > 0, bk, np.inf))
        worst = float(ratio.max()) if ratio.size else 0.0
        self.max_error_over_bound = max(self.max_error_over_bound, worst)
        self.evidence.observe("error_over_bound", worst)

    def same_bits(self, a: Pair, b: Pair, what: str) -> None:
        """Two handles of this target that must hold the same rows hold the same bits."""
        ra, rb = a.h.read(), b.h.read()
        ok = (
            np.array_equal(ra.positions, rb.positions)
            and ra.k.tobytes() == rb.k.tobytes()
            and ra.v.tobytes() == rb.v.tobytes()
        )
        if not ok:
            src_a = getattr(a.h, "src_rows", lambda: "a")()
            src_b = getattr(b.h, "src_rows", lambda: "b")()
            expr = (
                f"(lambda x, y: all(np.array_equal(np.asarray(i), np.asarray(j)) for i, j in zip(x, y)))"
                f"({src_a}, {src_b})"
            )
            self.fail(a.h, expr, f"{what}: the two caches hold different rows", src_a)

    def refused(self, p: Pair, what: str, fn: Callable[[], object]) -> bool:
        """True when ``fn()`` raised a documented refusal (ValueError/RuntimeError); any other exception fails."""
        try:
            fn()
        except REFUSALS:
            return True
        except Exception as e:
            flag = getattr(p.h, "last_flag", "None")
            expr = f"{flag} is None or {flag}.startswith(('ValueError', 'RuntimeError'))"
            self.fail(
                p.h, expr, f"{what} crashed with {type(e).__name__}: {e} (a refusal is a ValueError or RuntimeError)"
            )
        return False
