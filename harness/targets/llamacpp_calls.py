"""The llama.cpp calls behind the llama.cpp targets, importing only ctypes, struct, numpy and llama_cpp.

A reproduction script embeds this module's source as it is (:mod:`harness.targets.seqrepro`), so what a
script runs is what the witness ran. ``load(path)`` loads a GGUF once (logs silenced); ``Sequences`` is one
llama_context over it with the sequence-cache verbs (:mod:`harness.targets.sequences`, llama.h's words):

    decode      llama_batch_init + llama_decode, every token's logits requested; a nonzero return is Refused
    rm/cp/keep/add/pos_min/pos_max/clear   llama_memory_seq_* / llama_memory_clear of llama_get_memory(ctx)
    positions   the cell positions llama_state_seq_get_data(ctx, ..., seq) writes (llama_kv_cache::state_write:
                u32 n_stream; per stream a u32 cell count, then per cell i32 pos, u32 n_seq_id and n_seq_id i32
                sequence ids), read up to the first stream holding the sequence's cells
"""

import ctypes
import struct

import numpy as np

N_SEQ = 4
GGML_TYPE_F32, GGML_TYPE_F16 = 0, 1


class Refused(Exception):
    """llama_decode returned nonzero: the batch was refused (llama.h: "the memory state is restored")."""


_loaded = {}


def _floats(raw, kind):
    """K or V elements of ggml type ``kind`` (0: F32, 1: F16) as float32."""
    if kind not in (GGML_TYPE_F32, GGML_TYPE_F16):
        raise RuntimeError(f"ggml type {kind}: this reader reads F32 (0) and F16 (1) caches only")
    return np.frombuffer(raw, dtype=np.float32 if kind == GGML_TYPE_F32 else np.float16).astype(np.float32)


def load(path):
    """(llama_cpp, model, vocab size) for the GGUF at ``path``, loaded once per process, logs silenced."""
    if path in _loaded:
        return _loaded[path]
    import llama_cpp

    @llama_cpp.llama_log_callback
    def quiet(level, text, user_data):
        return None

    _loaded["quiet"] = quiet  # the library keeps calling it: keep it alive
    llama_cpp.llama_log_set(quiet, ctypes.c_void_p())
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    _loaded[path] = (llama_cpp, model, vocab)
    return _loaded[path]


def parse_state(data, seq):
    """(positions, k, v) from what llama_state_seq_get_data writes for one sequence: k and v (n_layer, n, width)
    float32 in cell order, ([], None, None) when the sequence holds nothing. The layout (llama_context and
    llama_kv_cache::state_write): u32 magic 0xaf143cd8, i32 seq id, u32 n_stream; per stream a u32 cell count and,
    when not 0, per cell i32 pos, u32 n_seq_id and that many i32 seq ids, then u32 v_trans, u32 n_layer, per layer
    i32 K type, u64 row size and the rows, then per layer V: i32 type, u64 row size and the rows, or (v_trans) i32
    type, u32 element size, u32 width and the elements column by column."""
    data = memoryview(data)
    magic, _ = struct.unpack_from("<Ii", data, 0)
    if magic != 0xAF143CD8:
        raise RuntimeError(
            f"llama_state_seq_get_data: magic {magic:#x}, not 0xaf143cd8 (a format this reader does not know)"
        )
    (n_stream,), at = struct.unpack_from("<I", data, 8), 12
    found = [], None, None
    for _ in range(n_stream):
        (count,), at = struct.unpack_from("<I", data, at), at + 4
        if count == 0:
            continue
        if found[0]:
            raise RuntimeError(
                "llama_state_seq_get_data: two streams hold the sequence: a layout this reader does not know"
            )
        found, at = _stream(data, at, count, seq)
    if at != len(data):
        raise RuntimeError(
            f"llama_state_seq_get_data: {len(data) - at} bytes left after the streams: a layout this "
            "reader does not know"
        )
    return found


def _stream(data, at, count, seq):
    """One stream's cells of parse_state: ((positions, k, v), the offset after them)."""
    pos = []
    for _ in range(count):
        p, n_ids = struct.unpack_from("<iI", data, at)
        ids = struct.unpack_from(f"<{n_ids}i", data, at + 8)
        if list(ids) != [seq]:  # a state of one sequence lists that sequence alone for every cell
            raise RuntimeError(
                f"llama_state_seq_get_data: a cell lists sequences {list(ids)}, not [{seq}]: a "
                "layout this reader does not know (an M-RoPE or PLE model's cells carry more)"
            )
        at += 8 + 4 * n_ids
        pos.append(p)
    v_trans, n_layer = struct.unpack_from("<II", data, at)
    at += 8
    ks, vs = [], []
    for _ in range(n_layer):
        kind, row = struct.unpack_from("<iQ", data, at)
        at += 12
        ks.append(_floats(data[at : at + count * row], kind).reshape(count, -1))
        at += count * row
    for _ in range(n_layer):
        if not v_trans:
            kind, row = struct.unpack_from("<iQ", data, at)
            at += 12
            vs.append(_floats(data[at : at + count * row], kind).reshape(count, -1))
            at += count * row
        else:
            kind, el, width = struct.unpack_from("<iII", data, at)
            at += 12
            vs.append(_floats(data[at : at + count * el * width], kind).reshape(width, count).T.copy())
            at += count * el * width
    return (pos, np.stack(ks), np.stack(vs)), at


class Sequences:
    """One llama_context of ``capacity`` cells: K/V type ``type_k``, one unified stream or one per sequence,
    flash attention on/off (None: llama.cpp's auto), 1 thread."""

    def __init__(self, lib, model, vocab, capacity, type_k=GGML_TYPE_F16, unified=False, flash=None):
        self.lib, self.vocab, self.n_seq, self.capacity = lib, vocab, N_SEQ, capacity
        p = lib.llama_context_default_params()
        p.n_ctx = capacity
        p.n_batch = p.n_ubatch = capacity
        p.n_seq_max = N_SEQ
        p.kv_unified = unified
        if flash is not None:
            p.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        p.n_threads = p.n_threads_batch = 1
        p.type_k = p.type_v = type_k
        p.no_perf = True
        self.ctx = lib.llama_init_from_model(model, p)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {capacity} cells")
        self.mem = lib.llama_get_memory(self.ctx)
        self.n_ctx = lib.llama_n_ctx(self.ctx)  # cells in all: a stream per sequence pads its share to 256
        self.batch = lib.llama_batch_init(capacity, 0, 1)

    def decode(self, tokens, positions, seq):
        lib, b, n = self.lib, self.batch, len(tokens)
        if not 0 < n <= self.capacity:
            raise Refused(f"a batch of {n} tokens (1..{self.capacity} fit)")
        b.n_tokens = n
        for i, (t, p) in enumerate(zip(tokens, positions, strict=True)):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = int(t), int(p), 1, True
            b.seq_id[i][0] = int(seq)
        rc = lib.llama_decode(self.ctx, b)
        if rc in (1, -1):  # no KV slot / an invalid batch: llama.h, "the memory state is restored"
            raise Refused(f"llama_decode returned {rc}")
        if rc != 0:  # 2 (aborted) or < -1: processed ubatches stay in memory, so not a refusal that changed nothing
            raise RuntimeError(f"llama_decode returned {rc} (aborted or failed; the memory may hold part of the batch)")
        out = np.empty((n, self.vocab), dtype=np.float32)
        for i in range(n):
            out[i] = np.ctypeslib.as_array(lib.llama_get_logits_ith(self.ctx, i), shape=(self.vocab,))
        return out

    def rm(self, seq, p0, p1):
        return bool(self.lib.llama_memory_seq_rm(self.mem, seq, p0, p1))

    def cp(self, src, dst, p0, p1):
        self.lib.llama_memory_seq_cp(self.mem, src, dst, p0, p1)

    def keep(self, seq):
        self.lib.llama_memory_seq_keep(self.mem, seq)

    def add(self, seq, p0, p1, delta):
        self.lib.llama_memory_seq_add(self.mem, seq, p0, p1, delta)

    def pos_min(self, seq):
        return int(self.lib.llama_memory_seq_pos_min(self.mem, seq))

    def pos_max(self, seq):
        return int(self.lib.llama_memory_seq_pos_max(self.mem, seq))

    def cells(self, seq):
        """(positions, k, v) of the cells holding ``seq``, in cell order (:func:`parse_state`)."""
        return parse_state(self.save(seq), seq)

    def save(self, seq):
        """llama_state_seq_get_data of ``seq``: the bytes of its state ("Copy the state of a single sequence")."""
        lib = self.lib
        size = lib.llama_state_seq_get_size(self.ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        wrote = lib.llama_state_seq_get_data(self.ctx, buf, size, seq)
        if not 0 < wrote == size:
            raise RuntimeError(
                f"llama_state_seq_get_data wrote {wrote} bytes of the {size} llama_state_seq_get_size gave"
            )
        return bytes(buf)[:wrote]

    def load(self, state, seq):
        """llama_state_seq_set_data of ``state`` into ``seq``: True when it loaded (a positive return)."""
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        return self.lib.llama_state_seq_set_data(self.ctx, buf, len(state), seq) > 0

    def positions(self, seq):
        return sorted(self.cells(seq)[0])

    def clear(self):
        self.lib.llama_memory_clear(self.mem, True)

    def close(self):
        if self.ctx:
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.ctx = None
