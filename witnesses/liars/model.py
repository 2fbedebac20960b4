"""Liars for the SmolLM2 runtime (card ORACLE-PARITY)."""

from __future__ import annotations

import os

from witnesses.liars import liar

# NOTE: these liars live in the GGUF loading path. The float32 weights cache
# (impl.model.f32cache) would hand a liar run arrays made by the honest
# loader, and the liar would "survive" without ever running. This module is
# imported only in the process a model.* liar is applied to, so switching the
# cache off here costs nothing elsewhere.
os.environ["KVPROOF_WEIGHTS_CACHE"] = "off"


@liar(
    "model.no_unpermute",
    target="impl.model.gguf_load:unpermute_rope_rows",
    why="forgets to undo llama.cpp's attn_q/attn_k row permutation (text stays fluent, numbers do not)",
)
def keep_llama_cpp_rows(w, n_head):
    return w
