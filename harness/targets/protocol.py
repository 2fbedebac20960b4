"""The target protocol: what a KV cache declares to be proven, and the verbs a witness drives it with.

One vocabulary for every engine (impl's own designs, transformers' layer
classes, anything later), in the layout transformers uses for a layer:

    rows      (L, B, H, T, D) float32 numpy: L layers, B batch elements, H KV
              heads, T positions, D head_dim (K and V alike). Rows a verb
              returns are the caller's: no later verb changes them (an adapter
              over a cache that hands out views of its storage copies them).
              Rows the caller passes to ``append`` stay the caller's too: the
              caller may overwrite them once the call returns (as an engine
              reuses its scratch buffers), so a handle copies what it keeps
    position  an absolute, 0-based token position (int); positions of rows
              are (n,) int64 ascending, one array for every layer and batch
              element (a handle has one window for all its layers)
    length    ``len(handle)``: positions appended so far minus those dropped,
              i.e. the position the next append starts at (a sliding window
              may hold fewer rows than that; ``read`` says which)

A :class:`Target` declares its name, the distribution and version it binds
to (an upgrade of that distribution makes its results STALE), its
:data:`CAPABILITIES`, its :class:`Numerics` class and the refs into its
source; ``target.make(geometry, batch, window, capacity)`` builds an empty
:class:`Handle`. A verb the target lacks raises :class:`NotCapable`. A
target whose library or backend is missing here is still a target, with
``unavailable`` saying why (a visible "not runnable here", never dropped).

Verbs of a handle (each target's adapter says which library call it is):

    append(k, v) -> Visible   store T positions per layer; returns the rows the
                              cache hands attention for these T queries, with
                              their positions and the mask sizes it declared
                              for them *before* the append (as a model asks)
    read() -> Rows            the rows held, with their positions
    len(handle)               the length (see above)
    truncate(n)               keep positions [0, n)
    fork() -> Handle          an independent copy
    reorder(idx)              batch element i becomes old element idx[i] (beam search)
    select(idx)               keep batch elements idx, in that order
    repeat(r)                 each batch element r times in a row (repeat_interleave)
    mask_sizes(q)             (kv_length, kv_offset): how many key rows the next
                              append of q queries returns, and the position of the first
    window                    the attention window in positions, or None
    occupancy() -> int        storage in use, in the units ``Target.occupancy`` names, by
                              everything this handle's ``make`` created (a block pool
                              its forks share counts once); callable after ``release``
    release()                 this handle is done: it frees what only it held; no verb
                              but ``occupancy`` is called on it afterwards

A target declaring "grow" accepts appends past ``make``'s ``capacity`` (its
storage grows); without it, ``capacity`` is a promise the caller keeps.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from harness.errors import NotCapable

Capability = str  # one of CAPABILITIES

CAPABILITIES = frozenset(
    {
        "append",  # append(k, v)
        "read",  # read() -> Rows
        "truncate",  # truncate(n): keep positions [0, n)
        "fork",  # fork() -> an independent Handle
        "reorder",  # reorder(idx)
        "select",  # select(idx)
        "repeat",  # repeat(r)
        "window",  # a sliding window: positions older than it may be dropped
        "mask",  # mask_sizes(q) -> (kv_length, kv_offset)
        "quantized",  # stores K/V in fewer bits: read-back is within Numerics.bound, not exact
        "grow",  # appends past make()'s capacity are accepted: the storage grows
        "occupancy",  # occupancy() and release(), bounded as Target.occupancy states
        # a block manager (harness.targets.blocks): make() builds a BlockHandle over requests, not rows
        "blocks",  # allocate/table/read/free/num_free/block_ids of requests over a pool of blocks
        "refcount",  # blocks: refcount(b), the live requests holding block b
        "prefix",  # blocks: allocate of a new request may serve leading full blocks from a prefix cache
        "reset",  # blocks: reset() drops the prefix cache, refused while any block is held
        "evict",  # blocks: the handle's policy says which free block is handed out (or evicted) next
        "free-blocks",  # blocks: hold(blocks)/release(blocks) at the pool level, per the handle's release_contract
        # a sequence cache (harness.targets.sequences): make() builds a SeqHandle, a model over cells of sequences
        "sequences",  # decode/rm/cp/keep/pos_min/pos_max/clear over sequence ids and caller-given positions
        "shift",  # sequences: add(seq, p0, p1, delta) moves positions (K re-rotated)
        "positions",  # sequences: positions(seq), every position the sequence holds
        "cell-rows",  # sequences: cells(seq), the K/V rows of its cells as stored, and the handle's rope
        "state",  # sequences: save(seq) -> bytes, load(bytes, seq) -> bool (llama_state_seq_get/set_data)
    }
)

NUMERICS_KINDS = ("exact", "tolerance", "lossy")

# (calibration, rows[, history=...]) -> per-element bound on |read - appended|, shaped like rows; calibration is
# the first chunk appended to the handle (L, B, H, T, D), which is what a per-tensor scale is frozen on. A bound
# with a parameter named ``history`` also gets every chunk appended to the handle and to the handles it was
# forked from, in order, truncated ones included: what a quantizer whose scale follows the history (a running
# absmax that requantizes) depends on.
LossyBound = Callable[..., np.ndarray]


@dataclass(frozen=True)
class Numerics:
    """How a target's read-back relates to what was appended.

    - ``exact``: bit for bit.
    - ``tolerance``: within ``tolerance`` (absolute), for ``reason`` (e.g. torch
      matmul is not row-count invariant, so a model run through the target
      differs in the last bits).
    - ``lossy``: within ``bound(calibration, rows)`` per element, the bound the
      target's own quantizer promises, derived from its documented scheme
      (``reason`` states the scheme and the derivation).

    Raises ValueError for an unknown kind, a tolerance without a reason, or a
    lossy class without a bound (a bound of None is allowed only while the
    target is not runnable here).
    """

    kind: str = "exact"
    reason: str = ""
    tolerance: float = 0.0
    bound: LossyBound | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in NUMERICS_KINDS:
            raise ValueError(f"Numerics(kind={self.kind!r}): use one of {', '.join(NUMERICS_KINDS)}")
        if self.kind != "exact" and not self.reason:
            raise ValueError(f"Numerics(kind={self.kind!r}) needs a reason: why this bound is the right one")
        if self.kind == "tolerance" and not (self.tolerance > 0 and np.isfinite(self.tolerance)):
            raise ValueError(f"Numerics(tolerance={self.tolerance!r}): a tolerance is a finite number > 0")

    @classmethod
    def exact(cls) -> Numerics:
        return cls("exact")

    @classmethod
    def within(cls, tolerance: float, reason: str) -> Numerics:
        return cls("tolerance", reason, tolerance)

    @classmethod
    def lossy(cls, bound: LossyBound | None, reason: str) -> Numerics:
        return cls("lossy", reason, 0.0, bound)

    def allowed(self, calibration: np.ndarray, rows: np.ndarray, history: Sequence[np.ndarray] = ()) -> np.ndarray:
        """Per-element bound on |read - rows| (zeros for exact), shaped like ``rows``; ``history``: every chunk
        appended so far (see :data:`LossyBound`), passed to a bound that takes it."""
        if self.kind == "exact":
            return np.zeros(rows.shape, np.float64)
        if self.kind == "tolerance":
            return np.full(rows.shape, self.tolerance, np.float64)
        if self.bound is None:
            raise NotCapable(f"numerics={self.kind}: no bound is stated for this target ({self.reason})")
        if "history" in inspect.signature(self.bound).parameters:
            return np.asarray(self.bound(calibration, rows, history=list(history)), np.float64)
        return np.asarray(self.bound(calibration, rows), np.float64)


@dataclass(frozen=True)
class Occupancy:
    """What a target's ``occupancy()`` counts and the most it may be (the claim ``TGT-OCCUPANCY``).

    ``unit``: what one count is ("blocks", "pages", "slots", ...). ``block``: the
    positions of one batch element one unit holds (a block's size; 1 when a
    unit is one position). While handles live, ``occupancy()`` is at most
    ``factor * S + slack`` with S the sum over live handles and their batch
    elements of ceil(positions held / block): what they hold, counted as if
    nothing were shared (sharing only lowers it). ``factor`` covers storage
    that grows ahead of use (2 for a buffer that doubles), ``slack`` what is
    in use with nothing held (a preallocated scratch block). After every
    handle is released, ``occupancy()`` is at most what it was right after
    ``make``: nothing leaked.
    """

    unit: str = "blocks"
    block: int = 1
    factor: float = 1.0
    slack: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.unit, str) or not self.unit:
            raise ValueError(f"Occupancy(unit={self.unit!r}): name the unit counted, e.g. 'blocks'")
        if isinstance(self.block, bool) or not isinstance(self.block, int) or self.block < 1:
            raise ValueError(f"Occupancy(block={self.block!r}): the positions one unit holds, an int >= 1")
        if isinstance(self.factor, bool) or not isinstance(self.factor, (int, float)) or not 1 <= self.factor < 1e6:
            raise ValueError(f"Occupancy(factor={self.factor!r}): a number >= 1 (1: no storage ahead of use)")
        if isinstance(self.slack, bool) or not isinstance(self.slack, int) or self.slack < 0:
            raise ValueError(f"Occupancy(slack={self.slack!r}): units in use with nothing held, an int >= 0")

    def allowed(self, held: Sequence[int]) -> float:
        """The most units in use while batch elements hold ``held`` positions (one entry per element)."""
        return self.factor * sum(-(-int(n) // self.block) for n in held) + self.slack


@dataclass(frozen=True)
class Geometry:
    """The shape of one position's K/V: layers, KV heads per layer, head width (K and V alike)."""

    n_layers: int
    n_kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        for name in ("n_layers", "n_kv_heads", "head_dim"):
            val = getattr(self, name)
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"Geometry({name}={val!r}): must be an int >= 1")

    def rows_shape(self, batch: int, t: int) -> tuple[int, int, int, int, int]:
        """(L, B, H, T, D) of ``t`` positions for ``batch`` elements."""
        return (self.n_layers, batch, self.n_kv_heads, t, self.head_dim)


@dataclass(frozen=True)
class Rows:
    """Rows a handle holds: k, v (L, B, H, n, D) float32 and positions (n,) int64 ascending."""

    k: np.ndarray
    v: np.ndarray
    positions: np.ndarray


@dataclass(frozen=True)
class Visible:
    """What one append handed attention: k, v (L, B, H, m, D), their positions (m,), and the mask sizes.

    ``mask_length``/``mask_offset`` are what the handle declared for this
    append's queries before it ran (``mask_sizes(T)``); the rows' positions
    are the handle's own account of them (for transformers, the declared offset
    plus the row index: that is what the mask assumes). Rows at positions past
    the last appended one are unused storage a causal mask hides.
    """

    k: np.ndarray
    v: np.ndarray
    positions: np.ndarray
    mask_length: int
    mask_offset: int


class Handle(Protocol):
    """One cache of a target, made by ``Target.make``; the verbs are described in the module docstring."""

    target: Target
    geometry: Geometry
    batch: int
    window: int | None

    def append(self, k: np.ndarray, v: np.ndarray) -> Visible: ...

    def read(self) -> Rows: ...

    def __len__(self) -> int: ...

    def truncate(self, n: int) -> None: ...

    def fork(self) -> Handle: ...

    def reorder(self, idx: Sequence[int]) -> None: ...

    def select(self, idx: Sequence[int]) -> None: ...

    def repeat(self, r: int) -> None: ...

    def mask_sizes(self, query_len: int) -> tuple[int, int]: ...

    def occupancy(self) -> int: ...

    def release(self) -> None: ...


# (geometry, batch, window, capacity, trace=None) -> Handle; a builder that cannot trace ignores ``trace``
Builder = Callable[..., Handle]

# What an out-of-range truncate(n) (n < 0 or n > len) must do, per target:
TRUNCATE_CONTRACTS = {
    "refuse": "raise (a ValueError or RuntimeError) and change nothing",
    "refuse-or-empty": "raise (a ValueError or RuntimeError) and change nothing for n > len; for n < 0 "
    "(removing more positions than held) raise, or leave the cache empty and usable: length 0, nothing "
    "read back, the next append at position 0",
}


@dataclass(frozen=True)
class Target:
    """A KV cache to be proven: what it is, what it can do, how exact it is, and how to make one.

    ``distribution``: the installed distribution the target's code comes from
    ("kvproof" for impl's own designs); :meth:`binding` names it with its
    version, so a result is bound to it. ``refs``: ``path.py::Symbol`` into
    that distribution's source (impl's paths are relative to the project
    root, a library's to its site-packages folder). ``unavailable``: why the
    target cannot run here ("" when it can). ``truncate_contract``: a key of
    :data:`TRUNCATE_CONTRACTS`, the documented rule for an out-of-range truncate.
    ``windowed``: the target is a sliding-window class (it is always built with
    a window; ``make(window=None)`` then means one no position ever leaves).
    """

    name: str
    title: str
    distribution: str
    capabilities: frozenset[Capability]
    numerics: Numerics
    refs: tuple[str, ...]
    build: Builder | None = field(default=None, compare=False)
    unavailable: str = ""
    truncate_contract: str = "refuse"
    windowed: bool = False
    own: bool = False  # impl's own design or the reference: part of the default selection
    docs: tuple[tuple[str, str], ...] = ()  # (verb, the docstring or documented use that backs claims about it)
    occupancy: Occupancy | None = None  # what occupancy() counts and its bound (with capability "occupancy")

    def __post_init__(self) -> None:
        unknown = set(self.capabilities) - CAPABILITIES
        if unknown:
            raise ValueError(f"Target({self.name}): capabilities={sorted(unknown)} unknown; use {sorted(CAPABILITIES)}")
        if ("occupancy" in self.capabilities) != isinstance(self.occupancy, Occupancy):
            raise ValueError(
                f"Target({self.name}): capability occupancy and occupancy=Occupancy(...) go together "
                f"(capabilities {'have' if 'occupancy' in self.capabilities else 'lack'} it, occupancy="
                f"{self.occupancy!r}); declare both or neither"
            )
        if self.truncate_contract not in TRUNCATE_CONTRACTS:
            raise ValueError(f"Target({self.name}): truncate_contract={self.truncate_contract!r} unknown")
        if self.numerics.kind != "exact" and "append" in self.capabilities and "quantized" not in self.capabilities:
            raise ValueError(
                f"Target({self.name}): numerics={self.numerics.kind} but the capabilities lack 'quantized': a cache "
                "whose reads are not exact stores K/V in fewer bits (int8, fp8, fp16, ...), and the claims about its "
                "numerics (TGT-NUMERICS, TGT-LOSSY) run only on targets that declare it; add 'quantized'"
            )
        if self.build is None and not self.unavailable:
            raise ValueError(f"Target({self.name}): a runnable target needs build=")

    @property
    def runnable(self) -> bool:
        return not self.unavailable

    def version(self) -> str:
        """The installed version of :attr:`distribution`, or "" when it is not installed as a distribution."""
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return ""

    def binding(self) -> str:
        """``distribution==version`` (or the distribution alone): what a result on this target is bound to."""
        v = self.version()
        return f"{self.distribution}=={v}" if v else self.distribution

    def backing(self, verbs: Sequence[str]) -> str:
        """What backs a claim about ``verbs`` on this target: its documentation lines for them, joined."""
        found = dict(self.docs)
        return " ".join(found[v] for v in verbs if v in found) or f"{self.title} (no documentation line recorded)"

    def lacks(self, needed: Sequence[Capability]) -> list[Capability]:
        """The capabilities of ``needed`` this target does not declare, in order."""
        return [c for c in needed if c not in self.capabilities]

    def make(
        self, geometry: Geometry, batch: int = 1, window: int | None = None, capacity: int = 64, trace=None
    ) -> Handle:
        """An empty cache of ``geometry`` for ``batch`` elements.

        ``window``: the attention window (None: none; a windowed target then
        gets one wider than ``capacity``). ``capacity``: the most positions
        the caller will append (a static cache preallocates it); for a target
        declaring "grow", only where its storage starts. ``trace``: a
        :class:`harness.targets.repro.Trace` a third-party adapter writes its
        library calls to (impl's own handles have nothing to trace). Raises
        NotCapable when the target cannot run here or ``window`` is given to
        a target without the "window" capability; ValueError for a batch,
        window or capacity that is not an int >= 1.
        """
        if self.build is None or self.unavailable:
            raise NotCapable(f"target {self.name} is not runnable here: {self.unavailable}")
        for name, val in (("batch", batch), ("capacity", capacity), ("window", 1 if window is None else window)):
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"{self.name}.make({name}={val!r}): must be an int >= 1")
        if window is not None and "window" not in self.capabilities:
            raise NotCapable(f"target {self.name} lacks capability window (make(window={window}))")
        return self.build(geometry, batch, window, capacity, trace=trace)


def not_capable(target: Target, verb: str, capability: Capability) -> NotCapable:
    """The error a handle raises for a verb its target does not declare."""
    return NotCapable(f"target {target.name} lacks capability {capability} ({verb})")


def check_rows(geometry: Geometry, batch: int, k: np.ndarray, v: np.ndarray) -> int:
    """T of an append's rows; ValueError unless k and v are (L, B, H, T, D) of this geometry and batch."""
    k, v = np.asarray(k), np.asarray(v)
    want = geometry.rows_shape(batch, k.shape[3] if k.ndim == 5 else 0)
    if k.shape != want or v.shape != want:
        raise ValueError(f"append(k{k.shape}, v{v.shape}): expected (L, B, H, T, D) = {want[:3]} + (T, {want[4]})")
    return int(k.shape[3])
