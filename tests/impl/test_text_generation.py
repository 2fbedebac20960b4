import subprocess
import sys

import numpy as np


def test_greedy_continuation_of_the_capital_prompt_names_paris(smollm2):
    s = smollm2.session()
    new = s.generate(smollm2.tokenizer.encode("The capital of France is"), 8)
    assert smollm2.tokenizer.decode(new).startswith(" Paris")
    assert len(s) == 5 + 8  # the prompt and every generated token are in the cache


def test_generate_continues_where_it_stopped(smollm2):
    ids = smollm2.tokenizer.encode("1, 2, 3, 4,")
    a = smollm2.session()
    first = a.generate(ids, 4) + a.generate([], 4)
    b = smollm2.session()
    assert b.generate(ids, 8) == first


def test_session_from_prefix_equals_full_recompute(smollm2):
    tk = smollm2.tokenizer
    prefix, suffix = tk.encode("def add(a, b):"), tk.encode("\n    return")
    p = smollm2.session()
    p.prefill(prefix)
    spliced = smollm2.session_from_prefix(p, suffix)
    full = smollm2.session()
    lf = full.prefill(prefix + suffix)
    assert np.array_equal(spliced.last_logits, lf[-1])
    assert len(p) == len(prefix)  # the prefix session is untouched
    assert spliced.generate([], 6) == full.generate([], 6)


def test_cli_streams_prompt_and_continuation():
    r = subprocess.run(
        [sys.executable, "-m", "impl", "generate", "The capital of France is", "-n", "4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("The capital of France is Paris")


def test_cli_runs_on_every_cache_design_with_the_same_greedy_text():
    outs = []
    for args in ([], ["--cache", "paged"], ["--cache", "ring"]):
        r = subprocess.run(
            [sys.executable, "-m", "impl", "generate", "1, 2, 3, 4,", "-n", "6", *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1] == outs[2]


def test_cli_refuses_precision_without_a_ring():
    r = subprocess.run(
        [sys.executable, "-m", "impl", "generate", "hi", "--precision", "int8"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "--precision applies to --cache ring only" in r.stderr


def test_swiglu_is_silu_of_gate_times_up_bit_for_bit():
    import numpy as np

    from impl.model.llama import silu, swiglu

    gu = (np.random.default_rng(0).standard_normal((37, 2 * 96)) * 6).astype(np.float32)
    gu[0, :4] = [0.0, -0.0, 88.0, -104.0]  # exp overflow and underflow at the edges
    want = silu(gu[:, :96]) * gu[:, 96:]
    got = swiglu(gu, 96)
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
