"""One run, start to finish: select -> plan -> execute -> judge -> record -> publish.

:func:`prove` is the whole of ``run_obligations.py run``, callable
in-process (tests call it; the command line only parses arguments into a
:class:`RunRequest` and hands it a :class:`Reporter`). Each step is one
function below, in order, and each hands the next a typed value:

- select: :func:`load` the cards and the liar index, :func:`runnable` decides
  what may run (the same refusals as ``validate``);
- plan: :func:`check_outputs` proves every output location writable before
  anything runs; :func:`plan` binds each card to its files and asks the
  ledger what ``--changed`` may replay and how long each process took last
  time (else ``obligations/timings.json``, :mod:`harness.timings`);
- execute: :func:`harness.execute.schedule.run_cards`, one fresh pytest process per
  (card, liar);
- judge: :func:`harness.verdict.evaluate` per card;
- record: :func:`harness.report.data.build` makes the
  :class:`~harness.document.RunDocument`;
- publish: ``--json``, the dated report folder and the ledger row
  (:func:`record`), and the reporter shows the report view.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Protocol

from harness import outputs, provenance, subjects, timings, verdict
from harness.binding import BoundFile, bound_files, digest, oracle_files, run_context
from harness.cards import Card, LoadResult, Problem, card_bytes, display_path, find_card_files, load_cards, select
from harness.compare import compare, thresholds_from_cards
from harness.compare_io import load_ref, open_ledger
from harness.document import CardResult, Claim, MutationResult, RunDocument, SubjectInfo
from harness.errors import CardInvalid, LedgerError, RunNotRecorded, TargetUnknown, UsageError
from harness.execute import forkserver
from harness.execute.cluster import check_reachable, close_session, import_ray
from harness.execute.executor import RAY, ExecutorSpec
from harness.execute.factory import make as make_executor
from harness.execute.jobs import RunConfig, count_jobs
from harness.execute.outcomes import CardRun
from harness.execute.process import INHERITED_PYTEST_VARS
from harness.execute.schedule import run_cards
from harness.ledger import FILENAME, Ledger
from harness.liars import LiarSite, scan
from harness.mutation.marks import Mark, load_marks
from harness.mutation.stage import MutateOptions, measure, recall, traced_files
from harness.report import data, jsonfile
from harness.report import folder as report_folder
from harness.report.view import build_view
from harness.statuses import Gate, Verdict
from harness.subjects import Subject
from harness.targets import known, registry
from harness.timings import Expected

# ---------------------------------------------------------------- inputs and outputs


@dataclass(frozen=True)
class RunRequest:
    """What the user asked for, already parsed. Paths absolute."""

    root: Path
    cards_dir: Path
    reports_dir: Path
    reports_source: str  # how the reports folder was named, for messages: "--reports=...", ...
    ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
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
    baseline: str | None = None  # compare the run with this reference (harness.compare_io.load_ref)
    fail_on_regression: bool = False  # with baseline: any regression fails the run (exit 1)
    executor: ExecutorSpec = field(default_factory=ExecutorSpec)  # where jobs run: local, or a Ray cluster
    force: bool = False  # --json may replace an existing file that is not a previous verdicts document
    matrix: tuple[str, ...] | None = None  # run --matrix [NAME ...]: every card under these configurations (() all)
    targets: str | None = None  # run --target SPEC: cards tagged `targets` under each selected target too


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


@dataclass(frozen=True)
class Proof:
    """What :func:`prove` produced: the document, and whether every output recorded it."""

    doc: RunDocument
    recorded: bool
    report_dir: Path | None = None
    comparison: Any = None  # harness.compare.Comparison against --baseline, when asked
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


@dataclass(frozen=True)
class Loaded:
    result: LoadResult
    sites: Mapping[str, LiarSite]
    liar_problems: tuple[Problem, ...]


@dataclass(frozen=True)
class RunPlan:
    """Every selected card with what it is bound to, and what the ledger already knows."""

    cards: tuple[Card, ...]
    links: Mapping[str, tuple[str, ...]]  # card id -> link problems (the card errors without running)
    bound: Mapping[str, tuple[BoundFile, ...]]
    replays: Mapping[str, data.Replayed] = field(default_factory=dict)
    expected: Mapping[str, Expected] = field(default_factory=dict)
    mutations: Mapping[str, MutationResult] = field(default_factory=dict)  # newest measured, from the ledger
    marks: Mapping[str, Mark] = field(default_factory=dict)  # equivalence marks (mutate)
    schedule_from: Mapping[str, str] = field(default_factory=dict)  # card to run -> where its expected times came
    # from: "ledger", "timings.json" or "unknown" (harness.timings)
    subjects: tuple[Subject, ...] = ()  # run --matrix: every selected configuration as probed (runnable or not)

    @property
    def to_run(self) -> list[Card]:
        return [c for c in self.cards if c.id not in self.replays]


# ---------------------------------------------------------------- select


def load(root: Path, folder: Path, shown: str) -> Loaded:
    """Cards, the liar index and its problems; UsageError when ``folder`` holds no card (``shown`` names it)."""
    if not find_card_files(folder):
        raise UsageError(
            f"no cards found in {shown}; add one with `run_obligations.py new ID` "
            "or point --cards at the folder that holds them"
        )
    sites, liar_problems = scan(root)
    result = load_cards(folder, root, sites)
    extra = tuple(Problem(p.path, p.line, p.field, p.value, p.message) for p in liar_problems)
    return Loaded(result, sites, extra)


def runnable(loaded: Loaded, ids: Sequence[str], tags: Sequence[str], reporter: Reporter | None) -> list[Card]:
    """The cards a run may use, or CardInvalid.

    ``validate`` and ``run`` refuse the same things: a full run (no ids, no
    tags) stops on any card that does not load and on any problem in the
    liar index. A run of a selection goes ahead when none of the selected
    ids matches a broken card and no selected card lists a liar whose
    registration is broken; the other broken files are named as a warning.
    """
    result, liar_problems = loaded.result, loaded.liar_problems
    broken = list(result.load_problems) + list(liar_problems)
    if not broken:
        return select(result.cards, ids, tags)
    if not ids and not tags:
        raise CardInvalid(broken)
    hit = [
        p
        for p in result.load_problems
        if p.path in result.broken_ids and any(fnmatchcase(result.broken_ids[p.path], pat) for pat in ids)
    ]
    hit += [p for p in liar_problems if p.field != "name"]  # an unreadable liar module may hold any name
    if hit:
        raise CardInvalid(hit)
    selected = select(result.cards, ids, tags)
    named = {n for c in selected for n in c.liars}
    hit = [p for p in liar_problems if p.field == "name" and p.value.strip("'\"") in named]
    if hit:
        raise CardInvalid(hit)
    if reporter is not None:
        reporter.warning(
            broken,
            f"warning: {len(broken)} problem(s) in cards that are not selected "
            f"(`run_obligations.py validate` lists them); running the selection:",
        )
    return selected


def resolve_subjects(req: RunRequest, reporter: Reporter | None) -> tuple[Subject, ...]:
    """The configurations a ``--matrix`` run proves, each probed on this machine (none for a plain run);
    ConfigurationsInvalid (exit 2) for a malformed configurations file, UsageError for a name it lacks."""
    if req.targets:
        return target_subjects(req, reporter)
    if req.matrix is None:
        return ()
    found = subjects.load(req.cards_dir, req.root)
    chosen = found.select(req.matrix)
    if reporter is not None:
        reporter.note(f"matrix: probing {len(chosen)} configuration(s): {', '.join(c.name for c in chosen)}")
    return tuple(subjects.probe(c, found.probe, req.root) for c in chosen)


def target_subjects(req: RunRequest, reporter: Reporter | None) -> tuple[Subject, ...]:
    """``run --target SPEC``: the default subject and one subject per selected target (harness.targets),
    each with ``KVPROOF_TARGETS`` set to it and its distribution's version as a bound setting; impl's own
    targets gate, third-party ones are a survey; a target that cannot run here is a visible cell."""
    try:
        found = registry.available(req.targets or "")
    except TargetUnknown as exc:
        raise UsageError(f"--target: {exc}") from None
    survey = known.load(req.root) if (req.root / known.KNOWN_PATH).is_file() else None
    if reporter is not None:
        reporter.note(f"targets: {', '.join(a.name for a in found)} (cards tagged `targets` run under each)")
    out = [Subject(subjects.DEFAULT, "impl's own targets, as a plain run", {}, True, True)]
    for a in found:
        expected = {k.card: k.reproduction for k in (survey.known.get(a.name, ()) if survey is not None else ())}
        out.append(
            Subject(
                a.name,
                f"the target {a.name} ({a.binding})",
                {registry.ENV_TARGETS: a.name, "KVPROOF_TARGET_BINDING": a.binding},
                registry.get(a.name).own,
                a.runnable,
                a.reason,
                a.binding,
                expected,
            )
        )
    return tuple(out)


def expand(cards: Sequence[Card], subs: Sequence[Subject]) -> list[Card]:
    """Every (card, runnable subject) as a cell card (``CARD@SUBJECT``, the default keeps the card's id), card
    by card; the cards themselves when there are no subjects. Under targets (a subject that sets
    ``KVPROOF_TARGETS``) only the cards tagged ``targets`` get a cell."""
    runnable_here = [s for s in subs if s.runnable]
    if not subs:
        return list(cards)
    return [
        replace(
            c,
            id=subjects.cell_id(c.id, s.name),
            subject=s.name,
            card_id=c.id,
            # a liar is a wrong version of *our* code: it says how strong the witnesses are on impl's own
            # targets; on a third-party target (a survey cell) it would patch code the target never runs
            liars=() if registry.ENV_TARGETS in s.settings and not s.required else c.liars,
        )
        for c in cards
        for s in runnable_here
        if s.name == subjects.DEFAULT or registry.ENV_TARGETS not in s.settings or "targets" in c.tags
    ]


def equivalence_marks(req: RunRequest, loaded: Loaded, reporter: Reporter | None) -> dict[str, Mark]:
    """The equivalence marks a mutate run uses; CardInvalid when the marks file is broken.

    A mark whose key names no mutant of the code as it is now (the code
    moved or changed) is kept out and named as a warning: the mutant it
    meant, if still there, shows as survived until it is marked again.
    """
    marks, problems = load_marks(req.cards_dir, req.root, [c.id for c in loaded.result.cards])
    broken = [p for p in problems if p.kind != "stale"]
    if broken:
        raise CardInvalid(broken)
    if problems and reporter is not None:
        reporter.warning(
            problems,
            f"warning: {len(problems)} equivalence mark(s) match no mutant of the code as "
            "it is now; mark the current keys again:",
        )
    return marks


# ---------------------------------------------------------------- plan


def check_outputs(req: RunRequest) -> None:
    """Prove every place the run writes to safe and writable, before anything runs; UsageError names the first
    that is not.

    No output may replace an input (:mod:`harness.outputs`): the reports
    folder is not the cards folder or inside it, nor inside impl/ or
    witnesses/; ``--json PATH`` is not inside those, a report folder, the
    ledger or a source file, and an existing file there must be a previous
    verdicts document (else ``--force``). Then the reports folder must exist
    or be creatable and be writable, the ledger in it must open for writing
    (an old ledger is migrated here), and ``--json PATH`` must be a file path
    in a writable folder.
    """
    reports = req.reports_dir
    what = f"{req.reports_source}={str(reports)!r}"
    places = outputs.Places(req.root, req.cards_dir, reports)
    outputs.check_reports(reports, req.reports_source, places)
    if req.json_path is not None and not req.json_path.is_dir():
        outputs.check_file(req.json_path, f"--json={req.json_arg!r}", outputs.VERDICTS, places, force=req.force)
    _writable_folder(reports, what, "give a folder you can write to with --reports DIR")
    try:
        Ledger(reports / FILENAME, create=True).close()
    except LedgerError as exc:  # its message names the file and the fix (a damaged file, a lock held too long)
        raise UsageError(f"{req.reports_source}: {exc}") from None
    path, arg = req.json_path, req.json_arg
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"--json={arg!r} is a folder; give a file path such as {arg.rstrip('/')}/verdicts.json")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(
            f"--json={arg!r}: the file exists and is not writable; fix its permissions or give another path"
        )
    _writable_folder(path.parent, f"--json={arg!r}", "give a path in a folder you can write to")


def _writable_folder(folder: Path, what: str, fix: str) -> None:
    """Create ``folder`` if needed and prove it writable by creating a file in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".kvproof-write-check-"):
            pass
    except OSError as exc:
        raise UsageError(f"{what}: cannot write there ({exc.strerror or exc}); {fix}") from None


def plan(
    req: RunRequest,
    loaded: Loaded,
    cards: Sequence[Card],
    reporter: Reporter | None,
    marks: Mapping[str, Mark] | None = None,
    subs: Sequence[Subject] = (),
) -> RunPlan:
    """Bind each card to its files; ask the ledger for replays (``--changed``) and expected process times.

    A card is replayed when its last original PROVEN verdict of this profile
    was bound to exactly the files it is bound to now (same paths, roles and
    sha256); a card with link problems is always run (it errors at once).
    A card's expected process times come from its latest ledger entry, else
    from ``<cards dir>/timings.json`` (:mod:`harness.timings`; raises
    TimingsInvalid, before anything runs, when that file is malformed), else
    they are unknown.
    """
    hints = dict(timings.load(req.cards_dir, req.root))
    hints.update({c.id: hints[c.base_id] for c in cards if c.id != c.base_id and c.base_id in hints})
    links = {c.id: tuple(str(p) for p in loaded.result.link_problems(c.base_id)) for c in cards}
    contexts = {subjects.DEFAULT: run_context(req.root, provenance.numerics(req.root))}
    for s in subs:  # each configuration's own settings and numerics line
        if s.runnable and s.name != subjects.DEFAULT:
            contexts[s.name] = run_context(req.root, s.numerics, os.environ, s.settings)
    bound = {
        c.id: bound_files(c, req.root, loaded.sites, oracle_files(c, req.oracle_dir), contexts[c.subject])
        for c in cards
    }
    replays: dict[str, data.Replayed] = {}
    measured: dict[str, Expected] = {}  # from the ledger
    marks = dict(marks or {})
    path = req.reports_dir / FILENAME
    try:
        ledger = Ledger(path, create=False) if path.is_file() else None
    except LedgerError as exc:
        if reporter is not None:
            reporter.error(f"warning: ledger not read ({exc}); every card runs")
        ledger = None
    if ledger is not None:
        with ledger:
            for card in cards:
                if req.rerun_failed and not links[card.id]:
                    # NOTE: the card's latest verdict decides: not PROVEN -> it runs; PROVEN -> its PROVEN verdict
                    # on exactly these bound files is replayed (none: the files changed since, so it runs too)
                    latest = ledger.last(card.id)
                    past = (
                        ledger.last_matching(card.id, digest(bound[card.id]), profile=req.profile)
                        if latest is not None and latest.verdict == Verdict.PROVEN
                        else None
                    )
                    if past is not None:
                        replays[card.id] = data.Replayed(
                            ledger.entry(past.run_id, card.id), past.run_id, past.started, past.report_dir
                        )
                        continue
                if req.changed and not links[card.id]:
                    past = ledger.last_matching(card.id, digest(bound[card.id]), profile=req.profile)
                    if past is not None:
                        replays[card.id] = data.Replayed(
                            ledger.entry(past.run_id, card.id), past.run_id, past.started, past.report_dir
                        )
                        continue
                last = timings.from_ledger(ledger, card.id)
                if last is not None:
                    measured[card.id] = last.expected
    expected, sources = timings.combine([c.id for c in cards if c.id not in replays], measured, hints)
    mutations = recall(req, cards, bound) if ledger is not None else {}
    return RunPlan(tuple(cards), links, bound, replays, expected, mutations, marks, sources, tuple(subs))


# ---------------------------------------------------------------- execute and judge


def execute(
    req: RunRequest, the_plan: RunPlan, reporter: Reporter | None, launcher: str | None = None
) -> tuple[dict[str, CardRun], str]:
    """Run every card that is not replayed; (card id -> its runs, where they ran: the executor's description)."""
    cfg = RunConfig(
        root=req.root,
        profile=req.profile,
        seed=req.seed,
        default_timeout=req.timeout,
        liars=req.liars,
        oracle_dir=req.oracle_dir,
        launcher=launcher,
        subject_env={s.name: dict(s.settings) for s in the_plan.subjects if s.runnable},
        coverage=traced_files(req, the_plan.to_run),  # mutate: the honest runs trace the claimed code
    )
    to_run = the_plan.to_run
    total = sum(count_jobs(c, cfg, the_plan.links[c.id]) for c in to_run)
    ex = make_executor(req.executor, cfg, req.jobs)
    if reporter is None:
        runs = run_cards(to_run, cfg, the_plan.links, jobs=req.jobs, expected=the_plan.expected, executor=ex)
    else:
        with reporter.progress(total) as (on_start, on_done):
            runs = run_cards(
                to_run,
                cfg,
                the_plan.links,
                jobs=req.jobs,
                expected=the_plan.expected,
                on_start=on_start,
                on_done=on_done,
                executor=ex,
            )
    return {r.card.id: r for r in runs}, ex.describe()


def judge(
    the_plan: RunPlan,
    runs: Mapping[str, CardRun],
    measured: Mapping[str, MutationResult] | None = None,
    *,
    floors: bool = False,
) -> list[data.CardReport | data.Replayed]:
    """Each card's verdict, in card order; replayed cards as they were (a mutate run re-judges them).

    A card's mutation score is the one ``measured`` in this run, else the
    newest in the ledger; only a score for the bytes the card is bound to
    now (not stale) can make it VACUOUS.
    """
    out: list[data.CardReport | data.Replayed] = []
    for c in the_plan.cards:
        m = (measured or {}).get(c.id) or the_plan.mutations.get(c.id)
        use = m if m is not None and not m.stale and not m.partial else None
        rep = the_plan.replays.get(c.id)
        if rep is not None:
            entry = rep.entry
            if m is not None:
                entry = _with_mutation(entry, m, use)
            out.append(data.Replayed(entry, rep.run_id, rep.started, rep.report_dir))
            continue
        out.append(
            data.CardReport(
                c,
                runs[c.id],
                # a mutation score measures the witnesses, on the default configuration: floors judge its cells
                verdict.evaluate(c, runs[c.id].outcomes, use, floors=floors and c.subject == subjects.DEFAULT),
                the_plan.bound[c.id],
                m,
            )
        )
    return out


def _with_mutation(entry: CardResult, m: MutationResult, use: MutationResult | None) -> CardResult:
    """A replayed entry carrying the card's current mutation score; a score below the floor makes it VACUOUS."""
    entry = replace(entry, mutation=m)
    if use is not None and use.holds is False and entry.verdict == Verdict.PROVEN:
        entry = replace(entry, verdict=Verdict.VACUOUS, reason=verdict.mutation_reason(use))
    return entry


# ---------------------------------------------------------------- record and publish


def record(
    req: RunRequest, doc: RunDocument, reporter: Reporter | None, comparison: Any = None
) -> tuple[bool, Path | None]:
    """Write ``--json``, the dated report folder and the ledger row; (all written?, the report folder)."""
    ok, final = True, None
    if req.json_path is not None:
        try:
            jsonfile.write(doc, req.json_path)
            if reporter is not None:
                reporter.wrote("json", req.json_path)
        except OSError as exc:
            ok = False
            if reporter is not None:
                reporter.error(f"error: --json={req.json_arg!r}: cannot write it: {exc}")
    try:
        final = report_folder.publish(req.reports_dir, doc, req.root, comparison=comparison)
        if reporter is not None:
            reporter.wrote("report", final / "index.html")
    except RunNotRecorded as exc:
        if reporter is not None:
            also = f"; --json wrote {req.json_path}" if ok and req.json_path is not None else ""
            reporter.error(
                f"error: this run was not recorded in the ledger: {exc.cause}. Nothing measured is lost: its "
                f"report is kept in {exc.kept}/ (index.html, verdicts.json){also}; compare it with "
                f"`run_obligations.py compare latest {exc.kept}`. It is in no history, so `--changed` cannot replay "
                "it and the run exits 2: fix the ledger as said and run again"
            )
        return False, None  # said in full: the generic line below would tell the user to fix the output location
    except (OSError, LedgerError) as exc:
        ok = False
        if reporter is not None:
            reporter.error(f"error: the report and ledger row could not be written to {req.reports_dir}: {exc}")
    if not ok and reporter is not None:
        reporter.error(
            "error: this run's evidence was not recorded, so its verdicts do not count (exit 2); "
            "fix the output location and run again"
        )
    return ok, final


def prove(req: RunRequest, reporter: Reporter | None = None, *, shown_cards: str = "") -> Proof:
    """Run the selected cards and record the verdicts; see the module docstring for the steps.

    Raises UsageError or CardInvalid before anything runs when the request
    cannot be carried out or recorded, and KeyboardInterrupt (nothing
    recorded) when interrupted. A Ray cluster this run started (``--executor
    ray`` without ``--ray-address``) is stopped when it returns or raises.
    """
    if req.executor.kind != RAY:
        return _prove(req, reporter, shown_cards)

    import_ray()  # UsageError with the install hint before anything else
    if req.executor.address:
        check_reachable(req.executor.address)  # a wrong address is refused in seconds, before anything runs
    try:
        return _prove(req, reporter, shown_cards)
    finally:
        close_session()


def _prove(req: RunRequest, reporter: Reporter | None, shown_cards: str) -> Proof:
    loaded = load(req.root, req.cards_dir, shown_cards or str(req.cards_dir))
    cards = expand(runnable(loaded, req.ids, req.tags, reporter), subs := resolve_subjects(req, reporter))
    marks = equivalence_marks(req, loaded, reporter) if req.mutate is not None else {}
    check_outputs(req)
    baseline = load_baseline(req)  # a baseline that names nothing is a UsageError before anything runs
    launcher = forkserver.choose()  # a bad KVPROOF_LAUNCHER is a UsageError before anything runs
    t0 = time.monotonic()
    the_plan = plan(req, loaded, cards, reporter, marks, subs)
    prov = provenance.gather(req.root, {b.path for files in the_plan.bound.values() for b in files})
    if reporter is not None:
        reporter.starting(req, the_plan.cards, list(the_plan.replays), the_plan.to_run)
        dropped = sorted(k for k in os.environ if k in INHERITED_PYTEST_VARS)
        if dropped and the_plan.to_run:
            reporter.note(
                f"note: {', '.join(dropped)} from the environment do not reach witness processes "
                "(kvproof passes its own pytest options; the project's pytest config file still applies)"
            )
        if the_plan.to_run:
            reporter.note(
                timings.schedule_line(the_plan.schedule_from, display_path(timings.path_in(req.cards_dir), req.root))
            )
    runs, where = execute(req, the_plan, reporter, launcher)
    measured: Mapping[str, MutationResult] = {}
    claims: tuple[Claim, ...] = ()
    if req.mutate is not None:
        stage = measure(req, the_plan, runs, the_plan.marks, reporter, loaded.result.cards)
        measured, claims = stage.results, stage.claims
        for cid, why in stage.skipped.items():
            if reporter is not None:
                reporter.note(f"mutate: {cid}: {why}")
    settings = data.RunSettings(
        profile=req.profile,
        seed=req.seed,
        liars=req.liars,
        default_timeout_s=req.timeout,
        command=provenance.command_line(list(req.argv)),
        root=str(req.root),
        cards_dir=str(req.cards_dir),
        jobs=req.jobs,
        changed=req.changed,
        numerics=provenance.numerics(req.root),
        launcher=launcher,
        executor=where,
        subjects=tuple(SubjectInfo(**s.to_json()) for s in the_plan.subjects),
    )
    doc = data.build(
        prov,
        settings,
        judge(the_plan, runs, measured, floors=req.profile == "release"),
        finished=provenance.utc_now(),
        wall_s=time.monotonic() - t0,
        claims=claims,
    )
    comparison = None
    if baseline is not None:
        now = {c.id: raw.decode("utf-8") for c in doc.cards if (raw := card_bytes(c.fingerprint)) is not None}
        comparison = compare(
            baseline.doc,
            doc,
            before_label=baseline.label,
            after_label="this run",
            thresholds=thresholds_from_cards(loaded.result.cards),
            card_texts=(baseline.cards, now),
        )
    if reporter is not None:
        reporter.results(build_view(doc, {}, root=req.root, comparison=comparison))
        if comparison is not None:
            reporter.baseline(comparison)
    recorded, final = record(req, doc, reporter, comparison)
    return Proof(doc, recorded, final, comparison, req.fail_on_regression)


def load_baseline(req: RunRequest):
    """The --baseline run (harness.compare_io.LoadedRun), or None; UsageError when it names nothing."""
    if not req.baseline:
        return None

    ledger = open_ledger(req.reports_dir)
    try:
        return load_ref(req.baseline, req.reports_dir, ledger)
    finally:
        if ledger is not None:
            ledger.close()
