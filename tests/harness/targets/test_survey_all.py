"""One table of every engine (issue 39): each venv's survey writes its matrix with ``--json FILE``, ``--merge``
prints them as one card/witness x target table (``make survey-all``).

The engines' pins conflict, so each lives in a venv of its own and one survey sees only its own venv's targets.
``--merge`` puts the columns in the order given, each target once (the runnable one wins), then each target's
binding and interpreter, why a target is not runnable, and a count; exit 1 when a merged cell differs from
obligations/targets.yaml. No engine is needed here: the JSON comes from a quick selection (the reference target,
one witness) or a survey whose pytest run is replaced, the merge from hand-written files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.targets import known, pyproject, registry, survey
from harness.targets.known import Known, Survey

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(registry, "_root", [])
    monkeypatch.delenv("KVPROOF_ROOT", raising=False)
    monkeypatch.delenv("KVPROOF_TARGETS", raising=False)
    pyproject.forget()
    yield
    pyproject.forget()


# ---------------------------------------------------------------- --json


def test_a_survey_writes_its_matrix_as_json_with_each_targets_binding_and_interpreter(tmp_path):
    """The reference target (runs everywhere) and vLLM's (not runnable in .venv), one witness: about 2 s."""
    out = tmp_path / "s.json"
    env = {k: v for k, v in os.environ.items() if k not in ("KVPROOF_ROOT", "KVPROOF_TARGETS")}
    args = ["--targets", "reference,vllm.kvcache-manager", "-k", "fork", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "harness.targets.survey", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["format"] == "kvproof-survey" and doc["version"] == 1 and doc["exit"] == 0 and doc["differ"] == 0
    assert doc["python"] == sys.executable and doc["selection"] == "reference,vllm.kvcache-manager"
    ref, vllm = doc["targets"]
    assert ref["name"] == "reference" and ref["runnable"] and ref["unavailable"] == "" and ref["stale"] == ""
    assert ref["binding"] == registry.get("reference").binding() and ref["python"] == sys.executable
    target = registry.get("vllm.kvcache-manager")
    assert (vllm["runnable"], vllm["unavailable"], vllm["binding"]) == (
        target.runnable,
        target.unavailable or "",
        target.binding(),
    )
    assert vllm["surveyed"] == known.load(ROOT).surveyed["vllm.kvcache-manager"]
    passed = [r for r in doc["rows"] if r["cells"]["reference"]["outcome"] == "passed"]
    assert passed, "the reference target passes the fork witness"
    for r in doc["rows"]:
        for name, c in r["cells"].items():
            assert c["cell"] == {"passed": "PASS", "": "-"}.get(c["outcome"], c["cell"]), (r["card"], name, c)
            if c["outcome"] == "skipped":
                assert c["cell"] in ("n/a", "not runnable") and c["reason"]
        line = f"| {r['card']}/{r['witness']} | " + " | ".join(c["cell"] for c in r["cells"].values()) + " |"
        assert line in proc.stdout.splitlines()  # the JSON says what the table printed
    assert proc.stdout.splitlines()[-1].startswith("wrote ") and proc.stdout.rstrip().endswith("s.json")


def fake_target(name: str = "fake.cache"):
    return replace(registry.get("reference"), name=name, distribution="numpy", own=False)


def test_a_failed_cell_carries_its_outcome_and_the_first_line_of_why(tmp_path, monkeypatch):
    """pytest replaced by a plugin call per cell: one known failure, one new, one pass, one skip."""
    for name in ("fake.cache", "fake.other"):
        monkeypatch.setitem(registry.TARGETS, name, fake_target(name))
    test = "witnesses/test_targets.py::test_fork"
    k = Known("fake.cache", "forks-share", "TGT-FORK", "fork", test, "fake.Cache", "c", "b", "known/x.py")
    monkeypatch.setattr(known, "load", lambda root: Survey({}, {"fake.cache": (k,)}))
    monkeypatch.setattr(survey, "project_root", lambda: tmp_path)
    cards = [SimpleNamespace(id="TGT-FORK", tags=["targets"], witnesses=[SimpleNamespace(id="fork", test=test)])]
    cards.append(SimpleNamespace(id="TGT-X", tags=["targets"], witnesses=[SimpleNamespace(id="x", test=test + "_x")]))
    monkeypatch.setattr(survey, "load_cards", lambda *a: SimpleNamespace(cards=cards))

    def report(node: str, **kw):
        crash = SimpleNamespace(message="AssertionError: the fork saw the parent's append\nassert 3 == 2")
        base = {"nodeid": node, "skipped": False, "failed": False, "when": "call", "longrepr": None}
        return SimpleNamespace(**{**base, **kw, "longrepr": kw.get("longrepr", SimpleNamespace(reprcrash=crash))})

    def fake_pytest(args, plugins):
        (c,) = plugins
        c.pytest_runtest_logreport(report(f"{test}[fake.cache]", failed=True))
        c.pytest_runtest_logreport(report(f"{test}[fake.other]", failed=True))
        c.pytest_runtest_logreport(report(f"{test}_x[fake.cache]"))
        skip = ("f", 1, "Skipped: n/a: target fake.other lacks capability window")
        c.pytest_runtest_logreport(report(f"{test}_x[fake.other]", skipped=True, longrepr=skip))
        return 1

    monkeypatch.setattr(survey.pytest, "main", fake_pytest)
    out = tmp_path / "s.json"
    assert survey.main(["--targets", "fake.*", "--json", str(out)]) == 1
    doc = json.loads(out.read_text())
    fork, x = doc["rows"]
    why = "AssertionError: the fork saw the parent's append"
    assert fork["cells"]["fake.cache"] == {"cell": "FAILED (known: forks-share)", "outcome": "failed", "reason": why}
    assert fork["cells"]["fake.other"] == {"cell": "FAILED (new)", "outcome": "failed", "reason": why}
    assert x["cells"]["fake.cache"] == {"cell": "PASS", "outcome": "passed", "reason": ""}
    skipped = {"cell": "n/a", "outcome": "skipped", "reason": "n/a: target fake.other lacks capability window"}
    assert x["cells"]["fake.other"] == skipped
    assert (
        doc["differ"] == 1 and doc["exit"] == 1 and [t["name"] for t in doc["targets"]] == ["fake.cache", "fake.other"]
    )


# ---------------------------------------------------------------- --merge


def target(name: str, python: str, runnable: bool = True, binding: str = "", why: str = "", stale: str = "") -> dict:
    return {
        "name": name,
        "binding": binding or f"{name.split('.')[0]}==1.0",
        "runnable": runnable,
        "unavailable": "" if runnable else why or f"{name} is not installed here",
        "python": python,
        "surveyed": None,
        "stale": stale,
        "drift": [],
    }


def doc(python: str, targets: list[dict], rows: dict[str, dict[str, str]]) -> dict:
    """A survey's JSON: ``rows`` maps ``CARD/witness`` to a cell text per target."""
    cells = [
        {
            "card": label.split("/")[0],
            "witness": label.split("/")[1],
            "test": "witnesses/test_targets.py::t",
            "cells": {n: {"cell": text, "outcome": "", "reason": ""} for n, text in by.items()},
        }
        for label, by in rows.items()
    ]
    return {"format": "kvproof-survey", "version": 1, "python": python, "targets": targets, "rows": cells, "exit": 0}


VENV, LITGPT = "/p/.venv/bin/python", "/p/.venv-litgpt/bin/python"


def files(tmp_path: Path, new: str = "FAILED (known: ring)") -> tuple[str, str]:
    """.venv's survey (hf.a, lit.b not runnable there, hf.c) and .venv-litgpt's (lit.b, lit.d)."""
    a = doc(
        VENV,
        [
            target("hf.a", VENV),
            target("lit.b", VENV, False, "lit", "litgpt is not installed here"),
            target("hf.c", VENV),
        ],
        {
            "C1/w1": {"hf.a": "PASS", "lit.b": "not runnable", "hf.c": "FAILED (known: crop)"},
            "C1/w2": {"hf.a": "n/a", "lit.b": "not runnable", "hf.c": "PASS"},
        },
    )
    b = doc(
        LITGPT,
        [target("lit.b", LITGPT), target("lit.d", LITGPT)],
        {"C1/w1": {"lit.b": new, "lit.d": "PASS"}, "C2/w3": {"lit.b": "PASS", "lit.d": "n/a"}},
    )
    pa, pb = tmp_path / "venv.json", tmp_path / "venv-litgpt.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    return str(pa), str(pb)


def test_merge_shows_each_target_once_in_the_order_given_the_runnable_column_winning(tmp_path, capsys):
    a, b = files(tmp_path)
    md = tmp_path / "grid.md"
    assert survey.main(["--merge", a, b, "--markdown", str(md)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:5] == [
        "| card / witness | hf.a | lit.b | hf.c | lit.d |",
        "|---|---|---|---|---|",
        "| C1/w1 | PASS | FAILED (known: ring) | FAILED (known: crop) | PASS |",  # lit.b: .venv-litgpt's cells
        "| C1/w2 | n/a | - | PASS | - |",  # a row the chosen file lacks is "-"
        "| C2/w3 | - | PASS | - | n/a |",
    ]
    notes = lines[5:]
    assert notes[:4] == [
        f"binding: hf.a: hf==1.0 with {VENV} ({a})",
        f"binding: lit.b: lit==1.0 with {LITGPT} ({b})",
        f"binding: hf.c: hf==1.0 with {VENV} ({a})",
        f"binding: lit.d: lit==1.0 with {LITGPT} ({b})",
    ]
    assert notes[4] == (f"twice: lit.b is in {a} (not runnable), {b} (runnable): the column is {b}'s, the runnable one")
    assert not any(n.startswith("not runnable:") for n in notes)  # the column shown runs
    assert notes[-2] == f"wrote {md}"
    assert notes[-1] == (
        "merged 2 survey(s), 4 target(s), 12 cell(s): 4 PASS, 2 FAILED (known), 2 n/a, 4 not run (-); "
        "every cell is as obligations/targets.yaml"
    )
    text = md.read_text()
    assert "| C1/w1 | PASS | FAILED (known: ring) | FAILED (known: crop) | PASS |" in text
    assert f"- twice: lit.b is in {a} (not runnable)" in text and f"`{a}`, `{b}`" in text
    assert text.rstrip().splitlines()[-1] == notes[-1]


def test_merge_exits_1_for_a_new_failure_or_a_known_one_that_passed_and_says_not_runnable(tmp_path, capsys):
    for cell in ("FAILED (new)", "PASS (known ring fixed?)"):
        a, b = files(tmp_path, new=cell)
        assert survey.main(["--merge", a, b]) == 1
        out = capsys.readouterr().out
        assert f"| C1/w1 | PASS | {cell} |" in out
        assert out.splitlines()[-1].endswith("; 1 cell(s) differ from obligations/targets.yaml (exit 1)")
    assert survey.main(["--merge", a]) == 0  # alone, .venv's lit.b is not runnable: said, not a failure
    out = capsys.readouterr().out.splitlines()
    assert (
        "not runnable: lit.b: litgpt is not installed here" in out
        and out[0] == "| card / witness | hf.a | lit.b | hf.c |"
    )
    assert not any(line.startswith("twice:") for line in out)


def test_a_target_runnable_in_both_files_keeps_the_first_ones_column_and_says_so(tmp_path, capsys):
    one = doc(
        VENV,
        [target("t.x", VENV, stale="now binds t==2.0, its known list was surveyed on t==1.0")],
        {"C/w": {"t.x": "PASS"}},
    )
    two = doc(LITGPT, [target("t.x", LITGPT, binding="t==3.0")], {"C/w": {"t.x": "FAILED (new)"}})
    (tmp_path / "1.json").write_text(json.dumps(one))
    (tmp_path / "2.json").write_text(json.dumps(two))
    p1, p2 = str(tmp_path / "1.json"), str(tmp_path / "2.json")
    assert survey.main(["--merge", p1, p2]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "| C/w | PASS |"
    assert f"twice: t.x is in {p1} (runnable), {p2} (runnable): the column is {p1}'s, the first given" in out
    assert "stale: t.x now binds t==2.0, its known list was surveyed on t==1.0" in out


# ---------------------------------------------------------------- bad paths: one line, exit 2


def bad_cases(tmp_path: Path) -> list[tuple[list[str], str]]:
    good, _ = files(tmp_path)
    (tmp_path / "a-file").write_text("")
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"format": "kvproof-verdicts"}')
    (tmp_path / "old.json").write_text('{"format": "kvproof-survey", "version": 0}')
    (tmp_path / "rows.json").write_text(json.dumps({**json.loads(Path(good).read_text()), "rows": {}}))
    t = str(tmp_path)
    return [
        (["--targets", "reference", "--json", f"{t}/missing/s.json"], f"{t}/missing does not exist"),
        (["--targets", "reference", "--json", t], "is a folder; give a file path in it"),
        (["--targets", "reference", "--json", f"{t}/a-file/s.json"], f"{t}/a-file is not a folder"),
        (["--targets", "reference", "--markdown", f"{t}/g.md"], "--markdown writes a merged table"),
        (["--drift", "--json", f"{t}/s.json"], "--drift and --recheck make none: drop --json"),
        (["--merge", good, "--markdown", f"{t}/missing/grid.md"], f"{t}/missing does not exist"),
        (["--merge", good, "--markdown", good], "is one of the --merge files"),
        (["--merge", good, good], "is given twice"),
        (["--merge", good, "--targets", "litgpt"], "runs nothing: drop --targets"),
        (["--merge", f"{t}/nothing.json"], "no such file; give a file a survey wrote with --json FILE"),
        (["--merge", t], "is a folder; give a file a survey wrote"),
        (["--merge", f"{t}/broken.json"], "is not JSON (Expecting property name"),
        (["--merge", f"{t}/other.json"], "is not a survey's JSON"),
        (["--merge", f"{t}/old.json"], "version=0, this kvproof reads version 1"),
        (["--merge", good, f"{t}/rows.json"], "rows is not a list"),
    ]


def test_a_bad_path_or_file_is_one_line_and_exit_2_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(survey.pytest, "main", lambda *a, **kw: pytest.fail("nothing may run"))
    for argv, words in bad_cases(tmp_path):
        assert survey.main(argv) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "", argv  # no table, not even part of one
        (line,) = captured.err.splitlines()
        assert line.startswith("python -m harness.targets.survey: error: ") and words in line, (argv, line)
        assert "Traceback" not in captured.err
    assert not (tmp_path / "g.md").exists() and not (tmp_path / "s.json").exists()
