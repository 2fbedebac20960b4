"""Liars for the block-manager cards (TGT-BLOCKS*): slips of a block manager or of its adapter.

Each swaps one method of harness/targets/blockown.py: impl's adapter
(``ImplBlocks``) or the prefix-caching manager (``PrefixBlocks``), so the
TGT-BLOCKS witnesses must catch them on the own group's block targets.
"""

from __future__ import annotations

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
def hit_whole_prompt(self, tokens):
    out = []
    for j in range(len(tokens) // self.block_size):
        got = self.cache.get(tuple(tokens[: (j + 1) * self.block_size]))
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
def hit_by_block_tokens(self, tokens):
    bs, out = self.block_size, []
    for j in range((len(tokens) - 1) // bs):
        mine = tuple(tokens[j * bs : (j + 1) * bs])
        got = next((blocks[0] for key, blocks in self.cache.items() if blocks and key[-bs:] == mine), None)
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
