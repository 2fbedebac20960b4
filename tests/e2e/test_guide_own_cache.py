"""docs/prove-your-own-cache.md runs as written: its files, extracted from the page by their
``<!-- guide-file: PATH -->`` markers, make a project in a fresh folder outside the checkout, where the
installed ``kvproof`` console script (the one beside this interpreter: ``pip install -e .``, which ``make
setup`` does) validates it and proves both cards with their liars caught, then, after the page's deliberate
bug (``<!-- guide-bug: PATH -->``), says FAILED on the card it should, with exit code 1. No ``KVPROOF_*``
variable is set; the reports land in the project's folder, and the checkout's ``reports/`` and
``obligations/`` are untouched. Verdicts are read from the ``--json`` document, not from the terminal.

Where the console script would import another checkout's kvproof (a worktree sharing a virtual environment
whose editable install points elsewhere), this checkout is put first on ``PYTHONPATH`` so that its code is
what runs; in a fresh clone (CI) nothing is set.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "prove-your-own-cache.md"
FILE = re.compile(r"<!-- guide-file: ([\w./-]+) -->\n```(\w+)\n(.*?)\n```", re.S)
BUG = re.compile(r"<!-- guide-bug: ([\w./-]+) -->\n```diff\n(.*?)\n```", re.S)
OUTPUT = re.compile(r"<!-- guide-output: ([\w-]+) -->\n```\n(.*?)\n```", re.S)
CARDS = ("TOY-READBACK", "TOY-TRUNCATE")
TIMEOUT = 300  # s per command; each takes a few seconds


def page() -> str:
    return DOC.read_text(encoding="utf-8")


def guide_files() -> dict[str, str]:
    """path -> content of every file the page marks."""
    return {path: code + "\n" for path, _lang, code in FILE.findall(page())}


def guide_bug() -> tuple[str, str, str]:
    """(path, the line to replace, its replacement) of the page's deliberate bug."""
    ((path, diff),) = BUG.findall(page())
    old = [line[1:] for line in diff.splitlines() if line.startswith("-")]
    new = [line[1:] for line in diff.splitlines() if line.startswith("+")]
    assert len(old) == len(new) == 1, "the bug is one line replaced by one line"
    return path, old[0], new[0]


def make_project(dest: Path) -> Path:
    for rel, text in guide_files().items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text, encoding="utf-8")
    return dest


def console_script() -> Path:
    script = Path(sys.executable).parent / "kvproof"
    assert script.is_file(), f"no console script {script}: install kvproof there (`pip install -e .`, `make setup`)"
    return script


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """The environment the commands run in: no KVPROOF_* (nor pytest's) settings; this checkout's code."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("KVPROOF_", "PYTEST_", "PYTHONPATH"))}
    out["COLUMNS"] = "200"
    probe = subprocess.run(
        [sys.executable, "-c", "import harness; print(harness.__file__)"],
        cwd=tmp_path_factory.mktemp("probe"),
        env=out,
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = Path(probe.stdout.strip()).resolve().parent if probe.returncode == 0 else None
    if found != REPO / "harness":
        out["PYTHONPATH"] = str(REPO)  # the installed kvproof is another checkout's: run this one's
    return out


def checkout_state() -> dict[str, str]:
    """The checkout's obligations/ and reports/ as (path -> sha256, or the mtime of a folder)."""
    state = {}
    for top in ("obligations", "reports"):
        base = REPO / top
        if not base.exists():
            continue
        for p in sorted(base.rglob("*")):
            if p.is_symlink() or p.is_dir():
                state[str(p)] = str(p.lstat().st_mtime_ns)
            elif p.is_file():
                state[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return state


def dated(reports: Path) -> list[Path]:
    """The dated report folders (not the ``latest`` link) that hold an index.html."""
    return [p for p in reports.iterdir() if not p.is_symlink() and (p / "index.html").is_file()]


def kvproof(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(console_script()), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def run(project: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    out = project / "verdicts.json"
    out.unlink(missing_ok=True)
    proc = kvproof(project, env, "run", "--json", "verdicts.json", "-j", "1")
    assert out.is_file(), proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    return proc, {c["id"]: c for c in doc["cards"]}


def test_the_page_marks_the_package_the_adapter_two_cards_witnesses_liars_and_one_bug():
    files = guide_files()
    assert set(files) == {
        "pyproject.toml",
        "toycache/__init__.py",
        "toycache/cache.py",
        "toycache_kvproof.py",
        "witnesses/conftest.py",
        "witnesses/test_toycache.py",
        "witnesses/liars/toy.py",
        "obligations/TOY-READBACK.yaml",
        "obligations/TOY-TRUNCATE.yaml",
    }
    assert 'targets = ["toycache_kvproof:TARGET"]' in files["pyproject.toml"]
    assert "import harness" not in files["toycache/cache.py"]  # the cache knows nothing of kvproof
    path, old, new = guide_bug()
    assert files[path].count(old + "\n") == 1 and old != new
    shown = dict(OUTPUT.findall(page()))  # what the page says the commands print agrees with the verdicts below
    assert all(f"│{c}" in shown["proven"] and "PROVEN" in shown["proven"] for c in CARDS)
    assert "FAILED TOY-TRUNCATE" in shown["failed"] and "gate FAIL: 1 PROVEN, 1 FAILED" in shown["failed"]


def test_the_toy_project_is_proven_from_a_fresh_folder_then_failed_after_the_bug(tmp_path, env):
    before = checkout_state()
    project = make_project(tmp_path / "toyproject")
    assert not project.resolve().is_relative_to(REPO)

    check = kvproof(project, env, "validate")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "2 card(s) in obligations/ are valid" in check.stdout

    proc, cards = run(project, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {c: cards[c]["verdict"] for c in CARDS} == {c: "PROVEN" for c in CARDS}, proc.stdout
    for card in cards.values():  # every liar caught, every witness run on the project's own target
        assert card["liars"] and all(entry["status"] == "caught" for entry in card["liars"]), card["liars"]
        nodes = [n["nodeid"] for w in card["witnesses"] for n in w["nodes"]]
        assert nodes and all(n.endswith("[toycache]") for n in nodes), nodes
    assert cards["TOY-TRUNCATE"]["liars"][0]["name"] == "toy.truncate_keeps_one_more"
    reports = project / "reports"
    assert (reports / "ledger.sqlite").is_file() and len(dated(reports)) == 1, list(reports.iterdir())

    path, old, new = guide_bug()
    source = project / path
    source.write_text(source.read_text().replace(old + "\n", new + "\n", 1))
    proc, cards = run(project, env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert cards["TOY-READBACK"]["verdict"] == "PROVEN"
    failed = cards["TOY-TRUNCATE"]
    assert failed["verdict"] == "FAILED", failed["reason"]
    witnesses = {w["id"]: w for w in failed["witnesses"]}
    assert witnesses["keeps-first-n"]["status"] == "failed"
    assert "truncate(1) at length 1 was refused" in witnesses["keeps-first-n"]["message"]
    hyp = witnesses["keeps-first-n"]["hypothesis"]
    # the replay runs as printed: `kvproof` when it is on PATH, else the console script by the path it was called
    assert "length=1" in hyp["example"] and re.fullmatch(
        r"(\S*/)?kvproof run TOY-TRUNCATE --profile ci --seed 0", hyp["replay"]
    )
    assert len(dated(reports)) == 2

    assert checkout_state() == before, "a run of the toy project wrote into the kvproof checkout"
