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

This is the survey's own small runner until targets become cells of the
run's subject grid (docs/targets.md, "Not yet wired").
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field

import pytest

from harness.project import project_root
from harness.select.cards import load_cards
from harness.targets import known, registry

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.targets.survey", description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="transformers", help="a selection (names, groups, globs)")
    parser.add_argument("--repro", default=None, metavar="DIR", help="write each failure's reproduction here")
    parser.add_argument("-k", default=None, metavar="EXPR", help="pytest -k: run only the matching witnesses")
    args = parser.parse_args(argv)
    root = project_root()
    targets = registry.select(args.targets)
    survey = known.load(root)
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
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
