"""The planted bugs: each one small source change of one function of one cache, as (file, old, new) text.

``old`` must occur exactly once in the clean file; run.py applies the change to a fresh copy of the
project, never to the clean source. Each bug is a slip an engineer could make writing that cache.
"""

# ruff: noqa: E501  (old and new are exact source lines of the caches, as long as the caches write them)
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bug:
    cache: str  # the project folder under projects/
    id: str
    kind: str  # what sort of slip (for the summary)
    description: str  # one line
    file: str  # relative to the project
    old: str
    new: str


CONTIG = "contigcache/cache.py"
PAGED = "pagedcache/cache.py"
RING = "ringcache/cache.py"
INT8 = "int8cache/cache.py"
TIERED = "tieredcache/cache.py"

BUGS: list[Bug] = [
    # ---------------------------------------------------------------- contig
    Bug(
        "contig",
        "contig.truncate_checks_capacity",
        "off-by-one/range",
        "truncate checks n against the buffer's capacity, not the length: n in (len, capacity] is accepted",
        CONTIG,
        "        if not 0 <= n <= self.length:\n",
        "        if not 0 <= n <= self.capacity:\n",
    ),
    Bug(
        "contig",
        "contig.grow_copies_k_into_v",
        "growth",
        "growth copies the K rows into the new V buffer (copy-paste): V before a growth reads back as K",
        CONTIG,
        "        v[:, :, :, : self.length] = self._v[:, :, :, : self.length]\n",
        "        v[:, :, :, : self.length] = self._k[:, :, :, : self.length]\n",
    ),
    Bug(
        "contig",
        "contig.grow_ignores_need",
        "growth",
        "growth doubles the capacity without looking at what the append needs: a chunk past 2x capacity does not fit",
        CONTIG,
        "        size = max(need, 2 * self.capacity)\n",
        "        size = 2 * self.capacity\n",
    ),
    Bug(
        "contig",
        "contig.keys_returns_a_view",
        "aliasing",
        "keys() returns a view of the buffer (the .copy() dropped): a later truncate + append rewrites keys read earlier",
        CONTIG,
        "        return self._k[:, :, :, : self.length].copy()\n",
        "        return self._k[:, :, :, : self.length]\n",
    ),
    Bug(
        "contig",
        "contig.fork_slices_buffers",
        "fork sharing",
        "fork 'copies' the buffers with [:] (a numpy view): source and fork write the same storage",
        CONTIG,
        "        other._k = self._k.copy()\n        other._v = self._v.copy()\n",
        "        other._k = self._k[:]\n        other._v = self._v[:]\n",
    ),
    Bug(
        "contig",
        "contig.reorder_in_place",
        "batch",
        "reorder permutes the batch in place row by row: an element read after it was overwritten is copied wrong",
        CONTIG,
        "        idx = self._check(idx, exact=True)\n        self._k = self._k[:, idx]\n        self._v = self._v[:, idx]\n",
        "        idx = self._check(idx, exact=True)\n        for i, j in enumerate(idx):\n"
        "            self._k[:, i] = self._k[:, j]\n            self._v[:, i] = self._v[:, j]\n",
    ),
    Bug(
        "contig",
        "contig.repeat_tiles",
        "batch",
        "repeat tiles the batch (0, 1, 0, 1) instead of repeating each element in a row (0, 0, 1, 1)",
        CONTIG,
        "        self._k = np.repeat(self._k, r, axis=1)\n        self._v = np.repeat(self._v, r, axis=1)\n",
        "        self._k = np.tile(self._k, (1, r, 1, 1, 1))\n        self._v = np.tile(self._v, (1, r, 1, 1, 1))\n",
    ),
    # ---------------------------------------------------------------- paged
    Bug(
        "paged",
        "paged.truncate_keeps_boundary_block",
        "truncate + sharing",
        "truncate keeps n // block + 1 blocks: at a block edge it keeps the block starting at n, still shared with a fork",
        PAGED,
        "        keep = -(-n // self.pool.block_size)\n",
        "        keep = n // self.pool.block_size + 1\n",
    ),
    Bug(
        "paged",
        "paged.fork_tail_not_counted",
        "refcount",
        "fork raises the counts of the full blocks only (the tail 'is copied anyway'): the shared tail is never copied",
        PAGED,
        "        for table in other.tables:\n            for blk in table:\n                self.pool.incref(blk)\n",
        "        full = self.length // self.pool.block_size  # the partly filled tail is copied on its next write\n"
        "        for table in other.tables:\n            for blk in table[:full]:\n                self.pool.incref(blk)\n",
    ),
    Bug(
        "paged",
        "paged.cow_copy_not_installed",
        "copy-on-write",
        "copy-on-write rebinds a local to the copy instead of the table entry: the append writes the shared block",
        PAGED,
        "            table[-1] = self.pool.copy_block(tail)\n            self.pool.decref(tail)\n",
        "            tail, old = self.pool.copy_block(tail), tail\n            self.pool.decref(old)\n",
    ),
    Bug(
        "paged",
        "paged.truncate_no_decref",
        "leak",
        "truncate drops the blocks past n from the tables without decref: they never return to the pool",
        PAGED,
        "            for blk in table[keep:]:\n                self.pool.decref(blk)\n            del table[keep:]\n",
        "            del table[keep:]\n",
    ),
    Bug(
        "paged",
        "paged.release_only_unshared",
        "leak",
        "release decrefs only the blocks it alone holds; a block shared with a fork keeps its count forever",
        PAGED,
        "            for blk in table:\n                self.pool.decref(blk)\n        self.tables = []\n",
        "            for blk in table:\n                if self.pool.refs[blk] == 1:\n                    self.pool.decref(blk)\n"
        "        self.tables = []\n",
    ),
    Bug(
        "paged",
        "paged.take_aliases_tables",
        "batch + refcount",
        "reorder/select/repeat reuse the table lists themselves, counts untouched: a repeated element shares one table",
        PAGED,
        "        new = [list(self.tables[i]) for i in idx]\n        for table in new:\n            for blk in table:\n"
        "                self.pool.incref(blk)\n        for table in self.tables:\n            for blk in table:\n"
        "                self.pool.decref(blk)\n        self.tables = new\n",
        "        self.tables = [self.tables[i] for i in idx]\n",
    ),
    # ---------------------------------------------------------------- ring
    Bug(
        "ring",
        "ring.mask_offset_off_by_one",
        "off-by-one/mask",
        "mask_sizes declares kv_offset = length - window + 2: each query loses the oldest position of its window",
        RING,
        "        offset = max(0, self.length - self.window + 1)\n",
        "        offset = max(0, self.length - self.window + 2)\n",
    ),
    Bug(
        "ring",
        "ring.long_chunk_keeps_head",
        "window",
        "a chunk longer than the ring writes its first rows into the slots of its last positions",
        RING,
        "        self._k[:, :, :, slot] = k[:, :, :, t - keep :]\n        self._v[:, :, :, slot] = v[:, :, :, t - keep :]\n",
        "        self._k[:, :, :, slot] = k[:, :, :, :keep]\n        self._v[:, :, :, slot] = v[:, :, :, :keep]\n",
    ),
    Bug(
        "ring",
        "ring.gather_mod_window",
        "off-by-one/window",
        "reads look up position p in slot p % window, while writes use p % slots (window + 2)",
        RING,
        "        slot = np.arange(lo, hi) % self.slots\n",
        "        slot = np.arange(lo, hi) % self.window\n",
    ),
    Bug(
        "ring",
        "ring.fork_shares_rings",
        "fork sharing",
        "fork copies the attributes but not the ring arrays: source and fork write the same rings",
        RING,
        "        other._k = self._k.copy()\n        other._v = self._v.copy()\n",
        "",
    ),
    Bug(
        "ring",
        "ring.reorder_v_wrong_axis",
        "batch",
        "reorder indexes V on the layer axis (self._v[idx]) instead of the batch axis",
        RING,
        "        idx = self._check(idx, exact=True)\n        self._k = self._k[:, idx]\n        self._v = self._v[:, idx]\n",
        "        idx = self._check(idx, exact=True)\n        self._k = self._k[:, idx]\n        self._v = self._v[idx]\n",
    ),
    Bug(
        "ring",
        "ring.fast_path_returns_input",
        "aliasing",
        "when no earlier position is visible, append hands attention the caller's own k, v arrays (no copy)",
        RING,
        "            out_k, out_v = k.copy(), v.copy()\n",
        "            out_k, out_v = k, v\n",
    ),
    # ---------------------------------------------------------------- int8
    Bug(
        "int8",
        "int8.scale_over_chunk",
        "quantizer",
        "the scale is the absmax of the whole chunk per head, not of each row: small rows lose precision",
        INT8,
        "    absmax = np.abs(x).max(axis=-1)\n",
        "    absmax = np.abs(x).max(axis=(-2, -1), keepdims=True)[..., 0]\n",
    ),
    Bug(
        "int8",
        "int8.truncates_not_rounds",
        "quantizer",
        "q = x / scale cast straight to int8 (truncation toward zero, no rint): errors up to a whole scale",
        INT8,
        "    q = np.clip(np.rint(x / scale[..., None]), -127, 127).astype(np.int8)\n",
        "    q = np.clip(x / scale[..., None], -127, 127).astype(np.int8)\n",
    ),
    Bug(
        "int8",
        "int8.truncate_keeps_dequantized",
        "stale after truncate",
        "truncate does not cut the rows dequantized for reads: after truncate + append, reads serve the dropped rows",
        INT8,
        "        self.length = n\n        if self._deq is not None:\n"
        "            self._deq = (self._deq[0][:, :, :, :n], self._deq[1][:, :, :, :n])\n",
        "        self.length = n\n",
    ),
    Bug(
        "int8",
        "int8.fork_sets_users_to_two",
        "fork of a fork",
        "fork sets the shared buffers' user count to 2 instead of adding one: a fork of a fork writes a third's rows",
        INT8,
        "        self._buf.users += 1\n",
        "        self._buf.users = 2\n",
    ),
    Bug(
        "int8",
        "int8.grow_drops_scales",
        "growth",
        "growth copies the int8 rows but not their scales: rows before a growth dequantize to 0 once re-read",
        INT8,
        "        new.sk[:, :, :, :n] = old.sk[:, :, :, :n]\n        new.sv[:, :, :, :n] = old.sv[:, :, :, :n]\n",
        "",
    ),
    Bug(
        "int8",
        "int8.take_keeps_scales",
        "batch + quantizer",
        "reorder/select index the int8 rows but keep the old scale arrays: rows dequantize with another element's scale",
        INT8,
        "        self._buf = _Buffers(b.qk[:, idx], b.qv[:, idx], b.sk[:, idx], b.sv[:, idx])\n",
        "        self._buf = _Buffers(b.qk[:, idx], b.qv[:, idx], b.sk, b.sv)\n",
    ),
    # ---------------------------------------------------------------- tiered
    Bug(
        "tiered",
        "tiered.spill_one_early",
        "spill boundary",
        "the hot tier spills when it holds page - 1 positions: each page ends with a stale row",
        TIERED,
        "            if self._hot == c:\n",
        "            if self._hot >= c - 1:\n",
    ),
    Bug(
        "tiered",
        "tiered.truncate_drops_partial_page",
        "truncate",
        "a truncate into a page drops it without copying its first n % page rows back into the hot tier",
        TIERED,
        "                pk, pv = self.store.get(pages[keep])\n"
        "                self._hk[:, b, :, :rest] = pk[:, :, :rest]\n"
        "                self._hv[:, b, :, :rest] = pv[:, :, :rest]\n",
        "",
    ),
    Bug(
        "tiered",
        "tiered.fork_no_incref",
        "refcount",
        "fork copies the page lists without raising the counts: a truncate or release recycles pages a fork still reads",
        TIERED,
        "        other.pages = [list(pages) for pages in self.pages]\n        for pages in other.pages:\n"
        "            for i in pages:\n                self.store.incref(i)\n",
        "        other.pages = [list(pages) for pages in self.pages]\n",
    ),
    Bug(
        "tiered",
        "tiered.release_first_element_only",
        "leak",
        "release gives back only the first batch element's pages (written when the cache held one sequence)",
        TIERED,
        "        for pages in self.pages:\n            for i in pages:\n                self.store.decref(i)\n        self.pages = []\n",
        "        for i in self.pages[0]:\n            self.store.decref(i)\n        self.pages = []\n",
    ),
    Bug(
        "tiered",
        "tiered.put_keeps_views",
        "aliasing",
        "a new page keeps the array it is given (np.asarray, not np.array): the hot tier or the caller's rows",
        TIERED,
        "            self._k.append(np.array(k, dtype=np.float32))\n            self._v.append(np.array(v, dtype=np.float32))\n",
        "            self._k.append(np.asarray(k, dtype=np.float32))\n            self._v.append(np.asarray(v, dtype=np.float32))\n",
    ),
    Bug(
        "tiered",
        "tiered.take_aliases_lists",
        "batch + refcount",
        "reorder/select/repeat reuse the page lists themselves, counts untouched: a repeated element shares one list",
        TIERED,
        "        new = [list(self.pages[i]) for i in idx]\n        for pages in new:\n            for i in pages:\n"
        "                self.store.incref(i)\n        for pages in self.pages:\n            for i in pages:\n"
        "                self.store.decref(i)\n        self.pages = new\n",
        "        self.pages = [self.pages[i] for i in idx]\n",
    ),
]

CACHES = ("contig", "paged", "ring", "int8", "tiered")
