"""A FAILED witness's failure, readable in every format (issue 37, "Failures are hard to read").

Rendered from a constructed verdicts document (the stored mixed run, its FX-FALSIFIED witness given a long
shrunk example, a numbered-steps check, a data.draw, Hypothesis' explanation and a reproduction script):

- the terminal shows the check (one step a line), the example, the draws by label and the explanation, never
  cut (wrapped at a narrow width), in a block after the table;
- index.html opens the block, the check first, then the draws in a table instead of ``data=data(...)``, the
  explanation, the full failure text; the reproduction is linked when it is inside the report folder;
- verdicts.md and junit.xml carry the same parts;
- a FAILED card's headline is what failed, never a measure that held.
"""

from __future__ import annotations

import copy
import html as htmllib
import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console
from test_report import PROJECT, load_doc

from harness.plugin import _hypothesis_failure
from harness.project import command
from harness.record.document import RunDocument
from harness.report import html, junit, markdown, terminal
from harness.report.view import build_view, failure_check, reproduction_view
from harness.wording import NOT_JUDGED, check_parts, short_check

STEPS = [
    "append of 3 to handle 0",
    "fork of handle 0 (handle 1)",
    "truncate(2) of handle 0",
    "append of 4 to handle 0",
    "reorder([0, 0, 1]) of handle 1",
]
TAIL = (
    "paged: handle 1: the rows held: K at positions 0..4: 2 of 40 values differ; first at (0, 1, 0, 3, 1): "
    "0.5, expected 1.25"
)
CHECK = "after the steps " + "; ".join(f"{k}. {s}" for k, s in enumerate(STEPS, 1)) + ": " + TAIL
EXPLANATION = "The test always failed when commented parts were varied together."
LONG = "n_layers=2, n_kv_heads=2, head_dim=4, block_size=16, n_blocks=64, dtype='float32', name='" + "x" * 90 + "'"
EXAMPLE_LINES = [
    "Failing test case: prop(",
    f"    # {EXPLANATION}",
    f"    g=KVGeometry({LONG}),  # or any other generated value",
    "    batch=3,",
    "    seed=12345,  # or any other generated value",
    "    program=4242424242,",
    "    data=data(...),",
    ")",
]
EXAMPLE = "\n".join(EXAMPLE_LINES)
REPLAY = command("run FX-FALSIFIED --cards cards-mixed --profile ci --seed 0", at=Path("/project"))  # the doc's root


def _failed_doc(reproduction: str) -> dict:
    """The stored mixed run, its FX-FALSIFIED witness failed with a long example: its check in the numbered-steps
    form, a data.draw labelled window, Hypothesis' explanation, a reproduction script and an examples count the
    witness stopped short of (not judged); a second witness passed with max|Δ| = 0 (≤ 0)."""
    doc = load_doc()
    card = next(c for c in doc["cards"] if c["id"] == "FX-FALSIFIED")
    w = card["witnesses"][0]
    node = w["nodes"][0]["nodeid"]
    w["message"] = "AssertionError: " + CHECK[:120]  # the one-line message is cut; the check is whole
    w["evidence"] = {"examples": 7, "reproduction": reproduction}
    w["bounds"] = [
        {"key": "examples", "op": "ge", "limit": 10, "actual": 7, "holds": None, "node": node, "detail": NOT_JUDGED}
    ]
    w["hypothesis"] = {
        **w["hypothesis"],
        "profile": "ci",
        "example": EXAMPLE,
        "check": CHECK,
        "draws": [{"draw": 1, "label": "window", "value": "3", "comment": ""}],
        "explanation": [EXPLANATION, "These lines were always and only run by failing test cases:", "    x.py:4"],
        "replay": REPLAY,
    }
    passing = copy.deepcopy(w)
    passing.update(
        id="exact",
        status="passed",
        why="",
        message="",
        location="",
        failure="",
        hypothesis=None,
        evidence={"max_abs_delta": 0.0},
        nodes=[{"nodeid": "witnesses/test_arith.py::test_exact", "outcome": "passed", "duration_s": 0.1}],
        bounds=[
            {"key": "max_abs_delta", "op": "le", "limit": 0, "actual": 0.0, "holds": True, "node": "", "detail": ""}
        ],
    )
    card["witnesses"].insert(0, passing)
    card["headline"] = {  # what the document's own headline picks: the first bounded delta, which held
        "key": "max_abs_delta",
        "value": 0.0,
        "text": "max|Δ| = 0.000e+00 (≤ 0)",
        "witness": "exact",
        "op": "le",
        "limit": 0,
        "holds": True,
    }
    return doc


@pytest.fixture()
def report(tmp_path) -> dict:
    folder = tmp_path / "reports" / "2026-01-03T10-00-00Z"
    doc = _failed_doc(str(folder / "repro" / "paged" / "test_handles.py"))
    view = build_view(RunDocument.from_json(doc), {}, root=PROJECT, report_dir=folder.name, report_path=folder)
    return {"view": view, "card": next(c for c in view["cards"] if c["id"] == "FX-FALSIFIED"), "folder": folder}


def _terminal(view: dict, width: int) -> str:
    buf = io.StringIO()
    terminal.render_run(Console(file=buf, width=width, color_system=None, highlight=False), view)
    return buf.getvalue()


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.mark.parametrize("width", [80, 200])
def test_terminal_shows_the_whole_check_example_draws_and_explanation_wrapped_never_cut(report, width):
    out = _terminal(report["view"], width)
    block = out[out.index("witness is-sub failed: witnesses/") :]
    squeezed = _squeezed(block)
    for step_no, step in enumerate(STEPS, 1):  # one step a line
        assert re.search(rf"^\s+{step_no}\. {re.escape(step[:20])}", block, re.M), block
    assert _squeezed(TAIL) in squeezed  # the check after its steps, whole
    for line in EXAMPLE_LINES:  # every argument, the long one too (wrapped, not cut)
        if line.strip() not in ("data=data(...),", f"# {EXPLANATION}"):
            assert _squeezed(line) in squeezed, line
    assert "data=data(...)" not in block  # the draw is listed by its label instead
    assert re.search(r"draws:\s+window: 3", block)
    assert _squeezed(EXPLANATION) in squeezed and "…" not in block and "..." not in block.replace("data(...)", "")
    assert "reproduction:" in block and _squeezed(str(report["folder"] / "repro/paged/test_handles.py")) in squeezed
    assert "replay:" in block and _squeezed(REPLAY) in squeezed
    order = [block.index(s) for s in ("check:", "example:", "draws:", "explained:", "replay:", "reproduction:")]
    assert order == sorted(order)


def test_terminal_keeps_the_failure_blocks_after_the_table_and_only_for_failures(report):
    out = _terminal(report["view"], 160)
    table_end = out.index("└")
    assert out.index("witness is-sub failed: witnesses/") > table_end
    assert out.count(" failed: witnesses/") == 3  # FX-FALSIFIED's witness, FX-LOOSE's, FX-NOCONTROL's control
    assert "witness exact" not in out  # a witness that passed gets no block
    assert "Failing test case: test_add" not in out  # the document's cut detail line is not printed beside it


def test_html_opens_the_failure_check_first_then_draws_table_explanation_and_full_text(report):
    page = html.render(report["view"])
    start = page.index('<details class="failure" open>\n    <summary><b>witness is-sub: failed</b>')
    block = page[start : page.index("</details>\n  <details><summary>bound to", start)]
    text = htmllib.unescape(block)
    assert [text.index(s) for s in ("failing check", "shrunk Hypothesis example", "data.draw", EXPLANATION)] == sorted(
        text.index(s) for s in ("failing check", "shrunk Hypothesis example", "data.draw", EXPLANATION)
    )
    assert text.index(EXPLANATION) < text.index("full failure text")
    assert [f"<li>{s}</li>" for s in STEPS] == re.findall(r"<li>[^<]*</li>", text)
    assert TAIL in text
    assert '<table class="draws">' in block and '<td class="mono">window</td><td class="mono">3</td>' in block
    example = re.search(r"shrunk Hypothesis example \(seed 0, profile ci\):</div>\s*<pre>(.*?)</pre>", text, re.S)
    assert "data=data(...)" not in example.group(1) and LONG in example.group(1)
    assert '<a href="repro/paged/test_handles.py"><code>' in block


def test_html_shows_a_reproduction_outside_the_report_folder_as_text(tmp_path):
    outside = "/elsewhere/repro.py"
    folder = tmp_path / "2026-01-03T10-00-00Z"
    view = build_view(RunDocument.from_json(_failed_doc(outside)), {}, root=PROJECT, report_path=folder)
    page = html.render(view)
    assert f"reproduction: <code>{outside}</code>" in page and f'href="{outside}"' not in page


def test_a_relative_reproduction_is_the_report_folders(tmp_path):
    folder = tmp_path / "2026-01-03T10-00-00Z"
    rel = "repro/toycache/test_every_live_handle_agrees_after_every_step.py"
    assert reproduction_view(rel, folder) == {"path": rel, "shown": str(folder / rel), "href": rel}
    assert reproduction_view(rel, None)["shown"] == f"{rel} (in the report folder)"  # the terminal's, before it
    assert reproduction_view("../elsewhere/x.py", folder)["href"] == ""
    assert reproduction_view(str(folder / "repro" / "a b.py"), folder)["href"] == "repro/a%20b.py"
    view = build_view(RunDocument.from_json(_failed_doc(rel)), {}, root=PROJECT)
    out = _terminal(view, 200)
    assert re.search(rf"reproduction:\s+{re.escape(rel)} \(in the report folder\)", out)
    page = html.render(build_view(RunDocument.from_json(_failed_doc(rel)), {}, root=PROJECT, report_path=folder))
    assert f'<a href="{rel}"><code>{rel}</code></a>' in page


def test_markdown_and_junit_carry_the_check_steps_example_draws_and_reproduction(report):
    md = markdown.render(report["view"])
    assert "  - witness `is-sub` failing check at witnesses/test_arith.py:48:" in md
    for k, step in enumerate(STEPS, 1):
        assert f"      {k}. {step}\n" in md
    assert f"    {TAIL}\n" in md and f"        g=KVGeometry({LONG})" in md
    assert "    | `window` | `3` |" in md and EXPLANATION in md and "data=data(...)" not in md
    assert "reproduction: `" in md and "repro/paged/test_handles.py`" in md
    body = ET.fromstring(junit.render(report["view"])).find(".//testcase[@name='FX-FALSIFIED']/failure").text
    for needle in (
        *(f"  {k}. {s}" for k, s in enumerate(STEPS, 1)),
        TAIL,
        LONG,
        "data.draw:\n  window: 3",
        EXPLANATION,
    ):
        assert needle in body, needle
    assert "reproduction: " in body and body.index("failing check") < body.index("shrunk Hypothesis example")


def test_the_headline_of_a_failed_card_is_what_failed_never_a_measure_that_held(report):
    view, card = report["view"], report["card"]
    assert card["measured_headline"]["text"] == "max|Δ| = 0.000e+00 (≤ 0)"  # the document's, kept for its trend
    assert card["headline"]["text"] == f"is-sub: {short_check(CHECK)}"
    assert (
        card["headline"]["text"].startswith("is-sub: paged: handle 1: the rows held")
        and card["headline"]["holds"] is False
    )
    loose = next(c for c in view["cards"] if c["id"] == "FX-LOOSE")
    nocontrol = next(c for c in view["cards"] if c["id"] == "FX-NOCONTROL")
    assert loose["headline"]["text"] == "max|Δ| = 1.000e-03 (≤ 0)"  # the bound it broke
    assert nocontrol["headline"]["text"] == "max|Δ| = 0.000e+00 (> 0)"  # a control's, too
    proven = next(c for c in view["cards"] if c["id"] == "FX-ADD")
    assert proven["headline"] == proven["measured_headline"]  # a PROVEN card keeps its measure
    row = next(ln for ln in _terminal(view, 220).splitlines() if "FX-FALSIFIED" in ln)
    assert "is-sub: paged: handle 1" in row and "max|Δ| = 0" not in row
    assert "| is-sub: paged: handle 1: the rows held" in markdown.render(view)


def test_a_check_not_judged_reads_as_such_never_as_a_failure(report):
    (check,) = [c for w in report["card"]["witnesses"] if w["id"] == "is-sub" for c in w["checks"]]
    assert check == {
        "text": f"examples = 7 (≥ 10): {NOT_JUDGED}",
        "holds": None,
        "judged": False,
        "node": "",
    }
    assert "examples = 7" not in report["card"]["headline"]["text"]
    page = htmllib.unescape(html.render(report["view"]))
    assert f'<div class="muted">– examples = 7 (≥ 10): {NOT_JUDGED}' in page  # neither ✓ nor ✗
    body = ET.fromstring(junit.render(report["view"])).find(".//testcase[@name='FX-FALSIFIED']/system-out").text
    assert f"[examples = 7 (≥ 10): {NOT_JUDGED}]" in body


# ---------------------------------------------------------------- the parts


def test_check_parts_cuts_the_numbered_steps_one_a_line():
    parts = check_parts(CHECK)
    assert (parts["head"], parts["steps"], parts["tail"]) == ("after the steps", STEPS, TAIL)
    then = check_parts("after the steps 1. a; 2. b; then fork of handle 2: len 3, expected 2")
    assert (then["steps"], then["tail"]) == (["a", "b"], "then fork of handle 2: len 3, expected 2")
    plain = check_parts("expected 1. got 2\nsecond line")  # no "; 2. ": not the steps form
    assert (plain["head"], plain["steps"], plain["rest"]) == ("expected 1. got 2", [], ["second line"])


def test_short_check_keeps_whole_clauses():
    assert short_check("AssertionError: " + CHECK) == "paged: handle 1: the rows held …"
    assert short_check("len 3, expected 2") == "len 3, expected 2"


def test_failure_check_reads_pytests_exception_lines_without_the_hypothesis_notes():
    failure = (
        "    def test():\n>       assert x == 2, msg\nE       AssertionError: first line\nE         second line\n"
        "E       Failing test case: prop(\nE           n=1,\nE       )\n\nx.py:3: AssertionError"
    )
    assert failure_check(failure) == "first line\n  second line"
    assert failure_check("no exception lines") == ""


def test_hypothesis_failure_keeps_the_check_draws_explanation_and_notes():
    exc = AssertionError(CHECK)
    for note in [
        EXAMPLE,
        "Draw 1 (window): 3",
        "Draw 2: [1,\n 2]  # or any other generated value",
        "Explanation:",
        "    These lines were always and only run by failing test cases:",
        "        /x/cache.py:41",
        "\nYou can reproduce this test case by temporarily adding @reproduce_failure('6.1', b'AA') as a decorator",
        "noted by the test",
    ]:
        exc.add_note(note)
    found = _hypothesis_failure(exc)
    assert found["example"] == EXAMPLE and found["reproduce"] == "@reproduce_failure('6.1', b'AA')"
    assert found["check"] == CHECK  # whole, without the notes
    assert found["draws"] == [
        {"draw": 1, "label": "window", "value": "3", "comment": ""},
        {"draw": 2, "label": "", "value": "[1,\n 2]", "comment": "or any other generated value"},
    ]
    assert found["explanation"] == [
        EXPLANATION,
        "These lines were always and only run by failing test cases:",
        "    /x/cache.py:41",
    ]
    assert found["notes"] == ["noted by the test"]


def test_hypothesis_failure_of_a_group_takes_the_check_of_its_first_failure():
    first, second = AssertionError("first check"), KeyError(3)
    first.add_note("Falsifying example: prop(n=1)")
    second.add_note("Falsifying example: prop(n=3)")
    found = _hypothesis_failure(ExceptionGroup("Hypothesis found 2 distinct failures", [first, second]))
    assert found["check"] == "first check"
    assert found["example"] == "Falsifying example: prop(n=1)\n\nFalsifying example: prop(n=3)"
