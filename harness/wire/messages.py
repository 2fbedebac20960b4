"""The wire: every type that crosses the runner <-> witness-process boundary, imported by both sides.

The witness side (:mod:`harness.plugin`) imports this module, the status
words (:mod:`harness.statuses`) and the errors (:mod:`harness.errors`) and
nothing else of the harness; so does the fork server's zygote.

The runner (:mod:`harness.execute.watch`) writes a :class:`JobPlan` as JSON and starts
``pytest --kvproof-plan PLAN.json``; the plugin (:mod:`harness.plugin`)
streams events back, one JSON line each, flushed as they happen, to
``plan.out``:

- :class:`LiarApplied` once, before collection, when the plan names a liar
  or a mutant (``name`` is then ``mutant <key>``);
- :class:`CollectError` for a module or folder that failed to collect;
- :class:`NodeStarted` when a node begins (with its timeout);
- :class:`NodeFinished` when it ends, carrying the node's
  :class:`NodeResult` (with a :class:`PropertyRun` for each Hypothesis
  property that ran in it);
- :class:`LinesRun` when the plan names files to trace (``coverage``, a
  ``mutate`` run's honest run): after each node, the lines of those files
  its test body ran, and the lines that ran outside any test body
  (collection, fixture set-up and tear-down) with node id ``""``.

A node with a ``NodeStarted`` and no ``NodeFinished`` is the one that was
running when the process hung or died.

The events are the plugin's account, written from inside the process the
code under test runs in, so they are not trusted alone: the witness
process's entry point (:mod:`harness.execute.pytest_main`) also writes
pytest's own :class:`Account` (which test bodies ran and how they ended,
pytest's exit code, hooks it refused) after pytest returns, to a file whose
name only the runner and the entry point know (:data:`ACCOUNT_ENV`), and the
runner cross-checks the two (:func:`harness.execute.watch.cross_check`). Which node a witness's ``test:``
names is decided once, by :func:`node_matches`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

# the fields of the summary ``evidence.observe`` reports for a key (see harness.wire.evidence.Evidence)
OBSERVED_FIELDS = ("observed", "min", "max", "nan")

# each kvproof profile's Hypothesis ``max_examples``: the budget a PROVEN under it means. The plugin registers
# the profiles with these; the judge holds every property to its profile's (harness.verdict, rule 10c)
PROFILE_EXAMPLES = {"ci": 50, "release": 1000}


@dataclass(frozen=True)
class PropertyRun:
    """One run of a Hypothesis property in a node: a ``@given`` test, or a property its test body defines and calls.

    ``ran``: the valid examples it generated (reuse, generate and target phases; invalid and overrun test
    cases, shrinks and ``@example`` cases not counted); ``explicit``: the ``@example`` cases it ran.
    ``max_examples`` and ``generate``: the settings it ran under (``settings.max_examples``; whether
    ``Phase.generate`` is in ``settings.phases``), None when no test case of it was seen. ``exhausted``:
    Hypothesis stopped because no example was left to try (a small finite strategy), not at its budget.
    """

    property: str  # the property's function name (a @given test: the node's name)
    ran: int
    max_examples: int | None
    generate: bool | None
    exhausted: bool = False
    explicit: int = 0


@dataclass(frozen=True)
class NodeResult:
    """One pytest node's outcome, as streamed by the plugin (or synthesised by the runner when the process died)."""

    nodeid: str
    outcome: str  # passed | failed | error | skipped
    duration: float = 0.0  # seconds, setup + call + teardown
    evidence: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""  # one line: "AssertionError: ..." or the skip reason
    failure: str = ""  # full text: traceback, Hypothesis falsifying example
    location: str = ""  # "file.py:LINE" of the failure, when known
    hypothesis: Mapping[str, Any] | None = None  # {seed, profile, example, reproduce}
    examples: tuple[PropertyRun, ...] = ()  # each Hypothesis property run in the node (honest runs only)


def node_matches(test: str, nodeid: str) -> bool:
    """Does pytest node ``nodeid`` belong to the witness whose ``test:`` is ``test``?

    Exactly it, one of its parametrizations (``test[...]``), or, for a
    class, one of its methods (``test::...``).
    """
    return nodeid == test or nodeid.startswith(test + "[") or nodeid.startswith(test + "::")


@dataclass(frozen=True)
class JobPlan:
    """What one witness process must do and where it reports. Times in seconds."""

    out: str  # events file (JSON lines)
    stacks: str  # where faulthandler writes the stack of a node that outlives its timeout
    root: str  # the project root
    liar: str | None
    profile: str  # Hypothesis profile: ci | release
    seed: int | None
    timeouts: Mapping[str, float] = field(default_factory=dict)  # witness test -> seconds
    default_timeout: float = 60.0
    mutant: str | None = None  # a mutant key (harness.mutation.generate), applied like a liar
    coverage: tuple[str, ...] = ()  # files (relative to root) whose lines each node runs are streamed (LinesRun)
    warm: bool = False  # a warm server (harness.execute.warm): mutants are applied after collection, one per fork

    def timeout_for(self, nodeid: str) -> float:
        return next((float(s) for test, s in self.timeouts.items() if node_matches(test, nodeid)), self.default_timeout)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")

    @classmethod
    def read(cls, path: str | Path) -> JobPlan:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data["coverage"] = tuple(data.get("coverage", ()))
        return cls(**data)


ACCOUNT_ENV = "KVPROOF_ACCOUNT"  # where the entry point writes the Account; popped before pytest starts

# what pytest's own account says a test body did (Account.calls values)
CALL_PASSED, CALL_FAILED, CALL_SKIPPED = "passed", "failed", "skipped"  # else "raised <ExceptionType>"


@dataclass(frozen=True)
class Account:
    """pytest's own account of one witness process, kept apart from the plugin's event stream.

    ``calls``: node id -> what its test body (the call phase) did, as the
    outermost ``pytest_runtest_call`` wrapper saw it: passed, failed (an
    assertion), skipped (skip or xfail) or ``raised <ExceptionType>``. A
    node with no entry never ran its body. ``exit_code``: what
    ``pytest.main`` returned. ``refused``: hooks that project code
    implemented and kvproof refuses (they can rewrite outcomes); when
    non-empty, no test ran. ``reads``: every file of the project the
    process read (:mod:`harness.execute.reads`), relative to the root; None
    when it was not recorded (the verdict is then never replayed).
    """

    exit_code: int
    calls: Mapping[str, str] = field(default_factory=dict)
    refused: tuple[str, ...] = ()
    reads: tuple[str, ...] | None = None

    def write(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "exit_code": self.exit_code,
                    "calls": dict(self.calls),
                    "refused": list(self.refused),
                    "reads": None if self.reads is None else list(self.reads),
                }
            ),
            encoding="utf-8",
        )
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> Account | None:
        """The account at ``path``; None when there is none (or it is not one: treated as missing)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(
                int(data["exit_code"]),
                {str(k): str(v) for k, v in dict(data["calls"]).items()},
                tuple(str(r) for r in data["refused"]),
                None if data.get("reads") is None else tuple(str(r) for r in data["reads"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class LiarApplied:
    name: str
    ok: bool
    target: str = ""
    error: str = ""  # why it could not be applied (ok False)


@dataclass(frozen=True)
class CollectError:
    nodeid: str  # the module or folder that failed to collect
    text: str


@dataclass(frozen=True)
class NodeStarted:
    nodeid: str
    timeout: float


@dataclass(frozen=True)
class NodeFinished:
    result: NodeResult


@dataclass(frozen=True)
class LinesRun:
    """Lines of the traced files (:attr:`JobPlan.coverage`) that ran: in one node's test body, or (``nodeid``
    ``""``) outside any test body: collection, fixture set-up and tear-down, which any node may depend on.

    ``lines``: path (relative to the root, posix; a ``.py`` file now, a ``.c`` file when C is traced) -> line
    numbers, ascending. Several events for one node id add up.
    """

    nodeid: str
    lines: Mapping[str, list[int]]


Event = LiarApplied | CollectError | NodeStarted | NodeFinished | LinesRun
_TAGS: dict[type, str] = {
    LiarApplied: "liar",
    CollectError: "collect_error",
    NodeStarted: "start",
    NodeFinished: "result",
    LinesRun: "lines",
}
_BY_TAG = {tag: cls for cls, tag in _TAGS.items()}


def encode(event: Event) -> str:
    """One line of JSON (no newline) for ``event``."""
    body = asdict(event.result) if isinstance(event, NodeFinished) else asdict(event)
    return json.dumps({"event": _TAGS[type(event)], **body}, default=repr)


def decode(line: str) -> Event:
    """The event a line of :func:`encode` describes; raises ValueError for anything else."""
    data: dict[str, Any] = json.loads(line)
    cls = _BY_TAG.get(data.pop("event", None))
    if cls is None:
        raise ValueError(f"not a kvproof event: {line[:120]!r}")
    if cls is NodeFinished:
        runs = tuple(_construct(PropertyRun, r) for r in data.pop("examples", None) or ())  # absent: none counted
        return NodeFinished(_construct(NodeResult, {**data, "examples": runs}))
    return _construct(cls, data)


def _construct(cls: type, data: Mapping[str, Any]) -> Any:
    if not isinstance(data, Mapping):
        raise ValueError(f"{cls.__name__}: not an object: {data!r:.120}")
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}; the plugin and runner disagree")
    return cls(**data)
