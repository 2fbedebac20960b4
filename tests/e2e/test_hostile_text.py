"""Hostile text, one row per case: no byte a witness writes, and no closed pipe, loses a run or reaches a terminal raw.

Each row runs ``run_obligations.py`` on a fresh copy of the fixture project with one witness that records or
raises hostile text (a file name that is not UTF-8, escape sequences, bidi overrides, a 2M-element list, a
50 MB message, a forged event), then checks the card's verdict, that the report folder and the ledger row
exist, that nothing ends in a traceback and that no control character reaches the output of ``run``,
``status``, ``show`` or ``history``. Then the same runs with stdout closed early or full: they still record
and exit with the gate's code. docs/trust.md ("Text that reaches a report") states the rules.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.wire import safetext

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"
# what must never reach a terminal raw: C0 but \t \n, DEL, C1, bidi controls, separators, lone surrogates
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]")
TRACEBACK = "Traceback (most recent call last)"


def _card(witness: str, bounds: str = "{max_abs_delta: {le: 0}}") -> str:
    return f"""\
id: HOSTILE-1
title: add is exact
module: fakeimpl.arith
regime: A
theorem: add(2, 3) is 5.
proof: fakeimpl.arith.add returns a + b.
refs: [fakeimpl/arith.py::add]
witnesses:
  - id: checked
    test: witnesses/test_hostile.py::{witness}
    bounds: {bounds}
version: 1
"""


SURROGATES = r"""
import os

NAME = os.fsdecode(b"caf\xe9.bin")


def test_w(evidence):
    evidence.record("max_abs_delta", 0)
    evidence.record("file", NAME)
    evidence.record(NAME, [NAME, {NAME: NAME}])
    assert False, "cannot open " + NAME
"""

ESCAPES = r"""
def test_w(evidence):
    evidence.record("max_abs_delta", 0)
    evidence.record("screen", "\x1b[2J\x1b[H")
    assert False, (
        "\x1b[2J\x1b[H\x1b]0;owned\x07\rgate PASS \x9b31m red \x1b[0m \u202eSSAP etag\u202c \x00\x08 end"
    )
"""

HYPOTHESIS = r"""
import os

from hypothesis import given, strategies as st


class Evil:
    def __repr__(self):
        return "Evil(\x1b[2J\x1b[H" + os.fsdecode(b"caf\xe9") + "\u202e)"


def test_w(evidence):
    evidence.record("max_abs_delta", 0)

    @given(st.builds(Evil))
    def prop(x):
        assert False, "property falsified"

    prop()
"""

PARAM_IDS = r"""
import os

import pytest


@pytest.mark.parametrize("x", [1, 2], ids=[os.fsdecode(b"caf\xe9"), "\x1b[2J\u202e"])
def test_w(evidence, x):
    evidence.record("max_abs_delta", 0)
    assert x == 1
"""

FILE_IN_TRACEBACK = r"""
import os


def test_w(evidence):
    evidence.record("max_abs_delta", 0)
    name = os.fsdecode(b"/tmp/caf\xe9\x1b[2J.py")
    code = compile("def boom():\n    assert False, 'in a file with an odd name'\n", name, "exec")
    space = {}
    exec(code, space)
    space["boom"]()
"""

BIG_LIST = """
def test_w(evidence):
    evidence.record("max_abs_delta", 0)
    evidence.record("deltas", [0.0] * 2_000_000)
"""

BIG_MESSAGE = """
def test_w(evidence):
    evidence.record("max_abs_delta", 0)
    assert False, "x" * 50_000_000
"""

# a forged event stream: a passing result with a 50 MB message, a huge node id, 10,000 evidence keys and a line
# that is no event; then os._exit, so pytest's own account is missing
FORGED = """
import json
import os

from harness.wire.messages import JobPlan


def test_w(request):
    plan = JobPlan.read(request.config.getoption("kvproof_plan"))
    evidence = {"max_abs_delta": 0, **{f"k{i}": "\\x1b[2J" * 10 for i in range(10_000)}}
    lines = [
        {"event": "result", "nodeid": request.node.nodeid, "outcome": "passed", "evidence": evidence,
         "message": "m" * 50_000_000, "failure": "\\x1b]0;owned\\x07" * 1000},
        {"event": "result", "nodeid": "x" * 100_000, "outcome": "failed", "evidence": {}},
        {"event": "result", "nodeid": 5, "outcome": "passed"},
    ]
    with open(plan.out, "a") as out:
        for line in lines:
            out.write(json.dumps(line) + "\\n")
        out.write("not an event\\n")
    os._exit(0)
"""

# a stream line that is no event, then a passing result for the node: the pass is not believed
GARBAGE_LINE = """
from harness.wire.messages import JobPlan


def test_w(request, evidence):
    evidence.record("max_abs_delta", 0)
    plan = JobPlan.read(request.config.getoption("kvproof_plan"))
    with open(plan.out, "ab") as out:
        out.write(b'{"event": "result", "nodeid": "\\xe9\\xff", "outcome": [1]}\\n' + b"\\xff\\xfe garbage\\n")
"""


@dataclass(frozen=True)
class Case:
    id: str
    witness: str
    verdict: str
    says: tuple[str, ...] = ()
    bounds: str = "{max_abs_delta: {le: 0}}"


CASES = [
    Case("surrogates-in-evidence-keys-values-and-message", SURROGATES, "FAILED", ("caf\\\\xe9.bin",)),
    Case("escape-sequences-bidi-and-c1-in-a-message", ESCAPES, "FAILED", ("\\\\x1b[2J", "\\\\u202e", "\\\\x9b")),
    Case("escapes-and-surrogates-in-a-hypothesis-example", HYPOTHESIS, "FAILED", ("\\\\x1b[2J",)),
    Case("hostile-parametrize-ids", PARAM_IDS, "FAILED"),
    Case("a-file-name-with-odd-bytes-in-a-traceback", FILE_IN_TRACEBACK, "FAILED", ("caf\\\\xe9",)),
    Case(
        "a-2m-element-list-bounded-le-is-error",
        BIG_LIST,
        "ERROR",
        ("too large to record", "record a summary"),
        "{max_abs_delta: {le: 0}, deltas: {le: 0}}",
    ),
    Case(
        "a-2m-element-list-bounded-ne-is-error",
        BIG_LIST,
        "ERROR",
        ("too large to record", "2,000,000 items"),
        "{max_abs_delta: {le: 0}, deltas: {ne: 1}}",
    ),
    Case("a-2m-element-list-unbounded-is-clipped", BIG_LIST, "PROVEN", ("clipped by kvproof", "2,000,000 items")),
    Case("a-50-mb-failure-message", BIG_MESSAGE, "FAILED", ("clipped by kvproof",)),
    Case("a-forged-stream-of-huge-texts", FORGED, "ERROR"),
    Case("a-stream-line-that-is-no-event", GARBAGE_LINE, "ERROR", ("not events",)),
]


def _copy_project(dest: Path) -> Path:
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__", "reports", ".hypothesis"))
    return dest


def _setup(root: Path, witness: str, bounds: str = "{max_abs_delta: {le: 0}}") -> None:
    (root / "cards-case").mkdir()
    (root / "cards-case" / "hostile.yaml").write_text(_card("test_w", bounds), encoding="utf-8")
    (root / "witnesses" / "test_hostile.py").write_text(witness, encoding="utf-8")


def _env(root: Path) -> dict[str, str]:
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200"}
    for name in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR"):
        env.pop(name, None)
    return env


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ENTRY), *args],
        cwd=root,
        env=_env(root),
        capture_output=True,
        encoding="utf-8",
        errors="surrogateescape",
        timeout=300,
    )


def _recorded(root: Path) -> tuple[list[Path], int]:
    """The dated report folders and the number of runs in the ledger."""
    reports = root / "reports"
    folders = [p for p in reports.iterdir() if p.is_dir() and not p.is_symlink() and p.name[:2] == "20"]
    with sqlite3.connect(reports / "ledger.sqlite") as db:
        runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    return folders, runs


def _clean(text: str, what: str) -> None:
    assert TRACEBACK not in text, f"{what}:\n{text[-3000:]}"
    bad = RAW.search(text)
    assert bad is None, f"{what} shows {bad.group(0)!r} raw:\n{text[:3000]!r}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_text(case: Case, tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "project")
    _setup(root, case.witness, case.bounds)
    proc = _run(root, "run", "--cards", "cards-case", "--json", "v.json", "-j", "1")
    _clean(proc.stdout + proc.stderr, "run")
    assert proc.returncode == (0 if case.verdict == "PROVEN" else 1), proc.stdout + proc.stderr
    raw = (root / "v.json").read_bytes()
    assert len(raw) < 1_000_000, len(raw)
    doc = json.loads(raw)
    (entry,) = doc["cards"]
    assert entry["verdict"] == case.verdict, entry["reason"]
    shown = json.dumps(entry)
    for needle in case.says:
        assert needle in shown, f"{needle!r} not in the card's entry:\n{shown[:3000]}"
    folders, runs = _recorded(root)
    assert len(folders) == 1 and runs == 1
    (folder,) = folders
    for name in ("verdicts.json", "index.html", "verdicts.md", "junit.xml"):
        text = (folder / name).read_text(encoding="utf-8")  # strict: the files are UTF-8
        assert RAW.search(text.replace("\r\n", "\n")) is None, name
    assert (root / "reports" / "ledger.sqlite").stat().st_size < 2_000_000
    for args in (("status", "--cards", "cards-case"), ("show", "HOSTILE-1", "--cards", "cards-case")):
        shown_by = _run(root, *args)
        _clean(shown_by.stdout + shown_by.stderr, args[0])
    for args in (("history",), ("history", "HOSTILE-1")):
        shown_by = _run(root, *args)
        _clean(shown_by.stdout + shown_by.stderr, " ".join(args))
        assert shown_by.returncode == 0, shown_by.stderr


# ---------------------------------------------------------------- output that cannot be written


def _shell(root: Path, command: str) -> subprocess.CompletedProcess:
    """``command`` in bash with ``KV`` the kvproof command; its stdout and stderr as text and `echo rc=$?`."""
    kv = f"{sys.executable} {ENTRY}"
    return subprocess.run(
        ["bash", "-c", command.replace("KV", kv)],
        cwd=root,
        env=_env(root),
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        timeout=300,
    )


PIPES = {
    "stdout-closed-early-by-head": "KV {args} | head -1 >/dev/null; echo rc=${{PIPESTATUS[0]}}",
    "stdout-a-full-disk": "KV {args} >/dev/full; echo rc=$?",
    "stdout-and-stderr-closed": "KV {args} >&- 2>&-; echo rc=$?",
    "stderr-closed-stdout-full": "KV {args} 2>&- >/dev/full; echo rc=$?",
}


@pytest.mark.parametrize("how", list(PIPES))
@pytest.mark.parametrize(("witness", "code"), [(ESCAPES, 1), (SURROGATES.replace("assert False", "# "), 0)])
def test_a_run_that_cannot_print_still_records(how: str, witness: str, code: int, tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "project")
    _setup(root, witness)
    proc = _shell(root, PIPES[how].format(args="run --cards cards-case -j 1"))
    assert TRACEBACK not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.stdout.strip().endswith(f"rc={code}"), proc.stdout + proc.stderr
    folders, runs = _recorded(root)
    assert len(folders) == 1 and runs == 1
    (entry,) = json.loads((folders[0] / "verdicts.json").read_text(encoding="utf-8"))["cards"]
    assert entry["verdict"] == ("PROVEN" if code == 0 else "FAILED")


@pytest.mark.parametrize(
    "args",
    [
        "status --cards cards-case",
        "show HOSTILE-1 --cards cards-case",
        "history",
        "history HOSTILE-1",
        "list --cards cards-case",
        "validate --cards cards-case",
        "compare latest latest",
    ],
)
def test_every_command_survives_a_closed_stdout(args: str, tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "project")
    _setup(root, ESCAPES)
    _run(root, "run", "--cards", "cards-case", "-j", "1")
    plain = _run(root, *args.split())
    assert TRACEBACK not in plain.stderr, plain.stderr
    for how, command in PIPES.items():
        proc = _shell(root, command.format(args=args))
        assert TRACEBACK not in proc.stderr and "Exception ignored" not in proc.stderr, (how, proc.stderr)
        assert proc.stdout.strip().endswith(f"rc={plain.returncode}"), (how, proc.stdout, proc.stderr)


def test_mutate_survives_a_closed_stdout(tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "project")
    plain = _run(root, "mutate", "FX-SCALE", "--cards", "cards-mutation", "--max-mutants", "2", "-j", "1")
    command = "KV mutate FX-SCALE --cards cards-mutation --max-mutants 2 -j 1 | head -1; echo rc=${PIPESTATUS[0]}"
    proc = _shell(root, command)
    assert TRACEBACK not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.stdout.strip().endswith(f"rc={plain.returncode}"), proc.stdout + proc.stderr
    folders, runs = _recorded(root)
    assert len(folders) == 2 and runs == 2


# ---------------------------------------------------------------- the rules, in-process


def test_safe_text_escapes_what_a_terminal_would_obey_and_keeps_lines() -> None:
    text = "a\x1b[2J\rb\x07c\x9bd\u202ee\ud800f" + os.fsdecode(b"\xe9") + "\n\tg"
    assert safetext.safe_text(text) == "a\\x1b[2J\\rb\\x07c\\x9bd\\u202ee\\ud800f\\xe9\n\tg"
    assert safetext.safe_line(text).endswith("\\xe9\\n\\tg")
    assert safetext.safe_text("plain ünïcode ≤ Δ") == "plain ünïcode ≤ Δ"


def test_a_clipped_text_says_how_long_it_was_and_a_clipped_name_stays_unique() -> None:
    out = safetext.safe_text("x" * 50_000_000)
    assert len(out) < safetext.TEXT_LIMIT + 200 and "50,000,000 characters" in out
    a, b = safetext.safe_name("n" * 400 + "a" + "n" * 400), safetext.safe_name("n" * 400 + "b" + "n" * 400)
    assert a != b and len(a) < safetext.NAME_LIMIT + 100


def test_evidence_over_its_limits_is_replaced_by_a_marker_naming_its_size() -> None:
    ev = safetext.safe_evidence({"small": 1, "big": list(range(100_000)), **{f"k{i}": i for i in range(300)}})
    assert ev["small"] == 1 and safetext.is_clipped(ev["big"]) and "100,000 items" in ev["big"]
    assert len(ev) == safetext.KEYS_LIMIT + 1
    assert len(json.dumps(ev)) < safetext.NODE_EVIDENCE_LIMIT


def test_a_card_file_whose_name_is_not_utf8_is_refused_by_name(tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "project")
    _setup(root, ESCAPES)
    os.rename(root / "cards-case" / "hostile.yaml", os.path.join(os.fsencode(root / "cards-case"), b"caf\xe9.yaml"))
    for command in ("validate", "run"):
        proc = _run(root, command, "--cards", "cards-case")
        _clean(proc.stdout + proc.stderr, command)
        assert proc.returncode in (1, 2) and "caf\\xe9.yaml" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        assert "rename the file or folder" in proc.stdout + proc.stderr
