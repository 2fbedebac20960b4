"""A decoding session: a model, a KV cache and greedy generation.

prefill(ids) -> step(token) -> generate(prompt, n): small functions over one
``Llama.forward``. Every call appends to the same cache, so a session can be
fed in any mix of prefills and steps, and a position's K/V and logits are
the same bits either way (the KV-T4 claim).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from impl.errors import CacheError
from impl.kv import KVCache, KVStore
from impl.model.llama import Llama


def normalize_window(window, n_layers: int) -> list[int | None]:
    """None, one W for every layer, or a per-layer sequence -> list of per-layer W."""
    if window is None or isinstance(window, (int, np.integer, float)):
        ws = [window] * n_layers
    elif not isinstance(window, (list, tuple)):
        raise CacheError(f"window={window!r} is not allowed: use None, an int >= 1, or a list with one per layer")
    else:
        ws = list(window)
        if len(ws) != n_layers:
            raise CacheError(
                f"window has {len(ws)} entries but the model has {n_layers} layers; "
                "give one int for all layers or exactly one per layer (None = no window)"
            )
    for i, w in enumerate(ws):
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1):
            raise CacheError(f"window={w!r} (layer {i}) is not allowed: use an int >= 1 or None")
    return [None if w is None else int(w) for w in ws]


class Session:
    """Greedy decoding state over one contiguous ``KVCache``.

    ``last_logits`` (vocab,) predicts the token after everything fed so far.
    """

    def __init__(self, model: Llama, window=None, cache: KVStore | None = None) -> None:
        c = model.config
        self.model = model
        self.window = normalize_window(window, c.n_layers)
        self.cache = cache if cache is not None else KVCache(c.n_layers, c.n_kv_heads, c.head_dim, model.ropes)
        self.last_logits: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.cache)

    def prefill(self, ids: Sequence[int], return_hidden: bool = False):
        """Feed ``ids`` (any length >= 1); returns logits (len(ids), vocab) float32.

        With return_hidden=True returns (logits, hidden) where hidden is
        (n_layers + 1, len(ids), hidden): embeddings, then each layer's output.
        """
        out = self.model.forward(np.asarray(ids, dtype=np.int64), self.cache, self.window,
                                 logits_rows="all", return_hidden=return_hidden)
        logits = out[0] if return_hidden else out
        self.last_logits = logits[-1]
        return out

    def step(self, token_id: int) -> np.ndarray:
        """Feed one token; returns its logits (vocab,)."""
        logits = self.model.forward(np.asarray([token_id], dtype=np.int64), self.cache, self.window)
        self.last_logits = logits[0]
        return self.last_logits

    def _feed_last(self, ids: Sequence[int]) -> None:
        logits = self.model.forward(np.asarray(ids, dtype=np.int64), self.cache, self.window, logits_rows="last")
        self.last_logits = logits[0]

    def generate(self, prompt_ids: Sequence[int], n: int, on_token=None) -> list[int]:
        """Feed ``prompt_ids`` (may be empty to continue), then decode ``n`` greedy tokens.

        Every new token is fed back, so afterwards the session holds the
        prompt and all n tokens and can continue. ``on_token(id)`` is called
        as each token is chosen (for streaming).
        """
        if n < 0:
            raise ValueError(f"n={n}: the number of tokens to generate must be >= 0")
        if len(prompt_ids):
            self._feed_last(prompt_ids)
        elif self.last_logits is None:
            raise ValueError("generate([], n) on an empty session: give a prompt")
        out: list[int] = []
        for _ in range(n):
            tok = int(np.argmax(self.last_logits))
            out.append(tok)
            if on_token is not None:
                on_token(tok)
            self.step(tok)
        return out

    def truncate(self, n: int) -> None:
        """Rewind to the first ``n`` positions (speculative decoding, retries).

        ``last_logits`` is cleared: the next call must feed a token.
        """
        if not hasattr(self.cache, "truncate"):
            raise CacheError(f"this session's cache ({type(self.cache).__name__}) cannot rewind; "
                             "use a contiguous or paged cache")
        self.cache.truncate(n)
        self.last_logits = None

    def fork(self) -> "Session":
        """An independent copy of this session: the cache is cloned (a paged cache
        shares blocks copy-on-write, which no write can observe)."""
        s = Session.__new__(Session)
        s.model, s.window = self.model, list(self.window)
        s.cache = self.cache.clone()
        s.last_logits = None if self.last_logits is None else self.last_logits.copy()
        return s
