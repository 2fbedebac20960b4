"""A verdict is bound to everything that can change it: `--changed` never replays, and `status` calls STALE, a
verdict whose inputs changed, whether or not the card names them.

Each row copies tests/fixtures/project, adds one card whose witness depends on one input the card does not name
(a helper module in a sub-folder, a package elsewhere in the project, a data file read with open(),
numpy.load or Path.read_text, a module imported inside the test body, a module a liar imports, a file the
implementation reads, a parent conftest, the pytest configuration, a sitecustomize, an environment variable),
runs it (PROVEN), checks that `--changed` with nothing changed replays it, changes the input, and checks that
`status` says STALE and `--changed` runs the card again, both naming what changed. docs/trust.md ("What a
verdict is bound to") states the rule these rows test.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.plan.binding import NOT_RECORDED, READS_PATH, BoundFile, digest

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"
CARD_ID = "READS-1"


def _card(test: str, liars: str = "") -> str:
    return f"""\
id: {CARD_ID}
title: the witness sees five
module: fakeimpl.arith
regime: A
theorem: the value the witness reads is five.
proof: it is written so.
refs: [fakeimpl/arith.py::add]
witnesses:
  - id: five
    test: {test}
{liars}version: 1
"""


def _copy_project(dest: Path) -> Path:
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__", "reports", ".hypothesis"))
    return dest


def _run(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "250", **env}
    for name in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR"):
        full.pop(name, None)
    return subprocess.run(
        [sys.executable, str(ENTRY), *args], cwd=root, env=full, capture_output=True, text=True, timeout=180
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _edit(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        path = root / rel
        path.write_text(path.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")

    return change


def _npy(rel: str, value: int) -> Callable[[Path], None]:
    def write(root: Path) -> None:
        import numpy as np

        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        np.save(root / rel, np.array([value, 0, 0]))

    return write


@dataclass(frozen=True)
class Case:
    id: str
    files: dict[str, str]  # written before the first run
    change: Callable[[Path], None]  # the input changed after it
    names: str  # what `status` and `--changed` name as changed
    test: str = "witnesses/test_reads.py::test_five"
    liars: str = ""
    env: dict[str, str] = field(default_factory=dict)  # for every command
    env_after: dict[str, str] = field(default_factory=dict)  # for the commands after the change
    setup: Callable[[Path], None] | None = None


WITNESS_IMPORTS = """
from helpers.sub.values import VALUE


def test_five():
    assert VALUE == 5
"""

WITNESS_READS_OUTSIDE = """
import json
from pathlib import Path


def test_five():
    data = Path(__file__).resolve().parents[2] / "outside" / "data.json"
    assert json.loads(data.read_text())["value"] == 5
"""


def _outside(root: Path) -> None:
    (root.parent / "outside").mkdir(exist_ok=True)
    (root.parent / "outside" / "data.json").write_text('{"value": 5}')
    (root.parent / "tmp").mkdir(exist_ok=True)  # the temporary folder is not bound: keep it elsewhere


CASES = [
    Case(
        "data-file-outside-the-project",
        {"witnesses/test_reads.py": WITNESS_READS_OUTSIDE},
        lambda root: (root.parent / "outside" / "data.json").write_text('{"value": 5, "more": 1}'),
        "outside/data.json changed",
        setup=_outside,
        env={"TMPDIR": "../tmp"},
    ),
    Case(
        "helper-module-in-a-sub-folder-of-witnesses",
        {
            "witnesses/helpers/__init__.py": "",
            "witnesses/helpers/sub/__init__.py": "",
            "witnesses/helpers/sub/values.py": "VALUE = 5\n",
            "witnesses/test_reads.py": WITNESS_IMPORTS,
        },
        _edit("witnesses/helpers/sub/values.py", "VALUE = 5", "VALUE = 5  # edited"),
        "witnesses/helpers/sub/values.py changed",
    ),
    Case(
        "helper-package-elsewhere-in-the-project",
        {
            "tests_support/__init__.py": "",
            "tests_support/numbers.py": "def five():\n    return 5\n",
            "witnesses/test_reads.py": "from tests_support.numbers import five\n\n\ndef test_five():\n"
            "    assert five() == 5\n",
        },
        _edit("tests_support/numbers.py", "return 5", "return 2 + 3"),
        "tests_support/numbers.py changed",
    ),
    Case(
        "helper-package-under-src-put-on-the-path-by-the-witness",
        {
            "src/mylib/__init__.py": "",
            "src/mylib/core.py": "FIVE = 5\n",
            "witnesses/test_reads.py": "import sys\nfrom pathlib import Path\n\n"
            "sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'src'))\n\n"
            "from mylib.core import FIVE  # noqa: E402\n\n\ndef test_five():\n    assert FIVE == 5\n",
        },
        _edit("src/mylib/core.py", "FIVE = 5", "FIVE = 10 // 2"),
        "src/mylib/core.py changed",
    ),
    Case(
        "module-imported-lazily-in-the-test-body",
        {
            "tests_support/__init__.py": "",
            "tests_support/lazy.py": "VALUE = 5\n",
            "witnesses/test_reads.py": "def test_five():\n    from tests_support.lazy import VALUE\n\n"
            "    assert VALUE == 5\n",
        },
        _edit("tests_support/lazy.py", "VALUE = 5", "VALUE = 6 - 1"),
        "tests_support/lazy.py changed",
    ),
    Case(
        "json-fixture-read-with-open",
        {
            "witnesses/data/expected.json": '{"value": 5}',
            "witnesses/test_reads.py": "import json\nfrom pathlib import Path\n\n\ndef test_five():\n"
            "    with open(Path(__file__).parent / 'data' / 'expected.json') as fh:\n"
            "        assert json.load(fh)['value'] == 5\n",
        },
        _edit("witnesses/data/expected.json", "5}", '5, "note": 1}'),
        "witnesses/data/expected.json changed",
    ),
    Case(
        "text-fixture-read-with-path-read-text-relative-to-the-project",
        {
            "fixtures_data/five.txt": "5\n",
            "witnesses/test_reads.py": "from pathlib import Path\n\n\ndef test_five():\n"
            "    assert int(Path('fixtures_data/five.txt').read_text()) == 5\n",
        },
        _edit("fixtures_data/five.txt", "5\n", "5\n\n"),
        "fixtures_data/five.txt changed",
    ),
    Case(
        "npy-fixture-read-with-numpy-load",
        {
            "witnesses/test_reads.py": "from pathlib import Path\n\nimport numpy as np\n\n\ndef test_five():\n"
            "    assert int(np.load(Path(__file__).parent / 'data' / 'five.npy')[0]) == 5\n",
        },
        _npy("witnesses/data/five.npy", 6),
        "witnesses/data/five.npy changed",
        setup=_npy("witnesses/data/five.npy", 5),
    ),
    Case(
        "file-the-implementation-reads-at-run-time",
        {
            "fakeimpl/factor.txt": "5\n",
            "fakeimpl/factor.py": "from pathlib import Path\n\n\ndef factor():\n"
            "    return int((Path(__file__).parent / 'factor.txt').read_text())\n",
            "witnesses/test_reads.py": "from fakeimpl.factor import factor\n\n\ndef test_five():\n"
            "    assert factor() == 5\n",
        },
        _edit("fakeimpl/factor.txt", "5\n", "5 \n"),
        "fakeimpl/factor.txt changed",
    ),
    Case(
        "module-a-liar-imports",
        {
            "liar_support/__init__.py": "",
            "liar_support/offset.py": "OFFSET = 1\n",
            "witnesses/liars/helped.py": "from harness.liars import liar\n\n\n"
            '@liar("helped.offset", target="fakeimpl.arith:add", why="adds an offset")\n'
            "def add(a, b):\n    from liar_support.offset import OFFSET\n\n    return a + b + OFFSET\n",
            "witnesses/test_reads.py": "from fakeimpl.arith import add\n\n\ndef test_five():\n"
            "    assert add(2, 3) == 5\n",
        },
        _edit("liar_support/offset.py", "OFFSET = 1", "OFFSET = 0"),
        "liar_support/offset.py changed",
        liars="liars: [helped.offset]\n",
    ),
    Case(
        "conftest-in-a-parent-folder",
        {
            "witnesses/deep/conftest.py": "import pytest\n\n\n@pytest.fixture\ndef five():\n    return 5\n",
            "witnesses/deep/er/test_deep_reads.py": "def test_five(five):\n    assert five == 5\n",
        },
        _edit("witnesses/deep/conftest.py", "return 5", "return 4 + 1"),
        "witnesses/deep/conftest.py changed",
        test="witnesses/deep/er/test_deep_reads.py::test_five",
    ),
    Case(
        "pytest-ini-created-in-the-project",
        {"witnesses/test_reads.py": "def test_five():\n    assert 5 == 5\n"},
        lambda root: _write(root, {"pytest.ini": "[pytest]\nmarkers =\n    slow: slow\n"}),
        "pytest.ini newly bound",
    ),
    Case(
        "pyproject-pytest-options-changed",
        {
            "pyproject.toml": '[tool.pytest.ini_options]\nmarkers = ["slow: slow"]\n',
            "witnesses/test_reads.py": "def test_five():\n    assert 5 == 5\n",
        },
        _edit("pyproject.toml", '"slow: slow"', '"slow: slow", "fast: fast"'),
        "pyproject.toml changed",
    ),
    Case(
        "setup-cfg-in-the-witness-folder-created",
        {"witnesses/test_reads.py": "def test_five():\n    assert 5 == 5\n"},
        lambda root: _write(root, {"witnesses/setup.cfg": "[tool:pytest]\nmarkers =\n    slow: slow\n"}),
        "witnesses/setup.cfg newly bound",
    ),
    Case(
        "tox-ini-created-in-the-project",
        {"witnesses/test_reads.py": "def test_five():\n    assert 5 == 5\n"},
        lambda root: _write(root, {"tox.ini": "[pytest]\naddopts = -p no:randomly\n"}),
        "tox.ini newly bound",
    ),
    Case(
        "sitecustomize-in-the-project",
        {
            "sitecustomize.py": "FIVE = 5\n",
            "witnesses/test_reads.py": "def test_five():\n    assert 5 == 5\n",
        },
        _edit("sitecustomize.py", "FIVE = 5", "FIVE = 6"),
        "sitecustomize.py changed",
    ),
    Case(
        "environment-variable-that-changes-numbers",
        {"witnesses/test_reads.py": "def test_five():\n    assert 5 == 5\n"},
        lambda root: None,
        "(env OMP_NUM_THREADS) changed",
        env={"OMP_NUM_THREADS": "1"},
        env_after={"OMP_NUM_THREADS": "2"},
    ),
    Case(
        "python-hash-seed-set-later",
        {"witnesses/test_reads.py": "def test_five():\n    assert 5 == 5\n"},
        lambda root: None,
        "(env PYTHONHASHSEED) newly bound",
        env_after={"PYTHONHASHSEED": "7"},
    ),
]


def _entry(root: Path, *args: str, **env: str) -> tuple[dict, str]:
    proc = _run(root, "run", "--cards", "cards-case", "--json", "v.json", "-j", "1", *args, **env)
    text = proc.stdout + proc.stderr
    assert "Traceback (most recent call last)" not in text, text
    (card,) = json.loads((root / "v.json").read_text())["cards"]
    return card, text


def _prepare(root: Path, case: Case) -> None:
    _write(root, {"cards-case/reads.yaml": _card(case.test, case.liars), **case.files})
    if case.setup is not None:
        case.setup(root)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_changed_input_is_never_replayed_and_makes_the_verdict_stale(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OMP_NUM_THREADS", "PYTHONHASHSEED"):  # the rows that bind them set them
        monkeypatch.delenv(name, raising=False)
    root = _copy_project(tmp_path / "project")
    _prepare(root, case)
    first, text = _entry(root, **case.env)
    assert first["verdict"] == "PROVEN", text
    if case.liars:
        assert first["counts"]["liars_caught"] == 1, text
    again, text = _entry(root, "--changed", **case.env)
    assert again["replayed_from"] is not None, f"nothing changed, yet it was not replayed:\n{text}"

    case.change(root)
    after = {**case.env, **case.env_after}
    status = _run(root, "status", "--cards", "cards-case", **after)
    assert "STALE" in status.stdout and case.names in status.stdout, status.stdout + status.stderr
    rerun, text = _entry(root, "--changed", **after)
    assert rerun["replayed_from"] is None, text
    assert f"{CARD_ID}: not replayed: " in text and case.names in text, text


def _simple(root: Path, witness: str, files: dict[str, str] | None = None) -> None:
    _write(root, {"cards-case/reads.yaml": _card("witnesses/test_reads.py::test_five"), **(files or {})})
    _write(root, {"witnesses/test_reads.py": witness})


def test_unchanged_inputs_replay_fast_and_the_binding_names_every_kind(tmp_path: Path) -> None:
    """A replay still costs no witness process: the read-set is hashed again, nothing runs."""
    root = _copy_project(tmp_path / "project")
    _simple(
        root,
        "from tests_support.numbers import five\n\n\ndef test_five():\n    assert five() == 5\n",
        {
            "tests_support/__init__.py": "",
            "tests_support/numbers.py": "def five():\n    return 5\n",
            "pyproject.toml": '[project]\nname = "fixture"\nversion = "0"\ndependencies = ["PyYAML>=6"]\n',
        },
    )
    first, text = _entry(root)
    assert first["verdict"] == "PROVEN", text
    roles = {b["path"]: b["role"] for b in first["bound_files"]}
    assert roles["tests_support/numbers.py"] == "read" and roles[READS_PATH] == "reads"
    assert roles["pyproject.toml"] == "config"
    shown = [p for p, r in roles.items() if r == "environment"]
    for name in ("python ", "library numpy ", "library hypothesis ", "library pytest ", "library pyyaml "):
        assert any(p.startswith("(" + name) for p in shown), shown
    t0 = time.monotonic()
    again, text = _entry(root, "--changed")
    took = time.monotonic() - t0
    assert again["replayed_from"] is not None, text
    assert took < 5.0, f"a replay took {took:.1f} s"


WRITES_AND_READS = """
from pathlib import Path


def test_five(tmp_path):
    root = Path.cwd()
    (root / "scratch.txt").write_text("5")  # its own output, read back: not an input
    assert (root / "scratch.txt").read_text() == "5"
    cache = root / ".cache" / "derived.txt"
    cache.parent.mkdir(exist_ok=True)
    if cache.exists():
        cache.read_text()
    assert 5 == 5
"""


def test_what_a_witness_wrote_and_derived_caches_do_not_bind_it(tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "project")
    _simple(root, WRITES_AND_READS)
    (root / ".cache").mkdir()
    (root / ".cache" / "derived.txt").write_text("1")
    first, text = _entry(root)
    assert first["verdict"] == "PROVEN", text
    paths = {b["path"] for b in first["bound_files"]}
    assert not {"scratch.txt", ".cache/derived.txt"} & paths, paths
    assert not [p for p in paths if "__pycache__" in p or p.startswith("reports/")], paths
    (root / ".cache" / "derived.txt").write_text("2")
    again, text = _entry(root, "--changed")
    assert again["replayed_from"] is not None, text


def test_a_verdict_bound_before_reads_were_recorded_is_never_replayed(tmp_path: Path) -> None:
    """A ledger row of an older kvproof (no read-set marker) is not replayed as if fully bound, even when every
    file it names is unchanged; `status` says why it is STALE."""
    root = _copy_project(tmp_path / "project")
    _simple(root, "def test_five():\n    assert 5 == 5\n")
    first, text = _entry(root)
    assert first["verdict"] == "PROVEN", text
    with sqlite3.connect(root / "reports" / "ledger.sqlite") as db:  # as an older kvproof recorded it
        db.execute("DELETE FROM bound_files WHERE role IN ('read', 'reads')")
        rows = db.execute("SELECT path, role, sha256 FROM bound_files WHERE card_id = ?", (CARD_ID,)).fetchall()
        old = digest(BoundFile(*r) for r in rows)
        db.execute("UPDATE verdicts SET bound_digest = ? WHERE card_id = ?", (old, CARD_ID))
    status = _run(root, "status", "--cards", "cards-case")
    assert "STALE" in status.stdout and NOT_RECORDED in status.stdout, status.stdout + status.stderr
    again, text = _entry(root, "--changed")
    assert again["replayed_from"] is None, text
    assert f"{CARD_ID}: not replayed: {NOT_RECORDED}" in text, text
    third, text = _entry(root, "--changed")  # measured again, with its read-set: replayed from now on
    assert third["replayed_from"] is not None, text


def test_the_read_log_keeps_reads_inside_the_root_and_drops_what_the_process_wrote(tmp_path: Path) -> None:
    from harness.execute.reads import ReadLog

    (tmp_path / "pkg").mkdir()
    for name in ("read.txt", "written.txt", "removed.txt"):
        (tmp_path / "pkg" / name).write_text("x")
    log = ReadLog(str(tmp_path))
    log.hook("open", (str(tmp_path / "pkg" / "read.txt"), "r", 0))
    log.hook("open", (str(tmp_path / "pkg" / "written.txt"), "r", 0))
    log.hook("open", (str(tmp_path / "pkg" / "written.txt"), "w", 0))
    log.hook("open", (str(tmp_path / "pkg" / "removed.txt"), "rb", 0))
    log.hook("os.remove", (str(tmp_path / "pkg" / "removed.txt"), None))
    log.hook("open", (str(tmp_path / "pkg" / "__pycache__" / "m.cpython-311.pyc"), "rb", 0))
    log.hook("open", ("/etc/hostname", "r", 0))  # outside the project: bound by its absolute path
    log.hook("open", ("/proc/cpuinfo", "r", 0))  # the system's
    log.hook("open", ("/etc", None, 0))  # a folder
    log.hook("open", (3, "r", 0))  # a file descriptor
    log.hook("open", (object(), None, None))  # never raises
    code = compile("x = 1", str(tmp_path / "pkg" / "mod.py"), "exec")
    log.hook("exec", (code,))
    import harness.verdict

    log.hook("exec", (compile("x = 1", harness.verdict.__file__, "exec"),))  # the harness is not bound
    assert log.files() == ["/etc/hostname", "pkg/mod.py", "pkg/read.txt"]


def test_a_process_that_did_not_report_its_reads_leaves_a_binding_that_never_replays(tmp_path: Path) -> None:
    from harness.plan.binding import NOT_REPORTED, ReadScope, read_files, unrecorded

    bound = (BoundFile("obligations/a.yaml", "card", "1" * 64),)
    scope = ReadScope.of(tmp_path, tmp_path / "reports", None)
    missing = read_files(bound, None, scope)
    assert unrecorded([vars(b) for b in missing]) == NOT_REPORTED
    assert unrecorded([vars(b) for b in bound]) == NOT_RECORDED
    (tmp_path / "helper.py").write_text("x = 1")
    whole = read_files(bound, ["helper.py", "reports/ledger.sqlite", ".git/HEAD"], scope)
    assert [b.path for b in whole] == ["obligations/a.yaml", "helper.py", READS_PATH]
    assert unrecorded([vars(b) for b in whole]) == ""
