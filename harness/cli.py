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
from pathlib import Path
from typing import Any

from harness.cards import display_path
from harness.errors import CardInvalid, HarnessError, UsageError
from harness.project import project_root

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


def _shown(path: Path, root: Path) -> str:
    """``path`` relative to the project root when inside it; a folder ends in ``/``."""
    return _shown_dir(path, root) if path.is_dir() else display_path(path, root)


def _shown_dir(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix() + "/"
    except ValueError:
        return str(path) + "/"


def _load(root: Path, folder: Path):
    from harness.pipeline import load

    loaded = load(root, folder, _shown_dir(folder, root))
    return loaded.result, loaded.sites, loaded.liar_problems


# ---------------------------------------------------------------- run


def cmd_run(args: argparse.Namespace) -> int:
    from harness.pipeline import RunRequest, prove
    from harness.report.terminal import TerminalReporter
    from harness.schedule import default_jobs

    root = project_root()
    oracle_dir = Path(args.oracle_dir).expanduser().resolve() if args.oracle_dir else None
    if oracle_dir is not None and not oracle_dir.is_dir():
        raise UsageError(f"--oracle-dir={args.oracle_dir!r} is not a folder; "
                         "export one with `run_obligations.py oracle export`")
    json_path = None
    if args.json:
        json_path = Path(args.json).expanduser()
        json_path = json_path if json_path.is_absolute() else Path.cwd() / json_path
    source = "--reports" if args.reports else (
        "KVPROOF_REPORTS_DIR" if os.environ.get("KVPROOF_REPORTS_DIR") else "the reports folder")
    req = RunRequest(
        root=root, cards_dir=cards_dir(args, root), reports_dir=reports_dir(args, root), reports_source=source,
        ids=tuple(args.ids), tags=tuple(args.tag), profile=args.profile,
        seed=args.seed if args.seed is not None else (0 if args.profile == "ci" else random.randrange(2**32)),
        liars=not args.no_liars, timeout=args.timeout, jobs=default_jobs() if args.jobs is None else args.jobs,
        changed=args.changed, json_path=json_path, json_arg=args.json or "", oracle_dir=oracle_dir,
        argv=tuple(args.argv))
    reporter = TerminalReporter(_console(), _console(stderr=True), lambda p: _shown(p, root))
    return prove(req, reporter, shown_cards=_shown_dir(req.cards_dir, root)).exit_code


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
    from harness.status import status_rows

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
            row = status_rows(ledger, [card], root, sites, None)[0]
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
    from harness.cards import select
    from harness.report import terminal
    from harness.status import status_exit_code, status_rows

    root = project_root()
    folder = cards_dir(args, root)
    result, sites, _ = _load(root, folder)
    cards = select(result.cards, args.ids, ())
    oracle_dir = Path(args.oracle_dir).expanduser().resolve() if args.oracle_dir else None
    ledger = _open_ledger(args, root)
    try:
        rows = status_rows(ledger, cards, root, sites, oracle_dir)
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
