"""run_obligations.py command line: run | list | validate | show ID | status | history [ID] | new ID | oracle ...

``run --changed`` replays a card's last PROVEN verdict when every file it is
bound to has the same sha256 as then (see :mod:`harness.ledger`); ``-j N``
runs N witness processes at a time (:mod:`harness.schedule`).

Exit codes: 0 every selected card PROVEN (or the command succeeded),
1 some selected card is not PROVEN, 2 bad usage or invalid cards,
130 interrupted. Mistakes a user can make end in a message, never a
traceback.

The project root (where ``impl/``, ``witnesses/`` and ``obligations/`` live,
and what paths in cards are relative to) is the folder of
run_obligations.py, or ``KVPROOF_ROOT``. Cards are read from
``--cards DIR``, else ``KVPROOF_CARDS_DIR``, else ``<root>/obligations``.
Every run writes a dated report folder and a ledger row under ``--reports
DIR``, else ``KVPROOF_REPORTS_DIR``, else ``<root>/reports`` (see
:mod:`harness.report.folder`); ``status`` exits 1 unless every card's last
verdict is PROVEN and still bound to the same bytes.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from harness.errors import CardInvalid, HarnessError, LedgerError, UsageError
from harness.project import project_root
from harness.statuses import Gate

SUBCOMMANDS = ("run", "list", "validate", "show", "status", "history", "new", "oracle")


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
    """The ledger for reading, or None when no run has written one yet."""
    from harness.ledger import FILENAME, Ledger

    path = reports_dir(args, root) / FILENAME
    return Ledger(path, create=False) if path.is_file() else None


def _console(stderr: bool = False):
    from rich.console import Console

    probe = Console(stderr=stderr)
    # logs (CI) are read in wide viewers: 160 columns keeps one card per row
    width = None if probe.is_terminal else int(os.environ.get("COLUMNS", "160"))
    return Console(stderr=stderr, width=width, highlight=False)


def _shown_dir(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix() + "/"
    except ValueError:
        return str(path) + "/"


def _load(root: Path, folder: Path):
    """Cards, the liar index, and the liar index's own problems (as :class:`harness.cards.Problem` objects).

    Raises UsageError when the folder holds no card file: ``run``, ``list``
    and ``validate`` all refuse an empty folder alike.
    """
    from harness.cards import Problem, find_card_files, load_cards
    from harness.liars import scan

    if not find_card_files(folder):
        raise UsageError(f"no cards found in {_shown_dir(folder, root)}; add one with `run_obligations.py new ID` "
                         "or point --cards at the folder that holds them")
    sites, liar_problems = scan(root)
    result = load_cards(folder, root, sites)
    extra = tuple(Problem(p.path, p.line, p.field, p.value, p.message) for p in liar_problems)
    return result, sites, extra


def _runnable(result, liar_problems, args: argparse.Namespace):
    """The cards a run may use, or CardInvalid.

    ``validate`` and ``run`` refuse the same things: a full run (no ids, no
    tags) stops on any card that does not load and on any problem in the
    liar index. A run of a selection goes ahead when none of the selected
    ids matches a broken card and no selected card lists a liar whose
    registration is broken; the other broken files are named as a warning.
    """
    from fnmatch import fnmatchcase

    from harness.cards import select

    broken = list(result.load_problems) + list(liar_problems)
    if not broken:
        return select(result.cards, args.ids, args.tag)
    if not args.ids and not args.tag:
        raise CardInvalid(broken)
    hit = [p for p in result.load_problems
           if p.path in result.broken_ids and any(fnmatchcase(result.broken_ids[p.path], pat) for pat in args.ids)]
    hit += [p for p in liar_problems if p.field != "name"]  # an unreadable liar module may hold any name
    if hit:
        raise CardInvalid(hit)
    selected = select(result.cards, args.ids, args.tag)
    named = {n for c in selected for n in c.liars}
    hit = [p for p in liar_problems if p.field == "name" and p.value.strip("'\"") in named]
    if hit:
        raise CardInvalid(hit)
    from harness.report import terminal

    terminal.render_problems(_console(stderr=True), broken,
                             f"warning: {len(broken)} problem(s) in cards that are not selected "
                             f"(`run_obligations.py validate` lists them); running the selection:")
    return selected


# ---------------------------------------------------------------- run


def cmd_run(args: argparse.Namespace) -> int:
    from harness import provenance, verdict
    from harness.binding import bound_files
    from harness.report import data, terminal
    from harness.run import RunConfig
    from harness.schedule import default_jobs

    root = project_root()
    folder = cards_dir(args, root)
    console = _console()
    jobs = default_jobs() if args.jobs is None else args.jobs
    result, sites, liar_problems = _load(root, folder)
    selected = _runnable(result, liar_problems, args)
    seed = args.seed if args.seed is not None else (0 if args.profile == "ci" else random.randrange(2**32))
    oracle_dir = Path(args.oracle_dir).expanduser().resolve() if args.oracle_dir else None
    if oracle_dir is not None and not oracle_dir.is_dir():
        raise UsageError(f"--oracle-dir={args.oracle_dir!r} is not a folder; "
                         "export one with `run_obligations.py oracle export`")
    outputs = _check_outputs(args, root)  # before any witness runs: a run that cannot record must not start
    cfg = RunConfig(root=root, profile=args.profile, seed=seed, default_timeout=args.timeout,
                    liars=not args.no_liars, oracle_dir=oracle_dir)
    header = provenance.header(root, profile=args.profile, seed=seed, argv=args.argv, cards_dir=folder,
                               liars=cfg.liars, default_timeout=cfg.default_timeout)
    header["jobs"] = jobs
    header["changed"] = bool(args.changed)
    t0 = time.monotonic()
    links = {c.id: tuple(str(p) for p in result.link_problems(c.id)) for c in selected}
    bound = {c.id: bound_files(c, root, sites, _oracle_files(c, oracle_dir)) for c in selected}
    replays, expected = _from_ledger(args, root, selected, links, bound)
    to_run = [c for c in selected if c.id not in replays]
    threads = "" if jobs == 1 else " (1 BLAS thread each)"
    console.print(f"kvproof: {len(selected)} card(s) from {_shown_dir(folder, root)}, profile {args.profile}, "
                  f"seed {seed} (replay with --profile {args.profile} --seed {seed}), -j {jobs}{threads}")
    if args.changed:
        console.print(f"--changed: {len(replays)} card(s) replayed (bound files unchanged since their last PROVEN "
                      f"verdict), {len(to_run)} to run" + (f": {', '.join(c.id for c in to_run)}" if to_run else ""),
                      soft_wrap=True)
    runs = _execute(console, to_run, cfg, links, jobs, expected)
    by_id = {r.card.id: r for r in runs}
    reports = [replays[c.id] if c.id in replays else
               data.CardReport(c, by_id[c.id], verdict.evaluate(c, by_id[c.id].outcomes), bound[c.id])
               for c in selected]
    doc = data.build(header, reports, finished=provenance.utc_now(), wall_s=time.monotonic() - t0)
    terminal.render_run(console, doc)
    terminal.render_timing(console, doc["timing"])
    recorded = _record(args, root, doc, console, outputs)
    if not recorded:
        return 2
    return 0 if doc["header"]["summary"]["gate"] == Gate.PASS else 1


def _execute(console, to_run, cfg, links, jobs: int, expected):
    """Run the cards' jobs with a progress bar (on a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from harness.run import count_jobs
    from harness.schedule import run_cards

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("starting", total=sum(count_jobs(c, cfg, links[c.id]) for c in to_run))

        def on_start(job, running) -> None:
            progress.update(task, description="running " + ", ".join(j.label for j in running))

        def on_done(job, settled: int) -> None:
            progress.update(task, completed=settled)  # liars that did not need to run count as done

        return run_cards(to_run, cfg, links, jobs=jobs, expected=expected, on_start=on_start, on_done=on_done)


def _check_outputs(args: argparse.Namespace, root: Path) -> dict[str, Path]:
    """Check every place the run will write, before anything runs; UsageError names the first that fails.

    The reports folder must exist or be creatable and be writable, the
    ledger in it must open for writing (an old ledger is migrated here),
    and ``--json PATH`` must be a file path in a writable folder.
    """
    from harness.ledger import FILENAME, Ledger

    reports = reports_dir(args, root)
    source = "--reports" if getattr(args, "reports", None) else (
        "KVPROOF_REPORTS_DIR" if os.environ.get("KVPROOF_REPORTS_DIR") else "the reports folder")
    _writable_folder(reports, f"{source}={str(reports)!r}", "give a folder you can write to with --reports DIR")
    try:
        Ledger(reports / FILENAME, create=True).close()
    except LedgerError as exc:
        raise UsageError(f"{source}: the ledger {reports / FILENAME} cannot be opened for writing: {exc}; "
                         "fix its permissions, move it away, or give another --reports DIR") from None
    out = {"reports": reports}
    if args.json:
        path = Path(args.json).expanduser()
        path = (path if path.is_absolute() else Path.cwd() / path)
        if path.is_dir():
            raise UsageError(f"--json={args.json!r} is a folder; give a file path such as {args.json.rstrip('/')}/"
                             "verdicts.json")
        if path.exists() and not os.access(path, os.W_OK):
            raise UsageError(f"--json={args.json!r}: the file exists and is not writable; fix its permissions "
                             "or give another path")
        _writable_folder(path.parent, f"--json={args.json!r}", "give a path in a folder you can write to")
        out["json"] = path
    return out


def _writable_folder(folder: Path, what: str, fix: str) -> None:
    """Create ``folder`` if needed and prove it writable by creating a file in it."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".kvproof-write-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageError(f"{what}: cannot write there ({reason}); {fix}") from None


def _record(args: argparse.Namespace, root: Path, doc: dict[str, Any], console, outputs: dict[str, Path]) -> bool:
    """Write ``--json``, the dated report folder and the ledger row. False (after saying why) if any failed."""
    from harness.report import folder as report_folder
    from harness.report import jsonfile

    err = _console(stderr=True)
    ok = True
    if "json" in outputs:
        try:
            jsonfile.write(doc, outputs["json"])
            console.print(f"wrote {outputs['json']}", soft_wrap=True)
        except OSError as exc:
            err.print(f"run_obligations.py: error: --json={args.json!r}: cannot write it: {exc}", soft_wrap=True)
            ok = False
    try:
        final = report_folder.publish(outputs["reports"], doc, root)
        console.print(f"report {_shown_dir(final, root)}index.html", soft_wrap=True)
    except (OSError, LedgerError) as exc:
        err.print(f"run_obligations.py: error: the report and ledger row could not be written to "
                  f"{outputs['reports']}: {exc}", soft_wrap=True)
        ok = False
    if not ok:
        err.print("run_obligations.py: error: this run's evidence was not recorded, so its verdicts do not count "
                  "(exit 2); fix the output location and run again", soft_wrap=True)
    return ok


def _from_ledger(args: argparse.Namespace, root: Path, cards, links, bound):
    """What the ledger knows before a run: replays (``--changed``) and each card's expected process times.

    A card is replayed when its last original PROVEN verdict of this profile
    was bound to exactly the files it is bound to now (same paths, roles and
    sha256); a card with link problems is always run (it errors at once).
    """
    from dataclasses import asdict

    from harness.ledger import bound_digest
    from harness.report.data import Replayed
    from harness.schedule import expected_from_entry

    replays, expected = {}, {}
    try:
        ledger = _open_ledger(args, root)
    except LedgerError as exc:
        _console(stderr=True).print(f"[yellow]warning[/]: ledger not read ({exc}); every card runs", soft_wrap=True)
        return replays, expected
    if ledger is None:
        return replays, expected
    with ledger:
        for card in cards:
            if args.changed and not links[card.id]:
                digest = bound_digest(asdict(b) for b in bound[card.id])
                past = ledger.last_matching(card.id, digest, profile=args.profile)
                if past is not None:
                    replays[card.id] = Replayed(ledger.entry(past.run_id, card.id), past.run_id, past.started,
                                                past.report_dir)
                    continue
            last = ledger.last(card.id)
            if last is not None:
                expected[card.id] = expected_from_entry(ledger.entry(last.evidence_run_id, card.id))
    return replays, expected


def _oracle_files(card, oracle_dir: Path | None) -> tuple[tuple[Path, str], ...]:
    """The oracle manifest a card that requires the oracle is bound to (when the oracle code is present)."""
    if not any(r.startswith("oracle:") for r in card.requires):
        return ()
    try:
        from harness.oracle.store import MANIFEST, resolve_oracle_dir
    except ImportError:
        return ()
    return ((resolve_oracle_dir(oracle_dir) / MANIFEST, "oracle"),)


# ---------------------------------------------------------------- list / validate / show


def cmd_list(args: argparse.Namespace) -> int:
    from harness.report import terminal

    root = project_root()
    result, _, liar_problems = _load(root, cards_dir(args, root))
    terminal.render_list(_console(), result.cards)
    broken = list(result.load_problems) + list(liar_problems)
    if broken:
        terminal.render_problems(_console(stderr=True), broken,
                                 f"{len(broken)} problem(s) kept some cards or liars from loading "
                                 "(`run_obligations.py validate` explains each):")
        return 2
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from harness.report import terminal

    root = project_root()
    folder = cards_dir(args, root)
    console = _console()
    result, _, liar_problems = _load(root, folder)
    problems = list(result.problems) + list(liar_problems)
    if problems:
        bad = len({p.path for p in problems})
        terminal.render_problems(console, problems, f"{len(problems)} problem(s) in {bad} file(s):")
        return 2
    console.print(f"[green]ok[/]: {len(result.cards)} card(s) in {_shown_dir(folder, root)} are valid")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from harness.cards import did_you_mean
    from harness.report import terminal

    root = project_root()
    folder = cards_dir(args, root)
    result, sites, _ = _load(root, folder)
    card = next((c for c in result.cards if c.id == args.id), None)
    if card is None:
        ids = [c.id for c in result.cards]
        raise UsageError(f"no card with id={args.id!r}{did_you_mean(args.id, ids)}; "
                         f"`run_obligations.py list` shows the ids")
    console = _console()
    last, note = None, "never run (run it with `run_obligations.py run " + card.id + "`)"
    ledger = _open_ledger(args, root)
    if ledger is not None:
        with ledger:
            row = _status_rows(ledger, [card], root, sites, None)[0]
            if row.last is not None:
                last = {"run_started": row.last.started, **ledger.entry(row.last.run_id, card.id)}
                note = "" if not row.changed else f" (STALE: {', '.join(row.changed)}; that verdict may not apply)"
    terminal.render_card(console, card, last, note)
    problems = result.link_problems(card.id)
    if problems:
        terminal.render_problems(console, problems, "problems:")
    return 0


# ---------------------------------------------------------------- status / history


def _status_rows(ledger, cards, root: Path, sites, oracle_dir: Path | None):
    from dataclasses import asdict

    from harness.binding import bound_files
    from harness.status import card_status

    rows = []
    for card in cards:
        last = ledger.last(card.id) if ledger is not None else None
        recorded = ledger.bound_files(last.run_id, card.id) if last is not None else []
        current = [asdict(b) for b in bound_files(card, root, sites, _oracle_files(card, oracle_dir))] \
            if last is not None else []
        rows.append(card_status(card.id, card.title, last, recorded, current))
    return rows


def cmd_status(args: argparse.Namespace) -> int:
    from harness.cards import select
    from harness.report import terminal
    from harness.status import status_exit_code

    root = project_root()
    folder = cards_dir(args, root)
    result, sites, _ = _load(root, folder)
    cards = select(result.cards, args.ids, ())
    oracle_dir = Path(args.oracle_dir).expanduser().resolve() if args.oracle_dir else None
    ledger = _open_ledger(args, root)
    try:
        rows = _status_rows(ledger, cards, root, sites, oracle_dir)
    finally:
        if ledger is not None:
            ledger.close()
    console = _console()
    terminal.render_status(console, rows)
    if ledger is None:
        console.print(f"no ledger in {_shown_dir(reports_dir(args, root), root)} yet: "
                      "run the obligations once (`run_obligations.py run`)")
    if result.load_problems:
        terminal.render_problems(_console(stderr=True), result.load_problems,
                                 f"{len(result.load_problems)} problem(s) kept some cards from loading:")
    return status_exit_code(rows)


def cmd_history(args: argparse.Namespace) -> int:
    from harness.report import terminal
    from harness.report.view import history_marks

    root = project_root()
    ledger = _open_ledger(args, root)
    console = _console()
    if ledger is None:
        console.print(f"no runs recorded in {_shown_dir(reports_dir(args, root), root)} yet")
        return 0
    with ledger:
        if not args.ids:
            terminal.render_runs(console, ledger.runs(args.limit))
            return 0
        known = {cid for (cid,) in ledger.conn.execute("SELECT DISTINCT card_id FROM verdicts")}
        for card_id in args.ids:
            if card_id not in known:
                from harness.cards import did_you_mean

                raise UsageError(f"card id {card_id!r} has no recorded verdict{did_you_mean(card_id, sorted(known))}; "
                                 "`run_obligations.py history` lists the runs")
            past = ledger.history(card_id)
            terminal.render_history(console, card_id, list(zip(past, history_marks(past, None)))[-args.limit:])
    return 0


# ---------------------------------------------------------------- new


def cmd_new(args: argparse.Namespace) -> int:
    from harness.cards import display_path
    from harness.scaffold import scaffold

    root = project_root()
    card_path, witness_rel = scaffold(root, cards_dir(args, root), args.id)
    console = _console()
    console.print(f"created {display_path(card_path, root)} and {witness_rel}")
    console.print(f"next: fill in the card, write the witness, then `run_obligations.py run {args.id}` "
                  f"(it is FAILED until the witness is written)")
    return 0


# ---------------------------------------------------------------- parser


def _parser() -> argparse.ArgumentParser:
    from harness import argtypes

    parser = argparse.ArgumentParser(
        prog="run_obligations.py",
        description="Run the theorem cards in obligations/ and report PROVEN / FAILED / VACUOUS / "
                    "UNVERIFIED / ERROR per card. `run` is the default command.")
    sub = parser.add_subparsers(dest="command", metavar="{run,list,validate,show,status,history,new,oracle}")

    def cards_opt(p: argparse.ArgumentParser) -> None:
        p.add_argument("--cards", metavar="DIR", help="folder of cards (default: obligations/, or KVPROOF_CARDS_DIR)")

    def reports_opt(p: argparse.ArgumentParser) -> None:
        p.add_argument("--reports", metavar="DIR",
                       help="folder of dated reports and ledger.sqlite (default: reports/, or KVPROOF_REPORTS_DIR)")

    run = sub.add_parser("run", help="run cards and print verdicts (default)")
    run.add_argument("ids", nargs="*", metavar="ID", help="card ids or globs (KV-T*); default: all")
    run.add_argument("--profile", choices=("ci", "release"), default="ci",
                     help="Hypothesis profile: ci (fast, deterministic, seed 0) or release "
                          "(many examples, random seed)")
    run.add_argument("--seed", type=argtypes.seed, default=None, help="Hypothesis seed to replay (printed by every run)")
    run.add_argument("--no-liars", action="store_true", help="skip liar runs (cards with liars become UNVERIFIED)")
    run.add_argument("--json", metavar="PATH", help="write the verdicts document (obligations/verdicts.schema.json)")
    run.add_argument("--oracle-dir", metavar="DIR",
                     help="oracle export folder (passed to witnesses as KVPROOF_ORACLE_DIR)")
    run.add_argument("--tag", action="append", default=[], metavar="T", help="only cards with this tag (repeatable)")
    run.add_argument("--timeout", type=argtypes.seconds, default=60.0, metavar="S",
                     help="default per-witness timeout in seconds (a card's `timeout:` overrides it)")
    run.add_argument("-j", "--jobs", type=argtypes.positive_int, default=None, metavar="N",
                     help="witness processes at a time (default: the number of cores); with N > 1 each gets "
                          "one BLAS thread")
    run.add_argument("--changed", action="store_true",
                     help="replay the last PROVEN verdict of every card whose bound files (card, witnesses, "
                          "liars, covered files, oracle manifest) are byte-identical to then; run the rest")
    cards_opt(run)
    reports_opt(run)
    run.set_defaults(func=cmd_run)

    lst = sub.add_parser("list", help="list cards")
    cards_opt(lst)
    lst.set_defaults(func=cmd_list)
    val = sub.add_parser("validate", help="check every card; print every problem; exit 2 if any")
    cards_opt(val)
    val.set_defaults(func=cmd_validate)
    show = sub.add_parser("show", help="print a card and its last verdict")
    show.add_argument("id", metavar="ID")
    cards_opt(show)
    reports_opt(show)
    show.set_defaults(func=cmd_show)
    status = sub.add_parser("status", help="each card's last verdict, STALE when its bound files changed since")
    status.add_argument("ids", nargs="*", metavar="ID", help="card ids or globs; default: all")
    status.add_argument("--oracle-dir", metavar="DIR", help="oracle export folder the cards are bound to")
    cards_opt(status)
    reports_opt(status)
    status.set_defaults(func=cmd_status)
    hist = sub.add_parser("history", help="past runs, or past verdicts of the given cards")
    hist.add_argument("ids", nargs="*", metavar="ID", help="card ids; default: list the runs")
    hist.add_argument("--limit", type=argtypes.positive_int, default=20, metavar="N", help="newest N entries (default 20)")
    reports_opt(hist)
    hist.set_defaults(func=cmd_history)
    new = sub.add_parser("new", help="scaffold a card and a witness module that fails until written")
    new.add_argument("id", metavar="ID")
    cards_opt(new)
    new.set_defaults(func=cmd_new)
    sub.add_parser("oracle", help="export / check the transformers reference (see `oracle --help`)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "oracle":
        from harness.oracle.cli import main as oracle_main

        return oracle_main(argv[1:])
    if not argv or (argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help")):
        argv = ["run", *argv]
    parser = _parser()
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _terminate)  # a kill stops the running witness process too
    try:
        args = parser.parse_args(argv)
        args.argv = argv
        return args.func(args)
    except SystemExit as exc:  # argparse: usage errors exit 2, --help exits 0
        return int(exc.code or 0) if isinstance(exc.code, int) else 2
    except CardInvalid as exc:
        from harness.report import terminal

        terminal.render_problems(_console(stderr=True), exc.problems,
                                 f"cannot run: {len(exc.problems)} problem(s) in the cards "
                                 f"(`run_obligations.py validate` lists every problem):")
        return 2
    except HarnessError as exc:
        print(f"run_obligations.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("run_obligations.py: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
