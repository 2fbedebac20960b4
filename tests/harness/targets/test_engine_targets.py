"""harness/targets/torchtune.py and litgpt.py: each adapter against the real library, when it is installed.

torchtune: ``make engines-torchtune`` (pip install '.[torchtune]' into .venv). litgpt: ``make engines-litgpt``
(its own venv, .venv-litgpt: its pins conflict with transformers'), then run these tests with
``.venv-litgpt/bin/python -m pytest tests/harness/targets/test_engine_targets.py``. Without the library each
test skips naming that command; the registry test runs everywhere.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.errors import NotCapable
from harness.targets import known, registry
from harness.targets.protocol import Geometry

ROOT = Path(__file__).resolve().parents[3]
G = Geometry(2, 2, 4)
TORCHTUNE = registry.get("torchtune.kvcache")
LITGPT = registry.get("litgpt.kvcache")
RING = registry.get("litgpt.kvcache-sliding")

needs_torchtune = pytest.mark.skipif(
    not TORCHTUNE.runnable, reason=f"torchtune is not installed: make engines-torchtune ({TORCHTUNE.unavailable})"
)
needs_litgpt = pytest.mark.skipif(
    not LITGPT.runnable, reason=f"litgpt is not installed here: make engines-litgpt ({LITGPT.unavailable})"
)


def rows(t: int, seed: int, batch: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = G.rows_shape(batch, t)
    return rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)


def test_the_engine_groups_name_their_targets_and_say_how_to_install_when_missing():
    assert [t.name for t in registry.select("torchtune")] == ["torchtune.kvcache"]
    assert [t.name for t in registry.select("litgpt")] == ["litgpt.kvcache", "litgpt.kvcache-sliding"]
    assert {"torchtune.kvcache", "litgpt.kvcache", "litgpt.kvcache-sliding"} <= set(registry.GROUPS["all"])
    for t in (TORCHTUNE, LITGPT, RING):
        assert t.runnable or "make engines-" in t.unavailable
        assert {v for v, _ in t.docs} >= {"append", "read", "fork"}  # every declared verb's backing is quoted
        assert t.lacks(["reorder", "select", "repeat"]) == ["reorder", "select", "repeat"]


@needs_torchtune
def test_torchtune_appends_read_back_and_hand_attention_the_whole_buffer():
    h = TORCHTUNE.make(G, batch=2, capacity=6)
    k1, v1 = rows(2, 1)
    k2, v2 = rows(3, 2)
    vis = h.append(k1, v1)
    assert (vis.mask_length, vis.mask_offset, vis.k.shape[3]) == (6, 0, 6)  # max_seq_len rows, masked by the caller
    h.append(k2, v2)
    got = h.read()
    assert len(h) == 5 and got.positions.tolist() == [0, 1, 2, 3, 4]
    assert np.array_equal(got.k, np.concatenate([k1, k2], axis=3))
    assert np.array_equal(got.v, np.concatenate([v1, v2], axis=3))
    f = h.fork()
    f.append(*rows(1, 3))
    assert len(f) == 6 and len(h) == 5 and np.array_equal(h.read().k, got.k)
    with pytest.raises(NotCapable, match="truncate"):
        h.truncate(1)


@needs_litgpt
def test_litgpt_writes_at_input_pos_and_truncate_rewinds_the_next_write():
    h = LITGPT.make(G, batch=2, capacity=8)
    k1, v1 = rows(4, 1)
    vis = h.append(k1, v1)
    assert (vis.mask_length, vis.mask_offset, vis.k.shape[3]) == (8, 0, 8)
    h.truncate(2)
    k2, v2 = rows(1, 2)
    h.append(k2, v2)
    got = h.read()
    assert got.positions.tolist() == [0, 1, 2]
    assert np.array_equal(got.k, np.concatenate([k1[:, :, :, :2], k2], axis=3))
    with pytest.raises(ValueError):
        h.truncate(4)


@needs_litgpt
def test_litgpt_ring_keeps_the_last_w_positions_in_order_and_refuses_a_longer_chunk():
    h = RING.make(G, batch=2, window=3, capacity=10)
    ks = [rows(1, s) for s in range(5)]
    for k, v in ks:  # one position at a time: the use litgpt's ring is right for
        vis = h.append(k, v)
    assert vis.positions.tolist() == [2, 3, 4] and (vis.mask_length, vis.mask_offset) == (3, 2)
    got = h.read()
    assert got.positions.tolist() == [2, 3, 4]
    assert np.array_equal(got.k, np.concatenate([k for k, _ in ks[2:]], axis=3))
    with pytest.raises(ValueError, match="Prefill length"):  # documented (PR 2215); outside Hypothesis it stands
        h.append(*rows(4, 9))
    assert len(h) == 5


@needs_litgpt
def test_the_litgpt_ring_findings_reproduce_on_the_surveyed_version():
    survey = known.load(ROOT)
    if survey.stale("litgpt.kvcache-sliding"):
        pytest.skip(f"the known list was surveyed on {survey.surveyed['litgpt.kvcache-sliding']}")
    scripts = [ROOT / k.reproduction for k in survey.known["litgpt.kvcache-sliding"]]
    scripts.append(ROOT / "obligations/known/litgpt.kvcache-sliding/chunked-prefill-decode-differs-from-recompute.py")
    for path in scripts:
        out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert out.returncode == 1, f"{path.name}: exit {out.returncode}\n{out.stdout[-1500:]}{out.stderr[-1500:]}"
