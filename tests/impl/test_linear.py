"""impl.linear: a row's bits never depend on how many rows share the call (the KV-T4 basis)."""

from __future__ import annotations

import numpy as np
import pytest

from impl import kernels
from impl.linear import Linear, numerics_path, pack_panels

# (in, out) of every SmolLM2-135M product: wqkv, wo, w_gate_up, w_down, the tied head
SMOLLM2_SHAPES = [(576, 960), (576, 576), (576, 3072), (1536, 576), (576, 49152)]
ODD_SHAPES = [(37, 61), (5, 3), (64, 17), (130, 33)]
ROW_COUNTS = [1, 2, 15, 16, 17, 64, 512]


def _weights(n_in: int, n_out: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n_out, n_in), dtype=np.float32) / np.sqrt(n_in)).astype(np.float32)
    x = rng.standard_normal((512, n_in), dtype=np.float32)
    return w, x


@pytest.fixture
def numpy_fallback(monkeypatch):
    """Force the numpy-gemv path for Linears built inside the test."""
    monkeypatch.setattr(kernels, "_state", {"kernel": None, "why": "forced by the test"})


def check_rows_invariant(lin: Linear, x: np.ndarray) -> None:
    full = lin(x)  # (512, out)
    for t in ROW_COUNTS:
        for off in sorted({0, 7, 255, 512 - t} & set(range(0, 512 - t + 1))):
            part = lin(x[off : off + t])
            assert np.array_equal(part, full[off : off + t]), f"T={t} offset={off}"
    for i in (0, 1, 5, 6, 255, 510, 511):  # rows of the 512-row call against the same row alone
        assert np.array_equal(lin(x[i : i + 1])[0], full[i]), f"row {i}"


@pytest.mark.parametrize("shape", SMOLLM2_SHAPES + ODD_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_any_row_of_a_t_row_call_equals_that_row_alone(shape):
    w, x = _weights(*shape, seed=shape[0] * 7 + shape[1])
    check_rows_invariant(Linear(w), x)


@pytest.mark.parametrize("shape", [(576, 960), (1536, 576), (37, 61)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_numpy_fallback_is_row_invariant_too(numpy_fallback, shape):
    w, x = _weights(*shape, seed=3)
    lin = Linear(w)
    assert lin.kernel is None and lin.blocks[0].ndim == 2
    assert "numpy-gemv" in numerics_path()
    check_rows_invariant(lin, x)


@pytest.mark.parametrize("shape", SMOLLM2_SHAPES[:4] + ODD_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_result_is_close_to_a_float64_product(shape):
    w, x = _weights(*shape, seed=11)
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    got = Linear(w)(x)
    assert got.shape == ref.shape and got.dtype == np.float32
    # k-blocked sums: error well under sgemm's (about 8e-5 on 576-wide unit-variance rows)
    assert np.abs(got - ref).max() <= 4e-6 * np.sqrt(shape[0]) * np.abs(ref).max() + 1e-6


def test_no_rows_give_no_rows_on_either_path(monkeypatch):
    w, x = _weights(37, 61, seed=9)
    assert Linear(w)(x[:0]).shape == (0, 61)
    monkeypatch.setattr(kernels, "_state", {"kernel": None, "why": "forced by the test"})
    assert Linear(w)(x[:0]).shape == (0, 61)


@pytest.mark.parametrize("shape", [(576, 960), (37, 61)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_kernel_threads_do_not_change_bits(shape):
    """Work items go to whichever thread is free (schedule(dynamic)); no element's sum may notice.
    (576, 960) at 40 rows walks panels outer, (37, 61) at 512 rows walks row blocks outer."""
    k = kernels.load()
    if k is None:
        pytest.skip(f"kernel unavailable: {kernels.status()}")
    w, x = _weights(*shape, seed=5)
    panels = pack_panels(w)
    outs = []
    for threads in (1, 2, 3):
        for t in (1, 40, 512):
            y = np.empty((t, panels.shape[0] * 16), np.float32)
            k.linear(x[:t], panels, y, threads=threads)
            outs.append((t, y))
    ref = {t: y for t, y in outs[:3]}
    for t, y in outs:
        assert np.array_equal(y, ref[t]) and np.array_equal(y, ref[512][:t])


def test_layouts_convert_between_paths(numpy_fallback, monkeypatch):
    w, x = _weights(64, 40, seed=9)
    gemv = Linear(w)
    assert np.array_equal(gemv.weight(), w)
    k = kernels._state  # the fallback's state, to restore below
    monkeypatch.setattr(kernels, "_state", {})
    if kernels.load() is None:
        pytest.skip(f"kernel unavailable: {kernels.status()}")
    packed = Linear.from_blocks(gemv.blocks)  # made under numpy-gemv, loaded under the kernel
    assert packed.blocks[0].shape == (3, 64, 16) and np.array_equal(packed.weight(), w)
    again = Linear.from_blocks(packed.blocks, n_out=40)
    assert np.array_equal(again(x), packed(x))
    monkeypatch.setattr(kernels, "_state", k)
    back = Linear.from_blocks(packed.blocks, n_out=40)  # and back to column blocks
    assert back.kernel is None and np.array_equal(back.weight(), w)
    assert np.array_equal(back(x), gemv(x))


def test_numerics_path_names_the_kernel_when_loaded():
    path = numerics_path()
    if kernels.load() is None:
        assert "linear: numpy-gemv" in path and kernels.status() in path
    else:
        assert path.startswith("linear: kernel ") and kernels.load().isa in path


def test_non_contiguous_input_gives_the_same_bits():
    w, x = _weights(576, 576, seed=2)
    lin = Linear(w)
    wide = np.zeros((8, 1200), np.float32)
    wide[:, 100:676] = x[:8]
    assert np.array_equal(lin(wide[:, 100:676]), lin(x[:8]))


def test_kernel_builds_once_into_its_cache_folder_and_gives_the_same_bits(tmp_path, monkeypatch):
    if kernels.load() is None:
        pytest.skip(f"kernel unavailable: {kernels.status()}")
    monkeypatch.setenv(kernels.ENV_CACHE, str(tmp_path))
    so = kernels.build()
    assert so.parent == tmp_path and so.exists() and kernels.build() == so  # the second call finds it
    fresh = kernels.Kernel(so)
    w, x = _weights(64, 40, seed=1)
    panels = pack_panels(w)
    a, b = (np.empty((9, 48), np.float32) for _ in range(2))
    fresh.linear(x[:9], panels, a)
    kernels.load().linear(x[:9], panels, b)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("var,value", [("KVPROOF_KERNEL", "gpu"), ("KVPROOF_ATTENTION", "fast")])
def test_unknown_path_settings_are_refused_with_the_allowed_values(var, value, monkeypatch):
    """A typo in KVPROOF_KERNEL / KVPROOF_ATTENTION is an error naming the variable, the value and the choices,
    never a silent fallback to some default path."""
    from impl.attention import attention_kernel
    from impl.errors import ImplError

    monkeypatch.setenv(var, value)
    monkeypatch.setattr(kernels, "_state", {})
    with pytest.raises(ImplError) as e:
        attention_kernel() if var == "KVPROOF_ATTENTION" else kernels.load()
    msg = str(e.value)
    assert f"{var}={value!r}" in msg and "numpy" in msg and "auto" in msg


def test_attention_defaults_to_the_kernel_when_it_loads(monkeypatch):
    from impl.attention import attention_kernel, attention_path

    monkeypatch.delenv("KVPROOF_ATTENTION", raising=False)
    k = kernels.load()
    assert attention_kernel() is k
    assert attention_path().startswith("kernel" if k is not None else "numpy")
    monkeypatch.setenv("KVPROOF_ATTENTION", "numpy")
    assert attention_kernel() is None and "KVPROOF_ATTENTION=numpy" in attention_path()
