"""kvproof's generic block-manager witnesses: claims that hold for any block manager (cards ``TGT-BLOCKS*``).

Each witness takes ``kv_target`` and needs the capability ``blocks`` (a row
target is n/a); it runs random programs over many requests -- each step one
verb the target declares on any request: admit a new request with 1-7
tokens, extend a request by 1-4, free one (live, already freed, or never
admitted), fork one, truncate one, reset; and where a witness weighs them,
send an admitted prompt again, admit with extra keys, send a prompt again
with its extra keys under other kinds, hold and release blocks at the pool
level -- on the target's handle and on the list-of-requests reference
(:class:`harness.targets.blocks.Requests`), and after every step checks the
books against the reference:

- every live request's table holds ceil(len / block_size) blocks, no block twice,
  and its slots read back its tokens;
- a block two live requests hold is their block at the same index, of a history
  they share by declaration (a fork, or a prefix hit on full blocks of equal prefix);
- refcount(b) equals the live requests holding b, for every block (never negative);
- num_free() + the blocks live requests hold = total;
- an allocation is refused (MemoryError) only when fewer blocks are free than it
  needs, and a refused one, a free of a freed or unknown request, or a refused
  reset changes nothing;
- a prefix hit is whole blocks, at most len - 1 tokens, of prefixes computed since
  the last reset (with the read-back: its recorded contents are the request's);
- with ``prefix`` and ``evict`` (TGT-BLOCKS-HIT): a new request's hit covers every
  leading full block the cache can serve -- cached by a request with the same extra
  keys and not handed out since (:class:`harness.targets.blocks.CachedBlocks`) --
  and an allocation is refused only when too few blocks are free after that hit;
- with extra keys (TGT-BLOCKS-KEYS): requests admitted with other extra keys
  (vLLM's cache_salt, LoRA) never share a block by prefix, nor hit one the other computed;
- reset is refused while any block is held, and done when none is;
- with ``evict``: the blocks an allocation takes are the ones the declared
  policy names (:data:`harness.targets.blocks.POLICIES`);
- with ``free-blocks``: references the program holds at the pool level (hold)
  count like a request's (refcount = live holders + held references; a block
  with either is not free), and a release of a list naming a block twice or a
  block no one holds follows the handle's release contract (refused and
  changing nothing, or idempotent), never taking a count below 0 nor leaving
  a held block in the free queue (a later allocation would hand it out).

Steps are drawn by Hypothesis, which shrinks a failing program to the fewest
steps; a failure names them, numbered. A project proves its own block
manager by importing these into a witness module, as with
:mod:`harness.targets.claims`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.targets.blocks import (
    FREE_CONTRACTS,
    POLICY_MODELS,
    REFUSALS,
    RELEASE_CONTRACTS,
    BlockHandle,
    CachedBlocks,
    Requests,
    blocks_for,
    keys_of,
)
from harness.targets.protocol import Geometry, Target

GEOMETRY = Geometry(1, 1, 1)  # make() takes one; a block manager does not use it
MAX_NAMED = 6  # a free's index: 0..5 a request named so far (modulo their number), 6 one never admitted
totals = st.integers(2, 10)  # blocks in the pool: small, so allocations run out


# prompts that share prefixes of one, two and three blocks (of 2 or 3 tokens), so prefix hits and their misses
# (a block equal to a cached one after a different prefix) come up in most programs
PROMPTS = ([0, 1, 2, 0, 1, 2, 0], [0, 1, 2, 0, 2, 2], [1, 2, 2, 0, 1, 2, 0], [0, 1, 1, 0, 1], [2, 0, 1, 2, 0, 1])


def tokens(most: int, vocab: int = 3):
    """1..most token ids from a small vocabulary (so prefixes repeat and prefix hits happen)."""
    return st.lists(st.integers(0, vocab - 1), min_size=1, max_size=most)


def prompts(vocab: int = 3):
    """A prompt: one of :data:`PROMPTS` cut after 3-7 tokens (three times in four), or 1-7 random tokens of the
    vocabulary."""
    cut = st.builds(lambda p, n: p[:n], st.sampled_from(PROMPTS), st.integers(3, 7))
    return st.one_of(cut, cut, cut, tokens(7, vocab))


def extra_keys(kinds: Sequence[str]):
    """A new request's extra keys: one of ``kinds`` (half the time), or 0-2 of them, each with the value x or y
    (so two requests often carry the same value under different kinds: a LoRA named x beside a cache_salt x)."""
    kind, value = st.sampled_from(list(kinds)), st.sampled_from(["x", "y"])
    return st.one_of(st.dictionaries(kind, value, min_size=1, max_size=1), st.dictionaries(kind, value, max_size=2))


def steps_for(target: Target, weights: dict[str, int] | None = None, vocab: int = 3, key_kinds: Sequence[str] = ()):
    """A strategy of one step ``(verb, request index, argument)`` of the verbs ``target`` declares (and, given
    the kinds of extra key its handles take, admits with extra keys)."""
    caps, w = target.capabilities, weights or {}
    kinds = {
        "pass": st.tuples(st.just("pass"), st.just(0), st.none()),  # first: what a step shrinks to (not shown)
        "admit": st.tuples(st.just("admit"), st.just(0), prompts(vocab)),
        "extend": st.tuples(st.just("extend"), st.integers(0, MAX_NAMED - 1), tokens(4, vocab)),
        "free": st.tuples(st.just("free"), st.integers(0, MAX_NAMED), st.none()),  # MAX_NAMED: never admitted
    }
    if "fork" in caps:
        kinds["fork"] = st.tuples(st.just("fork"), st.integers(0, MAX_NAMED - 1), st.none())
    if "truncate" in caps:
        kinds["truncate"] = st.tuples(st.just("truncate"), st.integers(0, MAX_NAMED - 1), st.integers(0, 9))
    if "reset" in caps:
        kinds["reset"] = st.tuples(st.just("reset"), st.just(0), st.none())
    if "free-blocks" in caps:  # only where a witness weighs them: the other programs stay as they were
        kinds["hold"] = st.tuples(st.just("hold"), st.integers(0, MAX_NAMED - 1), st.integers(1, 3))
        twice_or_unheld = st.sampled_from([(False, False), (False, False), (True, False), (False, True)])
        release = st.builds(lambda n, tu: (n, *tu), st.integers(1, 3), twice_or_unheld)  # (held, twice, unheld)
        kinds["release"] = st.tuples(st.just("release"), st.just(0), release)
    kinds["resend"] = st.tuples(st.just("resend"), st.integers(0, MAX_NAMED - 1), st.none())  # where weighed
    if key_kinds:  # only where a witness weighs them, as the pool-level steps
        keyed = st.tuples(prompts(vocab), extra_keys(key_kinds))
        kinds["admit_keyed"] = st.tuples(st.just("admit_keyed"), st.just(0), keyed)
        kinds["rekey"] = st.tuples(st.just("rekey"), st.integers(0, MAX_NAMED - 1), st.none())
    pool = {"hold": 0, "release": 0, "admit_keyed": 0, "resend": 0, "rekey": 0}
    # NOTE: st.one_of drops a strategy listed twice (the same object), so a weight of n lists n distinct copies
    return st.one_of([s if n == 0 else s.map(_same) for k, s in kinds.items() for n in range(w.get(k, pool.get(k, 1)))])


def _same(step):
    """The step itself: ``s.map(_same)`` is a copy of ``s`` that st.one_of keeps beside ``s`` (a weight)."""
    return step


@dataclass
class Books:
    """What the handle shows after a step: live tables, free count, every block's count, read-backs."""

    tables: dict
    free: int
    counts: dict = field(default_factory=dict)
    reads: dict = field(default_factory=dict)


class BlockProgram:
    """Runs a program on a target's block handle and the list-of-requests reference, checking after every step."""

    def __init__(self, target: Target, total: int, evidence, policy: bool = False, longest: bool = False) -> None:
        """``policy``: check every allocation against the handle's declared policy; ``longest`` (with it): check
        that every hit of a new request is as long as the cache can serve (:class:`CachedBlocks`)."""
        assert policy or not longest, "longest needs policy: the policy says which cached blocks were evicted"
        self.target, self.evidence = target, evidence
        self.h: BlockHandle = target.make(GEOMETRY, capacity=total)
        self.caps = target.capabilities
        self.model = Requests(self.h.block_size, prefix="prefix" in self.caps)
        self.ids = list(self.h.block_ids())
        self.done = [f"make(capacity={total}): {self.h.total} blocks of {self.h.block_size} tokens"]
        self.named = 0  # requests named so far: r0, r1, ...
        self.extra: Counter = Counter()  # references the program holds at the pool level (hold), per block
        if policy and self.h.policy not in POLICY_MODELS:
            self.fail(f"policy={self.h.policy!r} is not one of {sorted(POLICY_MODELS)} (evict needs one)")
        self.policy = POLICY_MODELS[self.h.policy](self.ids) if policy else None
        self.cache = CachedBlocks() if longest and "prefix" in self.caps else None
        if len(self.ids) != self.h.total or len(set(self.ids)) != len(self.ids):
            self.fail(f"block_ids() gives {len(self.ids)} ids ({len(set(self.ids))} distinct), total is {self.h.total}")
        if self.h.free_contract not in FREE_CONTRACTS:
            self.fail(f"free_contract={self.h.free_contract!r} is not one of {sorted(FREE_CONTRACTS)}")
        release = getattr(self.h, "release_contract", None)
        if "free-blocks" in self.caps and release not in RELEASE_CONTRACTS:
            self.fail(f"release_contract={release!r} is not one of {sorted(RELEASE_CONTRACTS)}")
        self.books = self.check()

    # -- running

    def fail(self, says: str) -> None:
        numbered = "; ".join(f"{k}. {d}" for k, d in enumerate(self.done, 1))
        raise AssertionError(f"{self.target.name}: after the steps {numbered}: {says}")

    def run(self, steps) -> None:
        for verb, i, arg in steps:
            getattr(self, f"do_{verb}")(i, arg)
            self.books = self.check()
            self.evidence.count("steps")

    def fresh(self) -> str:
        self.named += 1
        return f"r{self.named - 1}"

    def pick(self, i: int) -> str | None:
        """The live request a step's index ``i`` names (i modulo the live ones), or None when none lives."""
        live = self.model.live()
        return live[i % len(live)] if live else None

    # -- the verbs

    def do_pass(self, i: int, _arg) -> None:
        """No step: what Hypothesis shrinks a step the failure does not need to (a program has 10 or more)."""

    def do_admit(self, i: int, toks: list[int]) -> None:
        self.allocate(self.fresh(), toks)

    def do_resend(self, i: int, _arg) -> None:
        """Admit a new request with the tokens and extra keys of request i (modulo those admitted; live or freed):
        a prompt sent again."""
        sent = self.model.order
        if sent:
            src = sent[i % len(sent)]
            keys = self.model.keys[src]
            self.allocate(self.fresh(), self.model.tokens(src), dict(keys) if keys else None)

    def do_rekey(self, i: int, _arg) -> None:
        """Admit a new request with the tokens of request i (modulo those admitted) and its extra keys' values each
        moved to the next kind the handle names (cache_salt x -> lora x; none -> the first kind, x): the same
        values under other kinds (vllm-project/vllm#44701)."""
        sent, kinds = self.model.order, sorted(getattr(self.h, "extra_keys", ()))
        if sent and kinds:
            src = sent[i % len(sent)]
            keys = dict(self.model.keys[src]) or {kinds[-1]: "x"}
            moved = {kinds[(kinds.index(k) + 1) % len(kinds)]: v for k, v in keys.items()}
            self.allocate(self.fresh(), self.model.tokens(src), moved)

    def do_admit_keyed(self, i: int, arg) -> None:
        toks, keys = arg
        self.allocate(self.fresh(), toks, keys)

    def do_extend(self, i: int, toks: list[int]) -> None:
        r = self.pick(i)
        if r is not None:
            self.allocate(r, toks)

    def allocate(self, r: str, toks: list[int], keys: dict[str, str] | None = None) -> None:
        """Allocate ``toks`` for ``r`` (a new request with extra keys ``keys`` when given) and check the result."""
        m, bs, new = self.model, self.h.block_size, not self.model.is_live(r)
        kk = keys_of(keys) if new else m.keys[r]
        held = self.held()
        table = self.books.tables.get(r, [])
        last_shared = bool(table) and len(held.get(table[-1], [])) + self.extra[table[-1]] > 1
        need = m.need(r, len(toks), last_shared)
        whole = (m.tokens(r) if not new else []) + list(toks)
        servable = self.cache.longest(whole, kk, bs) if new and self.cache is not None else []
        self.done.append(f"{'admit' if new else 'extend'} {r} with {toks}" + (f", extra keys {keys}" if keys else ""))
        if keys is not None:
            self.keyed(whole, kk)
        refused = None
        try:
            hit = self.h.allocate(r, toks) if keys is None else self.h.allocate(r, toks, keys=dict(keys))
        except MemoryError as e:
            refused = e
        if refused is not None:  # NOTE: checked outside the handler: a check failing in it reads as out of memory
            self.done[-1] += f" (refused: {type(refused).__name__})"
            if need <= self.books.free:
                self.fail(
                    f"the allocation was refused ({refused}) though {self.books.free} blocks are free and it "
                    f"needs {need}"
                )
            self.refused_despite_hit(refused, whole, servable, held)
            self.unchanged("a refused allocation")
            self.evidence.count("refused_allocations")
            return
        if hit and not new:
            self.fail(f"allocate of {r}, a live request, returned a prefix hit of {hit} tokens")
        why = m.hit_is_computed(whole, hit, kk) if new else ""
        if why:
            self.fail(why)
        if hit:
            self.done[-1] += f" (prefix hit: {hit} tokens)"
            self.evidence.count("prefix_hits")
            self.evidence.count("keyed_hits", int(bool(kk)))
        self.covers(r, whole, hit, servable, held)
        m.allocate(r, toks, kk)
        if self.policy is not None:
            took = self.reused(r, hit // bs, held)
            if self.cache is not None:
                self.cache.evicted(took)
                self.cache.filled(self.h.table(r), m.tokens(r), kk, bs)

    # -- what a prefix cache can serve (TGT-BLOCKS-HIT) and extra keys (TGT-BLOCKS-KEYS)

    def keyed(self, whole: list[int], kk) -> None:
        """Count the chances an admission with extra keys gives a manager to share wrongly."""
        other, renamed = self.model.collides(whole, kk)
        self.evidence.count("keyed_admits")
        self.evidence.count("other_key_prefixes", int(other))
        self.evidence.count("renamed_keys", int(renamed))

    def servable_free(self, servable: list[list[int]], held: dict) -> int:
        """How many of the blocks a hit would serve may have to come out of the free blocks (any block caching
        it is free: the manager may pick that one)."""
        return sum(any(b not in held and not self.extra[b] for b in bs_) for bs_ in servable)

    def refused_despite_hit(self, e: Exception, whole: list[int], servable: list[list[int]], held: dict) -> None:
        """A refused admission needs, after the hit the cache can serve, its other blocks plus the served ones it
        takes out of the free blocks; it must not be refused when that many are free."""
        if not servable:
            return
        self.evidence.count("refused_servable")
        need = blocks_for(len(whole), self.h.block_size) - len(servable) + self.servable_free(servable, held)
        if need <= self.books.free:
            self.fail(
                f"the allocation was refused ({e}) though {self.books.free} blocks are free and, after the hit of "
                f"{len(servable) * self.h.block_size} tokens the cache can serve (blocks {servable}), it needs {need}"
            )

    def covers(self, r: str, whole: list[int], hit: int, servable: list[list[int]], held: dict) -> None:
        """A new request's hit covers every leading full block the cache can serve (:class:`CachedBlocks`)."""
        if self.cache is None:
            return
        bs = self.h.block_size
        self.evidence.count("hits_servable", int(bool(servable)))
        self.evidence.count("servable_from_free", int(self.servable_free(servable, held) > 0))
        if hit < len(servable) * bs:
            j = hit // bs
            self.fail(
                f"admit of {r} ({whole}) got a prefix hit of {hit} tokens; the cache can serve "
                f"{len(servable) * bs}: its block {j}, the prefix {whole[: (j + 1) * bs]}, is cached in block(s) "
                f"{servable[j]} (computed since the last reset with the same extra keys, and not handed out since: "
                f"the declared policy {self.h.policy!r} evicts a cached block only when it hands it out again)"
            )

    def do_free(self, i: int, _arg) -> None:
        """Index ``MAX_NAMED`` names a request never admitted; any other, request i modulo the ones named."""
        if i < MAX_NAMED and not self.named:
            return
        r = f"r{i % self.named}" if i < MAX_NAMED else f"r{MAX_NAMED * 10}"
        if self.model.is_live(r):
            self.done.append(f"free {r}")
            self.h.free(r)
            self.model.free(r)
            self.released(self.books.tables[r], len(self.model.requests[r].tokens))
            return
        known = r in self.model.requests
        self.done.append(f"free {r} ({'again' if known else 'never admitted'})")
        self.evidence.count("double_frees" if known else "unknown_frees")
        contract = self.h.free_contract
        try:
            self.h.free(r)
        except REFUSALS as e:
            if contract == "idempotent":
                self.fail(
                    f"free of {r} ({'freed' if known else 'unknown'}) raised {type(e).__name__}: {e}; the "
                    f"contract is {contract}: {FREE_CONTRACTS[contract]}"
                )
        else:
            if contract == "refuse":
                self.fail(
                    f"free of {r} ({'freed' if known else 'unknown'}) was accepted; the contract is "
                    f"{contract}: {FREE_CONTRACTS[contract]}"
                )
        self.unchanged(f"a free of a {'freed' if known else 'never admitted'} request")

    def do_fork(self, i: int, _arg) -> None:
        src = self.pick(i)
        if src is None:
            return
        dst = self.fresh()
        self.done.append(f"fork {src} as {dst}")
        self.h.fork(src, dst)
        self.model.fork(src, dst)

    def do_truncate(self, i: int, n: int) -> None:
        r = self.pick(i)
        if r is None:
            return
        length = len(self.model.requests[r].tokens)
        n = min(n, length)
        self.done.append(f"truncate {r} to {n} (of {length})")
        self.h.truncate(r, n)
        self.model.truncate(r, n)
        if self.cache is not None:  # the cut block's slots may be rewritten: no longer a cached prefix, to be safe
            self.cache.evicted(self.books.tables[r][n // self.h.block_size :])
        self.released(self.books.tables[r], length)

    def do_hold(self, i: int, n: int) -> None:
        """One more pool-level reference to each of the first ``n`` blocks of a live request."""
        r = self.pick(i)
        if r is None:
            return
        blocks = self.books.tables[r][:n]
        self.done.append(f"hold {blocks} (blocks of {r})")
        self.h.hold(blocks)
        self.extra.update(blocks)
        self.evidence.count("holds")

    def do_release(self, _i: int, arg) -> None:
        """Release ``n`` distinct blocks the program holds, then (``twice``) the first of them again, then
        (``unheld``) a block no one holds; a list naming a block twice or an unheld one follows the contract."""
        n, twice, unheld = arg
        blocks = sorted(b for b, c in self.extra.items() if c > 0)[:n]
        if twice and blocks:
            blocks.append(blocks[0])
        nobody = [b for b in self.ids if b not in self.held() and not self.extra[b]][:1] if unheld else []
        blocks += nobody
        if not blocks:
            return
        twice_ = sorted({b for b in blocks if blocks.count(b) > 1})
        why = [f"block {b} twice" for b in twice_] + [f"block {b} held by no one" for b in nobody]
        wrong, contract = bool(why), self.h.release_contract
        self.done.append(f"release {blocks}" + (f" ({', '.join(why)})" if why else ""))
        self.evidence.count("wrong_releases" if wrong else "releases")
        self.evidence.count("releases_twice", int(len(set(blocks)) < len(blocks)))
        try:
            self.h.release(blocks)
        except REFUSALS as e:
            if not wrong or contract == "idempotent":
                self.fail(
                    f"release of {blocks} raised {type(e).__name__}: {e}; the release contract is {contract}: "
                    f"{RELEASE_CONTRACTS[contract]}"
                )
            self.unchanged(f"a refused release of {blocks}")
            return
        if wrong and contract == "refuse":
            self.fail(
                f"release of {blocks} was accepted; the release contract is {contract}: {RELEASE_CONTRACTS[contract]}"
            )
        for b in set(blocks):
            if self.extra[b]:
                self.extra[b] -= 1

    def do_reset(self, _i: int, _arg) -> None:
        busy = bool(self.held()) or any(self.extra.values())
        self.done.append(f"reset ({'blocks held' if busy else 'no block held'})")
        try:
            ok = self.h.reset()
        except REFUSALS:
            ok = False
        if busy and ok:
            self.fail("reset() was done while blocks are held; it must be refused")
        if not busy and not ok:
            self.fail("reset() was refused with no block held")
        if ok:
            self.model.reset()
            if self.cache is not None:
                self.cache.reset()
            self.evidence.count("resets_done")
        else:
            self.unchanged("a refused reset")
            self.evidence.count("resets_refused")

    # -- the declared reuse order

    def held(self) -> dict:
        out: dict = {}
        for r, table in self.books.tables.items():
            for i, b in enumerate(table):
                out.setdefault(b, []).append((r, i))
        return out

    def reused(self, r: str, hits: int, held_before: dict) -> list:
        """The blocks this allocation took (not prefix hits, not already held) are the policy's next ones; returns
        them."""
        table = list(self.h.table(r))
        touched = [b for b in table[:hits] if b not in held_before]  # free cached blocks a prefix hit took
        self.policy.hit(touched)
        free_before = set(self.ids) - set(held_before) - set(touched)
        took = [b for b in table[hits:] if b not in held_before]
        want = self.policy.expect(free_before, len(took))
        if took != want:
            self.fail(
                f"allocate of {r} took blocks {took}; the declared policy {self.h.policy!r} names {want} "
                f"(free before, after the prefix hit: {sorted(free_before)})"
            )
        self.policy.took(took)
        self.evidence.count("policy_checked", int(bool(took)))
        return took

    def released(self, before: list, length: int) -> None:
        """Tell the policy which blocks of a request's old table (of ``length`` tokens) became free, tail first,
        and whether each was full (a full block is cached, under a prefix cache)."""
        if self.policy is None:
            return
        still = self.held_now()
        bs = self.h.block_size
        gone = [(b, length >= (i + 1) * bs) for i, b in reversed(list(enumerate(before))) if b not in still]
        self.policy.freed([b for b, _ in gone], [c for _, c in gone])

    def held_now(self) -> set:
        return {b for r in self.model.live() for b in self.h.table(r)}

    # -- the checks

    def unchanged(self, what: str) -> None:
        now = self.check()
        for name in ("tables", "free", "counts", "reads"):
            if getattr(now, name) != getattr(self.books, name):
                self.fail(f"{what} changed the {name}: {getattr(self.books, name)} before, {getattr(now, name)} after")

    def check(self) -> Books:
        """The books after a step, checked against the reference."""
        m, h, bs = self.model, self.h, self.h.block_size
        tables = {r: list(h.table(r)) for r in m.live()}
        holders: dict = {}
        for r, table in tables.items():
            if len(table) != m.held(r):
                self.fail(
                    f"{r} holds {len(m.requests[r].tokens)} tokens in {len(table)} blocks {table}; "
                    f"ceil({len(m.requests[r].tokens)} / {bs}) = {m.held(r)}"
                )
            twice = sorted({b for b in table if table.count(b) > 1})
            if twice:
                self.fail(f"{r}'s table {table} holds block(s) {twice} twice: a block it holds was handed out again")
            if not set(table) <= set(self.ids):
                self.fail(f"{r}'s table {table} holds ids not in block_ids(): {sorted(set(table) - set(self.ids))}")
            for i, b in enumerate(table):
                holders.setdefault(b, []).append((r, i))
        for b, hs in holders.items():
            self.shared(b, hs)
        reads = {}
        for r in tables:
            got, want = list(h.read(r)), m.tokens(r)
            if got != want:
                self.fail(f"{r}'s slots read back {got}; its tokens are {want} (table {tables[r]})")
            reads[r] = got
        counts = {}
        if "refcount" in self.caps:  # before num_free: a count below 0 is the first thing a bad free breaks
            for b in self.ids:
                c, want = h.refcount(b), len(holders.get(b, [])) + self.extra[b]
                if c != want:
                    neg = " (negative)" if c < 0 else ""
                    held = f" and the program holds {self.extra[b]} reference(s)" if self.extra[b] else ""
                    self.fail(
                        f"refcount({b}) is {c}{neg}; {want - self.extra[b]} live request(s) hold it: "
                        f"{holders.get(b, [])}{held}"
                    )
                counts[b] = c
        used = set(holders) | {b for b, c in self.extra.items() if c > 0}
        free = h.num_free()
        if free != h.total - len(used):
            self.fail(
                f"num_free() is {free}; live requests and held references hold {len(used)} of {h.total} blocks, so "
                f"{h.total - len(used)} are free (free + used = total)"
            )
        return Books(tables, free, counts, reads)

    def shared(self, b: int, hs: list) -> None:
        if len(hs) > 1:
            self.evidence.count("shared_blocks")
        for (a, i), (c, j) in zip(hs, hs[1:], strict=False):  # each holder beside the next
            if i != j:
                self.fail(
                    f"block {b} is {a}'s block {i} and {c}'s block {j}: a block is handed to another request while held"
                )
            if not self.model.may_share(a, c, i):
                self.fail(
                    f"block {b} is held by {a} and {c} (block {i} of each), which share it neither by a fork "
                    f"nor by a prefix of full equal blocks (tokens {self.model.tokens(a)} and "
                    f"{self.model.tokens(c)}): a block held by a live request was handed out again"
                )


def _programs(kv_target, evidence, weights=None, policy=False, vocab=3, total=totals, longest=False, kinds=()) -> None:
    steps = steps_for(kv_target, weights, vocab, kinds)

    @given(total=total, steps=st.lists(steps, min_size=10, max_size=30))
    def prop(total, steps):
        run = BlockProgram(kv_target, total, evidence, policy=policy, longest=longest)
        run.run(steps)
        evidence.count("examples")
        evidence.count("requests", run.named)

    prop()


# ---- TGT-BLOCKS ------------------------------------------------------------------------------


@pytest.mark.kv_capabilities("blocks")
def test_block_managers_keep_the_books(kv_target, evidence):
    """Random programs of 10-30 steps over the requests they admit (admit, extend, free -- of live, freed and
    unknown requests -- and
    fork, truncate, reset where declared) on a pool of 2-10 blocks: after every step every live request holds
    ceil(len / block_size) blocks that read back its tokens, a block two live requests hold is shared by a fork
    or a prefix of equal full blocks, refcounts equal the live holders (never negative), free + used = total,
    an allocation is refused only when too few blocks are free, and a refused step changes nothing."""
    _programs(kv_target, evidence, weights={"admit": 2, "extend": 2, "free": 2, "fork": 2, "truncate": 2})


@pytest.mark.kv_capabilities("blocks")
def test_blocks_are_shared_only_as_declared(kv_target, evidence):
    """The programs of test_block_managers_keep_the_books, heavier in forks and in admits of prompts that share
    prefixes, with the same checks after every step: here blocks two live requests hold come up often, and each
    must be their block at the same index, of a history they share by a fork or a prefix hit on equal full
    blocks. n/a on a target with neither fork nor prefix: it shares no block (its books are still checked by
    the other witnesses)."""
    if not {"fork", "prefix"} & kv_target.capabilities:
        pytest.skip(f"n/a: target {kv_target.name} lacks capability fork or prefix (it never shares a block)")
    _programs(kv_target, evidence, weights={"admit": 3, "extend": 2, "free": 1, "fork": 3, "truncate": 1}, vocab=2)


@pytest.mark.kv_capabilities("blocks")
def test_freeing_again_is_idempotent_or_refused(kv_target, evidence):
    """A request shares its blocks with another (a fork, or the same prompt admitted again for a prefix
    cache), both take more tokens, the first is freed, then freed again, and a request never admitted is
    freed: each extra free follows the target's free contract (idempotent, or refused) and changes nothing,
    and the other request still holds and reads back all of its tokens."""

    @given(total=st.integers(4, 10), first=tokens(7), more=tokens(4), other=tokens(4), again=st.integers(1, 3))
    def prop(total, first, more, other, again):
        run = BlockProgram(kv_target, total, evidence)
        plan = [("admit", 0, first)]
        plan += [("fork", 0, None)] if "fork" in kv_target.capabilities else [("admit", 0, first)]
        plan += [("extend", 1, more), ("extend", 0, other), ("free", 0, None)] + [("free", 0, None)] * again
        plan += [("free", MAX_NAMED, None), ("extend", 1, more), ("free", 1, None), ("free", 1, None)]
        run.run(plan)
        evidence.count("examples")

    prop()


# ---- TGT-BLOCKS-RELEASE ------------------------------------------------------------------------


@pytest.mark.kv_capabilities("blocks", "free-blocks")
def test_releasing_blocks_is_idempotent_or_refused(kv_target, evidence):
    """Programs of TGT-BLOCKS with pool-level steps among them: hold (one more reference to the first 1-3
    blocks of a live request) and release of a list drawn from the blocks the program holds, sometimes
    naming one twice, sometimes adding a block no one holds: a release of a list naming a block twice or an
    unheld one is refused and changes nothing, or (idempotent) releases each held block once; after every
    step no count is below 0, refcount = live holders + held references, free + used = total, and every later
    allocation hands out only free blocks (a corrupt free queue shows up as a later verb failing)."""
    _programs(kv_target, evidence, weights={"admit": 2, "extend": 1, "free": 2, "hold": 3, "release": 3})


# ---- TGT-BLOCKS-REUSE --------------------------------------------------------------------------


@pytest.mark.kv_capabilities("blocks", "evict")
def test_blocks_are_reused_in_the_declared_order(kv_target, evidence):
    """The programs of test_block_managers_keep_the_books, with the target's declared policy checked at every
    allocation: the blocks it takes (not prefix hits) are, in table order, the ones the policy names from the
    free blocks and the order in which they became free (lowest-free: the lowest ids; lru: the free queue,
    freed blocks joining it tail first, not-full ones at the front and full, cached ones at the back)."""
    _programs(kv_target, evidence, weights={"admit": 3, "free": 3}, policy=True)


# ---- TGT-BLOCKS-PREFIX -------------------------------------------------------------------------


@pytest.mark.kv_capabilities("blocks", "prefix")
def test_prefix_hits_serve_computed_prefixes(kv_target, evidence):
    """Programs heavy in admits over a two-token vocabulary (so prompts share prefixes): every prefix hit is
    whole blocks, at most len - 1 tokens, each block's prefix computed since the last reset, and the blocks it
    serves read back the request's own tokens (their recorded contents equal the recomputed prefix)."""
    _programs(kv_target, evidence, weights={"admit": 5, "free": 2, "reset": 0}, vocab=2, total=st.integers(4, 10))


@pytest.mark.kv_capabilities("blocks", "reset")
def test_reset_refuses_while_blocks_are_held(kv_target, evidence):
    """Programs with resets among the steps: a reset while any block is held is refused (False or a
    refusal) and changes nothing; with no block held it is done, and no later prefix hit serves a prefix
    computed before it."""
    _programs(kv_target, evidence, weights={"admit": 3, "free": 3, "reset": 2}, vocab=2)


# ---- TGT-BLOCKS-HIT ----------------------------------------------------------------------------


@pytest.mark.kv_capabilities("blocks", "prefix", "evict")
def test_prefix_hits_are_as_long_as_the_cache_can_serve(kv_target, evidence):
    """Programs heavy in admits, prompts sent again (a new request with the tokens of one admitted before, live
    or freed) and frees over a two-token vocabulary on a pool of 3-8 blocks, the declared
    policy checked at every allocation, and the blocks that cache a prefix tracked from the handle's tables
    (:class:`harness.targets.blocks.CachedBlocks`: a full block caches its prefix until the policy hands it out
    again, or a reset): a new request's prefix hit covers every leading full block (at most len - 1 tokens) the
    cache can serve -- a block freed and not yet handed out again too -- and an allocation is refused only when
    fewer blocks are free than it needs after that hit."""
    weights = {"admit": 2, "resend": 3, "extend": 1, "free": 4, "reset": 1}
    _programs(kv_target, evidence, weights, policy=True, vocab=2, total=st.integers(3, 8), longest=True)


# ---- TGT-BLOCKS-KEYS ---------------------------------------------------------------------------


@pytest.mark.kv_capabilities("blocks", "prefix")
def test_requests_with_other_extra_keys_share_no_block(kv_target, evidence):
    """Programs of admits with extra keys (0-2 of the kinds the handle's ``extra_keys`` names, each with the value
    x or y), prompts sent again with their keys or with their keys' values under other kinds (a LoRA named x
    meets a cache_salt x), and frees, over a two-token vocabulary, with the books checked after
    every step: a block two live requests hold is shared by a prefix only when their extra keys are equal, and
    a prefix hit serves only prefixes a request with the same extra keys computed since the last reset. n/a
    on a target whose handles take no extra key."""
    kinds = tuple(getattr(kv_target.make(GEOMETRY, capacity=2), "extra_keys", ()))
    if not kinds:
        pytest.skip(f"n/a: target {kv_target.name} lacks capability extra-keys (its handle's extra_keys is empty)")
    weights = {"admit": 1, "admit_keyed": 4, "resend": 1, "rekey": 2, "extend": 1, "free": 4}
    _programs(kv_target, evidence, weights, vocab=2, total=st.integers(4, 10), kinds=kinds)
