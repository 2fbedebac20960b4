"""The sequence-cache protocol: one cache of cells shared by many sequences, positions given by the caller.

Beside the row protocol (:mod:`harness.targets.protocol`: a handle holds rows)
and the block protocol (:mod:`harness.targets.blocks`: a handle hands blocks
to requests), a *sequence cache* is what llama.cpp's memory API exposes (and
llama-cpp-python, ollama and LM Studio run): a model decodes batches of
tokens, each token with an explicit position and sequence id, into cells of
one cache; a cell holds a token's K/V at one position and belongs to a set of
sequences; the caller removes, copies, keeps and shifts them by sequence and
position range. A sequence-cache target is a
:class:`harness.targets.protocol.Target` declaring the capability
``sequences``; ``target.make(geometry, capacity=N)`` builds a
:class:`SeqHandle`: a model with an empty cache of N cells (the geometry,
batch and window are not used). It lacks ``append`` and ``blocks``, so every
row and block witness is n/a on it, and they lack ``sequences``.

Verbs of a handle (capability in brackets when it is optional):

    decode(tokens, positions, seq) -> (n, vocab) float32
                                 one batch of n tokens, all of sequence ``seq``, at
                                 ``positions`` (consecutive, starting at pos_max(seq) + 1
                                 when the sequence holds anything); returns every token's
                                 logits. A batch the cache refuses (positions not
                                 consecutive, no free cells) raises :class:`Refused`
                                 and changes nothing (llama_decode: "Upon other return
                                 values, the memory state is restored")
    rm(seq, p0, p1) -> bool      remove the cells of ``seq`` (seq < 0: of any sequence)
                                 at positions [p0, p1); p0 < 0 and p1 < 0 as the
                                 target's documented ranges say (:data:`RANGES`). False:
                                 the partial removal was refused, nothing changed
    cp(src, dst, p0, p1)         every cell of src at positions in range also belongs to dst
    keep(seq)                    remove every cell that does not belong to seq
    pos_min(seq), pos_max(seq)   the smallest / largest position seq holds; -1 when empty
    clear()                      remove every cell
    close()                      free the model and cache (no verb is called afterwards)
    [shift] add(seq, p0, p1, delta)  every cell of seq at positions in range moves by delta
                                 (its K is re-rotated: attention depends on relative
                                 positions only, so a uniform shift changes no later logit
                                 beyond rounding)
    [positions] positions(seq) -> list[int]  every position seq holds, ascending, with
                                 repeats (two cells of one sequence at one position)
    [state] save(seq) -> bytes   the sequence's state; load(state, seq) -> bool puts a saved
                                 state into seq (replacing what it held): True when loaded
    [cell-rows] cells(seq) -> (positions, k, v)  the cells of seq in the cache's own order:
                                 their positions and K, V rows (n_layers, n, width) float32 as
                                 stored (a shift not yet applied by a decode not yet applied);
                                 with ``rope``, a :class:`Rope` saying how K is rotated

Attributes: ``target``, ``vocab`` (token ids 0..vocab-1 are valid), ``n_seq``
(sequence ids 0..n_seq-1), ``capacity`` (cells).

The known answer is :class:`Positions`: which positions each sequence holds,
computed from the definition of each verb (never from the cache); the claims
(:mod:`harness.targets.seqclaims`) compare the handle's answers with it, and a
cache's logits with the same cache decoding the same tokens afresh.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

# How a range (p0, p1) reads: llama.h's first sentence for each verb, "positions in [p0, p1)", with its bounds
# "p0 < 0 : [0, p1]" read as "p0 < 0: from 0" and "p1 < 0 : [p0, inf)" as "p1 < 0: no end". The bracket in
# "[0, p1]" would include p1; every other sentence of the header, and every caller in llama.cpp, excludes it,
# so the claims do too (the card TGT-SEQ-BOOKS says so).
RANGES = "llama.h"


@dataclass(frozen=True)
class Rope:
    """How a cache's K rows are rotated, so a claim can rotate them itself (in float64) and compare.

    ``pairs``: "halves" (element i turns with i + D/2: rotate_half, GPT-NeoX, Hugging Face, impl) or
    "adjacent" (2i with 2i + 1: GPT-J, ggml's LLAMA_ROPE_TYPE_NORM); ``theta``: the base (pair i turns by
    p * theta ** (-2i / D)); ``head_dim``: D, K's width per head; ``eps``: the unit roundoff of the K storage
    (2**-24 float32, 2**-11 float16).
    """

    pairs: str
    theta: float
    head_dim: int
    eps: float

    def rotate(self, k: np.ndarray, delta: int) -> np.ndarray:
        """k (..., H * D) rotated by ``delta`` positions, in float64."""
        d = self.head_dim
        x = np.asarray(k, np.float64).reshape(*k.shape[:-1], -1, d)
        ang = delta * self.theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # (D/2,)
        c, s = np.cos(ang), np.sin(ang)
        if self.pairs == "halves":
            a, b = x[..., : d // 2], x[..., d // 2 :]
            out = np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
        else:
            a, b = x[..., 0::2], x[..., 1::2]
            out = np.empty_like(x)
            out[..., 0::2], out[..., 1::2] = a * c - b * s, b * c + a * s
        return out.reshape(k.shape)

    def pair_norms(self, k: np.ndarray) -> np.ndarray:
        """|pair| for every element of k (..., H * D): the length of the 2-vector the element turns in."""
        d = self.head_dim
        x = np.asarray(k, np.float64).reshape(*k.shape[:-1], -1, d)
        if self.pairs == "halves":
            n = np.hypot(x[..., : d // 2], x[..., d // 2 :])
            return np.concatenate([n, n], axis=-1).reshape(k.shape)
        n = np.hypot(x[..., 0::2], x[..., 1::2])
        return np.repeat(n, 2, axis=-1).reshape(k.shape)


class Refused(Exception):
    """The cache refused a decode batch (its documented refusal), changing nothing."""


class SeqHandle(Protocol):
    target: object
    vocab: int
    n_seq: int
    capacity: int

    def decode(self, tokens: Sequence[int], positions: Sequence[int], seq: int) -> np.ndarray: ...
    def rm(self, seq: int, p0: int, p1: int) -> bool: ...
    def cp(self, src: int, dst: int, p0: int, p1: int) -> None: ...
    def keep(self, seq: int) -> None: ...
    def pos_min(self, seq: int) -> int: ...
    def pos_max(self, seq: int) -> int: ...
    def clear(self) -> None: ...
    def close(self) -> None: ...


def in_range(p: int, p0: int, p1: int) -> bool:
    """Whether position p is in the range (p0, p1) of llama.h's memory verbs: [p0, p1), a negative p0 read as 0
    and a negative p1 as no end (:data:`RANGES`)."""
    return max(p0, 0) <= p and (p1 < 0 or p < p1)


@dataclass
class Positions:
    """The known answer: the positions each sequence holds (a multiset), after each verb's definition.

    ``cells`` lists (position, set of sequences) for every cell; a cell with no sequence left is gone.
    """

    n_seq: int
    cells: list[tuple[int, set[int]]] = field(default_factory=list)

    def held(self, seq: int) -> list[int]:
        return sorted(p for p, s in self.cells if seq in s)

    def pos_min(self, seq: int) -> int:
        held = self.held(seq)
        return held[0] if held else -1

    def pos_max(self, seq: int) -> int:
        held = self.held(seq)
        return held[-1] if held else -1

    def next_position(self, seq: int) -> int:
        return self.pos_max(seq) + 1

    def decode(self, positions: Sequence[int], seq: int) -> None:
        self.cells += [(int(p), {seq}) for p in positions]

    def rm(self, seq: int, p0: int, p1: int) -> None:
        out = []
        for p, s in self.cells:
            if in_range(p, p0, p1) and (seq < 0 or seq in s):
                s = set() if seq < 0 else s - {seq}
            if s:
                out.append((p, s))
        self.cells = out

    def shares(self, seq: int, p0: int, p1: int) -> bool:
        """Whether a cell of seq at a position in range also belongs to another sequence."""
        return any(seq in s and len(s) > 1 and in_range(p, p0, p1) for p, s in self.cells)

    def cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        self.cells = [(p, s | {dst}) if src in s and in_range(p, p0, p1) else (p, s) for p, s in self.cells]

    def keep(self, seq: int) -> None:
        self.cells = [(p, {seq}) for p, s in self.cells if seq in s]

    def add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        """Every cell of seq in range moves by delta -- a cell seq shares with others moves for all of them (a
        token that belongs to seq is the cell); a cell moved below position 0 is gone."""
        moved = [(p + delta, s) if seq in s and in_range(p, p0, p1) else (p, s) for p, s in self.cells]
        self.cells = [(p, s) for p, s in moved if p >= 0]

    def clear(self) -> None:
        self.cells = []

    def counts(self, seq: int) -> Counter:
        return Counter(self.held(seq))
