"""Hostile witnesses, one row per case: code that tries to vouch for itself must not get a verdict it did not earn.

Each row runs ``run_obligations.py`` on a fresh copy of the fixture project with one hostile or careless
witness, conftest, liar or setting added, and checks the card's verdict, that the reason names what
happened, and that no row ends in a traceback or a lost run. docs/trust.md states the line these rows test.
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


def _card(witness: str, liars: str = "") -> str:
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
    bounds: {{max_abs_delta: {{le: 0}}}}
{liars}version: 1
"""


# a witness whose assertion fails: nothing may turn it into PROVEN
FAILS = """
def test_fails(evidence):
    evidence.record("max_abs_delta", 0)
    assert 2 + 2 == 5
"""

FORGES_ENCODE = """
import harness.wire.messages as wire


def test_fails(evidence):
    real = wire.encode

    def forged(event):
        if isinstance(event, wire.NodeFinished) and event.result.outcome != "passed":
            event = wire.NodeFinished(wire.NodeResult(event.result.nodeid, "passed", evidence={"max_abs_delta": 0}))
        return real(event)

    wire.encode = forged
    evidence.record("max_abs_delta", 0)
    assert 2 + 2 == 5
"""

FORGES_AND_EXITS = """
import json
import os
import sys

from harness.wire.messages import JobPlan


def test_fails(request):
    plan = JobPlan.read(request.config.getoption("kvproof_plan"))
    line = {"event": "result", "nodeid": request.node.nodeid, "outcome": "passed", "evidence": {"max_abs_delta": 0}}
    with open(plan.out, "a") as out:
        out.write(json.dumps(line) + "\\n")
    sys.stdout.flush()
    os._exit(0)
"""

REWRITING_CONFTEST = """
import pytest

pytest_plugins = ["harness.plugin"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
        report.longrepr = None
"""

# checks nothing: records 0 and calls add, so a liar that crashes inside add "fails" it
CHECKS_NOTHING = """
from fakeimpl.arith import add


def test_calls_add(evidence):
    add(2, 3)
    evidence.record("max_abs_delta", 0)
"""

CRASHING_LIAR = """
from harness.liars import liar


@liar("hostile.crashes", target="fakeimpl.arith:add", why="raises instead of adding")
def add(a, b):
    raise NotImplementedError("this liar crashes")
"""

ASSERTING_LIAR = """
from harness.liars import liar


@liar("hostile.asserts", target="fakeimpl.arith:add", why="asserts in its own body")
def add(a, b):
    assert False, "the liar's own assertion"
"""


KILLS_PARENT = """
import os
import signal


def test_fails(evidence):
    evidence.record("max_abs_delta", 0)
    os.kill(os.getppid(), signal.SIGKILL)
"""

DISK_FULL = """
import errno


def test_fails(evidence):
    evidence.record("max_abs_delta", 0)
    raise OSError(errno.ENOSPC, "No space left on device", "scratch.bin")
"""

# the liar's signature is wrong: calling it raises TypeError; each witness below turns that crash into a "failure"
WRONG_SIGNATURE_LIAR = """
from harness.liars import liar


@liar("hostile.signature", target="fakeimpl.arith:add", why="takes one argument too few")
def add(a):
    return a
"""

FAIL_IN_EXCEPT = """
import pytest

from fakeimpl.arith import add


def test_calls_add(evidence):
    evidence.record("max_abs_delta", 0)
    try:
        got = add(2, 3)
    except Exception as e:
        pytest.fail(f"add raised {e}")
    assert got == 5
"""

ASSERT_FROM_NONE = """
from fakeimpl.arith import add


def test_calls_add(evidence):
    evidence.record("max_abs_delta", 0)
    try:
        got = add(2, 3)
    except TypeError:
        raise AssertionError("add is wrong") from None
    assert got == 5
"""

ASSERT_FROM_CAUSE = """
from fakeimpl.arith import add


def test_calls_add(evidence):
    evidence.record("max_abs_delta", 0)
    try:
        got = add(2, 3)
    except Exception as exc:
        raise AssertionError("add is wrong") from exc
    assert got == 5
"""

ASSERT_IN_HANDLER = """
from fakeimpl.arith import add


def test_calls_add(evidence):
    evidence.record("max_abs_delta", 0)
    ok = True
    try:
        add(2, 3)
    except Exception:
        ok = False
        assert ok, "add did not add"
"""

# an honest witness: its check fails under the liar without any exception behind it
CHECKS_THE_SUM = """
from fakeimpl.arith import add


def test_calls_add(evidence):
    evidence.record("max_abs_delta", abs(add(2, 3) - 5))
    assert add(2, 3) == 5
"""

# the liar's lie is a refusal: it says so (raises=ValueError), so a witness that fails on the refusal caught it
REFUSING_LIAR = """
from harness.liars import liar


@liar("hostile.refuses", target="fakeimpl.arith:add", why="refuses a valid call", raises=ValueError)
def add(a, b):
    raise ValueError("add refuses 2 + 3")
"""

# a factory liar that calls the real add with one argument too many: the TypeError comes from the original,
# through the liar's call, and is a crash all the same
FACTORY_CRASH_LIAR = """
from harness.liars import liar


@liar("hostile.factory_crash", target="fakeimpl.arith:add", factory=True, why="passes an extra argument")
def make(original):
    def add(a, b):
        return original(a, b, 0)

    return add
"""

# the property fails in a nested Hypothesis test because the liar's call raises: still a crash
HYPOTHESIS_FAIL_IN_EXCEPT = """
import pytest
from hypothesis import given, strategies as st

from fakeimpl.arith import add


def test_calls_add(evidence):
    evidence.record("max_abs_delta", 0)

    @given(st.integers(), st.integers())
    def prop(a, b):
        try:
            got = add(a, b)
        except Exception as e:
            pytest.fail(f"add raised {e}")
        assert got == a + b

    prop()
"""

BAD_ADD_LIAR = """
from harness.liars import liar


@liar("hostile.off_by_one", target="fakeimpl.arith:add", why="adds one too many")
def add(a, b):
    return a + b + 1
"""


def _control_card(value: str, op: str = "ne", limit: str = "0") -> dict[str, str]:
    """A card whose one witness passes and whose control records ``value`` under a bound ``{op: limit}``."""
    card = _card("test_calls_add").replace(
        "version: 1\n",
        "controls:\n  - id: differs\n    test: witnesses/test_control.py::test_differs\n"
        f"    bounds: {{delta: {{{op}: {limit}}}}}\nversion: 1\n",
    )
    control = f"""
def test_differs(evidence):
    deltas = []
    evidence.record("delta", {value})
"""
    return {
        "cards-case__hostile_DOT_yaml": card,
        "witnesses__test_hostile_DOT_py": CHECKS_THE_SUM,
        "witnesses__test_control_DOT_py": control,
    }


# fills the temporary folder: the witness process cannot even write its events or stderr (the disk is full)
FILLS_TMPDIR = """
import os
import tempfile


def test_fails(evidence):
    evidence.record("max_abs_delta", 0)
    with open(os.path.join(tempfile.gettempdir(), "junk.bin"), "wb") as f:
        while True:
            f.write(b"x" * 65536)
"""

# writes past its own file size limit: SIGXFSZ kills it
FILE_SIZE_LIMIT = """
import resource


def test_fails(evidence, tmp_path):
    evidence.record("max_abs_delta", 0)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    with open(tmp_path / "big.bin", "wb") as f:
        for _ in range(64):
            f.write(b"x" * 65536)
            f.flush()
"""


def files(**texts: str) -> Callable[[Path], None]:
    """A setup step writing each ``relative/path=text`` (``__`` in a key stands for ``/``)."""

    def write(root: Path) -> None:
        for rel, text in texts.items():
            path = root / rel.replace("__", "/").replace("_DOT_", ".")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")

    return write


@dataclass(frozen=True)
class Case:
    id: str
    setup: Callable[[Path], None]
    verdict: str
    says: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def card(witness: str, liars: str = "") -> dict[str, str]:
    return {"cards-case__hostile_DOT_yaml": _card(witness, liars)}


CASES = [
    Case(
        "baseline-failing-witness-is-failed",
        files(**card("test_fails"), witnesses__test_hostile_DOT_py=FAILS),
        "FAILED",
    ),
    Case(
        "patched-encode-forges-a-pass",
        files(**card("test_fails"), witnesses__test_hostile_DOT_py=FORGES_ENCODE),
        "ERROR",
        ("pytest's own account says its test body failed",),
    ),
    Case(
        "forged-event-then-os-exit",
        files(**card("test_fails"), witnesses__test_hostile_DOT_py=FORGES_AND_EXITS),
        "ERROR",
        ("pytest's own account of this process is missing",),
    ),
    Case(
        "conftest-rewrites-failures-as-passes",
        files(
            **card("test_fails"), witnesses__test_hostile_DOT_py=FAILS, witnesses__conftest_DOT_py=REWRITING_CONFTEST
        ),
        "ERROR",
        ("witnesses/conftest.py implements pytest_runtest_makereport",),
    ),
    Case(
        "pytest-addopts-setup-only-is-not-inherited",
        files(**card("test_fails"), witnesses__test_hostile_DOT_py=FAILS),
        "FAILED",
        env={"PYTEST_ADDOPTS": "--setup-only"},
    ),
    Case(
        "project-ini-setup-plan-runs-no-body",
        files(
            **card("test_fails"),
            witnesses__test_hostile_DOT_py=FAILS,
            pytest_DOT_ini="[pytest]\naddopts = --setup-plan\n",
        ),
        "ERROR",
        ("no test body run",),
    ),
    Case(
        "liar-that-crashes-proves-nothing",
        files(
            **card("test_calls_add", "liars: [hostile.crashes]\n"),
            witnesses__test_hostile_DOT_py=CHECKS_NOTHING,
            witnesses__liars__hostile_DOT_py=CRASHING_LIAR,
        ),
        "UNVERIFIED",
        ("hostile.crashes", "proved nothing", "NotImplementedError"),
    ),
    Case(
        "liar-asserting-in-its-own-body-proves-nothing",
        files(
            **card("test_calls_add", "liars: [hostile.asserts]\n"),
            witnesses__test_hostile_DOT_py=CHECKS_NOTHING,
            witnesses__liars__hostile_DOT_py=ASSERTING_LIAR,
        ),
        "UNVERIFIED",
        ("hostile.asserts", "raised inside the liar itself"),
    ),
]


CASES += [
    Case(
        "witness-kills-its-parent-the-run-survives",
        files(**card("test_fails"), witnesses__test_hostile_DOT_py=KILLS_PARENT),
        "ERROR",
        ("the fork server died twice while this job ran",),
    ),
    Case(
        "a-file-past-the-size-limit-is-named-in-the-reason",
        files(**card("test_fails"), witnesses__test_hostile_DOT_py=FILE_SIZE_LIMIT),
        "ERROR",
        ("resource exhausted (a file grew past the size limit (ulimit -f))",),
    ),
    Case(
        "disk-full-is-named-in-the-reason",
        files(**card("test_fails"), witnesses__test_hostile_DOT_py=DISK_FULL),
        "ERROR",
        ("no space left on scratch.bin (TMPDIR", "free space or point TMPDIR elsewhere"),
    ),
]

# a liar is caught only by a failed check whose cause is not an exception from the liar's call
CASES += [
    Case(
        f"liar-crash-turned-into-a-failure-{name}",
        files(
            **card("test_calls_add", "liars: [hostile.signature]\n"),
            witnesses__test_hostile_DOT_py=witness,
            witnesses__liars__hostile_DOT_py=WRONG_SIGNATURE_LIAR,
        ),
        "UNVERIFIED",
        ("hostile.signature", "proved nothing", "a check failed while handling TypeError"),
    )
    for name, witness in (
        ("pytest-fail-in-except", FAIL_IN_EXCEPT),
        ("assert-from-none", ASSERT_FROM_NONE),
        ("assert-from-cause", ASSERT_FROM_CAUSE),
        ("assert-in-handler", ASSERT_IN_HANDLER),
    )
]
CASES += [
    Case(
        "liar-crash-in-a-nested-property-is-no-catch",
        files(
            **card("test_calls_add", "liars: [hostile.signature]\n"),
            witnesses__test_hostile_DOT_py=HYPOTHESIS_FAIL_IN_EXCEPT,
            witnesses__liars__hostile_DOT_py=WRONG_SIGNATURE_LIAR,
        ),
        "UNVERIFIED",
        ("hostile.signature", "a check failed while handling TypeError"),
    ),
    Case(
        "liar-crash-through-a-factory-is-no-catch",
        files(
            **card("test_calls_add", "liars: [hostile.factory_crash]\n"),
            witnesses__test_hostile_DOT_py=FAIL_IN_EXCEPT,
            witnesses__liars__hostile_DOT_py=FACTORY_CRASH_LIAR,
        ),
        "UNVERIFIED",
        ("hostile.factory_crash", "a check failed while handling TypeError"),
    ),
    Case(
        "liar-whose-lie-is-a-declared-refusal-is-caught-by-a-check",
        files(
            **card("test_calls_add", "liars: [hostile.refuses]\n"),
            witnesses__test_hostile_DOT_py=FAIL_IN_EXCEPT,
            witnesses__liars__hostile_DOT_py=REFUSING_LIAR,
        ),
        "PROVEN",
        ("hostile.refuses",),
    ),
    Case(
        "liar-caught-by-an-honest-check-is-caught",
        files(
            **card("test_calls_add", "liars: [hostile.off_by_one]\n"),
            witnesses__test_hostile_DOT_py=CHECKS_THE_SUM,
            witnesses__liars__hostile_DOT_py=BAD_ADD_LIAR,
        ),
        "PROVEN",
        ("hostile.off_by_one",),
    ),
    # bounds check the type of what they compare: a control cannot pass on a value of another kind
    Case("control-ne-on-null-is-error", files(**_control_card("max(deltas, default=None)")), "ERROR", ("None",)),
    Case("control-ne-on-text-is-error", files(**_control_card("'1.5'")), "ERROR", ("is not a number",)),
    Case("control-ne-on-bool-is-error", files(**_control_card("True")), "ERROR", ("is not a number",)),
    Case("control-ne-on-list-is-error", files(**_control_card("[1.0]")), "ERROR", ("is not a number",)),
    Case("control-ne-on-nan-fails", files(**_control_card("float('nan')")), "FAILED", ("delta",)),
    Case("control-eq-1-on-true-is-error", files(**_control_card("True", "eq", "1")), "ERROR", ("is not a number",)),
    Case(
        "control-on-a-forged-summary-is-error",
        files(**_control_card("{'observed': 9, 'min': None, 'max': None, 'nan': 0}")),
        "ERROR",
        ("is how evidence.observe reports its summary",),  # refused at record; the judge refuses it too
    ),
    Case("control-ne-on-a-number-that-differs-holds", files(**_control_card("0.25")), "PROVEN"),
]


def _copy_project(dest: Path) -> Path:
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__", "reports", ".hypothesis"))
    return dest


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_witness(case: Case, tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "project")
    case.setup(root)
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200", **case.env}
    for name in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, str(ENTRY), "run", "--cards", "cards-case", "--json", "v.json", "-j", "1"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    text = proc.stdout + proc.stderr
    assert "Traceback (most recent call last)" not in proc.stderr, text
    assert proc.returncode == (0 if case.verdict == "PROVEN" else 1), text
    doc = json.loads((root / "v.json").read_text())
    (entry,) = doc["cards"]
    assert entry["verdict"] == case.verdict, text
    shown = json.dumps(entry)
    for needle in case.says:
        assert needle in shown, f"{needle!r} not in the card's entry:\n{shown[:3000]}"


def _run(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200", **env}
    for name in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR"):
        full.pop(name, None)
    return subprocess.run(
        [sys.executable, str(ENTRY), *args], cwd=root, env=full, capture_output=True, text=True, timeout=180
    )


def test_changed_replays_only_under_the_same_settings(tmp_path: Path) -> None:
    """A KVPROOF_* setting decides the numbers (KVPROOF_ATTENTION, KVPROOF_KERNEL, ...): a verdict measured under
    one value is not replayed under another, and `status` calls it STALE."""
    root = _copy_project(tmp_path / "project")

    def entry(*args: str, **env: str) -> dict:
        proc = _run(root, "run", "FX-ADD", "--json", "v.json", *args, **env)
        (card,) = json.loads((root / "v.json").read_text())["cards"]
        assert card["verdict"] == "PROVEN", proc.stdout + proc.stderr
        return card

    first = entry(KVPROOF_ATTENTION="kernel")
    assert "settings" in {b["role"] for b in first["bound_files"]}
    assert entry("--changed", KVPROOF_ATTENTION="kernel")["replayed_from"] is not None
    assert entry("--changed", KVPROOF_ATTENTION="numpy")["replayed_from"] is None
    status = _run(root, "status", KVPROOF_ATTENTION="kernel")
    assert "STALE" in status.stdout and "settings" in status.stdout, status.stdout


def test_an_untracked_witness_makes_the_tree_dirty(tmp_path: Path) -> None:
    root = _copy_project(tmp_path / "project")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "fixture"], cwd=root, check=True)
    _run(root, "run", "FX-ADD", "--no-liars", "--json", "clean.json")
    assert json.loads((root / "clean.json").read_text())["header"]["git"]["dirty"] is False
    files(**card("test_fails"), witnesses__test_hostile_DOT_py=FAILS)(root)
    (root / "clean.json").unlink()
    _run(root, "run", "--cards", "cards-case", "--json", "v.json")
    assert json.loads((root / "v.json").read_text())["header"]["git"]["dirty"] is True


@pytest.mark.parametrize("raises", ["CacheError", 3, (ValueError, "x"), None, KeyboardInterrupt()])
def test_a_liar_declaring_what_is_not_an_exception_class_is_refused(raises) -> None:
    from harness.errors import LiarError
    from harness.liars import liar

    with pytest.raises(LiarError, match="raises="):
        liar("hostile.bad_raises", target="fakeimpl.arith:add", raises=raises)


def test_a_witness_that_fills_the_temporary_folder_is_reported_as_a_full_disk(tmp_path: Path) -> None:
    """The witness fills TMPDIR (a 4 MiB tmpfs), where its job folder, event stream and stderr live too: it dies
    without a word, and the reason must still say the disk is full (it said "exit code 70" and nothing more)."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        root = _copy_project(tmp_path / "project")
        files(**card("test_fails"), witnesses__test_hostile_DOT_py=FILLS_TMPDIR)(root)
        proc = _run(root, "run", "--cards", "cards-case", "--json", "v.json", "-j", "1", TMPDIR=str(small))
        text = proc.stdout + proc.stderr
        assert proc.returncode == 1 and "Traceback" not in text, text
        (entry,) = json.loads((root / "v.json").read_text())["cards"]
        assert entry["verdict"] == "ERROR", text
        assert f"no space left on {small}" in entry["reason"], entry["reason"]
        assert "point TMPDIR elsewhere" in entry["reason"], entry["reason"]
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)


def test_exhausted_names_what_the_output_says_ran_out_and_a_full_file_system(tmp_path: Path, monkeypatch) -> None:
    from harness.errors import no_space
    from harness.execute import orphans

    assert orphans.exhausted("OSError: [Errno 28] No space left on device", ()) == no_space()
    assert orphans.exhausted("", (), -25) == "a file grew past the size limit (ulimit -f)"
    assert orphans.exhausted("all fine", (tmp_path,)) == ""
    monkeypatch.setattr(orphans.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10, 10, 4096))
    assert orphans.exhausted("", (tmp_path, tmp_path / ".")) == f"{no_space(tmp_path)} (4 KiB free)"
