"""The run document: what one run decided, as frozen dataclasses, with one JSON form.

Built once per run by :mod:`harness.record.build`, then read by the ledger,
the report view and ``--changed`` replays. It crosses into dicts at exactly
two boundaries, both here: :meth:`RunDocument.to_json` / :meth:`from_json`
(the ``verdicts.json`` file, ``obligations/verdicts.schema.json``) and
:meth:`CardResult.to_json` / :meth:`CardResult.from_json` (one card's entry
as the ledger stores it).

What consumers used to re-derive is a field: a card's honest-run time
(:attr:`CardResult.honest_s`), the digest of its bound files
(:attr:`CardResult.bound_digest`) and whether a witness's evidence is keyed
by node id (:attr:`WitnessResult.evidence_per_node`). Documents written
before those fields existed (schema version 1, ledgers of earlier runs) get
them derived once, in :func:`_upgrade_card`, when they are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import cattrs

from harness.errors import DocumentInvalid
from harness.plan.binding import BoundFile, digest
from harness.statuses import Gate, Kind, LiarStatus, MutantStatus, Outcome, Verdict

SCHEMA = "kvproof.verdicts"
SCHEMA_VERSION = 4  # 2: honest_s, bound_digest, evidence_per_node; 3: mutation, claims; 4: header.subjects


# ---------------------------------------------------------------- one card


@dataclass(frozen=True)
class CheckResult:
    """One bound evaluated on one node's evidence; ``holds`` None: could not be evaluated (``actual`` says why)."""

    key: str
    op: str
    limit: Any
    actual: Any
    holds: bool | None
    node: str = ""
    detail: str = ""


@dataclass(frozen=True)
class NodeEntry:
    nodeid: str
    outcome: Outcome
    duration_s: float


@dataclass(frozen=True)
class PropertyExamples:
    """One run of a Hypothesis property by a witness: the examples it ran and the settings it ran under.

    ``ran``: valid examples generated; ``explicit``: ``@example`` cases; ``exhausted``: Hypothesis ran out of
    examples to try before ``max_examples``; ``short``: how it fell short of the run's profile's budget
    (:func:`harness.verdict.weak_property`: the card is then not PROVEN), "" when it did not.
    """

    property: str
    ran: int
    max_examples: int | None
    generate: bool | None = True
    exhausted: bool = False
    explicit: int = 0
    node: str = ""  # the node id, when the witness is parametrized (several nodes)
    short: str = ""


@dataclass(frozen=True, kw_only=True)
class WitnessResult:
    """A witness or control as judged: status, evidence, each bound check, and the failure if any."""

    id: str
    kind: Kind
    test: str
    status: Outcome
    why: str
    duration_s: float
    timeout_s: float | None
    evidence: Mapping[str, Any]  # key -> value, or node id -> {key -> value} when evidence_per_node
    bounds: tuple[CheckResult, ...]
    reason: str
    message: str
    location: str
    failure: str
    hypothesis: Mapping[str, Any] | None
    nodes: tuple[NodeEntry, ...]
    evidence_per_node: bool = False
    examples: tuple[PropertyExamples, ...] = ()  # each Hypothesis property it ran (honest runs only)


@dataclass(frozen=True)
class LiarResult:
    name: str
    caught: bool
    caught_by: tuple[str, ...]
    status: LiarStatus
    why: str
    duration_s: float
    witnesses: tuple[WitnessResult, ...]
    node: str = ""  # the cluster node its process ran on ("" on the local executor)


@dataclass(frozen=True)
class Headline:
    """The measure shown beside a verdict (see :func:`harness.record.build.headline`)."""

    key: str
    value: Any
    text: str
    witness: str
    op: str
    limit: Any
    holds: bool | None


@dataclass(frozen=True)
class Counts:
    witnesses_passed: int
    witnesses_total: int
    controls_held: int
    controls_total: int
    liars_caught: int
    liars_total: int
    liars_run: int


@dataclass(frozen=True)
class ReplayedFrom:
    """The original run a ``--changed`` replay took its verdict from."""

    run_id: int
    started: str
    report_dir: str | None
    duration_s: float


@dataclass(frozen=True)
class ChangedFile:
    """A bound file whose bytes differ from a past run's (:func:`harness.compare.diff.bound_file_changes`)."""

    path: str
    role: str  # card | witness | ref | liar | ... (harness.plan.binding.BoundFile.role)
    change: str  # "changed" (other bytes, or now missing) | "newly bound" | "no longer bound"


@dataclass(frozen=True)
class SinceProven:
    """For a card that is not PROVEN: which of its bound files changed since the newest run of the ledger's
    history in which it was PROVEN (``run_id`` None: never PROVEN in this history, ``files`` empty)."""

    run_id: int | None
    started: str = ""
    report_dir: str | None = None
    files: tuple[ChangedFile, ...] = ()


@dataclass(frozen=True)
class MutantResult:
    """One mutant of a card's claimed code and what the card's witnesses made of it (:mod:`harness.mutation.score`)."""

    key: str  # path:line:col:operator[#n], rebuilds the mutant (harness.mutation.generate.find)
    path: str
    line: int
    qualname: str
    operator: str
    change: str  # "before -> after", one line
    status: MutantStatus
    killer: str = ""  # the witness id that failed under it (killed / timeout); "collection" or "crash" otherwise
    detail: str = ""  # the failure's first line, the timeout, the equivalence reason, or why it could not run
    duration_s: float = 0.0
    diff: str = ""  # unified diff (kept for every status but killed)
    reused_from: int | None = None  # the ledger run a --changed mutate took this result from
    how: str = ""  # how it ran: "not reached" (never run), "warm" (forked after collection), "fresh[: why]"
    tried: int = 0  # witnesses it ran against (a killed one stops at the first that fails); 0: not run
    witness_s: float = 0.0  # seconds of witness time it needed: the killer's alone when killed, else every one run


@dataclass(frozen=True)
class MutationResult:
    """A card's mutation score: of the sampled mutants of the code it claims, how many its witnesses detect.

    score = (killed + timeout) / (killed + timeout + survived); equivalent and error are not scored.
    """

    score: float | None  # None: nothing scored
    min_score: float | None  # the card's mutation.min_score
    holds: bool | None  # score >= min_score; None when either is missing or the result is stale
    killed: int
    survived: int
    timeout: int
    equivalent: int
    error: int
    candidates: int  # mutants of the claimed code before sampling
    seed: int
    max_mutants: int | None
    functions: tuple[str, ...]  # the claimed functions, "path::qualname"
    mutants: tuple[MutantResult, ...]
    measured_run: int | None = None  # the ledger run it was measured in when not this one
    measured_at: str = ""  # when it was measured (UTC, ISO)
    stale: bool = False  # measured on other bytes, or with other equivalence marks, than the card has now
    previous_score: float | None = None  # the card's score in the mutate run before
    bound_digest: str = ""
    partial: bool = False  # only --mutant keys ran: not the card's score (never recorded as one, never judges)
    not_reached: int = 0  # of the survivors: on lines no witness runs (never run)
    # the sample it was measured on (harness.mutation.sample.Sample.key; the floor's key when its mutants were
    # exactly the floor's sample); "" before kvproof recorded it
    sample: str = ""
    other_sample: str = ""  # why it does not judge the card's floor: "measured on a partial sample (...)"; "": it does
    # the equivalence marks it was measured with: those that can change it (harness.mutation.marks.marks_digest)
    marks_digest: str = ""
    stale_why: str = ""  # when stale, why, if not its bytes: its marks changed since ("": measured on other bytes)


@dataclass(frozen=True)
class Claim:
    """An impl function and the cards whose mutation analysis claimed it (none: no theorem constrains it)."""

    path: str
    qualname: str
    cards: tuple[str, ...]
    mutants: int  # mutants run against it, over every card
    survived: int


@dataclass(frozen=True, kw_only=True)
class CardResult:
    """One card's claim, verdict and evidence in one run."""

    id: str
    title: str
    module: str
    regime: str
    version: int
    fingerprint: str
    card_path: str
    tags: tuple[str, ...]
    requires: tuple[str, ...]
    refs: tuple[str, ...]
    theorem: str
    proof: str
    notes: str
    verdict: Verdict
    reason: str
    duration_s: float  # every process of the card (0 for a replay: this run spent nothing on it)
    headline: Headline | None
    counts: Counts
    detail: str = ""
    replayed_from: ReplayedFrom | None = None
    bound_files: tuple[BoundFile, ...]
    witnesses: tuple[WitnessResult, ...]
    controls: tuple[WitnessResult, ...]
    liars: tuple[LiarResult, ...]
    honest_s: float = 0.0  # the honest process alone (duration_s minus the liar processes)
    bound_digest: str = ""  # harness.plan.binding.digest(bound_files)
    mutation: MutationResult | None = None  # its mutation score: measured by mutate, or from the ledger
    honest_node: str = ""  # the cluster node the honest process ran on ("" on the local executor)
    # not PROVEN: its bound files changed since its last PROVEN run in the ledger (None: PROVEN, or no ledger read)
    since_proven: SinceProven | None = None

    def to_json(self) -> dict[str, Any]:
        return _CONVERTER.unstructure(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CardResult:
        return _CONVERTER.structure(_upgrade_card(data), cls)


# ---------------------------------------------------------------- the run


@dataclass(frozen=True)
class NotProven:
    id: str
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class Summary:
    total: int
    counts: Mapping[str, int]  # verdict -> cards, every verdict listed
    by_regime: Mapping[str, Mapping[str, int]]  # regime -> verdict -> cards
    gate: Gate
    not_proven: tuple[NotProven, ...]
    replayed: int = 0


@dataclass(frozen=True)
class SubjectInfo:
    """A subject of a ``--matrix`` run: a configuration as probed on this machine (harness.plan.subjects.Subject)."""

    name: str
    reason: str
    settings: Mapping[str, str]
    required: bool
    runnable: bool
    why_not: str = ""
    numerics: str | None = None
    known: Mapping[str, str] = field(default_factory=dict)  # a third-party target's expected failures: card -> repro
    drift: str = ""  # its known list was surveyed on another version than the installed one: the note saying so


@dataclass(frozen=True)
class GitState:
    commit: str | None
    dirty: bool | None


@dataclass(frozen=True)
class Host:
    name: str
    platform: str
    machine: str


@dataclass(frozen=True, kw_only=True)
class RunHeader:
    """When, where and how the run happened, and its summary."""

    schema: str
    schema_version: int
    started: str
    git: GitState
    host: Host
    versions: Mapping[str, Any]  # library -> version (None when unknown)
    profile: str
    seed: int | None
    liars: bool
    default_timeout_s: float
    command: str
    root: str
    cards_dir: str
    jobs: int | None = None
    changed: bool = False
    finished: str | None
    duration_s: float
    summary: Summary
    numerics: str | None = None  # impl's numerics path (impl.linear.numerics_path()), when impl says
    launcher: str | None = None  # how witness processes started: "forkserver" or "subprocess" (None: not said)
    executor: str | None = None  # where they ran (harness.execute.executor: "local: ..." or "ray: ..."; None: not said)
    subjects: tuple[SubjectInfo, ...] = ()  # run --matrix: the configurations (a card's cells are CARD@NAME)


@dataclass(frozen=True)
class Slowest:
    id: str
    duration_s: float


@dataclass(frozen=True)
class SlowestLiar:
    name: str
    duration_s: float


@dataclass(frozen=True)
class TimingRow:
    id: str
    total_s: float
    honest_s: float
    startup_s: float
    liars_s: float
    liar_runs: int
    slowest_witness: Slowest | None
    slowest_liar: SlowestLiar | None
    nodes: tuple[str, ...] = ()  # cluster nodes its processes ran on, in order of first use


@dataclass(frozen=True)
class Timing:
    wall_s: float | None
    jobs: int | None
    process_s: float
    processes: int
    replayed: int
    cards: tuple[TimingRow, ...]


@dataclass(frozen=True)
class RunDocument:
    header: RunHeader
    cards: tuple[CardResult, ...]
    timing: Timing
    claims: tuple[Claim, ...] = ()  # mutate runs: every impl function, claimed by which cards, survivors

    @property
    def gate(self) -> Gate:
        return self.header.summary.gate

    def to_json(self) -> dict[str, Any]:
        return _CONVERTER.unstructure(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunDocument:
        data = dict(data)
        data["cards"] = [_upgrade_card(c) for c in data.get("cards", [])]
        data.setdefault(
            "timing", {"wall_s": None, "jobs": None, "process_s": 0.0, "processes": 0, "replayed": 0, "cards": []}
        )  # documents of the first kvproof versions had no timing
        return _CONVERTER.structure(data, cls)


# ---------------------------------------------------------------- reading back

_MISSING = object()


def check_document(data: Any) -> None:
    """Raise DocumentInvalid unless ``data`` reads as a verdicts document of a schema version this kvproof knows.

    What a reader (``compare``, ``run --baseline``) relies on before it uses a document written elsewhere:
    ``header.schema`` is ``kvproof.verdicts``, ``header.schema_version`` an integer from 1 to
    :data:`SCHEMA_VERSION`, ``cards`` a list of objects, each with a non-empty string ``id`` (unique) and a
    known ``verdict``, and ``header.summary.total`` (when given) the number of cards. A document without
    ``cards`` is not an empty run: it is refused.
    """

    def refuse(field: str, value: Any, allowed: str) -> None:
        if value is _MISSING:
            raise DocumentInvalid(field, None, allowed, missing=True)
        raise DocumentInvalid(field, value, allowed)

    if not isinstance(data, Mapping):
        refuse("(the document)", type(data).__name__, "a verdicts document is a JSON object with header and cards")
    header = data.get("header", _MISSING)
    if not isinstance(header, Mapping):
        refuse("header", header, "an object: the run's header")
    if header.get("schema", _MISSING) != SCHEMA:
        refuse("header.schema", header.get("schema", _MISSING), f"must be {SCHEMA!r}")
    version = header.get("schema_version", _MISSING)
    if type(version) is not int or not 1 <= version <= SCHEMA_VERSION:
        refuse(
            "header.schema_version",
            version,
            f"this kvproof reads versions 1 to {SCHEMA_VERSION}; a newer kvproof wrote it (update kvproof), "
            "or the file was edited",
        )
    cards = data.get("cards", _MISSING)
    if not isinstance(cards, list):
        refuse("cards", cards, "a list of card entries (an empty run has cards: [])")
    seen: dict[str, int] = {}
    for i, card in enumerate(cards):
        if not isinstance(card, Mapping):
            refuse(f"cards[{i}]", card, "each card entry is an object")
        cid = card.get("id", _MISSING)
        if not isinstance(cid, str) or not cid:
            refuse(f"cards[{i}].id", cid, "a non-empty string, the card's id")
        if cid in seen:
            refuse(f"cards[{i}].id", cid, f"the same id as cards[{seen[cid]}]; a run has one entry per card")
        seen[cid] = i
        verdict = card.get("verdict", _MISSING)
        if verdict not in tuple(Verdict):
            refuse(f"cards[{i}].verdict", verdict, f"one of {', '.join(Verdict)}")
    summary = header.get("summary")
    total = summary.get("total") if isinstance(summary, Mapping) else None
    if total is not None and total != len(cards):
        refuse("header.summary.total", total, f"the number of entries in cards ({len(cards)})")


# ---------------------------------------------------------------- JSON


def _converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    # NOTE: evidence values, limits and Hypothesis details are plain JSON already; keep them as they are
    conv.register_structure_hook(Any, lambda value, _: value)
    return conv


_CONVERTER = _converter()


def _upgrade_card(data: Mapping[str, Any]) -> dict[str, Any]:
    """A card entry with the fields of schema version 2, derived for entries written before them."""
    card = dict(data)
    liars = card.get("liars", [])
    if "honest_s" not in card:
        ran = sum(entry.get("duration_s") or 0.0 for entry in liars if entry.get("status") != LiarStatus.NOT_RUN)
        # a replay's own duration_s is 0; the processes it stands for are the original's
        total = (card.get("replayed_from") or card).get("duration_s", 0.0)
        card["honest_s"] = round(max(float(total or 0.0) - ran, 0.0), 3)
    if "bound_digest" not in card:
        card["bound_digest"] = digest(BoundFile(**b) for b in card.get("bound_files", []))
    counts = dict(card.get("counts") or {})
    counts.setdefault("liars_run", sum(entry.get("status") != LiarStatus.NOT_RUN for entry in liars))
    card["counts"] = counts
    card["witnesses"] = [_upgrade_witness(w) for w in card.get("witnesses", [])]
    card["controls"] = [_upgrade_witness(w) for w in card.get("controls", [])]
    card["liars"] = [
        {**entry, "witnesses": [_upgrade_witness(w) for w in entry.get("witnesses", [])]} for entry in liars
    ]
    return card


def _upgrade_witness(data: Mapping[str, Any]) -> dict[str, Any]:
    w = dict(data)
    w.setdefault("evidence_per_node", len(w.get("nodes", [])) > 1)  # the rule WitnessOutcome.evidence follows
    w["bounds"] = [{"node": "", "detail": "", **b} for b in w.get("bounds", [])]
    return w
