"""Liars for the sequence-cache cards (TGT-SEQ-*): slips of a cache after llama.h's memory API.

Each swaps one method of ``reference.sequences`` (harness/targets/seqown.py:
``CellCache``), so the TGT-SEQ witnesses must catch them on the own group's
sequence target. Several are the slips upstream made: deltas of two shifts
not accumulated (ggml-org/llama.cpp#3825), a copy that replaces the
destination, a keep that spares other sequences.
"""

from __future__ import annotations

import numpy as np

from harness.targets.sequences import in_range
from witnesses.liars import liar


@liar(
    "seqs.rm_ignores_p1",
    target="harness.targets.seqown:CellCache.rm",
    why="rm removes from p0 to the end whatever p1 says",
)
def rm_ignores_p1(self, seq, p0, p1):
    for i, c in self._live():
        if c.pos >= max(p0, 0) and (seq < 0 or seq in c.seqs):
            c.seqs = set() if seq < 0 else c.seqs - {seq}
            if not c.seqs:
                self.slots[i] = None
    return True


@liar(
    "seqs.rm_any_is_seq_0",
    target="harness.targets.seqown:CellCache.rm",
    why="rm(seq < 0) removes only sequence 0's cells, not every sequence's",
)
def rm_any_is_seq_0(self, seq, p0, p1):
    seq = max(seq, 0)
    for i, c in self._live():
        if in_range(c.pos, p0, p1) and seq in c.seqs:
            c.seqs = c.seqs - {seq}
            if not c.seqs:
                self.slots[i] = None
    return True


@liar(
    "seqs.rm_frees_shared_cells",
    target="harness.targets.seqown:CellCache.rm",
    why="rm frees a cell it removes the sequence from even when another sequence still holds it",
)
def rm_frees_shared(self, seq, p0, p1):
    for i, c in self._live():
        if in_range(c.pos, p0, p1) and (seq < 0 or seq in c.seqs):
            self.slots[i] = None
    return True


@liar(
    "seqs.cp_replaces_destination",
    target="harness.targets.seqown:CellCache.cp",
    why="cp drops the destination's own cells before copying (what a per-sequence stream copy does)",
)
def cp_replaces_destination(self, src, dst, p0, p1):
    for i, c in self._live():
        if dst in c.seqs and src not in c.seqs:
            c.seqs = c.seqs - {dst}
            if not c.seqs:
                self.slots[i] = None
    for _, c in self._live():
        if src in c.seqs and in_range(c.pos, p0, p1):
            c.seqs.add(dst)


@liar(
    "seqs.cp_moves",
    target="harness.targets.seqown:CellCache.cp",
    why="cp moves the cells to the destination: the source loses them",
)
def cp_moves(self, src, dst, p0, p1):
    for _, c in self._live():
        if src in c.seqs and in_range(c.pos, p0, p1):
            c.seqs = (c.seqs - {src}) | {dst}


@liar(
    "seqs.keep_spares_others",
    target="harness.targets.seqown:CellCache.keep",
    why="keep(seq) drops only the cells it shares with seq's, leaving the other sequences' own cells",
)
def keep_spares_others(self, seq):
    for _, c in self._live():
        if seq in c.seqs:
            c.seqs = {seq}


@liar(
    "seqs.shift_not_accumulated",
    target="harness.targets.seqown:CellCache.add",
    why="a second shift before the next decode replaces the pending one instead of adding to it (llama.cpp#3825)",
)
def shift_not_accumulated(self, seq, p0, p1, delta):
    for i, c in self._live():
        if seq in c.seqs and in_range(c.pos, p0, p1):
            c.pos += delta
            c.shift = delta
            if c.pos < 0:
                self.slots[i] = None


@liar(
    "seqs.shift_moves_positions_only",
    target="harness.targets.seqown:CellCache.add",
    why="a shift moves the cells' positions but never rotates their K",
)
def shift_positions_only(self, seq, p0, p1, delta):
    for i, c in self._live():
        if seq in c.seqs and in_range(c.pos, p0, p1):
            c.pos += delta
            if c.pos < 0:
                self.slots[i] = None


@liar(
    "seqs.shift_turns_the_wrong_way",
    target="harness.targets.seqown:rotate",
    why="the K-shift rotates by -delta",
    factory=True,
)
def shift_wrong_way(original):
    def rotate(x: np.ndarray, delta: int, theta: float) -> np.ndarray:
        return original(x, -delta, theta)

    return rotate


@liar(
    "seqs.decode_sees_every_sequence",
    target="harness.targets.seqown:CellCache._visible",
    why="a query attends every cell at a position up to its own, whichever sequences the cell belongs to",
)
def decode_sees_every_sequence(self, seq, pos):
    return sorted(((c.pos, i, c) for i, c in self._live() if c.pos <= pos), key=lambda e: e[:2])


@liar(
    "seqs.decode_accepts_gaps",
    target="harness.targets.seqown:CellCache._check",
    why="a batch of a sequence that holds tokens may start anywhere, not only at pos_max + 1",
    factory=True,
)
def decode_accepts_gaps(original):
    def check(self, tokens, positions, seq):
        top = self.pos_max(seq)
        if top >= 0 and len(positions) and int(positions[0]) > top + 1:
            return [i for i, c in enumerate(self.slots) if c is None][: len(tokens)]
        return original(self, tokens, positions, seq)

    return check


@liar(
    "seqs.rm_from_before_p0",
    target="harness.targets.seqown:CellCache.rm",
    why="rm removes from p0 - 1: one position too many before the range",
)
def rm_from_before_p0(self, seq, p0, p1):
    for i, c in self._live():
        if in_range(c.pos, p0 - 1 if p0 > 0 else p0, p1) and (seq < 0 or seq in c.seqs):
            c.seqs = set() if seq < 0 else c.seqs - {seq}
            if not c.seqs:
                self.slots[i] = None
    return True


@liar(
    "seqs.save_drops_pending_shift",
    target="harness.targets.seqown:CellCache.save",
    why="a saved state holds the shifted positions but the keys as stored, without the shift still pending "
    "for the next decode",
)
def save_drops_pending_shift(self, seq):
    import pickle

    cells = [(c.pos, [k.copy() for k in c.k], [v.copy() for v in c.v]) for _, c in self._live() if seq in c.seqs]
    return pickle.dumps(cells)


@liar(
    "seqs.load_keeps_old_cells",
    target="harness.targets.seqown:CellCache.load",
    why="loading a state adds its cells to what the sequence held instead of replacing them",
    factory=True,
)
def load_keeps_old_cells(original):
    def load(self, state, seq):
        held = [(i, c) for i, c in self._live() if seq in c.seqs]
        done = original(self, state, seq)
        for i, c in held:
            if self.slots[i] is None:
                c.seqs = {seq}
                self.slots[i] = c
        return done

    return load
