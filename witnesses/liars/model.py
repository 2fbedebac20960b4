"""Liars for the SmolLM2 runtime (card ORACLE-PARITY)."""
from __future__ import annotations

from witnesses.liars import liar


@liar("model.no_unpermute", target="impl.model.gguf_load:unpermute_rope_rows",
      why="forgets to undo llama.cpp's attn_q/attn_k row permutation (text stays fluent, numbers do not)")
def keep_llama_cpp_rows(w, n_head):
    return w
