"""impl.kernels' ISA builds (KVPROOF_KERNEL_ISA): validated like every KVPROOF_* setting, refused when this CPU
cannot execute them, cached one file per build, named in the numerics line, and the same linear bits on each."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from impl import kernels
from impl.errors import SettingError
from impl.linear import numerics_path, pack_panels

AVX2_ONLY = frozenset({"sse2", "avx", "avx2", "fma", "f16c"})


@pytest.fixture
def fresh_state(monkeypatch):
    """A process state with no kernel loaded yet (restored after the test)."""
    monkeypatch.setattr(kernels, "_state", {})
    monkeypatch.delenv(kernels.ENV_CHOICE, raising=False)


@pytest.mark.parametrize("kernel_choice", ["auto", "numpy"])
def test_an_unknown_isa_is_refused_naming_the_variable_the_value_and_every_choice(
    fresh_state, monkeypatch, kernel_choice
):
    """A typo is an error on either path (KVPROOF_KERNEL=numpy too), never a silent default build."""
    monkeypatch.setenv(kernels.ENV_ISA, "avx3")
    monkeypatch.setenv(kernels.ENV_CHOICE, kernel_choice)
    with pytest.raises(SettingError) as e:
        kernels.load()
    msg = str(e.value)
    assert "KVPROOF_KERNEL_ISA='avx3'" in msg and all(c in msg for c in ("auto", "avx512", "avx2", "portable"))


def test_a_build_this_cpu_cannot_execute_is_refused_before_anything_compiles(fresh_state, monkeypatch):
    monkeypatch.setattr(kernels, "cpu_features", lambda: AVX2_ONLY)
    monkeypatch.setattr(kernels, "_compile", lambda *a: pytest.fail("compiled a build the CPU cannot run"))
    assert kernels.runnable_isas() == ("avx2", "portable")
    assert kernels.isa_refusal("avx512") == "this CPU lacks avx512f avx512bw avx512dq avx512vl"
    assert kernels.isa_refusal("avx2") == kernels.isa_refusal("portable") == kernels.isa_refusal("auto") == ""
    monkeypatch.setenv(kernels.ENV_ISA, "avx512")
    with pytest.raises(SettingError) as e:
        kernels.load()
    msg = str(e.value)
    assert "KVPROOF_KERNEL_ISA='avx512'" in msg and "lacks avx512f" in msg and "auto, avx2, portable" in msg
    with pytest.raises(SettingError):
        kernels.build(isa="avx512")
    monkeypatch.setenv(kernels.ENV_CHOICE, "numpy")  # the kernel is not used: nothing to refuse
    assert kernels.load() is None and "numpy-gemv" in numerics_path()


def test_without_a_feature_list_only_the_builds_that_need_none_run(monkeypatch):
    monkeypatch.setattr(kernels, "cpu_features", lambda: None)
    assert kernels.runnable_isas() == ("portable",)
    assert "does not report" in kernels.isa_refusal("avx2") and kernels.isa_refusal("auto") == ""


def test_the_cpu_feature_flags_are_read_from_proc_cpuinfo():
    have = kernels.cpu_features()
    if have is None:
        pytest.skip("no x86 flags in /proc/cpuinfo")
    assert "sse2" in have  # every x86-64 CPU
    assert kernels.runnable_isas()[-1] == "portable"


def _runnable_kernels() -> dict[str, kernels.Kernel]:
    if kernels.load() is None:
        pytest.skip(f"kernel unavailable: {kernels.status()}")
    return {isa: kernels.Kernel(kernels.build(isa=isa), build=isa) for isa in ("auto", *kernels.runnable_isas())}


def test_each_isa_build_is_its_own_cached_file_and_names_itself():
    ks = _runnable_kernels()
    paths = {isa: k.path for isa, k in ks.items()}
    assert len(set(paths.values())) == len(paths), paths  # building one never replaced another
    for isa, k in ks.items():
        assert k.path.exists() and k.path.name.startswith(f"kvkernel-{isa}-")
        assert k.describe().startswith(f"{k.isa} (build {isa}: ")
        assert kernels.build(isa=isa) == k.path  # cached: found, not rebuilt
    expect = {"avx512": "avx512f", "avx2": "avx2+fma"}
    for isa, vector_code in expect.items():
        if isa in ks:
            assert ks[isa].isa == vector_code and ks[isa].q_vector
    if "portable" in ks:
        assert ks["portable"].isa.startswith("generic-") and not ks["portable"].q_vector


def test_the_numerics_line_names_the_isa_build_in_force(fresh_state, monkeypatch):
    for isa in kernels.runnable_isas():
        monkeypatch.setenv(kernels.ENV_ISA, isa)
        monkeypatch.setattr(kernels, "_state", {})
        if kernels.load() is None:
            pytest.skip(f"kernel unavailable: {kernels.status()}")
        assert f"(build {isa}: " in numerics_path() and kernels.load().build == isa


def test_linear_has_the_same_bits_on_every_isa_build():
    """One FMA per step in one order for every element: the vector width cannot show in the result."""
    ks = _runnable_kernels()
    rng = np.random.default_rng(0)
    for t, k, c in [(1, 576, 960), (7, 130, 33), (40, 100, 48), (3, 1536, 20), (601, 65, 17)]:
        x = rng.standard_normal((t, k)).astype(np.float32)
        panels = pack_panels(rng.standard_normal((c, k)).astype(np.float32))
        outs = {}
        for isa, kern in ks.items():
            outs[isa] = np.empty((t, panels.shape[0] * 16), np.float32)
            kern.linear(x, panels, outs[isa], threads=2)
        first = next(iter(outs.values()))
        assert all(np.array_equal(o.view(np.uint32), first.view(np.uint32)) for o in outs.values()), (t, k, c)


def test_the_quantized_decode_exp_and_silu_have_the_same_bits_on_every_isa_build():
    """The quantized decode sums in the linear order; exp and silu are one formula per element (rmsnorm, softmax
    and attention sum in vector lanes, so their bits may differ between builds)."""
    ks = _runnable_kernels()
    rng = np.random.default_rng(1)
    g = (rng.standard_normal((20, 333)) * 20).astype(np.float32)
    u = rng.standard_normal((20, 333)).astype(np.float32)
    raw = rng.integers(0, 256, size=(37, 5, 34), dtype=np.uint8)  # 37 rows of five Q8_0 blocks: a short last group
    raw[:, :, 0:2] = (rng.standard_normal((37, 5)) * 0.02).astype(np.float16).view(np.uint8).reshape(37, 5, 2)
    rows = np.ascontiguousarray(raw.ctypes.data + np.arange(37) * 5 * 34, dtype=np.uintp)
    x = rng.standard_normal(160).astype(np.float32)
    results = {}
    for isa, kern in ks.items():
        q = np.empty(37, np.float32)
        kern.linear_q(x, rows, kernels.QTYPES["Q8_0"], q, threads=2)
        results[isa] = [kern.exp(-np.abs(g)), kern.silu(g), kern.silu(g, u), q]
    first = next(iter(results.values()))
    for isa, outs in results.items():
        for name, a, b in zip(("exp", "silu", "silu*u", "linear_q"), outs, first, strict=True):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (isa, name)


def _round_f32(v: Fraction) -> np.float32:
    """The float32 nearest to the exact rational v, ties to even (no double rounding)."""
    f = np.float32(float(v))
    below, above = (np.nextafter(f, np.float32(-np.inf)), f) if Fraction(float(f)) > v else (f, None)
    if above is None:
        above = np.nextafter(f, np.float32(np.inf)) if Fraction(float(f)) < v else f
    db, da = v - Fraction(float(below)), Fraction(float(above)) - v
    if db != da:
        return below if db < da else above
    return below if int(below.view(np.uint32)) % 2 == 0 else above


def test_every_build_fuses_exactly_where_a_double_sum_lands_on_a_float_midpoint():
    """y = fma(x1, w1, x0 * w0) with x0 * w0 = 1 and x1 * w1 = 2^-24 (1 + 2^-36): rounded once, 1 + 2^-23;
    rounded to double first (1 + 2^-24, a midpoint) and then to float, 1. Likewise in float's subnormal range.
    The portable x86-64 build emulates fma with doubles and must detect exactly these; the others fuse in
    hardware."""
    ks = _runnable_kernels()
    a, b = np.float32(2.0**-24 * (1 + 2.0**-12)), np.float32(1 - 2.0**-12 + 2.0**-24)
    assert Fraction(float(a)) * Fraction(float(b)) == Fraction(2) ** -24 * (1 + Fraction(2) ** -36)  # exact
    cases = [  # (x0, w0, x1, w1): the exact value is x0*w0 + x1*w1, summed in that order
        (1.0, 1.0, a, b),
        (-1.0, 1.0, -a, b),
        (1.0, 1.0, -a, b),
        # subnormal: 2^-127 + 2^-150 + 2^-184 rounds (in double) to 2^-127 + 2^-150, a midpoint of float's
        # subnormal grid (multiples of 2^-149), then to even 2^-127; once: 2^-127 + 2^-149
        (2.0**-63, 2.0**-64, 4765 * 2.0**-100, 3605429 * 2.0**-84),
        (-(2.0**-63), 2.0**-64, -4765 * 2.0**-100, 3605429 * 2.0**-84),
    ]
    x = np.array([[c[0], c[2]] for c in cases], np.float32)  # (cases, K=2)
    w = np.array([[c[1], c[3]] for c in cases], np.float32)  # one output column per case
    q = [[Fraction(float(v)) for v in row] for row in np.stack([x[:, 0], w[:, 0], x[:, 1], w[:, 1]], axis=1)]
    # the kernel's chain: acc = fma(x0, w0, 0) = RN(x0 w0), then y = fma(x1, w1, acc) = RN(x1 w1 + acc)
    want = np.array([_round_f32(x1 * w1 + Fraction(float(_round_f32(x0 * w0)))) for x0, w0, x1, w1 in q], np.float32)
    assert want[0] == np.float32(1 + 2.0**-23) and want[3] == np.float32(2.0**-127 + 2.0**-149)
    for isa, kern in ks.items():
        for i in range(len(cases)):
            panels = pack_panels(w[i : i + 1])
            out = np.empty((1, 16), np.float32)
            kern.linear(x[i : i + 1], panels, out)
            assert out[0, 0].view(np.uint32) == want[i].view(np.uint32), (isa, i, out[0, 0], want[i])
