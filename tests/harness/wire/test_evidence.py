"""The ``evidence`` fixture's verbs: record once, observe the worst, count a tally; no silent overwrite."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.plugin import Evidence


def test_recording_a_key_twice_raises_naming_the_key_both_values_and_the_fix():
    ev = Evidence()
    ev.record("max_abs_delta", 5.0)
    with pytest.raises(ValueError) as info:
        ev.record("max_abs_delta", 0.0)
    text = str(info.value)
    assert "'max_abs_delta'" in text and "5.0" in text and "0.0" in text
    assert "use evidence.observe(...) once per example or evidence.count(...)" in text
    assert ev.values == {"max_abs_delta": 5.0}  # the first value is kept


def test_observe_keeps_count_min_max_and_nans():
    ev = Evidence()
    for x in (0.0, 3e-7, np.float32(1e-6), -2.0, float("nan"), 7):
        ev.observe("delta", x)
    s = ev.values["delta"]
    assert s == {"observed": 6, "min": -2.0, "max": 7, "nan": 1}
    assert type(s["max"]) is int and isinstance(s["min"], float)


def test_observe_of_only_nans_has_no_min_or_max():
    ev = Evidence()
    ev.observe("delta", math.nan)
    assert ev.values["delta"] == {"observed": 1, "min": None, "max": None, "nan": 1}


@pytest.mark.parametrize("value", [True, np.bool_(False), "0.0", None, [1.0], np.zeros(2)])
def test_observe_refuses_anything_but_a_number(value):
    with pytest.raises(TypeError, match="must be an int or float"):
        Evidence().observe("delta", value)


def test_count_sums_ints_and_zero_makes_the_key_exist():
    ev = Evidence()
    ev.count("examples")
    ev.count("examples", np.int64(2))
    ev.count("wrapped", 0)
    assert ev.values == {"examples": 3, "wrapped": 0}


@pytest.mark.parametrize("n,error", [(True, TypeError), (1.0, TypeError), ("1", TypeError), (-1, ValueError)])
def test_count_refuses_bools_floats_and_negative_tallies(n, error):
    with pytest.raises(error, match=r"evidence\.count\('k', n="):
        Evidence().count("k", n)


@pytest.mark.parametrize(
    "first,second",
    [
        ("record", "observe"),
        ("record", "count"),
        ("observe", "record"),
        ("observe", "count"),
        ("count", "record"),
        ("count", "observe"),
    ],
)
def test_one_key_takes_one_verb(first, second):
    ev = Evidence()
    getattr(ev, first)("k", 1)
    with pytest.raises(ValueError, match=rf"key='k' was already used with evidence\.{first}; one key takes one verb"):
        getattr(ev, second)("k", 1)


def test_a_key_never_observed_or_counted_is_absent():
    ev = Evidence()
    ev.count("examples", 0)
    assert "max_abs_delta" not in ev.values and "examples" in ev.values


def test_values_are_a_json_able_snapshot_the_witness_cannot_change_afterwards():
    ev = Evidence()
    ev.observe("delta", 1.0)
    snap = ev.values
    ev.observe("delta", 2.0)
    assert snap["delta"]["max"] == 1.0 and ev.values["delta"]["max"] == 2.0
    json.dumps(ev.values)


def test_recording_a_dict_shaped_like_an_observed_summary_is_refused():
    with pytest.raises(ValueError, match="is how evidence.observe reports its summary"):
        Evidence().record("k", {"observed": 1, "min": 0, "max": 0, "nan": 0})


# ---------------------------------------------------------------- through the harness (fixture project)

import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "project"

CARDS = {
    "EV-OBSERVED": ("observes", "test_observes_every_example", "{max_abs_delta: {le: 0}, examples: {ge: 10}}"),
    "EV-DRIFT": ("drift", "test_observes_a_drift_the_assertions_miss", "{max_abs_delta: {le: 0.5}}"),
    "EV-TWICE": ("twice", "test_records_a_key_twice", "{max_abs_delta: {le: 0}}"),
    "EV-STOPPED": ("stopped", "test_nested_property_of_add_is_falsified", "{never_reached: {eq: 0}}"),
}


@pytest.fixture(scope="module")
def evidence_run(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("evidence") / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    cards = root / "cards-evidence"
    cards.mkdir()
    for card_id, (wid, test, bounds) in CARDS.items():
        reason = "\n    reason: the fixture's drift" if card_id == "EV-DRIFT" else ""
        (cards / f"{card_id}.yaml").write_text(
            f"id: {card_id}\ntitle: evidence fixture\nmodule: fakeimpl.arith\nregime: N\ntheorem: add adds.\n"
            f"proof: See add.\nrefs: [fakeimpl/arith.py::add]\nwitnesses:\n  - id: {wid}\n"
            f"    test: witnesses/test_evidence.py::{test}\n    bounds: {bounds}{reason}\nversion: 1\n"
        )
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200"}
    env.pop("KVPROOF_CARDS_DIR", None)
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "run_obligations.py"),
            "run",
            "--cards",
            "cards-evidence",
            "--json",
            "v.json",
            "-j",
            "1",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    doc = json.loads((root / "v.json").read_text())
    return {"proc": proc, "cards": {c["id"]: c for c in doc["cards"]}}


def test_observed_and_counted_evidence_is_proven_on_its_worst_value(evidence_run):
    card = evidence_run["cards"]["EV-OBSERVED"]
    assert card["verdict"] == "PROVEN", card["reason"]
    (w,) = card["witnesses"]
    assert w["evidence"]["max_abs_delta"] == {"observed": 50, "min": 0, "max": 0, "nan": 0}
    assert w["evidence"]["examples"] == 50
    assert w["bounds"][0]["detail"] == "max of 50 observed"


def test_a_bound_on_observed_evidence_fails_on_the_worst_example(evidence_run):
    card = evidence_run["cards"]["EV-DRIFT"]
    assert card["verdict"] == "FAILED"
    assert "max_abs_delta = 9.000e-01 (bound le 5.000e-01; max of 10 observed)" in card["reason"], card["reason"]


def test_a_witness_that_records_a_key_twice_is_error_naming_the_key(evidence_run):
    card = evidence_run["cards"]["EV-TWICE"]
    assert card["verdict"] == "ERROR", card["reason"]
    assert "ValueError" in card["reason"] and "'max_abs_delta'" in card["reason"]


def test_a_key_after_a_failed_property_is_not_reached_rather_than_forgotten(evidence_run):
    card = evidence_run["cards"]["EV-STOPPED"]
    assert card["verdict"] == "FAILED"
    (check,) = card["witnesses"][0]["bounds"]
    assert check["holds"] is None and "not reached: the witness stopped before recording it" in check["actual"]
    assert "evidence.record" not in check["actual"]
