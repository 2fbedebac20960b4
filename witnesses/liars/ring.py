"""Liars for the ring cache and the conv tail (cards RING-T1..RING-T5)."""

from __future__ import annotations

import numpy as np

from witnesses.liars import liar


@liar(
    "ring.span_not_clamped",
    target="impl.ring:RingCache.span",
    why="returns the window (everything for a global layer) without clamping it to the ring's slots, so past "
    "max_seq_len a global layer asks for positions whose slots now hold later ones",
)
def span_unclamped(self, layer, pos):
    reach = self.config.reach(layer)
    return (0 if reach is None else max(0, pos + 1 - reach)), pos + 1


@liar(
    "ring.scale_from_neighbour",
    target="impl.ring:_RingLayer.take",
    factory=True,
    why="reads each int8 row's scales from the next slot: a head rescaled by its neighbour's factor",
)
def make_take_neighbour_scale(original):
    def take(self, lo, hi):
        enc = original(self, lo, hi)
        if "ks" not in enc:
            return enc
        nxt = (np.arange(lo, hi) + 1) % self.slots
        return dict(enc, ks=self.buf["ks"][nxt], vs=self.buf["vs"][nxt])

    return take


@liar(
    "ring.grow_ignores_wrap",
    target="impl.ring:_RingLayer.grow",
    why="grows like a deque: copies the old slots oldest-first from the write cursor into [0, slots), which "
    "breaks slot == pos for a ring below its cap (visible when a write jumps ahead of the ring's end)",
)
def grow_as_deque(self, new_slots):
    fresh = self.codec.alloc(new_slots)
    cursor = self.high % self.slots
    order = np.r_[cursor : self.slots, 0:cursor]
    for name, a in self.buf.items():
        fresh[name][: self.slots] = a[order]
    self.buf, self.slots = fresh, new_slots


@liar(
    "ring.int8_keeps_f32",
    target="impl.ring:_RingLayer.__init__",
    factory=True,
    why="an int8 ring that also allocates float32 K/V buffers (a 'debug copy'), which nbytes does not count",
)
def make_init_with_f32_shadow(original):
    def __init__(self, codec, slots, cap):
        original(self, codec, slots, cap)
        if codec.name == "int8":
            self.k_f32 = np.zeros((slots, codec.geometry.kv_dim), np.float32)
            self.v_f32 = np.zeros((slots, codec.geometry.v_dim), np.float32)

    return __init__


@liar(
    "conv.tail_rolled_before_append",
    target="impl.conv:ConvTail.feed",
    why="rolls the tail one step late: keeps the inputs before the newest instead of ending at it",
)
def feed_stale_tail(self, x):
    from impl.conv import _conv_rows

    x = np.asarray(x, np.float32)
    ext = np.concatenate([self.tail, x])
    y = _conv_rows(ext, self.taps, self.dilation, self.reach)
    if self.reach:
        self.tail = ext[ext.shape[0] - self.reach - 1 : ext.shape[0] - 1].copy()
    return y


@liar(
    "ring.truncate_recovers_reused_slots",
    target="impl.ring:_RingLayer.truncate",
    why="truncates by moving the high-water mark back to n only: positions whose slots later ones reused count as "
    "held again, and a read of them returns the later positions' rows",
)
def truncate_recovers(self, n):
    self.high = min(self.high, n)


@liar(
    "ring.store_truncate_keeps_staged",
    target="impl.ring_store:RingKVStore.truncate",
    factory=True,
    why="keeps the staged rows of a failed forward's chunk whole: the next flush commits rows at and past n that "
    "truncate dropped",
)
def make_truncate_keeping_staged(original):
    def truncate(self, n):
        staged = dict(self._staged)
        original(self, n)
        self._staged.update({layer: s for layer, s in staged.items() if s[0] < n})

    return truncate


@liar(
    "ring.f32_encode_keeps_callers_rows",
    target="impl.ring:F32Codec.encode",
    why="encodes f32 rows without copying them: a chunk wider than the ring is staged until the next flush as the "
    "caller's own arrays, so a caller that reuses its K/V buffers once write returns changes the rows held",
)
def encode_without_copy(self, k, v):
    return {"k": np.asarray(k, np.float32), "v": np.asarray(v, np.float32)}


@liar(
    "ring.int8_reads_scaled",
    target="impl.ring:Int8Codec.decode",
    factory=True,
    why="dequantizes K 3% too large: every read of an int8 ring is off by the same factor, so a recompute through "
    "a fresh int8 ring gives the same bits and only a comparison with what was written sees it",
)
def make_decode_scaled(original):
    def decode(self, enc):
        k, v = original(self, enc)
        return k * np.float32(1.03), v

    return decode
