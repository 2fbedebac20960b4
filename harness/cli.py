"""run_obligations.py command line: run | mutate | list | validate | show ID | status | history [ID] | compare |
timings [--write] | new ID | oracle ...

``run --changed`` replays a card's last PROVEN verdict when every file it is
bound to has the same sha256 as then (see :mod:`harness.ledger.history`); ``-j N``
runs N witness processes at a time (:mod:`harness.execute.schedule`), longest expected
chain first; ``timings`` shows those expected times and where they come from
(the ledger, else the committed ``obligations/timings.json`` that ``timings
--write`` makes from it: :mod:`harness.plan.timings`). As pytest: ``-k EXPR``
and ``--lf`` select; ``-x`` / ``--maxfail N`` stop after the N-th card that fails
the gate, the rest recorded as not run (:func:`harness.pipeline.watcher`);
``-v`` / ``-q`` say more or less on the terminal only; ``run --watch`` runs
again the cards whose bound files change (:mod:`harness.plan.watching`).

Exit codes: 0 every selected card PROVEN (or the command succeeded),
1 some selected card is not PROVEN, 2 bad usage, invalid cards, or a run
whose evidence could not be recorded, 130 interrupted. Mistakes a user can make end in a message, never a
traceback.

The project root (where ``witnesses/`` and ``obligations/`` live, and what
paths in cards are relative to) is ``KVPROOF_ROOT``, else the nearest folder
at or above the working directory whose pyproject.toml has a
``[tool.kvproof]`` table or that holds ``obligations/``
(:func:`harness.project.project_root`); the ``kvproof`` console script and
run_obligations.py are the same command. Cards are read from
``--cards DIR``, else ``KVPROOF_CARDS_DIR``, else ``<root>/obligations``.
Every run writes a dated report folder and a ledger row under ``--reports
DIR``, else ``KVPROOF_REPORTS_DIR``, else ``<root>/reports`` (see
:mod:`harness.report.folder`); ``status`` exits 1 unless the last verdict of
every cell it shows (``--cells``) that counts for the gate is PROVEN and still
bound to the same bytes (:mod:`harness.plan.status`).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from harness import argtypes
from harness.errors import CardInvalid, HarnessError
from harness.mutation.score import DEFAULT_MAX_MUTANTS
from harness.project import program, runner
from harness.report import terminal
from harness.report.terminal import console
from harness.wire.safetext import guarded_streams

SUBCOMMANDS = (
    "run", "mutate", "list", "validate", "show", "status", "history", "compare", "timings", "new", "init", "oracle",
)  # fmt: skip


# ---------------------------------------------------------------- parser


def _cards_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cards", metavar="DIR", help="folder of cards (default: obligations/, or KVPROOF_CARDS_DIR)")


def _reports_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--reports",
        metavar="DIR",
        help="folder of dated reports and ledger.sqlite (default: reports/, or KVPROOF_REPORTS_DIR)",
    )


def _selection_opts(run: argparse.ArgumentParser) -> None:
    """--tag and -k: which cards, besides the ids."""
    run.add_argument("--tag", action="append", default=[], metavar="T", help="only cards with this tag (repeatable)")
    run.add_argument(
        "-k",
        dest="keyword",
        default="",
        metavar="EXPR",
        help="only cards whose id, title or a tag matches EXPR, as pytest's -k: words matched as case-insensitive "
        "substrings, with and / or / not and parentheses (e.g. -k 'fork and not paged')",
    )


def _run_options(run: argparse.ArgumentParser, *, mutate: bool = False) -> None:
    """The options ``run`` and ``mutate`` share (``mutate``'s --seed picks mutants)."""

    run.add_argument("ids", nargs="*", metavar="ID", help="card ids or globs (KV-T*); default: all")
    run.add_argument(
        "--profile",
        choices=("ci", "release"),
        default="ci",
        help="Hypothesis profile: ci (fast, deterministic, seed 0) or release (many examples, random seed)",
    )
    if mutate:
        run.add_argument(
            "--seed",
            type=argtypes.seed,
            default=None,
            help="seed that picks the sampled mutants (default 0): same seed and code, same mutants",
        )
        run.add_argument(
            "--hypothesis-seed",
            type=argtypes.seed,
            default=None,
            metavar="S",
            help="Hypothesis seed of the witnesses (default: the profile's)",
        )
    else:
        run.add_argument(
            "--seed", type=argtypes.seed, default=None, help="Hypothesis seed to replay (printed by every run)"
        )
    run.add_argument("--no-liars", action="store_true", help="skip liar runs (cards with liars become UNVERIFIED)")
    run.add_argument("--json", metavar="PATH", help="write the verdicts document (obligations/verdicts.schema.json)")
    run.add_argument(
        "--force",
        action="store_true",
        help="let --json replace an existing file that is not a previous verdicts document (never code, cards, "
        "a report or the ledger)",
    )
    run.add_argument(
        "--oracle-dir", metavar="DIR", help="oracle export folder (passed to witnesses as KVPROOF_ORACLE_DIR)"
    )
    _selection_opts(run)
    run.add_argument(
        "--timeout",
        type=argtypes.seconds,
        default=60.0,
        metavar="S",
        help="default per-witness timeout in seconds (a card's `timeout:` overrides it)",
    )
    run.add_argument(
        "-j",
        "--jobs",
        type=argtypes.positive_int,
        default=None,
        metavar="N",
        help="witness processes at a time (default: the number of cores); with N > 1 each gets one BLAS thread",
    )
    run.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where witness processes run: local (this machine, -j N at a time; the default) or ray "
        "(one Ray task per process on a cluster; needs pip install -e '.[cluster]'; "
        "docs/cluster.md)",
    )
    run.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --executor ray: join the Ray cluster at ADDR (host:port, or 'auto'; default: "
        "RAY_ADDRESS, else start a local cluster for this run)",
    )
    run.add_argument(
        "--ray-ship",
        choices=("auto", "always", "never"),
        default=None,
        help="with --executor ray: how nodes get the weights and oracle export: auto (a node's own "
        "copy when its sha256 matches, else the copy shipped through Ray's object store; "
        "default), always (the shipped copy), never (each node must have its own)",
    )
    _cards_opt(run)
    _reports_opt(run)
    _verbosity_opts(run)


def _verbosity_opts(run: argparse.ArgumentParser) -> None:
    """-v / -q, counted as pytest's: how much the terminal shows, never what the run writes."""
    run.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="show more: -v each card's verdict as it is known and, under each card, its witnesses' node ids, "
        "outcomes and bound checks, and its liars; -vv every node and the recorded evidence too",
    )
    run.add_argument(
        "-q",
        "--quiet",
        action="count",
        default=0,
        help="show less: -q only the cards that are not PROVEN (with their failures), the gate line and the "
        "report; -qq one line per card that is not PROVEN and the gate line",
    )


def _stop_and_watch_opts(run: argparse.ArgumentParser) -> None:
    """-x / --maxfail N and --watch (``run`` only)."""
    run.add_argument(
        "-x",
        "--exitfirst",
        dest="maxfail",
        action="store_const",
        const=1,
        default=0,
        help="stop after the first card that fails the gate (any verdict but PROVEN): = --maxfail 1",
    )
    run.add_argument(
        "--maxfail",
        dest="maxfail",
        type=argtypes.positive_int,
        default=0,
        metavar="N",
        help="stop after the N-th card that fails the gate (FAILED, ERROR, VACUOUS or UNVERIFIED); the cards not "
        "finished then are listed and recorded as not run (ERROR), and the run exits 1",
    )
    run.add_argument(
        "--watch",
        action="store_true",
        help="after the run, poll every file each card is bound to (card, witnesses, liars, support modules, "
        "covered and read files, refs) about once a second and run again the cards whose files changed, "
        "saying which file; Ctrl-C stops (exit 130)",
    )
    # test hooks of --watch (docs/cli.md): seconds between polls, and the number of runs after which it returns
    run.add_argument("--watch-interval", type=argtypes.seconds, default=1.0, help=argparse.SUPPRESS)
    run.add_argument("--watch-runs", type=argtypes.positive_int, default=None, help=argparse.SUPPRESS)


def _matrix_opt(parser: argparse.ArgumentParser, more: str = "") -> None:
    parser.add_argument(
        "--matrix",
        nargs="*",
        metavar="NAME",
        default=None,
        help="prove every selected card under each configuration of <cards>/configurations.yaml (names or "
        "globs; none: all): one verdict per (card, configuration) cell; --profile release implies it" + more,
    )


def _run_parser(sub) -> None:

    run = sub.add_parser("run", help="run cards and print verdicts (default)")
    _run_options(run)
    which = run.add_mutually_exclusive_group()
    which.add_argument(
        "--changed",
        action="store_true",
        help="replay the last PROVEN verdict of every card whose bound files (card, witnesses, "
        "liars, covered files, oracle manifest) are byte-identical to then; run the rest",
    )
    which.add_argument(
        "--rerun-failed",
        "--lf",
        action="store_true",
        help="run only the cards whose latest verdict is not PROVEN (or whose bound files changed "
        "since); replay the others' latest PROVEN verdict, marked as replayed",
    )
    _matrix_opt(run)
    _stop_and_watch_opts(run)
    run.add_argument(
        "--target",
        metavar="SPEC",
        default=None,
        help="also prove the cards tagged `targets` on other engines' caches: target names, groups (own, "
        "transformers, project, all) or globs, comma-separated; impl's own targets gate, third-party ones are a survey "
        "(docs/targets.md)",
    )
    run.add_argument(
        "--baseline",
        metavar="REF",
        help="compare this run with REF (a run id, latest/previous, a report folder or a "
        "verdicts.json): a 'vs baseline' column and section in the terminal and index.html",
    )
    run.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="with --baseline: exit 1 when any card regressed against it (docs/compare.md), even "
        "if every card is PROVEN",
    )
    mut = sub.add_parser("mutate", help="run cards, then mutants of the code each claims: a mutation score per card")
    _run_options(mut, mutate=True)
    _matrix_opt(mut, " (the scores are measured on the default cells; --matrix default: those alone)")
    mut.add_argument(
        "--max-mutants",
        type=argtypes.non_negative_int,
        default=DEFAULT_MAX_MUTANTS,
        metavar="N",
        help=f"mutants per card at most, sampled by --seed (default {DEFAULT_MAX_MUTANTS}; 0: every one)",
    )
    mut.add_argument(
        "--changed",
        action="store_true",
        help="replay unchanged cards' verdicts, and reuse a mutant's result while the card's bound "
        "files are byte-identical to when it was measured",
    )
    mut.add_argument(
        "--mutant",
        action="append",
        default=[],
        metavar="KEY",
        help="run only this mutant (repeatable; keys from a report) against each selected card that "
        "claims its code, e.g. to check that a new witness kills it",
    )
    mut.add_argument(
        "--slow",
        action="store_true",
        help="the reference path: every mutant in a fresh process against every witness in card order (no "
        "line coverage, no warm server); the default path is checked against it (docs/mutation.md)",
    )
    mut.add_argument("--show", metavar="KEY", help="print the diff of one mutant (a key from a report) and exit")


def _reading_parsers(sub) -> None:
    """The subcommands that only read: list, validate, show, status, history; and new."""

    _cards_opt(sub.add_parser("list", help="list cards"))
    _cards_opt(sub.add_parser("validate", help="check every card; print every problem; exit 2 if any"))
    show = sub.add_parser("show", help="print a card and its last verdict")
    show.add_argument("id", metavar="ID")
    _cards_opt(show)
    _reports_opt(show)
    status = sub.add_parser("status", help="each card's last verdict, STALE when its bound files changed since")
    status.add_argument("ids", nargs="*", metavar="ID", help="card ids or globs; default: all")
    status.add_argument("--oracle-dir", metavar="DIR", help="oracle export folder the cards are bound to")
    status.add_argument(
        "--cells",
        choices=("all", "default"),
        default="all",
        help="all: each card's default cell, then every CARD@CONFIGURATION and CARD@TARGET cell the ledger holds "
        "(run --matrix, run --target; the default); default: the default cells only",
    )
    _cards_opt(status)
    _reports_opt(status)
    hist = sub.add_parser("history", help="past runs, or past verdicts of the given cards")
    hist.add_argument("ids", nargs="*", metavar="ID", help="card ids; default: list the runs")
    hist.add_argument(
        "--limit", type=argtypes.positive_int, default=20, metavar="N", help="newest N entries (default 20)"
    )
    _reports_opt(hist)
    cmp = sub.add_parser(
        "compare", help="what changed between two runs, per card; exit 1 on a regression with --fail-on-regression"
    )
    cmp.add_argument(
        "before",
        nargs="?",
        default="previous",
        metavar="A",
        help="run id (`history`), latest/previous, a report folder or a verdicts.json (default: previous)",
    )
    cmp.add_argument("after", nargs="?", default="latest", metavar="B", help="the same kinds (default: latest)")
    cmp.add_argument("--json", metavar="PATH", help="write the comparison as JSON ('-' for stdout)")
    cmp.add_argument("--markdown", metavar="PATH", help="write it as Markdown for a pull request ('-' for stdout)")
    cmp.add_argument(
        "--html",
        metavar="PATH",
        help="write it as one self-contained HTML page with a chart of the measures that moved",
    )
    cmp.add_argument(
        "--force",
        action="store_true",
        help="let --json/--markdown/--html replace an existing file that is not a previous output of the same "
        "kind (never code, cards, a report or the ledger)",
    )
    cmp.add_argument("--all", action="store_true", help="list unchanged cards too")
    cmp.add_argument(
        "--fail-on-regression", action="store_true", help="exit 1 when any card regressed (docs/compare.md: the rules)"
    )
    _cards_opt(cmp)
    _reports_opt(cmp)
    tim = sub.add_parser(
        "timings",
        help="the expected process times the scheduler would use, per card and liar, "
        "and where each comes from (ledger, timings.json, unknown)",
    )
    tim.add_argument(
        "--write",
        action="store_true",
        help="write timings.json in the cards folder from the ledger's latest entry of each card "
        "(seconds rounded to 0.1): the schedule of a run with no ledger, e.g. CI; commit it",
    )
    _cards_opt(tim)
    _reports_opt(tim)
    new = sub.add_parser("new", help="scaffold a card and a witness module that fails until written")
    new.add_argument("id", metavar="ID")
    _cards_opt(new)
    init = sub.add_parser(
        "init",
        help="make a new kvproof project in DIR (default: here): an example cache, its target adapter, a witness "
        "module of kvproof's shipped claims, a liar and a card that `run` proves; then replace the example with "
        "your cache (docs/prove-your-own-cache.md)",
    )
    init.add_argument("dir", nargs="?", default=".", metavar="DIR")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program(),
        description="Run the theorem cards in obligations/ and report PROVEN / FAILED / VACUOUS / "
        "UNVERIFIED / ERROR per card. `run` is the default command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(SUBCOMMANDS) + "}")
    _run_parser(sub)
    _reading_parsers(sub)
    sub.add_parser("oracle", help="export / check the transformers reference (see `oracle --help`)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code. Output that cannot be written (``run | head -1``, stdout on a full disk)
    is dropped, never raised: the command still records what it must and returns its own code."""
    with guarded_streams():
        return _main(argv)


def _command_hint(argv: list[str], exc: Exception) -> str:
    """When a word taken as a card id (``kvproof stauts``) matches no card but is close to a command, say so."""
    import difflib

    word = argv[1] if len(argv) > 1 and not argv[1].startswith("-") else ""
    if not word or "matches no card" not in str(exc):
        return ""
    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=0.6)
    return f"; or did you mean the command `{runner()} {close[0]}`?" if close else ""


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    empty = empty_value(argv)
    if empty:
        print(f"{program()}: error: {empty}", file=sys.stderr)
        return 2
    if argv and argv[0] == "oracle":
        from harness.oracle.cli import main as oracle_main

        return oracle_main(argv[1:])
    implicit = not argv or (argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"))
    if implicit:
        argv = ["run", *argv]
    parser = _parser()
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _terminate)  # a kill stops the running witness process too
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse: usage errors exit 2, --help exits 0
            return int(exc.code or 0) if isinstance(exc.code, int) else 2
        args.argv = argv
        from harness import commands

        return getattr(commands, f"cmd_{args.command}")(args)
    except SystemExit as exc:  # NOTE: not argparse's: code that ran inside the command may never set the exit code
        print(f"{program()}: error: {exited(exc)}", file=sys.stderr)
        return 2
    except CardInvalid as exc:
        terminal.render_problems(
            console(stderr=True),
            exc.problems,
            f"cannot run: {len(exc.problems)} problem(s) in the cards (`{runner()} validate` lists every problem):",
        )
        return 2
    except HarnessError as exc:
        print(f"{program()}: error: {exc}{_command_hint(argv if implicit else [], exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{program()}: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def empty_value(argv: list[str]) -> str:
    """Why ``argv`` holds an empty (or blank) value, "" when it holds none.

    No option or argument of kvproof means anything when empty: ``--json ''`` or ``--target ''`` used to be
    ignored silently (an unset shell variable, ``--json "$OUT"``), so every blank value is refused before
    anything runs, naming the option, for every command at once.
    """
    for i, token in enumerate(argv):
        option, eq, value = token.partition("=")
        if token.startswith("--") and eq and not value.strip():
            return f"argument {option}: an empty value ({value!r}) is not allowed; give a value or leave {option} out"
        if token.strip():
            continue
        before = argv[i - 1] if i else ""
        if before.startswith("-") and "=" not in before and before not in ("-", "--"):
            return f"argument {before}: an empty value ({token!r}) is not allowed; give a value or leave {before} out"
        return f"argument {i + 1} is empty ({token!r}); an empty card id, name or path means nothing: drop it"
    return ""


def exited(exc: SystemExit) -> str:
    """One paragraph for a SystemExit raised while a command ran: where it came from (its innermost frame)."""
    tb, where = exc.__traceback__, ""
    while tb is not None:
        where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return (
        f"sys.exit({exc.code!r}) was called while the command ran (at {where or 'an unknown place'}); "
        "code that kvproof runs in its own process (a project's target adapters, hooks) may not end the run, so "
        f'the run stops here with exit 2; remove the call or put it under `if __name__ == "__main__":`'
    )


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
