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
"""

from __future__ import annotations

import argparse
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
from harness.errors import HarnessError
from harness.project import project_root
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
) -> int:
    """Re-run the known findings' reproductions of each target in ``targets`` installed at another version than
    its known list was surveyed on (``every``: also at the surveyed version); print a line per target and per
    finding, then a summary. 1 when a finding is gone or its reproduction broke, else 0."""
    listed = [t for t in targets if t.name in survey.surveyed]
    if not listed:
        out(f"drift: no selected target has a known list in {known.KNOWN_PATH.as_posix()}")
        return 0
    done: list[Recheck] = []
    for t in listed:
        was, installed, findings = survey.surveyed[t.name], t.binding(), survey.known.get(t.name, ())
        if not t.version():
            out(f"{t.name}: {t.distribution} is not installed here (known list surveyed on {was}): not re-checked")
            continue
        drifted = survey.drifted(t.name, installed)
        if not drifted and not every:
            more = f" (--recheck runs its {len(findings)} reproduction(s) anyway)" if findings else ""
            out(f"{t.name}: installed {installed}, as surveyed: nothing to re-check{more}")
            continue
        what = (
            f"known list surveyed on {was}, installed {installed}" if drifted else f"installed {installed}, as surveyed"
        )
        if not t.runnable:
            more = f": its {len(findings)} finding(s) not re-checked" if findings else ""
            out(f"{t.name}: {what}; not runnable here ({t.unavailable}){more}")
            continue
        if not findings:
            out(f"{t.name}: {what}: it lists no finding; a survey (--targets {t.name}) re-checks every cell")
            continue
        out(f"{t.name}: {what}: running its {len(findings)} reproduction(s) (timeout {timeout:g} s each)")
        for k in findings:
            r = run_reproduction(root, k, timeout, python)
            done.append(r)
            out(f"  {k.finding}: {r.line(installed)}")
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
    parser.add_argument(
        "--timeout",
        type=argtypes.seconds,
        default=TIMEOUT_S,
        metavar="S",
        help=f"seconds per reproduction (default {TIMEOUT_S:g})",
    )
    args = parser.parse_args(argv)
    try:
        root = project_root()
        targets = registry.select(args.targets or ("all" if args.drift or args.recheck else "transformers"))
        survey = known.load(root)
    except HarnessError as exc:  # a bad selection (TargetUnknown), targets.yaml (KnownInvalid), no project
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if args.drift or args.recheck:
        return recheck(root, survey, targets, every=args.recheck, timeout=args.timeout, out=_say)
    cards = [c for c in load_cards(root / "obligations", root).cards if "targets" in c.tags]
    rows = [(c.id, w.id, w.test) for c in cards for w in c.witnesses]
    collector = Collector()
    opts = ["-q", "--tb=no", "-rN", "-p", "no:cacheprovider", "--kvproof-target", ",".join(t.name for t in targets)]
    opts += ["--kvproof-repro", args.repro] if args.repro else []
    opts += ["-k", args.k] if args.k else []
    files = sorted({test.split("::")[0] for _, _, test in rows})
    pytest.main([*opts, *[str(root / f) for f in files]], plugins=[collector])

    new = 0
    head = "| card / witness | " + " | ".join(t.name for t in targets) + " |"
    lines = [head, "|" + "---|" * (len(targets) + 1)]
    for card, wid, test in rows:
        cells = []
        for t in targets:
            key = (test, t.name)
            outcome = collector.outcomes.get(key, "")
            expected = survey.expected(t.name, card, wid)
            text = cell(outcome, collector.reasons.get(key, ""), expected)
            new += text == "FAILED (new)" or text.startswith("PASS (known")
            cells.append(text)
        lines.append(f"| {card}/{wid} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    for t in targets:
        if not t.runnable:
            print(f"not runnable: {t.name}: {t.unavailable}")
        if survey.stale(t.name):
            print(f"stale: {t.name} now binds {t.binding()}, its known list was surveyed on {survey.surveyed[t.name]}")
    print(f"{new} cell(s) differ from obligations/targets.yaml" if new else "every cell is as obligations/targets.yaml")
    drifted = [t for t in targets if t.runnable and survey.drifted(t.name, t.binding())]
    gone = recheck(root, survey, drifted, timeout=args.timeout, out=_say) if drifted else 0
    return 1 if new or gone else 0


def _say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
