"""Known answers for GGUF-DEQUANT's reference decoder (witnesses/gguf_reference.py).

The reference is what the card trusts instead of the ``gguf`` package, so it
is pinned here on blocks built by hand, whose values are worked out in the
comments, and on a small GGUF file written byte by byte.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from witnesses import gguf_reference as ref


def f16(x: float) -> bytes:
    return np.array([x], dtype="<f2").tobytes()


def q4_1_block(d: float, m: float, nibbles: list[int]) -> bytes:
    """One Q4_1 block of 32 values: nibbles[j] goes to the low half of byte j (j < 16), else the high half of j-16."""
    assert len(nibbles) == 32 and all(0 <= q <= 15 for q in nibbles)
    qs = bytes(nibbles[j] | (nibbles[j + 16] << 4) for j in range(16))
    return f16(d) + f16(m) + qs


def bits(a: np.ndarray) -> list[int]:
    return np.asarray(a, dtype=np.float32).view(np.uint32).tolist()


def test_q4_1_low_nibbles_are_values_0_to_15_and_high_nibbles_16_to_31():
    # d = 0.5, m = -1: value j is 0.5*q - 1, all exact.
    # low nibbles count up 0..15, high nibbles count down 15..0.
    block = f16(0.5) + f16(-1.0) + bytes(j | ((15 - j) << 4) for j in range(16))
    got = ref.decode_q4_1(np.frombuffer(block, dtype=np.uint8))
    want = [0.5 * j - 1 for j in range(16)] + [0.5 * (15 - j) - 1 for j in range(16)]
    assert got.dtype == np.float32 and got.shape == (32,)
    assert got.tolist() == want
    assert got[0] == -1.0 and got[15] == 6.5 and got[16] == 6.5 and got[31] == -1.0


def test_q4_1_rounds_once_in_float32_at_the_final_add():
    # d = 1 + 2^-10 (exact in f16), m = 2^15, q = 15:
    # q*d = 15 + 15*2^-10 = 15.0146484375 exactly (at most 4 + 11 significant bits).
    # q*d + m = 32783.0146484375; float32's spacing at 2^15 is 2^-8 = 0.00390625,
    # and 0.0146484375 = 3.75 spacings, so it rounds to 4 spacings: 32783.015625.
    # (A float16 computation would land on a multiple of 32: 32768 or 32800.)
    d, m = 1 + 2**-10, 2.0**15
    block = q4_1_block(d, m, [15] + [0] * 31)
    got = ref.decode_q4_1(np.frombuffer(block, dtype=np.uint8))
    assert got[0] == np.float32(32783.015625)
    assert float(got[0]) == 32783.015625
    assert got[1] == np.float32(32768.0)  # q = 0: m exactly


def test_q4_1_subnormal_scale_widens_exactly():
    # f16 bit pattern 0x0001 is its smallest subnormal, 2^-24; 15 * 2^-24 is exact in float32.
    block = struct.pack("<HH", 0x0001, 0x0000) + bytes([0x0F] + [0] * 15)
    got = ref.decode_q4_1(np.frombuffer(block, dtype=np.uint8))
    assert got[0] == np.float32(15 * 2.0**-24)
    assert got[16] == 0.0 and bits(got[16:17]) == [0]  # q = 0, m = +0: +0.0


def test_q8_0_quants_are_signed_bytes_times_the_scale():
    # d = 0.25; q = -128, -1, 0, 1, 127 then 27 zeros.
    qs = [-128, -1, 0, 1, 127] + [0] * 27
    block = f16(0.25) + np.array(qs, dtype=np.int8).tobytes()
    got = ref.decode_q8_0(np.frombuffer(block, dtype=np.uint8))
    assert got.dtype == np.float32 and got.shape == (32,)
    assert got[:5].tolist() == [-32.0, -0.25, 0.0, 0.25, 31.75]


def test_two_blocks_decode_in_order():
    b1 = q4_1_block(1.0, 0.0, list(range(16)) * 2)
    b2 = q4_1_block(2.0, 100.0, [1] * 32)
    got = ref.decode_q4_1(np.frombuffer(b1 + b2, dtype=np.uint8))
    assert got.tolist() == list(range(16)) * 2 + [102.0] * 32


def test_hf_row_order_undoes_the_converters_permute():
    # n_head = 2, head_dim = 4: HF row h*4 + s*2 + i was stored at GGUF row h*4 + 2i + s.
    assert ref.hf_row_order(8, 2).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    # llama.cpp convert_hf_to_gguf.py permute: reshape(n_head, 2, hd//2, ...).swapaxes(1, 2)
    hf = np.arange(9 * 64 * 3, dtype=np.float32).reshape(9 * 64, 3)
    stored = hf.reshape(9, 2, 32, 3).swapaxes(1, 2).reshape(hf.shape)
    assert np.array_equal(stored[ref.hf_row_order(9 * 64, 9)], hf)


def _gguf_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def tiny_gguf(alignment: int | None = 64) -> bytes:
    """A v3 GGUF with metadata of several kinds and three tensors: F32 (3,), Q4_1 (2, 32), Q8_0 (32,)."""
    kv = [
        _gguf_string("general.architecture") + struct.pack("<I", 8) + _gguf_string("llama"),
        _gguf_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + _gguf_string("a") + _gguf_string("bc"),
        _gguf_string("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 2) + struct.pack("<ff", 0.5, 1.5),
        _gguf_string("llama.attention.head_count") + struct.pack("<II", 4, 9),
    ]
    if alignment is not None:
        kv.append(_gguf_string("general.alignment") + struct.pack("<II", 4, alignment))
    f32 = struct.pack("<3f", 1.5, -2.0, 0.0)
    q41 = q4_1_block(0.5, -1.0, list(range(16)) * 2) + q4_1_block(1.0, 0.0, [3] * 32)
    q80 = f16(2.0) + np.array(range(-16, 16), dtype=np.int8).tobytes()
    align = alignment or 32
    data, offsets = b"", []
    for blob in (f32, q41, q80):
        data += b"\0" * ((-len(data)) % align)
        offsets.append(len(data))
        data += blob
    infos = [
        _gguf_string("norm.weight") + struct.pack("<IQIQ", 1, 3, ref.F32, offsets[0]),
        _gguf_string("w.weight") + struct.pack("<IQQIQ", 2, 32, 2, ref.Q4_1, offsets[1]),
        _gguf_string("embd.weight") + struct.pack("<IQIQ", 1, 32, ref.Q8_0, offsets[2]),
    ]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kv)) + b"".join(kv) + b"".join(infos)
    return head + b"\0" * ((-len(head)) % align) + data


@pytest.mark.parametrize("alignment", [64, None])
def test_a_hand_written_file_indexes_and_decodes(alignment):
    buf = tiny_gguf(alignment)
    idx = ref.index(buf)
    assert idx.version == 3
    assert idx.metadata["general.architecture"] == "llama" and idx.metadata["llama.attention.head_count"] == 9
    assert "tokenizer.ggml.tokens" not in idx.metadata  # arrays are skipped, not kept
    norm, w, embd = idx.tensors
    assert (norm.name, norm.type_name, norm.shape) == ("norm.weight", "F32", (3,))
    assert (w.name, w.type_name, w.shape) == ("w.weight", "Q4_1", (2, 32))  # ne = (32, 2): rows of 32
    assert (embd.name, embd.type_name, embd.shape) == ("embd.weight", "Q8_0", (32,))
    assert norm.offset % (alignment or 32) == 0
    assert ref.decode(buf, norm).tolist() == [1.5, -2.0, 0.0]
    got = ref.decode(buf, w)
    assert got[0].tolist() == [0.5 * q - 1 for q in range(16)] * 2
    assert got[1].tolist() == [3.0] * 32
    assert ref.decode(buf, embd).tolist() == [2.0 * q for q in range(-16, 16)]


def test_a_type_without_a_reference_is_refused_by_name():
    t = ref.TensorInfo("x.weight", 12, (256,), 0)  # Q4_K
    with pytest.raises(NotImplementedError, match="x.weight: ggml type 12"):
        ref.decode(b"\0" * 1024, t)


def test_not_a_gguf_is_refused():
    with pytest.raises(ValueError, match="not a GGUF"):
        ref.index(b"GGML" + b"\0" * 60)


def test_the_hand_written_file_is_one_the_gguf_package_reads_alike(tmp_path):
    """Guards the writer above and the reference's parser against sharing one misreading of the format."""
    from gguf import GGUFReader

    path = tmp_path / "tiny.gguf"
    path.write_bytes(tiny_gguf(64))
    reader = GGUFReader(path)
    idx = ref.index(path.read_bytes())
    assert [t.name for t in reader.tensors] == [t.name for t in idx.tensors]
    for rt, t in zip(reader.tensors, idx.tensors, strict=True):
        assert rt.tensor_type.value == t.ggml_type and tuple(int(n) for n in rt.shape) == t.ne
        assert int(rt.data_offset) == t.offset


def test_reference_file_keeps_each_decoded_tensor_read_only(tmp_path):
    """ReferenceFile.tensor decodes once and hands out the same read-only array after: no witness can
    alter what the next one compares against."""
    path = tmp_path / "tiny.gguf"
    path.write_bytes(tiny_gguf(64))
    rf = ref.ReferenceFile(path)
    for name in rf.infos:
        first = rf.tensor(name)
        assert rf.tensor(name) is first and not first.flags.writeable
        assert bits(first) == bits(ref.decode(rf.buf, rf.infos[name]))
        with pytest.raises(ValueError):
            first[...] = 0
