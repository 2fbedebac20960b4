"""Compiled kernels with one per-element summation order for any row count.

NOTE: why this module exists. BLAS rounds a one-row product (gemv) and a
many-row product (gemm) differently, so a position's bits would depend on
how its tokens were fed (KV-T4). The C kernel (``impl/kernels.c``) computes every output
element of ``x @ W`` in one fixed order (k-blocks of 64, one FMA per step
inside a block, block sums added left to right), whether the call has one
row (decode: each weight panel streamed once) or hundreds (prefill: the
rows packed 6 at a time, register tiles of 6 rows x 16 columns, 2 panels
on AVX-512, work items of 24 rows x 4 panels handed to whichever thread
is free). Same order, same bits, by construction; ``tests/impl/test_linear.py``
and KV-T4 check it. ``kv_silu`` (:meth:`Kernel.silu`) is the SwiGLU gate
with the kernel's own exp, element by element.
Another entry, ``kv_linear_q`` (:meth:`Kernel.linear_q`), computes one row
straight from GGUF Q4_1/Q8_0 blocks (decode, via impl.model.gguf_quant):
each weight with gguf.quants' own float32 operations, then the same
order, so the same bits as ``kv_linear`` on the dequantized weights
(``tests/impl/test_quant_decode.py``).

The kernel is compiled on first use with the machine's C compiler
(``cc -O3 <ISA flags> -ffp-contract=off -fopenmp``) into
``<checkout>/.cache/kernels/`` (``KVPROOF_KERNEL_CACHE``), keyed by the
source, the flags, the compiler and the CPU, so later processes only
``dlopen`` it (about a millisecond). Threads: OpenMP's, so
``OMP_NUM_THREADS`` applies (the harness sets it to 1 under ``-j N``).

ISA builds (``KVPROOF_KERNEL_ISA``, :data:`ISA_BUILDS`): ``auto`` (default)
is ``-march=native``, the best this CPU runs; ``avx512`` and ``avx2`` name
exactly the instruction-set extensions they may use; ``portable`` is the
architecture's baseline (``-march=x86-64``: SSE2, no FMA; elsewhere the
compiler's default), so the kernel's generic vector code compiles.
Each build has its own file in the cache. A build whose extensions this CPU
lacks is refused (:class:`~impl.errors.SettingError`) before anything is
compiled or loaded, never run into SIGILL; :func:`runnable_isas` lists the
builds this CPU can run. The bits of the linear products, the quantized
decode (one FMA per step in one order), exp and silu (one formula per
element) do not depend on the build; rmsnorm, softmax and attention sum in
vector lanes, so theirs do.

``KVPROOF_KERNEL=numpy`` (or no working compiler) selects the fallback:
numpy's gemv for every row (``impl.linear``), invariant too but slower for
prefills. Both are reported by :func:`impl.linear.numerics_path`.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from impl.errors import SettingError, SettingUnavailable, setting

QTYPES = {"Q4_1": 2, "Q8_0": 8}  # GGUF block types kv_linear_q decodes (ggml type ids), 32 values a block
QBLOCK_BYTES = {"Q4_1": 20, "Q8_0": 34}
NR = 16  # panel width in floats: the packed weight is (P, K, NR)
ENV_CHOICE = "KVPROOF_KERNEL"  # "auto" (default), "c", or "numpy"
ENV_CACHE = "KVPROOF_KERNEL_CACHE"
ENV_ISA = "KVPROOF_KERNEL_ISA"  # "auto" (default: -march=native), or one of ISA_BUILDS
BASE_FLAGS = ("-O3", "-ffp-contract=off", "-fopenmp", "-fPIC", "-shared", "-std=gnu11")


@dataclass(frozen=True)
class IsaBuild:
    """One way to compile kernels.c: the compiler flags, and the CPU features (``/proc/cpuinfo`` flag names)
    an instruction of that build may need. ``needs=None``: whatever this CPU has (``-march=native``)."""

    flags: tuple[str, ...]
    needs: tuple[str, ...] | None


# best first; "auto" is this CPU's own best. The flags name exactly the extensions the kernel uses (not
# -march=x86-64-v4, which also lets the compiler emit BMI/MOVBE/LZCNT: more to check, nothing gained).
ISA_BUILDS = {
    "auto": IsaBuild(("-march=native",), None),
    "avx512": IsaBuild(
        ("-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl"),
        ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl"),
    ),
    "avx2": IsaBuild(("-mavx2", "-mfma", "-mf16c"), ("avx", "avx2", "fma", "f16c")),
    # x86-64's own baseline (SSE2), whatever default -march the compiler was configured with; elsewhere its default
    "portable": IsaBuild(("-march=x86-64", "-mtune=generic") if platform.machine() in ("x86_64", "AMD64") else (), ()),
}

C_SOURCE = Path(__file__).with_name("kernels.c").read_text(encoding="utf-8")  # the kernels, in C


class Kernel:
    """The loaded shared library, with typed entry points.

    ``build``: the :data:`ISA_BUILDS` name it was compiled as; ``isa``: what its vector code is
    (``avx512f``, ``avx2+fma``, ``generic-fma-sse2`` or ``generic-fmaf``, from the library itself);
    ``q_isa``: the same for the quantized decode (``scalar``: no vector block decoder in this build,
    see :attr:`q_vector`).
    """

    def __init__(self, path: Path, build: str = "auto") -> None:
        lib = self.lib = ctypes.CDLL(str(path))
        self.path = path
        self.build = build
        self._linear = lib.kv_linear
        self._linear.argtypes = [
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_long,
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_long,
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_int,
        ]
        self._linear.restype = ctypes.c_int
        self._attend = lib.kv_attend
        self._attend.argtypes = [
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_float,
            ctypes.c_void_p,
            ctypes.c_int,
        ]
        self._attend.restype = None
        self._silu = lib.kv_silu
        self._silu.argtypes = [
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_long,
            ctypes.c_long,
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_int,
        ]
        self._silu.restype = None
        self._rmsnorm = lib.kv_rmsnorm
        self._rmsnorm.argtypes = [
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_long,
            ctypes.c_long,
            ctypes.c_void_p,
            ctypes.c_float,
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_int,
        ]
        self._rmsnorm.restype = None
        self._rope = lib.kv_rope
        self._rope.argtypes = [
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_long,
            ctypes.c_long,
            ctypes.c_long,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
        ]
        self._rope.restype = None
        lib.kv_isa.restype = ctypes.c_char_p
        self.isa = lib.kv_isa().decode()
        self._linear_q = lib.kv_linear_q
        self._linear_q.argtypes = [
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_void_p,
            ctypes.c_long,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
        ]
        self._linear_q.restype = ctypes.c_int
        lib.kv_q_isa.restype = ctypes.c_char_p
        self.q_isa = lib.kv_q_isa().decode()
        self.vl = int(lib.kv_vl())  # floats per vector register in this build: 16, 8 or 4
        self._exp = lib.kv_exp
        self._exp.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p]
        self._exp.restype = None
        self._default_threads = lib.kv_default_threads
        self._default_threads.argtypes = [ctypes.c_int]
        self._default_threads.restype = ctypes.c_int
        self._lib = lib

    @property
    def q_vector(self) -> bool:
        """Whether :meth:`linear_q` has vector code in this build; the scalar loop (portable builds) is slower
        than the float32 panels, so ``KVPROOF_DECODE=auto`` then decodes from those (the same bits)."""
        return self.q_isa != "scalar"

    def describe(self) -> str:
        """``avx512f (build avx512: -mavx2 ...)``: the vector code and the build's flags, for numerics lines."""
        flags = " ".join(ISA_BUILDS[self.build].flags) or "no -m flags"
        return f"{self.isa} (build {self.build}: {flags})"

    def default_threads(self, n: int = 0) -> int:
        """Set the thread count of every call made with ``threads=0`` from this Python thread (what impl's own
        callers pass; OpenMP's nthreads-var, initially OMP_NUM_THREADS); ``n <= 0`` only reads it. Returns
        the count in force before. Threads never change a result's bits (KV-T4, KERNEL-ACC)."""
        return int(self._default_threads(int(n)))

    def exp(self, x: np.ndarray) -> np.ndarray:
        """exp(x) element by element by the kernel's own exp (the one softmax and silu use; kernels.c ``kv_exp``):
        x float32, every element <= 0 (its domain: softmax arguments, -|g| in silu); exactly 1 at 0 and 0
        below -87. Returns float32 of x's shape. Raises ValueError for an element > 0 or NaN."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.size and not (x <= 0).all():
            raise ValueError(f"Kernel.exp takes x <= 0 only (softmax arguments): got max(x)={float(np.max(x))}")
        out = np.empty_like(x)
        self._exp(x.ctypes.data, x.size, out.ctypes.data)
        return out

    def linear(self, x: np.ndarray, packed: np.ndarray, out: np.ndarray, threads: int = 0) -> None:
        """out[:, :P*NR] = x @ W for W packed as (P, K, NR); x (T, K) and out (T, >= P*NR) float32, rows contiguous."""
        t, k = x.shape
        p = packed.shape[0]
        assert packed.shape == (p, k, NR) and packed.dtype == np.float32 and packed.flags.c_contiguous
        assert x.dtype == np.float32 and x.strides[1] == 4 and out.dtype == np.float32 and out.strides[1] == 4
        assert out.shape[0] == t and out.shape[1] >= p * NR
        rc = self._linear(
            x.ctypes.data, t, x.strides[0] // 4, packed.ctypes.data, k, p, out.ctypes.data, out.strides[0] // 4, threads
        )
        if rc != 0:
            raise MemoryError(f"kv_linear: no memory for the packed copy of {t} x {k} rows")

    def silu(self, g: np.ndarray, u: np.ndarray | None = None, threads: int = 0) -> np.ndarray:
        """silu(g), times u when given, element by element (kernels.c ``kv_silu``); g, u (T, F) float32.

        An element's bits depend on its own g (and u) only, never on the shape or the threads.
        """
        g2 = g.reshape(1, -1) if g.ndim == 1 else g
        assert g2.ndim == 2 and g2.dtype == np.float32 and g2.strides[1] == 4, (g.shape, g.dtype, g.strides)
        ldu = 0
        if u is not None:
            u2 = u.reshape(1, -1) if u.ndim == 1 else u
            assert u2.shape == g2.shape and u2.dtype == np.float32 and u2.strides[1] == 4
            ldu = u2.strides[0] // 4
        out = np.empty(g2.shape, dtype=np.float32)
        t, f = g2.shape
        self._silu(
            g2.ctypes.data,
            g2.strides[0] // 4,
            None if u is None else u2.ctypes.data,
            ldu,
            t,
            f,
            out.ctypes.data,
            f,
            threads,
        )
        return out.reshape(g.shape)

    def rmsnorm(self, x: np.ndarray, weight: np.ndarray, eps: float, threads: int = 0) -> np.ndarray:
        """x / sqrt(mean(x^2) + eps) * weight per row of x (T, H) float32 (kernels.c ``kv_rmsnorm``)."""
        t, h = x.shape
        assert x.dtype == np.float32 and x.strides[1] == 4 and weight.shape == (h,)
        w = np.ascontiguousarray(weight, dtype=np.float32)
        out = np.empty((t, h), dtype=np.float32)
        self._rmsnorm(x.ctypes.data, x.strides[0] // 4, t, h, w.ctypes.data, eps, out.ctypes.data, h, threads)
        return out

    def rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pos: np.ndarray, threads: int = 0) -> np.ndarray:
        """Rotate x (T, H, D) by table rows ``cos[pos]``, ``sin[pos]`` (tables (P, D) float32, pos (T,) in range);
        the bits of impl.rope.apply_rope (kernels.c ``kv_rope``). Returns (T, H, D) float32."""
        t, h, d = x.shape
        assert x.dtype == np.float32 and x.strides[2] == 4 and x.strides[1] == 4 * d and d % 2 == 0
        assert cos.shape == sin.shape and cos.shape[1] == d and cos.flags.c_contiguous and sin.flags.c_contiguous
        pos = np.ascontiguousarray(pos, dtype=np.int64)
        assert pos.shape == (t,)
        out = np.empty((t, h, d), dtype=np.float32)
        self._rope(
            x.ctypes.data,
            x.strides[0] // 4,
            t,
            h,
            d,
            cos.ctypes.data,
            sin.ctypes.data,
            pos.ctypes.data,
            out.ctypes.data,
            threads,
        )
        return out

    def linear_q(
        self, x: np.ndarray, rows: np.ndarray, qtype: int, out: np.ndarray, threads: int = 0, reference: bool = False
    ) -> None:
        """out[c] = x @ W[c, :] for one row x (K,), W's row c being K/32 GGUF blocks at address ``rows[c]``.

        ``qtype`` is the ggml type id (QTYPES); the result has the bits of :meth:`linear` on the
        float32 weights ``gguf.quants.dequantize`` gives for those blocks. ``reference``: the
        scalar loop (for tests). The caller keeps the memory the addresses point into alive.
        """
        (k,) = x.shape
        assert x.dtype == np.float32 and x.flags.c_contiguous and out.dtype == np.float32 and out.flags.c_contiguous
        assert rows.dtype == np.uintp and rows.flags.c_contiguous and out.shape == rows.shape
        assert qtype in QTYPES.values() and k % 32 == 0
        rc = self._linear_q(
            x.ctypes.data, k, rows.ctypes.data, rows.shape[0], qtype, out.ctypes.data, threads, int(reference)
        )
        assert rc == 0, rc

    def attend(
        self,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        scale: float,
        threads: int = 0,
    ) -> np.ndarray:
        """Causal attention for T queries over rows of one K/V view; returns (T, Hkv * G * D) float32.

        q (T, Hkv, G, D); k, v (n, Hkv * D) with unit column stride (rows may be strided);
        query i attends rows [lo[i], hi[i]) of k and v, 0 <= lo[i] < hi[i] <= n.
        """
        t, hkv, g, d = q.shape
        q = np.ascontiguousarray(q, dtype=np.float32)
        assert k.shape == v.shape and k.shape[1] == hkv * d and k.dtype == v.dtype == np.float32
        if k.strides[1] != 4 or v.strides[1] != 4 or k.strides[0] != v.strides[0]:
            k, v = np.ascontiguousarray(k), np.ascontiguousarray(v)
        lo = np.ascontiguousarray(lo, dtype=np.int64)
        hi = np.ascontiguousarray(hi, dtype=np.int64)
        assert lo.shape == hi.shape == (t,) and (
            t == 0 or (lo.min() >= 0 and (hi > lo).all() and hi.max() <= k.shape[0])
        )
        out = np.empty((t, hkv * g * d), dtype=np.float32)
        self._attend(
            q.ctypes.data,
            t,
            hkv,
            g,
            d,
            k.ctypes.data,
            v.ctypes.data,
            k.strides[0] // 4,
            lo.ctypes.data,
            hi.ctypes.data,
            scale,
            out.ctypes.data,
            threads,
        )
        return out


def cache_dir() -> Path:
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / ".cache" / "kernels"


def _cpu_signature() -> str:
    """What -march=native depends on: the CPU's model name and flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        keep = [ln for ln in text.splitlines() if ln.split(":")[0].strip() in ("model name", "flags", "Features")]
        return "\n".join(sorted(set(keep)))
    except OSError:
        return platform.processor() + platform.machine()


def cpu_features() -> frozenset[str] | None:
    """The CPU feature flags the OS reports (``/proc/cpuinfo``'s ``flags``, as Linux names them: ``avx2``,
    ``avx512f``, ...): only those every listed processor has. None when the OS does not say (no
    /proc/cpuinfo, or no x86 ``flags`` line)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    sets = [frozenset(ln.split(":", 1)[1].split()) for ln in text.splitlines() if ln.split(":")[0].strip() == "flags"]
    return frozenset.intersection(*sets) if sets else None


def isa_refusal(isa: str) -> str:
    """Why this CPU cannot run the ISA build ``isa`` ('' when it can). Raises KeyError for an unknown name."""
    needs = ISA_BUILDS[isa].needs
    if not needs:
        return ""
    have = cpu_features()
    if have is None:
        return f"this OS does not report the CPU's features (no x86 flags in /proc/cpuinfo), needed: {' '.join(needs)}"
    missing = [f for f in needs if f not in have]
    return f"this CPU lacks {' '.join(missing)}" if missing else ""


def runnable_isas() -> tuple[str, ...]:
    """The explicit ISA builds (avx512, avx2, portable: best first, never ``auto``) this CPU can execute:
    the values of KVPROOF_KERNEL_ISA a configuration matrix can run here. ``portable`` always."""
    return tuple(name for name in ISA_BUILDS if name != "auto" and not isa_refusal(name))


def isa_choice() -> str:
    """The validated value of KVPROOF_KERNEL_ISA ("auto" when unset); SettingError naming the allowed values."""
    return setting(
        ENV_ISA,
        tuple(ISA_BUILDS),
        "a kernel ISA build",
        "auto = -march=native; avx512, avx2 = those extensions only; portable = the architecture's baseline",
    )


def checked_isa(isa: str | None = None) -> str:
    """``isa`` (default: the KVPROOF_KERNEL_ISA setting) when this CPU can execute that build; else a
    SettingError naming the setting, the value, what is missing and the builds that would run."""
    isa = isa_choice() if isa is None else isa
    why = isa_refusal(isa)
    if why:
        raise SettingUnavailable(
            f"{ENV_ISA}={isa!r} is a build this CPU cannot execute ({why}): use one of "
            f"{', '.join(('auto', *runnable_isas()))}, or unset it"
        )
    return isa


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def _compiler_id(cc: str) -> str:
    exe = Path(shutil.which(cc)).resolve()  # type: ignore[arg-type]
    st = exe.stat()
    return f"{exe}:{st.st_size}:{st.st_mtime_ns}"  # a new compiler rebuilds; no subprocess per process


def build(force: bool = False, isa: str | None = None) -> Path:
    """Compile (or find the cached) shared library of the ISA build ``isa`` (default: KVPROOF_KERNEL_ISA);
    returns its path. SettingError for a build this CPU cannot execute; OSError/RuntimeError when it
    cannot be compiled."""
    return _build(C_SOURCE, cache_dir(), force, isa, prune=True)


VARIANTS = "variants"  # the cache's folder of changed sources' builds (build_source)
VARIANTS_KEEP_S = 7 * 24 * 3600  # a variant build not used for this long is removed by the next build_source


def build_source(text: str, isa: str | None = None) -> Path:
    """Compile a changed copy of kernels.c (``text``: a C mutant, :mod:`harness.mutation.cbuild`) exactly as the
    kernel of ISA build ``isa`` (default: KVPROOF_KERNEL_ISA) is compiled, into the cache's ``variants/``
    folder keyed by the text; returns its path. RuntimeError with the compiler's message when it does not
    compile: never a fallback. The same text always gives the same bytes (the compiler reads it as
    ``kvkernel.c`` from its own folder), so a change the compiler optimises away gives the original's file."""
    folder = cache_dir() / VARIANTS
    so = _build(text, folder, False, isa, prune=False)
    now = time.time()
    os.utime(so, (now, so.stat().st_mtime))
    for old in folder.glob("kvkernel-*.so"):
        try:
            if now - old.stat().st_atime > VARIANTS_KEEP_S:
                old.unlink()
        except OSError:
            continue
    return so


def preprocess_source(text: str, isa: str | None = None) -> str:
    """``text`` (a copy of kernels.c) after the C preprocessor, with exactly the flags of ISA build ``isa``:
    what that build compiles (:mod:`harness.mutation.cbuild` asks which mutants are in it)."""
    isa = checked_isa(isa)
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
    flags = [f for f in (*BASE_FLAGS, *ISA_BUILDS[isa].flags) if f != "-shared"]
    cmd = [cc, *flags, "-E", "-P", "-x", "c", "-"]
    r = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"{cc} -E failed: {r.stderr.strip()[:2000]}")
    return r.stdout


def use_source(text: str, switches: Mapping[str, int] | None = None) -> Callable[[], None]:
    """Run this process's kernel from a changed copy of kernels.c (``text``) until the returned ``undo()``.

    ``switches``: int globals of the built library to set once it is loaded (a mutant schema's switch).
    The loaded :class:`Kernel` is rebound in place (every object holding it, e.g. a model's linears,
    calls the changed build). SettingError when the numpy fallback is in force (there is no kernel to
    change: refused, never a silent fallback); RuntimeError when ``text`` does not compile.
    """
    k = load()
    if k is None:
        raise SettingError(f"a changed kernels.c cannot run: the numpy fallback is in force ({status()})")
    path = build_source(text, k.build)
    saved = dict(vars(k))
    k.__init__(path, build=k.build)  # type: ignore[misc]
    for name, value in (switches or {}).items():
        ctypes.c_int.in_dll(k.lib, name).value = value

    def undo() -> None:
        vars(k).clear()
        vars(k).update(saved)

    return undo


def _build(source: str, folder: Path, force: bool, isa: str | None, prune: bool) -> Path:
    isa = checked_isa(isa)
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
    flags = (*BASE_FLAGS, *ISA_BUILDS[isa].flags)
    key = hashlib.sha256("\0".join([source, " ".join(flags), _compiler_id(cc), _cpu_signature()]).encode()).hexdigest()
    so = folder / f"kvkernel-{isa}-{key[:16]}.so"
    if so.exists() and not force:
        return so
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(folder)
    except OSError:  # a read-only checkout: build in the temp folder instead
        folder = Path(tempfile.gettempdir()) / f"kvproof-kernels-{os.getuid()}" / folder.name
        folder.mkdir(parents=True, exist_ok=True)
        so = folder / so.name
        if so.exists() and not force:
            return so
    with open(folder / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent first users (the gate's -j N witnesses) compile once
        if so.exists() and not force:
            return so
        return _compile(cc, flags, so, folder, isa, source, prune)


def _compile(cc: str, flags: tuple[str, ...], so: Path, folder: Path, isa: str, source: str, prune: bool) -> Path:
    with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
        Path(tmp, "kvkernel.c").write_text(source)
        # relative names, from the build folder: the library's bytes depend on the source and flags only
        r = subprocess.run(
            [cc, *flags, "-o", so.name, "kvkernel.c"], cwd=tmp, capture_output=True, text=True, timeout=120
        )
        if r.returncode != 0:
            raise RuntimeError(f"{cc} failed: {r.stderr.strip()[:20000]}")
        os.replace(Path(tmp, so.name), so)  # atomic: concurrent builders each write their own temp file
    if not prune:
        return so
    # older builds of this ISA (other sources or flags), and unnamed ones from before ISA builds; another
    # ISA's build stays (a loaded .so survives unlink anyway)
    others = {f"kvkernel-{name}-" for name in ISA_BUILDS if name != isa}
    for old in folder.glob("kvkernel-*.so"):
        if old != so and not any(old.name.startswith(o) for o in others):
            old.unlink(missing_ok=True)
    return so


_state: dict[str, object] = {}


def load() -> Kernel | None:
    """The kernel, or None when the numpy fallback is in force (see :func:`status`). Cached per process.

    Raises SettingError for an unknown KVPROOF_KERNEL or KVPROOF_KERNEL_ISA, for a KVPROOF_KERNEL_ISA
    build this CPU cannot execute (unless KVPROOF_KERNEL=numpy), and for KVPROOF_KERNEL=c when the
    kernel does not build.
    """
    if "kernel" not in _state:
        choice = setting(
            ENV_CHOICE,
            ("auto", "c", "numpy"),
            "a kernel choice",
            "auto = the C kernel when it builds, else numpy; c = the C kernel or an error",
        )
        isa = isa_choice()  # a typo is an error on either path
        kernel, why = None, ""
        if choice == "numpy":
            why = f"{ENV_CHOICE}=numpy"
        else:
            isa = checked_isa(isa)  # a build this CPU cannot run is an error, never a silent fallback
            try:
                kernel = Kernel(build(isa=isa), build=isa)
            except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as e:
                if choice == "c":
                    raise SettingUnavailable(f"{ENV_CHOICE}=c but the kernel is unavailable: {e}") from e
                why = f"kernel unavailable: {e}"
        _state["kernel"], _state["why"] = kernel, why
    return _state["kernel"]  # type: ignore[return-value]


def status() -> str:
    """Why the fallback is in force ('' when the kernel is loaded)."""
    load()
    return str(_state["why"])
