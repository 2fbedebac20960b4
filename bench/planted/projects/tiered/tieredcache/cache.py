"""A two-tier KV cache: the newest positions in a small hot tier, older ones in full, immutable, shared pages.

Positions 0 .. P * page - 1 of a sequence live in its P pages (a PageStore
shared by the cache and its forks, refcounted), the rest (fewer than ``page``)
in the cache's own hot tier. When the hot tier fills up it is spilled as one
new page. Pages are never written after they are made, so forks share them
freely; a truncate into a page copies the rows it keeps back into the hot tier.
"""

import numpy as np


class PageStore:
    """Pages of ``page`` positions: K and V (layers, heads, page, head_dim) float32 each, with a reference count.

    A page whose count drops to 0 is recycled: the next ``put`` overwrites it.
    """

    def __init__(self, page=4):
        self.page = page
        self._k, self._v, self._refs, self._free = [], [], [], []

    @property
    def in_use(self):
        return sum(1 for r in self._refs if r > 0)

    def put(self, k, v):
        """A new page (count 1) holding a copy of k and v, each (layers, heads, page, head_dim); its id."""
        if self._free:
            i = self._free.pop()
            self._k[i][...] = k
            self._v[i][...] = v
        else:
            i = len(self._refs)
            self._k.append(np.array(k, dtype=np.float32))
            self._v.append(np.array(v, dtype=np.float32))
            self._refs.append(0)
        self._refs[i] = 1
        return i

    def get(self, i):
        """K and V of page i (the store's own arrays: read them, never write them)."""
        return self._k[i], self._v[i]

    def incref(self, i):
        self._refs[i] += 1

    def decref(self, i):
        self._refs[i] -= 1
        if self._refs[i] == 0:
            self._free.append(i)


class TieredKVCache:
    """A batch of sequences of equal length over ``store``; rows go in and out as (L, B, H, T, D) float32."""

    def __init__(self, store, n_layers, batch, n_heads, head_dim):
        self.store = store
        shape = (n_layers, batch, n_heads, store.page, head_dim)
        self._hk = np.zeros(shape, np.float32)
        self._hv = np.zeros(shape, np.float32)
        self._hot = 0  # positions in the hot tier: always length % page
        self.pages = [[] for _ in range(batch)]  # always length // page each
        self.length = 0

    @property
    def batch(self):
        return len(self.pages)

    def __len__(self):
        return self.length

    def append(self, k, v):
        """Store k and v, each (layers, batch, heads, t, head_dim), at positions length .. length + t - 1."""
        c, t, s = self.store.page, k.shape[3], 0
        while s < t:
            if self._hot == 0 and t - s >= c:  # a whole page straight from the input
                for b in range(self.batch):
                    self.pages[b].append(self.store.put(k[:, b, :, s : s + c], v[:, b, :, s : s + c]))
                s += c
                continue
            take = min(c - self._hot, t - s)
            self._hk[:, :, :, self._hot : self._hot + take] = k[:, :, :, s : s + take]
            self._hv[:, :, :, self._hot : self._hot + take] = v[:, :, :, s : s + take]
            self._hot += take
            s += take
            if self._hot == c:
                self._spill()
        self.length += t

    def _spill(self):
        for b in range(self.batch):
            self.pages[b].append(self.store.put(self._hk[:, b], self._hv[:, b]))
        self._hot = 0

    def read(self):
        """(k, v): positions 0 .. length - 1, (L, B, H, length, D), in new arrays."""
        ks, vs = [], []
        for b, pages in enumerate(self.pages):
            parts = [self.store.get(i) for i in pages]
            ks.append(np.concatenate([p[0] for p in parts] + [self._hk[:, b, :, : self._hot]], axis=2))
            vs.append(np.concatenate([p[1] for p in parts] + [self._hv[:, b, :, : self._hot]], axis=2))
        return np.stack(ks, axis=1), np.stack(vs, axis=1)

    def truncate(self, n):
        """Keep positions 0 .. n - 1 (ValueError outside 0 .. length); pages past them are given back."""
        if not 0 <= n <= self.length:
            raise ValueError(f"truncate({n}): n must be in 0..{self.length}")
        c = self.store.page
        keep, rest = divmod(n, c)
        for b, pages in enumerate(self.pages):
            if keep < len(pages):  # n falls in a page: its first rows go back to the hot tier
                pk, pv = self.store.get(pages[keep])
                self._hk[:, b, :, :rest] = pk[:, :, :rest]
                self._hv[:, b, :, :rest] = pv[:, :, :rest]
                for i in pages[keep:]:
                    self.store.decref(i)
                del pages[keep:]
        self._hot = rest
        self.length = n

    def fork(self):
        """An independent cache sharing this one's pages (counts raised); the hot tier is copied."""
        other = TieredKVCache.__new__(TieredKVCache)
        other.store = self.store
        other._hk, other._hv = self._hk.copy(), self._hv.copy()
        other._hot, other.length = self._hot, self.length
        other.pages = [list(pages) for pages in self.pages]
        for pages in other.pages:
            for i in pages:
                self.store.incref(i)
        return other

    def release(self):
        """This cache is done: its pages are given back (recycled once no fork holds them)."""
        for pages in self.pages:
            for i in pages:
                self.store.decref(i)
        self.pages = []

    def reorder(self, idx):
        """Batch element i becomes old element idx[i] (beam search: indices may repeat)."""
        self._take(self._check(idx, exact=True))

    def select(self, idx):
        """Keep batch elements idx, in that order."""
        self._take(self._check(idx, exact=False))

    def repeat(self, r):
        """Each batch element r times in a row."""
        if r < 1:
            raise ValueError(f"repeat({r}): r must be >= 1")
        self._take([b for b in range(self.batch) for _ in range(r)])

    def _take(self, idx):
        new = [list(self.pages[i]) for i in idx]
        for pages in new:
            for i in pages:
                self.store.incref(i)
        for pages in self.pages:
            for i in pages:
                self.store.decref(i)
        self.pages = new
        self._hk, self._hv = self._hk[:, idx], self._hv[:, idx]

    def _check(self, idx, exact):
        idx = [int(i) for i in idx]
        if not idx or any(not 0 <= i < self.batch for i in idx) or (exact and len(idx) != self.batch):
            raise ValueError(f"batch indices {idx} do not fit a batch of {self.batch}")
        return idx
