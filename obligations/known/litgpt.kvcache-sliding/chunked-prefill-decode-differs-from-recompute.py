#!/usr/bin/env python3
"""litgpt GPT with a sliding-window layer: a prompt prefilled in chunks no longer than the window (as litgpt's
refusal of a longer prefill tells: 'Please use chunked prefill with chunk size <= {max_cache_len} to avoid this
issue') gives other logits than the same model run on the whole sequence without the cache

Class: litgpt.model.KVCache with is_sliding_window (litgpt==0.5.13; kvproof target litgpt.kvcache-sliding)
Claim: a model decoding with the cache gives the logits of the same model recomputing the whole sequence without
it (input_pos None: its own sliding-window mask), within 2**-14 of the largest logit.
Backed by: KVCache.forward: '# Circular buffer for sliding window' and its refusal of a prefill longer than the
ring: 'Please use chunked prefill with chunk size <= {max_cache_len} to avoid this issue'; CausalSelfAttention
(no cache): a query at i sees window_start = max(0, i - sliding_window_size + 1) .. i. GPT.forward: 'If
input_pos is provided, the KV cache uses K and V vectors for positions smaller than entries in input_pos'.
Found by: kvproof witnesses/test_targets.py::test_decode_with_the_cache_equals_recomputing_the_prefix
[litgpt.kvcache-sliding] (impl's runtime over the adapter); this script shows it with litgpt's own GPT.
Upstream: https://github.com/Lightning-AI/litgpt/issues/2182 (PR 2215 refuses a prefill longer than the ring;
a chunk that fits the ring but wraps it is not covered).

Written by hand (a TGT-GENERATE failure is not turned into a script by the generator). It imports only litgpt
and torch. Exit status: 1 while the problem is present, 0 once it is fixed.
"""

import sys

import torch
from litgpt.config import Config
from litgpt.model import GPT

torch.manual_seed(0)
W = 3
config = Config(
    n_layer=1, n_head=4, n_query_groups=2, n_embd=32, block_size=16, vocab_size=64, padded_vocab_size=64,
    sliding_window_size=W, sliding_window_indices=[1], bias=False, rotary_percentage=1.0,
)
model = GPT(config).eval()
tokens = torch.randint(0, 64, (1, 2 * W))

with torch.no_grad():
    recompute = model(tokens)[0]  # input_pos None: the whole sequence, the sliding-window mask built per query
    model.set_kv_cache(batch_size=1, max_seq_length=16)
    chunks, start, decoded = [1, W, W - 1], 0, []  # each chunk no longer than the window, as litgpt asks
    for t in chunks:
        pos = torch.arange(start, start + t)
        decoded.append(model(tokens[:, start : start + t], input_pos=pos)[0])
        start += t
    decoded = torch.cat(decoded)

delta = (decoded - recompute).abs().max(dim=-1).values
bound = 2.0**-14 * max(1.0, float(recompute.abs().max()))
print("chunks", chunks, "window", W, "max |decode - recompute| per position:", [f"{float(d):.2e}" for d in delta])
bad = [i for i, d in enumerate(delta) if float(d) > bound]
if bad:
    print(f"PROBLEM: positions {bad} differ from the recompute by more than {bound:.2e}")
    print("1 problem(s): the claim does not hold on litgpt==0.5.13")
    sys.exit(1)
print("OK: the claim holds on litgpt==0.5.13")
sys.exit(0)
