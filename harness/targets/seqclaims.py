"""Generic claims about sequence caches (cards ``TGT-SEQ-*``): they hold for any target with ``sequences``.

A sequence cache (:mod:`harness.targets.sequences`: llama.cpp's memory API,
``reference.sequences``) is driven by programs of its verbs; what each must
do is llama.h's sentence for it, and the known answers are:

- for the books (which positions each sequence holds): :class:`Positions`,
  each verb's definition over a list of (position, sequences) cells;
- for logits: the same target decoding afresh, in a new handle, the same
  batches the claim says the cache must reproduce (a rewind, a copy), so a
  deterministic decoder gives the same bits;
- for a shift: the K rows the cache held before it, rotated by the shift in
  float64 with the RoPE the handle declares (:class:`Rope`), within
  :func:`shift_bound`. Not logits against a fresh decode at the shifted
  positions: attention depends on relative positions only in exact
  arithmetic, and an engine that quantizes activations (llama.cpp's Q4_1 dot
  products take 8-bit activations) moves logits by percents for any change
  of rounding -- measured: two fresh llama.cpp decodes of the same tokens at
  positions 0.. and 5.. differ by 0.74 on logits of 34, where transformers
  on the same weights differs by 4.6e-5.

Every check names the step, the sequence and both values. A failing program
on a third-party target is written as a standalone script
(:func:`harness.targets.seqrepro.script`) that imports only the engine.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.targets.fixture import repro_folder
from harness.targets.protocol import Geometry, Target
from harness.targets.repro import write
from harness.targets.seqrepro import script
from harness.targets.sequences import Positions, Refused, in_range

CAPACITY = 256  # cells of every handle the claims make
SEQS = 3  # sequence ids the programs use: 0..SEQS-1
MOST = 40  # the most positions a program lets one sequence hold (within any engine's share of CAPACITY cells)
ONE = Geometry(1, 1, 1)  # a sequence target ignores the geometry


@dataclass
class Step:
    """One verb call of a program: its name, arguments, and (decode) the tokens' logits it returned."""

    verb: str
    args: tuple
    result: object = None


@dataclass
class Program:
    """A handle of ``target`` beside the :class:`Positions` model; every call is logged for a reproduction."""

    target: Target
    evidence: object
    index: int = 0  # which program of the example (a reproduction replays them in this order)
    log: list[Step] = field(default_factory=list)
    decodes: list[np.ndarray] = field(default_factory=list)  # every decode's logits, in order

    def __post_init__(self) -> None:
        self.h = self.target.make(ONE, capacity=CAPACITY)
        self.model = Positions(self.h.n_seq)

    def close(self) -> None:
        self.h.close()

    def fail(self, message: str) -> None:
        raise AssertionError(f"{self.target.name}: {message}\n  program: {self.text()}")

    def text(self) -> str:
        return "; ".join(f"{s.verb}{s.args}" for s in self.log)

    # ---- the verbs, each followed in the model

    def decode(self, tokens: Sequence[int], positions: Sequence[int], seq: int) -> np.ndarray:
        tokens, positions = [int(t) for t in tokens], [int(p) for p in positions]
        self.log.append(Step("decode", (tokens, positions, seq)))
        out = self.h.decode(tokens, positions, seq)
        out = np.asarray(out, dtype=np.float32)
        if out.shape != (len(tokens), self.h.vocab) or not np.isfinite(out).all():
            self.fail(
                f"decode returned {out.shape} logits (finite: {np.isfinite(out).all()}), wanted finite "
                f"({len(tokens)}, {self.h.vocab})"
            )
        self.model.decode(positions, seq)
        self.log[-1].result = len(self.decodes)
        self.decodes.append(out)
        self.evidence.count("decodes")
        return out

    def rm(self, seq: int, p0: int, p1: int) -> bool:
        self.log.append(Step("rm", (seq, p0, p1)))
        if p1 < 0 or p1 > max(p0, 0):
            self.evidence.count("removes")  # a range that names a position
        done = self.h.rm(seq, p0, p1)
        whole = seq >= 0 and p0 <= 0 and p1 < 0
        if done is not True and done is not False:
            self.fail(f"rm({seq}, {p0}, {p1}) returned {done!r}, not a bool")
        if not done and whole:
            self.fail(
                f"rm({seq}, {p0}, {p1}) of the whole sequence returned False: 'Removing a whole sequence never fails'"
            )
        if done:
            self.model.rm(seq, p0, p1)
        return done

    def cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        self.log.append(Step("cp", (src, dst, p0, p1)))
        self.h.cp(src, dst, p0, p1)
        self.model.cp(src, dst, p0, p1)
        self.evidence.count("copies")

    def keep(self, seq: int) -> None:
        self.log.append(Step("keep", (seq,)))
        self.h.keep(seq)
        self.model.keep(seq)
        self.evidence.count("keeps")

    def add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        self.log.append(Step("add", (seq, p0, p1, delta)))
        self.h.add(seq, p0, p1, delta)
        self.model.add(seq, p0, p1, delta)
        if delta:
            self.evidence.count("shifts")

    def save(self, seq: int, key: str) -> bytes:
        """The state of seq (llama_state_seq_get_data), logged under ``key`` for a reproduction."""
        self.log.append(Step("save", (seq, key)))
        self.evidence.count("saves")
        return self.h.save(seq)

    def load(self, state: bytes, key: str, seq: int, source: Program, from_seq: int) -> None:
        """Put a saved state into seq (replacing its cells): it must load; the model takes the source's cells."""
        self.log.append(Step("load", (key, seq)))
        if not self.h.load(state, seq):
            self.fail(f"the state of seq {from_seq} saved from another cache did not load into seq {seq}")
        self.model.rm(seq, -1, -1)
        self.model.cells += [(p, {seq}) for p in source.model.held(from_seq)]

    def clear(self) -> None:
        self.log.append(Step("clear", ()))
        self.h.clear()
        self.model.clear()

    def refused(self, tokens: Sequence[int], positions: Sequence[int], seq: int) -> None:
        """A decode the cache must refuse (positions that do not continue the sequence): Refused, nothing changed."""
        tokens, positions = [int(t) for t in tokens], [int(p) for p in positions]
        self.log.append(Step("refused", (tokens, positions, seq)))
        try:
            self.h.decode(tokens, positions, seq)
        except Refused:
            self.evidence.count("refusals")
        else:
            self.fail(
                f"decode of positions {positions} into seq {seq}, which holds up to {self.model.pos_max(seq)}, "
                "was accepted: a batch must continue its sequence (Y = X + 1)"
            )
        self.books(f"after the refused decode into seq {seq}")

    # ---- the books

    def books(self, where: str) -> None:
        """pos_min, pos_max (and positions, with the capability) of every sequence equal the model's."""
        for s in range(self.h.n_seq):
            got = (self.h.pos_min(s), self.h.pos_max(s))
            want = (self.model.pos_min(s), self.model.pos_max(s))
            if got != want:
                self.log.append(Step("check", ("pos", s, want)))
                self.fail(f"{where}: seq {s} has pos_min, pos_max = {got}, the verbs' definitions give {want}")
            if "positions" in self.target.capabilities:
                held, wanted = Counter(self.h.positions(s)), self.model.counts(s)
                if held != wanted:
                    self.log.append(Step("check", ("positions", s, sorted(wanted.elements()))))
                    self.fail(
                        f"{where}: seq {s} holds positions {sorted(held.elements())}, the verbs' definitions "
                        f"give {sorted(wanted.elements())}"
                    )
        self.evidence.count("checks")


def same_logits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit (an exact target's decodes of the same batches)."""
    return a.shape == b.shape and bool((a.view(np.uint32) == b.view(np.uint32)).all())


def expect_same(a: Program, ia: int, b: Program, ib: int, message: str) -> None:
    """Decode ``ia`` of program a against decode ``ib`` of b, bit for bit: records the largest difference as
    ``max_abs_delta`` and fails with ``message`` (its {delta} filled in)."""
    got, want = a.decodes[ia], b.decodes[ib]
    delta = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
    a.evidence.observe("max_abs_delta", delta)
    if not same_logits(got, want):
        a.log.append(Step("expect", (a.index, ia, b.index, ib, 0.0)))
        a.fail(message.format(delta=f"{delta:.4g}"))


def tokens(n: int, rng: np.random.Generator, vocab: int) -> list[int]:
    return [int(t) for t in rng.integers(0, min(vocab, 4096), n)]


def chunked(n: int, sizes: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) chunks of 0..n-1 of the given sizes (the last one what is left)."""
    out, at = [], 0
    for size in sizes:
        if at >= n:
            break
        out.append((at, min(n, at + size)))
        at = out[-1][1]
    if at < n:
        out.append((at, n))
    return out


def _repro(request, target: Target, programs: list[Program], message: str, evidence) -> None:
    """Write a failing program as a standalone script where kvproof's run (or --kvproof-repro) asks for one."""
    folder = repro_folder(request.config)
    if folder is None or target.own or os.environ.get("KVPROOF_LIAR"):
        return
    text = script(target, [p.log for p in programs], message, request.node.nodeid)
    if not text:
        return
    name = request.node.originalname
    path = write(Path(folder) / target.name / f"{name}.py", text)
    from_run = not request.config.getoption("kvproof_repro")
    if "reproduction" not in evidence.values:  # Hypothesis replays a failure: the file is the last one's
        evidence.record("reproduction", f"repro/{target.name}/{name}.py" if from_run else str(path))


class Programs(list):
    """The programs of one example, in the order they were made."""

    def __init__(self, target: Target, evidence) -> None:
        super().__init__()
        self.target, self.evidence = target, evidence

    def new(self) -> Program:
        self.append(Program(self.target, self.evidence, len(self)))
        return self[-1]


def _run(request, target: Target, evidence, body) -> None:
    """Run ``body(programs)``; on a failed check, write the reproduction, then fail; close every handle."""
    programs = Programs(target, evidence)
    try:
        body(programs)
    except AssertionError as exc:
        _repro(request, target, programs, str(exc), evidence)
        raise
    finally:
        for p in programs:
            try:
                p.close()
            except Exception:  # noqa: BLE001 (one handle that fails to close must not leave the others open)
                continue


# ---- TGT-SEQ-BOOKS ------------------------------------------------------------------------------

CORE = ("decode", "decode", "decode", "refused", "rm", "rm", "add", "clear")  # the steps of every books program


@st.composite
def book_steps(draw, verbs: Sequence[str]):
    verb = draw(st.sampled_from(list(verbs)))
    seq = draw(st.integers(0, SEQS - 1))
    if verb in ("decode", "refused"):
        return (verb, seq, draw(st.integers(1, 4)), draw(st.integers(0, 6)))
    if verb == "rm":
        who = draw(st.sampled_from([seq, seq, -1]))
        return ("rm", who, draw(st.integers(-1, 12)), draw(st.integers(-1, 16)))
    if verb in ("cp", "cp-empty"):
        return (verb, seq, draw(st.integers(0, SEQS - 1).filter(lambda d: d != seq)))
    if verb == "keep":
        return ("keep", seq)
    if verb == "add":
        return ("add", seq, draw(st.integers(-1, 10)), draw(st.integers(-1, 16)), draw(st.integers(-4, 6)))
    return ("clear",)


def _book_program(p: Program, steps, rng: np.random.Generator) -> None:
    vocab = p.h.vocab
    for step in steps:
        verb = step[0]
        if verb == "decode":
            _, seq, n, start = step
            top = p.model.pos_max(seq)
            if len(p.model.held(seq)) + n > MOST:
                continue
            first = top + 1 if top >= 0 else start
            p.decode(tokens(n, rng, vocab), range(first, first + n), seq)
        elif verb == "refused":
            _, seq, n, jump = step
            top = p.model.pos_max(seq)
            if top < 0:
                continue
            first = top + 2 + jump if jump % 2 else max(0, top - jump)  # past the next position, or back in it
            p.refused(tokens(n, rng, vocab), range(first, first + n), seq)
        elif verb == "rm":
            p.rm(*step[1:])
        elif verb == "cp":
            p.cp(step[1], step[2])
        elif verb == "cp-empty":  # a copy into a sequence that holds nothing: keep's programs share cells this way
            if p.model.pos_max(step[2]) < 0:
                p.cp(step[1], step[2])
        elif verb == "keep":
            p.keep(step[1])
        elif verb == "add":
            _, seq, p0, p1, delta = step
            if any(q + delta < 0 for q in p.model.held(seq) if in_range(q, p0, p1)):
                continue  # a shift below position 0: llama.h says nothing of it, the claim does not either
            if p.model.shares(seq, p0, p1):
                continue  # a cell other sequences share: llama.h does not say whether their tokens move too
            p.add(seq, p0, p1, delta)
        else:
            p.clear()
        last = p.log[-1]
        p.books(f"after {last.verb}{last.args if last.verb != 'decode' else tuple(last.args[1:])}")


def _books(kv_target, evidence, request, extra: Sequence[str]) -> None:
    verbs = [v for v in CORE if v != "add" or "shift" in kv_target.capabilities] + list(extra)

    @given(steps=st.lists(book_steps(verbs), min_size=8, max_size=24), seed=st.integers(0, 2**16))
    def prop(steps, seed):
        def body(programs):
            _book_program(programs.new(), steps, np.random.default_rng(seed))

        _run(request, kv_target, evidence, body)
        evidence.count("examples")

    prop()


@pytest.mark.kv_capabilities("sequences")
def test_sequence_caches_keep_the_books(kv_target, evidence, request):
    """Random programs of 8-24 steps over three sequences -- decode (continuing the sequence, or anywhere when
    it is empty), a decode at a position that does not continue it, rm of a range of one sequence or of any,
    add (with the capability shift), clear -- after every step: each sequence's pos_min and pos_max (and, with
    the capability positions, every position it holds) equal the verbs' definitions over the cells; an rm of a
    whole sequence returns True; a refused decode changes nothing."""
    _books(kv_target, evidence, request, ())


@pytest.mark.kv_capabilities("sequences")
def test_copies_keep_the_books(kv_target, evidence, request):
    """The programs of the books with cp(src, dst) of whole sequences among the steps (dst empty or holding
    tokens of its own): after every step the books are the verbs' definitions -- a copy adds src's tokens to
    dst ("Copy all tokens that belong to the specified sequence to another sequence") and leaves every other
    sequence's, dst's own included."""
    _books(kv_target, evidence, request, ("cp", "cp", "cp"))


@pytest.mark.kv_capabilities("sequences")
def test_keep_keeps_the_books(kv_target, evidence, request):
    """The programs of the books with keep(seq) among the steps, and copies into empty sequences (so cells are
    shared): after every step the books are the verbs' definitions -- keep(seq) leaves seq's tokens and no other
    sequence's ("Removes all tokens that do not belong to the specified sequence"), a cell seq shares included."""
    _books(kv_target, evidence, request, ("keep", "keep", "cp-empty", "cp-empty"))


# ---- TGT-SEQ-REWIND ------------------------------------------------------------------------------
#
# The fresh decode a logit claim compares with holds the same number of tokens at the same positions in the same
# cells as the cache under test: the sequence's own, and in place of the other sequences' tokens, other random
# tokens decoded into other sequences ("bystanders"). A cache that keeps sequences apart owes the same bits (the
# bystanders are masked out); one that lets a query see another sequence's cells sees other tokens there. An
# engine whose arithmetic depends on how many cells its KV view spans (llama.cpp sums attention over every cell
# of the view, the others masked) then owes the same bits; a fresh cache without the bystanders would differ by
# that engine's rounding noise, amplified by its 8-bit activation quantization to percents of a logit (measured
# on llama.cpp.f32: 0.49-0.92 on logits of 34).


def _decode_chunks(p: Program, toks: Sequence[int], spans, seq: int, offset: int = 0) -> list[np.ndarray]:
    return [p.decode(toks[a:b], range(a + offset, b + offset), seq) for a, b in spans]


def _rewind_example(programs, rng, evidence, n, sizes, cut, more) -> None:
    a = programs.new()
    prompt = tokens(n, rng, a.h.vocab)
    spans = chunked(n, sizes)
    _decode_chunks(a, prompt, spans, 0)
    a.cp(0, 1)
    edge = [0] + [e for _, e in spans[:-1]]
    p = edge[cut % len(edge)]
    if not a.rm(0, p, -1):
        a.fail(f"rm(0, {p}, -1), the tail of seq 0, returned False")
    a.books(f"after the rewind of seq 0 to {p}")
    fresh = programs.new()
    _decode_chunks(fresh, prompt, [s for s in spans if s[1] <= p], 0)
    other = tokens(n, rng, a.h.vocab)  # the bystander: the same cells, other tokens (seq 0 must not see them)
    _decode_chunks(fresh, other, [s for s in spans if s[1] > p], 1)
    new = tokens(sum(more), rng, a.h.vocab)
    spans2 = [(p + x, p + y) for x, y in chunked(len(new), more)]
    full = prompt[:p] + new
    ia, ib = len(a.decodes), len(fresh.decodes)
    _decode_chunks(a, full, spans2, 0)
    _decode_chunks(fresh, full, spans2, 0)
    for j, (x, y) in enumerate(spans2):
        expect_same(
            a,
            ia + j,
            fresh,
            ib + j,
            f"after rm(0, {p}, -1), the logits of positions {x}..{y - 1} differ from a fresh decode's by up "
            "to {delta} (bit for bit expected)",
        )
    cont = tokens(more[0], rng, a.h.vocab)
    a.decode(cont, range(n, n + len(cont)), 1)
    base = programs.new()
    _decode_chunks(base, prompt, spans, 1)
    _decode_chunks(base, prompt[:p] + tokens(len(new), rng, a.h.vocab), spans2, 0)  # the bystander
    base.decode(cont, range(n, n + len(cont)), 1)
    expect_same(
        a,
        len(a.decodes) - 1,
        base,
        len(base.decodes) - 1,
        "seq 1, a copy of the prompt made before seq 0 was rewound, continues it with logits that differ "
        "from a fresh decode's by up to {delta}",
    )
    evidence.count("rewinds")


@pytest.mark.kv_capabilities("sequences")
def test_rewinding_equals_a_fresh_decode(kv_target, evidence, request):
    """A prompt decoded in chunks into seq 0, copied to seq 1, then rm(0, p, -1) at a chunk edge p (True; seq 0
    then holds 0..p-1) and new chunks decoded into seq 0: their logits equal, bit for bit, those of a fresh cache
    that decoded the prompt's chunks up to p into seq 0, the rest into seq 1 (a bystander in the same cells), and
    the same new chunks into seq 0. Then seq 1, untouched by the rewind, continues the whole prompt: its logits
    equal those of a fresh cache that decoded the prompt into seq 1, the new chunks into seq 0 (a bystander) and
    the same continuation into seq 1."""

    @given(
        n=st.integers(2, 20),
        sizes=st.lists(st.integers(1, 8), min_size=1, max_size=6),
        cut=st.integers(0, 5),
        more=st.lists(st.integers(1, 6), min_size=1, max_size=3),
        seed=st.integers(0, 2**16),
    )
    def prop(n, sizes, cut, more, seed):
        rng = np.random.default_rng(seed)

        _run(
            request, kv_target, evidence, lambda programs: _rewind_example(programs, rng, evidence, n, sizes, cut, more)
        )
        evidence.count("examples")

    prop()


# ---- TGT-SEQ-FORK ------------------------------------------------------------------------------


def _fork_example(programs, rng, evidence, n, sizes, more) -> None:
    a = programs.new()
    prompt = tokens(n, rng, a.h.vocab)
    spans = chunked(n, sizes)
    _decode_chunks(a, prompt, spans, 0)
    a.cp(0, 1)
    a.cp(0, 2)
    a.books("after the copies")
    conts = [tokens(m, rng, a.h.vocab) for m in more]
    fresh = []
    for k, cont in enumerate(conts):
        a.decode(cont, range(n, n + len(cont)), k)
        f = programs.new()
        fresh.append(f)
        _decode_chunks(f, prompt, spans, k)
        for j in range(k):  # bystanders: the cells of the continuations before k's, other tokens
            f.decode(tokens(len(conts[j]), rng, a.h.vocab), range(n, n + len(conts[j])), j)
        f.decode(cont, range(n, n + len(cont)), k)
        expect_same(
            a,
            len(a.decodes) - 1,
            f,
            len(f.decodes) - 1,
            f"seq {k} (a copy of seq 0's prompt) continues with logits that differ from a fresh decode's by "
            "up to {delta} (bit for bit expected)",
        )
    a.books("after the continuations")
    mirror = fresh[1]
    for p in (a, mirror):
        p.rm(0, -1, -1)
        p.rm(2, -1, -1)
    a.books("after rm(0, -1, -1) and rm(2, -1, -1)")
    again = tokens(2, rng, a.h.vocab)
    at = n + len(conts[1])
    a.decode(again, range(at, at + 2), 1)
    mirror.decode(again, range(at, at + 2), 1)
    expect_same(
        a,
        len(a.decodes) - 1,
        mirror,
        len(mirror.decodes) - 1,
        "after rm(0, -1, -1) and rm(2, -1, -1), seq 1 continues with logits that differ from a fresh "
        "decode's by up to {delta}",
    )
    evidence.count("forks")


@pytest.mark.kv_capabilities("sequences")
def test_a_copied_sequence_continues_as_its_source(kv_target, evidence, request):
    """A prompt decoded in chunks into seq 0 and cp(0, k) to seqs 1 and 2; each of the three then continues with
    its own tokens, in turn: the logits of seq k's continuation equal, bit for bit, those of a fresh cache that
    decoded the prompt's chunks into seq k, the continuations before k's into their own sequences (bystanders
    in the same cells) and then k's. Then the source and the other copy are removed (rm(0, -1, -1),
    rm(2, -1, -1)): seq 1 continues again, its logits equal to its fresh cache's after the same removals."""

    @given(
        n=st.integers(1, 16),
        sizes=st.lists(st.integers(1, 8), min_size=1, max_size=4),
        more=st.lists(st.integers(1, 4), min_size=3, max_size=3),
        seed=st.integers(0, 2**16),
    )
    def prop(n, sizes, more, seed):
        rng = np.random.default_rng(seed)

        _run(request, kv_target, evidence, lambda programs: _fork_example(programs, rng, evidence, n, sizes, more))
        evidence.count("examples")

    prop()


# ---- TGT-SEQ-SHIFT ------------------------------------------------------------------------------


def shift_bound(rope, before_k: np.ndarray, delta: int) -> np.ndarray:
    """The most |K after add(delta) - K before rotated by delta in float64| may be, per element: the pair's length
    times (4 roundings of the K storage + |delta| * 2**-20 for the float32 angle), plus 2**-24 absolute (float16's
    subnormal spacing: a tiny pair rounds to it). ggml builds pair i's angle as delta * theta_scale**i by repeated
    float32 multiplication from a powf: simulated over bases 1e4..1e6 and head widths 64..128 the angle is off by
    at most |delta| * 2**-22.8 (the review of this bound), so 2**-20 leaves 7x; a wrong delta, base, sign or pair
    layout is off by the pair's length."""
    return rope.pair_norms(before_k) * (4 * rope.eps + abs(delta) * 2.0**-20) + 2.0**-24


def _by_position(cells) -> dict[int, int]:
    pos = cells[0]
    return {p: i for i, p in enumerate(pos)}


def _shift_accumulates(programs, evidence, a: Program, example, shift, before, after) -> None:
    """Two shifts d1 and d - d1 of the range before one decode: the same K rows and logits as a's one shift of d
    (``after``: a's cells after that decode, its logits a.decodes[ia], decoded at top + 1)."""
    prompt, other, nxt, spans, start = example
    p0, p1, d, split, top, ia = shift
    if abs(d) < 2:
        return  # no two non-zero shifts add up to d
    d1 = (1 + abs(split) % (abs(d) - 1)) * (1 if d > 0 else -1)  # strictly between 0 and d: both moves stay in range
    if any(q + d1 < 0 for q in before[0] if in_range(q, p0, p1)):
        return
    twice = programs.new()
    _decode_chunks(twice, prompt, spans, 0, offset=start)
    twice.decode(other, range(3), 1)
    twice.add(0, p0, p1, d1)
    twice.add(0, p0, p1, d - d1)
    twice.books(f"after add(0, {p0}, {p1}, {d1}) and add(0, {p0}, {p1}, {d - d1})")
    twice.decode(nxt, [top + 1], 0)
    expect_same(
        twice,
        len(twice.decodes) - 1,
        a,
        ia,
        f"add {d1} then add {d - d1} "
        f"gives logits that differ by up to {{delta}} from one add of {d} (the deltas must accumulate)",
    )
    again = twice.h.cells(0)
    if again[0] != after[0] or not same_logits(again[1], after[1]):
        worst = np.abs(again[1] - after[1]).max() if again[1].shape == after[1].shape else float("inf")
        twice.fail(
            f"add {d1} then add {d - d1} leaves other K rows than one add of {d} (positions {again[0]} vs "
            f"{after[0]}, K off by up to {worst:.3g}): the deltas must accumulate"
        )
    evidence.count("two_shifts_checked")


def _shift_example(programs, rng, evidence, n, sizes, start, d, p0, p1, split) -> None:
    a = programs.new()
    prompt, other = tokens(n, rng, a.h.vocab), tokens(3, rng, a.h.vocab)
    nxt = tokens(1, rng, a.h.vocab)
    spans = chunked(n, sizes)
    _decode_chunks(a, prompt, spans, 0, offset=start)
    a.decode(other, range(3), 1)
    before, kept = a.h.cells(0), a.h.cells(1)
    a.add(0, p0, p1, d)
    a.books(f"after add(0, {p0}, {p1}, {d})")
    top = a.model.pos_max(0)
    a.decode(nxt, [top + 1], 0)
    ia = len(a.decodes) - 1
    after = a.h.cells(0)
    where = _by_position(after)
    moved = 0
    for i, p in enumerate(before[0]):
        shifted = in_range(p, p0, p1)
        j = where.get(p + d if shifted else p)
        if j is None:
            a.fail(f"after add(0, {p0}, {p1}, {d}) the cell at position {p} is not at {p + d if shifted else p}")
        if not same_logits(after[2][:, j], before[2][:, i]):
            a.log.append(Step("rows", ("v", i, j)))
            a.fail(
                f"add(0, {p0}, {p1}, {d}) changed the V rows of the cell at position {p} (max "
                f"{np.abs(after[2][:, j] - before[2][:, i]).max():.3g}): a shift moves K only"
            )
        if not shifted:
            if not same_logits(after[1][:, j], before[1][:, i]):
                a.fail(
                    f"add(0, {p0}, {p1}, {d}) changed the K rows of the cell at position {p}, outside "
                    f"the range (max {np.abs(after[1][:, j] - before[1][:, i]).max():.3g})"
                )
            continue
        want = a.h.rope.rotate(before[1][:, i], d)
        bound = shift_bound(a.h.rope, before[1][:, i], d)
        err = np.abs(after[1][:, j] - want)
        evidence.observe("k_delta_over_bound", float((err / bound).max()))
        if not (err <= bound).all():
            layer, el = np.unravel_index(int(np.argmax(err - bound)), err.shape)
            a.fail(
                f"after add(0, {p0}, {p1}, {d}) the K of the cell at position {p} (now {p + d}), layer "
                f"{layer}, element {el} is {after[1][layer, j, el]:.6g}; rotated by {d} it should be "
                f"{want[layer, el]:.6g} (|difference| {err[layer, el]:.3g} > bound {bound[layer, el]:.3g})"
            )
        moved += 1
    a.decode(tokens(1, rng, a.h.vocab), [top + 2], 0)  # a second decode: the shift is applied once, not again
    later = a.h.cells(0)
    if later[0][: len(after[0])] != after[0] or not same_logits(later[1][:, : len(after[0])], after[1]):
        a.fail(f"the decode after the one that applied add(0, {p0}, {p1}, {d}) changed seq 0's K rows again")
    still = a.h.cells(1)
    if still[0] != kept[0] or not (same_logits(still[1], kept[1]) and same_logits(still[2], kept[2])):
        a.fail(f"add(0, {p0}, {p1}, {d}) changed seq 1's cells (positions {kept[0]} -> {still[0]})")
    evidence.count("keys_rotated", moved)
    evidence.count("shifts_checked")
    _shift_accumulates(
        programs, evidence, a, (prompt, other, nxt, spans, start), (p0, p1, d, split, top, ia), before, after
    )


@pytest.mark.kv_capabilities("sequences", "shift", "cell-rows")
def test_a_shift_rotates_exactly_the_shifted_keys(kv_target, evidence, request):
    """A prompt decoded in chunks at positions s..s+n-1 into seq 0, another into seq 1, then add(0, p0, p1, d) of
    the whole sequence, its tail [p0, inf) (d > 0) or its head [0, p1) (d < 0), and one more token decoded into
    seq 0 (which applies the shift): pos_min/pos_max/positions moved as the verb says; every cell of seq 0 keeps
    its V bit for bit; a cell outside the range keeps its K bit for bit; a cell in range holds its K from before
    rotated by d -- within shift_bound of that rotation computed in float64 with the handle's rope (a wrong
    angle, pair layout or sign is off by the pair's length); seq 1's cells are unchanged bit for bit. Two shifts
    d1 and d - d1 of the same range with no decode between give, bit for bit, the same cells and the same
    continuation logits as the one shift of d (a cache that defers its K rotation must accumulate the deltas)."""

    @given(
        n=st.integers(2, 16),
        sizes=st.lists(st.integers(1, 8), min_size=1, max_size=4),
        start=st.integers(0, 8),
        kind=st.sampled_from(["whole", "tail", "head"]),
        d=st.integers(1, 40),
        cut=st.integers(0, 15),
        split=st.integers(-20, 20),
        seed=st.integers(0, 2**16),
    )
    def prop(n, sizes, start, kind, d, cut, split, seed):
        rng = np.random.default_rng(seed)
        edge = start + cut % n
        if kind == "whole":
            p0, p1, d = -1, -1, (d if d % 3 else -min(d, start) or d)
        elif kind == "tail":
            p0, p1 = edge, -1
        else:
            p0, p1, d = -1, edge + 1, -min(d, start)
            if d == 0:
                p0, p1, d = -1, -1, 5

        _run(
            request,
            kv_target,
            evidence,
            lambda programs: _shift_example(programs, rng, evidence, n, sizes, start, d, p0, p1, split),
        )
        evidence.count("examples")

    prop()


# ---- TGT-SEQ-STATE ------------------------------------------------------------------------------


def _state_example(programs, rng, evidence, n, sizes, start, cut, shift, more) -> None:
    a = programs.new()
    prompt = tokens(n, rng, a.h.vocab)
    spans = chunked(n, sizes)
    _decode_chunks(a, prompt, spans, 0, offset=start)
    edge = [e for _, e in spans[:-1]]
    if edge and cut % 2:  # a rewind to a chunk edge
        a.rm(0, start + edge[cut % len(edge)], -1)
    if shift and "shift" in a.target.capabilities:
        p0 = -1 if shift < 0 or cut % 3 else start + (cut % n)
        a.add(0, p0, -1, shift if p0 >= 0 else max(shift, -start))
    state = a.save(0, "state")
    b = programs.new()
    b.decode(tokens(1 + cut % 5, rng, a.h.vocab), range(1 + cut % 5), 0)  # seq 0 holds something: load replaces it
    b.load(state, "state", 0, a, 0)
    b.books("after the restore")
    cont = tokens(more, rng, a.h.vocab)
    at = a.model.pos_max(0) + 1
    a.decode(cont, range(at, at + more), 0)
    b.decode(cont, range(at, at + more), 0)
    expect_same(
        b,
        len(b.decodes) - 1,
        a,
        len(a.decodes) - 1,
        "the sequence restored from a saved state continues with logits that differ by up to {delta} from the "
        "sequence it was saved from (bit for bit expected)",
    )
    evidence.count("restores")


@pytest.mark.kv_capabilities("sequences", "state")
def test_a_saved_sequence_restores_as_it_was(kv_target, evidence, request):
    """A prompt decoded in chunks at positions s.. into seq 0, sometimes rewound to a chunk edge, sometimes
    shifted (add of the whole sequence or of a tail, with no decode after it), then its state saved
    (llama_state_seq_get_data) and loaded into seq 0 of another cache, which holds 1-5 other tokens there
    (llama_state_seq_set_data, which must load): the restored sequence holds exactly the saved positions, and
    continues with the same tokens with logits equal, bit for bit, to the original's."""

    @given(
        n=st.integers(2, 16),
        sizes=st.lists(st.integers(1, 8), min_size=1, max_size=4),
        start=st.integers(0, 6),
        cut=st.integers(0, 7),
        shift=st.sampled_from([0, 0, -3, 1, 4, 9]),
        more=st.integers(1, 3),
        seed=st.integers(0, 2**16),
    )
    def prop(n, sizes, start, cut, shift, more, seed):
        rng = np.random.default_rng(seed)
        _run(
            request,
            kv_target,
            evidence,
            lambda programs: _state_example(programs, rng, evidence, n, sizes, start, cut, shift, more),
        )
        evidence.count("examples")

    prop()
