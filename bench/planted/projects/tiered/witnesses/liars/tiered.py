"""Liars: plausible wrong versions of tieredcache's code, which the witnesses must catch."""

import numpy as np

from harness import liar


@liar(
    "tiered.read_hot_first",
    target="tieredcache.cache:TieredKVCache.read",
    why="puts the hot tier's rows before the pages' when it assembles a sequence",
)
def read(self):
    ks, vs = [], []
    for b, pages in enumerate(self.pages):
        parts = [self.store.get(i) for i in pages]
        ks.append(np.concatenate([self._hk[:, b, :, : self._hot]] + [p[0] for p in parts], axis=2))
        vs.append(np.concatenate([self._hv[:, b, :, : self._hot]] + [p[1] for p in parts], axis=2))
    return np.stack(ks, axis=1), np.stack(vs, axis=1)


@liar(
    "tiered.truncate_keeps_one_more",
    target="tieredcache.cache:TieredKVCache.truncate",
    factory=True,
    why="an off-by-one: keeps the first position it should drop",
)
def make_truncate(original):
    def truncate(self, n):
        original(self, min(n + 1, self.length) if 0 <= n < self.length else n)

    return truncate


@liar(
    "tiered.fork_shares_hot",
    target="tieredcache.cache:TieredKVCache.fork",
    why="the fork shares the pages (counted) but also the hot tier's arrays, which both sides write",
)
def fork(self):
    from tieredcache.cache import TieredKVCache

    other = TieredKVCache.__new__(TieredKVCache)
    other.store = self.store
    other._hk, other._hv = self._hk, self._hv
    other._hot, other.length = self._hot, self.length
    other.pages = [list(pages) for pages in self.pages]
    for pages in other.pages:
        for i in pages:
            self.store.incref(i)
    return other


@liar(
    "tiered.repeat_tiles",
    target="tieredcache.cache:TieredKVCache.repeat",
    why="repeat tiles the batch (0, 1, 0, 1) instead of repeating each element in a row (0, 0, 1, 1)",
)
def repeat(self, r):
    if r < 1:
        raise ValueError(f"repeat({r}): r must be >= 1")
    self._take([b for _ in range(r) for b in range(self.batch)])


@liar(
    "tiered.pages_half_precision",
    target="tieredcache.cache:PageStore.put",
    why="pages are stored in float16 to halve memory: spilled rows no longer read back exactly",
)
def put(self, k, v):
    if self._free:
        i = self._free.pop()
        self._k[i][...] = k
        self._v[i][...] = v
    else:
        i = len(self._refs)
        self._k.append(np.array(k, dtype=np.float16))
        self._v.append(np.array(v, dtype=np.float16))
        self._refs.append(0)
    self._refs[i] = 1
    return i


@liar(
    "tiered.select_sorted",
    target="tieredcache.cache:TieredKVCache.select",
    why="select keeps the elements named, but in ascending order rather than the order asked for",
)
def select(self, idx):
    self._take(sorted(self._check(idx, exact=False)))


@liar(
    "tiered.decref_frees_at_one",
    target="tieredcache.cache:PageStore.decref",
    why="an off-by-one: a page is recycled when its count drops to 1, while another cache still holds it",
)
def decref(self, i):
    self._refs[i] -= 1
    if self._refs[i] <= 1:
        self._free.append(i)


@liar(
    "tiered.spill_v_from_k",
    target="tieredcache.cache:TieredKVCache._spill",
    why="a copy-paste slip: a spilled page's V is the hot tier's K",
)
def _spill(self):
    for b in range(self.batch):
        self.pages[b].append(self.store.put(self._hk[:, b], self._hk[:, b]))
    self._hot = 0


@liar(
    "tiered.truncate_never_decrefs",
    target="tieredcache.cache:TieredKVCache.truncate",
    why="a truncate drops the pages past n from the tables without giving them back: they are never recycled",
)
def truncate(self, n):
    if not 0 <= n <= self.length:
        raise ValueError(f"truncate({n}): n must be in 0..{self.length}")
    c = self.store.page
    keep, rest = divmod(n, c)
    for b, pages in enumerate(self.pages):
        if keep < len(pages):
            pk, pv = self.store.get(pages[keep])
            self._hk[:, b, :, :rest] = pk[:, :, :rest]
            self._hv[:, b, :, :rest] = pv[:, :, :rest]
            del pages[keep:]
    self._hot = rest
    self.length = n
