"""Liars: plausible wrong versions of int8cache's code, which the witnesses must catch."""

import numpy as np

from harness import liar


@liar(
    "int8.append_ignores_length",
    target="int8cache.cache:Int8KVCache.append",
    factory=True,
    why="writes every chunk at position 0 instead of at the current length: only the last chunk survives",
)
def make_append(original):
    def append(self, k, v):
        n = self.length
        self.length = 0
        original(self, k, v)
        self.length = n + k.shape[3]

    return append


@liar(
    "int8.truncate_keeps_one_more",
    target="int8cache.cache:Int8KVCache.truncate",
    factory=True,
    why="an off-by-one: keeps the first position it should drop",
)
def make_truncate(original):
    def truncate(self, n):
        original(self, min(n + 1, self.length) if 0 <= n < self.length else n)

    return truncate


@liar(
    "int8.truncate_zero_is_a_no_op",
    target="int8cache.cache:Int8KVCache.truncate",
    factory=True,
    why="`if n:` treats truncate(0) as 'no argument': the cache keeps everything",
)
def make_truncate_zero(original):
    def truncate(self, n):
        if n:
            original(self, n)

    return truncate


@liar(
    "int8.fork_returns_self",
    target="int8cache.cache:Int8KVCache.fork",
    why="an O(1) fork taken too far: it hands back the cache itself, so the two are one",
)
def fork(self):
    return self


@liar(
    "int8.select_sorted",
    target="int8cache.cache:Int8KVCache.select",
    why="select keeps the elements named, but in ascending order rather than the order asked for",
)
def select(self, idx):
    self._take(sorted(self._check(idx, exact=False)))


@liar(
    "int8.scale_from_first_head",
    target="int8cache.cache:quantize",
    why="the scale of every head's row is taken from head 0's row: other heads' rows clip or lose precision",
)
def quantize(x):
    absmax = np.broadcast_to(np.abs(x).max(axis=-1)[:, :, :1], x.shape[:-1])
    scale = np.where(absmax > 0, absmax / np.float32(127), np.float32(1)).astype(np.float32)
    q = np.clip(np.rint(x / scale[..., None]), -127, 127).astype(np.int8)
    return q, scale


@liar(
    "int8.cow_never_copies",
    target="int8cache.cache:Int8KVCache._own",
    why="copy-on-write that never copies: a write after a fork lands in the buffers the other side reads",
)
def _own(self):
    return None
