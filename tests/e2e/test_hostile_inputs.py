"""Hostile input, one row per case: no output option, damaged file or lock can forge, lose or hang a verdict.

Every row runs ``run_obligations.py`` on a fresh copy of the fixture project
(tests/fixtures/project), or of a copy that has already run twice (``ran``:
two runs in reports/ledger.sqlite, their report folders and ``v.json``),
with one thing made hostile, and checks the exit code, that the message
names the culprit (file, field or option), that nothing ended in a
traceback or took longer than it should (a hang), and that no data was
lost or clobbered: the files a row names are byte for byte as they were,
the files it expects (a kept report) exist, and the ledger still reads.

Three groups, as issue 25 lists them: outputs never clobber inputs; the
ledger never loses a finished run (locks, a full disk, damage); every input
is what it claims to be (YAML alias bombs, FIFOs and devices, verdicts
documents read back).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"
LEDGER = "reports/ledger.sqlite"

Setup = Callable[[Path], None]


# ---------------------------------------------------------------- setup steps


def steps(*fns: Setup) -> Setup:
    def run(root: Path) -> None:
        for fn in fns:
            fn(root)

    return run


def write(rel: str, text: str) -> Setup:
    def step(root: Path) -> None:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")

    return step


def fifo(rel: str) -> Setup:
    def step(root: Path) -> None:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(root / rel)

    return step


def symlink(rel: str, to: str) -> Setup:
    def step(root: Path) -> None:
        (root / rel).symlink_to(to)

    return step


def make_dir(rel: str) -> Setup:
    def step(root: Path) -> None:
        (root / rel).mkdir(parents=True, exist_ok=True)

    return step


def remove(rel: str) -> Setup:
    def step(root: Path) -> None:
        path = root / rel
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()

    return step


def sql(*statements: str) -> Setup:
    """Run SQL on the ledger, as someone with the sqlite3 shell might."""

    def step(root: Path) -> None:
        conn = sqlite3.connect(root / LEDGER)
        for statement in statements:
            conn.execute(statement)
        conn.commit()
        conn.close()

    return step


def drop_report_folders(root: Path) -> None:
    """Only the ledger is left to say what the runs were (compare with run ids then reads its rows)."""
    for path in (root / "reports").iterdir():
        if path.name != "ledger.sqlite":
            path.unlink() if path.is_symlink() or path.is_file() else shutil.rmtree(path)


def garble_pages(root: Path) -> None:
    """Every page but the first (the schema) overwritten with noise: every table's rows are garbage."""
    path = root / LEDGER
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[16:18], "big") or 65536
    noise = random.Random(25)
    data[size:] = bytes(noise.randrange(256) for _ in range(len(data) - size))
    path.write_bytes(bytes(data))


def truncate_half(root: Path) -> None:
    path = root / LEDGER
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def garbage_header(root: Path) -> None:
    path = root / LEDGER
    data = path.read_bytes()
    path.write_bytes(b"this is not an sqlite file" + data[26:])


def grow_ledger(root: Path) -> None:
    """Make the ledger bigger than any report file, so a file-size limit at its size stops only the ledger."""
    sql("CREATE TABLE filler (b BLOB)", "INSERT INTO filler VALUES (randomblob(2000000))")(root)


def edited(fn: Callable[[dict], object], name: str = "edited.json") -> Setup:
    """``name``: the run's v.json with ``fn`` applied to it (a verdicts document someone edited)."""

    def step(root: Path) -> None:
        doc = json.loads((root / "v.json").read_text())
        fn(doc)
        (root / name).write_text(json.dumps(doc))

    return step


BOMB = "id: BOMB-1\nlol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 12)
)  # 9**12 strings once expanded

LOCK_WITNESS = """\
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_lets_another_process_lock_the_ledger():
    (ROOT / "lock.trigger").write_text("now")
    deadline = time.monotonic() + 60
    while not (ROOT / "lock.held").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
"""

LOCK_CARD = """\
id: LOCK-1
title: another process locks the ledger while this card runs
module: fakeimpl.arith
regime: C
theorem: The run's verdict is recorded or kept, whoever holds the ledger.
proof: tests/e2e/test_hostile_inputs.py holds the ledger's lock from another process.
refs: [fakeimpl/arith.py::add]
witnesses:
  - id: lets-it-lock
    test: witnesses/test_lockstep.py::test_lets_another_process_lock_the_ledger
version: 1
"""

lock_card = steps(write("witnesses/test_lockstep.py", LOCK_WITNESS), write("cards-lock/lock.yaml", LOCK_CARD))

HOLDER = """\
import sqlite3, sys, time
from pathlib import Path

root, hold, trigger = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1"
while trigger and not (root / "lock.trigger").exists():
    time.sleep(0.02)
conn = sqlite3.connect(str(root / "reports" / "ledger.sqlite"), isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
(root / "lock.held").write_text("held")
time.sleep(hold)
conn.execute("COMMIT")
"""


@dataclass(frozen=True)
class Holder:
    """Another process that takes the ledger's write lock (BEGIN EXCLUSIVE) and holds it ``hold_s`` seconds:
    at once, or when a witness of the run says so (``during_run``)."""

    hold_s: float
    during_run: bool = False


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    exit: int
    says: tuple[str, ...] = ()  # each must appear in stdout + stderr
    setup: Setup = lambda root: None
    base: str = "fresh"  # "fresh": the fixture project; "ran": after two runs (ledger, reports, v.json)
    ran: bool = True  # False: refused before any witness started (no new report folder)
    unchanged: tuple[str, ...] = ()  # files or folders that must be byte for byte as they were after setup
    exists: tuple[str, ...] = ()  # globs that must match afterwards (a kept report, --json)
    ledger_runs: int | None = None  # the ledger must still read, holding this many runs
    env: dict[str, str] = field(default_factory=dict)
    holder: Holder | None = None
    fsize: bool = False  # run under a file-size limit (ulimit -f) of the ledger's size: its commit fails
    max_s: float = 90.0  # longer is a hang


def on_ran(*rows: tuple) -> list[Case]:
    return [Case(*row, base="ran") for row in rows]


READERS = (  # every command that reads the ledger, and what it must say when the ledger is damaged
    ("history",),
    ("history", "FX-ADD"),
    ("show", "FX-ADD"),
    ("status",),
    ("run", "FX-ADD", "--changed"),
    ("run", "FX-ADD", "--rerun-failed"),
    ("run", "FX-ADD", "--baseline", "latest"),
    ("compare", "1", "2"),
    ("timings",),
)
FIX = ("ledger.sqlite", "move it aside", ".recover")

CASES = [
    # ================================================================ 1. outputs never clobber inputs
    Case(
        "json-over-a-source-file",
        ("run", "FX-ADD", "--json", "fakeimpl/arith.py"),
        2,
        ("--json='fakeimpl/arith.py'", "source file", "refused"),
        ran=False,
        unchanged=("fakeimpl/arith.py",),
    ),
    Case(
        "json-over-a-source-file-even-with-force",
        ("run", "FX-ADD", "--json", "fakeimpl/arith.py", "--force"),
        2,
        ("--json='fakeimpl/arith.py'", "source file"),
        ran=False,
        unchanged=("fakeimpl/arith.py",),
    ),
    Case(
        "json-into-impl",
        ("run", "FX-ADD", "--json", "impl/verdicts.json"),
        2,
        ("--json='impl/verdicts.json'", "inside impl/"),
        setup=make_dir("impl"),
        ran=False,
        unchanged=("impl",),
    ),
    Case(
        "json-into-witnesses",
        ("run", "FX-ADD", "--json", "witnesses/v.json"),
        2,
        ("--json='witnesses/v.json'", "inside witnesses/"),
        ran=False,
        unchanged=("witnesses",),
    ),
    Case(
        "json-into-the-cards-folder",
        ("run", "FX-ADD", "--json", "obligations/timings.json"),
        2,
        ("--json='obligations/timings.json'", "inside the cards folder"),
        ran=False,
        unchanged=("obligations",),
    ),
    Case(
        "json-over-an-unrelated-file",
        ("run", "FX-ADD", "--json", "notes.txt"),
        2,
        ("--json='notes.txt'", "not a verdicts document", "--force"),
        setup=write("notes.txt", "my notes\n"),
        ran=False,
        unchanged=("notes.txt",),
    ),
    Case(
        "json-over-an-unrelated-file-with-force",
        ("run", "FX-ADD", "--json", "notes.txt", "--force"),
        0,
        ("wrote",),
        setup=write("notes.txt", "my notes\n"),
        exists=("notes.txt",),
    ),
    Case(
        "json-over-the-ledger",
        ("run", "FX-ADD", "--json", LEDGER),
        2,
        ("--json=", "is the ledger"),
        base="ran",
        ran=False,
        unchanged=(LEDGER,),
    ),
    Case(
        "json-into-a-report-folder",
        ("run", "FX-ADD", "--json", "reports/latest/verdicts.json"),
        2,
        ("--json=", "inside a report folder"),
        base="ran",
        ran=False,
        unchanged=("reports",),
    ),
    Case("json-over-its-own-previous-output", ("run", "FX-ADD", "--json", "v.json"), 0, ("wrote",), base="ran"),
    Case(
        "reports-is-the-cards-folder",
        ("run", "FX-ADD", "--reports", "obligations"),
        2,
        ("--reports=", "obligations", "cards folder", "duplicate card ids"),
        ran=False,
        unchanged=("obligations",),
    ),
    Case(
        "reports-inside-the-cards-folder",
        ("run", "FX-ADD", "--reports", "obligations/reports"),
        2,
        ("--reports=", "inside the cards folder"),
        ran=False,
        unchanged=("obligations",),
    ),
    Case(
        "reports-from-the-environment-inside-witnesses",
        ("run", "FX-ADD"),
        2,
        ("KVPROOF_REPORTS_DIR=", "inside witnesses/"),
        env={"KVPROOF_REPORTS_DIR": "witnesses/reports"},
        ran=False,
        unchanged=("witnesses",),
    ),
    Case(
        "compare-markdown-over-a-source-file",
        ("compare", "--markdown", "fakeimpl/arith.py"),
        2,
        ("--markdown='fakeimpl/arith.py'", "source file"),
        unchanged=("fakeimpl/arith.py",),
    ),
    Case(
        "compare-markdown-over-the-ledger",
        ("compare", "--markdown", LEDGER),
        2,
        ("--markdown=", "is the ledger"),
        base="ran",
        unchanged=(LEDGER,),
    ),
    Case(
        "compare-markdown-over-an-unrelated-file",
        ("compare", "--markdown", "notes.md"),
        2,
        ("--markdown='notes.md'", "not a Markdown comparison", "--force"),
        write("notes.md", "# my notes\n"),
        base="ran",
        unchanged=("notes.md",),
    ),
    *on_ran(
        (
            "compare-markdown-over-its-own-previous-output",
            ("compare", "--markdown", "c.md"),
            0,
            (),
            lambda root: kvproof(root, "compare", "--markdown", "c.md"),
        ),
        (
            "compare-html-over-a-markdown-output",
            ("compare", "--html", "c.md"),
            2,
            ("--html='c.md'", "not an HTML comparison"),
            lambda root: kvproof(root, "compare", "--markdown", "c.md"),
        ),
        ("compare-two-outputs-one-file", ("compare", "--json", "c.out", "--markdown", "c.out"), 2, ("same file",)),
    ),
    # ================================================================ 2. the ledger never loses a finished run
    Case(
        "lock-held-briefly-during-the-run-is-waited-for",
        ("run", "--cards", "cards-lock", "--json", "v2.json"),
        0,
        ("waiting for the ledger lock held by another process", "KVPROOF_LEDGER_TIMEOUT"),
        setup=lock_card,
        base="ran",
        holder=Holder(3.0, during_run=True),
        env={"KVPROOF_LEDGER_TIMEOUT": "60"},
        ledger_runs=3,
    ),
    Case(
        "lock-held-too-long-keeps-the-report",
        ("run", "--cards", "cards-lock", "--json", "v2.json"),
        2,
        (
            "waiting for the ledger lock",
            "locked by another process",
            "ledger.sqlite",
            "do not move it aside",
            ".unrecorded",
            "Nothing measured is lost",
        ),
        setup=lock_card,
        base="ran",
        holder=Holder(120.0, during_run=True),
        env={"KVPROOF_LEDGER_TIMEOUT": "2"},
        exists=("reports/*.unrecorded/verdicts.json", "reports/*.unrecorded/index.html", "v2.json"),
        ledger_runs=2,
    ),
    Case(
        "lock-held-before-a-reader-starts",
        ("history",),
        2,
        ("waiting for the ledger lock", "locked by another process", "ledger.sqlite"),
        base="ran",
        holder=Holder(120.0),
        env={"KVPROOF_LEDGER_TIMEOUT": "1"},
        ledger_runs=2,
    ),
    Case(
        "lock-timeout-that-is-not-a-number",
        ("history",),
        2,
        ("KVPROOF_LEDGER_TIMEOUT='soon'", "seconds"),
        base="ran",
        env={"KVPROOF_LEDGER_TIMEOUT": "soon"},
    ),
    Case(
        "file-size-limit-at-the-ledger-commit-keeps-the-report",
        ("run", "FX-ADD", "--json", "v2.json"),
        2,
        ("ledger.sqlite", "ulimit -f", "could not record this run", ".unrecorded", "Nothing measured is lost"),
        setup=grow_ledger,
        base="ran",
        fsize=True,
        exists=("reports/*.unrecorded/verdicts.json", "v2.json"),
        ledger_runs=2,
    ),
    *[
        Case(
            f"dropped-table-{'-'.join(cmd)}",
            cmd,
            2,
            ("no table verdicts", *FIX),
            setup=sql("DROP TABLE verdicts"),
            base="ran",
            ran=False,
            unchanged=(LEDGER,),
        )
        for cmd in READERS
    ],
    *[
        Case(
            f"entry-not-json-{'-'.join(cmd)}",
            cmd,
            2,
            ("verdicts.entry_json", "not JSON", *FIX),
            setup=steps(sql("UPDATE verdicts SET entry_json = '{not json'"), drop_report_folders),
            base="ran",
            ran=False,
            unchanged=(LEDGER,),
        )
        for cmd in (
            ("show", "FX-ADD"),
            ("run", "FX-ADD"),
            ("run", "FX-ADD", "--changed"),
            ("run", "FX-ADD", "--rerun-failed"),
            ("compare", "1", "2"),
            ("timings",),
        )
    ],
    *on_ran(
        (
            "header-not-json-compare-run-ids",
            ("compare", "1", "2"),
            2,
            ("runs.header_json of run_id=1", "not JSON", *FIX),
            steps(sql("UPDATE runs SET header_json = 'garbage'"), drop_report_folders),
        ),
    ),
    *[
        Case(
            f"garbled-pages-{'-'.join(cmd)}",
            cmd,
            2,
            ("is damaged", *FIX),
            setup=garble_pages,
            base="ran",
            ran=False,
            unchanged=(LEDGER,),
        )
        for cmd in READERS
    ],
    *[
        Case(
            f"{name}-{'-'.join(cmd)}",
            cmd,
            2,
            (said, *FIX),
            setup=setup,
            base="ran",
            ran=False,
            unchanged=(LEDGER,),
        )
        for name, setup, said in (
            ("truncated", truncate_half, "malformed"),
            ("not-a-database", garbage_header, "not a database"),
        )
        for cmd in (("history",), ("status",), ("run", "FX-ADD"))
    ],
    *[
        Case(
            f"ledger-is-a-fifo-{cmd[0]}",
            cmd,
            2,
            ("ledger.sqlite", "FIFO"),
            setup=fifo(LEDGER),
            ran=False,
            max_s=30,
        )
        for cmd in (("history",), ("status",), ("run", "FX-ADD"), ("compare",))
    ],
    Case(
        "an-sqlite-file-that-is-not-a-ledger",
        ("run", "FX-ADD"),
        2,
        ("ledger.sqlite", "not a kvproof ledger", "tables mine"),
        setup=steps(make_dir("reports"), sql("CREATE TABLE mine (x)")),
        ran=False,
        unchanged=(LEDGER,),
    ),
    # ================================================================ 3. every input is what it claims to be
    *[
        Case(
            f"alias-bomb-{cmd[0]}",
            cmd,
            2,
            ("obligations/bomb.yaml:3", "YAML aliases (*l0) are not allowed in a card; write the value out"),
            setup=write("obligations/bomb.yaml", BOMB),
            ran=False,
            max_s=20,
        )
        for cmd in (("validate",), ("list",), ("run",))
    ],
    Case(
        "alias-bomb-beside-a-selection",
        ("run", "FX-ADD"),
        0,
        ("obligations/bomb.yaml:3", "YAML aliases", "not selected"),
        setup=write("obligations/bomb.yaml", BOMB),
        max_s=30,
    ),
    Case(
        "one-alias-in-a-card",
        ("validate",),
        2,
        ("obligations/fx-add.yaml", "YAML aliases (*t)"),
        setup=lambda root: (root / "obligations/fx-add.yaml").write_text(
            (root / "obligations/fx-add.yaml").read_text().replace("tags: [arith]", "tags: &t [arith]\nnotes: *t")
        ),
    ),
    Case(
        "alias-bomb-in-the-equivalence-marks",
        ("validate", "--cards", "cards-mutation"),
        2,
        ("cards-mutation/equivalent-mutants.yaml:3", "YAML aliases (*l0) are not allowed in the equivalence marks"),
        setup=write("cards-mutation/equivalent-mutants.yaml", BOMB.replace("id: BOMB-1", "equivalent: []")),
        max_s=20,
    ),
    Case(
        "card-is-a-fifo",
        ("validate",),
        2,
        ("obligations/z.yaml", "FIFO", "not a regular file"),
        fifo("obligations/z.yaml"),
        max_s=30,
    ),
    Case(
        "card-is-a-fifo-full-run",
        ("run",),
        2,
        ("obligations/z.yaml", "FIFO"),
        fifo("obligations/z.yaml"),
        ran=False,
        max_s=30,
    ),
    Case(
        "card-is-dev-zero",
        ("validate",),
        2,
        ("obligations/z.yaml", "character device"),
        symlink("obligations/z.yaml", "/dev/zero"),
        max_s=30,
    ),
    Case(
        "card-of-two-megabytes",
        ("validate",),
        2,
        ("obligations/big.yaml", "bytes, more than"),
        write("obligations/big.yaml", "# padding\n" * 200_000),
    ),
    Case("timings-is-a-fifo", ("validate",), 2, ("timings.json", "FIFO"), fifo("obligations/timings.json"), max_s=30),
    Case(
        "timings-is-a-fifo-run",
        ("run", "FX-ADD"),
        2,
        ("timings.json", "FIFO"),
        fifo("obligations/timings.json"),
        ran=False,
        max_s=30,
    ),
    Case(
        "timings-is-dev-zero",
        ("run", "FX-ADD"),
        2,
        ("timings.json", "character device"),
        symlink("obligations/timings.json", "/dev/zero"),
        ran=False,
        max_s=30,
    ),
    Case("timings-is-a-folder", ("validate",), 2, ("timings.json", "a folder"), make_dir("obligations/timings.json")),
    Case(
        "equivalence-marks-are-a-fifo",
        ("validate", "--cards", "cards-mutation"),
        2,
        ("equivalent-mutants.yaml", "FIFO"),
        steps(remove("cards-mutation/equivalent-mutants.yaml"), fifo("cards-mutation/equivalent-mutants.yaml")),
        max_s=30,
    ),
    Case(
        "baseline-is-dev-zero",
        ("run", "FX-ADD", "--baseline", "/dev/zero"),
        2,
        ("'/dev/zero'", "character device"),
        ran=False,
        max_s=30,
    ),
    Case(
        "baseline-is-a-fifo",
        ("run", "FX-ADD", "--baseline", "pipe.json"),
        2,
        ("pipe.json", "FIFO"),
        fifo("pipe.json"),
        ran=False,
        max_s=30,
    ),
    Case(
        "baseline-folder-whose-verdicts-is-a-fifo",
        ("run", "FX-ADD", "--baseline", "old"),
        2,
        ("old/verdicts.json", "FIFO"),
        fifo("old/verdicts.json"),
        ran=False,
        max_s=30,
    ),
    Case(
        "baseline-folder-without-verdicts",
        ("run", "FX-ADD", "--baseline", "old"),
        2,
        ("'old'", "has no verdicts.json"),
        make_dir("old"),
        ran=False,
    ),
    Case("compare-dev-zero", ("compare", "/dev/zero", "/dev/zero"), 2, ("'/dev/zero'", "character device"), max_s=30),
    *on_ran(
        (
            "compare-a-report-whose-card-index-is-a-fifo",
            ("compare", "reports/latest", "v.json"),
            0,
            (),
            steps(remove("reports/latest/cards/index.json"), fifo("reports/latest/cards/index.json")),
        ),
        (
            "verdicts-of-an-unknown-schema-version",
            ("compare", "edited.json", "v.json"),
            2,
            ("edited.json", "header.schema_version=99", "versions 1 to 4"),
            edited(lambda d: d["header"].update(schema_version=99)),
        ),
        (
            "verdicts-without-cards-is-not-an-empty-run",
            ("run", "FX-ADD", "--baseline", "edited.json", "--fail-on-regression"),
            2,
            ("edited.json", "cards is missing"),
            edited(lambda d: d.pop("cards")),
        ),
        (
            "verdicts-whose-cards-are-not-a-list",
            ("compare", "edited.json", "v.json"),
            2,
            ("edited.json", "cards={"),
            edited(lambda d: d.update(cards={"FX-ADD": "PROVEN"})),
        ),
        (
            "verdicts-with-a-card-without-id",
            ("compare", "edited.json", "v.json"),
            2,
            ("edited.json", "cards[0].id is missing"),
            edited(lambda d: d["cards"][0].pop("id")),
        ),
        (
            "verdicts-with-the-same-card-twice",
            ("compare", "edited.json", "v.json"),
            2,
            ("edited.json", "cards[1].id='FX-ADD'", "same id as cards[0]"),
            edited(lambda d: d["cards"].append(d["cards"][0])),
        ),
        (
            "verdicts-with-an-unknown-verdict",
            ("compare", "v.json", "edited.json"),
            2,
            ("edited.json", "cards[0].verdict='PROVED'"),
            edited(lambda d: d["cards"][0].update(verdict="PROVED")),
        ),
        (
            "verdicts-whose-total-disagrees-with-its-cards",
            ("compare", "v.json", "edited.json"),
            2,
            ("edited.json", "header.summary.total=7"),
            edited(lambda d: d["header"]["summary"].update(total=7)),
        ),
        (
            "verdicts-whose-header-is-not-an-object",
            ("compare", "v.json", "edited.json"),
            2,
            ("edited.json", "not a kvproof verdicts document"),
            edited(lambda d: d.update(header=[])),
        ),
    ),
]


# ---------------------------------------------------------------- running a row


def kvproof(root: Path, *args: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    full = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200", **(env or {})}
    for name in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR", "KVPROOF_LEDGER_TIMEOUT"):
        if name not in (env or {}):
            full.pop(name, None)
    return subprocess.run(
        [sys.executable, str(ENTRY), *args], cwd=root, env=full, capture_output=True, text=True, timeout=180, **kw
    )


@pytest.fixture(scope="module")
def ran_twice(tmp_path_factory) -> Path:
    """The fixture project after two runs of FX-ADD (ledger runs 1 and 2, their report folders, v.json)."""
    root = tmp_path_factory.mktemp("hostile") / "ran"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    for _ in range(2):
        proc = kvproof(root, "run", "FX-ADD", "--json", "v.json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def snapshot(path: Path) -> object:
    """What a file or folder holds (bytes' sha256, recursively), to tell that nothing changed."""
    if path.is_symlink() and not path.exists():
        return ("dangling", os.readlink(path))
    if path.is_dir():
        return {p.relative_to(path).as_posix(): snapshot(p) for p in sorted(path.iterdir())}
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return None if not path.exists() else "special"


def report_folders(root: Path) -> set[str]:
    reports = root / "reports"
    return {p.name for p in reports.iterdir() if p.name != "ledger.sqlite"} if reports.is_dir() else set()


def start_holder(root: Path, holder: Holder) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root), str(holder.hold_s), "1" if holder.during_run else "0"]
    )
    if not holder.during_run:
        deadline = time.monotonic() + 30
        while not (root / "lock.held").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the lock holder did not take the lock"
            time.sleep(0.02)
    return proc


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input(case: Case, tmp_path: Path, request) -> None:
    root = tmp_path / "project"
    source = request.getfixturevalue("ran_twice") if case.base == "ran" else FIXTURE
    shutil.copytree(source, root, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    case.setup(root)
    before = {rel: snapshot(root / rel) for rel in case.unchanged}
    folders = report_folders(root)
    holder = start_holder(root, case.holder) if case.holder else None
    limit = (root / LEDGER).stat().st_size if case.fsize else None

    def limit_file_size() -> None:  # in the child: every file it writes stops at the ledger's current size
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    t0 = time.monotonic()
    try:
        proc = kvproof(root, *case.args, env=case.env, preexec_fn=limit_file_size if case.fsize else None)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    took = time.monotonic() - t0
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text
    assert proc.returncode == case.exit, text
    for needle in case.says:
        assert needle in text, f"{needle!r} not in:\n{text}"
    assert took < case.max_s, f"took {took:.1f} s (a hang?):\n{text}"
    if not case.ran:
        assert "kvproof:" not in proc.stdout, "the run started although its input was refused"
        assert report_folders(root) == folders, "a report was written for a refused run"
    for rel, was in before.items():
        assert snapshot(root / rel) == was, f"{rel} was changed"
    for pattern in case.exists:
        assert list(root.glob(pattern)), f"nothing matches {pattern}: {sorted(report_folders(root))}"
    if case.ledger_runs is not None:
        conn = sqlite3.connect(root / LEDGER)
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == case.ledger_runs
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
