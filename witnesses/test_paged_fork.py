"""PKV-FORK: forks share blocks, copy on write, and each equals a fresh contiguous replay of its history."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from impl.model.session import Session
from impl.paged import BlockPool, PagedSequence
from witnesses.synthetic import cache_delta, tiny_llama, token_ids
from witnesses.test_paged_equiv import BLOCK_SIZES, GEOMETRY, contiguous, delta, feed, round_inputs, view_delta

PREFILL, DIVERGE = 5, 2  # the seed gate: fork after a 5-token prefill, then 2 different tokens each


def diverged_forks(bs: int, seed: int):
    """Prefill 5 rows, fork, append 2 different rows to each fork. Returns everything the gates check."""
    rng = np.random.default_rng(seed)
    prefill, ra, rb = round_inputs(PREFILL, rng), round_inputs(DIVERGE, rng), round_inputs(DIVERGE, rng)
    pool = BlockPool(16, bs, GEOMETRY)
    a = PagedSequence(pool)
    feed(a, prefill)
    b = a.fork()
    counts_after_fork = [pool.refcount(x) for x in a.blocks]
    out_a, out_b = feed(a, ra), feed(b, rb)
    return dict(
        pool=pool,
        a=a,
        b=b,
        prefill=prefill,
        ra=ra,
        rb=rb,
        out_a=out_a,
        out_b=out_b,
        counts_after_fork=counts_after_fork,
    )


def test_forks_diverge_copy_on_write_and_equal_fresh_contiguous_replays(evidence):
    cow_fired, counts = {}, {}
    for bs in BLOCK_SIZES:
        f = diverged_forks(bs, 1000 + bs)
        pool, a, b = f["pool"], f["a"], f["b"]
        assert f["counts_after_fork"] == [2] * len(f["counts_after_fork"]), (
            f"block_size={bs}: counts after fork {f['counts_after_fork']}, want every shared block at 2"
        )
        shared = PREFILL // bs  # index of the partly filled block the prefill ends in (if any)
        partial = PREFILL % bs != 0
        if partial:  # both forks wrote into it: each must now hold its own copy
            assert a.blocks[shared] != b.blocks[shared], f"block_size={bs}: no copy-on-write"
            assert pool.refcount(a.blocks[shared]) == 1 and pool.refcount(b.blocks[shared]) == 1
        assert a.blocks[:shared] == b.blocks[:shared], f"block_size={bs}: full prefix blocks were copied"
        assert all(pool.refcount(x) == 2 for x in a.blocks[:shared])
        assert all(pool.refcount(x) == 1 for x in set(a.blocks[shared:]) | set(b.blocks[shared:]))
        cow_fired[str(bs)] = partial
        counts[str(bs)] = {x: pool.refcount(x) for x in sorted(set(a.blocks) | set(b.blocks))}
        for seq, mine, out in ((a, "ra", "out_a"), (b, "rb", "out_b")):
            ref = contiguous()  # a fresh contiguous replay of this fork's own history
            feed(ref, f["prefill"])
            want = feed(ref, f[mine])
            d = max(delta(f[out], want), cache_delta(seq, ref))
            evidence.observe("max_abs_delta", d)
            assert d == 0.0, f"block_size={bs}: fork with {mine} differs from its replay by {d}"
        a.release()
        b.release()
        assert pool.num_free == pool.num_blocks, f"block_size={bs}: blocks left after releasing both forks"
    evidence.record("cow_fired", cow_fired)
    evidence.record("counts_after_divergence", counts)


def test_a_view_after_copy_on_write_never_shows_the_siblings_later_writes(evidence):
    """A gathers a view, then opens a row (copy-on-write of the shared partial block). B, now sole holder
    of the old block, rewinds into it and writes. A's views of its old rows, before it writes anything
    itself, still give A's rows: what A served before the copy is not reused over storage B owns now."""
    d, cases = 0.0, 0
    for bs in (2, 3, 4, 7):
        rng = np.random.default_rng(3000 + bs)
        prefill, rb = round_inputs(PREFILL, rng), round_inputs(1, rng)
        pool = BlockPool(16, bs, GEOMETRY)
        a, ref = PagedSequence(pool), contiguous()
        feed(a, prefill)
        feed(ref, prefill)
        b = a.fork()
        a.view(0, PREFILL)  # layer 0 served in place from the shared blocks (the layer checked first below)
        a.reserve(1)  # copy-on-write: A gets its own copy of the partial last block
        assert pool.refcount(b.blocks[-1]) == 1, f"block_size={bs}: no copy-on-write"
        b.truncate(PREFILL - 1)
        feed(b, rb)  # B writes row PREFILL - 1 into the block A gave up
        layers = range(len(prefill.k))
        d = max([d] + [view_delta(a, ref, layer, PREFILL) for layer in layers])
        cases += len(layers)
    evidence.record("views", cases)
    evidence.record("max_abs_delta", d)
    assert d == 0.0, f"A's view shows B's writes after copy-on-write: max|delta|={d}"


def test_forked_sessions_equal_contiguous_replays_on_random_models(evidence):
    """Session.fork() on a paged cache, random forks and divergent tokens, random block sizes."""

    @given(
        n_pre=st.integers(1, 12),
        n_a=st.integers(1, 6),
        n_b=st.integers(1, 6),
        forks=st.integers(1, 3),
        bs=st.integers(1, 8),
        seed=st.integers(0, 9999),
    )
    def prop(n_pre, n_a, n_b, forks, bs, seed):
        model = tiny_llama(n_layers=2, n_kv_heads=2, group=2, head_dim=8)
        pool = BlockPool(64, bs, model.config.kv_geometry)
        ids = token_ids(n_pre + (forks + 1) * 6, seed)
        pre = ids[:n_pre]
        root = Session(model, cache="paged", pool=pool)
        root.prefill(pre)
        children = [root.fork() for _ in range(forks)]
        for c in children:  # a fork predicts the same next token: its own copy of the root's last logits
            assert c.last_logits is not root.last_logits and np.array_equal(c.last_logits, root.last_logits), (
                "a fork's last_logits are not an equal copy of its parent's"
            )
        sessions = [root, *children]
        histories = []
        for i, s in enumerate(sessions):  # each fork appends its own tokens, root last
            own = ids[n_pre + 6 * i : n_pre + 6 * i + (n_a if i % 2 else n_b)]
            got = s.prefill(own)
            ref = Session(model)
            ref.prefill(pre)
            want = ref.prefill(own)
            d = max(delta(got, want), cache_delta(s.cache, ref.cache))
            evidence.observe("max_abs_delta", d)
            assert d == 0.0, f"fork {i} differs from a fresh replay of its history by {d}"
            histories.append(pre + own)
        for s, h in zip(sessions, histories, strict=True):  # and after all the others wrote: nothing leaked in
            ref = Session(model)
            ref.prefill(h)
            assert cache_delta(s.cache, ref.cache) == 0.0
        for s in sessions:
            s.cache.release()
        assert pool.num_free == pool.num_blocks
        evidence.count("examples")

    prop()


# ---- real weights -------------------------------------------------------------------------


def test_real_weights_forks_equal_contiguous_replays(smollm2, evidence):
    """Fork a paged session after a prompt; one fork decodes greedily, the other is forced off course."""
    pool = BlockPool(16, 4, smollm2.config.kv_geometry)
    prompt = smollm2.tokenizer.encode("The best thing about living near the sea is")
    a = smollm2.session(cache="paged", pool=pool)
    a.prefill(prompt)
    b = a.fork()
    forced = smollm2.tokenizer.encode(" the")
    toks_a = a.generate([], 4)  # a continues greedily
    toks_b = b.generate(forced, 3)  # b is forced off a's path first
    d, cases = 0.0, []
    for s, history, toks in ((a, prompt, toks_a), (b, prompt + forced, toks_b)):
        ref = smollm2.session()
        want = ref.generate(history, len(toks))
        cases.append(smollm2.tokenizer.decode(history[len(prompt) :] + toks))
        assert toks == want, f"fork tokens {toks} != fresh contiguous replay {want}"
        d = max(d, delta(s.last_logits, ref.last_logits), cache_delta(s.cache, ref.cache))
    evidence.record("max_abs_delta", d)
    evidence.record("continuations", cases)
    evidence.record("shared_blocks", sum(pool.refcount(x) == 2 for x in set(a.cache.blocks)))
    assert d == 0.0
    assert forced + toks_b != toks_a[: len(forced) + 3], "the forks did not diverge"
