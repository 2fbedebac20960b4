"""One run, start to finish: select -> plan -> execute -> judge -> record -> publish.

:func:`prove` is the whole of ``run_obligations.py run``, callable
in-process (tests call it; the command line only parses arguments into a
:class:`RunRequest` and hands it a :class:`Reporter`, :mod:`harness.request`).
Each step is one function, in order, and each hands the next a typed value:

- select (:mod:`harness.select.selection`): :func:`load` the cards and the liar
  index, :func:`runnable` decides what may run (the same refusals as
  ``validate``); :mod:`harness.plan.cells` expands them into cells under the
  ``--matrix`` configurations or ``--target`` targets;
- plan (:mod:`harness.plan.planning`): :func:`check_outputs` proves every output
  location writable before anything runs; :func:`plan` binds each card to
  its files and asks the ledger what ``--changed`` may replay and how long
  each process took last time (else ``obligations/timings.json``,
  :mod:`harness.plan.timings`);
- execute: :func:`harness.execute.schedule.run_cards`, one fresh pytest process per
  (card, liar);
- judge: :func:`harness.verdict.evaluate` per card;
- record: :func:`harness.record.build.build` makes the
  :class:`~harness.record.document.RunDocument`;
- publish: ``--json``, the dated report folder and the ledger row
  (:func:`record`), and the reporter shows the report view.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import verdict
from harness.compare.diff import bound_file_changes, compare, thresholds_from_cards
from harness.compare.runs import load_ref, open_ledger
from harness.errors import NO_SPACE, HarnessError, LedgerError, NoSpace, RunNotRecorded, no_space
from harness.execute import forkserver
from harness.execute.cluster import check_reachable, close_session, import_ray
from harness.execute.executor import RAY
from harness.execute.factory import make as make_executor
from harness.execute.jobs import RunConfig, count_jobs
from harness.execute.outcomes import CardRun
from harness.execute.schedule import run_cards
from harness.execute.watch import INHERITED_PYTEST_VARS
from harness.mutation.score import judges
from harness.mutation.stage import measure, traced_files
from harness.plan import subjects, timings
from harness.plan.binding import BoundFile, read_files
from harness.plan.cells import expand, resolve_subjects
from harness.plan.planning import RunPlan, check_outputs, plan
from harness.plan.subjects import Subject
from harness.project import runner, shown_path
from harness.record import build, provenance
from harness.record.document import CardResult, Claim, MutationResult, RunDocument, SinceProven, SubjectInfo
from harness.report import folder as report_folder
from harness.report import jsonfile
from harness.report.view import build_view
from harness.request import Proof, Reporter, RunRequest
from harness.select.cards import Card, card_bytes
from harness.select.selection import equivalence_marks, load, runnable
from harness.statuses import Outcome, Verdict

# the stages in code; the types they hand over live below them (harness.request, harness.plan.planning), never here
__all__ = ["execute", "judge", "load_baseline", "prove", "record"]


# ---------------------------------------------------------------- execute and judge


def execute(
    req: RunRequest, the_plan: RunPlan, reporter: Reporter | None, launcher: str | None = None
) -> tuple[dict[str, CardRun], str]:
    """Run every card that is not replayed; (card id -> its runs, where they ran: the executor's description).

    With ``req.maxfail`` (``-x`` / ``--maxfail N``) the run stops once that many cards fail the gate
    (:func:`watcher`); the cards it did not finish come back not run (ERROR, "not run: the run stopped ...")."""
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
        repro_dir=repro_dir(req),
    )
    to_run = the_plan.to_run
    total = sum(count_jobs(c, cfg, the_plan.links[c.id]) for c in to_run)
    ex = make_executor(req.executor, cfg, req.jobs)
    on_card, stopped = watcher(req, the_plan, reporter)
    if reporter is None:
        runs = run_cards(
            to_run, cfg, the_plan.links, jobs=req.jobs, expected=the_plan.expected, executor=ex, on_card=on_card
        )
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
                on_card=on_card,
            )
        if stopped[0]:
            reporter.stopped(req.maxfail, [r.card.id for r in runs if r.outcomes.link_problems == (stopped[0],)])
    return {r.card.id: r for r in runs}, ex.describe()


def stop_reason(maxfail: int) -> str:
    """Why a card was not run when the run stopped at ``-x`` / ``--maxfail N`` (its verdict: ERROR, "not run: ...")."""
    return f"the run stopped after {maxfail} failing card(s) (-x/--maxfail {maxfail})"


def watcher(
    req: RunRequest, the_plan: RunPlan, reporter: Reporter | None
) -> tuple[Callable[[CardRun], str], list[str]]:
    """(what :func:`run_cards` calls as each card's run is complete, [the stop reason once it stopped]).

    It judges the card as :func:`judge` will (:func:`card_verdict`), tells the reporter (``-v`` prints it), and
    counts the cards that fail the gate (:func:`fails_gate`: every verdict but PROVEN, as the gate counts them);
    at the ``req.maxfail``-th it returns :func:`stop_reason` and the run stops.
    """
    failing: list[str] = []
    stopped = [""]

    def on_card(run: CardRun) -> str:
        v = card_verdict(the_plan, run, floors=req.profile == "release", profile=req.profile)
        if reporter is not None:
            reporter.card_done(run.card.id, v.verdict, v.reason, run.duration)
        if not req.maxfail or stopped[0] or not fails_gate(run.card, v, the_plan.subjects):
            return ""
        failing.append(run.card.id)
        if len(failing) >= req.maxfail:
            stopped[0] = stop_reason(req.maxfail)
        return stopped[0]

    return on_card, stopped


def card_verdict(
    the_plan: RunPlan,
    run: CardRun,
    measured: MutationResult | None = None,
    *,
    floors: bool = False,
    profile: str | None = None,
) -> verdict.CardVerdict:
    """A card's verdict from its run (:func:`judge` has the rules): the mutation score measured in this run
    (``measured``), else the ledger's, judges its floor when it may; floors judge the default cells only."""
    c = run.card
    past = the_plan.mutations.get(c.id)
    use = next((x for x in (measured, past) if x is not None and judges(x)), measured or past)
    return verdict.evaluate(c, run.outcomes, use, floors=floors and c.subject == subjects.DEFAULT, profile=profile)


def fails_gate(card: Card, v: verdict.CardVerdict, subs: Sequence[Subject]) -> bool:
    """Does this verdict fail the gate? Every verdict but PROVEN does, in a cell that counts for it: a
    configuration not ``required: false``, and not a card the run's path does not apply to (every witness that
    did not pass skipped ``n/a: ...``), as :func:`harness.record.build.required_cell` decides on the document."""
    if v.verdict == Verdict.PROVEN:
        return False
    if not next((s.required for s in subs if s.name == card.subject), True):
        return False
    rest = [w for w in v.witnesses + v.controls if w.status != Outcome.PASSED]
    n_a = bool(rest) and all(
        w.status == Outcome.SKIPPED and w.why.startswith(verdict.NOT_APPLICABLE_PREFIX) for w in rest
    )
    return not (v.verdict == Verdict.UNVERIFIED and n_a)


def judge(
    the_plan: RunPlan,
    runs: Mapping[str, CardRun],
    measured: Mapping[str, MutationResult] | None = None,
    *,
    floors: bool = False,
    profile: str | None = None,
) -> list[build.CardReport | build.Replayed]:
    """Each card's verdict, in card order; replayed cards as they were (a mutate run re-judges them).

    A card's mutation score is the one ``measured`` in this run, else the
    one the ledger holds (:func:`harness.mutation.recall.recall`); only a
    score for the bytes the card is bound to now, measured on its floor's
    sample, judges its floor (:func:`harness.mutation.score.judges`): one
    measured here on another sample (``--max-mutants 1``) is shown, while
    the ledger's score on the floor's sample judges. ``profile``: the run's
    Hypothesis profile, whose budget every property is held to.
    """
    out: list[build.CardReport | build.Replayed] = []
    for c in the_plan.cards:
        now, past = (measured or {}).get(c.id), the_plan.mutations.get(c.id)
        m = now or past
        use = next((x for x in (now, past) if x is not None and judges(x)), m)  # else m: why it cannot judge
        rep = the_plan.replays.get(c.id)
        if rep is not None:
            entry = rep.entry
            if m is not None:
                entry = _with_mutation(entry, m, use)
            entry = _floor_unjudged(entry, c, use, floors and c.subject == subjects.DEFAULT)
            out.append(build.Replayed(entry, rep.run_id, rep.started, rep.report_dir))
            continue
        out.append(
            build.CardReport(
                c,
                runs[c.id],
                # a mutation score measures the witnesses, on the default configuration: floors judge its cells
                card_verdict(the_plan, runs[c.id], now, floors=floors, profile=profile),
                # bound to its named files and environment, and to every project file its processes read
                read_files(the_plan.bound[c.id], runs[c.id].reads, the_plan.scope),
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


def _floor_unjudged(entry: CardResult, card, use: MutationResult | None, floors: bool) -> CardResult:
    """A replayed PROVEN under the release profile whose floor no score on its sample judges now: UNVERIFIED."""
    why = verdict.unjudged_floor(card, use) if floors and entry.verdict == Verdict.PROVEN else ""
    return replace(entry, verdict=Verdict.UNVERIFIED, reason=why) if why else entry


# ---------------------------------------------------------------- record and publish


def repro_dir(req: RunRequest) -> Path:
    """Where this run's witnesses write reproductions of failures: a partial folder in the reports folder (swept
    when its process is gone), moved into the report folder as ``repro/`` when the run is recorded."""
    return req.reports_dir / f"{report_folder.PARTIAL}repro-{os.getpid()}"


def record(
    req: RunRequest, doc: RunDocument, reporter: Reporter | None, comparison: Any = None
) -> tuple[bool, Path | None]:
    """Write ``--json``, the dated report folder (with this run's reproductions) and the ledger row; (all
    written?, the report folder)."""
    ok, final = True, None
    if req.json_path is not None:
        try:
            jsonfile.write(doc, req.json_path)
            if reporter is not None:
                reporter.wrote("json", req.json_path)
        except OSError as exc:
            ok = False
            if reporter is not None:
                reporter.error(
                    f"error: --json={req.json_arg!r}: cannot write it: "
                    + _os_text(exc, req.json_path, "write --json elsewhere")
                )
    try:
        final = report_folder.publish(req.reports_dir, doc, req.root, comparison=comparison, extra=repro_dir(req))
        if reporter is not None:
            reporter.wrote("report", final / "index.html")
    except RunNotRecorded as exc:
        if reporter is not None:
            also = f"; --json wrote {req.json_path}" if ok and req.json_path is not None else ""
            reporter.error(
                f"error: this run was not recorded in the ledger: {exc.cause}. Nothing measured is lost: its "
                f"report is kept in {exc.kept}/ (index.html, verdicts.json){also}; compare it with "
                f"`{runner()} compare latest {exc.kept}`. It is in no history, so `--changed` cannot replay "
                "it and the run exits 2: fix the ledger as said and run again"
            )
        return False, None  # said in full: the generic line below would tell the user to fix the output location
    except (OSError, LedgerError) as exc:
        ok = False
        if reporter is not None:
            why = (
                _os_text(exc, req.reports_dir, "choose another folder with --reports")
                if isinstance(exc, OSError)
                else exc
            )
            reporter.error(f"error: the report and ledger row could not be written to {req.reports_dir}: {why}")
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
        with full_disk_named():
            return _prove(req, reporter, shown_cards)

    import_ray()  # UsageError with the install hint before anything else
    if req.executor.address:
        check_reachable(req.executor.address)  # a wrong address is refused in seconds, before anything runs
    try:
        with full_disk_named():
            return _prove(req, reporter, shown_cards)
    finally:
        close_session()


@contextmanager
def full_disk_named() -> Iterator[None]:
    """A write of the run's own (a job folder in the temp folder, a witness's plan) that finds its file system
    full ends the run as NoSpace: the place and the fix (:func:`harness.errors.no_space`), exit 2, never a
    traceback or a verdict."""
    try:
        yield
    except OSError as exc:
        if exc.errno in NO_SPACE and not isinstance(exc, HarnessError):
            raise NoSpace(exc) from exc
        raise


def _os_text(exc: OSError, path: Path, fix: str) -> str:
    """An OSError of a write in words: a full file system names the place and ``fix``."""
    return no_space(exc.filename or path, fix) if exc.errno in NO_SPACE else str(exc)


def _prove(req: RunRequest, reporter: Reporter | None, shown_cards: str) -> Proof:
    loaded = load(req.root, req.cards_dir, shown_cards or str(req.cards_dir))
    chosen = runnable(loaded, req.ids, req.tags, reporter, req.keyword)
    cards = expand(chosen, subs := resolve_subjects(req, reporter))
    marks = equivalence_marks(req, loaded, reporter) if req.mutate is not None else {}
    check_outputs(req)
    baseline = load_baseline(req)  # a baseline that names nothing is a UsageError before anything runs
    launcher = forkserver.choose()  # a bad KVPROOF_LAUNCHER is a UsageError before anything runs
    t0 = time.monotonic()
    the_plan = plan(req, loaded, cards, reporter, marks, subs)
    prov = provenance.gather(req.root, {b.path for files in the_plan.bound.values() for b in files})
    if reporter is not None:
        reporter.starting(req, the_plan.cards, list(the_plan.replays), the_plan.to_run)
        for cid, why in the_plan.not_replayed.items():
            reporter.note(f"{cid}: not replayed: {why}")
        dropped = sorted(k for k in os.environ if k in INHERITED_PYTEST_VARS)
        if dropped and the_plan.to_run:
            reporter.note(
                f"note: {', '.join(dropped)} from the environment do not reach witness processes "
                "(kvproof passes its own pytest options; the project's pytest config file still applies)"
            )
        if the_plan.to_run:
            reporter.note(
                timings.schedule_line(the_plan.schedule_from, shown_path(timings.path_in(req.cards_dir), req.root))
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
    settings = build.RunSettings(
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
    doc = build.build(
        prov,
        settings,
        judge(the_plan, runs, measured, floors=req.profile == "release", profile=req.profile),
        finished=provenance.utc_now(),
        wall_s=time.monotonic() - t0,
        claims=claims,
    )
    doc = since_proven(req, doc)
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


def since_proven(req: RunRequest, doc: RunDocument) -> RunDocument:
    """``doc`` with each card that is not PROVEN saying which of its bound files changed since the newest run of
    the ledger's history in which it was PROVEN (:func:`harness.compare.diff.bound_file_changes`), or that it
    never was (no ledger yet: never). A ledger that cannot be read leaves them unsaid: recording the run says
    what is wrong with it."""
    if all(c.verdict == Verdict.PROVEN for c in doc.cards):
        return doc
    try:
        ledger = open_ledger(req.reports_dir)
    except (LedgerError, OSError):
        return doc
    try:
        cards = []
        for c in doc.cards:
            if c.verdict == Verdict.PROVEN:
                cards.append(replace(c, since_proven=None))
                continue
            past = ledger.last_with(c.id, Verdict.PROVEN) if ledger is not None else None
            if past is None:
                cards.append(replace(c, since_proven=SinceProven(None)))
                continue
            then = [BoundFile(**f) for f in ledger.bound_files(past.run_id, c.id)]
            files = tuple(bound_file_changes(then, c.bound_files))
            cards.append(replace(c, since_proven=SinceProven(past.run_id, past.started, past.report_dir, files)))
    except (LedgerError, OSError):
        return doc
    finally:
        if ledger is not None:
            ledger.close()
    return replace(doc, cards=tuple(cards))


def load_baseline(req: RunRequest):
    """The --baseline run (harness.compare.runs.LoadedRun), or None; UsageError when it names nothing."""
    if not req.baseline:
        return None

    ledger = open_ledger(req.reports_dir)
    try:
        return load_ref(req.baseline, req.reports_dir, ledger)
    finally:
        if ledger is not None:
            ledger.close()
