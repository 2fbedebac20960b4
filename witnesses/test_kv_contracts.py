"""KV-T5: contiguous truncate keeps exactly the prefix; truncate and evict refuse what they cannot honour.

Every expected value comes from a numpy reference held beside the cache
(the rows written, in order) and from the argument rules as the docstrings
state them; no impl function computes an expected value. The caches are
synthetic (random rows written through ``reserve``/``write``, as the forward
pass does), so the checks run in milliseconds on many geometries.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from impl.cache import KVGeometry
from impl.errors import CacheError
from impl.kv import KVCache
from impl.paged import BlockPool, PagedSequence, SequenceReleased
from impl.rope import RopeTable

small_geometries = st.builds(
    KVGeometry, n_layers=st.integers(1, 3), n_kv_heads=st.integers(1, 3), head_dim=st.sampled_from([2, 4, 8])
)

# Values that are not an int (the caches' own word: bools and floats are not ints here).
NOT_INTS = (1.0, 0.0, 1.5, -0.5, True, False, None, "1", np.float64(1.0), np.float32(0.0), [1], (0,))


class Ref:
    """What a cache must hold: every layer's k_raw, k and v rows in append order (numpy, float32)."""

    def __init__(self, g: KVGeometry) -> None:
        self.g = g
        self.rows = {
            name: [np.zeros((0, g.kv_dim), np.float32) for _ in range(g.n_layers)] for name in ("k_raw", "k", "v")
        }

    def __len__(self) -> int:
        return self.rows["k"][0].shape[0]

    def append(self, new: dict[str, list[np.ndarray]]) -> None:
        for name, per_layer in new.items():
            self.rows[name] = [np.concatenate([a, b]) for a, b in zip(self.rows[name], per_layer, strict=True)]

    def truncate(self, n: int) -> None:
        self.rows = {name: [a[:n] for a in arrs] for name, arrs in self.rows.items()}

    def evict(self, start: int, n: int) -> None:
        self.rows = {
            name: [np.concatenate([a[:start], a[start + n :]]) for a in arrs] for name, arrs in self.rows.items()
        }

    def copy(self) -> Ref:
        r = Ref(self.g)
        r.rows = {name: [a.copy() for a in arrs] for name, arrs in self.rows.items()}
        return r


def random_rows(g: KVGeometry, t: int, rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    return {
        name: [rng.standard_normal((t, g.kv_dim)).astype(np.float32) for _ in range(g.n_layers)]
        for name in ("k_raw", "k", "v")
    }


def append(store, ref: Ref, t: int, rng: np.random.Generator) -> np.ndarray:
    """Append t random rows to ``store`` the way the forward pass does (reserve, then write per layer)."""
    rows = random_rows(store.geometry, t, rng)
    start = len(store)
    got = store.reserve(t)
    for layer in range(store.geometry.n_layers):
        store.write(layer, start, rows["k_raw"][layer], rows["k"][layer], rows["v"][layer])
    ref.append(rows)
    return got


def contiguous(g: KVGeometry, capacity: int) -> KVCache:
    return KVCache(g, [RopeTable(10000.0, g.head_dim, 256)] * g.n_layers, capacity=capacity)


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def rows_differing(store, ref: Ref, names=("k_raw", "k", "v")) -> int:
    """Rows (over every layer and array) whose bits differ from the reference; all of them if lengths differ."""
    bad = 0
    for name in names:
        for got, want in zip(getattr(store, name), ref.rows[name], strict=True):
            if got.shape != want.shape:
                bad += max(got.shape[0], want.shape[0])
            else:
                bad += int(np.sum(np.any(got.view(np.uint32) != want.view(np.uint32), axis=1)))
    return bad


def refuses(call, error: type[Exception] = CacheError) -> bool:
    """True when ``call()`` raises ``error``, False when it returns; another exception fails the witness (the
    claim is a refusal with ``error``, not any crash), as an assertion rather than an error."""
    try:
        call()
    except error:
        return True
    except Exception as e:
        raise AssertionError(f"raised {type(e).__name__} ({e}) instead of refusing with {error.__name__}") from e
    return False


def accepts(call, what: str):
    """``call()``'s result; any exception from it (a valid argument refused, or a crash on one) fails the
    witness as an assertion: the claim is that every valid argument is accepted."""
    try:
        return call()
    except Exception as e:
        raise AssertionError(f"{what} was refused: {type(e).__name__}: {e}") from e


def snapshot(c: KVCache) -> tuple:
    return len(c), bits(c.pos), tuple(bits(a) for name in ("k", "k_raw", "v") for a in getattr(c, name))


# ---- contiguous truncate -----------------------------------------------------------------------


def test_truncate_keeps_exactly_the_prefix_and_later_writes_continue_at_n(evidence):
    """Random interleavings of appends and truncates (capacity as small as 1, so storage doubles under them):
    after every step the cache holds exactly the reference rows, bit for bit, pos is 0..len-1, and an
    append after truncate(n) is given positions n, n+1, ..."""

    @given(
        g=small_geometries,
        capacity=st.integers(1, 6),
        seed=st.integers(0, 2**16),
        steps=st.lists(st.tuples(st.sampled_from(["append", "truncate"]), st.integers(0, 99)), min_size=1, max_size=10),
    )
    def prop(g, capacity, seed, steps):
        rng = np.random.default_rng(seed)
        c, ref = contiguous(g, capacity), Ref(g)
        append(c, ref, 1 + seed % 7, rng)
        worst = 0
        for verb, x in steps:
            if verb == "append":
                t, n0 = 1 + x % 5, len(c)
                got = append(c, ref, t, rng)
                assert list(got) == list(range(n0, n0 + t)), f"append after len {n0} got positions {list(got)}"
            else:
                n = x % (len(c) + 1)  # every n in 0..len is reachable
                accepts(lambda c=c, n=n: c.truncate(n), f"truncate({n}) on len {len(c)}")
                ref.truncate(n)
                evidence.count("truncates")
                evidence.count("truncates_to_len", int(n == len(ref) and n > 0))
            assert len(c) == len(ref), f"len is {len(c)}, the reference holds {len(ref)} rows"
            assert list(c.pos) == list(range(len(ref))), f"pos is {list(c.pos)}"
            diff = rows_differing(c, ref)
            worst = max(worst, diff)
            assert diff == 0, f"{diff} rows differ from the reference after {verb}"
        evidence.observe("rows_differing", worst)
        evidence.count("examples")

    prop()


def test_truncate_accepts_every_n_in_0_to_len_and_refuses_the_rest(evidence):
    """For every n in 0..len (int and numpy int) truncate is accepted and keeps exactly rows [0, n); for
    n < 0, n > len and every non-int (floats, bools, None, str) it raises CacheError and changes nothing."""

    @given(g=small_geometries, length=st.integers(0, 9), capacity=st.integers(1, 12), seed=st.integers(0, 999))
    def prop(g, length, capacity, seed):
        rng = np.random.default_rng(seed)
        base, ref = contiguous(g, capacity), Ref(g)
        if length:
            append(base, ref, length, rng)
        for n in list(range(length + 1)) + [np.int64(length), np.int32(0)]:
            c, want = base.clone(), ref.copy()
            accepts(lambda c=c, n=n: c.truncate(n), f"truncate({n!r}) on len {length}")
            want.truncate(int(n))
            assert len(c) == int(n) and type(len(c)) is int, f"truncate({n!r}) left len={len(c)!r}"
            assert rows_differing(c, want) == 0 and list(c.pos) == list(range(int(n)))
            evidence.count("accepted")
        # a narrow numpy int is an int too: the length it leaves must not be stuck in its dtype, so the
        # next appends (past what an int8 holds) continue at n, n+1, ... and land after the kept rows
        for n in (np.int8(length), np.uint8(length // 2), np.int16(0)):
            c, want = base.clone(), ref.copy()
            accepts(lambda c=c, n=n: c.truncate(n), f"truncate({n!r}) on len {length}")
            want.truncate(int(n))
            for t in (130, 130):
                n0 = len(c)
                got = accepts(lambda c=c, want=want, t=t: append(c, want, t, rng), f"append({t}) after truncate({n!r})")
                assert list(got) == list(range(n0, n0 + t)), f"after truncate({n!r}) an append got {list(got)}"
            assert len(c) == int(n) + 260 and rows_differing(c, want) == 0
            evidence.count("accepted_narrow")
        before = snapshot(base)
        for n in [-1, -length - 1, length + 1, length + 5, *NOT_INTS]:
            assert refuses(lambda n=n: base.truncate(n)), f"truncate({n!r}) on a cache of len {length} was accepted"
            evidence.count("refused")
            assert snapshot(base) == before, f"a refused truncate({n!r}) changed the cache"

    prop()


# ---- contiguous evict: the argument contract -----------------------------------------------------


def evict_expectation(length: int, start, n):
    """What evict(start, n) must do on a cache of ``length`` rows: ('refuse', why) or ('remove', count)."""
    if any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) for a in (start, n)):
        return "refuse", "not an int"
    if start < 0 or n < 0:
        return "refuse", "negative"
    if start > length or (start == length and n > 0):
        return "refuse", "start past the end"
    return "remove", min(n, length - start)  # the span is clipped at the end; n == 0 removes nothing


def test_evict_checks_its_arguments_and_clips_at_the_end(evidence):
    """Every (start, n) on a grid around the boundaries (negative, 0, len, past len) and non-int arguments:
    refused with CacheError and no change, or accepted and then it returns the count removed
    (n clipped to len - start; 0 for n == 0, also at start == len) and holds the reference's survivors."""

    @given(g=small_geometries, length=st.integers(0, 8), seed=st.integers(0, 999))
    def prop(g, length, seed):
        rng = np.random.default_rng(seed)
        base, ref = contiguous(g, 4), Ref(g)
        if length:
            append(base, ref, length, rng)
        grid = [(s, n) for s in range(-2, length + 3) for n in range(-2, length + 4)]
        odd = [(1.0, 1), (0, 1.0), (True, 1), (0, True), (None, 1), (0, "1"), (np.int64(0), np.int64(length))]
        for start, n in grid + odd:
            c = base.clone()
            verdict, what = evict_expectation(length, start, n)
            if verdict == "refuse":
                assert refuses(lambda c=c, start=start, n=n: c.evict(start, n)), (
                    f"evict(start={start!r}, n={n!r}) on len {length} was accepted ({what})"
                )
                evidence.count("refused")
                assert snapshot(c) == snapshot(base), f"a refused evict({start!r}, {n!r}) changed the cache"
                continue
            got = accepts(
                lambda c=c, start=start, n=n: c.evict(start, n), f"evict(start={start!r}, n={n!r}) on len {length}"
            )
            assert got == what, f"evict({start}, {n}) on len {length} returned {got!r}, removed must be {what}"
            if what == 0:  # removing nothing is a no-op: no row (not even a K after start) is rewritten
                assert snapshot(c) == snapshot(base), f"evict({start}, {n}) removed nothing but changed the cache"
                evidence.count("empty_unchanged")
            want = ref.copy()
            want.evict(int(start), what)
            assert len(c) == length - what, f"evict({start}, {n}) left len {len(c)}, want {length - what}"
            assert list(c.pos) == list(range(length - what))
            assert rows_differing(c, want, names=("k_raw", "v")) == 0, f"evict({start}, {n}): survivors differ"
            kept_k = [a[: int(start)] for a in c.k]
            assert all(bits(a) == bits(b[: int(start)]) for a, b in zip(kept_k, ref.rows["k"], strict=True)), (
                f"evict({start}, {n}) changed K of rows before the span"
            )
            evidence.count("accepted")
            evidence.count("clipped", int(what < n))
            evidence.count("empty_at_end", int(start == length and n == 0))

    prop()


# ---- paged truncate -------------------------------------------------------------------------------


def test_paged_truncate_keeps_the_prefix_releases_the_rest_and_refuses_out_of_range(evidence):
    """A paged sequence (shared through a fork, so counts matter) truncated to every n in 0..len keeps
    rows [0, n) bit for bit and exactly ceil(n / block_size) blocks, returns the others to the pool
    (counts back where they were), and continues appending at n; n < 0, n > len and non-ints raise
    CacheError with nothing changed; a released sequence raises SequenceReleased."""

    @given(
        g=small_geometries,
        bs=st.integers(1, 5),
        length=st.integers(0, 11),
        t=st.integers(1, 4),
        seed=st.integers(0, 999),
    )
    def prop(g, bs, length, t, seed):
        rng = np.random.default_rng(seed)
        # room for the sequence, a fork's append and its copy-on-write block: the pool never grows here,
        # so the state after each fork's release must be the state before it
        pool = BlockPool(2 * -(-(length + t) // bs) + 2, bs, g)
        seq, ref = PagedSequence(pool), Ref(g)
        if length:
            append(seq, ref, length, rng)

        def state():
            return (
                list(seq.blocks),
                len(seq),
                pool.num_blocks,
                pool.num_free,
                [pool.refcount(b) for b in range(pool.num_blocks)],
            )

        before = state()
        for n in list(range(length + 1)) + [np.int64(length)]:
            f = seq.fork()
            accepts(lambda f=f, n=n: f.truncate(n), f"paged truncate({n!r}) on len {length}")
            keep = -(-int(n) // bs)
            assert len(f) == int(n) and f.blocks == seq.blocks[:keep], (
                f"truncate({n}) left len {len(f)} and blocks {f.blocks}; want {int(n)} and {seq.blocks[:keep]}"
            )
            assert [pool.refcount(b) for b in seq.blocks] == [2] * keep + [1] * (len(seq.blocks) - keep), (
                f"truncate({n}) of a fork: the counts of the dropped blocks did not go back to 1"
            )
            want = ref.copy()
            want.truncate(int(n))
            assert rows_differing(f, want) == 0, f"truncate({n}): kept rows differ"
            got = append(f, want, t, rng)
            assert list(got) == list(range(int(n), int(n) + t)), f"append after truncate({n}) got {list(got)}"
            assert rows_differing(f, want) == 0, f"append after truncate({n}): rows differ"
            f.release()
            assert state() == before, f"truncate({n}) of a fork, append, release: the pool did not come back"
            evidence.count("accepted")
        for n in [-1, -length - 1, length + 1, length + bs, *NOT_INTS]:
            assert refuses(lambda n=n: seq.truncate(n)), f"paged truncate({n!r}) on len {length} was accepted"
            evidence.count("refused")
            assert state() == before, f"a refused paged truncate({n!r}) changed the sequence or the pool"
        free = pool.num_free
        seq.truncate(length // 2)
        dropped = len(before[0]) - -(-(length // 2) // bs)
        assert pool.num_free == free + dropped, f"truncate({length // 2}) freed {pool.num_free - free}, want {dropped}"
        seq.release()
        assert refuses(lambda: seq.truncate(0), SequenceReleased), "truncate(0) on a released sequence was accepted"
        evidence.count("released_refused")

    prop()
