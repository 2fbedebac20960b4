"""A Hypothesis property nested in a witness's body (the pattern every shipped witness uses) keeps its
falsifying example, its @reproduce_failure line and the command that replays it, in every report format."""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.project import command

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "project"
CARD = """id: FX-NESTED
title: add is subtraction, claimed by a nested property
module: fakeimpl.arith
regime: N
theorem: add(a, b) == a - b (false).
proof: See add.
refs: [fakeimpl/arith.py::add]
witnesses:
  - id: nested
    test: witnesses/test_evidence.py::test_nested_property_of_add_is_falsified
version: 1
"""
REPLAY_ARGS = "run FX-NESTED --cards cards-nested --profile ci --seed 0"


def replay_in(root: Path) -> str:
    """The replay command as the run records it: as it runs from the project ``root``."""
    return command(REPLAY_ARGS, at=root)


@pytest.fixture(scope="module")
def nested_run(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("nested") / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    (root / "cards-nested").mkdir()
    (root / "cards-nested" / "FX-NESTED.yaml").write_text(CARD)
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200"}
    env.pop("KVPROOF_CARDS_DIR", None)
    env.pop("KVPROOF_REPORTS_DIR", None)
    proc = subprocess.run(
        [sys.executable, str(REPO / "run_obligations.py"), "run", "--cards", "cards-nested", "--json", "v.json"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    latest = root / "reports" / "latest"
    return {
        "proc": proc,
        "replay": replay_in(root),
        "doc": json.loads((root / "v.json").read_text()),
        "html": html.unescape((latest / "index.html").read_text()),
        "md": (latest / "verdicts.md").read_text(),
    }


def test_json_keeps_the_nested_property_example_reproduce_line_and_replay(nested_run):
    (card,) = nested_run["doc"]["cards"]
    assert card["verdict"] == "FAILED", card["reason"]
    hyp = card["witnesses"][0]["hypothesis"]
    assert hyp["example"].startswith(("Failing test case: prop(", "Falsifying example: prop(")), hyp
    assert "a=" in hyp["example"] and "b=" in hyp["example"]
    assert hyp["reproduce"].startswith("@reproduce_failure(")
    assert (hyp["seed"], hyp["profile"], hyp["replay"]) == (0, "ci", nested_run["replay"])


def test_index_html_shows_the_nested_property_shrunk_example_and_replay_command(nested_run):
    page, hyp = nested_run["html"], nested_run["doc"]["cards"][0]["witnesses"][0]["hypothesis"]
    assert "shrunk Hypothesis example (seed 0, profile ci)" in page
    assert hyp["example"] in page and hyp["reproduce"] in page
    assert f"replay: {nested_run['replay']}" in page.replace("<code>", "").replace("</code>", "")


def test_markdown_shows_the_example_the_replay_command_and_the_reproduce_line(nested_run):
    md, hyp = nested_run["md"], nested_run["doc"]["cards"][0]["witnesses"][0]["hypothesis"]
    assert "prop(" in md and "a=" in md
    assert f"replay: `{nested_run['replay']}`" in md
    assert f"reproduce: `{hyp['reproduce']}`" in md


def _noted(exc: BaseException, *notes: str) -> BaseException:
    for note in notes:
        exc.add_note(note)
    return exc


REPRODUCE = "@reproduce_failure('6.170.17', b'AEED')"


@pytest.mark.parametrize(
    "exc,example,reproduce",
    [
        (
            _noted(
                AssertionError("x"),
                "Failing test case: prop(\n    n=3,\n)",
                f"\nYou can reproduce this test case by temporarily adding {REPRODUCE} as a decorator on your test",
            ),
            "Failing test case: prop(\n    n=3,\n)",
            REPRODUCE,
        ),
        (_noted(KeyError(3), "Falsifying example: prop(n=3)"), "Falsifying example: prop(n=3)", ""),  # older wording
        (
            ExceptionGroup(
                "Hypothesis found 2 distinct failures",
                [
                    _noted(KeyError(3), "Falsifying example: prop(n=3)", f"adding {REPRODUCE} as"),
                    _noted(AssertionError(), "Falsifying example: prop(n=1)"),
                ],
            ),
            "Falsifying example: prop(n=3)\n\nFalsifying example: prop(n=1)",
            REPRODUCE,
        ),
    ],
)
def test_hypothesis_failure_is_read_from_the_notes_on_the_exception_or_its_group(exc, example, reproduce):
    from harness.plugin import _hypothesis_failure

    got = _hypothesis_failure(exc)
    assert {k: got[k] for k in ("example", "reproduce")} == {"example": example, "reproduce": reproduce}


def test_an_exception_without_a_falsifying_example_note_is_not_a_hypothesis_failure():
    from harness.plugin import _hypothesis_failure

    assert _hypothesis_failure(_noted(AssertionError("x"), "some other note")) is None
