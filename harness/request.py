"""What a run is asked and what it answers: :class:`RunRequest` in, :class:`Proof` out, a :class:`Reporter` told.

The command line parses its arguments into a :class:`RunRequest`;
:func:`harness.pipeline.prove` carries it out and returns a :class:`Proof`,
telling the :class:`Reporter` (the terminal, or nothing in tests) as it goes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.execute.executor import ExecutorSpec
from harness.mutation.sample import DEFAULT_MAX_MUTANTS
from harness.statuses import Gate

if TYPE_CHECKING:  # the hand-off names the stages' types; importing it loads no stage
    from harness.record.document import RunDocument
    from harness.select.cards import Card, Problem


@dataclass(frozen=True)
class MutateOptions:
    """``mutate``'s own options (the mutation stage reads them; :mod:`harness.mutation.stage`)."""

    max_mutants: int | None = DEFAULT_MAX_MUTANTS  # per card; None: every mutant
    seed: int = 0  # which mutants are sampled
    only: tuple[str, ...] = ()  # run just these mutant keys (of each card's claimed code), no sampling
    fast: bool = True  # line coverage, covering witnesses killer-first, warm servers; False: --slow, the reference


@dataclass(frozen=True)
class RunRequest:
    """What the user asked for, already parsed. Paths absolute."""

    root: Path
    cards_dir: Path
    reports_dir: Path
    reports_source: str  # how the reports folder was named, for messages: "--reports=...", ...
    ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    keyword: str = ""  # -k EXPR: cards whose id, title or a tag matches (pytest's keyword expressions)
    profile: str = "ci"
    seed: int | None = 0
    liars: bool = True
    timeout: float = 60.0
    jobs: int = 1
    changed: bool = False
    json_path: Path | None = None
    json_arg: str = ""  # --json as typed, for messages
    oracle_dir: Path | None = None
    argv: tuple[str, ...] = ()
    mutate: MutateOptions | None = None  # set: also run the mutation stage (run_obligations.py mutate)
    rerun_failed: bool = False  # run cards whose latest verdict is not PROVEN; replay the rest
    baseline: str | None = None  # compare the run with this reference (harness.compare.runs.load_ref)
    fail_on_regression: bool = False  # with baseline: any regression fails the run (exit 1)
    executor: ExecutorSpec = field(default_factory=ExecutorSpec)  # where jobs run: local, or a Ray cluster
    force: bool = False  # --json may replace an existing file that is not a previous verdicts document
    matrix: tuple[str, ...] | None = None  # run --matrix [NAME ...]: every card under these configurations (() all)
    targets: str | None = None  # run --target SPEC: cards tagged `targets` under each selected target too
    maxfail: int = 0  # run -x / --maxfail N: stop after the N-th card that fails the gate (0: never stop)


class Reporter(Protocol):
    """What the pipeline tells the person running it (the terminal, or nothing in tests)."""

    def warning(self, problems: Sequence[Problem], title: str) -> None: ...
    def starting(
        self, req: RunRequest, selected: Sequence[Card], replayed: Sequence[str], to_run: Sequence[Card]
    ) -> None: ...
    def progress(self, total: int) -> ContextManager[tuple[Callable, Callable]]: ...
    def results(self, view: Mapping[str, Any]) -> None: ...
    def wrote(self, what: str, path: Path) -> None: ...
    def error(self, text: str) -> None: ...
    def note(self, text: str) -> None: ...
    def baseline(self, comparison: Any) -> None: ...
    def card_done(self, card_id: str, verdict: str, reason: str, duration: float) -> None: ...
    def stopped(self, maxfail: int, not_run: Sequence[str]) -> None: ...


@dataclass(frozen=True)
class Proof:
    """What :func:`prove` produced: the document, and whether every output recorded it."""

    doc: RunDocument
    recorded: bool
    report_dir: Path | None = None
    comparison: Any = None  # harness.compare.diff.Comparison against --baseline, when asked
    fail_on_regression: bool = False

    @property
    def exit_code(self) -> int:
        """0 gate PASS, 1 gate FAIL (or a regression against the baseline with --fail-on-regression),
        2 the evidence was not recorded (the verdicts do not count)."""
        if not self.recorded:
            return 2
        if self.fail_on_regression and self.comparison is not None and self.comparison.regressions:
            return 1
        return 0 if self.doc.gate == Gate.PASS else 1
