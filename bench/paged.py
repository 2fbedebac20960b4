#!/usr/bin/env python3
"""Paged versus contiguous KV cache: decode-attention time, and the memory forking saves.

Prints, from one run (machines are shared and noisy: compare the ratios):
  - decode attention at each context: one decode step's cache work for one
    layer (reserve a row, write it, attend the new query over every key,
    truncate back), SmolLM2 geometry (3 KV heads x 64, 9 query heads), on the
    contiguous KVCache, on a paged sequence whose blocks are one consecutive
    run (a fresh pool: view is a zero-copy slice), and on one whose page
    table is shuffled (a fragmented pool: view gathers every block);
  - blocks and bytes for a prompt shared by N forks that each decode a few
    tokens, shared copy-on-write versus copied per fork.

    python bench/paged.py [--contexts 1024,4096] [--block-size 16] [--forks 8]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from impl.attention import causal_attention  # noqa: E402
from impl.cache import KVGeometry  # noqa: E402
from impl.kv import KVCache  # noqa: E402
from impl.model.config import ModelConfig  # noqa: E402
from impl.paged import BlockPool, PagedSequence  # noqa: E402
from impl.rope import RopeTable  # noqa: E402

CFG = ModelConfig()  # SmolLM2-135M geometry; no weights needed
LAYERS = 2  # cache layers timed (each layer's step is the same work; x n_layers for a whole step)
GEOMETRY = KVGeometry(LAYERS, CFG.n_kv_heads, CFG.head_dim)


def filled(cache, n: int, rng) -> None:
    cache.reserve(n)
    for layer in range(LAYERS):
        a = rng.standard_normal((3, n, CFG.kv_dim)).astype(np.float32)
        cache.write(layer, 0, a[0], a[1], a[2])


def decode_step(cache, n: int, q: np.ndarray, row: np.ndarray) -> None:
    """One decode step's cache work at context n, over LAYERS layers, then undo it."""
    cache.reserve(1)
    for layer in range(LAYERS):
        cache.write(layer, n - 1, row, row, row)
        causal_attention(q, cache, layer, n - 1, None, 0.125)
    cache.truncate(n - 1)


def shuffle_table(seq: PagedSequence, seed: int) -> None:
    """Move a sequence's blocks to a random permutation of their ids (same rows, fragmented table)."""
    perm = list(seq.blocks)
    random.Random(seed).shuffle(perm)
    for a in seq.pool.storage.arrays:
        a[:, perm] = a[:, seq.blocks].copy()
    seq.blocks = perm


def bench_attention(contexts: list[int], bs: int, repeats: int) -> None:
    print(
        f"decode attention, one layer-step (ms), block_size={bs}, {CFG.n_kv_heads} KV heads x "
        f"{CFG.head_dim}, {CFG.n_heads} query heads; best of {repeats}"
    )
    print(
        f"{'context':>8} {'contiguous':>11} {'paged run':>10} {'paged frag':>11} {'run/contig':>11} {'frag/contig':>12}"
    )
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, CFG.n_kv_heads, CFG.group, CFG.head_dim)).astype(np.float32)
    row = rng.standard_normal((1, CFG.kv_dim)).astype(np.float32)
    for n in contexts:
        ropes = [RopeTable(CFG.theta(0), CFG.head_dim, 2)] * LAYERS  # never used: no eviction
        contig = KVCache(GEOMETRY, ropes, capacity=n)
        filled(contig, n - 1, np.random.default_rng(n))
        caches = {"contiguous": contig}
        for name in ("run", "frag"):
            seq = PagedSequence(BlockPool(-(-n // bs) + 4, bs, GEOMETRY))
            filled(seq, n - 1, np.random.default_rng(n))
            caches[name] = seq
        shuffle_table(caches["frag"], n)
        times = {name: [] for name in caches}
        for _ in range(repeats):  # interleaved, so drift in the machine's load hits all three alike
            for name, cache in caches.items():
                t = time.perf_counter()
                decode_step(cache, n, q, row)
                times[name].append((time.perf_counter() - t) / LAYERS)
        times = {name: min(ts) for name, ts in times.items()}
        c = times["contiguous"]
        print(
            f"{n:>8} {c * 1e3:>11.3f} {times['run'] * 1e3:>10.3f} {times['frag'] * 1e3:>11.3f} "
            f"{times['run'] / c:>10.2f}x {times['frag'] / c:>11.2f}x"
        )
        del contig, caches


def bench_fork_memory(prompt: int, forks: int, decode: int, bs: int) -> None:
    # NOTE: block counts do not depend on layers or kv_dim, so the accounting pool is 1 x 1 wide.
    pool = BlockPool(forks * (-(-(prompt + decode) // bs) + 1), bs, KVGeometry(1, 1, 1))
    root = PagedSequence(pool)
    root.reserve(prompt)
    seqs = [root] + [root.fork() for _ in range(forks - 1)]
    for s in seqs:
        s.reserve(decode)
    shared = pool.num_used
    copied = forks * -(-(prompt + decode) // bs)
    block_bytes = 3 * CFG.n_layers * bs * CFG.kv_dim * 4  # K, k_raw, V of every layer
    contiguous_bytes = forks * (prompt + decode) * 3 * CFG.n_layers * CFG.kv_dim * 4
    mib = 1 / 2**20
    print(
        f"\nfork memory: a {prompt}-token prompt shared by {forks} forks, each decoding {decode} tokens "
        f"(SmolLM2: {block_bytes * mib:.2f} MiB per {bs}-token block)"
    )
    print(f"  paged, shared copy-on-write: {shared:5d} blocks = {shared * block_bytes * mib:8.1f} MiB")
    print(f"  paged, copied per fork:      {copied:5d} blocks = {copied * block_bytes * mib:8.1f} MiB")
    print(f"  contiguous, one per fork:    {forks * (prompt + decode):5d} rows   = {contiguous_bytes * mib:8.1f} MiB")
    print(
        f"  forking saves {copied - shared} blocks ({(copied - shared) * block_bytes * mib:.1f} MiB, "
        f"{1 - shared / copied:.0%}); copy-on-write copied "
        f"{forks - 1 if prompt % bs else 0} partly filled block(s)"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--forks", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=1000)
    ap.add_argument("--decode", type=int, default=32)
    args = ap.parse_args(argv)
    load = os.getloadavg()
    print(
        f"cpus={os.cpu_count()} load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')} numpy {np.__version__}"
    )
    bench_attention([int(c) for c in args.contexts.split(",")], args.block_size, args.repeats)
    bench_fork_memory(args.prompt, args.forks, args.decode, args.block_size)
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
