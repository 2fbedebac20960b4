"""End to end: run_obligations.py on a tiny fixture project (tests/fixtures/project).

The fixture is copied to a temporary folder and pointed at with KVPROOF_ROOT,
so runs write nothing into the repository. Two full runs are shared by the
tests below: the good cards (exit 0) and a mixed folder with one card per
verdict (exit 1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"


def _copy_project(dest: Path) -> Path:
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    return dest


def kvproof(root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200"}
    env.pop("KVPROOF_CARDS_DIR", None)
    return subprocess.run(
        [sys.executable, str(ENTRY), *args], cwd=root, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return _copy_project(tmp_path_factory.mktemp("e2e") / "project")


@pytest.fixture(scope="module")
def good_run(project):
    proc = kvproof(project, "--json", "good.json")
    return proc, json.loads((project / "good.json").read_text())


@pytest.fixture(scope="module")
def mixed_run(project):
    proc = kvproof(project, "run", "--cards", "cards-mixed", "--json", "mixed.json")
    return proc, json.loads((project / "mixed.json").read_text())


def _card(doc: dict, card_id: str) -> dict:
    return next(c for c in doc["cards"] if c["id"] == card_id)


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


# ---------------------------------------------------------------- the good run


def test_all_proven_exits_0_and_prints_the_table(good_run):
    proc, doc = good_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "seed 0 (replay with --profile ci --seed 0)" in proc.stdout
    assert re.search(
        r"FX-ADD .*add is exact on integers .* N .* PROVEN .* 3/3 .* 1/1 .* 1/1 .* max\|Δ\| = 0\.000e\+00", proc.stdout
    ), proc.stdout
    assert "gate PASS: 2 PROVEN of 2 card(s)" in proc.stdout
    assert doc["header"]["summary"]["gate"] == "PASS"


def test_json_document_matches_its_schema(good_run, mixed_run):
    schema = json.loads((REPO / "obligations" / "verdicts.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for _, doc in (good_run, mixed_run):
        jsonschema.validate(doc, schema)


def test_json_header_records_provenance(good_run):
    head = good_run[1]["header"]
    assert head["schema_version"] == 4 and head["profile"] == "ci" and head["seed"] == 0
    assert head["versions"]["python"] and "numpy" in head["versions"] and "blas" in head["versions"]
    assert head["command"].startswith("run_obligations.py run --json good.json")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", head["started"])


def test_liars_name_the_witness_that_caught_them(good_run):
    add, acc = _card(good_run[1], "FX-ADD"), _card(good_run[1], "FX-ACC")
    assert add["liars"][0]["name"] == "arith.off_by_one" and add["liars"][0]["caught"]
    assert "exact" in add["liars"][0]["caught_by"]
    assert acc["liars"] == [acc["liars"][0]] and acc["liars"][0]["caught_by"] == ["matches-sum"]  # a method liar


def test_cards_record_version_fingerprint_and_bound_files(good_run):
    acc = _card(good_run[1], "FX-ACC")
    assert acc["version"] == 2 and len(acc["fingerprint"]) == 64
    roles = {b["path"]: b["role"] for b in acc["bound_files"]}
    named = {p: r for p, r in roles.items() if r not in ("environment", "read", "reads")}
    assert named == {
        "obligations/fx-acc.yaml": "card",
        "witnesses/test_arith.py": "witness",
        "witnesses/liars/arith.py": "liar",
        "witnesses/conftest.py": "support",
        "fakeimpl/arith.py": "covers",
        "(settings: KVPROOF_* and the numerics line)": "settings",
    }
    # and what its processes read (docs/trust.md), with the marker that they said, and the environment
    assert roles["fakeimpl/__init__.py"] == "read" and "reads" in roles.values() and "environment" in roles.values()
    assert all(len(b["sha256"]) == 64 for b in acc["bound_files"])
    assert len(acc["witnesses"][0]["nodes"]) == 2  # parametrized: both nodes ran


def test_show_prints_the_card_and_its_last_verdict(project, good_run):
    proc = kvproof(project, "show", "FX-ACC")
    assert proc.returncode == 0
    assert "Acc.push keeps a running sum" in proc.stdout and "last verdict PROVEN" in proc.stdout
    assert "liar arith.acc_forgets: matches-sum" in proc.stdout


# ---------------------------------------------------------------- one card per verdict

EXPECTED = {
    "FX-ADD": ("PROVEN", "3 witness(es) passed"),
    "FX-FALSIFIED": ("FAILED", "witness is-sub failed: AssertionError"),
    "FX-LOOSE": ("FAILED", "max_abs_delta = 1.000e-03 (bound le 0)"),
    "FX-NOCONTROL": ("FAILED", "control same-same showed no difference"),
    "FX-WEAK": ("VACUOUS", "liar arith.float_add survived"),
    "FX-SKIP": ("UNVERIFIED", "oracle export missing"),
    "FX-HANG": ("ERROR", "witness hangs: timeout: still running after 1 s"),
    "FX-CRASH": ("ERROR", "the interpreter died while this test ran (exit code 3)"),
    "FX-RAISES": ("ERROR", "TypeError"),
    "FX-NOEVIDENCE": ("ERROR", "`max_abs_delta` was not recorded"),
    "FX-DANGLING": ("ERROR", "not run: cards-mixed/11-dangling.yaml:7: refs[0]"),
}


def test_mixed_run_exits_1_with_every_verdict(mixed_run):
    proc, doc = mixed_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _no_traceback(proc)
    got = {c["id"]: (c["verdict"], c["reason"]) for c in doc["cards"]}
    for card_id, (verdict, fragment) in EXPECTED.items():
        assert got[card_id][0] == verdict and fragment in got[card_id][1], (card_id, got[card_id])
    assert [c["id"] for c in doc["cards"]] == list(EXPECTED)  # card order = file order
    assert doc["header"]["summary"]["counts"] == {"PROVEN": 1, "FAILED": 3, "VACUOUS": 1, "UNVERIFIED": 1, "ERROR": 5}


def test_every_non_proven_card_gets_a_why_line(mixed_run):
    out = mixed_run[0].stdout
    for card_id, (verdict, _fragment) in EXPECTED.items():
        if verdict != "PROVEN":
            assert f"{verdict} {card_id}: " in out, card_id
    assert "liars: arith.off_by_one caught by weak; arith.float_add survived" in out
    assert "gate FAIL" in out


def test_hypothesis_failure_records_seed_and_shrunk_example(mixed_run):
    w = _card(mixed_run[1], "FX-FALSIFIED")["witnesses"][0]
    assert w["status"] == "failed" and w["location"] == "witnesses/test_arith.py:48"
    assert w["hypothesis"]["seed"] == 0 and "test_add_is_subtraction(" in w["hypothesis"]["example"]
    assert "b=1" in w["hypothesis"]["example"] and w["failure"]


def test_timeout_is_attributed_to_the_hanging_node_with_its_stack(mixed_run):
    card = _card(mixed_run[1], "FX-HANG")
    exact, hangs, after = card["witnesses"]
    assert exact["status"] == "passed"
    assert hangs["status"] == "error" and "test_hangs" in hangs["failure"]  # faulthandler's stack
    assert after["status"] == "not_run" and "timed out" in after["why"]


def test_liars_do_not_run_when_the_honest_run_fails(mixed_run):
    # FX-WEAK ran both liars; the failing cards have none, and FX-ADD's liar was caught
    weak = _card(mixed_run[1], "FX-WEAK")
    assert [(entry["name"], entry["status"]) for entry in weak["liars"]] == [
        ("arith.off_by_one", "caught"),
        ("arith.float_add", "survived"),
    ]


# ---------------------------------------------------------------- usage, validation, scaffolding


def test_validate_reports_all_problems_and_exits_2(project):
    proc = kvproof(project, "validate", "--cards", "cards-invalid")
    assert proc.returncode == 2
    _no_traceback(proc)
    assert "4 problem(s) in 2 file(s)" in proc.stdout
    assert "cards-invalid/a-misspelt.yaml:11: witnesess: unknown field (did you mean `witnesses`?)" in proc.stdout
    assert "cards-invalid/b-syntax.yaml:3: YAML syntax error" in proc.stdout


def test_validate_good_cards_exits_0(project):
    proc = kvproof(project, "validate")
    assert (proc.returncode, "ok: 2 card(s) in obligations/ are valid") == (0, proc.stdout.strip())


def test_run_refuses_invalid_cards_with_exit_2(project):
    proc = kvproof(project, "--cards", "cards-invalid")
    assert proc.returncode == 2
    _no_traceback(proc)
    assert "cannot run: 4 problem(s) in the cards" in proc.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["FX-ADDD"], "card id 'FX-ADDD' matches no card (did you mean `FX-ADD`?)"),
        (["--tag", "acx"], "--tag 'acx' is on no card (did you mean `acc`?)"),
        (["--profile", "fast"], "invalid choice: 'fast'"),
        (["--cards", "nowhere"], "--cards='nowhere' is not a folder"),
        (["show", "FX-AD"], "no card with id='FX-AD' (did you mean `FX-ADD`?)"),
        (["--oracle-dir", "nowhere"], "--oracle-dir='nowhere' is not a folder"),
    ],
)
def test_bad_usage_exits_2_without_traceback(project, args, message):
    proc = kvproof(project, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    _no_traceback(proc)
    assert message in proc.stderr


def test_empty_card_folder_is_reported_plainly(project, tmp_path):
    proc = kvproof(project, "--cards", str(tmp_path))
    assert proc.returncode == 2 and "no cards found in" in proc.stderr
    _no_traceback(proc)
    # run, validate and list agree: an empty folder is a mistake (usually the wrong --cards)
    for command in ("list", "validate"):
        other = kvproof(project, command, "--cards", str(tmp_path))
        assert other.returncode == 2 and "no cards found in" in other.stderr, command


def test_list_shows_cards(project):
    proc = kvproof(project, "list")
    assert proc.returncode == 0 and "FX-ACC" in proc.stdout and "FX-ADD" in proc.stdout


def test_new_scaffolds_a_card_that_fails_until_written(tmp_path):
    root = _copy_project(tmp_path / "p")
    proc = kvproof(root, "new", "KV-T9")
    assert proc.returncode == 0, proc.stderr
    assert (root / "obligations" / "KV-T9.yaml").is_file() and (root / "witnesses" / "test_kv_t9.py").is_file()
    check = kvproof(root, "validate")  # the scaffold's placeholders are named until replaced (issue 38)
    assert check.returncode == 2 and "4 problem(s) in 1 file(s)" in check.stdout, check.stdout
    for field in ("title=", "theorem=", "proof=", "refs=[]"):
        assert "obligations/KV-T9.yaml:" in check.stdout and field in check.stdout, check.stdout
    run = kvproof(root, "KV-T9", "--json", "v.json")
    assert run.returncode == 1
    card = json.loads((root / "v.json").read_text())["cards"][0]
    assert card["verdict"] == "ERROR" and "placeholder text" in card["reason"]  # not run, never PROVEN
    path = root / "obligations" / "KV-T9.yaml"
    text = path.read_text().replace("refs: []", "refs: [fakeimpl/arith.py::add]")
    path.write_text(text.replace("TODO", "add is exact;"))
    assert kvproof(root, "validate").returncode == 0
    run = kvproof(root, "KV-T9", "--json", "v.json")
    assert run.returncode == 1
    card = json.loads((root / "v.json").read_text())["cards"][0]
    assert card["verdict"] == "FAILED" and "not written yet" in card["reason"]
    again = kvproof(root, "new", "KV-T9")
    assert again.returncode == 2 and "already used" in again.stderr


def test_no_liars_makes_cards_with_liars_unverified(project):
    proc = kvproof(project, "FX-ACC", "--no-liars", "--json", "noliars.json")
    card = json.loads((project / "noliars.json").read_text())["cards"][0]
    assert proc.returncode == 1 and card["verdict"] == "UNVERIFIED"
    assert card["reason"] == "witnesses hold, but liars were not run (--no-liars)"


def test_seed_replays_the_same_release_example(project):
    docs = []
    for name in ("r1.json", "r2.json"):
        kvproof(
            project, "FX-FALSIFIED", "--cards", "cards-mixed", "--profile", "release", "--seed", "1234", "--json", name
        )
        docs.append(json.loads((project / name).read_text()))
    examples = [d["cards"][0]["witnesses"][0]["hypothesis"] for d in docs]
    assert examples[0]["seed"] == 1234 and examples[0]["profile"].startswith("release")
    assert examples[0]["example"] == examples[1]["example"]


def test_unknown_liar_and_broken_liar_target_are_errors_without_running(project, tmp_path):
    card = (FIXTURE / "obligations" / "fx-acc.yaml").read_text().replace("arith.acc_forgets", "arith.gone")
    (tmp_path / "cards").mkdir()
    (tmp_path / "cards" / "gone.yaml").write_text(card)
    proc = kvproof(project, "--cards", str(tmp_path / "cards"), "--json", str(tmp_path / "v.json"))
    doc = json.loads((tmp_path / "v.json").read_text())
    assert proc.returncode == 1 and doc["cards"][0]["verdict"] == "ERROR"
    assert "target 'fakeimpl.arith:subtract'" in doc["cards"][0]["reason"]


def test_plain_pytest_runs_witnesses_without_the_harness(project):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), str(REPO)])}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "witnesses/test_arith.py::test_add_exact",
            "witnesses/test_arith.py::test_add_commutes",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


def test_oracle_subcommand_is_dispatched():
    try:
        import harness.oracle.cli  # noqa: F401
    except ImportError:
        pytest.skip("harness.oracle.cli is not written yet")
    proc = subprocess.run(
        [sys.executable, str(ENTRY), "oracle", "--help"], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert proc.returncode == 0 and "export" in proc.stdout


def test_a_liar_that_cannot_be_applied_is_an_error(project, tmp_path):
    card = (FIXTURE / "obligations" / "fx-add.yaml").read_text().replace("arith.off_by_one", "broken.import_fails")
    (tmp_path / "cards").mkdir()
    (tmp_path / "cards" / "broken.yaml").write_text(card)
    proc = kvproof(project, "--cards", str(tmp_path / "cards"), "--json", str(tmp_path / "v.json"))
    card = json.loads((tmp_path / "v.json").read_text())["cards"][0]
    assert proc.returncode == 1 and card["verdict"] == "ERROR"
    assert "liar broken.import_fails could not be applied" in card["reason"]
    assert "RuntimeError: this liar module is broken on purpose" in card["reason"]


def test_cards_dir_comes_from_the_environment(project):
    env = {**os.environ, "KVPROOF_ROOT": str(project), "KVPROOF_CARDS_DIR": str(project / "cards-invalid")}
    proc = subprocess.run(
        [sys.executable, str(ENTRY), "validate"], cwd=project, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "cards-invalid/b-syntax.yaml:3" in proc.stdout


@pytest.mark.parametrize("called", ["kvproof", "run_obligations.py"])
def test_every_hint_names_the_command_the_way_the_user_called_it(project, tmp_path, monkeypatch, capsys, called):
    """Through the console script (`kvproof`, sys.argv[0] .../bin/kvproof) the errors say `kvproof: error`, through
    run_obligations.py that; every hint that names a command to type says one that runs as printed from here."""
    from harness.cli import main

    monkeypatch.setattr(sys, "argv", [str(Path("/somewhere/bin") / called)])
    monkeypatch.setenv("KVPROOF_ROOT", str(project))
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.delenv("KVPROOF_CARDS_DIR", raising=False)
    monkeypatch.chdir(project)
    empty, reports = tmp_path / "empty", str(tmp_path / "reports")
    empty.mkdir()
    shutil.copytree(project / "cards-mixed", tmp_path / "bad-timings")
    (tmp_path / "bad-timings" / "timings.json").write_text("{")
    # every hint that names a command to type says one that runs as printed from here (harness.project.runner:
    # the console script by its path, or this interpreter and run_obligations.py); errors are prefixed the way
    # the user called us (harness.project.program)
    from harness.project import runner

    typed = runner()
    cases = [  # (arguments, exit code, what it says)
        (["FX-ADDD"], 2, f"{called}: error: card id 'FX-ADDD' matches no card"),
        (["FX-ADDD"], 2, f"`{typed} list` shows the ids"),
        (["show", "FX-AD"], 2, f"`{typed} list` shows the ids"),
        (["--cards", str(empty)], 2, f"add one with `{typed} new ID`"),
        (["status", "--reports", reports], 1, f"run the obligations once (`{typed} run`)"),
        (["timings", "--reports", reports], 0, f"none (`{typed} timings --write` writes it from the ledger)"),
        (["timings", "--write", "--reports", reports], 2, f"(`{typed} run`), then `{typed} timings --write`"),
        (["timings", "--cards", str(tmp_path / "bad-timings")], 2, f"rewrite it with `{typed} timings --write`"),
    ]
    for args, code, says in cases:
        assert main(args) == code, args
        out = capsys.readouterr()
        text = " ".join((out.out + out.err).split())  # rich may wrap a long line
        assert says in text, (args, text)
        other = "run_obligations.py" if called == "kvproof" else "kvproof "
        assert f"`{other}" not in text, (args, text)


NA_WITNESS = """import pytest


def test_needs_a_path_this_machine_lacks(evidence):
    pytest.skip("n/a: the path this card is about is absent here")


def test_a_plain_skip(evidence):
    pytest.skip("an optional dependency is missing")
"""

NA_CARD = """id: {id}
title: a card about a path {id}
module: fakeimpl.arith
regime: A
theorem: On the path, something holds.
proof: Acc.push adds x to the stored sum.
refs: [fakeimpl/arith.py::Acc.push]
witnesses:
  - id: w
    test: witnesses/test_na.py::{test}
version: 1
"""


def test_a_card_whose_path_is_absent_is_na_and_not_counted_but_a_plain_skip_still_fails(tmp_path):
    """A plain run agrees with the matrix: a card whose every witness skips ``n/a: ...`` is shown n/a and does
    not fail the gate (KERNEL-ACC without the C kernel); a plain skip is UNVERIFIED and does; a run where
    nothing is counted fails."""
    root = _copy_project(tmp_path / "project")
    (root / "witnesses" / "test_na.py").write_text(NA_WITNESS)
    cards = root / "cards-na"
    cards.mkdir()
    shutil.copy(root / "obligations" / next(p.name for p in (root / "obligations").glob("*.yaml")), cards)
    (cards / "na.yaml").write_text(NA_CARD.format(id="FX-NA", test="test_needs_a_path_this_machine_lacks"))
    proc = kvproof(root, "run", "--cards", "cards-na")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "n/a here, not counted: FX-NA" in proc.stdout, proc.stdout
    (cards / "skip.yaml").write_text(NA_CARD.format(id="FX-SKIP", test="test_a_plain_skip"))
    proc = kvproof(root, "run", "--cards", "cards-na")
    assert proc.returncode == 1 and "UNVERIFIED FX-SKIP" in proc.stdout, proc.stdout + proc.stderr
    proc = kvproof(root, "run", "FX-NA", "--cards", "cards-na")
    assert proc.returncode == 1, proc.stdout  # nothing counted: no gate passes on n/a alone


def test_in_a_github_job_each_card_not_proven_is_annotated_and_the_summary_written(tmp_path, monkeypatch):
    """GITHUB_ACTIONS=true: an ::error at each card that is not PROVEN (and at a failed witness's line), and the
    report's verdicts.md appended to $GITHUB_STEP_SUMMARY; outside a job, neither."""
    root = _copy_project(tmp_path / "project")
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    proc = kvproof(root, "run", "--cards", "cards-mixed")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stdout.splitlines() if ln.startswith("::error ")]
    assert any("file=cards-mixed/02-falsified.yaml,line=1" in ln and "FAILED" in ln for ln in errors), errors
    assert any(ln.startswith("::error file=witnesses/") and ",line=" in ln for ln in errors), errors
    assert not any("01-proven" in ln for ln in errors), errors
    text = summary.read_text()
    assert text.startswith("# earlier step\n") and "| card |" in text, text[:500]

    monkeypatch.delenv("GITHUB_ACTIONS")
    proc = kvproof(root, "run", "--cards", "cards-mixed")
    assert "::error" not in proc.stdout


def test_k_selects_by_id_title_or_tag_as_pytest_does_and_lf_is_rerun_failed(project):
    proc = kvproof(project, "run", "-k", "acc and not add", "--json", "k.json", "--force")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    ids = [c["id"] for c in json.loads((project / "k.json").read_text())["cards"]]
    assert ids and all("ACC" in i or "acc" in i.lower() for i in ids) and "FX-ADD" not in ids, ids
    bad = kvproof(project, "run", "-k", "acc and")
    assert bad.returncode == 2 and "-k 'acc and'" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    none = kvproof(project, "run", "-k", "nothing-has-this")
    assert none.returncode == 2 and "matches no card" in none.stderr, none.stderr
    proven = {c["id"] for c in json.loads((project / "k.json").read_text())["cards"] if c["verdict"] == "PROVEN"}
    lf = kvproof(project, "run", "--lf", *sorted(proven), "--json", "lf.json", "--force")
    assert lf.returncode == 0, lf.stdout + lf.stderr
    again = json.loads((project / "lf.json").read_text())["cards"]
    assert proven and all(c["replayed_from"] for c in again), again  # --lf: what was PROVEN is replayed, not run
