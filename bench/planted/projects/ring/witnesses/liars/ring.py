"""Liars: plausible wrong versions of ringcache's code, which the witnesses must catch."""

import numpy as np

from harness import liar


def _append_with_slot(self, k, v, shift):
    t = k.shape[3]
    _, lo = self.mask_sizes(t)
    if lo == self.length:
        out_k, out_v = k.copy(), v.copy()
    else:
        past_k, past_v = self._gather(lo, self.length)
        out_k = np.concatenate([past_k, k], axis=3)
        out_v = np.concatenate([past_v, v], axis=3)
    keep = min(t, self.slots)
    slot = (np.arange(self.length + t - keep, self.length + t) + shift) % self.slots
    self._k[:, :, :, slot] = k[:, :, :, t - keep :]
    self._v[:, :, :, slot] = v[:, :, :, t - keep :]
    self.length += t
    self.first = max(self.first, self.length - self.slots)
    return out_k, out_v


@liar(
    "ring.write_slot_off_by_one",
    target="ringcache.cache:SlidingWindowCache.append",
    why="writes position p into slot (p + 1) % slots while reads look in p % slots",
)
def append(self, k, v):
    return _append_with_slot(self, k, v, 1)


@liar(
    "ring.truncate_keeps_one_more",
    target="ringcache.cache:SlidingWindowCache.truncate",
    why="an off-by-one: keeps the first position it should drop",
)
def truncate(self, n):
    if not 0 <= n <= self.length or max(0, n - self.window + 1) < self.first:
        raise ValueError(f"truncate({n}): n must be in 0..{self.length} with the window before it held")
    self.length = min(n + 1, self.length)


@liar(
    "ring.truncate_zero_is_a_no_op",
    target="ringcache.cache:SlidingWindowCache.truncate",
    why="`if n:` treats truncate(0) as 'no argument': the cache keeps everything",
)
def truncate_zero(self, n):
    if not 0 <= n <= self.length or max(0, n - self.window + 1) < self.first:
        raise ValueError(f"truncate({n}): n must be in 0..{self.length} with the window before it held")
    if n:
        self.length = n


@liar(
    "ring.fork_shares_v",
    target="ringcache.cache:SlidingWindowCache.fork",
    why="the fork copies the K rings but shares the V rings with its source",
)
def fork(self):
    from ringcache.cache import SlidingWindowCache

    other = SlidingWindowCache.__new__(SlidingWindowCache)
    other.__dict__.update(self.__dict__)
    other._k = self._k.copy()
    return other


@liar(
    "ring.fork_shares_k",
    target="ringcache.cache:SlidingWindowCache.fork",
    why="the fork copies the V rings but shares the K rings with its source",
)
def fork_k(self):
    from ringcache.cache import SlidingWindowCache

    other = SlidingWindowCache.__new__(SlidingWindowCache)
    other.__dict__.update(self.__dict__)
    other._v = self._v.copy()
    return other


@liar(
    "ring.select_sorted",
    target="ringcache.cache:SlidingWindowCache.select",
    why="select keeps the elements named, but in ascending order rather than the order asked for",
)
def select(self, idx):
    idx = sorted(self._check(idx, exact=False))
    self._k = self._k[:, idx]
    self._v = self._v[:, idx]


@liar(
    "ring.first_never_advances",
    target="ringcache.cache:SlidingWindowCache.append",
    why="forgets to advance the first position held: reads return slots the ring has already overwritten",
)
def append_first_stays(self, k, v):
    first = self.first
    out = _append_with_slot(self, k, v, 0)
    self.first = first
    return out


@liar(
    "ring.half_precision",
    target="ringcache.cache:SlidingWindowCache.__init__",
    factory=True,
    why="rings of float16 to halve memory: read-back is no longer exact",
)
def make_init(original):
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._k = self._k.astype(np.float16)
        self._v = self._v.astype(np.float16)

    return __init__


@liar(
    "ring.gather_v_from_k",
    target="ringcache.cache:SlidingWindowCache._gather",
    why="a copy-paste slip: the gathered V rows come from the K rings",
)
def _gather(self, lo, hi):
    slot = np.arange(lo, hi) % self.slots
    return self._k[:, :, :, slot], self._k[:, :, :, slot]
