"""The SmolLM2-135M runtime: ``load_model()`` -> ``Model`` -> sessions.

from impl.model import load_model
model = load_model()                  # default GGUF, KVPROOF_GGUF, or load_model(path)
ids = model.tokenizer.encode("The capital of France is")
s = model.session()                   # model.session(window=W) for a sliding window
logits = s.prefill(ids)               # (len(ids), vocab) float32
new = s.generate([], 12)              # continue greedily
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from impl import alloc
from impl.model import f32cache, gguf_quant
from impl.model.config import ModelConfig
from impl.model.gguf_load import read_gguf
from impl.model.llama import Llama
from impl.model.session import Session
from impl.model.tokenizer import BPETokenizer
from impl.model.weights import check_default, resolve_weights, verified_sha256

__all__ = ["Model", "ModelConfig", "Session", "load_model"]


class Model:
    """Weights + tokenizer; cheap to share, one per process per weights file."""

    def __init__(
        self, llama: Llama, tokenizer: BPETokenizer | None, path: Path | None = None, is_default: bool = False
    ) -> None:
        self.llama = llama
        self.config = llama.config
        self.tokenizer = tokenizer
        self.path = path
        self.is_default_weights = is_default
        self.decode = "float32"  # which weights decode reads (gguf_quant.attach's line)

    def session(self, window=None, cache=None, **cache_options) -> Session:
        """A new empty session.

        ``window``: None, an int W, or one per layer (None = no window).
        ``cache``: None or "contiguous" (impl.kv.KVCache), "paged"
        (impl.paged), "ring" (impl.ring), or a ready ``impl.cache.KVStore``;
        ``cache_options`` go to ``impl.designs.make_cache`` (e.g.
        ``block_size=``, ``pool=`` for paged; ``hint=``, ``precision=`` for ring).
        """
        return Session(self.llama, window=window, cache=cache, **cache_options)

    def session_from_prefix(self, prefix: Session, suffix_ids: Sequence[int]) -> Session:
        """Fork ``prefix`` (its cache cloned; a paged cache shares blocks copy-on-write)
        and prefill ``suffix_ids`` onto the fork; ``prefix`` is left as it was."""
        s = prefix.fork()
        if len(suffix_ids):
            s.prefill(suffix_ids)
        return s

    def final_norm(self, x: np.ndarray) -> np.ndarray:
        """The final RMSNorm applied to (..., hidden)."""
        return self.llama.final_norm(x)


_cache: dict[tuple[str, int], Model] = {}
_lock = threading.Lock()


def load_model(path: str | os.PathLike | None = None) -> Model:
    """Load (once per process) the GGUF at ``path``, ``KVPROOF_GGUF`` or the default.

    The first load of a file dequantises it (seconds) and writes a float32
    cache (impl.model.f32cache, ``.cache/weights/``); later loads
    memory-map that cache after checking its sha256 (well under a second).

    Raises impl.errors.WeightsMissing / WeightsCorrupt with a message that
    says how to fix it.
    """
    alloc.configure()  # keep freed activations in the process (impl.alloc); KVPROOF_MALLOC=system opts out
    wf = resolve_weights(path, verify=False)
    key = (str(wf.path.resolve()), wf.path.stat().st_mtime_ns)
    with _lock:
        if key not in _cache:
            # keys the f32 cache and verifies the default file; hashed when the file changed since last verified
            sha = verified_sha256(wf.path, f32cache.gguf_stamp(wf.path))
            check_default(wf, sha)
            hit = f32cache.load(sha)
            if hit is not None:
                config, state, tok_json = hit
                llama, tok = Llama.from_state(config, state), BPETokenizer.from_json(tok_json)
                index = f32cache.load_tensor_index(sha)
            else:
                g = read_gguf(wf.path)
                llama, tok = Llama(g.config, g.tensors), BPETokenizer(g.tokens, g.token_types, g.merges)
                index = g.tensor_index
                f32cache.store(sha, g.config, llama.state(), tok.to_json(), index)
            decode = gguf_quant.attach(llama, wf.path, index)  # one-row products from the GGUF's blocks
            _cache[key] = Model(llama, tok, wf.path, wf.is_default)
            _cache[key].weights_sha256 = sha
            _cache[key].decode = decode
        return _cache[key]
