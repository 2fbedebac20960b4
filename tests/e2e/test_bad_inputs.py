"""Bad input, one row per case: what a careless or hostile user can hand the harness, and what must happen.

Every row runs ``run_obligations.py`` on a fresh copy of the fixture project
(tests/fixtures/project) with one thing broken, and checks the exit code,
the verdict when a run happens, and that the message names the culprit
(file and field, or the option). No row may end in a traceback, a PROVEN
that checks nothing, a FAILED that claims a refutation nobody measured, or
an exit 0 for a run whose evidence was not recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"
CARD_FILE = "cards-case/bad.yaml"

BASE_CARD = """\
id: BAD-1
title: add is exact
module: fakeimpl.arith
regime: A
theorem: add(2, 3) is 5.
proof: fakeimpl.arith.add returns a + b.
refs: [fakeimpl/arith.py::add]
witnesses:
  - id: exact
    test: witnesses/test_arith.py::test_add_exact
    bounds: {max_abs_delta: {le: 0}}
version: 1
"""

LIAR_SRC = """from harness.liars import liar


@liar("dup.same", target="fakeimpl.arith:add", why="{why}")
def add(a, b):
    return {body}
"""


def card(old: str = "", new: str = "", text: str = BASE_CARD) -> Callable[[Path], None]:
    """A setup step writing BASE_CARD (with ``old`` replaced by ``new``) to cards-case/bad.yaml."""
    assert old in text, old

    def write(root: Path) -> None:
        (root / "cards-case").mkdir(exist_ok=True)
        (root / CARD_FILE).write_text(text.replace(old, new) if old else text, encoding="utf-8")

    return write


def steps(*fns: Callable[[Path], None]) -> Callable[[Path], None]:
    def run(root: Path) -> None:
        for fn in fns:
            fn(root)

    return run


def liar_files(*files: tuple[str, str]) -> Callable[[Path], None]:
    def write(root: Path) -> None:
        for name, src in files:
            (root / "witnesses" / "liars" / name).write_text(src, encoding="utf-8")

    return write


def symlink_out(root: Path) -> None:
    outside = root.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "test_x.py").write_text("def test_a():\n    pass\n")
    (root / "witnesses" / "out").symlink_to(outside, target_is_directory=True)


def make_file(rel: str, text: str = "not a folder\n") -> Callable[[Path], None]:
    def write(root: Path) -> None:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)

    return write


def make_dir(rel: str) -> Callable[[Path], None]:
    def write(root: Path) -> None:
        (root / rel).mkdir(parents=True, exist_ok=True)

    return write


@dataclass(frozen=True)
class Case:
    id: str
    setup: Callable[[Path], None]
    args: tuple[str, ...]
    exit: int
    says: tuple[str, ...] = ()  # every one must appear in stdout + stderr
    verdict: str | None = None  # the card's verdict in --json v.json (the run must have happened)
    ran: bool = True  # False: the run must stop before any witness process starts
    env: dict[str, str] = field(default_factory=dict)
    absent: tuple[str, ...] = ()  # paths (relative to the project) that must not exist afterwards


CORRECT = LIAR_SRC.format(why="registered under a liar name but correct", body="a + b")
WRONG = LIAR_SRC.format(why="adds one too many", body="a + b + 1")
BAD_FIELD = "witnesses[0].bounds.max_abs_delta"

CASES = [
    # ---- bounds that would check nothing (or refute everything): refused at load, never a verdict
    Case(
        "bound-le-nan",
        card("{le: 0}", "{le: .nan}"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, f"{BAD_FIELD}.le", "finite"),
    ),
    Case(
        "bound-le-inf",
        card("{le: 0}", "{le: .inf}"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, f"{BAD_FIELD}.le", "finite"),
    ),
    Case(
        "bound-ne-nan",
        card("{le: 0}", "{ne: .nan}"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, f"{BAD_FIELD}.ne", "finite"),
    ),
    Case(
        "bound-lt-inf",
        card("{le: 0}", "{lt: .inf}"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, f"{BAD_FIELD}.lt", "finite"),
    ),
    Case(
        "bound-ge-minus-inf",
        card("{le: 0}", "{ge: -.inf}"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, f"{BAD_FIELD}.ge", "finite"),
    ),
    Case(
        "run-refuses-a-nan-bound",
        card("{le: 0}", "{le: .nan}"),
        ("run", "--cards", "cards-case"),
        2,
        (CARD_FILE, f"{BAD_FIELD}.le"),
        ran=False,
    ),
    Case(
        "bound-yaml-string-float",
        card("{le: 0}", "{le: 1e-3}"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, f"{BAD_FIELD}.le", "write 1.0e-3"),
    ),
    # ---- paths that leave the project
    Case(
        "test-path-dotdot",
        card("witnesses/test_arith.py::test_add_exact", "../outside/test_x.py::test_a"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, "witnesses[0].test", "`..`"),
    ),
    Case(
        "run-refuses-test-path-dotdot",
        card("witnesses/test_arith.py::test_add_exact", "witnesses/../../outside/test_x.py::test_a"),
        ("run", "--cards", "cards-case"),
        2,
        (CARD_FILE, "witnesses[0].test"),
        ran=False,
    ),
    Case(
        "test-path-absolute",
        card("witnesses/test_arith.py::test_add_exact", "/tmp/test_x.py::test_a"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, "witnesses[0].test", "absolute"),
    ),
    Case(
        "ref-absolute",
        card("fakeimpl/arith.py::add", "/etc/passwd.py::add"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, "refs[0]", "absolute"),
    ),
    Case(
        "ref-dotdot",
        card("fakeimpl/arith.py::add", "../fakeimpl/arith.py::add"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, "refs[0]", "`..`"),
    ),
    Case(
        "covers-dotdot",
        card("version: 1", "covers: [fakeimpl/../../x.py]\nversion: 1"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, "covers[0]", "`..`"),
    ),
    Case(
        "test-through-symlink-out",
        steps(symlink_out, card("witnesses/test_arith.py::test_add_exact", "witnesses/out/test_x.py::test_a")),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, "witnesses[0].test", "symlink"),
    ),
    # ---- liars: a name registered twice is refused by validate and run alike, whatever the file order
    Case(
        "liar-twice-in-two-files-validate",
        steps(
            liar_files(("dup_a.py", CORRECT), ("dup_b.py", WRONG)), card("version: 1", "liars: [dup.same]\nversion: 1")
        ),
        ("validate", "--cards", "cards-case"),
        2,
        ("witnesses/liars/dup_b.py", "name='dup.same'", "more than once"),
    ),
    Case(
        "liar-twice-in-two-files-run",
        steps(
            liar_files(("dup_a.py", CORRECT), ("dup_b.py", WRONG)), card("version: 1", "liars: [dup.same]\nversion: 1")
        ),
        ("run", "--cards", "cards-case"),
        2,
        ("witnesses/liars/dup_b.py", "more than once"),
        ran=False,
    ),
    Case(
        "liar-twice-in-one-file-run",
        steps(
            liar_files(("dup_a.py", WRONG + "\n\n" + CORRECT.split("\n", 2)[2])),
            card("version: 1", "liars: [dup.same]\nversion: 1"),
        ),
        ("run", "--cards", "cards-case"),
        2,
        ("witnesses/liars/dup_a.py", "more than once"),
        ran=False,
    ),
    Case(
        "liar-target-dotdot",
        liar_files(
            (
                "escape.py",
                'from harness.liars import liar\n\n\n@liar("esc.x", target="..fakeimpl.arith:add")\n'
                "def add(a, b):\n    return a\n",
            )
        ),
        ("validate",),
        2,
        ("witnesses/liars/escape.py", "target=", "dotted names only"),
    ),
    # ---- evidence
    Case(
        "evidence-recorded-twice",
        card(
            "witnesses/test_arith.py::test_add_exact\n    bounds: {max_abs_delta: {le: 0}}",
            "witnesses/test_evidence.py::test_records_a_key_twice\n    bounds: {max_abs_delta: {le: 1}}\n"
            "    reason: any value up to 1 is fine here",
        ),
        ("run", "--cards", "cards-case", "--json", "v.json"),
        1,
        ("already recorded",),
        verdict="ERROR",
    ),
    # ---- options: exit 2 with one line saying what is allowed, before anything runs
    Case(
        "seed-too-large",
        card(),
        ("run", "--cards", "cards-case", "--seed", "99999999999999999999"),
        2,
        ("--seed", "out of range"),
        ran=False,
    ),
    Case("seed-negative", card(), ("run", "--cards", "cards-case", "--seed", "-1"), 2, ("--seed",), ran=False),
    *[
        Case(
            f"timeout-{t}",
            card(),
            ("run", "--cards", "cards-case", "--timeout", t),
            2,
            ("--timeout", "above 0"),
            ran=False,
        )
        for t in ("0", "nan", "inf", "-1")
    ],
    Case(
        "timeout-too-large",
        card(),
        ("run", "--cards", "cards-case", "--timeout", "1e12"),
        2,
        ("--timeout", "at most 1e+06"),
        ran=False,
    ),
    Case(
        "card-timeout-infinite",
        card("bounds: {max_abs_delta: {le: 0}}", "bounds: {max_abs_delta: {le: 0}}\n    timeout: .inf"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, "witnesses[0].timeout", "too large"),
    ),
    Case(
        "card-timeout-nan",
        card("bounds: {max_abs_delta: {le: 0}}", "bounds: {max_abs_delta: {le: 0}}\n    timeout: .nan"),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, "witnesses[0].timeout"),
    ),
    Case("jobs-zero", card(), ("run", "--cards", "cards-case", "-j", "0"), 2, ("--jobs", "1 or more"), ran=False),
    Case("history-limit-zero", card(), ("history", "--limit", "0"), 2, ("--limit",), ran=False),
    # ---- output locations: checked before any witness runs; never exit 0 without a record
    Case(
        "reports-under-a-file",
        steps(card(), make_file("blocker")),
        ("run", "--cards", "cards-case", "--reports", "blocker/reports"),
        2,
        ("--reports", "blocker/reports"),
        ran=False,
    ),
    Case(
        "ledger-is-a-folder",
        steps(card(), make_dir("out/ledger.sqlite")),
        ("run", "--cards", "cards-case", "--reports", "out"),
        2,
        ("ledger",),
        ran=False,
    ),
    Case(
        "json-is-a-folder",
        steps(card(), make_dir("jdir")),
        ("run", "--cards", "cards-case", "--json", "jdir"),
        2,
        ("--json", "is a folder"),
        ran=False,
        absent=("jdir.tmp",),
    ),
    Case(
        "json-under-a-file",
        steps(card(), make_file("jfile")),
        ("run", "--cards", "cards-case", "--json", "jfile/v.json"),
        2,
        ("--json", "cannot write"),
        ran=False,
    ),
    # ---- text that would reach the reports raw
    Case(
        "title-with-nul",
        card("title: add is exact", 'title: "add\\0 is exact"'),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, "title", "U+0000"),
    ),
    Case(
        "title-with-escape",
        card("title: add is exact", 'title: "add \\e[31m is exact"'),
        ("validate", "--cards", "cards-case"),
        2,
        (CARD_FILE, "title", "U+001B"),
    ),
    # ---- validate, list and run agree
    *[
        Case(
            f"empty-cards-folder-{cmd}",
            make_dir("cards-case"),
            (cmd, "--cards", "cards-case"),
            2,
            ("no cards found",),
            ran=False,
        )
        for cmd in ("validate", "list", "run")
    ],
    Case(
        "broken-card-blocks-a-full-run",
        steps(
            card("regime: A", "regime: Z"),
            lambda r: shutil.copy(r / "obligations" / "fx-add.yaml", r / "cards-case" / "fx-add.yaml"),
        ),
        ("run", "--cards", "cards-case"),
        2,
        (CARD_FILE, "regime"),
        ran=False,
    ),
    Case(
        "broken-card-named-but-valid-selection-runs",
        steps(
            card("regime: A", "regime: Z"),
            lambda r: shutil.copy(r / "obligations" / "fx-add.yaml", r / "cards-case" / "fx-add.yaml"),
        ),
        ("run", "FX-ADD", "--cards", "cards-case", "--json", "v.json"),
        0,
        (CARD_FILE, "not selected"),
        verdict="PROVEN",
    ),
    Case(
        "selecting-a-broken-card-is-refused",
        steps(
            card("regime: A", "regime: Z"),
            lambda r: shutil.copy(r / "obligations" / "fx-add.yaml", r / "cards-case" / "fx-add.yaml"),
        ),
        ("run", "BAD-1", "--cards", "cards-case"),
        2,
        (CARD_FILE, "regime"),
        ran=False,
    ),
    Case(
        "id-in-the-wrong-case-gets-a-suggestion",
        card(),
        ("run", "bad-1", "--cards", "cards-case"),
        2,
        ("did you mean `BAD-1`",),
        ran=False,
    ),
    # ---- a FAILED card's liars say "not run", not 0/1
    Case(
        "failed-card-liars-not-run",
        card(
            "witnesses/test_arith.py::test_add_exact\n    bounds: {max_abs_delta: {le: 0}}",
            "witnesses/test_arith.py::test_add_is_subtraction\nliars: [arith.off_by_one]",
        ),
        ("run", "--cards", "cards-case", "--json", "v.json"),
        1,
        ("not run",),
        verdict="FAILED",
    ),
    # ---- weights that are not a GGUF
    Case(
        "gguf-env-is-a-text-file",
        make_file("weights.gguf", "hello\n"),
        ("oracle", "export", "--if-missing", "--oracle-dir", "oracle-out"),
        2,
        ("weights.gguf", "is not a GGUF file", "KVPROOF_GGUF"),
        ran=False,
        env={"KVPROOF_GGUF": "weights.gguf"},
    ),
]

# an output path that is the reports folder itself (it raised IndexError in the output check)
CASES += [
    Case(
        f"output-is-the-reports-folder-{name}",
        make_file("unused.txt"),
        args,
        2,
        ("is the reports folder itself",),
        ran=False,
    )
    for name, args in (
        ("json", ("run", "FX-ADD", "--json", "out.json", "--reports", "out.json")),
        ("json-folder", ("run", "FX-ADD", "--json", "out", "--reports", "out")),
        ("json-dot", ("run", "FX-ADD", "--json", "reports/.", "--reports", "reports")),
    )
]


def _copy_project(dest: Path) -> Path:
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    return dest


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "project")
    case.setup(root)
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200", **case.env}
    for name in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR"):
        env.pop(name, None)
    if "KVPROOF_GGUF" in case.env:
        env["KVPROOF_GGUF"] = str(root / case.env["KVPROOF_GGUF"])
    proc = subprocess.run(
        [sys.executable, str(ENTRY), *case.args], cwd=root, env=env, capture_output=True, text=True, timeout=180
    )
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text
    assert proc.returncode == case.exit, text
    for needle in case.says:
        assert needle in text, f"{needle!r} not in:\n{text}"
    started = (root / "reports").is_dir() and any(p.name != "ledger.sqlite" for p in (root / "reports").iterdir())
    if not case.ran:
        assert "kvproof:" not in proc.stdout, "the run started although its input was refused"
        assert not started, "a report was written for a refused run"
    if case.verdict is not None:
        doc = json.loads((root / "v.json").read_text())
        assert [c["verdict"] for c in doc["cards"]] == [case.verdict], text
    for rel in case.absent:
        assert not (root / rel).exists(), rel


def test_a_run_whose_report_cannot_be_written_exits_2_not_0(tmp_path, monkeypatch, capsys):
    """The gate passes, but publishing fails after the run: the exit code must not say all is well."""
    from harness import cli
    from harness.report import folder

    root = _copy_project(tmp_path / "project")
    monkeypatch.setenv("KVPROOF_ROOT", str(root))
    monkeypatch.delenv("KVPROOF_REPORTS_DIR", raising=False)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(folder, "publish", fail)
    code = cli.main(["run", "FX-ADD", "--json", str(tmp_path / "v.json")])
    err = capsys.readouterr().err
    assert code == 2
    assert "no space left on" in err and "the device is full" in err and "--reports" in err
    assert "evidence was not recorded" in err
    assert json.loads((tmp_path / "v.json").read_text())["header"]["summary"]["gate"] == "PASS"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "--json", ""], "argument --json: an empty value"),
        (["run", "--json="], "argument --json: an empty value"),
        (["run", "--target", ""], "argument --target: an empty value"),
        (["run", "--target", "  "], "argument --target: an empty value"),
        (["run", "--cards", ""], "argument --cards: an empty value"),
        (["run", "--reports", ""], "argument --reports: an empty value"),
        (["run", "--matrix", ""], "argument --matrix: an empty value"),
        (["run", "--tag", "\t"], "argument --tag: an empty value"),
        (["run", "-j", ""], "argument -j: an empty value"),
        (["run", ""], "argument 2 is empty"),
        (["", "run"], "argument 1 is empty"),
        (["status", "KV-T1", ""], "argument 3 is empty"),
        (["compare", "latest", "--markdown", ""], "argument --markdown: an empty value"),
        (["mutate", "--show", ""], "argument --show: an empty value"),
        (["oracle", "export", "--out", ""], "argument --out: an empty value"),
    ],
)
def test_an_empty_option_value_is_refused_naming_the_option(argv, says, capsys):
    """``--json "$OUT"`` with OUT unset must not be a run without its document (it was ignored silently)."""
    from harness.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err
