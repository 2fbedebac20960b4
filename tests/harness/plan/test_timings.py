"""obligations/timings.json: committed scheduling hints for runs with no ledger (a fresh clone, CI).

Runs on copies of tests/fixtures/project (KVPROOF_ROOT): plan() on a request
whose reports folder has no ledger, the scheduler (harness.execute.schedule.run_cards)
fed with what plan() chose, and run_obligations.py run / validate / timings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from test_baseline_e2e import kvproof  # tests/ is on sys.path, no package
from test_cli_e2e import _copy_project as _copy
from test_cli_e2e import _no_traceback

from harness import request
from harness.execute.jobs import RunConfig
from harness.execute.schedule import run_cards
from harness.ledger.history import FILENAME, Ledger
from harness.plan import planning, timings
from harness.select import selection

HINTS = Path("obligations") / "timings.json"


def _doc(cards: dict) -> dict:
    return {
        "format": "kvproof-timings",
        "version": 1,
        "recorded": "2026-01-01T00:00:00Z",
        "source": "a test",
        "cards": cards,
    }


def _write_hints(root: Path, content: dict | str) -> Path:
    path = root / HINTS
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def _plan(root: Path, reports: Path) -> tuple[planning.RunPlan, list]:
    req = request.RunRequest(root=root, cards_dir=root / "obligations", reports_dir=reports, reports_source="--reports")
    loaded = selection.load(root, req.cards_dir, "obligations/")
    cards = selection.runnable(loaded, (), (), None)
    return planning.plan(req, loaded, cards, None), cards


# ---------------------------------------------------------------- the file steers an empty-ledger schedule


@pytest.fixture(scope="module")
def hinted(tmp_path_factory):
    """The fixture's last card hinted slow, its liar's third witness as the catcher; planned with no ledger,
    run -j 2."""
    root = _copy(tmp_path_factory.mktemp("hinted") / "project")
    _, cards = _plan(root, root / "no-reports")
    last = cards[-1]
    assert last.id != cards[0].id and last.liars and len(last.witnesses) >= 2
    catcher = last.witnesses[-1].id
    _write_hints(
        root, _doc({last.id: {"honest_s": 50.0, "liars": {last.liars[0]: {"s": 2.0, "caught_by": [catcher]}}}})
    )
    the_plan, cards = _plan(root, root / "no-reports")
    jobs: list = []
    run_cards(
        cards, RunConfig(root=root), jobs=2, expected=the_plan.expected, on_start=lambda job, running: jobs.append(job)
    )
    return the_plan, cards, jobs, catcher


def test_with_an_empty_ledger_a_card_hinted_slow_in_timings_json_starts_first(hinted):
    the_plan, cards, jobs, _ = hinted
    last = cards[-1].id
    assert the_plan.schedule_from == {c.id: ("timings.json" if c.id == last else "unknown") for c in cards}
    assert the_plan.expected[last].honest_s == 50.0
    assert jobs[0].label == last  # card order would start cards[0]


def test_caught_by_from_timings_json_runs_that_witness_first_under_the_liar(hinted):
    _, cards, jobs, catcher = hinted
    card = cards[-1]
    liar_run = next(j for j in jobs if j.card.id == card.id and j.liar == card.liars[0])
    assert [w.id for w in card.witnesses][0] != catcher
    assert [w.id for w in liar_run.witnesses] == [catcher] + [w.id for w in card.witnesses if w.id != catcher]


def test_the_start_line_says_where_the_schedule_came_from_and_then_the_ledger_wins(tmp_path):
    root = _copy(tmp_path / "project")
    _, cards = _plan(root, tmp_path / "reports")
    _write_hints(root, _doc({c.id: {"honest_s": 40.0, "liars": {}} for c in cards}))
    proc = kvproof(root, "run", "-j", "2", "--reports", str(tmp_path / "reports"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"schedule: ledger 0, obligations/timings.json {len(cards)}, unknown 0 card(s)" in proc.stdout
    the_plan, _ = _plan(root, tmp_path / "reports")  # the ledger now has every card: its entries win
    assert the_plan.schedule_from == {c.id: "ledger" for c in cards}
    with Ledger(tmp_path / "reports" / FILENAME, create=False) as ledger:
        for c in cards:
            assert the_plan.expected[c.id] == timings.from_ledger(ledger, c.id).expected
            assert the_plan.expected[c.id].honest_s != 40.0
    proc = kvproof(root, "run", "-j", "2", "--reports", str(tmp_path / "reports"))
    assert f"schedule: ledger {len(cards)}, obligations/timings.json 0, unknown 0 card(s)" in proc.stdout


def test_entries_for_cards_and_liars_that_no_longer_exist_are_ignored(tmp_path):
    root = _copy(tmp_path / "project")
    _, cards = _plan(root, tmp_path / "reports")
    card = cards[0]
    _write_hints(
        root,
        _doc(
            {
                "FX-GONE": {"honest_s": 99.0, "liars": {}},
                card.id: {"honest_s": 3.0, "liars": {"no.such_liar": {"s": 5.0, "caught_by": ["x"]}}},
            }
        ),
    )
    the_plan, _ = _plan(root, tmp_path / "reports")
    assert "FX-GONE" not in the_plan.expected and "FX-GONE" not in the_plan.schedule_from
    assert the_plan.schedule_from[card.id] == "timings.json" and the_plan.expected[card.id].honest_s == 3.0
    proc = kvproof(root, "timings", "--reports", str(tmp_path / "reports"))
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"ignored, no such card or liar now: FX-GONE, {card.id} / no.such_liar" in proc.stdout


# ---------------------------------------------------------------- a malformed file: exit 2 before anything runs

GOOD_LIAR = {"s": 1.0, "caught_by": ["exact"]}

MALFORMED = [  # (file text, the JSON path named, the value named)
    ('{"format": "kvproof-timings", "version": 1,', "line 1", ""),
    (json.dumps({**_doc({}), "format": "pytest-split"}), "$.format", '"pytest-split"'),
    (json.dumps({**_doc({}), "version": 2}), "$.version", "2"),
    (json.dumps(_doc({"FX-ADD": {"honest_s": -1.5, "liars": {}}})), '$.cards["FX-ADD"].honest_s', "-1.5"),
    (json.dumps(_doc({"FX-ADD": {"honest_s": "2.5", "liars": {}}})), '$.cards["FX-ADD"].honest_s', '"2.5"'),
    (json.dumps(_doc({"FX-ADD": {"honest_s": True, "liars": {}}})), '$.cards["FX-ADD"].honest_s', "true"),
    (json.dumps(_doc({"FX-ADD": {"honest_s": float("nan"), "liars": {}}})), '$.cards["FX-ADD"].honest_s', "NaN"),
    (
        json.dumps(_doc({"FX-ADD": {"honest_s": 1.0, "liars": {"arith.off_by_one": {"s": -2.0, "caught_by": []}}}})),
        '$.cards["FX-ADD"].liars["arith.off_by_one"].s',
        "-2.0",
    ),
    (
        json.dumps(
            _doc({"FX-ADD": {"honest_s": 1.0, "liars": {"arith.off_by_one": {"s": 1.0, "caught_by": "exact"}}}})
        ),
        '$.cards["FX-ADD"].liars["arith.off_by_one"].caught_by',
        '"exact"',
    ),
    (json.dumps(_doc({"FX-ADD": {"honest_s": 1.0}})), '$.cards["FX-ADD"].liars', ""),
    (json.dumps(_doc({"FX-ADD": {"honest_s": 1.0, "liars": {}, "honest": 2}})), '$.cards["FX-ADD"].honest', "2"),
    (json.dumps(_doc([])), "$.cards", "[]"),
    (
        json.dumps(_doc({})).replace(
            '"cards": {}', '"cards": {"FX-ADD": {"honest_s": 1, "liars": {}}, "FX-ADD": {"honest_s": 2, "liars": {}}}'
        ),
        '$.cards["FX-ADD"]',
        "",
    ),
    ("[]", "$", "[]"),
]


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> Path:
    return _copy(tmp_path_factory.mktemp("malformed") / "project")


@pytest.mark.parametrize(
    "text, where, value",
    MALFORMED,
    ids=[
        "bad-json",
        "format",
        "version",
        "negative",
        "text",
        "bool",
        "nan",
        "liar-negative",
        "caught-by-type",
        "missing",
        "unknown-field",
        "cards-type",
        "duplicate",
        "not-object",
    ],
)
def test_a_malformed_timings_json_is_one_paragraph_naming_file_field_and_value_exit_2(
    bare, tmp_path, text, where, value
):
    _write_hints(bare, text)
    reports = tmp_path / "reports"
    proc = kvproof(bare, "run", "--reports", str(reports))
    _no_traceback(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert "\n" not in err, err  # one paragraph
    assert err.startswith("run_obligations.py: error: obligations/timings.json"), err
    assert (f"{where}={value}" if value else where) in err, err
    assert "delete it or rewrite it with `" in err and "run_obligations.py timings --write`" in err, err
    assert "kvproof:" not in proc.stdout  # refused before the run started
    assert not [p for p in reports.iterdir() if p.is_dir()], "no report folder: nothing ran"
    with Ledger(reports / FILENAME, create=False) as ledger:
        assert ledger.run_count() == 0


def test_validate_and_timings_refuse_a_malformed_file_too(bare):
    _write_hints(bare, json.dumps(_doc({"FX-ADD": {"honest_s": -1, "liars": {}}})))
    for args in (("validate",), ("timings",)):
        proc = kvproof(bare, *args)
        _no_traceback(proc)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert '$.cards["FX-ADD"].honest_s=-1' in proc.stdout + proc.stderr


# ---------------------------------------------------------------- timings --write


def test_timings_write_round_trips_the_ledgers_latest_entries(tmp_path):
    root = _copy(tmp_path / "project")
    reports = tmp_path / "reports"
    assert kvproof(root, "run", "-j", "2", "--reports", str(reports)).returncode == 0
    proc = kvproof(root, "timings", "--write", "--reports", str(reports))
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wrote obligations/timings.json" in proc.stdout
    written = json.loads((root / HINTS).read_text())
    jsonschema.validate(written, timings.load_schema())
    with Ledger(reports / FILENAME, create=False) as ledger:
        runs = ledger.runs()
        assert (
            written["source"].startswith(f"ledger run {runs[0]['run_id']} (")
            and runs[0]["report_dir"] in written["source"]
        )
        loaded = timings.load(root / "obligations", root)
        _, cards = _plan(root, reports)
        assert sorted(loaded) == sorted(c.id for c in cards)
        half = 0.05 + 1e-9  # the file rounds to 0.1 s: off by at most half of that (1.45 rounds to 1.4 in binary)
        for c in cards:
            want, got = timings.from_ledger(ledger, c.id).expected, loaded[c.id]
            assert got.honest_s == pytest.approx(want.honest_s, abs=half)
            assert got.liars_s.keys() == want.liars_s.keys() and want.liars_s
            assert all(got.liars_s[n] == pytest.approx(s, abs=half) for n, s in want.liars_s.items())
            assert got.caught_by == want.caught_by and want.caught_by
    for value in [e["honest_s"] for e in written["cards"].values()]:
        assert value == round(value, 1)
    # what `timings` shows is what plan() would use: the ledger's entries (they win over the file)
    shown = kvproof(root, "timings", "--reports", str(reports))
    assert shown.returncode == 0 and "used for 0 card(s)" in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.parametrize("ledger", ["none", "empty"])
def test_timings_write_refuses_when_the_ledger_has_no_entries(tmp_path, ledger):
    root = _copy(tmp_path / "project")
    reports = tmp_path / "reports"
    if ledger == "empty":
        Ledger(reports / FILENAME, create=True).close()
    proc = kvproof(root, "timings", "--write", "--reports", str(reports))
    _no_traceback(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # the hint runs as printed: this interpreter and run_obligations.py by path (harness.project.runner)
    assert "nothing to write" in proc.stderr and re.search(r"`\S+ \S*run_obligations\.py run`", proc.stderr), (
        proc.stderr
    )
    assert not (root / HINTS).exists()
