"""Survey mode: the kv_target witnesses on third-party targets, as a card x target matrix.

    .venv/bin/python -m harness.targets.survey [--targets transformers] [--repro DIR] [-k EXPR]

runs the witnesses of every card tagged ``targets`` (pytest, in this
process) over the selected targets and prints one row per (card, witness)
and one column per target. A cell is ``PASS``, ``n/a`` (the target lacks a
capability the witness needs), ``not runnable`` (its library or backend is
missing here, with the reason below the table), ``FAILED (known: finding)``
when obligations/targets.yaml expects it, or ``FAILED (new)``. The exit code
is 1 when a cell FAILED that the known list does not expect (a new finding,
or a fixed one that changed), 0 otherwise: third-party targets never fail
the gate (``make verify``). A known list surveyed on another version of the
library is stale, and the run says so.

Version drift (a target installed at another version than its known list
was surveyed on): the survey then runs every known finding's reproduction
of that target on the installed version (a subprocess of this interpreter,
cwd the project root, a timeout each) and says per finding whether it
``still reproduces`` (exit 1), is ``gone`` (exit 0: re-survey, and remove or
mark it) or the reproduction ``broke`` (any other exit, an uncaught
exception, a timeout: its last stderr line). Only that:

    .venv/bin/python -m harness.targets.survey --drift [--targets SPEC] [--timeout S]
    .venv/bin/python -m harness.targets.survey --recheck [--targets SPEC]   # also on the surveyed version

(default selection ``all``: every target with a known list). The exit code
is 1 when a finding is gone or broke (the known list no longer describes the
installed version), 0 otherwise, 2 for a bad selection or targets.yaml; a
full survey exits 1 for those too.

The engines live in venvs of their own (their pins conflict), so one survey
sees only its own venv's. ``--json FILE`` also writes the matrix as JSON
(format ``kvproof-survey``: per row and target the cell, the pytest outcome
and the reason; per target its binding, runnable or why not, the interpreter,
and the stale and drift notes); ``--merge`` prints one table from several:

    .venv/bin/python -m harness.targets.survey --targets transformers --json reports/survey/venv.json
    .venv/bin/python -m harness.targets.survey --merge A.json B.json ... [--markdown grid.md]

(columns in the order given, each target once: a target in two files takes
the runnable one's column, else the first one's, and says so), then each
target's binding and interpreter, why a target is not runnable, the stale and
drift notes, and a count. Exit 1 when a merged cell is ``FAILED (new)`` or
``PASS (known ... fixed?)``, else 0; 2 for a file that is missing or not a
survey's JSON, or an output path whose folder is missing or not writable.
``make survey-all`` runs each venv's survey and merges them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness import argtypes
from harness.errors import HarnessError, UsageError
from harness.project import project_root, shown_path
from harness.select.cards import load_cards
from harness.targets import known, registry
from harness.targets.protocol import Target

PARAM = re.compile(r"^(?P<node>[^\[]+)\[(?P<target>[^\]]+)\]$")


@dataclass
class Collector:
    """pytest plugin: the outcome of each (node, target) call, and why a skip skipped."""

    outcomes: dict[tuple[str, str], str] = field(default_factory=dict)
    reasons: dict[tuple[str, str], str] = field(default_factory=dict)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        m = PARAM.match(report.nodeid)
        if m is None:
            return
        key = (m["node"], m["target"])
        if report.skipped:
            self.outcomes[key] = "skipped"
            longrepr = report.longrepr
            self.reasons[key] = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)).removeprefix(
                "Skipped: "
            )
        elif report.failed:
            self.outcomes[key] = "failed"
            crash = getattr(report.longrepr, "reprcrash", None)
            message = getattr(crash, "message", "") or str(report.longrepr or "")
            self.reasons.setdefault(key, (message.strip().splitlines() or [""])[0][:300])
        elif report.when == "call":
            self.outcomes.setdefault(key, "passed")


def cell(outcome: str, reason: str, expected: known.Known | None) -> str:
    if outcome == "passed":
        return "PASS" if expected is None else f"PASS (known {expected.finding} fixed?)"
    if outcome == "skipped":
        return "not runnable" if "not runnable here" in reason else "n/a"
    if outcome == "failed":
        return f"FAILED (known: {expected.finding})" if expected else "FAILED (new)"
    return "-"


# ---------------------------------------------------------------- version drift

TIMEOUT_S = 300.0  # per reproduction: importing a library (torch, vLLM) takes 5-30 s on a busy 2-core machine
UNCAUGHT = "kvproof-survey: the reproduction raised an uncaught exception"
# Runs one reproduction as `python SCRIPT` would (sys.argv, sys.path[0], __main__), except that an exception
# nobody caught is told apart from the script's own exit 1 ("the problem is present"): both exit 1, only the
# first writes UNCAUGHT to stderr before the traceback.
_RUN = """\
import os, runpy, sys, traceback
path = sys.argv[1]
sys.argv = [path]
here = os.path.dirname(os.path.abspath(path))
if sys.path and sys.path[0] == "":  # -c put the working directory first; a script puts its own folder there
    sys.path[0] = here
else:
    sys.path.insert(0, here)
try:
    runpy.run_path(path, run_name="__main__")
except Exception:
    sys.stderr.write(TAG + "\\n")
    traceback.print_exc()
    sys.exit(1)
"""


@dataclass(frozen=True)
class Recheck:
    """One known finding's reproduction, run on the installed version: its state and why."""

    finding: known.Known
    state: str  # "reproduces" (exit 1) | "gone" (exit 0) | "broke" (another exit, an uncaught exception, a timeout)
    code: int | None  # the exit code; None when it timed out
    how: str = ""  # broke: how it ended ("exit 2", "exit 1, an uncaught exception", "timeout after 300 s")
    said: str = ""  # broke: the last line it wrote to stderr (else stdout)
    seconds: float = 0.0

    def line(self, installed: str) -> str:
        """What the survey prints for it: ``still reproduces on X (exit 1)``, ``gone on X (exit 0): ...``, or
        ``reproduction broke (...): <last stderr line>``."""
        if self.state == "reproduces":
            return f"still reproduces on {installed} (exit 1)"
        if self.state == "gone":
            return f"gone on {installed} (exit 0): re-survey and remove or mark it"
        return f"reproduction broke ({self.how}): {self.said}"


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` (at most 300 characters), "" when there is none."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and ln.strip() != UNCAUGHT]
    return lines[-1][:300] if lines else ""


def run_reproduction(root: Path, k: known.Known, timeout: float = TIMEOUT_S, python: str = sys.executable) -> Recheck:
    """Run ``k``'s reproduction (``python SCRIPT`` in a session of its own, cwd ``root``); killed, with
    everything it started, after ``timeout`` seconds."""
    script = str((root / k.reproduction).resolve())
    code = f"TAG = {UNCAUGHT!r}\n" + _RUN
    start = time.monotonic()
    proc = subprocess.Popen(
        [python, "-c", code, script],
        cwd=root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        said = last_line(err) or (f"stdout: {last_line(out)}" if last_line(out) else "nothing on stderr")
        return Recheck(k, "broke", None, f"timeout after {timeout:g} s", said, time.monotonic() - start)
    seconds = time.monotonic() - start
    rc = proc.returncode
    if rc == 1 and UNCAUGHT not in err:
        return Recheck(k, "reproduces", 1, seconds=seconds)
    if rc == 0:
        return Recheck(k, "gone", 0, seconds=seconds)
    said = last_line(err) or (f"stdout: {last_line(out)}" if last_line(out) else "nothing on stderr")
    how = "exit 1, an uncaught exception" if rc == 1 else f"killed by signal {-rc}" if rc < 0 else f"exit {rc}"
    return Recheck(k, "broke", rc, how, said, seconds)


def recheck(
    root: Path,
    survey: known.Survey,
    targets: Sequence[Target],
    *,
    every: bool = False,
    timeout: float = TIMEOUT_S,
    python: str = sys.executable,
    out: Callable[[str], None] = print,
    notes: dict[str, list[str]] | None = None,
) -> int:
    """Re-run the known findings' reproductions of each target in ``targets`` installed at another version than
    its known list was surveyed on (``every``: also at the surveyed version); print a line per target and per
    finding, then a summary. 1 when a finding is gone or its reproduction broke, else 0. ``notes``: also gets
    each target's lines (not the summary) under its name."""
    listed = [t for t in targets if t.name in survey.surveyed]
    if not listed:
        out(f"drift: no selected target has a known list in {known.KNOWN_PATH.as_posix()}")
        return 0
    done: list[Recheck] = []
    notes = notes if notes is not None else {}
    for t in listed:
        say = _tee(out, notes.setdefault(t.name, []))
        was, installed, findings = survey.surveyed[t.name], t.binding(), survey.known.get(t.name, ())
        if not t.version():
            say(f"{t.name}: {t.distribution} is not installed here (known list surveyed on {was}): not re-checked")
            continue
        drifted = survey.drifted(t.name, installed)
        if not drifted and not every:
            more = f" (--recheck runs its {len(findings)} reproduction(s) anyway)" if findings else ""
            say(f"{t.name}: installed {installed}, as surveyed: nothing to re-check{more}")
            continue
        what = (
            f"known list surveyed on {was}, installed {installed}" if drifted else f"installed {installed}, as surveyed"
        )
        if not t.runnable:
            more = f": its {len(findings)} finding(s) not re-checked" if findings else ""
            say(f"{t.name}: {what}; not runnable here ({t.unavailable}){more}")
            continue
        if not findings:
            say(f"{t.name}: {what}: it lists no finding; a survey (--targets {t.name}) re-checks every cell")
            continue
        say(f"{t.name}: {what}: running its {len(findings)} reproduction(s) (timeout {timeout:g} s each)")
        for k in findings:
            r = run_reproduction(root, k, timeout, python)
            done.append(r)
            say(f"  {k.finding}: {r.line(installed)}")
    gone = sum(r.state == "gone" for r in done)
    broke = sum(r.state == "broke" for r in done)
    if gone or broke:
        out(
            f"drift: {gone} finding(s) gone and {broke} reproduction(s) broke on the installed version(s): "
            f"{known.KNOWN_PATH.as_posix()} no longer describes them; re-survey those targets and update it (exit 1)"
        )
        return 1
    if done:
        out(f"drift: every re-checked finding still reproduces ({len(done)} of {len(done)})")
    else:
        out(
            "drift: nothing re-checked (every selected target is at its surveyed version, not installed, or lists none)"
        )
    return 0


def _tee(out: Callable[[str], None], into: list[str]) -> Callable[[str], None]:
    def say(line: str) -> None:
        out(line)
        into.append(line)

    return say


# ---------------------------------------------------------------- the matrix as JSON, several merged

FORMAT, FORMAT_VERSION = "kvproof-survey", 1
DIFFERS = ("FAILED (new)", "PASS (known")  # a cell that starts so differs from obligations/targets.yaml


def differs(text: str) -> bool:
    """Does this cell differ from what obligations/targets.yaml expects (a new failure, or a known one that passed)?"""
    return text.startswith(DIFFERS)


def table(names: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]], escape: bool = False) -> list[str]:
    """The card/witness x target table, one line per row (``rows``: (``CARD/witness``, a cell per name))."""

    def esc(text: str) -> str:
        return text.replace("|", "\\|") if escape else text

    lines = ["| card / witness | " + " | ".join(esc(n) for n in names) + " |", "|" + "---|" * (len(names) + 1)]
    lines += [f"| {esc(label)} | " + " | ".join(esc(c) for c in cells) + " |" for label, cells in rows]
    return lines


def check_output(arg: str, option: str) -> Path:
    """``arg`` as a file this process may write (the folder exists and is writable, the path is no folder, an
    existing file is writable); UsageError in one line naming the option and the fix otherwise."""
    path = Path(arg)
    what = f"{option}={arg!r}"
    if not arg.strip():
        raise UsageError(f"{what}: give a file path, e.g. reports/survey/grid.json")
    if path.is_dir():
        raise UsageError(f"{what} is a folder; give a file path in it, e.g. {arg.rstrip('/')}/survey.json")
    folder = path.parent
    if not folder.exists():
        raise UsageError(
            f"{what}: the folder {folder.as_posix()} does not exist; create it (mkdir -p) or give a path in another"
        )
    if not folder.is_dir():
        raise UsageError(f"{what}: {folder.as_posix()} is not a folder; give a path in a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(
            f"{what}: the folder {folder.as_posix()} is not writable; give a path in a folder you can write"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{what}: the file exists and is not writable; fix its permissions or give another path")
    return path


def write(path: Path, option: str, text: str) -> None:
    """Write ``text`` to ``path``; UsageError in one line when it cannot (a full disk, a folder gone since)."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{option}={str(path)!r}: cannot write it ({exc.strerror or exc})") from None


def target_doc(t: Target, survey: known.Survey, drift: Sequence[str]) -> dict:
    """One target of a survey's JSON: its binding, whether it runs here and why not, the interpreter, the
    version its known list was surveyed on, and the stale and drift notes."""
    stale = ""
    if survey.stale(t.name):
        stale = f"now binds {t.binding()}, its known list was surveyed on {survey.surveyed[t.name]}"
    return {
        "name": t.name,
        "binding": t.binding(),
        "runnable": bool(t.runnable),
        "unavailable": t.unavailable or "",
        "python": sys.executable,
        "surveyed": survey.surveyed.get(t.name),
        "stale": stale,
        "drift": list(drift),
    }


def load_doc(arg: str) -> dict:
    """A survey's JSON file (``--json``), checked; UsageError in one line naming the file and what is wrong."""
    path = Path(arg)
    what = f"--merge {arg!r}"
    if not path.exists():
        raise UsageError(f"{what}: no such file; give a file a survey wrote with --json FILE")
    if path.is_dir():
        raise UsageError(f"{what} is a folder; give a file a survey wrote with --json FILE")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{what}: cannot read it ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{what} is not JSON ({exc}); give a file a survey wrote with --json FILE") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UsageError(f'{what} is not a survey\'s JSON (no "format": {FORMAT!r}); write one with --json FILE')
    if doc.get("version") != FORMAT_VERSION:
        raise UsageError(
            f"{what}: version={doc.get('version')!r}, this kvproof reads version {FORMAT_VERSION}; survey again"
        )
    fields = {"name": str, "binding": str, "runnable": bool, "unavailable": str, "python": str, "stale": str}
    targets = doc.get("targets")
    if not isinstance(targets, list):
        raise UsageError(f"{what}: targets is not a list")
    for i, t in enumerate(targets):
        for key, kind in fields.items():
            if not isinstance(t, dict) or not isinstance(t.get(key), kind):
                raise UsageError(f"{what}: targets/{i}/{key} is missing or not a {kind.__name__}")
        if not isinstance(t.get("drift", []), list):
            raise UsageError(f"{what}: targets/{i}/drift is not a list")
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise UsageError(f"{what}: rows is not a list")
    for i, r in enumerate(rows):
        for key in ("card", "witness"):
            if not isinstance(r, dict) or not isinstance(r.get(key), str):
                raise UsageError(f"{what}: rows/{i}/{key} is missing or not a str")
        cells = r.get("cells")
        if not isinstance(cells, dict) or not all(
            isinstance(c, dict) and isinstance(c.get("cell"), str) for c in cells.values()
        ):
            raise UsageError(f'{what}: rows/{i}/cells is not an object of {{"cell": str, ...}} per target')
    return doc


@dataclass(frozen=True)
class Merged:
    """Several surveys as one: the table's lines, the notes under it, the count line, and how many cells differ."""

    names: tuple[str, ...]
    rows: tuple[tuple[str, tuple[str, ...]], ...]
    notes: tuple[str, ...]
    summary: str
    differ: int
    sources: tuple[str, ...]

    def lines(self) -> list[str]:
        return [*table(self.names, self.rows), *self.notes, self.summary]

    def markdown(self) -> str:
        shown = ", ".join(f"`{s}`" for s in self.sources)
        return "\n".join(
            [
                "# Survey: card / witness x target",
                "",
                f"Merged from {shown} (`python -m harness.targets.survey --merge`); each cell against "
                "`obligations/targets.yaml`.",
                "",
                *table(self.names, self.rows, escape=True),
                "",
                *[f"- {n.strip()}" if n.startswith("  ") else f"- {n}" for n in self.notes],
                "",
                self.summary,
                "",
            ]
        )


KINDS = (  # how the count line names the cells, in its order
    ("PASS", "PASS"),
    ("FAILED (known", "FAILED (known)"),
    ("n/a", "n/a"),
    ("not runnable", "not runnable"),
    ("-", "not run (-)"),
    ("FAILED (new)", "FAILED (new)"),
    ("PASS (known", "PASS (known, fixed?)"),
)


def merge(docs: Sequence[tuple[str, dict]]) -> Merged:
    """One table from several surveys' JSON (``docs``: (how the file is named, its document), in the order given).

    Columns: each target once, where it first appears; a target in two files takes the column of the first
    file where it is runnable (else of the first file), and a note says so. Rows: every (card, witness) of any
    file, in order of first appearance; a cell the chosen file lacks is ``-``.
    """
    chosen: dict[str, tuple[str, dict, dict]] = {}  # name -> (file, its document, its target entry)
    seen: dict[str, list[tuple[str, dict]]] = {}
    for source, doc in docs:
        for t in doc["targets"]:
            seen.setdefault(t["name"], []).append((source, t))
            if t["name"] not in chosen or (t["runnable"] and not chosen[t["name"]][2]["runnable"]):
                chosen[t["name"]] = (source, doc, t)
    names = tuple(chosen)
    labels: dict[tuple[str, str], None] = {}
    for _, doc in docs:
        for r in doc["rows"]:
            labels.setdefault((r["card"], r["witness"]), None)
    by_file = {id(doc): {(r["card"], r["witness"]): r["cells"] for r in doc["rows"]} for _, doc in docs}
    rows = []
    for card, wid in labels:
        cells = []
        for n in names:
            _, doc, _ = chosen[n]
            cells.append(by_file[id(doc)].get((card, wid), {}).get(n, {}).get("cell", "-"))
        rows.append((f"{card}/{wid}", tuple(cells)))

    notes: list[str] = []
    for n in names:
        source, _, t = chosen[n]
        notes.append(f"binding: {n}: {t['binding']} with {shown_path(t['python'])} ({source})")
    for n in names:
        if len(seen[n]) < 2:
            continue
        source, _, t = chosen[n]
        where = ", ".join(f"{s} ({'runnable' if x['runnable'] else 'not runnable'})" for s, x in seen[n])
        why = "the runnable one" if t["runnable"] and not all(x["runnable"] for _, x in seen[n]) else "the first given"
        notes.append(f"twice: {n} is in {where}: the column is {source}'s, {why}")
    for n in names:
        t = chosen[n][2]
        if not t["runnable"]:
            notes.append(f"not runnable: {n}: {t['unavailable']}")
    for n in names:
        t = chosen[n][2]
        if t["stale"]:
            notes.append(f"stale: {n} {t['stale']}")
    for n in names:
        notes += chosen[n][2].get("drift", [])

    texts = [c for _, cells in rows for c in cells]
    counts = dict.fromkeys((label for _, label in KINDS), 0)
    for text in texts:
        if text.startswith("PASS (known"):
            counts["PASS (known, fixed?)"] += 1
        elif text == "FAILED (new)":
            counts["FAILED (new)"] += 1
        else:
            label = next((label for prefix, label in KINDS if text.startswith(prefix)), "not run (-)")
            counts[label] += 1
    differ = sum(differs(c) for c in texts)
    said = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    verdict = (
        f"{differ} cell(s) differ from obligations/targets.yaml (exit 1)"
        if differ
        else "every cell is as obligations/targets.yaml"
    )
    summary = f"merged {len(docs)} survey(s), {len(names)} target(s), {len(texts)} cell(s): {said or 'none'}; {verdict}"
    return Merged(names, tuple(rows), tuple(notes), summary, differ, tuple(s for s, _ in docs))


# ---------------------------------------------------------------- command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.targets.survey", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--targets",
        default=None,
        help="a selection (names, groups, globs; default: transformers, with --drift or --recheck: all)",
    )
    parser.add_argument("--repro", default=None, metavar="DIR", help="write each failure's reproduction here")
    parser.add_argument("-k", default=None, metavar="EXPR", help="pytest -k: run only the matching witnesses")
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--drift",
        action="store_true",
        help="only re-run the known findings' reproductions of targets installed at another version than "
        "their known list was surveyed on, and say which still reproduce and which are gone",
    )
    only.add_argument(
        "--recheck", action="store_true", help="as --drift, also for targets installed at the surveyed version"
    )
    only.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="FILE",
        help="run nothing: print one table from several surveys' --json files (each target once, the runnable "
        "column wins); exit 1 when a cell differs from obligations/targets.yaml",
    )
    parser.add_argument(
        "--timeout",
        type=argtypes.seconds,
        default=TIMEOUT_S,
        metavar="S",
        help=f"seconds per reproduction (default {TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help="also write the matrix as JSON (per cell: text, outcome, reason; per target: binding, runnable, "
        "interpreter, stale and drift notes), for --merge",
    )
    parser.add_argument(
        "--markdown", default=None, metavar="FILE", help="with --merge: also write the merged table as Markdown"
    )
    args = parser.parse_args(argv)
    try:
        if args.merge is not None:
            return merge_command(args)
        if args.markdown is not None:
            raise UsageError("--markdown writes a merged table: write this survey with --json FILE, then --merge FILE")
        if args.json is not None and (args.drift or args.recheck):
            raise UsageError("--json writes a survey's matrix; --drift and --recheck make none: drop --json")
        json_path = check_output(args.json, "--json") if args.json is not None else None
        root = project_root()
        targets = registry.select(args.targets or ("all" if args.drift or args.recheck else "transformers"))
        survey = known.load(root)
        if args.drift or args.recheck:
            return recheck(root, survey, targets, every=args.recheck, timeout=args.timeout, out=_say)
        return run_survey(args, root, targets, survey, json_path)
    except HarnessError as exc:  # a bad selection (TargetUnknown), targets.yaml (KnownInvalid), no project, a path
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2


def run_survey(
    args: argparse.Namespace,
    root: Path,
    targets: Sequence[Target],
    survey: known.Survey,
    json_path: Path | None,
) -> int:
    """The survey: the matrix, the not runnable and stale notes, the drifted targets' reproductions; the JSON
    when asked. 1 when a cell differs from obligations/targets.yaml or a finding is gone."""
    cards = [c for c in load_cards(root / "obligations", root).cards if "targets" in c.tags]
    rows = [(c.id, w.id, w.test) for c in cards for w in c.witnesses]
    collector = Collector()
    opts = ["-q", "--tb=no", "-rN", "-p", "no:cacheprovider", "--kvproof-target", ",".join(t.name for t in targets)]
    opts += ["--kvproof-repro", args.repro] if args.repro else []
    opts += ["-k", args.k] if args.k else []
    files = sorted({test.split("::")[0] for _, _, test in rows})
    pytest.main([*opts, *[str(root / f) for f in files]], plugins=[collector])

    new = 0
    doc_rows, shown = [], []
    for card, wid, test in rows:
        cells: dict[str, dict] = {}
        for t in targets:
            key = (test, t.name)
            outcome = collector.outcomes.get(key, "")
            reason = collector.reasons.get(key, "")
            text = cell(outcome, reason, survey.expected(t.name, card, wid))
            new += differs(text)
            cells[t.name] = {"cell": text, "outcome": outcome, "reason": reason}
        doc_rows.append({"card": card, "witness": wid, "test": test, "cells": cells})
        shown.append((f"{card}/{wid}", [c["cell"] for c in cells.values()]))
    print("\n".join(table([t.name for t in targets], shown)))
    for t in targets:
        if not t.runnable:
            print(f"not runnable: {t.name}: {t.unavailable}")
        if survey.stale(t.name):
            print(f"stale: {t.name} now binds {t.binding()}, its known list was surveyed on {survey.surveyed[t.name]}")
    print(f"{new} cell(s) differ from obligations/targets.yaml" if new else "every cell is as obligations/targets.yaml")
    drifted = [t for t in targets if t.runnable and survey.drifted(t.name, t.binding())]
    notes: dict[str, list[str]] = {}
    said: list[str] = []
    gone = recheck(root, survey, drifted, timeout=args.timeout, out=_tee(_say, said), notes=notes) if drifted else 0
    rc = 1 if new or gone else 0
    if json_path is None:
        return rc
    doc = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "python": sys.executable,
        "selection": args.targets or "transformers",
        "k": args.k,
        "targets": [target_doc(t, survey, notes.get(t.name, ())) for t in targets],
        "rows": doc_rows,
        "differ": new,
        "drift": said[-1] if said else "",
        "exit": rc,
    }
    write(json_path, "--json", json.dumps(doc, indent=2) + "\n")
    print(f"wrote {shown_path(json_path, root)}")
    return rc


def merge_command(args: argparse.Namespace) -> int:
    """--merge: read and check every file, then print the combined table (and write it as Markdown)."""
    for flag, value in (("--targets", args.targets), ("-k", args.k), ("--repro", args.repro), ("--json", args.json)):
        if value is not None:
            raise UsageError(f"--merge reads surveys' JSON files and runs nothing: drop {flag}")
    md_path = check_output(args.markdown, "--markdown") if args.markdown is not None else None
    inputs: dict[Path, str] = {}
    for arg in args.merge:
        key = Path(arg).resolve()
        if key in inputs:
            raise UsageError(f"--merge {arg!r} is given twice ({inputs[key]!r}); give each file once")
        inputs[key] = arg
    if md_path is not None and md_path.resolve() in inputs:
        raise UsageError(f"--markdown={args.markdown!r} is one of the --merge files; give another path")
    merged = merge([(arg, load_doc(arg)) for arg in args.merge])
    lines = merged.lines()
    if md_path is not None:
        write(md_path, "--markdown", merged.markdown())
        lines.insert(-1, f"wrote {args.markdown}")  # the count line stays the last
    print("\n".join(lines))
    return 1 if merged.differ else 0


def _say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
