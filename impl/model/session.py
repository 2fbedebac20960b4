"""A decoding session: a model, a KV cache and greedy generation.

prefill(ids) -> step(token) -> generate(prompt, n): small functions over one
``Llama.forward``. Every call appends to the same cache, so a session can be
fed in any mix of prefills and steps, and a position's K/V and logits are
the same bits either way (the KV-T4 claim).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from impl.cache import KVStore, normalize_window
from impl.designs import make_cache
from impl.errors import CacheError
from impl.model.llama import Llama


class Session:
    """Greedy decoding state over one KV cache of any design (``impl.cache.KVStore``).

    ``window``: None, one W, or one per layer (None = no window).
    ``cache``: a design name for ``impl.designs.make_cache`` (None means
    "contiguous"), with its ``options``; or a ready ``KVStore``.
    ``last_logits`` (vocab,) predicts the token after everything fed so far.
    """

    def __init__(self, model: Llama, window=None, cache: str | KVStore | None = None, **options) -> None:
        c = model.config
        self.model = model
        self.window = normalize_window(window, c.n_layers)
        if cache is None or isinstance(cache, str):
            cache = make_cache(cache or "contiguous", c.kv_geometry, model.ropes, self.window, **options)
        elif options:
            raise CacheError(
                f"cache options {sorted(options)} are only taken with a design name, "
                f"not with a ready {type(cache).__name__}"
            )
        self.cache: KVStore = cache
        self.last_logits: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.cache)

    def prefill(self, ids: Sequence[int], return_hidden: bool = False):
        """Feed ``ids`` (any length >= 1); returns logits (len(ids), vocab) float32.

        With return_hidden=True returns (logits, hidden) where hidden is
        (n_layers + 1, len(ids), hidden): embeddings, then each layer's output.
        """
        out = self.model.forward(
            np.asarray(ids, dtype=np.int64), self.cache, self.window, logits_rows="all", return_hidden=return_hidden
        )
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
        """Rewind to the first ``n`` positions (speculative decoding, retries): ``cache.truncate(n)``.

        ``last_logits`` is cleared: the next call must feed a token.
        """
        self.cache.truncate(n)
        self.last_logits = None

    def fork(self) -> Session:
        """An independent copy of this session: the cache is cloned (a paged cache
        shares blocks copy-on-write, which no write can observe)."""
        s = Session.__new__(Session)
        s.model, s.window = self.model, list(self.window)
        s.cache = self.cache.clone()
        s.last_logits = None if self.last_logits is None else self.last_logits.copy()
        return s
