"""A thin adapter over the installed torchtune's ``KVCache`` (torchtune.modules.KVCache), one per layer.

torchtune's attention owns one ``KVCache`` per layer (``MultiHeadAttention.setup_cache``); the adapter does
the same, built the documented way, ``KVCache(batch_size=B, max_seq_len=capacity, num_kv_heads=H,
head_dim=D, dtype=torch.float32)``, and maps every verb to one documented use:

    append(k, v)     per layer: update(k[layer], v[layer]), which writes at the next positions and returns
                     the whole preallocated buffers (max_seq_len rows; torchtune's decoder masks them with
                     a [b x s x max_seq_len] mask): what attention got, at positions 0..max_seq_len-1
    read()           the layer's k_cache/v_cache, the first ``size`` rows: rows_tt below
    len(handle)      size (cache_pos[0]: the positions written since the last reset)
    fork()           copy.deepcopy(cache): the cache is a standalone nn.Module whose whole state is its
                     registered buffers (k_cache, v_cache, cache_pos)
    mask_sizes(q)    (max_seq_len, 0): update hands attention every row of the buffer, the caller's mask
                     (causal over max_seq_len) hides the ones not written yet

torchtune's KVCache has no truncate but ``reset()`` (back to position 0), and no batch verbs (its batch
is fixed at construction): the target declares neither. The functions named ``tt_*`` and ``rows_*`` are
the only code that touches the library; they import what they use and read no module global, because
:mod:`harness.targets.repro` copies their source verbatim into a reproduction script.

NOTE: torchtune is optional (the ``torchtune`` extra, ``make engines-torchtune``: it needs torchao); nothing
here imports it at module import. Without it the target is listed with ``unavailable`` saying what to install.
"""

from __future__ import annotations

import copy

import numpy as np

from harness.targets.protocol import Geometry, Numerics, Rows, Target, Visible, check_rows, not_capable
from harness.targets.repro import Trace
from harness.targets.transformers import missing

DISTRIBUTION = "torchtune"
SOURCE = "torchtune/modules/kv_cache.py"  # refs are relative to site-packages
INSTALL = "pip install '.[torchtune]' (make engines-torchtune)"

# ---------------------------------------------------------------- the library-facing functions (copied into scripts)


def tt_make(n_layers, batch, capacity, heads, dim):
    """One torchtune KVCache per layer, as MultiHeadAttention.setup_cache builds it (float32)."""
    import torch
    from torchtune.modules import KVCache

    return [
        KVCache(batch_size=batch, max_seq_len=capacity, num_kv_heads=heads, head_dim=dim, dtype=torch.float32)
        for _ in range(n_layers)
    ]


def tt_append(caches, k, v):
    """Append k, v (L, B, H, T, D) layer by layer as torchtune's attention does; what attention got."""
    import torch

    ks, vs = [], []
    for layer, cache in enumerate(caches):
        kk, vv = cache.update(k[layer], v[layer])
        ks.append(kk)
        vs.append(vv)
    return torch.stack(ks).numpy().copy(), torch.stack(vs).numpy().copy(), int(ks[0].shape[2]), 0


def rows_tt(caches, b, h, d):
    """K, V (L, B, H, n, D) and positions 0..n-1: the first ``size`` rows of each layer's buffers."""
    import numpy as np

    n = int(caches[0].size)
    ks = [c.k_cache[:, :, :n].numpy().copy() for c in caches]
    vs = [c.v_cache[:, :, :n].numpy().copy() for c in caches]
    return np.stack(ks), np.stack(vs), np.arange(n)


# ---------------------------------------------------------------- one handle


class TorchtuneHandle:
    """One KVCache per layer behind the target verbs; writes each library call to ``trace`` when given."""

    def __init__(self, target: Target, geometry: Geometry, batch: int, window, capacity: int, trace) -> None:
        self.target, self.geometry, self.batch, self.window = target, geometry, batch, window
        self.capacity = capacity
        g = geometry
        self.caches = tt_make(g.n_layers, batch, capacity, g.n_kv_heads, g.head_dim)
        self.trace: Trace | None = trace
        self.var = ""
        if trace is not None:
            trace.need("import copy", "import numpy as np", "import torch")
            self.var = trace.name("caches")
            fn = trace.function(tt_make)
            trace.call(f"{self.var} = {fn}({g.n_layers}, {batch}, {capacity}, {g.n_kv_heads}, {g.head_dim})")

    def src_rows(self) -> str:
        fn = self.trace.function(rows_tt) if self.trace is not None else rows_tt.__name__
        return f"{fn}({self.var}, {self.batch}, {self.geometry.n_kv_heads}, {self.geometry.head_dim})"

    def src_len(self) -> str:
        return f"int({self.var}[0].size)"

    def _attempt(self, stmt: str, result: str = "") -> None:
        if self.trace is not None:
            self.last_flag = self.trace.attempt(stmt, result)

    def __len__(self) -> int:
        return int(self.caches[0].size)

    def mask_sizes(self, query_len: int) -> tuple[int, int]:
        return self.capacity, 0

    def append(self, k: np.ndarray, v: np.ndarray) -> Visible:
        import torch

        check_rows(self.geometry, self.batch, k, v)
        if self.trace is not None:
            fn = self.trace.function(tt_append)
            self.last_seen = self.trace.name("seen")
            args = f"{self.var}, {self.trace.tensor(k)}, {self.trace.tensor(v)}"
            self._attempt(f"{self.last_seen} = {fn}({args})", self.last_seen)
        kk, vv, length, offset = tt_append(self.caches, torch.tensor(k), torch.tensor(v))
        return Visible(kk, vv, offset + np.arange(kk.shape[3], dtype=np.int64), length, offset)

    def read(self) -> Rows:
        g = self.geometry
        k, v, pos = rows_tt(self.caches, self.batch, g.n_kv_heads, g.head_dim)
        return Rows(k, v, np.asarray(pos, dtype=np.int64))

    def fork(self) -> TorchtuneHandle:
        h = TorchtuneHandle.__new__(TorchtuneHandle)
        h.__dict__.update(self.__dict__)
        if self.trace is not None:
            h.var = self.trace.name("caches")
            self._attempt(f"{h.var} = copy.deepcopy({self.var})")
        h.caches = copy.deepcopy(self.caches)
        return h

    def truncate(self, n: int) -> None:
        raise not_capable(self.target, f"truncate({n})", "truncate")

    def reorder(self, idx) -> None:
        raise not_capable(self.target, "reorder", "reorder")

    def select(self, idx) -> None:
        raise not_capable(self.target, "select", "select")

    def repeat(self, r: int) -> None:
        raise not_capable(self.target, "repeat", "repeat")


# ---------------------------------------------------------------- the target


def unavailable() -> str:
    """Why the target cannot run here ("" when it can)."""
    for module in ("torch", "torchtune", "torchao"):
        if missing(module):
            return f"{module} is not installed here ({INSTALL})"
    return ""


def build(geometry: Geometry, batch: int, window: int | None, capacity: int, trace: Trace | None = None):
    return TorchtuneHandle(TARGETS["torchtune.kvcache"], geometry, batch, window, capacity, trace)


# What backs a claim about each verb: torchtune 0.6.1's docstrings (modules/kv_cache.py, modules/transformer.py).
DOCS = (
    (
        "append",
        "KVCache.update: 'Update KV cache with the new k_val, v_val and return the updated cache.' ... 'it is "
        "assumed that subsequent updates should update key-value positions in consecutive sequence positions' "
        "(the docstring's example: 8 positions, then one more 'will fill at position 8').",
    ),
    (
        "read",
        "KVCache: 'Standalone nn.Module containing a kv-cache to cache past key and values during inference'; "
        "the buffers k_cache, v_cache are (batch_size, num_kv_heads, max_seq_len, head_dim); size: the "
        "positions filled ('now positions 0 through 7 are filled' ... cache.size 8).",
    ),
    (
        "mask",
        "KVCache.update returns 'Updated key and value cache tensors' (the whole buffers); TransformerDecoder."
        "forward: mask 'This parameter is required during inference if caches have been setup' ... 'A value of "
        "True in row i and column j means token i attends to token j' over the cache's max_seq_len columns.",
    ),
    (
        "fork",
        "KVCache is a 'Standalone nn.Module' whose state is its registered buffers (k_cache, v_cache, "
        "cache_pos): copy.deepcopy of a module copies them.",
    ),
)

TARGETS: dict[str, Target] = {
    "torchtune.kvcache": Target(
        "torchtune.kvcache",
        "torchtune KVCache (one per layer, max_seq_len = capacity): preallocated buffers, cache_pos advances",
        DISTRIBUTION,
        frozenset({"append", "read", "fork", "mask"}),
        Numerics.exact(),
        (f"{SOURCE}::KVCache.update", f"{SOURCE}::KVCache.size", f"{SOURCE}::KVCache.reset"),
        build,
        unavailable(),
        docs=DOCS,
    )
}
