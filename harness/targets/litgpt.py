"""Thin adapters over the installed litgpt's ``KVCache`` (litgpt.model.KVCache), one per layer: plain and ring.

litgpt's ``CausalSelfAttention.build_kv_cache`` gives each layer a ``KVCache`` of shape (batch, n_query_groups,
size, head_size): size = max_seq_length, or min(max_seq_length, sliding_window_size) with
``is_sliding_window=True`` on a sliding-window layer (a ring: position p goes to slot p % size). The cache
keeps no length: the caller (``GPT.forward``) passes ``input_pos``, the positions each call writes. The
adapter is that caller, with the length it keeps in a dict beside the caches (``{"caches": [...], "n": n}``):

    append(k, v)     per layer: cache(input_pos=arange(n, n + T), k[layer], v[layer]); the plain cache returns
                     its whole buffers (GPT.forward masks them with mask_cache[input_pos], causal over
                     max_seq_length): positions 0..size-1; the ring returns slots 0..max_pos while max_pos <
                     size, then every slot, which ring_order puts in position order (max_pos - size + 1 ..
                     max_pos); n += T
    read()           the first n rows (plain), or the ring's last min(n, size) positions in order: rows_lg
    len(handle)      n, the next input_pos
    truncate(n)      the next input_pos is n (plain only; what a caller that rejects draft tokens does: the
                     next write lands at n); outside 0..len it is refused
    fork()           copy.deepcopy: each cache is an nn.Module whose state is its buffers k and v
    mask_sizes(q)    plain: (size, 0); ring: what forward will return for q more positions, (max_pos + 1, 0)
                     or (size, max_pos - size + 1)

litgpt's KVCache has no batch verbs (its batch is fixed at construction): the targets declare none. The
functions named ``lg_*`` and ``rows_*`` are the only code that touches the library; they import what they use
and read no module global, because :mod:`harness.targets.repro` copies their source verbatim into a script.

NOTE: litgpt pins huggingface-hub<1.4, which transformers 5 refuses: it lives in a venv of its own,
``make engines-litgpt`` (.venv-litgpt, torch 2.13.0 from this disk + litgpt + kvproof), never in .venv. Nothing
here imports it at module import; without it the targets are listed with ``unavailable`` saying so.
"""

from __future__ import annotations

import copy

import numpy as np

from harness.targets.protocol import Geometry, Numerics, Rows, Target, Visible, check_rows, not_capable
from harness.targets.repro import Trace
from harness.targets.transformers import missing

DISTRIBUTION = "litgpt"
SOURCE = "litgpt/model.py"  # refs are relative to site-packages
INSTALL = "make engines-litgpt, then run kvproof with .venv-litgpt/bin/python (its pins conflict with .venv's)"

# ---------------------------------------------------------------- the library-facing functions (copied into scripts)


def lg_make(n_layers, batch, heads, dim, size, window):
    """One litgpt KVCache per layer as build_kv_cache makes it (float32); window None: the plain cache."""
    import torch
    from litgpt.model import KVCache

    shape = (batch, heads, size, dim)
    sliding = {} if window is None else {"is_sliding_window": True, "sliding_window_size": window}
    return {"caches": [KVCache(shape, shape, dtype=torch.float32, **sliding) for _ in range(n_layers)], "n": 0}


def ring_order(k, v, max_pos):
    """A ring's returned rows (.., size, D) in position order, and those positions (slot = position % size)."""
    import numpy as np

    size = k.shape[-2]
    if max_pos < size:  # not wrapped: forward returned slots 0..max_pos, which hold positions 0..max_pos
        return k, v, np.arange(k.shape[-2])
    pos = np.arange(max_pos - size + 1, max_pos + 1)
    return k[..., pos % size, :], v[..., pos % size, :], pos


def lg_append(state, k, v):
    """Append k, v (L, B, H, T, D) as GPT.forward does (input_pos = the next T positions); what attention got."""
    import torch

    n, t = state["n"], k.shape[3]
    input_pos = torch.arange(n, n + t)
    ks, vs = [], []
    for layer, cache in enumerate(state["caches"]):
        kk, vv = cache(input_pos, k[layer], v[layer])
        ks.append(kk)
        vs.append(vv)
    state["n"] = n + t
    k_all, v_all = torch.stack(ks).numpy().copy(), torch.stack(vs).numpy().copy()
    if not state["caches"][0].is_sliding_window:
        return k_all, v_all, k_all.shape[3], 0
    k_all, v_all, pos = ring_order(k_all, v_all, n + t - 1)
    return k_all, v_all, len(pos), int(pos[0])


def lg_truncate(state, n):
    """The next write lands at position n (0 <= n <= length; refused otherwise)."""
    if not 0 <= n <= state["n"]:
        raise ValueError(f"truncate({n}): keep 0..{state['n']} positions")
    state["n"] = n


def rows_lg(state, b, h, d):
    """K, V (L, B, H, held, D) and their positions: the last min(n, size) positions written, in order."""
    import numpy as np

    n, caches = state["n"], state["caches"]
    size = caches[0].k.shape[2]
    held = np.arange(max(0, n - size), n) if caches[0].is_sliding_window else np.arange(n)
    ks = [c.k[:, :, held % size].numpy().copy() for c in caches]
    vs = [c.v[:, :, held % size].numpy().copy() for c in caches]
    return np.stack(ks), np.stack(vs), held


# ---------------------------------------------------------------- one handle


class LitgptHandle:
    """One litgpt KVCache per layer and the next input_pos behind the target verbs; traces each library call."""

    def __init__(self, target: Target, geometry: Geometry, batch: int, window, capacity: int, trace) -> None:
        self.target, self.geometry, self.batch, self.window = target, geometry, batch, window
        built = None if not target.windowed else (window if window is not None else capacity)
        size = capacity if built is None else min(capacity, built)  # build_kv_cache's effective_cache_size
        self.size, self.built = size, built
        g = geometry
        self.state = lg_make(g.n_layers, batch, g.n_kv_heads, g.head_dim, size, built)
        self.trace: Trace | None = trace
        self.var = ""
        if trace is not None:
            trace.need("import copy", "import numpy as np", "import torch")
            self.var = trace.name("state")
            fn = trace.function(lg_make)
            trace.call(f"{self.var} = {fn}({g.n_layers}, {batch}, {g.n_kv_heads}, {g.head_dim}, {size}, {built!r})")

    def src_rows(self) -> str:
        fn = self.trace.function(rows_lg) if self.trace is not None else rows_lg.__name__
        return f"{fn}({self.var}, {self.batch}, {self.geometry.n_kv_heads}, {self.geometry.head_dim})"

    def src_len(self) -> str:
        return f"{self.var}['n']"

    def _attempt(self, stmt: str, result: str = "") -> None:
        if self.trace is not None:
            self.last_flag = self.trace.attempt(stmt, result)

    def __len__(self) -> int:
        return int(self.state["n"])

    def mask_sizes(self, query_len: int) -> tuple[int, int]:
        if self.built is None:
            return self.size, 0
        max_pos = len(self) + query_len - 1
        return (max_pos + 1, 0) if max_pos < self.size else (self.size, max_pos - self.size + 1)

    def append(self, k: np.ndarray, v: np.ndarray) -> Visible:
        import torch

        check_rows(self.geometry, self.batch, k, v)
        if self.trace is not None:
            self.trace.function(ring_order)
            fn = self.trace.function(lg_append)
            self.last_seen = self.trace.name("seen")
            args = f"{self.var}, {self.trace.tensor(k)}, {self.trace.tensor(v)}"
            self._attempt(f"{self.last_seen} = {fn}({args})", self.last_seen)
        try:
            kk, vv, length, offset = lg_append(self.state, torch.tensor(k), torch.tensor(v))
        except ValueError as e:
            refused(e)
            raise
        return Visible(kk, vv, offset + np.arange(kk.shape[3], dtype=np.int64), length, offset)

    def read(self) -> Rows:
        g = self.geometry
        k, v, pos = rows_lg(self.state, self.batch, g.n_kv_heads, g.head_dim)
        return Rows(k, v, np.asarray(pos, dtype=np.int64))

    def truncate(self, n: int) -> None:
        if "truncate" not in self.target.capabilities:
            raise not_capable(self.target, f"truncate({n})", "truncate")
        if self.trace is not None:
            self._attempt(f"{self.trace.function(lg_truncate)}({self.var}, {n!r})")
        lg_truncate(self.state, n)

    def fork(self) -> LitgptHandle:
        h = LitgptHandle.__new__(LitgptHandle)
        h.__dict__.update(self.__dict__)
        if self.trace is not None:
            h.var = self.trace.name("state")
            self._attempt(f"{h.var} = copy.deepcopy({self.var})")
        h.state = copy.deepcopy(self.state)
        return h

    def reorder(self, idx) -> None:
        raise not_capable(self.target, "reorder", "reorder")

    def select(self, idx) -> None:
        raise not_capable(self.target, "select", "select")

    def repeat(self, r: int) -> None:
        raise not_capable(self.target, "repeat", "repeat")


def refused(e: ValueError) -> None:
    """A ring's documented refusal of a chunk longer than itself (litgpt PR 2215: 'Please use chunked prefill with
    chunk size <= {max_cache_len}'): inside a Hypothesis example the example does not apply (rejected, as an
    assume() would), so a witness draws another; anywhere else the ValueError stands. The ring is unchanged:
    forward raises before it writes."""
    from hypothesis import reject
    from hypothesis.control import currently_in_test_context

    if str(e).startswith("Prefill length") and currently_in_test_context():
        reject()


# ---------------------------------------------------------------- the targets


def unavailable() -> str:
    """Why these targets cannot run here ("" when they can)."""
    for module in ("torch", "litgpt"):
        if missing(module):
            return f"{module} is not installed here ({INSTALL})"
    return ""


def builder(name: str):
    def build(geometry: Geometry, batch: int, window: int | None, capacity: int, trace: Trace | None = None):
        return LitgptHandle(TARGETS[name], geometry, batch, window, capacity, trace)

    return build


# What backs a claim about each verb: litgpt 0.5.13's docstrings and comments (model.py).
DOCS = (
    (
        "append",
        "KVCache.forward: 'Writes new values k and v into the cache at the positions specified by input_pos along "
        "the sequence dimension (max_seq_length).' ... 'Returns the full buffers, adjusted to the batch size bs.'",
    ),
    ("read", "KVCache: 'Buffers k, v have shape (batch_size, n_query_groups, max_seq_length, head_size).'"),
    (
        "mask",
        "GPT.forward: 'If input_pos is provided, the KV cache uses K and V vectors for positions smaller than "
        "entries in input_pos' ... 'Without input_pos_maxp1, the computation uses the full KV cache "
        "(max_seq_length) with masking applied' (mask = mask_cache[input_pos], causal).",
    ),
    (
        "truncate",
        "KVCache.forward writes 'at the positions specified by input_pos': a caller that rewinds (rejected "
        "draft tokens) passes the earlier positions again and they are overwritten.",
    ),
    ("fork", "KVCache is an nn.Module whose state is its registered buffers k and v: copy.deepcopy copies them."),
)
RING_DOCS = (
    (
        "window",
        "KVCache.forward: '# Circular buffer for sliding window' (cache_positions = input_pos % max_cache_len; "
        "build_kv_cache: effective_cache_size = min(max_seq_length, sliding_window_size)); its refusal of a longer "
        "prefill: 'Please use chunked prefill with chunk size <= {max_cache_len} to avoid this issue'; "
        "CausalSelfAttention: a query at i sees window_start = max(0, i - sliding_window_size + 1) .. i.",
    ),
)

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            "litgpt.kvcache",
            "litgpt KVCache (one per layer, max_seq_length = capacity): preallocated, index_copy_ at input_pos",
            DISTRIBUTION,
            frozenset({"append", "read", "truncate", "fork", "mask"}),
            Numerics.exact(),
            (f"{SOURCE}::KVCache.forward", f"{SOURCE}::GPT.forward", f"{SOURCE}::batched_index_copy_"),
            builder("litgpt.kvcache"),
            unavailable(),
            docs=DOCS,
        ),
        Target(
            "litgpt.kvcache-sliding",
            "litgpt KVCache with is_sliding_window (size min(capacity, W)): a ring at input_pos % size",
            DISTRIBUTION,
            frozenset({"append", "read", "fork", "mask", "window"}),
            Numerics.exact(),
            (
                f"{SOURCE}::KVCache.forward",
                f"{SOURCE}::CausalSelfAttention.build_kv_cache",
                f"{SOURCE}::CausalSelfAttention.forward",
            ),
            builder("litgpt.kvcache-sliding"),
            unavailable(),
            windowed=True,
            docs=DOCS[:3] + DOCS[4:] + RING_DOCS,
        ),
    )
}
