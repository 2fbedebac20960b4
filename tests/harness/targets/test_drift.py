"""Version drift (issue 39): a known list surveyed on one version of a library, another version installed.

``python -m harness.targets.survey --drift`` re-runs each known finding's reproduction on the installed version
and says per finding whether it still reproduces (exit 1), is gone (exit 0) or the reproduction broke (another
exit, an uncaught exception, a timeout); ``run --target`` notes, per target subject, that its known cells are
expectations from another version (terminal, Markdown, HTML, JSON), without changing a verdict.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_guide_own_cache import env, kvproof, make_project  # noqa: F401 (env: a fixture)

from harness.plan import cells
from harness.targets import known, pyproject, registry, survey
from harness.targets.known import Known, Survey

NUMPY = f"numpy=={importlib.metadata.version('numpy')}"  # an installed distribution stands in for an engine
OLD = "numpy==0.0.1"  # the version a fake known list was surveyed on

SCRIPTS = {
    "present": "import sys\nprint('PROBLEM: still there')\nsys.exit(1)\n",
    "fixed": "import sys\nprint('OK: the claim holds')\nsys.exit(0)\n",
    "crashes": "import numpy\nnumpy.no_such_function()\n",  # exit 1 too, but from an uncaught exception
    "exits-3": "import sys\nsys.stderr.write('usage: something else\\n')\nsys.exit(3)\n",
    "hangs": "import time\nprint('working', flush=True)\ntime.sleep(120)\n",
}


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(registry, "_root", [])
    monkeypatch.delenv("KVPROOF_ROOT", raising=False)
    monkeypatch.delenv("KVPROOF_TARGETS", raising=False)
    pyproject.forget()
    yield
    pyproject.forget()


def fake_target(name: str = "fake.cache", distribution: str = "numpy"):
    return replace(registry.get("reference"), name=name, distribution=distribution, own=False)


def finding(root: Path, name: str, target: str = "fake.cache") -> Known:
    path = root / "known" / target / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SCRIPTS[name])
    rel = path.relative_to(root).as_posix()
    return Known(target, name, "TGT-FORK", "fork", "witnesses/test_targets.py::t", "fake.Cache", "c", "b", rel)


def recheck(root: Path, the_survey: Survey, targets, **kw) -> tuple[int, list[str]]:
    lines: list[str] = []
    return survey.recheck(root, the_survey, targets, out=lines.append, **kw), lines


def test_drift_reruns_each_reproduction_and_says_reproduces_gone_or_broke(tmp_path):
    findings = tuple(finding(tmp_path, n) for n in SCRIPTS)
    the_survey = Survey({"fake.cache": OLD}, {"fake.cache": findings})
    start = time.monotonic()
    rc, lines = recheck(tmp_path, the_survey, [fake_target()], timeout=3)
    assert time.monotonic() - start < 60  # the hanging one is killed at its timeout
    assert rc == 1, lines
    assert lines[0] == (
        f"fake.cache: known list surveyed on {OLD}, installed {NUMPY}: running its 5 reproduction(s) (timeout 3 s each)"
    )
    assert lines[1] == f"  present: still reproduces on {NUMPY} (exit 1)"
    assert lines[2] == f"  fixed: gone on {NUMPY} (exit 0): re-survey and remove or mark it"
    assert lines[3] == (
        "  crashes: reproduction broke (exit 1, an uncaught exception): "
        "AttributeError: module 'numpy' has no attribute 'no_such_function'"
    )
    assert lines[4] == "  exits-3: reproduction broke (exit 3): usage: something else"
    assert lines[5] == "  hangs: reproduction broke (timeout after 3 s): stdout: working"
    assert lines[6].startswith("drift: 1 finding(s) gone and 3 reproduction(s) broke on the installed version(s): ")
    assert "obligations/targets.yaml no longer describes them" in lines[6] and lines[6].endswith("(exit 1)")


def test_a_reproduction_runs_as_a_script_from_the_project_root(tmp_path):
    """``python SCRIPT`` semantics: __main__, sys.argv[0] the script, its folder first on sys.path, cwd the root."""
    (tmp_path / "known").mkdir()
    (tmp_path / "known" / "helper.py").write_text("VALUE = 1\n")
    (tmp_path / "known" / "probe.py").write_text(
        textwrap.dedent(
            """
            import os, sys
            import helper  # beside the script
            ok = __name__ == "__main__" and sys.argv[0].endswith("probe.py") and os.path.isfile("marker")
            sys.exit(1 if ok and helper.VALUE == 1 else 0)
            """
        )
    )
    (tmp_path / "marker").write_text("")
    k = Known("fake.cache", "probe", "C", "w", "t", "cls", "c", "b", "known/probe.py")
    assert survey.run_reproduction(tmp_path, k).state == "reproduces"


def test_every_finding_still_reproducing_exits_0(tmp_path):
    the_survey = Survey({"fake.cache": OLD}, {"fake.cache": (finding(tmp_path, "present"),)})
    rc, lines = recheck(tmp_path, the_survey, [fake_target()])
    assert rc == 0 and lines[-1] == "drift: every re-checked finding still reproduces (1 of 1)", lines


def test_the_surveyed_version_is_not_rechecked_unless_asked_and_a_missing_one_never(tmp_path):
    fixed = (finding(tmp_path, "fixed"),)
    current = Survey({"fake.cache": NUMPY}, {"fake.cache": fixed})
    rc, lines = recheck(tmp_path, current, [fake_target()])
    assert rc == 0
    assert lines[0] == (
        f"fake.cache: installed {NUMPY}, as surveyed: nothing to re-check (--recheck runs its 1 reproduction(s) anyway)"
    )
    assert lines[-1].startswith("drift: nothing re-checked")
    rc, lines = recheck(tmp_path, current, [fake_target()], every=True)  # --recheck: the list is wrong there too
    assert rc == 1 and f"  fixed: gone on {NUMPY} (exit 0): re-survey and remove or mark it" in lines, lines
    absent = fake_target(distribution="kvproof-no-such-distribution")
    rc, lines = recheck(tmp_path, Survey({"fake.cache": OLD}, {"fake.cache": fixed}), [absent])
    assert rc == 0 and lines[0] == (
        f"fake.cache: kvproof-no-such-distribution is not installed here (known list surveyed on {OLD}): not re-checked"
    )
    rc, lines = recheck(tmp_path, Survey({}, {}), [fake_target()])
    assert rc == 0 and lines == ["drift: no selected target has a known list in obligations/targets.yaml"]


def test_a_target_that_cannot_run_here_or_lists_nothing_is_said_not_failed(tmp_path):
    fixed = (finding(tmp_path, "fixed"),)
    broken = replace(fake_target(), unavailable="its backend is not installed here", build=None)
    rc, lines = recheck(tmp_path, Survey({"fake.cache": OLD}, {"fake.cache": fixed}), [broken])
    assert (
        rc == 0
        and "not runnable here (its backend is not installed here): its 1 finding(s) not re-checked" in (lines[0])
    )
    rc, lines = recheck(tmp_path, Survey({"fake.cache": OLD}, {"fake.cache": ()}), [fake_target()])
    assert rc == 0 and "it lists no finding; a survey (--targets fake.cache) re-checks every cell" in lines[0]


def test_the_drift_note_names_both_versions_and_the_command_that_rechecks(tmp_path):
    the_survey = Survey({"fake.cache": OLD, "empty.cache": OLD}, {"fake.cache": (finding(tmp_path, "present"),)})
    here = Path(os.path.abspath(sys.executable))
    python = shlex.quote(str(here.parent.resolve() / here.name))  # outside tmp_path: absolute, the venv's own name
    assert the_survey.drift("fake.cache", NUMPY, tmp_path) == (
        f"known list surveyed on {OLD}, installed {NUMPY}: known cells are expectations from {OLD} "
        f"({python} -m harness.targets.survey --drift --targets fake.cache re-checks them)"
    )
    assert the_survey.drift("fake.cache", OLD, tmp_path) == ""  # as surveyed
    assert the_survey.drift("fake.cache", "numpy", tmp_path) == ""  # not installed: nothing to compare
    assert the_survey.drift("other.cache", NUMPY, tmp_path) == ""  # no known list
    assert "it lists no finding; a survey on" in the_survey.drift("empty.cache", NUMPY, tmp_path)


def test_run_target_subjects_carry_the_note_and_keep_their_known_cells(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.TARGETS, "fake.cache", fake_target())
    monkeypatch.setitem(registry.TARGETS, "fake.current", fake_target("fake.current"))
    (tmp_path / known.KNOWN_PATH).parent.mkdir(parents=True)
    (tmp_path / known.KNOWN_PATH).write_text("")  # known.load is replaced: only its presence counts here
    k = finding(tmp_path, "present")
    the_survey = Survey({"fake.cache": OLD, "fake.current": NUMPY}, {"fake.cache": (k,), "fake.current": ()})
    monkeypatch.setattr(known, "load", lambda root: the_survey)
    subs = {s.name: s for s in cells.target_subjects(SimpleNamespace(targets="fake.*", root=tmp_path), None)}
    assert subs["fake.cache"].drift.startswith(f"known list surveyed on {OLD}, installed {NUMPY}: known cells are")
    assert subs["fake.cache"].known == {"TGT-FORK": k.reproduction}  # still shown as known: no verdict changes
    assert subs["fake.current"].drift == "" and subs["default"].drift == ""
    assert subs["fake.cache"].to_json()["drift"] == subs["fake.cache"].drift


def test_a_full_survey_rechecks_its_drifted_targets_after_the_matrix_and_exits_1_when_one_is_gone(
    tmp_path, monkeypatch, capsys
):
    fake = fake_target()
    monkeypatch.setitem(registry.TARGETS, "fake.cache", fake)
    the_survey = Survey({"fake.cache": OLD}, {"fake.cache": (finding(tmp_path, "fixed"),)})
    monkeypatch.setattr(known, "load", lambda root: the_survey)
    monkeypatch.setattr(survey, "project_root", lambda: tmp_path)
    monkeypatch.setattr(survey, "load_cards", lambda *a: SimpleNamespace(cards=[]))
    monkeypatch.setattr(survey.pytest, "main", lambda *a, **kw: 0)  # no witnesses: the matrix is empty
    assert survey.main(["--targets", "fake.cache"]) == 1
    out = capsys.readouterr().out
    assert f"stale: fake.cache now binds {NUMPY}, its known list was surveyed on {OLD}" in out
    assert "every cell is as obligations/targets.yaml" in out
    assert f"  fixed: gone on {NUMPY} (exit 0): re-survey and remove or mark it" in out
    assert survey.main(["--drift", "--targets", "fake.cache"]) == 1  # --drift: only that, the same answer
    assert "| card / witness |" not in capsys.readouterr().out


def test_a_bad_selection_is_one_line_and_exit_2(capsys):
    assert survey.main(["--drift", "--targets", "no.such.target"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m harness.targets.survey: error: target='no.such.target' is not a target")
    assert "Traceback" not in err


# ---------------------------------------------------------------- end to end: a project's own target

KNOWN_YAML = """\
format: kvproof-targets
version: 1
targets:
  toycache:
    surveyed: {surveyed}
    known:
      - finding: refuses-crop-0
        card: TOY-TRUNCATE
        witness: keeps-first-n
        test: witnesses/test_toycache.py::test_truncate_keeps_exactly_the_first_n
        class: toycache.KVCache
        claim: truncate(len) keeps everything.
        backing: KVCache.truncate's docstring.
        reproduction: known/refuses.py
"""


def test_a_run_on_another_version_notes_it_everywhere_and_the_noted_command_rechecks(tmp_path, env):  # noqa: F811
    """The toy project's target bound to numpy (installed) with a known list surveyed on numpy 0.0.1: ``run
    --target project`` notes the drift in the terminal, verdicts.md, index.html and verdicts.json (every verdict
    as without it), and the command the note names re-runs the reproduction."""
    root = make_project(tmp_path / "toy")
    adapter = root / "toycache_kvproof.py"
    adapter.write_text(adapter.read_text().replace('distribution="toycache"', 'distribution="numpy"'))
    card = root / "obligations" / "TOY-TRUNCATE.yaml"
    card.write_text(card.read_text().replace("tags: [toycache]", "tags: [toycache, targets]"))
    (root / "known").mkdir()
    (root / "known" / "refuses.py").write_text("raise SystemExit(1)\n")
    (root / "obligations" / "targets.yaml").write_text(KNOWN_YAML.format(surveyed=OLD))
    proc = kvproof(root, env, "run", "--target", "project", "--json", "v.json", "-j", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((root / "v.json").read_text())
    assert {c["id"]: c["verdict"] for c in doc["cards"]}["TOY-TRUNCATE@toycache"] == "PROVEN"
    (sub,) = [s for s in doc["header"]["subjects"] if s["name"] == "toycache"]
    note = sub["drift"]
    assert note.startswith(f"known list surveyed on {OLD}, installed {NUMPY}: known cells are expectations from {OLD}")
    assert note.endswith("-m harness.targets.survey --drift --targets toycache re-checks them)")
    assert f"drift: {note}" in proc.stdout  # one line under the subject
    folder = root / "reports" / "latest"
    assert f"  - drift: {note}" in (folder / "verdicts.md").read_text()
    assert "drift: " + note.replace("'", "&#39;") in (folder / "index.html").read_text()
    command = shlex.split(note[note.index("(") + 1 : note.rindex(" re-checks them)")])
    drift = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert drift.returncode == 0, drift.stdout + drift.stderr
    assert drift.stdout.splitlines() == [
        f"toycache: known list surveyed on {OLD}, installed {NUMPY}: running its 1 reproduction(s) "
        f"(timeout {survey.TIMEOUT_S:g} s each)",
        f"  refuses-crop-0: still reproduces on {NUMPY} (exit 1)",
        "drift: every re-checked finding still reproduces (1 of 1)",
    ]
    (root / "obligations" / "targets.yaml").write_text(KNOWN_YAML.format(surveyed=NUMPY))
    same = kvproof(root, env, "run", "--target", "project", "--json", "v.json", "-j", "1")
    assert same.returncode == 0 and "drift" not in same.stdout, same.stdout
    assert json.loads((root / "v.json").read_text())["header"]["subjects"][1]["drift"] == ""
