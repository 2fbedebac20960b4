"""Model paths for TGT-GENERATE: a small model decoding with a target's cache, and the same model recomputing.

A target's cache is run by a real model, the way its own engine runs it:

    impl-store     impl's own targets (a handle over impl stores): impl's numpy
                   runtime (``impl.model.session.Session``, a ``Llama.random``
                   of :data:`IMPL_CONFIG`) over the handle's very store
    impl-protocol  any other target that is not a library's (the reference, a
                   project's own, whatever its ``own`` says): impl's runtime over :class:`ProtocolStore`,
                   one one-layer handle per model layer driven by ``append``
                   only (what attention reads is the ``Visible`` it returns)
    torch          transformers' targets: transformers' own ``LlamaForCausalLM``
                   (``MistralForCausalLM`` with ``sliding_window`` for a sliding
                   target) of :data:`TORCH_CONFIG`, seeded, float32, CPU, with the
                   target's ``Cache`` passed as ``cache=`` (``past_key_values=`` is
                   deprecated in the transformers this binds to)

The answer a decode is compared with is the same model recomputing the whole
sequence in one forward without the target: impl's runtime over a fresh
:class:`ProtocolStore` of the list-of-rows ``reference`` target (for a lossy
impl target, a fresh cache of the same target: see :func:`recompute_through`);
transformers' model with ``use_cache=False``.

How close the two must be (:func:`logit_tolerance`): impl's runtime gives a
position's logits the same bits however many rows a forward computes (KV-T4),
so an exact target's decode equals the recompute bit for bit; torch's matmul
and SDPA are not row-count invariant (a one-row decode and a many-row
recompute reduce in different orders and blockings), so the torch path
allows :data:`TORCH_RTOL` of the largest recomputed logit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from harness.errors import NotCapable
from harness.targets.logitbound import Reads
from harness.targets.own import TARGETS as OWN_TARGETS
from harness.targets.own import StoresHandle, from_store_rows
from harness.targets.protocol import Geometry, Target
from impl.cache import KVGeometry

REFERENCE = OWN_TARGETS["reference"]

# impl's path: a 2-layer grouped-query llama (impl.model.config.ModelConfig fields), random weights
IMPL_CONFIG = dict(n_layers=2, hidden=32, n_heads=4, n_kv_heads=2, head_dim=8, ffn=64, vocab=64, max_pos=64)
IMPL_SEED = 0
# transformers' path: the same shape in LlamaConfig's words; initializer_range 0.2 so logits span a few units
TORCH_CONFIG = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    initializer_range=0.2,
    tie_word_embeddings=False,
)
TORCH_SEED = 0
VOCAB = 64

TORCH_RTOL = 2.0**-14  # of max(1, max |recomputed logit|): see TORCH_REASON
TORCH_REASON = (
    "torch's CPU matmul and SDPA are not row-count invariant: a one-row decode and a many-row recompute "
    "sum in different orders and blockings, so logits differ in the last float32 bits (eps 2**-23); over "
    "1200 random decodes of this model (|logits| up to 5, 4 targets) the worst |decode - recompute| was "
    "2.7e-6 = 2**-18.5 of the largest logit, so the bound is 2**-14 (6.1e-5) of it, 22x that; one cached V "
    "row replaced by its neighbour's moved the logits by at least 1.7e-2 of it (100 tries)"
)
EXACT_REASON = (
    "impl's runtime is row-count invariant (KV-T4: a position's logits are the same bits for any chunking), "
    "so an exact cache gives the recompute's bits"
)


@dataclass(frozen=True)
class Tolerance:
    """|decode - recompute| <= rtol * max(1, max |recompute|), for ``reason``; rtol 0 is bit for bit."""

    rtol: float
    reason: str

    def bound(self, ref: np.ndarray) -> float:
        return self.rtol * max(1.0, float(np.abs(ref).max()))


def impl_design(target: Target) -> bool:
    """One of impl's own designs: a handle over impl stores that impl's runtime can run directly.

    Not the reference, and not a project's target that says ``own=True``: ``own`` means "part of the default
    selection, it gates" (docs/prove-your-own-cache.md), not "built on impl's stores" (sending such a target
    down the impl-store path failed a correct cache: issue 37).
    """
    return target.name != REFERENCE.name and OWN_TARGETS.get(target.name) == target


def derives_bound(target: Target) -> bool:
    """A target whose reads are not exact and whose decode is judged by TGT-LOSSY's logit bound derived from its
    own (harness/targets/logitbound.py), not by a fixed tolerance: every lossy or tolerance target but impl's own
    int8 ring (whose recompute through a fresh int8 ring is bit for bit: see :func:`recompute_through`)."""
    kind = target.numerics.kind
    return kind != "exact" and not (impl_design(target) and kind == "lossy")


def path_of(target: Target) -> str:
    """Which model runs this target's cache: "impl-store", "impl-protocol" or "torch".

    A target that is not exact runs on impl's runtime over :class:`ProtocolStore` (a transformers one too): the
    logit bound TGT-LOSSY derives from its per-element bound is computed through impl's model, not torch's."""
    if derives_bound(target):
        return "impl-protocol"
    if target.distribution == "transformers":
        return "torch"
    if impl_design(target):
        return "impl-store"
    return "impl-protocol"


def logit_tolerance(target: Target) -> Tolerance:
    """The bound of this target's decode against the recompute; NotCapable when the card states none for it."""
    path = path_of(target)
    kind = target.numerics.kind
    if path == "torch":
        return Tolerance(TORCH_RTOL, TORCH_REASON)
    if kind == "exact":
        return Tolerance(0.0, EXACT_REASON)
    if not derives_bound(target):
        return Tolerance(
            0.0,
            "impl's int8 quantizes each (position, KV head) on its own, so a recompute through a fresh cache of the "
            "same target quantizes the same rows to the same bits; " + EXACT_REASON,
        )
    raise NotCapable(
        f"target {target.name} is {kind}: no fixed logit tolerance holds for it; TGT-LOSSY judges its decode against "
        "the logit bound derived from the per-element bound it states"
    )


def recompute_through(target: Target) -> Target:
    """The cache the impl recompute runs over: the reference, or (lossy impl target) the target itself, fresh."""
    return target if impl_design(target) and target.numerics.kind == "lossy" else REFERENCE


# ---------------------------------------------------------------- impl's runtime


class ProtocolStore:
    """An ``impl.cache.KVStore`` over one one-layer handle of ``target`` per model layer.

    ``write(layer, ...)`` appends that layer's rows (``append``); ``view(layer, hi)``
    gives rows [base, hi) of what that append handed attention (its ``Visible``),
    base being the first visible position. Positions are 0..len-1 (nothing is evicted).
    """

    def __init__(self, target: Target, geometry: KVGeometry, window: int | None, capacity: int) -> None:
        self.geometry = geometry
        one = Geometry(1, geometry.n_kv_heads, geometry.head_dim)
        self.handles = [target.make(one, 1, window, capacity) for _ in range(geometry.n_layers)]
        self.seen: list[tuple[np.ndarray, np.ndarray, int]] = [None] * geometry.n_layers  # type: ignore[list-item]
        self.n = 0

    def __len__(self) -> int:
        return self.n

    @property
    def pos(self) -> np.ndarray:
        return np.arange(self.n, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return 0

    def reserve(self, t: int) -> np.ndarray:
        self.n += t
        return np.arange(self.n - t, self.n, dtype=np.int64)

    def write(self, layer: int, start: int, k_raw: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        h, d = self.geometry.n_kv_heads, self.geometry.head_dim
        h_ = self.handles[layer]
        if len(h_) != start:
            raise AssertionError(f"write(layer={layer}, start={start}) to a handle of length {len(h_)}")
        kk = from_store_rows(np.asarray(k, np.float32), h, d)[None, None]  # (1, 1, H, T, D)
        vv = from_store_rows(np.asarray(v, np.float32), h, d)[None, None]
        vis = h_.append(kk, vv)
        # one one-layer handle of batch 1: (1, 1, H, m, D) -> (m, H * D); any other shape fails the reshape
        rows = lambda a: np.ascontiguousarray(a.reshape(a.shape[2:]).transpose(1, 0, 2).reshape(a.shape[3], h * d))  # noqa: E731
        self.seen[layer] = (rows(vis.k), rows(vis.v), int(vis.positions[0]) if len(vis.positions) else 0)

    def view(self, layer: int, hi: int) -> tuple[np.ndarray, np.ndarray, int]:
        k, v, base = self.seen[layer]
        if base > hi - 1:
            raise AssertionError(
                f"layer {layer}: the last append handed attention rows from position {base} on, but a query at "
                f"position {hi - 1} reads its own row and those before it"
            )
        if len(k) < hi - base or len(v) < hi - base:
            raise AssertionError(
                f"layer {layer}: the last append handed attention {min(len(k), len(v))} rows from position {base} "
                f"on, but its queries read up to position {hi - 1}"
            )
        return k[: hi - base], v[: hi - base], base

    def truncate(self, n: int) -> None:
        for h_ in self.handles:
            h_.truncate(n)
        self.n = n

    def clone(self):
        raise NotCapable("ProtocolStore.clone: TGT-GENERATE does not fork")


class RecordingStore(ProtocolStore):
    """A :class:`ProtocolStore` that also records, per layer and append, the rows written and what attention was
    handed, with the bound the target states for each (``reads``: :class:`harness.targets.logitbound.Reads`):
    what TGT-LOSSY's checks read."""

    def __init__(self, target: Target, geometry: KVGeometry, window: int | None, capacity: int) -> None:
        super().__init__(target, geometry, window, capacity)
        self.numerics = target.numerics
        self.reads = [Reads() for _ in range(geometry.n_layers)]
        self.chunks: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(geometry.n_layers)]

    def write(self, layer: int, start: int, k_raw: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        h, d = self.geometry.n_kv_heads, self.geometry.head_dim
        # what is written, taken before the target sees it (it may change the arrays it is given)
        kk = from_store_rows(np.asarray(k, np.float32), h, d)[None, None]
        vv = from_store_rows(np.asarray(v, np.float32), h, d)[None, None]
        self.chunks[layer].append((kk, vv))
        super().write(layer, start, k_raw, k, v)
        self._record(layer, start)

    def _record(self, layer: int, start: int) -> None:
        """Keep the chunk, the rows this append handed attention (positions base..start+t-1) and the bound the
        target states on each: the rows written there, judged with the handle's first chunk and every chunk so far
        (``Numerics.allowed``)."""
        h, d = self.geometry.n_kv_heads, self.geometry.head_dim
        chunks = self.chunks[layer]  # this append's chunk is the last (copied in write, before the append)
        kk, vv = chunks[-1]
        t = kk.shape[3]
        k_seen, v_seen, base = self.seen[layer]
        if base > start + t - 1:
            return  # none of this append's own rows handed over: view() fails the decode, naming it
        held_k = np.concatenate([c[0] for c in chunks], axis=3)[:, :, :, base : start + t]
        held_v = np.concatenate([c[1] for c in chunks], axis=3)[:, :, :, base : start + t]
        ek = self.numerics.allowed(chunks[0][0], held_k, [c[0] for c in chunks])
        ev = self.numerics.allowed(chunks[0][1], held_v, [c[1] for c in chunks])
        flat = lambda a: np.asarray(a[0, 0], np.float64).transpose(1, 0, 2).reshape(a.shape[3], h * d)  # noqa: E731
        n = ek.shape[3]  # the rows held at base..start+t-1: what attention reads of what this append handed over
        self.reads[layer].appends.append((start, t, base, k_seen[:n].copy(), v_seen[:n].copy(), flat(ek), flat(ev)))
        self.reads[layer].written_k.append(flat(kk))
        self.reads[layer].written_v.append(flat(vv))


@contextmanager
def one_thread() -> Iterator[None]:
    """impl's kernels on one thread (then as before): at this size thread start-up is all the time a call takes,
    and a result's bits never depend on the threads (KERNEL-ACC, KV-T4)."""
    from impl import kernels

    kern = kernels.load()
    before = kern.default_threads(1) if kern is not None else 0
    try:
        yield
    finally:
        if kern is not None:
            kern.default_threads(before)


@lru_cache(maxsize=1)
def impl_model():
    from impl.model.config import ModelConfig
    from impl.model.llama import Llama

    return Llama.random(ModelConfig(**IMPL_CONFIG), seed=IMPL_SEED)


def impl_geometry() -> Geometry:
    c = IMPL_CONFIG
    return Geometry(c["n_layers"], c["n_kv_heads"], c["head_dim"])


def impl_decode(target: Target, prompt: list[int], chunks: list[int], steps: int, window: int | None):
    """Prefill ``prompt`` in ``chunks`` through the target's cache, then ``steps`` greedy tokens
    (:func:`decode_over` the target's own store on the impl-store path, else a :class:`ProtocolStore`).

    Returns (tokens, logits): every token fed (prompt then generated) and the
    logits (len(prompt) + steps, vocab) the session computed for each position.
    """
    cap = len(prompt) + steps
    if path_of(target) == "impl-store":
        h = target.make(impl_geometry(), 1, window, cap)
        assert isinstance(h, StoresHandle), type(h)
        store = h.stores[0]  # impl's own store: the model runs the very cache the target is
    else:
        store = ProtocolStore(target, impl_model().config.kv_geometry, window, cap)
    return decode_over(store, prompt, chunks, steps, window)


def recorded_decode(target: Target, prompt: list[int], chunks: list[int], steps: int, window: int | None):
    """:func:`decode_over` a :class:`RecordingStore` of ``target`` (over its verbs, whatever its path): (tokens,
    logits, the store's per-layer :class:`Reads`)."""
    store = RecordingStore(target, impl_model().config.kv_geometry, window, len(prompt) + steps)
    toks, logits = decode_over(store, prompt, chunks, steps, window)
    return toks, logits, store.reads


def decode_over(store, prompt: list[int], chunks: list[int], steps: int, window: int | None):
    """impl's model over ``store`` (an ``impl.cache.KVStore``): ``prompt`` prefilled in ``chunks``, then ``steps``
    greedy tokens; (tokens, logits) as :func:`impl_decode` returns them."""
    from impl.model.session import Session

    s = Session(impl_model(), window=window, cache=store)
    out, at = [], 0
    toks = list(prompt)
    with one_thread():
        for t in chunks:
            out.append(s.prefill(prompt[at : at + t]))
            at += t
        for _ in range(steps):
            tok = int(np.argmax(s.last_logits))
            toks.append(tok)
            out.append(s.step(tok)[None])
    return toks, np.concatenate(out)[: len(toks)]


def impl_recompute(target: Target, tokens: list[int], window: int | None, through: Target | None = None) -> np.ndarray:
    """Logits (len(tokens), vocab) of the whole sequence in one forward over a fresh cache (``through``, else
    :func:`recompute_through`)."""
    from impl.model.session import Session

    model = impl_model()
    store = ProtocolStore(through or recompute_through(target), model.config.kv_geometry, window, len(tokens))
    with one_thread():
        return Session(model, window=window, cache=store).prefill(tokens)


# ---------------------------------------------------------------- transformers' model


@lru_cache(maxsize=8)
def torch_model(window: int | None):
    """LlamaForCausalLM of TORCH_CONFIG (MistralForCausalLM with ``sliding_window=window``), seeded, eval."""
    import torch
    import transformers

    if window is None:
        config, cls = transformers.LlamaConfig(**TORCH_CONFIG), transformers.LlamaForCausalLM
    else:
        config, cls = transformers.MistralConfig(sliding_window=window, **TORCH_CONFIG), transformers.MistralForCausalLM
    torch.manual_seed(TORCH_SEED)
    return cls(config).eval()


@contextmanager
def torch_one_thread() -> Iterator[None]:
    """torch on one thread (then as before): at this size thread start-up dominates; the decode and the
    recompute of one example run on the same thread count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def torch_decode(target: Target, prompt: list[int], chunks: list[int], steps: int, window: int | None):
    """As :func:`impl_decode`, with transformers' model and the target's ``Cache`` as ``cache=``; also the
    window the model was built with (a sliding target's, widened as its adapter builds it when None)."""
    import torch

    cap = len(prompt) + steps
    h = target.make(impl_geometry(), 1, window, cap)
    built = h.spec.window_for(window, cap)
    model = torch_model(built)
    out, at = [], 0
    with torch.no_grad(), torch_one_thread():
        for t in chunks:
            ids = torch.tensor([prompt[at : at + t]])
            out.append(model(input_ids=ids, cache=h.cache, use_cache=True).logits[0].numpy().copy())
            at += t
        toks = list(prompt)
        for _ in range(steps):
            tok = int(np.argmax(out[-1][-1]))
            toks.append(tok)
            out.append(model(input_ids=torch.tensor([[tok]]), cache=h.cache, use_cache=True).logits[0].numpy().copy())
    return toks, np.concatenate(out)[: len(toks)], built


def torch_recompute(tokens: list[int], built: int | None) -> np.ndarray:
    """Logits of the whole sequence in one forward, no cache (``use_cache=False``), same model."""
    import torch

    with torch.no_grad(), torch_one_thread():
        return torch_model(built)(input_ids=torch.tensor([tokens]), use_cache=False).logits[0].numpy().copy()
