#!/usr/bin/env python3
"""DynamicCache of DynamicSlidingWindowLayer: a model decoding with sliding_window=1 attends to every position

Class: transformers.DynamicSlidingWindowLayer (transformers==5.24.0; kvproof target transformers.dynamic-sliding)
Claim: a model decoding with the cache gives the logits of the same model recomputing the whole sequence
without it (use_cache=False), within 2**-14 of the largest logit (torch is not row-count invariant; the
worst measured rounding difference is 2**-18.5 of it).
Backed by: MistralConfig.sliding_window: "Sliding window attention window size"; DynamicSlidingWindowLayer:
"A cache layer that grows dynamically as more tokens are generated, up until the sliding window size";
DynamicCache(config=...) builds one such layer per sliding layer of the config (the documented use).
Found by: kvproof witnesses/test_targets.py::test_decode_with_the_cache_equals_recomputing_the_prefix
(card TGT-GENERATE); the same root cause as TGT-WINDOW's window-1-mask-disagrees-with-keys: for
sliding_window=1 the layer's slice [-sliding_window + 1:] is [0:], so it keeps every position.

Written by hand (kvproof's generator traces an adapter's cache calls, not a model's). It imports only
transformers, numpy and torch: a seeded 2-layer MistralForCausalLM (float32, CPU), a prompt of 3 tokens
prefilled into DynamicCache(config=model.config), one decode step, and the same 4 tokens recomputed with
use_cache=False. Exit status: 1 while the problem is present, 0 once it is fixed.
"""

import sys

import numpy as np
import torch
from transformers import DynamicCache, MistralConfig, MistralForCausalLM

config = MistralConfig(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    initializer_range=0.2,
    tie_word_embeddings=False,
    sliding_window=1,
)
torch.manual_seed(0)
model = MistralForCausalLM(config).eval()
prompt, token = [1, 2, 3], 5

with torch.no_grad():
    cache = DynamicCache(config=model.config)
    model(input_ids=torch.tensor([prompt]), cache=cache, use_cache=True)
    decoded = model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True).logits[0, -1].numpy()
    recomputed = model(input_ids=torch.tensor([prompt + [token]]), use_cache=False).logits[0, -1].numpy()

bound = 2.0**-14 * max(1.0, float(np.abs(recomputed).max()))
delta = float(np.abs(decoded.astype(np.float64) - recomputed).max())
held = int(cache.layers[0].keys.shape[-2])
print(f"sliding_window=1: the layer holds {held} key row(s) after {len(prompt) + 1} positions (a sliding layer keeps at most sliding_window - 1 = 0 between steps)")
print(f"max |decode - recompute| = {delta:.3g} (bound {bound:.3g})")
print(f"greedy: decode {int(np.argmax(decoded))}, recompute {int(np.argmax(recomputed))}")
if delta > bound:
    print("FAIL: decoding with the cache differs from recomputing without it")
    sys.exit(1)
print("ok: decoding with the cache gives the recompute's logits")
sys.exit(0)
