"""A logit-level bound for a target that is not exact, derived from its stated per-element bound.

A lossy (or tolerance) target promises that what attention reads is within a
stated bound of what was appended, per element (``Numerics.allowed``: the
quantizer's own bound, which may depend on the first chunk and on the whole
history). TGT-GENERATE turns that promise into two checks of a decode with
the target's cache in impl's runtime (:class:`harness.targets.model.ProtocolStore`
records every row written and every row each append handed attention):

1. **Rows.** Every row attention read is within the stated bound of the row
   the model wrote at that position and layer (:func:`misread`): a cache that
   hands attention another position's row, another layer's, a stale one or a
   row past its window fails here, with the row named.
2. **Logits.** |decode - recompute| <= 2 B1 + rho per logit, where B1 is the
   first-order bound: the sum over every element of every read of
   |d logit / d read| times that read's stated bound, the derivatives taken
   exactly (forward mode, float64) through the same Llama (:func:`forward`);
   2 B1 leaves as much again for the higher-order terms (measured: at the
   corner of the read box that moves one logit furthest to first order, the
   true change was 1.002 B1 for int8-sized bounds and 1.008 B1 for bounds four
   times as wide, tests/harness/targets/test_logit_bound.py); rho is the float32 rounding
   of the two runs, measured here, not assumed: |recompute - F(exact reads)|
   + |decode - F(the reads the decode actually had)|, F being this module's
   float64 forward. A greedy token must be the recompute's argmax wherever
   the recompute's top-2 margin exceeds twice that bound.

Nothing of the runtime under test computes a known answer here: the weights
are read from the model (``Linear.weight``), RoPE's angles computed in float64
here, and every operation written out below from the model's definition
(impl/model/llama.py's docstring).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Reads:
    """What ProtocolStore recorded of one layer, one entry per append: the first position of its queries, how
    many, the first position it handed attention (row i of what it handed is position base + i, as the runtime
    reads it), those rows (n, H * D) as read, and the stated bound on each, K and V."""

    appends: list[tuple[int, int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    written_k: list[np.ndarray] = field(default_factory=list)  # per append, the K rows (t, H * D) the model wrote
    written_v: list[np.ndarray] = field(default_factory=list)


class Dual:
    """Values ``v`` and their derivatives ``t`` (v.shape + (m,)) with respect to m read perturbations."""

    def __init__(self, v: np.ndarray, t: np.ndarray) -> None:
        self.v, self.t = v, t

    def __getitem__(self, idx) -> Dual:
        idx = idx if isinstance(idx, tuple) else (idx,)
        return Dual(self.v[idx], self.t[idx + (slice(None),)])

    def reshape(self, *shape) -> Dual:
        return Dual(self.v.reshape(*shape), self.t.reshape(*shape, self.t.shape[-1]))


def _add(a: Dual, b: Dual) -> Dual:
    return Dual(a.v + b.v, a.t + b.t)


def _mul(a: Dual, b: Dual) -> Dual:
    return Dual(a.v * b.v, a.t * b.v[..., None] + a.v[..., None] * b.t)


def _linear(x: Dual, w: np.ndarray) -> Dual:
    w = np.asarray(w, np.float64)  # (out, in)
    return Dual(x.v @ w.T, np.einsum("oi,tim->tom", w, x.t, optimize=True))


def _rmsnorm(x: Dual, weight: np.ndarray, eps: float) -> Dual:
    w = np.asarray(weight, np.float64)
    n = x.v.shape[-1]
    inv = 1.0 / np.sqrt((x.v * x.v).mean(axis=-1, keepdims=True) + eps)  # (T, 1)
    d_ms = 2.0 / n * np.einsum("ti,tim->tm", x.v, x.t)  # (T, m)
    d_inv = -0.5 * inv**3 * d_ms  # (T, m)
    t = (x.t * inv[..., None] + x.v[..., None] * d_inv[:, None, :]) * w[None, :, None]
    return Dual(x.v * inv * w, t)


def _rope(x: Dual, pos: np.ndarray, theta: float) -> Dual:
    """Half-split rotary embedding of x (T, H, D): x cos + rotate_half(x) sin, angles in float64."""
    d = x.v.shape[-1]
    inv_freq = 1.0 / (theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    ang = np.asarray(pos, np.float64)[:, None] * inv_freq[None, :]
    ang = np.concatenate([ang, ang], axis=1)[:, None, :]  # (T, 1, D)
    cos, sin = np.cos(ang), np.sin(ang)
    half = d // 2

    def rot(a: np.ndarray, axis: int) -> np.ndarray:
        lo, hi = np.split(a, [half], axis=axis)
        return np.concatenate([-hi, lo], axis=axis)

    return Dual(x.v * cos + rot(x.v, -1) * sin, x.t * cos[..., None] + rot(x.t, -2) * sin[..., None])


def _silu(x: Dual) -> Dual:
    s = 1.0 / (1.0 + np.exp(-np.clip(x.v, -700, 700)))
    return Dual(x.v * s, x.t * (s * (1 + x.v * (1 - s)))[..., None])


def _attend(q: Dual, k: Dual, v: Dual, scale: float) -> Dual:
    """One query over its n visible rows: q (Hkv, G, D), k and v (n, Hkv, D) -> (Hkv, G, D)."""
    s = scale * np.einsum("hgd,nhd->hgn", q.v, k.v)
    ds = scale * (np.einsum("hgdm,nhd->hgnm", q.t, k.v) + np.einsum("hgd,nhdm->hgnm", q.v, k.t))
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    dp = p[..., None] * (ds - np.einsum("hgn,hgnm->hgm", p, ds)[:, :, None, :])
    o = np.einsum("hgn,nhd->hgd", p, v.v)
    do = np.einsum("hgnm,nhd->hgdm", dp, v.v) + np.einsum("hgn,nhdm->hgdm", p, v.t)
    return Dual(o, do)


def symbols(reads: list[Reads]) -> tuple[list[list[tuple[np.ndarray, np.ndarray]]], np.ndarray]:
    """The read perturbations: one variable per element of every distinct row read (a row several appends
    handed attention with the same bits is one read, with the largest bound any of them states for it; a row
    whose bits changed between appends, as a requantizing cache's may, is a read of its own).

    Returns, per layer and append, the variable number of each of its K rows' and V rows' first element (n,)
    (element e of a row is that number + e), and every variable's bound (m,)."""
    table: list[list[tuple[np.ndarray, np.ndarray]]] = []
    rows: list[np.ndarray] = []  # one bound row (H * D,) per distinct read
    seen: dict[tuple, int] = {}

    def number(key: tuple, bound: np.ndarray) -> int:
        at = seen.setdefault(key, len(rows))
        if at == len(rows):
            rows.append(np.array(bound, np.float64))
        else:
            rows[at] = np.maximum(rows[at], bound)
        return at * len(bound)

    for li, r in enumerate(reads):
        layer = []
        for _start, _count, base, k_read, v_read, ek, ev in r.appends:
            kn = [number((li, "K", base + i, k_read[i].tobytes()), ek[i]) for i in range(len(ek))]
            vn = [number((li, "V", base + i, v_read[i].tobytes()), ev[i]) for i in range(len(ev))]
            layer.append((np.array(kn, np.int64), np.array(vn, np.int64)))
        table.append(layer)
    return table, (np.concatenate(rows) if rows else np.zeros(0))


def forward(
    model, tokens: list[int], window: int | None, reads: list[Reads], actual: bool, shifts: list | None = None
) -> tuple[Dual, list]:
    """impl's ``model`` on ``tokens`` in float64, with derivatives with respect to every read's perturbation.

    ``actual`` False: every row attention reads is the row this forward wrote there, plus its perturbation (each
    element of each append's read its own variable, scaled by that read's stated bound, so |d logit| summed over
    the variables is the first-order bound). ``actual`` True: the rows the decode's cache actually handed
    attention (no variables). ``shifts`` (with ``actual`` False): no variables; every row attention reads is the
    row this forward wrote plus ``shifts[layer][append]`` = (dK, dV) (n, H * D): a run with given read errors.
    Returns the logits (T, vocab) and each layer's written (K, V) rows (T, H * D).
    """
    c = model.config
    t = len(tokens)
    pos = np.arange(t)
    table, bounds = ([], np.zeros(0)) if actual or shifts is not None else symbols(reads)
    m = len(bounds)
    zeros = lambda *shape: np.zeros(shape + (m,))  # noqa: E731
    emb = np.asarray(model.embed, np.float64)[np.asarray(tokens)]
    x = Dual(emb, zeros(*emb.shape))
    hq, hkv, d, g = c.n_heads, c.n_kv_heads, c.head_dim, c.group
    scale = 1.0 / np.sqrt(d)
    written = []
    for li, layer in enumerate(model.layers):
        h = _rmsnorm(x, layer.attn_norm, c.rms_eps)
        qkv = _linear(h, layer.wqkv.weight())
        q = _rope(qkv[:, : c.q_dim].reshape(t, hq, d), pos, c.theta(li))
        k = _rope(qkv[:, c.q_dim : c.q_dim + c.kv_dim].reshape(t, hkv, d), pos, c.theta(li))
        v = qkv[:, c.q_dim + c.kv_dim :].reshape(t, hkv, d)
        written.append((k.v.reshape(t, c.kv_dim), v.v.reshape(t, c.kv_dim)))
        att = Dual(np.zeros((t, c.q_dim)), zeros(t, c.q_dim))
        for a, (start, count, base, k_read, v_read, ek, _ev) in enumerate(reads[li].appends):
            n = len(ek)
            if actual:
                kr = Dual(k_read.reshape(n, hkv, d).astype(np.float64), zeros(n, hkv, d))
                vr = Dual(v_read.reshape(n, hkv, d).astype(np.float64), zeros(n, hkv, d))
            elif shifts is not None:
                dk, dv = shifts[li][a]
                kr = Dual(k.v[base : base + n] + dk.reshape(n, hkv, d), zeros(n, hkv, d))
                vr = Dual(v.v[base : base + n] + dv.reshape(n, hkv, d), zeros(n, hkv, d))
            else:
                kr, vr = k[base : base + n], v[base : base + n]
                kr = _perturbed(kr, table[li][a][0], bounds)
                vr = _perturbed(vr, table[li][a][1], bounds)
            for p in range(start, start + count):
                lo = max(0 if window is None else p - window + 1, base) - base
                o = _attend(q[p].reshape(hkv, g, d), kr[lo : p + 1 - base], vr[lo : p + 1 - base], scale)
                att.v[p], att.t[p] = o.v.reshape(-1), o.t.reshape(c.q_dim, m)
        x = _add(x, _linear(att, layer.wo.weight()))
        h = _rmsnorm(x, layer.ffn_norm, c.rms_eps)
        gu = _linear(h, layer.w_gate_up.weight())
        x = _add(x, _linear(_mul(_silu(gu[:, : c.ffn]), gu[:, c.ffn :]), layer.w_down.weight()))
    return _linear(_rmsnorm(x, model.norm, c.rms_eps), model.head.weight()), written


def _perturbed(rows: Dual, first: np.ndarray, bounds: np.ndarray) -> Dual:
    """``rows`` (n, H, D) plus its read variables: element e of row i is variable first[i] + e, whose derivative is
    its bound (so a variable in [-1, 1] is a read error within the bound)."""
    n, h, d = rows.v.shape
    t = rows.t.reshape(n, h * d, -1).copy()
    var = first[:, None] + np.arange(h * d)[None, :]  # (n, H * D)
    t[np.arange(n)[:, None], np.arange(h * d)[None, :], var] += bounds[var]
    return Dual(rows.v, t.reshape(n, h, d, -1))


def nudged(reads: list[Reads], table: list, var: int, h: float) -> list:
    """``shifts`` for :func:`forward` that move read variable ``var`` by ``h`` (every read that shares it) and
    nothing else."""
    out = []
    for li, r in enumerate(reads):
        layer = []
        for a, e in enumerate(r.appends):
            moved = []
            for which, bound in ((0, e[5]), (1, e[6])):
                d = np.zeros(bound.shape)
                first = table[li][a][which]
                rows = np.flatnonzero((var >= first) & (var < first + bound.shape[1]))
                d[rows, var - first[rows]] = h
                moved.append(d)
            layer.append((moved[0], moved[1]))
        out.append(layer)
    return out


def derivative_error(
    model, tokens: list[int], window: int | None, reads: list[Reads], exact: Dual, n: int = 3
) -> float:
    """The worst disagreement of :func:`forward`'s derivatives with central differences of the same forward, over
    ``n`` read variables (the one the largest B1 leans on most, then evenly spaced ones), relative to the largest
    derivative of each (at least 1e-3): the check that B1 is the model's first-order effect, on every example."""
    table, bounds = symbols(reads)
    m = len(bounds)
    if m == 0:
        return 0.0
    b1 = np.abs(exact.t).sum(axis=-1)
    p, j = np.unravel_index(int(np.argmax(b1)), b1.shape)
    picks = {int(np.argmax(np.abs(exact.t[p, j])))} | {int(i) for i in np.linspace(0, m - 1, n - 1)}
    h = 1e-5
    worst = 0.0
    for var in sorted(picks):
        plus = forward(model, tokens, window, reads, actual=False, shifts=nudged(reads, table, var, h))[0].v
        minus = forward(model, tokens, window, reads, actual=False, shifts=nudged(reads, table, var, -h))[0].v
        numeric = (plus - minus) / (2 * h)
        analytic = exact.t[..., var] / bounds[var] if bounds[var] > 0 else numeric
        # a derivative that is 0 (a key alone in its softmax) has differences of rounding noise (eps |F| / h,
        # about 1e-10): the scale is at least 1e-3, far below the derivatives that matter (0.1 - 1 here)
        scale = max(float(np.abs(numeric).max()), float(np.abs(analytic).max()), 1e-3)
        worst = max(worst, float(np.abs(numeric - analytic).max()) / scale)
    return worst


def misread(reads: list[Reads], window: int | None) -> str:
    """The first row attention read that is not within its stated bound of the row the runtime wrote there (the
    recorded writes, float32), as a sentence; "" when none (a NaN read is never within a bound)."""
    for li, r in enumerate(reads):
        wk = np.concatenate(r.written_k) if r.written_k else np.zeros((0, 0))
        wv = np.concatenate(r.written_v) if r.written_v else np.zeros((0, 0))
        for start, count, base, k_read, v_read, ek, ev in r.appends:
            lo = 0 if window is None else max(0, start - window + 1)  # the first query's lowest visible position
            if base > lo:
                return (
                    f"layer {li}: the append of positions {start}..{start + count - 1} handed attention rows from "
                    f"position {base} on, but its first query must see position {lo} and on"
                )
            n = len(ek)
            if len(k_read) < n or len(v_read) < n:
                return (
                    f"layer {li}: the append of positions {start}..{start + count - 1} handed attention "
                    f"{min(len(k_read), len(v_read))} rows from position {base} on; its queries read {n}"
                )
            for name, got, want, bound in (("K", k_read, wk, ek), ("V", v_read, wv, ev)):
                err = np.abs(got.astype(np.float64) - want[base : base + n]) - bound
                err[: max(lo - base, 0)] = -1  # rows below the window are not read
                if not (err <= 0).all():  # NaN too: a NaN read is never within a bound
                    row, col = np.unravel_index(int(np.argmax(np.where(np.isnan(err), np.inf, err))), err.shape)
                    return (
                        f"layer {li}: the append of positions {start}..{start + count - 1} handed attention a {name} "
                        f"row for position {base + row} that differs from the row written there by "
                        f"{err[row, col] + bound[row, col]:.3g} at element {col}, past the stated bound "
                        f"{bound[row, col]:.3g}"
                    )
    return ""
