"""A project's own paged cache, proven as docs/prove-your-own-cache.md shows, with the shipped claims only.

The cache (``pagecache``, written here the way a user would: a block pool with reference counts and
copy-on-write of a shared tail block) is PROVEN by TGT-HANDLES' and TGT-OCCUPANCY's claims. Then its
truncate keeps one block too many at a block boundary (the slip issue 37 found no claim caught): the block
is still shared with a fork, and the next append writes into it without copying. The run says FAILED (exit
1), records a reproduction in the report folder, and that script, run on its own, exits 1 naming the
problem; with the bug fixed it exits 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_guide_own_cache import console_script, env, kvproof  # noqa: F401 (env is a fixture)

CACHE = '''"""pagecache: a block-pool KV cache with copy-on-write forks (knows nothing of kvproof)."""

import numpy as np


class Pool:
    """Blocks of ``block`` positions of every layer and head; a count per block, free when it reaches 0."""

    def __init__(self, n_layers, n_heads, head_dim, block=4):
        self.block = block
        self.k = np.zeros((0, n_layers, n_heads, block, head_dim), np.float32)
        self.v = np.zeros_like(self.k)
        self.refs, self.free = [], []

    def alloc(self):
        if not self.free:
            more = max(4, len(self.refs))
            self.k = np.concatenate([self.k, np.zeros((more,) + self.k.shape[1:], np.float32)])
            self.v = np.concatenate([self.v, np.zeros((more,) + self.v.shape[1:], np.float32)])
            self.free += range(len(self.refs) + more - 1, len(self.refs) - 1, -1)
            self.refs += [0] * more
        b = self.free.pop()
        self.refs[b] = 1
        return b

    def decref(self, b):
        self.refs[b] -= 1
        if self.refs[b] == 0:
            self.free.append(b)

    def in_use(self):
        return sum(1 for r in self.refs if r > 0)


class Sequence:
    """One sequence's page table over a pool: position p is slot p % block of block table[p // block]."""

    def __init__(self, pool):
        self.pool, self.table, self.n = pool, [], 0

    def fork(self):
        s = Sequence(self.pool)
        s.table, s.n = list(self.table), self.n
        for b in self.table:
            self.pool.refs[b] += 1
        return s

    def append(self, k, v):
        """k, v: (layers, heads, t, head_dim)."""
        pool = self.pool
        for t in range(k.shape[2]):
            i, off = divmod(self.n, pool.block)
            if off == 0 and i == len(self.table):
                self.table.append(pool.alloc())  # a fresh block
            elif off > 0 and pool.refs[self.table[i]] > 1:  # a shared tail block: copy it before writing
                new = pool.alloc()
                pool.k[new], pool.v[new] = pool.k[self.table[i]], pool.v[self.table[i]]
                pool.decref(self.table[i])
                self.table[i] = new
            pool.k[self.table[i], :, :, off], pool.v[self.table[i], :, :, off] = k[:, :, t], v[:, :, t]
            self.n += 1

    def gather(self):
        """K, V of every position held: (layers, heads, n, head_dim), fresh arrays."""
        pool, n = self.pool, self.n
        if not self.table:
            shape = pool.k.shape[1:3] + (0,) + pool.k.shape[4:]
            return np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        k = np.concatenate([pool.k[b] for b in self.table], axis=2)[:, :, :n]
        v = np.concatenate([pool.v[b] for b in self.table], axis=2)[:, :, :n]
        return k, v

    def truncate(self, n):
        if not 0 <= n <= self.n:
            raise ValueError(f"truncate({n}): n must be in 0..{self.n}")
        keep = -(-n // self.pool.block)  # the blocks positions 0..n-1 occupy
        for b in self.table[keep:]:
            self.pool.decref(b)
        del self.table[keep:]
        self.n = n

    def release(self):
        self.truncate(0)
'''

BUG = ("        keep = -(-n // self.pool.block)  # the blocks positions 0..n-1 occupy",
       "        keep = n // self.pool.block + 1  # the blocks positions 0..n-1 occupy")  # fmt: skip

ADAPTER = '''"""pagecache as a kvproof target: one Sequence per batch element over one Pool per make."""

import numpy as np

from harness.targets.protocol import Numerics, Occupancy, Rows, Target, Visible, check_rows, not_capable
from pagecache import Pool, Sequence


class Handle:
    def __init__(self, geometry, window, pool, seqs):
        self.target, self.geometry, self.window, self.pool, self.seqs = TARGET, geometry, window, pool, seqs
        self.batch = len(seqs)

    def __len__(self):
        return self.seqs[0].n

    def mask_sizes(self, query_len):
        return len(self) + query_len, 0

    def append(self, k, v):
        check_rows(self.geometry, self.batch, k, v)
        length, offset = self.mask_sizes(k.shape[3])
        for b, s in enumerate(self.seqs):
            s.append(k[:, b], v[:, b])
        rows = self.read()
        return Visible(rows.k, rows.v, rows.positions, length, offset)

    def read(self):
        parts = [s.gather() for s in self.seqs]
        k = np.stack([p[0] for p in parts], axis=1)
        v = np.stack([p[1] for p in parts], axis=1)
        return Rows(k, v, np.arange(len(self), dtype=np.int64))

    def truncate(self, n):
        for s in self.seqs:
            s.truncate(n)

    def fork(self):
        return Handle(self.geometry, self.window, self.pool, [s.fork() for s in self.seqs])

    def occupancy(self):
        return self.pool.in_use()

    def release(self):
        for s in self.seqs:
            s.release()

    def reorder(self, idx):
        raise not_capable(self.target, "reorder", "reorder")

    def select(self, idx):
        raise not_capable(self.target, "select", "select")

    def repeat(self, r):
        raise not_capable(self.target, "repeat", "repeat")


def build(geometry, batch, window, capacity, trace=None):
    pool = Pool(geometry.n_layers, geometry.n_kv_heads, geometry.head_dim)
    return Handle(geometry, window, pool, [Sequence(pool) for _ in range(batch)])


TARGET = Target(
    name="pagecache",
    title="pagecache.Sequence: one per batch element over a Pool of 4-position blocks",
    distribution="pagecache",
    capabilities=frozenset({"append", "read", "truncate", "fork", "mask", "grow", "occupancy"}),
    numerics=Numerics.exact(),
    refs=("pagecache.py::Sequence.truncate", "pagecache.py::Sequence.fork", "pagecache.py::Sequence.append"),
    build=build,
    own=True,
    occupancy=Occupancy("blocks", block=4),
)
'''

WITNESSES = """from harness.targets.claims import (  # noqa: F401
    test_every_live_handle_agrees_after_every_step,
    test_occupancy_is_bounded_by_what_live_handles_hold,
)
"""

LIARS = """from harness import liar


@liar("pc.fork_without_counts", target="pagecache:Sequence.fork", why="a fork that never counts its blocks")
def fork(self):
    from pagecache import Sequence

    s = Sequence(self.pool)
    s.table, s.n = list(self.table), self.n
    return s
"""


def card(cid: str, test: str, bounds: str) -> str:
    return f"""id: {cid}
title: pagecache {cid}
module: pagecache
regime: A
theorem: >
  The shipped claim {test} holds on pagecache.
proof: >
  Sequence.truncate keeps the ceil(n / block) blocks rows 0..n-1 occupy and decrefs the rest;
  Sequence.append copies a shared tail block before writing into it; Sequence.fork counts every block.
refs:
  - pagecache.py::Sequence.truncate
  - pagecache.py::Sequence.append
  - pagecache.py::Sequence.fork
witnesses:
  - id: claim
    test: witnesses/test_pagecache.py::{test}
    bounds: {bounds}
liars: [pc.fork_without_counts]
tags: [pagecache]
version: 1
"""


def make(dest: Path) -> Path:
    files = {
        "pyproject.toml": '[project]\nname = "pagecache"\nversion = "0.1.0"\n\n[tool.kvproof]\n'
        'targets = ["pagecache_kvproof:TARGET"]\n',
        "pagecache.py": CACHE,
        "pagecache_kvproof.py": ADAPTER,
        "witnesses/conftest.py": 'pytest_plugins = ["harness.plugin", "harness.targets.fixture"]\n',
        "witnesses/test_pagecache.py": WITNESSES,
        "witnesses/liars/pc.py": LIARS,
        "obligations/PC-HANDLES.yaml": card(
            "PC-HANDLES",
            "test_every_live_handle_agrees_after_every_step",
            "{examples: {ge: 10}, truncates_inside_a_shared_history: {ge: 20}}",
        ),
        "obligations/PC-OCCUPANCY.yaml": card(
            "PC-OCCUPANCY", "test_occupancy_is_bounded_by_what_live_handles_hold", "{examples: {ge: 10}}"
        ),
    }
    for rel, text in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text, encoding="utf-8")
    return dest


def verdicts(project: Path, env: dict[str, str]):  # noqa: F811
    out = project / "verdicts.json"
    out.unlink(missing_ok=True)
    proc = kvproof(project, env, "run", "--json", "verdicts.json", "-j", "1")
    assert out.is_file(), proc.stdout + proc.stderr
    return proc, {c["id"]: c for c in json.loads(out.read_text())["cards"]}


def test_a_truncate_that_keeps_a_shared_block_fails_with_a_standalone_reproduction(tmp_path, env):  # noqa: F811
    project = make(tmp_path / "pagecache")
    proc, cards = verdicts(project, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert {c: v["verdict"] for c, v in cards.items()} == {"PC-HANDLES": "PROVEN", "PC-OCCUPANCY": "PROVEN"}

    src = project / "pagecache.py"
    src.write_text(CACHE.replace(*BUG), encoding="utf-8")
    proc, cards = verdicts(project, env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    handles = cards["PC-HANDLES"]
    assert handles["verdict"] == "FAILED", handles["reason"]
    (witness,) = handles["witnesses"]
    assert "after the steps 1. make(" in witness["why"], witness["why"]
    rel = witness["evidence"]["reproduction"]
    assert rel == "repro/pagecache/test_every_live_handle_agrees_after_every_step.py", rel
    report = sorted(p for p in (project / "reports").iterdir() if (p / "index.html").is_file() and not p.is_symlink())
    script = report[-1] / rel
    assert script.is_file(), sorted(str(p) for p in report[-1].rglob("*"))
    text = script.read_text()
    steps = [line for line in text.split('"""')[1].splitlines() if line[:4].strip().rstrip(".").isdigit()]
    assert 3 <= len(steps) <= 25, steps  # a screen of numbered steps
    assert "import harness.targets.claims" not in text and "hypothesis" not in text

    alone = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert alone.returncode == 1, alone.stdout + alone.stderr
    assert alone.stdout.startswith("PROBLEM: "), alone.stdout

    src.write_text(CACHE, encoding="utf-8")  # fixed
    fixed = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert fixed.returncode == 0 and fixed.stdout.startswith("OK: "), fixed.stdout + fixed.stderr
