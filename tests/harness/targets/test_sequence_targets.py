"""The sequence-cache protocol's pieces: the Positions known answer, Rope, reference.sequences, state parsing,
reproduction scripts, and (where llama-cpp-python is installed) llama.cpp's targets and known findings."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.targets import llamacpp, registry, seqrepro
from harness.targets.llamacpp_calls import parse_state
from harness.targets.protocol import Geometry
from harness.targets.seqclaims import Step
from harness.targets.sequences import Positions, Refused, Rope, in_range

ROOT = Path(__file__).resolve().parents[3]
G = Geometry(1, 1, 1)


def test_in_range_reads_negative_bounds_as_from_0_and_to_no_end():
    assert [p for p in range(8) if in_range(p, 2, 5)] == [2, 3, 4]
    assert [p for p in range(8) if in_range(p, -1, 3)] == [0, 1, 2]  # p1 excluded (the card says why)
    assert [p for p in range(8) if in_range(p, 5, -1)] == [5, 6, 7]
    assert [p for p in range(8) if in_range(p, -1, -1)] == list(range(8))
    assert [p for p in range(8) if in_range(p, 4, 4)] == []


def test_positions_follows_each_verb_by_its_definition():
    m = Positions(3)
    m.decode([0, 1, 2, 3], 0)
    m.decode([0, 1], 1)
    m.cp(0, 1, -1, -1)  # dst keeps its own cells and shares src's
    assert m.held(1) == [0, 0, 1, 1, 2, 3]
    m.rm(0, 1, 3)
    assert m.held(0) == [0, 3] and m.held(1) == [0, 0, 1, 1, 2, 3]
    m.add(1, 2, -1, 5)  # a cell seq 1 shares with seq 0 moves for both
    assert m.held(1) == [0, 0, 1, 1, 7, 8] and m.held(0) == [0, 8]
    m.keep(0)
    assert m.held(1) == [] and m.held(0) == [0, 8] and m.pos_max(1) == -1
    m.rm(-1, -1, 5)
    assert m.held(0) == [8] and (m.pos_min(0), m.pos_max(0)) == (8, 8)
    m.add(0, -1, -1, -9)  # below 0: gone
    assert m.held(0) == []
    m.decode([3], 2)
    m.clear()
    assert all(m.pos_max(s) == -1 for s in range(3))


@pytest.mark.parametrize("pairs", ["halves", "adjacent"])
def test_rope_rotates_each_pair_by_its_own_angle(pairs):
    d, theta = 8, 100.0
    rope = Rope(pairs, theta, d, 2.0**-24)
    k = np.random.default_rng(0).standard_normal((2, 3, 2 * d)).astype(np.float32)  # 2 heads of width d
    assert np.allclose(rope.rotate(rope.rotate(k, 7), -7), k, atol=1e-12)
    assert np.allclose(rope.rotate(rope.rotate(k, 3), 4), rope.rotate(k, 7), atol=1e-12)
    assert np.allclose(rope.pair_norms(rope.rotate(k, 11)), rope.pair_norms(k), atol=1e-12)
    e3 = np.zeros((1, d))
    first = 3 if pairs == "halves" else 6  # pair 3 (of d / 2 = 4): i and i + d/2, or 2i and 2i + 1
    e3[0, first] = 1.0
    turned = rope.rotate(e3, 5)[0, first]
    assert np.isclose(turned, np.cos(5 * 100.0 ** (-6 / 8)))  # pair 3 turns by delta * theta ** (-2 * 3 / d)
    e = np.zeros((1, d))
    e[0, 0] = 1.0  # pair 0 turns by delta * theta**0 = delta radians
    partner = d // 2 if pairs == "halves" else 1
    out = rope.rotate(e, 2)
    assert np.isclose(out[0, 0], np.cos(2)) and np.isclose(out[0, partner], np.sin(2))
    assert np.count_nonzero(np.abs(out) > 1e-15) == 2


def test_the_reference_refuses_a_batch_that_does_not_continue_its_sequence_and_changes_nothing():
    h = registry.get("reference.sequences").make(G, capacity=8)
    h.decode([1, 2, 3], [0, 1, 2], 0)
    for tokens, positions, seq in (([4], [5], 0), ([4], [2], 0), ([4, 5], [3, 5], 0), ([1] * 6, range(6), 1)):
        with pytest.raises(Refused):
            h.decode(tokens, positions, seq)
        assert h.positions(0) == [0, 1, 2] and h.positions(1) == []
    out = h.decode([4], [3], 0)
    assert out.shape == (1, h.vocab) and out.dtype == np.float32
    pos, k, v = h.cells(0)
    assert pos == [0, 1, 2, 3] and k.shape[:2] == (2, 4) and v.shape == k.shape


def _state(cells: list[tuple[int, list[int]]], k: np.ndarray, v: np.ndarray, v_trans: bool) -> bytes:
    """A blob in llama_kv_cache::state_write's layout, with F32 rows (k, v: (n_layer, n, width))."""
    out = struct.pack("<IiI", 0xAF143CD8, 0, 2) + struct.pack("<I", 0)  # stream 0 empty
    out += struct.pack("<I", len(cells))
    for pos, seqs in cells:
        out += struct.pack("<iI", pos, len(seqs)) + struct.pack(f"<{len(seqs)}i", *seqs)
    out += struct.pack("<II", int(v_trans), k.shape[0])
    for layer in k:
        out += struct.pack("<iQ", 0, layer.shape[1] * 4) + layer.astype("<f4").tobytes()
    for layer in v:
        if v_trans:
            out += struct.pack("<iII", 0, 4, layer.shape[1]) + layer.T.astype("<f4").tobytes()
        else:
            out += struct.pack("<iQ", 0, layer.shape[1] * 4) + layer.astype("<f4").tobytes()
    return out


@pytest.mark.parametrize("v_trans", [False, True])
def test_state_blobs_parse_back_to_positions_and_rows(v_trans):
    rng = np.random.default_rng(1)
    k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))
    pos, k2, v2 = parse_state(_state([(4, [1]), (5, [1]), (9, [1])], k, v, v_trans), 1)
    assert pos == [4, 5, 9]
    assert np.array_equal(k2, k.astype(np.float32)) and np.array_equal(v2, v.astype(np.float32))
    assert parse_state(struct.pack("<IiI", 0xAF143CD8, 0, 1) + struct.pack("<I", 0), 0) == ([], None, None)
    with pytest.raises(RuntimeError, match="magic"):
        parse_state(struct.pack("<IiI", 1, 0, 1), 0)
    with pytest.raises(RuntimeError, match="lists sequences"):  # a cell of another sequence: not this layout
        parse_state(_state([(4, [1]), (5, [1, 2])], k[:, :2], v[:, :2], v_trans), 1)
    with pytest.raises(RuntimeError, match="bytes left"):
        parse_state(_state([(4, [1])], k[:, :1], v[:, :1], v_trans) + b"\0", 1)


def test_a_reproduction_embeds_the_calls_and_the_programs_literally():
    target = llamacpp.TARGETS["llama.cpp"]
    log = [Step("decode", ([5, 6], range(1, 3), 1)), Step("cp", (1, 0, -1, -1)), Step("check", ("pos", 0, (1, 2)))]
    text = seqrepro.script(target, [log], "llama.cpp: after cp(1, 0, -1, -1): seq 0 ...", "witnesses/x.py::t")
    compile(text, "repro.py", "exec")
    assert "import harness" not in text and "from harness" not in text
    assert "('decode', ([5, 6], [1, 2], 1))" in text and "def parse_state" in text
    assert seqrepro.script(registry.get("reference.sequences"), [log], "m", "w") == ""  # own targets: none


LLAMA = registry.get("llama.cpp")
needs_llama = pytest.mark.skipif(not LLAMA.runnable, reason=f"n/a: {LLAMA.unavailable}")


@needs_llama
@pytest.mark.parametrize("name", list(llamacpp.TARGETS))
def test_llama_cpp_rewinds_bit_for_bit_and_reports_positions(name):
    h = registry.get(name).make(G, capacity=64)
    try:
        first = h.decode([10, 11, 12, 13], range(4), 0)
        assert h.rm(0, 2, -1) is True and h.positions(0) == [0, 1] and h.pos_max(0) == 1
        again = h.decode([12, 13], [2, 3], 0)
        assert np.array_equal(again.view(np.uint32), first[2:].view(np.uint32))
        with pytest.raises(Refused):
            h.decode([1], [9], 0)
        assert h.pos_max(0) == 3
    finally:
        h.close()


@needs_llama
def test_the_known_llama_cpp_reproductions_still_fail():
    scripts = sorted((ROOT / "obligations" / "known" / "llama.cpp").glob("*.py"))
    assert scripts
    for script in scripts:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, f"{script.name}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        assert "FAIL:" in done.stdout and "Traceback" not in done.stderr, f"{script.name}: {done.stdout}{done.stderr}"
