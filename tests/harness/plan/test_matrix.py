"""run --matrix: each card under each configuration, one verdict per (card, configuration) cell.

End to end on a copy of the fixture project with a configurations file of its own: a configuration
whose setting a witness reads, one this CPU cannot run (a visible "n/a here" cell that does not fail
the gate), one that is not required (its FAILED cell is shown and does not fail the gate); the grid
in every report format; a malformed configurations file refused before anything runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.plan.subjects import cell_id, split
from harness.select.cards import Card
from harness.verdict import CardOutcomes, evaluate

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"

CARD = """\
id: MX-1
title: the setting reaches the witness
module: fakeimpl.arith
regime: A
theorem: every witness process of a cell runs with its configuration's settings.
proof: the runner applies a configuration's settings last to each witness process's environment.
refs: [fakeimpl/arith.py::add]
witnesses:
  - id: sees-setting
    test: witnesses/test_matrix_env.py::test_sees_its_setting
version: 1
"""

WITNESS = """
import os


def test_sees_its_setting(evidence):
    evidence.record("shout", os.environ.get("FX_SHOUT", ""))
    assert os.environ.get("FX_SHOUT", "") in ("", "1"), "an unexpected value"
    assert os.environ.get("FX_BREAK") != "1", "this configuration breaks the claim on purpose"
"""

CONFIGS = """\
configurations:
  - name: default
    reason: as it runs
    settings: {}
  - name: shout
    reason: a setting the witness reads
    settings: {FX_SHOUT: 1}
  - name: never
    reason: needs a CPU feature no machine has
    requires: [cpu:no_such_feature_anywhere]
  - name: broken
    reason: a configuration that breaks the claim, kept out of the gate
    settings: {FX_BREAK: "1"}
    required: false
"""


def _project(tmp_path: Path, configs: str = CONFIGS) -> Path:
    root = tmp_path / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    (root / "cards-mx").mkdir()
    (root / "cards-mx" / "mx-1.yaml").write_text(CARD)
    (root / "cards-mx" / "configurations.yaml").write_text(configs)
    (root / "witnesses" / "test_matrix_env.py").write_text(WITNESS)
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200"}
    for name in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, str(ENTRY), *args], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


def test_cell_ids_keep_the_default_cards_own_id():
    assert cell_id("KV-T2", "default") == "KV-T2" and cell_id("KV-T2", "numpy") == "KV-T2@numpy"
    assert split("KV-T2@numpy") == ("KV-T2", "numpy") and split("KV-T2") == ("KV-T2", "default")


def test_matrix_runs_each_cell_with_its_settings_and_shows_the_grid_everywhere(tmp_path):
    root = _project(tmp_path)
    proc = _run(root, "run", "--cards", "cards-mx", "--matrix", "--json", "v.json")
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text
    assert proc.returncode == 0, text  # the broken cell is not required; the never cell cannot run here
    doc = json.loads((root / "v.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in doc["cards"]}
    assert verdicts == {"MX-1": "PROVEN", "MX-1@shout": "PROVEN", "MX-1@broken": "FAILED"}
    evidence = {c["id"]: c["witnesses"][0]["evidence"]["shout"] for c in doc["cards"]}
    assert evidence["MX-1"] == "" and evidence["MX-1@shout"] == "1"  # the setting reached its cell only
    subjects = {s["name"]: s for s in doc["header"]["subjects"]}
    assert subjects["never"]["runnable"] is False and "no_such_feature_anywhere" in subjects["never"]["why_not"]
    assert subjects["broken"]["required"] is False and doc["header"]["summary"]["gate"] == "PASS"
    bound = {c["id"]: {b["role"]: b["sha256"] for b in c["bound_files"]} for c in doc["cards"]}
    assert bound["MX-1"]["settings"] != bound["MX-1@shout"]["settings"]  # each cell bound to its settings
    # the grid: terminal, Markdown, JUnit, HTML
    assert "over all" in proc.stdout and "not runnable here" in proc.stdout and "n/a here" in proc.stdout
    folder = (root / "reports" / "latest").resolve()
    md = (folder / "verdicts.md").read_text()
    assert "## Card x configuration" in md and "| MX-1 | PROVEN | PROVEN | PROVEN | n/a here | **FAILED** |" in md
    suite = ET.parse(folder / "junit.xml").getroot().find("testsuite")
    skipped = [c for c in suite.iter("testcase") if c.find("skipped") is not None]
    assert [c.get("name") for c in skipped] == ["MX-1@never"] and suite.get("skipped") == "1"
    html = (folder / "index.html").read_text()
    assert 'id="matrix"' in html and "not runnable here: this CPU lacks no_such_feature_anywhere" in html


def _status_rows(out: str) -> dict[str, str]:
    """status's table: cell id -> the rest of its row."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│") if c.strip()] or line.split(maxsplit=1)
        if cells and cells[0].startswith("MX-1"):
            rows[cells[0]] = " ".join(cells[1:])
    return rows


def test_status_shows_every_recorded_cell_default_first_each_with_its_verdict_or_stale(tmp_path):
    root = _project(tmp_path)
    assert _run(root, "run", "--cards", "cards-mx", "--matrix", "default", "shout", "broken").returncode == 0
    proc = _run(root, "status", "--cards", "cards-mx")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the broken cell did not count for the gate
    rows = _status_rows(proc.stdout)
    assert list(rows) == ["MX-1", "MX-1@broken", "MX-1@shout"], proc.stdout  # default first, then by id
    assert rows["MX-1"].startswith("PROVEN") and rows["MX-1@shout"].startswith("PROVEN")
    assert rows["MX-1@broken"].startswith("FAILED (not gated)") and "required: false" in rows["MX-1@broken"]
    only = _run(root, "status", "--cards", "cards-mx", "--cells", "default")
    assert only.returncode == 0 and list(_status_rows(only.stdout)) == ["MX-1"]
    # a configuration's settings changed: its cell is STALE (and fails status); the default cell is not
    configs = root / "cards-mx" / "configurations.yaml"
    configs.write_text(CONFIGS.replace("settings: {FX_SHOUT: 1}", "settings: {FX_SHOUT: 1, FX_OTHER: 2}"))
    proc = _run(root, "status", "--cards", "cards-mx")
    rows = _status_rows(proc.stdout)
    assert proc.returncode == 1 and rows["MX-1"].startswith("PROVEN"), proc.stdout
    assert rows["MX-1@shout"].startswith("STALE") and "(settings:" in rows["MX-1@shout"], proc.stdout
    assert _run(root, "status", "--cards", "cards-mx", "--cells", "default").returncode == 0
    # a bound file changed: every cell of the card is STALE
    configs.write_text(CONFIGS)
    (root / "witnesses" / "test_matrix_env.py").write_text(WITNESS + "\n# edited\n")
    rows = _status_rows(_run(root, "status", "--cards", "cards-mx").stdout)
    assert all(r.startswith("STALE") for r in rows.values()) and len(rows) == 3, rows


def _matrix_plan(root: Path, reports: Path, names: tuple[str, ...]):
    """What a `run --matrix NAMES` would plan (harness.plan.planning.plan), without running it."""
    from harness.plan.cells import expand, resolve_subjects
    from harness.plan.planning import plan
    from harness.request import RunRequest
    from harness.select.selection import load, runnable

    req = RunRequest(root, root / "cards-mx", reports, "--reports", matrix=names)
    loaded = load(root, req.cards_dir, "cards-mx/")
    subs = resolve_subjects(req, None)
    return plan(req, loaded, expand(runnable(loaded, (), (), None), subs), None, subs=subs)


def test_a_matrix_run_records_per_cell_timings_the_scheduler_looks_up_by_cell_id(tmp_path):
    from harness.ledger.history import FILENAME, Ledger
    from harness.plan import timings

    root = _project(tmp_path)
    names = ("default", "shout", "broken")
    assert _run(root, "run", "--cards", "cards-mx", "--matrix", *names).returncode == 0
    cells = ["MX-1", "MX-1@shout", "MX-1@broken"]
    # the ledger: each cell's own entry, under its own id
    the_plan = _matrix_plan(root, root / "reports", names)
    assert the_plan.schedule_from == {c: "ledger" for c in cells}
    with Ledger(root / "reports" / FILENAME, create=False) as ledger:
        measured = {c: timings.from_ledger(ledger, c).expected for c in cells}
    assert all(the_plan.expected[c] == measured[c] for c in cells)
    # timings --write: the cells beside the card, keyed CARD@NAME; `timings` lists them under their card
    proc = _run(root, "timings", "--write", "--cards", "cards-mx")
    assert proc.returncode == 0 and "1 card(s) and 2 cell(s)" in proc.stdout, proc.stdout + proc.stderr
    written = timings.load(root / "cards-mx", root)
    assert list(written) == ["MX-1", "MX-1@broken", "MX-1@shout"]
    assert all(written[c].honest_s == pytest.approx(measured[c].honest_s, abs=0.05 + 1e-9) for c in cells)
    shown = _run(root, "timings", "--cards", "cards-mx")
    assert shown.returncode == 0 and "ignored" not in shown.stdout, shown.stdout + shown.stderr
    assert [r for r in _status_rows(shown.stdout)] == ["MX-1", "MX-1@broken", "MX-1@shout"], shown.stdout
    # no ledger (a fresh clone, CI): each cell is scheduled by its own entry in the file, not its card's
    hints = json.loads((root / "cards-mx" / "timings.json").read_text())
    hints["cards"]["MX-1"]["honest_s"], hints["cards"]["MX-1@shout"]["honest_s"] = 50.0, 7.0
    (root / "cards-mx" / "timings.json").write_text(json.dumps(hints))
    fresh = _matrix_plan(root, tmp_path / "no-ledger", names)
    assert fresh.schedule_from == {c: "timings.json" for c in cells}
    assert fresh.expected["MX-1"].honest_s == 50.0 and fresh.expected["MX-1@shout"].honest_s == 7.0
    del hints["cards"]["MX-1@broken"]  # a cell without an entry of its own takes its card's
    (root / "cards-mx" / "timings.json").write_text(json.dumps(hints))
    assert _matrix_plan(root, tmp_path / "no-ledger", names).expected["MX-1@broken"].honest_s == 50.0


def test_matrix_names_are_checked_and_the_file_is_validated_before_anything_runs(tmp_path):
    root = _project(tmp_path)
    proc = _run(root, "run", "--cards", "cards-mx", "--matrix", "shuot")
    assert proc.returncode == 2 and "names no configuration" in proc.stderr and "shout" in proc.stderr
    bad = _project(tmp_path / "bad", CONFIGS.replace("  - name: shout", "  - name: shout\n    colour: red"))
    proc = _run(bad, "run", "--cards", "cards-mx", "--matrix")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cards-mx/configurations.yaml:" in proc.stderr and "colour" in proc.stderr
    assert not (bad / "reports").exists() or not list((bad / "reports").glob("20*"))


@pytest.mark.parametrize(
    "text,says",
    [
        ("configurations:\n  - name: numpy\n    reason: r\n", "has no configuration named 'default'"),
        ("configurations:\n  - {name: default, reason: r}\n  - {name: default, reason: s}\n", "used twice"),
        ("configurations:\n  - {name: default, reason: r, settings: {lower: x}}\n", "settings"),
        ("configurations:\n  - &a {name: default, reason: r}\n  - *a\n", "YAML aliases"),
        ("probe: not a ref\nconfigurations:\n  - {name: default, reason: r}\n", "probe"),
    ],
)
def test_a_malformed_configurations_file_names_the_line_and_field(tmp_path, text, says):
    from harness.plan import subjects

    (tmp_path / "configurations.yaml").write_text(text)
    with pytest.raises(subjects.ConfigurationsInvalid) as err:
        subjects.load(tmp_path, tmp_path)
    assert says in str(err.value) and "configurations.yaml" in str(err.value)


def test_the_release_profile_does_not_prove_a_floor_nobody_measured():
    card = Card(
        "C-1", "t", "m", "A", "th", "pr", (), (), (), (), (), (), "", (), 1, Path("c.yaml"), "c.yaml", "0" * 64,
        min_score=0.8,
    )  # fmt: skip
    plain = evaluate(card, CardOutcomes())
    release = evaluate(card, CardOutcomes(), floors=True)
    assert plain.verdict == "PROVEN"
    assert release.verdict == "UNVERIFIED" and "mutation score not measured" in release.reason


def test_targets_run_as_survey_cells_with_known_failures_and_not_runnable_ones(tmp_path):
    """run --target: the cards tagged `targets` under each selected target; a third-party target's FAILED
    cell that obligations/targets.yaml expects is marked known (with its reproduction), a target whose
    backend is not installed is n/a here, and neither fails the gate."""
    env = {**os.environ, "COLUMNS": "200"}
    for name in ("KVPROOF_ROOT", "KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, str(ENTRY), "run", "TGT-BATCH", "--target", "transformers.static,transformers.quantized-hqq",
         "--reports", str(tmp_path / "reports"), "--json", str(tmp_path / "v.json")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in text, text
    doc = json.loads((tmp_path / "v.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in doc["cards"]}
    assert verdicts == {"TGT-BATCH": "PROVEN", "TGT-BATCH@transformers.static": "FAILED"}
    survey = next(c for c in doc["cards"] if c["id"] == "TGT-BATCH@transformers.static")
    assert survey["liars"] == []  # liars patch our code: not run against a third-party target
    subs = {s["name"]: s for s in doc["header"]["subjects"]}
    assert subs["transformers.static"]["required"] is False and "TGT-BATCH" in subs["transformers.static"]["known"]
    assert subs["transformers.quantized-hqq"]["runnable"] is False
    md = (tmp_path / "reports" / "latest" / "verdicts.md").read_text()
    assert "| TGT-BATCH | PROVEN | PROVEN | **FAILED (known)** | n/a here |" in md


def test_mutate_takes_matrix_too_and_measures_scores_on_the_default_cells_only(tmp_path):
    """mutate --matrix NAMES: the cells as run does, the mutants against the default cells only; --profile release
    with --matrix default keeps the release budget to the default cells (the scores' cells)."""
    root = _project(tmp_path)
    proc = _run(root, "mutate", "--cards", "cards-mx", "--matrix", "default", "shout", "--json", "m.json")
    assert "Traceback" not in proc.stdout + proc.stderr and proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((root / "m.json").read_text())
    measured = {c["id"]: c.get("mutation") is not None for c in doc["cards"]}
    assert measured == {"MX-1": True, "MX-1@shout": False}
    release = ("--profile", "release", "--matrix", "default")
    proc = _run(root, "mutate", "--cards", "cards-mx", *release, "--json", "r.json")
    assert "Traceback" not in proc.stdout + proc.stderr and proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((root / "r.json").read_text())
    assert doc["header"]["profile"] == "release" and [c["id"] for c in doc["cards"]] == ["MX-1"]
    assert doc["cards"][0]["mutation"]["mutants"]


# ---------------------------------------------------------------- an invalid configuration is an error, not n/a

PROBE = """
import os


class NoGpu(RuntimeError):
    unavailable = True  # a valid setting this machine cannot run: n/a here


def probe():
    mode = os.environ.get("KVPROOF_FX_MODE", "plain")
    if mode not in ("plain", "fast", "gpu"):
        raise ValueError(f"KVPROOF_FX_MODE={mode!r} is not a mode: use plain, fast or gpu")
    if mode == "gpu":
        raise NoGpu("no GPU on this machine")
    return f"mode {mode}"
"""


def _probed(tmp_path: Path, extra: str, probe_body: str = PROBE) -> Path:
    configs = "probe: fxprobe:probe\n" + CONFIGS.replace("  - name: never", extra + "  - name: never")
    root = _project(tmp_path, configs)
    (root / "fxprobe.py").write_text(probe_body)
    return root


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (  # a value the implementation refuses
            "  - name: typo-value\n    reason: r\n    settings: {KVPROOF_FX_MODE: fsat}\n",
            ["configurations[2].settings='KVPROOF_FX_MODE=fsat'", "refused it: ValueError", "is not a mode"],
        ),
        (  # a name nobody reads
            "  - name: typo-name\n    reason: r\n    settings: {KVPROOF_FX_MDOE: fast}\n",
            ["configurations[2].settings.KVPROOF_FX_MDOE='fast'", "never reads", "did you mean KVPROOF_FX_MODE?"],
        ),
        (  # a name nobody reads beside a valid one: the valid one does not hide it
            "  - name: typo-extra\n    reason: r\n    settings: {KVPROOF_FX_MODE: fast, KVPROOF_FXMODE: fast}\n",
            ["configurations[2].settings.KVPROOF_FXMODE='fast'", "never reads"],
        ),
    ],
)
def test_an_invalid_configuration_is_refused_before_anything_runs_not_shown_na(tmp_path, extra, says):
    root = _probed(tmp_path, extra)
    for args in (("--matrix",), ("--matrix", "typo-*"), ("--profile", "release")):
        proc = _run(root, "run", "--cards", "cards-mx", *args)
        text = proc.stdout + proc.stderr
        assert proc.returncode == 2, (args, text)
        assert "Traceback" not in text and "cards-mx/configurations.yaml:" in text, text
        for needle in says:
            assert needle in text, (needle, text)
        assert "one that is invalid is an error" in text
        assert not (root / "reports").exists()


def test_a_probe_that_exits_at_import_gives_no_result_and_is_an_error_not_a_runnable_configuration(tmp_path):
    root = _probed(tmp_path, "", "import sys\nsys.exit(0)\n" + PROBE)
    proc = _run(root, "run", "--cards", "cards-mx", "--matrix")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "ended without a result (exit code 0" in text, text


def test_a_valid_setting_this_machine_cannot_run_is_na_and_the_valid_ones_run(tmp_path):
    extra = (
        "  - name: gpu\n    reason: needs a GPU\n    settings: {KVPROOF_FX_MODE: gpu}\n"
        "  - name: fast\n    reason: the fast mode\n    settings: {KVPROOF_FX_MODE: fast}\n"
    )
    root = _probed(tmp_path, extra)
    proc = _run(root, "run", "--cards", "cards-mx", "--matrix", "--json", "v.json")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    doc = json.loads((root / "v.json").read_text())
    subjects = {s["name"]: s for s in doc["header"]["subjects"]}
    assert subjects["gpu"]["runnable"] is False and "no GPU on this machine" in subjects["gpu"]["why_not"]
    assert subjects["fast"]["runnable"] is True and subjects["fast"]["numerics"] == "mode fast"
    assert {c["id"]: c["verdict"] for c in doc["cards"]}["MX-1@fast"] == "PROVEN"
