"""Liars for the block-manager cards (TGT-BLOCKS*): slips of a block manager or of its adapter.

Each swaps one method of harness/targets/blockown.py: impl's adapter
(``ImplBlocks``) or the prefix-caching manager (``PrefixBlocks``), so the
TGT-BLOCKS witnesses must catch them on the own group's block targets.
"""

from __future__ import annotations

from harness.targets.blocks import blocks_for, keys_of
from witnesses.liars import liar


@liar(
    "blocks.fork_shares_sequence",
    target="harness.targets.blockown:ImplBlocks.fork",
    why="the adapter's fork names the source's sequence for the new request instead of impl's fork of it",
)
def fork_shares_sequence(self, src, dst):
    self.seqs[dst] = self.seqs[src]


@liar(
    "blocks.free_twice_decrefs",
    target="harness.targets.blockown:PrefixBlocks.free",
    why="free looks the table up without removing it: a second free decrefs every block again (counts go "
    "negative, blocks join the free queue twice)",
)
def free_twice_decrefs(self, r):
    table = self.tables.get(r)
    if table is None:
        return
    gone = []
    for b in reversed(table):
        self.refs[b] -= 1
        if self.refs[b] == 0:
            gone.append(b)
    front = [b for b in gone if b not in self.key_of]
    self.queue = front + self.queue + [b for b in gone if b in self.key_of]


@liar(
    "blocks.free_head_first",
    target="harness.targets.blockown:PrefixBlocks.free",
    why="a request's blocks join the free queue head block first, so its head is evicted before its tail",
)
def free_head_first(self, r):
    table = self.tables.pop(r, None)
    if table is None:
        return
    del self.tokens[r]
    gone = []
    for b in table:
        self.refs[b] -= 1
        if self.refs[b] == 0:
            gone.append(b)
    front = [b for b in gone if b not in self.key_of]
    self.queue = front + self.queue + [b for b in gone if b in self.key_of]


@liar(
    "blocks.hit_whole_prompt",
    target="harness.targets.blockown:PrefixBlocks._hits",
    why="serves every full block of the prompt from the cache, the last token's block too (vLLM stops at "
    "len - 1 tokens: the last token must be computed to give logits)",
)
def hit_whole_prompt(self, tokens, keys=()):
    out = []
    for j in range(len(tokens) // self.block_size):
        got = self.cache.get(self._key(keys, tokens[: (j + 1) * self.block_size]))
        if not got:
            break
        out.append(got[0])
    return out


@liar(
    "blocks.hash_without_parent",
    target="harness.targets.blockown:PrefixBlocks._hits",
    why="looks a block up by its own tokens, not the whole prefix it ends (a hash without the parent's): a "
    "block computed after another prefix is served",
)
def hit_by_block_tokens(self, tokens, keys=()):
    bs, out = self.block_size, []
    for j in range((len(tokens) - 1) // bs):
        mine = tuple(tokens[j * bs : (j + 1) * bs])
        same = ((k, p) for (k, p), blocks in self.cache.items() if blocks and k == keys)
        got = next((self.cache[(k, p)][0] for k, p in same if p[-bs:] == mine), None)
        if got is None:
            break
        out.append(got)
    return out


@liar(
    "blocks.reset_while_in_use",
    target="harness.targets.blockown:PrefixBlocks.reset",
    why="reset drops the prefix cache whether or not blocks are held (vLLM's reset_prefix_cache refuses then)",
)
def reset_while_in_use(self):
    self.key_of.clear()
    self.cache.clear()
    return True


@liar(
    "blocks.free_blocks_each",
    target="harness.targets.blockown:ImplBlocks.release",
    why="decrefs each listed block in turn without checking the list first (vLLM's free_blocks): a block named "
    "twice loses two references, and a free one is refused only after the blocks before it were released",
)
def free_blocks_each(self, blocks):
    for b in blocks:
        self.pool.decref(b)


@liar(
    "blocks.release_unchecked",
    target="harness.targets.blockown:PrefixBlocks.release",
    why="release decrements each listed block without checking the list (vLLM's free_blocks, issue 42571): a "
    "block named twice, or held by no one, goes below 0 references and sits in the free queue",
)
def release_unchecked(self, blocks):
    gone = []
    for b in blocks:
        self.refs[b] -= 1
        if self.refs[b] == 0:
            gone.append(b)
    front = [b for b in gone if b not in self.key_of]
    self.queue = front + self.queue + [b for b in gone if b in self.key_of]


@liar(
    "blocks.hit_held_only",
    target="harness.targets.blockown:PrefixBlocks._hits",
    why="serves a cached block only while a live request holds it: a freed block, cached and still in the free "
    "queue, is never hit (vllm-project/vllm#42948's symptom: just-cached blocks lost, 0% hits on a re-sent prompt)",
)
def hit_held_only(self, tokens, keys=()):
    out = []
    for j in range((len(tokens) - 1) // self.block_size):
        got = [b for b in self.cache.get(self._key(keys, tokens[: (j + 1) * self.block_size]), []) if self.refs[b]]
        if not got:
            break
        out.append(got[0])
    return out


@liar(
    "blocks.refuse_ignoring_hits",
    target="harness.targets.blockown:PrefixBlocks.allocate",
    why="the free-block check counts the blocks a prefix hit serves as new ones: an admission the cache could "
    "serve is refused while enough blocks are free for what it really needs",
)
def refuse_ignoring_hits(self, r, tokens, keys=None):
    tokens = [int(x) for x in tokens]
    new = r not in self.tables
    table, old = ([], []) if new else (self.tables[r], self.tokens[r])
    kk = keys_of(keys) if new else self.keys[r]
    hits = self._hits(tokens, kk) if new else []
    need = blocks_for(len(old) + len(tokens), self.block_size) - len(table) - len(hits)
    if need + len(hits) > len(self.queue):  # the slip: the hit's blocks counted as blocks to take
        raise MemoryError(f"allocate({r!r}, {len(tokens)} tokens): {need} blocks needed, {len(self.queue)} free")
    for b in hits:
        if self.refs[b] == 0:
            self.queue.remove(b)
        self.refs[b] += 1
    fresh, self.queue = self.queue[:need], self.queue[need:]
    for b in fresh:
        self._evict(b)
        self.refs[b] = 1
    self.tables[r], self.tokens[r], self.keys[r] = table + hits + fresh, old + tokens, kk
    self._write(r, len(old) + len(hits) * self.block_size)
    return len(hits) * self.block_size


@liar(
    "blocks.keys_untagged",
    target="harness.targets.blockown:PrefixBlocks._key",
    why="the cache key carries the extra keys' values without their kinds, so a LoRA named x and a cache_salt x "
    "give one key (vllm-project/vllm#44701)",
)
def keys_untagged(self, keys, prefix):
    return (tuple(sorted(v for _, v in keys)), tuple(prefix))


@liar(
    "blocks.keys_ignored",
    target="harness.targets.blockown:PrefixBlocks._key",
    why="the cache key is the token prefix alone: requests with another cache_salt or LoRA share its blocks",
)
def keys_ignored(self, keys, prefix):
    return tuple(prefix)
