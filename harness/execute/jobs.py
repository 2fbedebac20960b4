"""Jobs: what one witness process must do, how witness processes run, and what one came back with.

A :class:`Job` is one pytest process: a card's witnesses and controls
(the honest run) or its witnesses under one liar or mutant. A
:class:`RunConfig` says how every process of a run is started (profile,
seed, timeouts, launcher, BLAS threads); a :class:`JobResult` is what
one produced. :func:`honest_job`, :func:`liar_job` and :func:`count_jobs`
build a card's jobs; :mod:`harness.execute.watch` runs one,
:mod:`harness.execute.outcomes` reads its result back into outcomes.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.execute import forkserver
from harness.select.cards import Card, Witness
from harness.wire import messages
from harness.wire.messages import NodeResult

CAUGHT_EARLIER = "the liar was already caught: a liar run stops at the first witness that fails or errors under it"
MAX_TIMEOUT_S = 1e6  # faulthandler.dump_traceback_later overflows somewhere below 1e12 s


def check_timeout(name: str, value: object) -> float:
    """``value`` as seconds if it is a finite number > 0 and at most :data:`MAX_TIMEOUT_S`, else UsageError."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not 0 < value <= MAX_TIMEOUT_S:
        raise UsageError(
            f"{name}={value!r}: a timeout must be a number of seconds > 0 and <= {MAX_TIMEOUT_S:g}, such as 60"
        )
    return float(value)


@dataclass(frozen=True)
class RunConfig:
    """How witnesses run. Times in seconds."""

    root: Path
    profile: str = "ci"
    seed: int | None = 0  # passed to Hypothesis as --hypothesis-seed; None lets the profile decide
    default_timeout: float = 60.0
    startup_timeout: float = 60.0
    liars: bool = True
    oracle_dir: Path | None = None
    python: str = sys.executable
    blas_threads: int | None = None  # OPENBLAS/OMP/MKL_NUM_THREADS for witness processes; None: inherit
    launcher: str | None = None  # "forkserver" or "subprocess"; None: KVPROOF_LAUNCHER, else forkserver on Linux
    subject_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # subject -> its settings
    coverage: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # card id -> files its honest run traces
    repro_dir: Path | None = None  # where witnesses write reproductions of failures ($KVPROOF_REPRO_DIR)

    def __post_init__(self) -> None:
        check_timeout("default_timeout", self.default_timeout)
        check_timeout("startup_timeout", self.startup_timeout)
        if self.launcher is not None:
            forkserver.choose(self.launcher)  # UsageError for a name that is no launcher


@dataclass(frozen=True)
class WarmCard:
    """A card's warm server (:mod:`harness.execute.warm`): ``key`` names it (the jobs that share it share its
    collection of ``card``'s witnesses); ``coverage``: the files it traces while it imports and collects."""

    key: str
    card: Card
    coverage: tuple[str, ...]


@dataclass(frozen=True)
class WarmSpec:
    """How a mutant job may start from its card's warm server.

    ``fresh(facts)`` says why this job must start as a fresh process instead ("" when it may fork from the
    server), from what the server reported when ready (:class:`harness.execute.forkserver.WarmFacts`).
    ``then``: the server the jobs after this card's will want, started ahead while this card's jobs run.
    """

    server: WarmCard
    fresh: Callable[[Any], str]
    then: WarmCard | None = None


@dataclass(frozen=True)
class Job:
    """One pytest process: a card's nodes, honest (liar None) or under one liar."""

    card: Card
    witnesses: tuple[Witness, ...]
    liar: str | None = None
    mutant: str | None = None  # a mutant key (harness.mutation.generate): witnesses only, like a liar
    timeouts: Mapping[str, float] | None = None  # witness test -> seconds, instead of the card's
    coverage: tuple[str, ...] = ()  # files whose lines each node runs come back (JobResult.lines_run): mutate
    warm: WarmSpec | None = None  # fork it from the card's warm server (a mutant), unless the spec says no
    nodes: Mapping[str, tuple[str, ...]] | None = None  # witness id -> only these of its nodes (a mutant); else all

    @property
    def label(self) -> str:
        if self.mutant:
            return f"{self.card.id} under mutant {self.mutant}"
        return f"{self.card.id}" + (f" under liar {self.liar}" if self.liar else "")

    @property
    def stops_at_first_failure(self) -> bool:
        """A liar or mutant is caught by the first witness that fails under it: the rest need not run."""
        return bool(self.liar or self.mutant)

    @property
    def node_ids(self) -> list[str]:
        only = self.nodes or {}
        return list(dict.fromkeys(n for w in self.witnesses for n in only.get(w.id, (w.test,))))


@dataclass
class JobResult:
    """What one process produced: node results plus anything that went wrong around them."""

    results: dict[str, NodeResult] = field(default_factory=dict)
    collect_errors: list[messages.CollectError] = field(default_factory=list)
    liar_error: str = ""
    stopped: str = ""  # why nodes that never started did not run
    exit_code: int | None = None
    output_tail: str = ""
    duration: float = 0.0
    node: str = ""  # where it ran: "" on this machine (local executor); "host (ip, node 1a2b3c4d)" on a cluster
    retried: str = ""  # why it ran more than once (a cluster worker died under an earlier attempt)
    lost: str = ""  # no attempt came back (cluster workers died under each): the job is ERROR, this says where
    unavailable: str = ""  # the node could not provide the run's data as the driver has it: its witnesses skip
    lines_run: list[messages.LinesRun] = field(default_factory=list)  # Job.coverage: traced lines, as streamed
    started_as: str = ""  # how the process started: "" (fork server or subprocess), "warm", or "fresh: why"
    reads: tuple[str, ...] | None = None  # project files the process read (messages.Account.reads); None: unknown


# ---------------------------------------------------------------- a card's jobs


def honest_job(card: Card, coverage: tuple[str, ...] = ()) -> Job:
    return Job(card, card.all_witnesses, coverage=coverage)


def liar_job(card: Card, name: str) -> Job:
    return Job(card, card.witnesses, name)


def count_jobs(card: Card, cfg: RunConfig, link_problems: tuple[str, ...] = ()) -> int:
    """Upper bound on processes for ``card`` (for the progress bar)."""
    if link_problems:
        return 1
    return 1 + (len(card.liars) if cfg.liars else 0)
