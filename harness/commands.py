"""The bodies of the run_obligations.py subcommands: each takes the parsed arguments and returns an exit code.

``run`` hands a :class:`harness.request.RunRequest` to
:func:`harness.pipeline.prove`; the others read cards (:mod:`harness.select.cards`)
and the ledger (:mod:`harness.ledger.history`) and print with
:mod:`harness.report.terminal`. Argument parsing and error handling live in
:mod:`harness.cli`.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from harness import outputs
from harness.compare.diff import compare, thresholds_from_cards
from harness.compare.render import render_terminal, to_html, to_json, to_markdown
from harness.compare.runs import load_ref, open_ledger
from harness.errors import CardInvalid, HarnessError, UsageError
from harness.execute.executor import RAY, ExecutorSpec
from harness.execute.schedule import default_jobs
from harness.ledger.history import FILENAME, Ledger
from harness.mutation import generate as mutants
from harness.mutation.marks import load_marks
from harness.pipeline import prove
from harness.plan import timings, watching
from harness.plan.status import DEFAULT_ONLY, status_exit_code, status_rows
from harness.plan.subjects import split
from harness.project import project_root, runner, shown_path
from harness.record.provenance import utc_now
from harness.report import github, terminal
from harness.report.terminal import TerminalReporter
from harness.report.terminal import console as make_console
from harness.report.view import history_marks
from harness.request import MutateOptions, RunRequest
from harness.select.cards import Card, Problem, did_you_mean, display_path, load_cards, select
from harness.select.scaffold import init_project, scaffold
from harness.select.selection import load
from harness.targets import known, pyproject, registry
from harness.wire.safetext import escape as visible

if TYPE_CHECKING:
    from harness.execute.executor import ExecutorSpec

# ---------------------------------------------------------------- context


def cards_dir(args: argparse.Namespace, root: Path) -> Path:
    raw = getattr(args, "cards", None) or os.environ.get("KVPROOF_CARDS_DIR")
    if not raw:
        return root / "obligations"
    path = Path(raw).expanduser()
    path = path if path.is_absolute() else Path.cwd() / path
    if not path.is_dir():
        source = "--cards" if getattr(args, "cards", None) else "KVPROOF_CARDS_DIR"
        raise UsageError(f"{source}={raw!r} is not a folder; give a folder of card YAML files")
    return path.resolve()


def reports_dir(args: argparse.Namespace, root: Path) -> Path:
    raw = getattr(args, "reports", None) or os.environ.get("KVPROOF_REPORTS_DIR")
    if not raw:
        return root / "reports"
    path = Path(raw).expanduser()
    return (path if path.is_absolute() else Path.cwd() / path).resolve()


def _open_ledger(args: argparse.Namespace, root: Path):
    """The ledger for reading, or None when no run has written one yet (LedgerError when it is not a ledger)."""

    path = reports_dir(args, root) / FILENAME
    return Ledger(path, create=False) if path.exists() else None


def _shown(path: Path, root: Path) -> str:
    """``path`` relative to the project root when inside it; a folder ends in ``/``."""
    return _shown_dir(path, root) if path.is_dir() else shown_path(path, root)


def _shown_dir(path: Path, root: Path) -> str:
    """A folder as messages show it: relative to the root when inside it, control characters visible."""
    try:
        shown = shown_path(path, root).removesuffix("/") + "/"
    except ValueError:
        shown = str(path) + "/"
    return visible(shown, lines=False)


def _load(root: Path, folder: Path):

    loaded = load(root, folder, _shown_dir(folder, root))
    return loaded.result, loaded.sites, loaded.liar_problems


# ---------------------------------------------------------------- the project's targets


def check_project_targets(root: Path) -> None:
    """Load the targets the project's pyproject.toml declares (``[tool.kvproof] targets``) before anything runs;
    ProjectTargetsInvalid (a UsageError: exit 2, one paragraph naming the file, field and fix) when they do not.
    Witness processes load the same entries; this makes a bad one one message, not an ERROR per witness."""
    if pyproject.table(root):  # none, or an empty [tool.kvproof] (a root marker only): nothing to load
        pyproject.load(root, registry.TARGETS)


def _target_problems(root: Path) -> list[Problem]:
    """``validate``: what is wrong with the project's ``[tool.kvproof]`` table and targets, then with
    ``obligations/targets.yaml`` (its schema, that every target it names is registered, that each reproduction
    file and card exists), as problems naming the file and the field."""
    try:
        check_project_targets(root)
    except pyproject.ProjectTargetsInvalid as exc:
        field = f"{pyproject.TABLE} {exc.field}" if exc.field else ""
        return [Problem(display_path(exc.path, root), 0, field, exc.value, exc.message)]
    if not (root / known.KNOWN_PATH).is_file():
        return []
    try:
        known.load(root)
    except known.KnownInvalid as exc:
        return [Problem(display_path(exc.path, root), 0, exc.where, "", exc.message)]
    return []


# ---------------------------------------------------------------- run


def cmd_run(args: argparse.Namespace) -> int:
    return _prove(args)


def cmd_mutate(args: argparse.Namespace) -> int:
    """``mutate``: run the cards, then their mutants (harness.mutation.score); or ``--show KEY``: print one mutant."""

    if args.show:
        return _show_mutant(args.show)
    for key in args.mutant:
        mutants.find(project_root(), key)  # LiarError (exit 2) names a key that is not a mutant of the code now
    return _prove(
        args,
        MutateOptions(
            max_mutants=None if args.max_mutants == 0 else args.max_mutants,
            seed=args.seed if args.seed is not None else 0,
            only=tuple(args.mutant),
            fast=not args.slow,
        ),
    )


def _show_mutant(key: str) -> int:

    root = project_root()
    mutant, _, _ = mutants.find(root, key)  # LiarError (a HarnessError) names the key and the fix
    console = make_console()
    console.print(
        f"{mutant.key}  {mutant.qualname}  ({mutant.operator}: {mutant.change})", markup=False, highlight=False
    )
    console.print(mutants.diff(root, mutant), markup=False, highlight=False)
    return 0


def _prove(args: argparse.Namespace, mutate=None) -> int:

    root = project_root()
    check_project_targets(root)
    oracle_dir = Path(args.oracle_dir).expanduser().resolve() if args.oracle_dir else None
    if oracle_dir is not None and not oracle_dir.is_dir():
        raise UsageError(
            f"--oracle-dir={args.oracle_dir!r} is not a folder; export one with `{runner()} oracle export`"
        )
    json_path = None
    if args.json:
        json_path = Path(args.json).expanduser()
        json_path = json_path if json_path.is_absolute() else Path.cwd() / json_path
    source = (
        "--reports"
        if args.reports
        else ("KVPROOF_REPORTS_DIR" if os.environ.get("KVPROOF_REPORTS_DIR") else "the reports folder")
    )
    # mutate's --seed picks the mutants; its witnesses run with the profile's Hypothesis seed
    hypothesis_seed = args.seed if mutate is None else args.hypothesis_seed
    req = RunRequest(
        root=root,
        cards_dir=cards_dir(args, root),
        reports_dir=reports_dir(args, root),
        reports_source=source,
        ids=tuple(args.ids),
        tags=tuple(args.tag),
        keyword=getattr(args, "keyword", "") or "",
        profile=args.profile,
        seed=hypothesis_seed
        if hypothesis_seed is not None
        else (0 if args.profile == "ci" else random.randrange(2**32)),
        liars=not args.no_liars,
        timeout=args.timeout,
        jobs=default_jobs() if args.jobs is None else args.jobs,
        changed=args.changed,
        json_path=json_path,
        json_arg=args.json or "",
        oracle_dir=oracle_dir,
        argv=recorded_argv(args.argv),
        mutate=mutate,
        rerun_failed=getattr(args, "rerun_failed", False),
        baseline=getattr(args, "baseline", None),
        fail_on_regression=getattr(args, "fail_on_regression", False),
        executor=executor_spec(args),
        force=args.force,
        matrix=_matrix(args),
        targets=getattr(args, "target", None),
        maxfail=getattr(args, "maxfail", 0) or 0,
    )
    if req.fail_on_regression and not req.baseline:
        raise UsageError(
            "--fail-on-regression needs --baseline REF: the run it must not regress against "
            "(e.g. --baseline latest, or a release's verdicts.json)"
        )
    verbosity = getattr(args, "verbose", 0) - getattr(args, "quiet", 0)
    reporter = TerminalReporter(make_console(), make_console(stderr=True), lambda p: _shown(p, root), verbosity)
    if getattr(args, "watch", False):
        return _watch(req, reporter, _shown_dir(req.cards_dir, root), _Watching(args.watch_interval, args.watch_runs))
    return _published(prove(req, reporter, shown_cards=_shown_dir(req.cards_dir, root)))


def _published(proof) -> int:
    """The run's exit code, once a GitHub Actions job has its annotations and summary (when it is one)."""
    if github.wanted():  # a GitHub Actions job: annotations on the cards, verdicts.md as the job summary
        github.publish(proof.doc, proof.report_dir)
    return proof.exit_code


# ---------------------------------------------------------------- run: what is recorded, --watch

TERMINAL_ONLY = ("--verbose", "--quiet", "--watch")  # options that change only the terminal, or whether it watches
WATCH_HOOKS = ("--watch-interval", "--watch-runs")  # --watch's test hooks (they take a value)


def recorded_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """The command line a run records (report header, replay hints): as typed, less ``-v`` / ``-q`` (counted,
    clustered as ``-vv`` or ``-xv``), ``--watch`` and its hooks, so that how much the terminal shows, or a watch,
    changes nothing the run writes. Long options as argparse takes them, abbreviated too."""
    out: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        name, eq, _ = token.partition("=")
        if len(name) > 2 and name.startswith("--"):
            hook = [o for o in WATCH_HOOKS if o.startswith(name)]
            if len(hook) == 1 and name not in TERMINAL_ONLY:
                skip = not eq
                continue
            if not eq and any(o.startswith(name) for o in TERMINAL_ONLY):
                continue
        if re.fullmatch(r"-[vqx]+", token):
            kept = token.replace("v", "").replace("q", "")
            out += [kept] if kept != "-" else []
            continue
        out.append(token)
    return tuple(out)


@dataclass(frozen=True)
class _Watching:
    interval: float = 1.0  # seconds between polls
    runs: int | None = None  # return after this many runs (a test hook); None: until Ctrl-C


def _watch(req: RunRequest, reporter: TerminalReporter, shown_cards: str, how: _Watching) -> int:
    """``run --watch``: run, then poll the files each card is bound to (:mod:`harness.plan.watching`) and run again
    the cards whose files changed, naming the file. A run that cannot start (a card broken by the edit) is said
    and the watch goes on. Returns the last run's exit code after ``how.runs`` runs; Ctrl-C ends it (exit 130)."""
    proof = prove(req, reporter, shown_cards=shown_cards)  # the first run refuses bad usage at once (exit 2)
    code, files = _published(proof), watching.card_files(proof.doc)
    seen = watching.snapshot(req.root, {p for paths in files.values() for p in paths})
    runs = 1
    while how.runs is None or runs < how.runs:
        reporter.announce(
            f"watch: watching {len(seen)} file(s) of {len(files)} card(s), every {how.interval:g} s; Ctrl-C stops"
        )
        hit, now = _wait_for_change(req.root, files, seen, how.interval)
        ids = list(dict.fromkeys(split(cid)[0] for cid in hit))
        reporter.announce(watching.trigger_text(hit, ids))
        seen = dict(now)  # taken before the run: an edit while it runs is seen by the next poll
        argv = _rerun_argv(req.argv, req.ids, ids)
        again = replace(req, ids=tuple(ids), tags=(), keyword="", changed=False, rerun_failed=False, argv=argv)
        code, done = _run_again(again, reporter, shown_cards)
        runs += 1
        if done is not None:
            new = watching.card_files(done)
            files.update(new)
            fresh = {p for paths in new.values() for p in paths if p not in seen}
            seen.update(watching.snapshot(req.root, fresh))
    return code


def _wait_for_change(
    root: Path, files: Mapping[str, Sequence[str]], seen: Mapping[str, Any], interval: float
) -> tuple[dict[str, tuple[str, ...]], dict[str, Any]]:
    """Poll every ``interval`` seconds until some card's files changed; (card id -> the files that changed, the
    snapshot that saw it), once two polls a short while apart agree (an editor's save is often two writes)."""
    while True:
        time.sleep(interval)
        now = watching.snapshot(root, seen)
        hit = watching.touched(seen, now, files)
        if not hit:
            continue
        for _ in range(10):
            time.sleep(min(interval, 0.2))
            settled = watching.snapshot(root, seen)
            if settled == now:
                break
            now = settled
        return watching.touched(seen, now, files) or hit, now


_SELECTING = ("-k", "--tag")  # options (with a value) that chose the first run's cards: a later run names its own
_REPLAYING = ("--changed", "--rerun-failed", "--lf")  # flags a later run does not take (it runs its cards for real)


def _rerun_argv(argv: Sequence[str], given: Sequence[str], ids: Sequence[str]) -> tuple[str, ...]:
    """The command a watch's later run records: the first one's without what selected or replayed its cards (the
    ids or globs ``given``, -k, --tag, --changed, --lf), with the ids of the cards it runs again."""
    out: list[str] = []
    skip = False
    for t in argv:
        if skip:
            skip = False
            continue
        if t in _SELECTING:
            skip = True
            continue
        if t in _REPLAYING or t in set(given) or any(t.startswith(o + "=") for o in ("--tag", "-k")):
            continue
        if t.startswith("-k") and len(t) > 2:  # -kEXPR
            continue
        out.append(t)
    return (*out, *ids)


def _run_again(req: RunRequest, reporter: TerminalReporter, shown_cards: str):
    """(exit code, the run's document or None) of one of a watch's later runs; one that cannot start is said."""
    try:
        proof = prove(req, reporter, shown_cards=shown_cards)
    except CardInvalid as exc:
        terminal.render_problems(
            reporter.err, exc.problems, f"cannot run: {len(exc.problems)} problem(s) in the cards; still watching:"
        )
        return 2, None
    except HarnessError as exc:
        reporter.error(f"error: {exc}; still watching")
        return 2, None
    return _published(proof), proof.doc


def _matrix(args: Any) -> tuple[str, ...] | None:
    """--matrix NAMES as given; none given: every configuration under --profile release, else a plain run."""
    given = getattr(args, "matrix", None)
    if given is not None:
        return tuple(given)
    return () if args.profile == "release" else None


def executor_spec(args: Any) -> ExecutorSpec:
    """--executor, --ray-address (else RAY_ADDRESS), --ray-ship and whether -j was given; UsageError when they
    do not fit together."""

    if args.executor != RAY:
        for opt, value in (("--ray-address", args.ray_address), ("--ray-ship", args.ray_ship)):
            if value:
                raise UsageError(
                    f"{opt}={value!r} needs --executor ray (the local executor runs on this machine "
                    "only); add --executor ray or leave it out"
                )
        return ExecutorSpec()
    address = args.ray_address or os.environ.get("RAY_ADDRESS") or None
    return ExecutorSpec(RAY, address, args.ray_ship or "auto", jobs_given=args.jobs is not None)


# ---------------------------------------------------------------- list / validate / show


def cmd_list(args: argparse.Namespace) -> int:

    root = project_root()
    result, _, liar_problems = _load(root, cards_dir(args, root))
    terminal.render_list(make_console(), result.cards)
    broken = list(result.load_problems) + list(liar_problems)
    if broken:
        terminal.render_problems(
            make_console(stderr=True),
            broken,
            f"{len(broken)} problem(s) kept some cards or liars from loading (`{runner()} validate` explains each):",
        )
        return 2
    return 0


def cmd_validate(args: argparse.Namespace) -> int:

    root = project_root()
    folder = cards_dir(args, root)
    console = make_console()
    result, _, liar_problems = _load(root, folder)
    marks, mark_problems = load_marks(folder, root, [c.id for c in result.cards])
    stale = [p for p in mark_problems if p.kind == "stale"]
    problems = list(result.problems) + list(liar_problems) + [p for p in mark_problems if p.kind != "stale"]
    problems += _timings_problems(folder, root)  # `run` refuses a malformed timings.json too
    problems += _target_problems(root)  # `run` refuses targets that do not load too (check_project_targets)
    if stale:
        terminal.render_problems(
            make_console(stderr=True),
            stale,
            f"warning: {len(stale)} equivalence mark(s) match no mutant of the code as it is "
            "now (mutate leaves them out); mark the current keys again:",
        )
    if problems:
        bad = len({p.path for p in problems})
        terminal.render_problems(console, problems, f"{len(problems)} problem(s) in {bad} file(s):")
        return 2
    console.print(
        f"[green]ok[/]: {len(result.cards)} card(s) in {_shown_dir(folder, root)} are valid"
        + (f", and {len(marks)} equivalence mark(s)" if marks else "")
    )
    return 0


def cmd_show(args: argparse.Namespace) -> int:

    root = project_root()
    folder = cards_dir(args, root)
    result, sites, _ = _load(root, folder)
    card = next((c for c in result.cards if c.id == args.id), None)
    if card is None:
        ids = [c.id for c in result.cards]
        raise UsageError(f"no card with id={args.id!r}{did_you_mean(args.id, ids)}; `{runner()} list` shows the ids")
    console = make_console()
    last, note = None, f"never run (run it with `{runner()} run {card.id}`)"
    ledger = _open_ledger(args, root)
    if ledger is not None:
        with ledger:
            row = status_rows(ledger, [card], root, sites, None, cells=DEFAULT_ONLY)[0]
            if row.last is not None:
                last = {"run_started": row.last.started, **ledger.entry(row.last.run_id, card.id).to_json()}
                note = "" if not row.changed else f" (STALE: {', '.join(row.changed)}; that verdict may not apply)"
    terminal.render_card(console, card, last, note)
    problems = result.link_problems(card.id)
    if problems:
        terminal.render_problems(console, problems, "problems:")
    return 0


# ---------------------------------------------------------------- status / history


def cmd_status(args: argparse.Namespace) -> int:

    root = project_root()
    folder = cards_dir(args, root)
    result, sites, _ = _load(root, folder)
    cards = select(result.cards, args.ids, ())
    oracle_dir = Path(args.oracle_dir).expanduser().resolve() if args.oracle_dir else None
    ledger = _open_ledger(args, root)
    try:
        rows = status_rows(ledger, cards, root, sites, oracle_dir, cells=args.cells, cards_dir=folder)
    finally:
        if ledger is not None:
            ledger.close()
    console = make_console()
    terminal.render_status(console, rows)
    if ledger is None:
        console.print(
            f"no ledger in {_shown_dir(reports_dir(args, root), root)} yet: run the obligations once (`{runner()} run`)"
        )
    if result.load_problems:
        terminal.render_problems(
            make_console(stderr=True),
            result.load_problems,
            f"{len(result.load_problems)} problem(s) kept some cards from loading:",
        )
    return status_exit_code(rows)


def cmd_history(args: argparse.Namespace) -> int:

    root = project_root()
    ledger = _open_ledger(args, root)
    console = make_console()
    if ledger is None:
        console.print(f"no runs recorded in {_shown_dir(reports_dir(args, root), root)} yet")
        return 0
    with ledger:
        if not args.ids:
            terminal.render_runs(console, ledger.runs(args.limit))
            return 0
        known = ledger.card_ids()
        for card_id in args.ids:
            if card_id not in known:
                raise UsageError(
                    f"card id {card_id!r} has no recorded verdict{did_you_mean(card_id, sorted(known))}; "
                    f"`{runner()} history` lists the runs"
                )
            past = ledger.history(card_id)
            terminal.render_history(
                console, card_id, list(zip(past, history_marks(past, None), strict=False))[-args.limit :]
            )
    return 0


# ---------------------------------------------------------------- compare


def _write_text(raw: str, text: str, what: str) -> None:
    """Write ``text`` to ``raw`` ('-': stdout) atomically (checked before anything was read:
    :func:`_write_text_check`); a file that cannot be written is a UsageError."""
    if raw == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    try:
        outputs.write_atomic(outputs.target(Path(raw)), text)
    except OSError as e:
        raise UsageError(f"--{what}={raw!r}: cannot write it ({e.strerror or e}); give a writable path") from e


def comparison_thresholds(args: argparse.Namespace, root: Path):
    """(card, witness, key) -> fraction from the cards as they are now (a card that does not load adds none)."""

    try:
        return thresholds_from_cards(load_cards(cards_dir(args, root), root).cards)
    except UsageError:
        return {}


def cmd_compare(args: argparse.Namespace) -> int:
    import json

    root = project_root()
    reports = reports_dir(args, root)
    try:
        folder = cards_dir(args, root)
    except UsageError:  # compare reads no card it cannot find; its outputs are kept out of the default folder
        folder = root / "obligations"
    places = outputs.Places(root, folder, reports)
    chosen = [(args.json, "json"), (args.markdown, "markdown"), (args.html, "html")]
    outputs.check_distinct(
        (f"--{what}={raw!r}", _write_text_check(raw, what, places, args.force))
        for raw, what in chosen
        if raw and raw != "-"
    )
    ledger = open_ledger(reports)
    try:
        a = load_ref(args.before, reports, ledger)
        b = load_ref(args.after, reports, ledger)
    finally:
        if ledger is not None:
            ledger.close()
    cmp = compare(
        a.doc,
        b.doc,
        before_label=a.label,
        after_label=b.label,
        thresholds=comparison_thresholds(args, root),
        card_texts=(a.cards, b.cards),
    )
    to_stdout = "-" in (args.json, args.markdown)
    if not to_stdout:
        render_terminal(make_console(), cmp, all_cards=args.all)
    if args.json:
        _write_text(args.json, json.dumps(to_json(cmp), indent=2, ensure_ascii=False), "json")
    if args.markdown:
        md = to_markdown(cmp)
        _write_text(args.markdown, md if args.markdown == "-" else f"{outputs.MARKDOWN_MARKER}\n{md}", "markdown")
    if args.html:
        page = to_html(cmp)
        if args.html != "-":  # the marker goes after the doctype: a comment before it can change how a browser reads
            first, nl, rest = page.partition("\n")
            page = f"{first}\n{outputs.HTML_MARKER}\n{rest}" if nl else f"{outputs.HTML_MARKER}\n{page}"
        _write_text(args.html, page, "html")
    return 1 if (args.fail_on_regression and cmp.regressions) else 0


def _write_text_check(raw: str, what: str, places: Any, force: bool) -> Path:
    """The output path, or a UsageError for one that cannot be written or would replace an input or an
    existing file that is not a previous output of the same kind (:mod:`harness.outputs`; checked before
    anything is read)."""
    path = Path(raw).expanduser()
    path = path if path.is_absolute() else Path.cwd() / path
    if path.is_dir():
        raise UsageError(f"--{what}={raw!r} is a folder; give a file path (or '-' for stdout)")
    if not path.parent.is_dir():
        raise UsageError(f"--{what}={raw!r}: the folder {path.parent} does not exist; create it or give another path")
    kind = {"json": outputs.COMPARE_JSON, "markdown": outputs.MARKDOWN, "html": outputs.HTML}[what]
    return outputs.check_file(path, f"--{what}={raw!r}", kind, places, force=force)


# ---------------------------------------------------------------- timings


def _timings_problems(folder: Path, root: Path) -> list:
    try:
        timings.read(folder, root)
    except timings.TimingsInvalid as exc:
        return [replace(exc.problem, message=f"{exc.problem.message}; {timings.fix()}")]
    return []


@dataclass(frozen=True)
class _LedgerTimings:
    """What the ledger says of the cards' timings (:func:`_timings_measured`)."""

    found: bool  # there is a ledger
    measured: dict[str, timings.Recorded]  # card or cell id -> its latest entry's timings
    source: str  # the runs they come from, said
    cells: dict[str, list[str]]  # card id -> the ids of its other cells the ledger holds (run --matrix/--target)


def cmd_timings(args: argparse.Namespace) -> int:
    """``timings``: per card (then each of its cells ``CARD@NAME``) and liar, the expected seconds the scheduler
    would use and where each comes from; ``--write``: save the ledger's latest entry of each card and cell as
    ``<cards>/timings.json``."""

    root = project_root()
    folder = cards_dir(args, root)
    cards = _load(root, folder)[0].cards
    reports = _shown_dir(reports_dir(args, root), root)
    shown_file = _shown(timings.path_in(folder), root)
    got = _timings_measured(args, root, cards, reports)
    console = make_console()
    if args.write:
        _timings_write(console, folder, root, cards, reports, shown_file, got)
    else:
        _timings_show(console, folder, root, cards, reports, shown_file, got)
    return 0


def _timings_measured(args: argparse.Namespace, root: Path, cards: Sequence[Card], reports: str) -> _LedgerTimings:
    """The latest ledger entry of each card and of each of its cells the ledger holds."""
    measured, source = {}, ""
    cells: dict[str, list[str]] = {}
    ledger = _open_ledger(args, root)
    if ledger is not None:
        with ledger:
            for card in cards:
                cells[card.id] = ledger.cells(card.id)
                for cid in [card.id, *cells[card.id]]:
                    if (rec := timings.from_ledger(ledger, cid)) is not None:
                        measured[cid] = rec
            if measured:
                source = timings.ledger_source(ledger, [r.run_id for r in measured.values()], reports)
    return _LedgerTimings(ledger is not None, measured, source, cells)


def _timings_write(
    console: Console,
    folder: Path,
    root: Path,
    cards: Sequence[Card],
    reports: str,
    shown_file: str,
    got: _LedgerTimings,
) -> None:
    """``timings --write``: the ledger's latest entry of each card and cell into ``<cards>/timings.json``."""
    measured, source = got.measured, got.source
    if not measured:
        where = (
            f"there is no ledger in {reports}"
            if not got.found
            else f"the ledger {reports}ledger.sqlite has no verdict of any card in {_shown_dir(folder, root)}"
        )
        raise UsageError(
            f"timings --write: nothing to write, {where}; run the obligations once on this machine "
            f"(`{runner()} run`), then `{runner()} timings --write`"
        )
    try:
        timings.write(folder, {cid: r.expected for cid, r in measured.items()}, source, utc_now())
    except OSError as exc:
        raise UsageError(
            f"timings --write: cannot write {shown_file} ({exc.strerror or exc}); fix the folder's "
            "permissions or give another --cards DIR"
        ) from None
    n_cells = sum(1 for cid in measured if split(cid)[0] != cid)
    also = f" and {n_cells} cell(s) of --matrix / --target runs" if n_cells else ""
    console.print(
        f"wrote {shown_file}: the expected seconds of {len(measured) - n_cells} card(s){also} from {source}; "
        "commit it so that runs with no ledger (a fresh clone, CI) schedule by it",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    missing = [c.id for c in cards if c.id not in measured]
    if missing:
        console.print(
            f"left out (no ledger entry, so unknown: 1 s a process): {', '.join(missing)}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )


def _timings_show(
    console: Console,
    folder: Path,
    root: Path,
    cards: Sequence[Card],
    reports: str,
    shown_file: str,
    got: _LedgerTimings,
) -> None:
    """``timings``: the table of expected seconds, then where they come from (the ledger, timings.json)."""
    hints = timings.read(folder, root)  # TimingsInvalid (exit 2) for a malformed file, as `run` would
    hinted = hints.cards if hints is not None else {}
    rows = _timings_rows(cards, got, hinted)
    measured = got.measured
    expected, sources = timings.combine([r.id for r in rows], {cid: r.expected for cid, r in measured.items()}, hinted)
    terminal.render_timings(console, rows, expected, sources, shown_file)
    n_cells = sum(1 for cid in measured if split(cid)[0] != cid)
    lines = [
        f"ledger: {len(measured) - n_cells} card(s){f' and {n_cells} cell(s)' if n_cells else ''} from {got.source} "
        f"in {reports}ledger.sqlite"
        if measured
        else f"ledger: no entry for these cards in {reports} (a fresh clone: timings.json decides)"
    ]
    if hints is None:
        lines.append(f"{shown_file}: none (`{runner()} timings --write` writes it from the ledger)")
    else:
        used = sum(1 for s in sources.values() if s == timings.FILE)
        lines.append(
            f"{shown_file}: recorded {hints.recorded} from {hints.source}; used for {used} card(s) "
            "(a ledger entry wins)"
        )
        stale = timings.stale_entries(hints, cards)
        if stale:
            lines.append(f"{shown_file}: ignored, no such card or liar now: {', '.join(stale)}")
    for line in lines:
        console.print(line, soft_wrap=True, markup=False, highlight=False)


def _timings_rows(cards: Sequence[Card], got: _LedgerTimings, hinted: Mapping[str, timings.Expected]) -> list[Card]:
    """Each card, then its cells with an entry of their own (in the ledger or the file)."""
    rows = []
    for card in cards:
        rows.append(card)
        own = sorted(set(got.cells.get(card.id, ())) | {cid for cid in hinted if split(cid)[0] == card.id != cid})
        for cid in own:
            exp = got.measured[cid].expected if cid in got.measured else hinted.get(cid)
            liars = tuple(n for n in card.liars if exp is not None and n in exp.liars_s)  # the liars that ran there
            rows.append(replace(card, id=cid, subject=split(cid)[1], card_id=card.id, liars=liars))
    return rows


# ---------------------------------------------------------------- new


def cmd_init(args: argparse.Namespace) -> int:

    dest = Path(args.dir)
    written = init_project(dest)
    console = make_console()
    for path in written:
        console.print(f"wrote {os.path.relpath(path)}")
    here = "" if dest.resolve() == Path.cwd().resolve() else f"cd {shlex.quote(args.dir)} && "
    console.print(
        f"next: `{here}{runner(absolute=bool(here))} run` proves EXAMPLE-HANDLES on the example cache; then replace "
        "example_cache.py with your cache and map its calls in example_kvproof.py (docs/prove-your-own-cache.md)"
    )
    return 0


def cmd_new(args: argparse.Namespace) -> int:

    root = project_root()
    card_path, witness_rel = scaffold(root, cards_dir(args, root), args.id)
    console = make_console()
    console.print(f"created {display_path(card_path, root)} and {witness_rel}")
    console.print(
        f"next: replace the card's TODO placeholders and list the symbols its proof cites under refs, write the "
        f"witness, then `{runner()} run {args.id}` (ERROR while a placeholder is left, FAILED until the witness "
        "is written)"
    )
    return 0
