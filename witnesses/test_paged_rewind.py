"""PKV-REWIND: truncating a fork back to the fork point and appending B's rows gives B's outputs bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from impl.model.session import Session
from impl.paged import BlockPool
from witnesses.synthetic import cache_delta, tiny_llama, token_ids
from witnesses.test_paged_equiv import BLOCK_SIZES, delta, feed
from witnesses.test_paged_fork import PREFILL, diverged_forks


def test_truncate_to_the_fork_point_then_append_b_equals_b(evidence):
    """The seed gate: after the fork gate, A.truncate(5) then A += RB gives B's outputs and cache."""
    freed = {}
    for bs in BLOCK_SIZES:
        f = diverged_forks(bs, 2000 + bs)
        pool, a, b = f["pool"], f["a"], f["b"]
        used = pool.num_used
        a.truncate(PREFILL)
        freed[str(bs)] = used - pool.num_used
        kept, held = -(-PREFILL // bs), -(-(PREFILL + 2) // bs)  # blocks for 5 rows; A held 7 rows' blocks
        assert len(a.blocks) == kept and freed[str(bs)] == held - kept, (
            f"block_size={bs}: truncate(5) kept {len(a.blocks)} blocks (want {kept}) and freed "
            f"{freed[str(bs)]} (want {held - kept}: A's blocks past the fork point are its own)"
        )
        out = feed(a, f["rb"])
        d = max(delta(out, f["out_b"]), cache_delta(a, b))
        evidence.observe("max_abs_delta", d)
        assert d == 0.0, f"block_size={bs}: rewound A differs from B by {d}"
        a.truncate(0)  # the whole way back: every block of A returned, B untouched
        assert a.blocks == [] and len(a) == 0 and pool.num_used == len(b.blocks), f"block_size={bs}: truncate(0)"
        feed(a, f["prefill"])
        out = feed(a, f["rb"])
        d = max(delta(out, f["out_b"]), cache_delta(a, b))
        evidence.observe("max_abs_delta", d)
        assert d == 0.0, f"block_size={bs}: A rewound to 0 and replayed differs from B by {d}"
    evidence.record("blocks_freed_by_truncate", freed)


def test_control_without_the_truncate_a_differs_from_b(evidence):
    """Control: the rewind matters: appending RB after RA (no truncate) does not give B's outputs."""
    smallest = np.inf
    for bs in BLOCK_SIZES:
        f = diverged_forks(bs, 2000 + bs)
        smallest = min(smallest, delta(feed(f["a"], f["rb"]), f["out_b"]))
    evidence.record("smallest_max_abs_delta", smallest)  # over the block sizes
    assert smallest > 0, "A without the rewind already equals B: the rewind witness measures nothing"


def test_speculative_rewind_on_random_models(evidence):
    """Sessions: draft k tokens, truncate back to the accept point, feed the real tokens; equals a clean run."""

    @given(
        n_pre=st.integers(1, 12),
        n_draft=st.integers(1, 6),
        data=st.data(),
        bs=st.integers(1, 8),
        seed=st.integers(0, 9999),
    )
    def prop(n_pre, n_draft, data, bs, seed):
        model = tiny_llama(n_layers=2, n_kv_heads=2, group=2, head_dim=8)
        accept = data.draw(st.integers(0, n_draft), label="accepted")
        n_real = data.draw(st.integers(1, 5), label="real")
        ids = token_ids(n_pre + n_draft + n_real, seed)
        pre, draft, real = ids[:n_pre], ids[n_pre : n_pre + n_draft], ids[n_pre + n_draft :]
        pool = BlockPool(32, bs, model.config.kv_geometry)
        s = Session(model, cache="paged", pool=pool)
        s.prefill(pre)
        other = s.fork()  # a sibling keeps the prefix blocks shared, as in beam/speculative serving
        s.prefill(draft)
        s.truncate(n_pre + accept)
        assert len(s) == n_pre + accept and s.last_logits is None, "Session.truncate kept rows or stale logits"
        got = s.prefill(real)
        ref = Session(model)
        ref.prefill(pre + draft[:accept])
        want = ref.prefill(real)
        d = max(delta(got, want), cache_delta(s.cache, ref.cache))
        evidence.observe("max_abs_delta", d)
        assert d == 0.0, f"rewound session differs from a clean run by {d}"
        sib = Session(model)
        sib.prefill(pre)
        assert cache_delta(other.cache, sib.cache) == 0.0, "the sibling saw the rewound session's writes"
        evidence.count("examples")

    prop()


def test_real_weights_rewind_equals_the_fork_that_took_the_other_path(smollm2, evidence):
    """SmolLM2: A drafts 3 greedy tokens, rewinds to the fork point and takes B's forced path."""
    pool = BlockPool(16, 4, smollm2.config.kv_geometry)
    prompt = smollm2.tokenizer.encode("My favourite colour is")
    a = smollm2.session(cache="paged", pool=pool)
    a.prefill(prompt)
    b = a.fork()
    forced = smollm2.tokenizer.encode(" green because")
    lb = b.prefill(forced)
    draft = a.generate([], 3)
    a.truncate(len(prompt))
    assert len(a.cache) == len(prompt) and a.last_logits is None
    la = a.prefill(forced)
    d = max(delta(la, lb), cache_delta(a.cache, b.cache))
    ta, tb = a.generate([], 3), b.generate([], 3)
    evidence.record("max_abs_delta", d)
    evidence.record("tokens_differing", sum(x != y for x, y in zip(ta, tb, strict=True)))
    evidence.record("draft", smollm2.tokenizer.decode(draft))
    evidence.record("continuation", smollm2.tokenizer.decode(ta))
    assert d == 0.0 and ta == tb
