"""Liars for the argument and bookkeeping contracts (cards KV-T5, PKV-POOL, IMPL-ARGS, RING-T4).

Each is a plausible wrong version of one impl function: an off-by-one in a
range check, a missing type check, a pool that forgets what it grew to, a
byte count that leaves an array out. They change no numerics, which is why
no numerical card noticed them. A card that lists one must have a witness
that fails under it.
"""

from __future__ import annotations

import numpy as np

from impl.errors import CacheError
from witnesses.liars import liar

# ---- KV-T5: contiguous truncate ---------------------------------------------------------------


@liar(
    "contracts.kv_truncate_keeps_one_more",
    target="impl.kv:KVCache.truncate",
    why="an off-by-one rewind: keeps rows [0, n] instead of [0, n), so the next append lands one row late",
)
def kv_truncate_keeps_one_more(self, n):
    from impl.errors import CacheError

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= self._n:
        raise CacheError(f"truncate(n={n!r}): n must be an int in 0..{self._n}")
    self._n = min(int(n) + 1, self._n)


@liar(
    "contracts.kv_truncate_refuses_len",
    target="impl.kv:KVCache.truncate",
    why="a range check written with < instead of <=: truncate(len(cache)), the no-op rewind, is refused",
    raises=CacheError,  # the refusal is the lie: a witness that fails because a valid rewind was refused caught it
)
def kv_truncate_refuses_len(self, n):
    from impl.errors import CacheError

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n < self._n:
        raise CacheError(f"truncate(n={n!r}): n must be an int in 0..{self._n - 1}")
    self._n = int(n)


@liar(
    "contracts.kv_truncate_takes_any_number",
    target="impl.kv:KVCache.truncate",
    why="checks the range but not the type: truncate(1.5) sets a float length, truncate(True) keeps one row",
)
def kv_truncate_takes_any_number(self, n):
    from impl.errors import CacheError

    if not 0 <= n <= self._n:
        raise CacheError(f"truncate(n={n}): n must be in 0..{self._n}")
    self._n = n


# ---- KV-T5: contiguous evict's argument checks ---------------------------------------------------


@liar(
    "contracts.kv_evict_refuses_empty_tail",
    target="impl.kv:KVCache.evict",
    factory=True,
    why="tests start >= len instead of start > len: evict(len(cache), 0), a no-op at the end, is refused",
    raises=CacheError,  # the refusal is the lie
)
def make_evict_refuses_empty_tail(original):
    def evict(self, start, n):
        from impl.errors import CacheError

        if isinstance(start, (int, np.integer)) and not isinstance(start, bool) and start == self._n:
            raise CacheError(f"evict(start={start}, n={n}): start must be < {self._n}")
        return original(self, start, n)

    return evict


@liar(
    "contracts.kv_evict_past_end_silent",
    target="impl.kv:KVCache.evict",
    factory=True,
    why="forgets the start == len, n > 0 case: evicting past the end returns 0 instead of refusing",
)
def make_evict_past_end_silent(original):
    def evict(self, start, n):
        if (
            isinstance(start, (int, np.integer))
            and isinstance(n, (int, np.integer))
            and not isinstance(start, bool)
            and not isinstance(n, bool)
            and start == self._n
            and n > 0
        ):
            return 0
        return original(self, start, n)

    return evict


@liar(
    "contracts.kv_evict_no_clamp",
    target="impl.kv:KVCache.evict",
    factory=True,
    why="clamps the span to the end for the copy but returns (and subtracts) the n asked for, not the n removed",
)
def make_evict_no_clamp(original):
    def evict(self, start, n):
        removed = original(self, start, n)
        if removed < n:
            self._n = max(0, self._n - (n - removed))
            return n
        return removed

    return evict


# ---- KV-T5: paged truncate ------------------------------------------------------------------------


@liar(
    "contracts.paged_truncate_no_upper_bound",
    target="impl.paged:PagedSequence.truncate",
    factory=True,
    why="checks n >= 0 but not n <= len: truncate(len + k) 'lengthens' the sequence over rows never written",
)
def make_paged_truncate_no_upper_bound(original):
    def truncate(self, n):
        if isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n > len(self):
            self._check_live("truncate", f"n={n}")
            self._n, self._gathered = int(n), None  # what the real body does for such n, minus the check
            return
        original(self, n)

    return truncate


# ---- PKV-POOL: growth ----------------------------------------------------------------------------


@liar(
    "contracts.pool_forgets_grown_size",
    target="impl.paged:BlockPool.ensure_free",
    factory=True,
    why="grows the storage, the counts and the free list but never updates num_blocks: num_used goes wrong "
    "and the new ids are refused as 'not a block of this pool'",
)
def make_pool_forgets_grown_size(original):
    def ensure_free(self, n):
        size = self.num_blocks
        original(self, n)
        self.num_blocks = size

    return ensure_free


@liar(
    "contracts.pool_grows_one_doubling",
    target="impl.paged:BlockPool.ensure_free",
    factory=True,
    why="doubles once whatever was asked: ensure_free(n) for n beyond twice the pool returns with fewer "
    "than n blocks free",
)
def make_pool_grows_one_doubling(original):
    def ensure_free(self, n):
        if self.grow and n > self.num_free:
            n = min(n, 2 * self.num_blocks - self.num_used)  # what one doubling frees, not what was asked
        original(self, n)

    return ensure_free


@liar(
    "contracts.pool_grow_drops_rows",
    target="impl.paged:BlockStorage.grow",
    why="reallocates the grown storage without copying the old blocks: every held block reads zeros",
)
def pool_grow_drops_rows(self, num_blocks):
    shape = (self.k.shape[0], num_blocks) + self.k.shape[2:]
    self.k, self.k_raw, self.v = (np.zeros(shape, np.float32) for _ in range(3))


# ---- PKV-POOL: byte counts -----------------------------------------------------------------------


@liar(
    "contracts.paged_nbytes_counts_rows",
    target="impl.paged:PagedSequence.nbytes",
    factory=True,
    why="counts the rows in use, not the blocks held: the unused tail of the last block goes uncounted",
)
def make_paged_nbytes_counts_rows(original):
    def nbytes(self):
        g = self.pool.geometry
        return self._n * 3 * g.n_layers * g.kv_dim * 4

    return property(nbytes)


@liar(
    "contracts.pool_block_nbytes_two_arrays",
    target="impl.paged:BlockPool.block_nbytes",
    factory=True,
    why="a block's bytes counted as K and V only: the pre-RoPE keys every block also holds are left out",
)
def make_block_nbytes_two_arrays(original):
    def block_nbytes(self):
        return 2 * self.geometry.n_layers * self.block_size * self.geometry.kv_dim * 4

    return property(block_nbytes)


@liar(
    "contracts.kv_nbytes_without_k_raw",
    target="impl.kv:KVCache.nbytes",
    factory=True,
    why="counts K, V and pos but forgets the pre-RoPE keys: one array too few",
)
def make_kv_nbytes_without_k_raw(original):
    def nbytes(self):
        g = self.geometry
        return self._n * (2 * g.n_layers * g.kv_dim * 4 + 8)

    return property(nbytes)


# ---- IMPL-ARGS -----------------------------------------------------------------------------------


@liar(
    "contracts.quant_bits_upto_16",
    target="impl.quant:_qmax",
    why="takes bits up to 16 as if values were int16: quantize(x, 9..16) silently wraps in the int8 store",
)
def quant_bits_upto_16(bits):
    from impl.quant import QuantError

    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 2 <= bits <= 16:
        raise QuantError(f"bits={bits!r} is not allowed: use an int in 2..16")
    return (1 << (int(bits) - 1)) - 1


@liar(
    "contracts.ring_window_accepts_zero",
    target="impl.ring:RingConfig.__post_init__",
    why="checks window < 0 instead of window < 1: a window of 0 positions is accepted (local layers of no slots)",
)
def ring_config_window_accepts_zero(self):
    from impl.cache import KVGeometry, check_positive_int
    from impl.errors import CacheError

    if not isinstance(self.geometry, KVGeometry):
        raise CacheError(f"RingConfig(geometry={self.geometry!r}): expected an impl.cache.KVGeometry")
    check_positive_int("RingConfig", "max_seq_len", self.max_seq_len)
    if self.window is not None and (
        isinstance(self.window, bool) or not isinstance(self.window, (int, np.integer)) or self.window < 0
    ):
        raise CacheError(f"RingConfig(window={self.window!r}): use an int >= 0, or None")
    n = self.geometry.n_layers
    gl = tuple(int(i) for i in self.global_layers)
    bad = [i for i in gl if not 0 <= i < n]
    if bad:
        raise CacheError(f"global_layers={list(gl)}: layer {bad[0]} is outside 0..{n - 1}")
    object.__setattr__(self, "global_layers", tuple(sorted(set(gl))))


@liar(
    "contracts.window_accepts_zero",
    target="impl.cache:normalize_window",
    why="checks w < 0 instead of w < 1: a session with window=0 is built (and masks every position)",
)
def normalize_window_accepts_zero(window, n_layers):
    from impl.errors import CacheError

    if window is None or isinstance(window, (int, np.integer, float)):
        ws = [window] * n_layers
    elif not isinstance(window, (list, tuple)):
        raise CacheError(f"window={window!r} is not allowed")
    else:
        ws = list(window)
        if len(ws) != n_layers:
            raise CacheError(f"window has {len(ws)} entries but the model has {n_layers} layers")
    for i, w in enumerate(ws):
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 0):
            raise CacheError(f"window={w!r} (layer {i}) is not allowed")
    return [None if w is None else int(w) for w in ws]


@liar(
    "contracts.window_short_list_padded",
    target="impl.cache:normalize_window",
    factory=True,
    why="a per-layer list shorter than the model is padded with None (no window) instead of refused",
)
def make_window_short_list_padded(original):
    def normalize_window(window, n_layers):
        if isinstance(window, (list, tuple)) and len(window) < n_layers:
            window = list(window) + [None] * (n_layers - len(window))
        return original(window, n_layers)

    return normalize_window


# ---- RING-T4: the reservation baseline -----------------------------------------------------------


@liar(
    "contracts.ring_reserved_every_layer_full",
    target="impl.ring:reserved_bytes",
    why="charges every layer the full context, windowed ones too: the baseline inflates and any saving "
    "measured against it is overstated",
)
def ring_reserved_every_layer_full(config, precision="f32"):
    from impl.ring import CODECS

    per_row = sum(a.nbytes for a in CODECS[precision](config.geometry).alloc(1).values())
    return config.geometry.n_layers * config.max_seq_len * per_row
