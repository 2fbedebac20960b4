"""``reference.sequences``: a sequence cache written from llama.h's memory API, over impl's runtime pieces.

A small random llama (impl's :class:`impl.model.llama.Llama`, the shape of
:data:`SEQ_CONFIG`) decodes into :class:`CellCache`, a cache of cells laid out
as llama.cpp's unified KV cache lays them out: a slot array of ``capacity``
cells, each holding one token's K (rotated at the position it was written at)
and V per layer, its position, the set of sequences it belongs to, and a
pending shift. The verbs are those of :mod:`harness.targets.sequences`, each
written from the sentence of llama.h that documents it:

    decode   a batch of one sequence at consecutive positions (starting at
             pos_max + 1 when the sequence holds anything: llama_batch_allocr's
             rule) into the lowest free slots; every query attends the cells of its
             sequence at positions <= its own, in (position, slot) order. A batch
             that breaks the rule or does not fit raises Refused and changes nothing
    rm       removes the sequence from the cells in range (seq < 0: every cell in range);
             a cell no sequence is left in is free. Never refused (True)
    cp       adds dst to the cells of src in range (the cells are shared, as llama.cpp's
             unified cache shares them)
    keep     removes every other sequence from every cell
    add      moves the cells of the sequence in range by delta now, and adds delta to their
             pending shift; the next decode rotates each pending K by its whole pending shift
             (so two adds before a decode are one add of their sum) -- llama.cpp's K-shift
    pos_min/pos_max/positions  from the cells

K is rotated with impl's half-split RoPE (:func:`impl.rope.apply_rope`) by
angles computed in float64 from the layer's base, as impl's RopeTable
computes them, for any (also negative) shift.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from harness.targets.protocol import Geometry, Numerics, Target
from harness.targets.sequences import Refused, Rope
from impl.attention import attend_one
from impl.model.config import ModelConfig
from impl.model.llama import Llama, rmsnorm, swiglu
from impl.rope import apply_rope

# a 2-layer grouped-query llama with random weights (impl.model.config.ModelConfig fields); max_pos bounds positions
SEQ_CONFIG = dict(n_layers=2, hidden=32, n_heads=4, n_kv_heads=2, head_dim=8, ffn=64, vocab=64, max_pos=512)
SEQ_SEED = 0
N_SEQ = 4


@lru_cache(maxsize=1)
def seq_model() -> Llama:
    """The reference's model: ``Llama.random`` of :data:`SEQ_CONFIG`, seeded (built once per process)."""
    return Llama.random(ModelConfig(**SEQ_CONFIG), seed=SEQ_SEED, scale=0.3)


def rotate(x: np.ndarray, delta: int, theta: float) -> np.ndarray:
    """RoPE of ``x`` (T, H, D) by ``delta`` positions (any sign), angles in float64 as impl's RopeTable makes them."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    angles = np.concatenate([delta * inv_freq, delta * inv_freq])[None, :]  # (1, D)
    return apply_rope(x, np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32))


def _span(p0: int, p1: int) -> range:
    """The positions (p0, p1) names, as llama.h's verbs take them: p0 < 0 from 0, p1 < 0 to no end (a bound past
    any position this cache holds)."""
    return range(p0 if p0 >= 0 else 0, p1 if p1 >= 0 else 1 << 30)


@dataclass
class Cell:
    pos: int
    seqs: set[int]
    k: list[np.ndarray]  # per layer (kv_dim,): K rotated to pos - shift
    v: list[np.ndarray]  # per layer (kv_dim,)
    shift: int = 0  # pending: the next decode rotates k by it


class CellCache:
    """A sequence cache of ``capacity`` cells over :func:`seq_model` (module docstring)."""

    def __init__(self, target: Target, capacity: int) -> None:
        self.target, self.capacity = target, capacity
        self.model = seq_model()
        self.vocab, self.n_seq = self.model.config.vocab, N_SEQ
        self.slots: list[Cell | None] = [None] * capacity
        # RoPE as the rows of cells() hold it: impl's half-split pairs (i, i + D/2), its base, its head width
        self.rope = Rope("halves", self.model.config.theta(0), self.model.config.head_dim, 2.0**-24)

    # ---- queries

    def _live(self) -> list[tuple[int, Cell]]:
        return [(i, c) for i, c in enumerate(self.slots) if c is not None]

    def positions(self, seq: int) -> list[int]:
        return sorted(c.pos for _, c in self._live() if seq in c.seqs)

    def cells(self, seq: int):
        """(positions, k, v) of seq's cells in slot order: k, v (n_layers, n, kv_dim) float32 as stored (a
        pending shift not yet applied); ([], None, None) when seq holds nothing."""
        mine = [c for _, c in self._live() if seq in c.seqs]
        if not mine:
            return [], None, None
        layers = range(self.model.config.n_layers)
        k = np.stack([np.stack([c.k[li] for c in mine]) for li in layers])
        v = np.stack([np.stack([c.v[li] for c in mine]) for li in layers])
        return [c.pos for c in mine], k, v

    def pos_min(self, seq: int) -> int:
        held = self.positions(seq)
        return held[0] if held else -1

    def pos_max(self, seq: int) -> int:
        held = self.positions(seq)
        return held[-1] if held else -1

    # ---- the memory verbs

    def rm(self, seq: int, p0: int, p1: int) -> bool:
        for i, c in self._live():
            if c.pos in _span(p0, p1) and (seq < 0 or seq in c.seqs):
                c.seqs = set() if seq < 0 else c.seqs - {seq}
                if not c.seqs:
                    self.slots[i] = None
        return True

    def cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        for _, c in self._live():
            if src in c.seqs and c.pos in _span(p0, p1):
                c.seqs.add(dst)

    def keep(self, seq: int) -> None:
        for i, c in self._live():
            if seq in c.seqs:
                c.seqs = {seq}
            else:
                self.slots[i] = None

    def add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        for i, c in self._live():
            if seq in c.seqs and c.pos in _span(p0, p1):
                c.pos += delta
                c.shift += delta
                if c.pos < 0:  # moved before the start: llama.cpp frees such a cell (llama_kv_cells::pos_add)
                    self.slots[i] = None

    def save(self, seq: int) -> bytes:
        """seq's state: its cells' positions, K (every pending shift applied: a state holds keys rotated to
        their positions) and V, in slot order, pickled."""
        cells = []
        for _, c in self._live():
            if seq in c.seqs:
                k = [self._rotated(c, li) for li in range(len(c.k))]
                cells.append((c.pos, [x.copy() for x in k], [x.copy() for x in c.v]))
        return pickle.dumps(cells)

    def load(self, state: bytes, seq: int) -> bool:
        """Replace seq's cells with the saved ones, in the lowest free slots: False, nothing changed, when they
        do not fit."""
        cells = pickle.loads(state)
        self.rm(seq, -1, -1)
        free = [i for i, c in enumerate(self.slots) if c is None]
        if len(cells) > len(free):
            return False
        for i, (pos, k, v) in zip(free, cells, strict=False):
            self.slots[i] = Cell(pos, {seq}, list(k), list(v))
        return True

    def _rotated(self, c: Cell, li: int) -> np.ndarray:
        """Cell c's K of layer li rotated by its pending shift (what the next decode will store)."""
        if not c.shift:
            return c.k[li]
        k = c.k[li].reshape(1, self.model.config.n_kv_heads, self.model.config.head_dim)
        return rotate(k, c.shift, self.model.config.theta(li)).reshape(-1)

    def clear(self) -> None:
        self.slots = [None] * self.capacity

    def close(self) -> None:
        self.slots = []

    # ---- decode

    def _apply_shifts(self) -> None:
        for _, c in self._live():
            if c.shift:
                c.k = [self._rotated(c, li) for li in range(len(c.k))]
                c.shift = 0

    def _visible(self, seq: int, pos: int) -> list[tuple[int, int, Cell]]:
        """(position, slot, cell) of every cell a query of seq at pos attends: seq's, at positions <= pos, in
        (position, slot) order."""
        return sorted(((c.pos, i, c) for i, c in self._live() if seq in c.seqs and c.pos <= pos), key=lambda e: e[:2])

    def _check(self, tokens: Sequence[int], positions: Sequence[int], seq: int) -> list[int]:
        n = len(tokens)
        free = [i for i, c in enumerate(self.slots) if c is None]
        if n == 0 or n != len(positions):
            raise Refused(f"a batch of {n} tokens and {len(positions)} positions")
        if not 0 <= seq < self.n_seq:
            raise Refused(f"seq={seq}: sequence ids are 0..{self.n_seq - 1}")
        if any(not 0 <= int(t) < self.vocab for t in tokens):
            raise Refused(f"a token id outside 0..{self.vocab - 1}")
        if list(positions) != list(range(int(positions[0]), int(positions[0]) + n)):
            raise Refused(f"positions {list(positions)} are not consecutive")
        top = self.pos_max(seq)
        if top >= 0 and int(positions[0]) != top + 1:
            raise Refused(f"seq {seq} holds up to {top}: the batch must start at {top + 1}, not {positions[0]}")
        if int(positions[0]) < 0 or int(positions[-1]) >= self.model.config.max_pos:
            raise Refused(f"positions {positions[0]}..{positions[-1]} outside 0..{self.model.config.max_pos - 1}")
        if n > len(free):
            raise Refused(f"{n} tokens, {len(free)} free cells")
        return free[:n]

    def decode(self, tokens: Sequence[int], positions: Sequence[int], seq: int) -> np.ndarray:
        slots = self._check(tokens, positions, seq)
        self._apply_shifts()
        m, c = self.model, self.model.config
        pos = np.asarray(positions, dtype=np.int64)
        n = len(slots)
        new = [Cell(int(p), {seq}, [], []) for p in pos]
        for i, cell in zip(slots, new, strict=True):
            self.slots[i] = cell
        try:
            x = m.embed[np.asarray(tokens, dtype=np.int64)]
            for li, layer in enumerate(m.layers):
                h = rmsnorm(x, layer.attn_norm, c.rms_eps)
                qkv = layer.wqkv(h)
                q = m.ropes[li].apply(qkv[:, : c.q_dim].reshape(n, c.n_heads, c.head_dim), pos)
                k = m.ropes[li].apply(qkv[:, c.q_dim : c.q_dim + c.kv_dim].reshape(n, c.n_kv_heads, c.head_dim), pos)
                v = qkv[:, c.q_dim + c.kv_dim :]
                for t, cell in enumerate(new):
                    cell.k.append(k[t].reshape(-1).copy())
                    cell.v.append(v[t].copy())
                att = np.empty((n, c.q_dim), dtype=np.float32)
                for t in range(n):
                    seen = self._visible(seq, int(pos[t]))
                    ks = np.stack([cc.k[li] for _, _, cc in seen])
                    vs = np.stack([cc.v[li] for _, _, cc in seen])
                    qg = q[t].reshape(c.n_kv_heads, c.group, c.head_dim)
                    att[t] = attend_one(qg, ks, vs, m.scale).reshape(-1)
                x = x + layer.wo(att)
                h = rmsnorm(x, layer.ffn_norm, c.rms_eps)
                x = x + layer.w_down(swiglu(layer.w_gate_up(h), c.ffn))
            return m.head(rmsnorm(x, m.norm, c.rms_eps)).astype(np.float32)
        except BaseException:
            for i in slots:
                self.slots[i] = None
            raise


TARGETS: dict[str, Target] = {}


def build_cells(geometry: Geometry | None, batch: int, window, capacity: int, trace=None) -> CellCache:
    return CellCache(TARGETS["reference.sequences"], capacity)


TARGETS["reference.sequences"] = Target(
    "reference.sequences",
    "a sequence cache written from llama.h's memory API (unified cells, pending K-shift) over impl's runtime pieces",
    "kvproof",
    frozenset({"sequences", "shift", "positions", "cell-rows", "state"}),
    Numerics.exact(),
    ("harness/targets/seqown.py::CellCache", "harness/targets/seqown.py::rotate"),
    build_cells,
    own=True,
)
