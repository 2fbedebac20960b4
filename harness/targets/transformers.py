"""Thin adapters over the installed transformers' KV cache classes, one target per layer class.

Each cache is built the documented way, from a config: ``DynamicCache(config=...)``,
``StaticCache(config=..., max_cache_len=...)``, ``QuantizedCache(backend, config)``;
a ``LlamaConfig`` gives full-attention layers, a ``MistralConfig(sliding_window=W)``
sliding ones. Every verb is one documented call on the ``Cache``:

    append(k, v)     per layer: get_mask_sizes(T, layer), then update(k[layer], v[layer], layer)
                     (a model asks for the mask sizes before it updates the layer)
    read()           the layer's ``keys``/``values`` (the first get_seq_length() rows; a sliding
                     layer holds the last rows up to get_seq_length(); a quantized layer's
                     dequantized states): rows_* below
    len(handle)      get_seq_length()
    truncate(n)      crop(n - get_seq_length()): crop takes the (negative) count to remove
    fork()           copy.deepcopy(cache), as transformers' docs reuse a prompt cache
    reorder(idx)     reorder_cache(torch.tensor(idx))
    select(idx)      batch_select_indices(torch.tensor(idx))
    repeat(r)        batch_repeat_interleave(r)
    mask_sizes(q)    get_mask_sizes(q, 0)

The functions named ``tf_*`` and ``rows_*`` are the only code that touches the
library; they import what they use and read no module global, because
:mod:`harness.targets.repro` copies their source verbatim into a reproduction
script. A handle made with a :class:`~harness.targets.repro.Trace` writes each
call it makes there, tensors spelled out literally.

NOTE: torch and transformers are optional (the ``oracle`` extra); nothing here
imports them at module import. A target whose library or quantization backend
is not installed is listed with ``unavailable`` saying what to install.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from harness.targets.protocol import (
    Geometry,
    Handle,
    Numerics,
    Rows,
    Target,
    Visible,
    check_rows,
    not_capable,
)
from harness.targets.repro import Trace

DISTRIBUTION = "transformers"
SOURCE = "transformers/cache_utils.py"  # refs are relative to site-packages

# ---------------------------------------------------------------- the library-facing functions (copied into scripts)


def tf_append(cache, k, v):
    """Append k, v (L, B, H, T, D) layer by layer as a model does; what attention got, and the mask sizes."""
    import torch

    ks, vs, sizes = [], [], []
    for layer in range(k.shape[0]):
        sizes.append(tuple(int(x) for x in cache.get_mask_sizes(k.shape[3], layer)))
        kk, vv = cache.update(k[layer], v[layer], layer)
        ks.append(kk)
        vs.append(vv)
    length, offset = sizes[0]
    if any(s != sizes[0] for s in sizes) or any(kk.shape != ks[0].shape for kk in ks):
        raise AssertionError(f"layers of one class disagree: mask sizes {sizes}, rows {[kk.shape for kk in ks]}")
    return torch.stack(ks).numpy().copy(), torch.stack(vs).numpy().copy(), length, offset


def tf_truncate(cache, n):
    """Keep positions [0, n): crop takes the number of positions to remove, as a negative int."""
    cache.crop(n - int(cache.get_seq_length()))


def rows_full(cache, b, h, d):
    """K, V (L, B, H, n, D) and positions 0..n-1 of full-attention layers (DynamicLayer, StaticLayer)."""
    import numpy as np

    n = int(cache.get_seq_length())
    ks, vs = [], []
    for layer in cache.layers:
        if n <= 0 or layer.keys is None:
            ks.append(np.zeros((b, h, 0, d), np.float32))
            vs.append(np.zeros((b, h, 0, d), np.float32))
        else:
            ks.append(layer.keys[:, :, :n].numpy().copy())
            vs.append(layer.values[:, :, :n].numpy().copy())
    return np.stack(ks), np.stack(vs), np.arange(max(n, 0))


def rows_dynamic_sliding(cache, b, h, d):
    """DynamicSlidingWindowLayer: the rows it holds are the last ones before get_seq_length()."""
    import numpy as np

    n = int(cache.get_seq_length())
    ks, vs = [], []
    for layer in cache.layers:
        if n <= 0 or layer.keys is None or layer.keys.dim() != 4:
            ks.append(np.zeros((b, h, 0, d), np.float32))
            vs.append(np.zeros((b, h, 0, d), np.float32))
        else:
            ks.append(layer.keys.numpy().copy())
            vs.append(layer.values.numpy().copy())
    held = ks[0].shape[2]
    return np.stack(ks), np.stack(vs), np.arange(n - held, n)


def rows_static_sliding(cache, b, h, d):
    """StaticSlidingWindowLayer: positions 0..n-1 while n <= its size, else the last max_cache_len of them."""
    import numpy as np

    n = int(cache.get_seq_length())
    ks, vs = [], []
    for layer in cache.layers:
        if n <= 0 or layer.keys is None:
            ks.append(np.zeros((b, h, 0, d), np.float32))
            vs.append(np.zeros((b, h, 0, d), np.float32))
        else:
            held = min(n, layer.max_cache_len)
            ks.append(layer.keys[:, :, :held].numpy().copy())
            vs.append(layer.values[:, :, :held].numpy().copy())
    held = ks[0].shape[2]
    return np.stack(ks), np.stack(vs), np.arange(n - held, n)


def rows_quantized(cache, b, h, d):
    """A quantized layer's states as attention gets them: the dequantized states (and a residual, if any)."""
    import numpy as np
    import torch

    n = int(cache.get_seq_length())
    ks, vs = [], []
    for layer in cache.layers:
        if n <= 0 or not layer.is_initialized:
            ks.append(np.zeros((b, h, 0, d), np.float32))
            vs.append(np.zeros((b, h, 0, d), np.float32))
            continue
        # NOTE: the states live in private attributes; _dequantize is what update() itself reads them with
        kq, vq = layer._dequantize(layer._quantized_keys), layer._dequantize(layer._quantized_values)
        if layer.keys is not None and layer.keys.dim() == 4:  # a residual of unquantized rows (KIVI layers)
            kq, vq = torch.cat([kq, layer.keys], dim=-2), torch.cat([vq, layer.values], dim=-2)
        ks.append(kq.numpy().copy())
        vs.append(vq.numpy().copy())
    return np.stack(ks), np.stack(vs), np.arange(max(n, 0))


# ---------------------------------------------------------------- one handle


@dataclass(frozen=True)
class CacheSpec:
    """How one target's cache is built: the cache class, its config class and arguments, how it is read."""

    cache: str  # "DynamicCache", "StaticCache" or "QuantizedCache"
    config: str  # "LlamaConfig" (full attention) or "MistralConfig" (sliding window)
    rows: Callable
    backend: str = ""  # QuantizedCache's backend
    static: bool = False  # takes max_cache_len
    sliding: str = ""  # "dynamic" or "static": how window=None is widened past capacity

    def window_for(self, window: int | None, capacity: int) -> int | None:
        """The sliding window to build with; None means 'no position ever leaves it' (wider than capacity)."""
        if not self.sliding:
            return None
        if window is not None:
            return window
        # DynamicSlidingWindowLayer keeps W - 1 rows, StaticSlidingWindowLayer W (and is croppable while
        # max_cache_len <= W): these widths keep every one of `capacity` positions
        return capacity + 1 if self.sliding == "dynamic" else capacity

    def construct(self, transformers, n_layers: int, window: int | None, capacity: int):
        """The cache :meth:`source` spells, built from the ``transformers`` module."""
        kw = {"num_hidden_layers": n_layers} | ({"sliding_window": window} if window is not None else {})
        config = getattr(transformers, self.config)(**kw)
        cls = getattr(transformers, self.cache)
        if self.cache == "QuantizedCache":
            return cls(self.backend, config)
        return cls(config=config, max_cache_len=capacity) if self.static else cls(config=config)

    def source(self, n_layers: int, window: int | None, capacity: int) -> str:
        """The constructor call, as source (the adapter evaluates the same objects, the script this text)."""
        cfg = f"num_hidden_layers={n_layers}" + (f", sliding_window={window}" if window is not None else "")
        config = f"{self.config}({cfg})"
        if self.cache == "QuantizedCache":
            return f"QuantizedCache({self.backend!r}, {config})"
        if self.static:
            return f"{self.cache}(config={config}, max_cache_len={capacity})"
        return f"{self.cache}(config={config})"


class TransformersHandle:
    """One transformers ``Cache`` behind the target verbs; writes each library call to ``trace`` when given."""

    def __init__(self, target: Target, spec: CacheSpec, geometry: Geometry, batch: int, window, capacity, trace):
        import torch  # noqa: F401  (fail here, not in the middle of a verb, when torch is missing)
        import transformers

        self.target, self.spec, self.geometry, self.batch = target, spec, geometry, batch
        self.window = window
        built = spec.window_for(window, capacity)
        src = spec.source(geometry.n_layers, built, capacity)
        self.cache = spec.construct(transformers, geometry.n_layers, built, capacity)
        self.trace: Trace | None = trace
        self.var = ""
        if trace is not None:
            trace.need("import copy", "import numpy as np", "import torch")
            trace.need(f"from transformers import {spec.cache}, {spec.config}")
            self.var = trace.name("cache")
            trace.call(f"{self.var} = {src}")

    # -- what the script says for the reads (checks use these)

    def src_rows(self) -> str:
        fn = self.trace.function(self.spec.rows) if self.trace is not None else self.spec.rows.__name__
        g = self.geometry
        return f"{fn}({self.var}, {self.batch}, {g.n_kv_heads}, {g.head_dim})"

    def src_len(self) -> str:
        return f"int({self.var}.get_seq_length())"

    def _attempt(self, stmt: str, result: str = "") -> None:
        if self.trace is not None:
            self.last_flag = self.trace.attempt(stmt, result)

    # -- the verbs

    def __len__(self) -> int:
        return int(self.cache.get_seq_length())

    def mask_sizes(self, query_len: int) -> tuple[int, int]:
        length, offset = self.cache.get_mask_sizes(query_len, 0)
        return int(length), int(offset)

    def append(self, k: np.ndarray, v: np.ndarray) -> Visible:
        import torch

        check_rows(self.geometry, self.batch, k, v)
        if self.trace is not None:
            fn = self.trace.function(tf_append)
            self.last_seen = self.trace.name("seen")
            args = f"{self.var}, {self.trace.tensor(k)}, {self.trace.tensor(v)}"
            self._attempt(f"{self.last_seen} = {fn}({args})", self.last_seen)
        kk, vv, length, offset = tf_append(self.cache, torch.tensor(k), torch.tensor(v))
        return Visible(kk, vv, offset + np.arange(kk.shape[3], dtype=np.int64), length, offset)

    def read(self) -> Rows:
        g = self.geometry
        k, v, pos = self.spec.rows(self.cache, self.batch, g.n_kv_heads, g.head_dim)
        return Rows(k, v, np.asarray(pos, dtype=np.int64))

    def truncate(self, n: int) -> None:
        if "truncate" not in self.target.capabilities:
            raise not_capable(self.target, f"truncate({n})", "truncate")
        if self.trace is not None:
            self._attempt(f"{self.trace.function(tf_truncate)}({self.var}, {n!r})")
        tf_truncate(self.cache, n)

    def fork(self) -> TransformersHandle:
        import copy

        h = TransformersHandle.__new__(TransformersHandle)
        h.__dict__.update(self.__dict__)
        if self.trace is not None:
            h.var = self.trace.name("cache")
            self._attempt(f"{h.var} = copy.deepcopy({self.var})")
        h.cache = copy.deepcopy(self.cache)
        return h

    def _index(self, verb: str, idx: Sequence[int]) -> object:
        import torch

        if self.trace is not None:
            self._attempt(f"{self.var}.{verb}(torch.tensor({[int(i) for i in idx]!r}))")
        return torch.tensor([int(i) for i in idx])

    def reorder(self, idx: Sequence[int]) -> None:
        self.cache.reorder_cache(self._index("reorder_cache", idx))

    def select(self, idx: Sequence[int]) -> None:
        t = self._index("batch_select_indices", idx)
        self.batch = len(idx)  # what the caller asked for, whatever the cache did
        self.cache.batch_select_indices(t)

    def repeat(self, r: int) -> None:
        if self.trace is not None:
            self._attempt(f"{self.var}.batch_repeat_interleave({int(r)!r})")
        self.batch *= int(r)
        self.cache.batch_repeat_interleave(int(r))


# ---------------------------------------------------------------- the targets


def missing(module: str) -> bool:
    """True when ``module`` cannot be found (without importing it)."""
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a missing parent package
        return True


def unavailable(backend: str = "") -> str:
    """Why these targets cannot run here ("" when they can)."""
    for module, fix in (("torch", "pip install '.[oracle]'"), ("transformers", "pip install '.[oracle]'")):
        if missing(module):
            return f"{module} is not installed ({fix})"
    if backend == "quanto" and missing("optimum.quanto"):
        return "optimum-quanto is not installed here (QuantoQuantizedLayer needs it: pip install optimum-quanto)"
    if backend == "hqq" and missing("hqq"):
        return "hqq is not installed here (HQQQuantizedLayer needs it: pip install hqq)"
    return ""


def fp8_bound(calibration: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """|read - x| per element of an Fp8QuantizedLayer, from its documented scheme.

    Per layer one scale, frozen on the first update: s = amax|first states| / 448
    (e4m3's largest value). x / s is rounded to float8_e4m3fn (3 mantissa bits:
    off by at most 2**-4 of |x / s| for a normal value, 2**-10 for a subnormal
    one) and read back as float32 (one more rounding). A value beyond the frozen
    range cannot be stored: the nearest one the format has is +-448 s, so its
    error is at least |x| - 448 s, and that is the bound (saturation).
    """
    x = np.abs(rows.astype(np.float64))
    amax = np.abs(calibration.astype(np.float64)).reshape(calibration.shape[0], -1).max(axis=1)
    s = np.maximum(amax / 448.0, np.finfo(np.float32).tiny).reshape(-1, 1, 1, 1, 1)  # (L, 1, 1, 1, 1)
    inside = np.minimum(x, 448.0 * s)
    return (x - inside) + 2.0**-4 * inside + 2.0**-10 * s + 2.0**-20 * x


FULL = frozenset({"append", "read", "truncate", "fork", "reorder", "select", "repeat", "mask"})
QUANTIZED = frozenset({"append", "read", "fork", "reorder", "select", "repeat", "mask", "quantized"})

SPECS: dict[str, CacheSpec] = {
    "transformers.dynamic": CacheSpec("DynamicCache", "LlamaConfig", rows_full),
    "transformers.static": CacheSpec("StaticCache", "LlamaConfig", rows_full, static=True),
    "transformers.dynamic-sliding": CacheSpec("DynamicCache", "MistralConfig", rows_dynamic_sliding, sliding="dynamic"),
    "transformers.static-sliding": CacheSpec(
        "StaticCache", "MistralConfig", rows_static_sliding, static=True, sliding="static"
    ),
    "transformers.quantized-fp8": CacheSpec("QuantizedCache", "LlamaConfig", rows_quantized, backend="fp8"),
    "transformers.quantized-quanto": CacheSpec("QuantizedCache", "LlamaConfig", rows_quantized, backend="quanto"),
    "transformers.quantized-hqq": CacheSpec("QuantizedCache", "LlamaConfig", rows_quantized, backend="hqq"),
}


def builder(name: str) -> Callable[..., Handle]:
    def build(geometry: Geometry, batch: int, window: int | None, capacity: int, trace: Trace | None = None):
        return TransformersHandle(TARGETS[name], SPECS[name], geometry, batch, window, capacity, trace)

    return build


def refs(*symbols: str) -> tuple[str, ...]:
    return tuple(f"{SOURCE}::{s}" for s in symbols)


# What backs a claim about each verb, per class: the docstrings of transformers 5.24's cache_utils.py and the
# documented use (quoted; a claim a class's own words do not make is not held against it).
CACHE_DOCS = (
    (
        "append",
        "Cache.update: 'Updates the cache with the new key_states and value_states for the layer layer_idx.' "
        "... 'Return: A tuple containing the updated key and value states.'",
    ),
    (
        "read",
        "the layer classes state their storage: keys/values of shape [batch_size, num_heads, seq_len, head_dim]; "
        "get_seq_length: 'Returns the sequence length of the cached states.'",
    ),
    (
        "mask",
        "Cache.get_mask_sizes: 'Return a tuple (kv_length, kv_offset) corresponding to the length and offset "
        "that will be returned for the given layer at layer_idx.'",
    ),
    (
        "fork",
        "transformers' cache docs reuse a prompt cache for several continuations with copy.deepcopy(prompt_cache).",
    ),
    ("reorder", "Cache.reorder_cache: 'Reorder the cache for beam search'."),
    (
        "select",
        "Cache.batch_select_indices: 'Select indices from the cache'; each class's docstring: 'See Cache for "
        "details on common methods that are implemented by all cache classes.'",
    ),
    (
        "repeat",
        "Cache.batch_repeat_interleave: 'Repeat and interleave the cache'; each class's docstring: 'See Cache "
        "for details on common methods that are implemented by all cache classes.'",
    ),
    (
        "truncate",
        "Cache.crop / the layer's crop: 'Remove tokens_to_remove tokens from the current cache layer' (a "
        "negative count; a positive one is refused with a message); Cache.crop: 'crop(0) will not necessarily always "
        "be a no-op, as it may still remove useless states' (crop(0) is a documented call).",
    ),
)
SLIDING_DOCS = (
    (
        "window",
        "DynamicSlidingWindowLayer: 'A cache layer that grows dynamically as more tokens are generated, up "
        "until the sliding window size'; StaticSlidingWindowLayer: static tensors of shape [batch_size, num_heads, "
        "min(max_cache_len, sliding_window), head_dim]; get_mask_sizes gives what update returns.",
    ),
)
FP8_DOCS = (
    (
        "quantized",
        "Fp8QuantizedLayer: 'storing the key and value states in 8-bit floating point. The per-tensor "
        "scale is frozen after the first update, so new states are appended as-is'.",
    ),
)

CROP_CONTRACT = "refuse-or-empty"  # crop's docstring: remove that many tokens; nothing says what "too many" does

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            "transformers.dynamic",
            "DynamicCache of DynamicLayer (LlamaConfig): grows by torch.cat",
            DISTRIBUTION,
            FULL,
            Numerics.exact(),
            refs("DynamicLayer.update", "DynamicLayer.crop", "DynamicLayer.batch_select_indices", "Cache.crop"),
            builder("transformers.dynamic"),
            unavailable(),
            CROP_CONTRACT,
            docs=CACHE_DOCS,
        ),
        Target(
            "transformers.static",
            "StaticCache of StaticLayer (LlamaConfig, max_cache_len = capacity): preallocated, index_copy_",
            DISTRIBUTION,
            FULL,
            Numerics.exact(),
            refs("StaticLayer.update", "StaticLayer.crop", "StaticLayer.get_seq_length", "Cache.batch_select_indices"),
            builder("transformers.static"),
            unavailable(),
            CROP_CONTRACT,
            docs=CACHE_DOCS,
        ),
        Target(
            "transformers.dynamic-sliding",
            "DynamicCache of DynamicSlidingWindowLayer (MistralConfig sliding_window): keeps the last W - 1",
            DISTRIBUTION,
            FULL | {"window"},
            Numerics.exact(),
            refs(
                "DynamicSlidingWindowLayer.update",
                "DynamicSlidingWindowLayer.get_mask_sizes",
                "DynamicSlidingWindowLayer.crop",
            ),
            builder("transformers.dynamic-sliding"),
            unavailable(),
            CROP_CONTRACT,
            windowed=True,
            docs=CACHE_DOCS + SLIDING_DOCS,
        ),
        Target(
            "transformers.static-sliding",
            "StaticCache of StaticSlidingWindowLayer (MistralConfig sliding_window): a rolled buffer of W",
            DISTRIBUTION,
            FULL | {"window"},
            Numerics.exact(),
            refs(
                "StaticSlidingWindowLayer.update",
                "StaticSlidingWindowLayer.get_mask_sizes",
                "StaticSlidingWindowLayer.crop",
            ),
            builder("transformers.static-sliding"),
            unavailable(),
            CROP_CONTRACT,
            windowed=True,
            docs=CACHE_DOCS + SLIDING_DOCS,
        ),
        Target(
            "transformers.quantized-fp8",
            "QuantizedCache('fp8') of Fp8QuantizedLayer: float8_e4m3fn, one scale per layer frozen on the first update",
            DISTRIBUTION,
            QUANTIZED,
            Numerics.lossy(
                fp8_bound,
                "Fp8QuantizedLayer's docstring: 8-bit floating point with a per-tensor scale frozen after the first "
                "update (amax / 448); e4m3 rounds to 3 mantissa bits (2**-4 relative, 2**-10 * scale for "
                "subnormals); a value past the frozen range saturates at 448 * scale (fp8_bound)",
            ),
            refs("Fp8QuantizedLayer.update", "Fp8QuantizedLayer._quantize", "Fp8QuantizedLayer.reorder_cache"),
            builder("transformers.quantized-fp8"),
            unavailable("fp8"),
            docs=CACHE_DOCS + FP8_DOCS,
        ),
        Target(
            "transformers.quantized-quanto",
            "QuantizedCache('quanto') of QuantoQuantizedLayer: KIVI-style int2/int4 groups and a residual",
            DISTRIBUTION,
            QUANTIZED,
            Numerics.lossy(None, "optimum-quanto's group-wise min-max scheme; stated once the backend runs here"),
            refs("QuantizedLayer.update", "QuantoQuantizedLayer._quantize", "QuantizedLayer.reorder_cache"),
            builder("transformers.quantized-quanto"),
            unavailable("quanto"),
            docs=CACHE_DOCS,
        ),
        Target(
            "transformers.quantized-hqq",
            "QuantizedCache('hqq') of HQQQuantizedLayer: KIVI-style groups and a residual",
            DISTRIBUTION,
            QUANTIZED,
            Numerics.lossy(None, "hqq's group-wise scheme; stated once the backend runs here"),
            refs("QuantizedLayer.update", "HQQQuantizedLayer._quantize", "QuantizedLayer.reorder_cache"),
            builder("transformers.quantized-hqq"),
            unavailable("hqq"),
            docs=CACHE_DOCS,
        ),
    )
}
