"""The mutation section of every report format: per-card score, survivors with diffs, the project's claims.

Each test starts from the stored fixture run (tests/fixtures/report-data/
mixed-verdicts.json) and puts a hand-made :class:`MutationResult` on some
cards and :class:`Claim` rows on the document, then renders it through the
one view (:func:`harness.report.view.build_view`) as HTML, Markdown and
terminal text. A document without mutation data must render as before:
the gold files of tests/harness/report/test_report.py hold that byte for byte.
"""

from __future__ import annotations

import dataclasses
import html as htmllib
import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from harness.record.document import Claim, MutantResult, MutationResult, RunDocument
from harness.report import html, markdown, terminal
from harness.report.view import build_view, mutation_view, percent
from harness.statuses import MutantStatus, Verdict

HERE = Path(__file__).resolve().parents[2]  # tests/
FIXTURE_DOC = HERE / "fixtures" / "report-data" / "mixed-verdicts.json"
PROJECT = HERE / "fixtures" / "project"

SURVIVOR_DIFF = (
    "--- a/fakeimpl/arith.py\n+++ b/fakeimpl/arith.py\n@@ -4,2 +4,2 @@\n def add(a, b):\n"
    "-    return a + b\n+    return a - b\n"
)
RING_DIFF = (
    "--- a/fakeimpl/arith.py\n+++ b/fakeimpl/arith.py\n@@ -11,1 +11,1 @@\n"
    "-        out = add(out, x)\n+        out = add(out, x) if x < 3 else out\n"
)
EQUIVALENT_REASON = "the accumulator starts at 0 either way: <no input> tells them apart"


def mutant(key: str, status: MutantStatus, **kw) -> MutantResult:
    path, line = key.split(":")[:2]
    fields = {
        "qualname": "add",
        "operator": key.split(":")[3].split("#")[0],
        "change": "a + b -> a - b",
        "killer": "",
        "detail": "",
        "duration_s": 0.4,
        "diff": "",
        "reused_from": None,
        **kw,
    }
    return MutantResult(key=key, path=path, line=int(line), status=status, **fields)


MUTANTS = (
    mutant("fakeimpl/arith.py:5:11:binop", MutantStatus.SURVIVED, diff=SURVIVOR_DIFF),
    mutant(
        "fakeimpl/arith.py:11:14:guard",
        MutantStatus.SURVIVED,
        qualname="total",
        diff=RING_DIFF,
        change="out = add(out, x) -> out = add(out, x) if x < 3 else out",
        reused_from=4,
    ),
    mutant(
        "fakeimpl/arith.py:9:10:const",
        MutantStatus.EQUIVALENT,
        qualname="total",
        change="0 -> 0.0",
        detail=EQUIVALENT_REASON,
        diff="-    out = 0\n+    out = 0.0\n",
    ),
    mutant("fakeimpl/arith.py:5:11:binop#2", MutantStatus.KILLED, change="a + b -> a * b", killer="exact-ints"),
    mutant("fakeimpl/arith.py:5:11:binop#3", MutantStatus.KILLED, change="a + b -> a | b", killer="exact-floats"),
    mutant(
        "fakeimpl/arith.py:12:11:return",
        MutantStatus.TIMEOUT,
        qualname="total",
        change="return out -> loop",
        killer="exact-ints",
        detail="ran past 12.0 s",
    ),
    mutant(
        "fakeimpl/arith.py:22:8:augassign",
        MutantStatus.ERROR,
        qualname="Acc.push",
        change="+= -> -=",
        killer="collection",
        detail="SyntaxError: the function changed since the key was made",
    ),
)

MUTATION = MutationResult(
    score=0.6,
    min_score=0.9,
    holds=False,
    killed=2,
    survived=2,
    timeout=1,
    equivalent=1,
    error=1,
    candidates=23,
    seed=1234,
    max_mutants=7,
    functions=("fakeimpl/arith.py::add", "fakeimpl/arith.py::total"),
    mutants=MUTANTS,
    measured_run=None,
    measured_at="2026-11-30T09:10:11Z",
    stale=False,
    previous_score=0.55,
    bound_digest="d" * 64,
)

STALE = MutationResult(
    score=1.0,
    min_score=0.9,
    holds=None,
    killed=1,
    survived=0,
    timeout=0,
    equivalent=0,
    error=0,
    candidates=4,
    seed=0,
    max_mutants=None,
    functions=("fakeimpl/arith.py::add",),
    mutants=(mutant("fakeimpl/arith.py:5:11:binop#2", MutantStatus.KILLED, killer="weak"),),
    measured_run=7,
    measured_at="2026-11-28T08:00:00Z",
    stale=True,
    previous_score=None,
    bound_digest="e" * 64,
)

CLAIMS = (
    Claim("fakeimpl/arith.py", "add", ("FX-ADD", "FX-WEAK"), 5, 1),
    Claim("fakeimpl/arith.py", "total", ("FX-ADD",), 3, 1),
    Claim("fakeimpl/arith.py", "Acc.push", ("FX-ADD",), 1, 0),
    Claim("fakeimpl/arith.py", "Acc.__init__", (), 0, 0),
    Claim("fakeimpl/text.py", "shout", (), 0, 0),
)

REASON = (
    "mutation score 0.60 < min_score 0.90: 2 of 5 mutants of the code it claims pass every witness; "
    "e.g. fakeimpl/arith.py:5 add: a + b -> a - b"
)


def plain_doc() -> RunDocument:
    return RunDocument.from_json(json.loads(FIXTURE_DOC.read_text(encoding="utf-8")))


def mutated_doc() -> RunDocument:
    """FX-ADD measured in this run (below its floor: VACUOUS), FX-WEAK with a stale score, the claims table."""
    doc = plain_doc()
    cards = []
    for c in doc.cards:
        if c.id == "FX-ADD":
            c = dataclasses.replace(c, verdict=Verdict.VACUOUS, reason=REASON, mutation=MUTATION)
        elif c.id == "FX-WEAK":
            c = dataclasses.replace(c, mutation=STALE)
        cards.append(c)
    return dataclasses.replace(doc, cards=tuple(cards), claims=CLAIMS)


@pytest.fixture(scope="module")
def view() -> dict:
    return build_view(mutated_doc(), root=PROJECT, report_dir="2026-11-30T09-00-00Z")


def as_json(m: MutationResult) -> dict:
    """A mutation result in the form the view reads: the card document's JSON."""
    return dataclasses.replace(plain_doc().cards[0], mutation=m).to_json()["mutation"]


def term(view: dict) -> str:
    buf = io.StringIO()
    terminal.render_run(Console(file=buf, width=200, color_system=None, highlight=False), view)
    return buf.getvalue()


def section(page: str, anchor: str) -> str:
    start = page.index(f'id="{anchor}"')
    return page[start : page.index("</section>", start)]


# ---------------------------------------------------------------- the view


def test_view_decides_every_mutation_text_once():
    m = mutation_view(as_json(MUTATION))
    assert m["score_text"] == "60%" and m["cell"] == "60% (1 of 7 error) < 90%"  # errors beside the score
    assert m["counts"] == "2 killed, 1 timeout, 2 survived, 1 equivalent, 1 error"
    assert m["sampled"] == "of 23 candidates (sampled 7, at most 7, seed 1234)"
    assert m["floor"] == "below its min_score 90%"
    assert m["delta"] == "+0.05 since the last mutate run (was 55%)"
    assert m["measured"] == "" and m["stale_text"] == ""  # measured in this run
    assert [x["key"] for x in m["survived"]] == ["fakeimpl/arith.py:5:11:binop", "fakeimpl/arith.py:11:14:guard"]
    assert [x["status"] for x in m["detected"]] == ["killed", "killed", "timeout"]
    assert m["survived"][0]["location"] == "fakeimpl/arith.py:5"
    assert {d["kind"] for d in m["survived"][0]["diff_lines"]} == {"hunk", "ctx", "add", "del"}
    assert m["reused"] == "1 result(s) reused from earlier runs (bound files unchanged)"
    assert (percent(0.899), percent(5 / 7), percent(None)) == ("89.9%", "71.4%", "—")  # never "90% < 90%"


def test_view_of_a_stale_score_says_so_and_does_not_judge_it(view):
    weak = next(c for c in view["cards"] if c["id"] == "FX-WEAK")["mutation"]
    assert weak["cell"] == "stale"
    assert weak["stale_text"] == (
        "stale (measured on other bytes, run #7 at 2026-11-28 08:00:00 UTC): not used by the verdict"
    )
    assert weak["floor"] == "min_score 90%: not judged (stale)"
    assert weak["sampled"] == "of 4 candidates (sampled 1, seed 0)"
    recalled = mutation_view(as_json(dataclasses.replace(STALE, stale=False, holds=True)))
    assert recalled["measured"] == "measured in run #7 (2026-11-28 08:00:00 UTC)" and recalled["cell"] == "100%"
    assert recalled["floor"] == "meets its min_score 90%" and recalled["stale_text"] == ""


def test_view_claims_split_unclaimed_and_surviving(view):
    claims = view["claims"]
    assert claims["summary"] == "2 of 5 functions of the implementation are claimed by no card"
    assert [r["name"] for r in claims["unclaimed"]] == ["fakeimpl/arith.py::Acc.__init__", "fakeimpl/text.py::shout"]
    assert [(r["name"], r["cards_text"], r["mutants"], r["survived"]) for r in claims["surviving"]] == [
        ("fakeimpl/arith.py::add", "FX-ADD, FX-WEAK", 5, 1),
        ("fakeimpl/arith.py::total", "FX-ADD", 3, 1),
    ]
    assert view["summary"]["mutation"] is True


# ---------------------------------------------------------------- HTML


def test_html_card_shows_score_survivors_with_diffs_equivalents_errors_and_killed(view):
    page = html.render(view)
    block = section(page, "card-FX-ADD")
    text = htmllib.unescape(re.sub(r"<[^>]+>", "", block))
    assert "60% of the scored mutants detected" in text
    assert "2 killed, 1 timeout, 2 survived, 1 equivalent, 1 error" in text
    assert "of 23 candidates (sampled 7, at most 7, seed 1234)" in text
    assert "below its min_score 90%" in text and "+0.05 since the last mutate run" in text
    for key in ("fakeimpl/arith.py:5:11:binop", "fakeimpl/arith.py:11:14:guard"):
        assert key in text
    assert '<pre class="diff">' in block and '<span class="d-del">-    return a + b</span>' in block
    assert '<span class="d-add">+        out = add(out, x) if x &lt; 3 else out</span>' in block  # escaped
    assert EQUIVALENT_REASON in text and "&lt;no input&gt;" in block  # the reason, shown and escaped
    assert "SyntaxError: the function changed since the key was made" in text
    detected = block[block.index("<details><summary>3 detected (killed or timed out)</summary>") :]
    assert "exact-floats" in detected and "a + b -&gt; a | b" in detected
    assert "reused from run #4" in text
    assert REASON in text  # the VACUOUS reason from the verdict


def test_html_stale_note_index_column_and_claims_tables(view):
    page = html.render(view)
    weak = htmllib.unescape(section(page, "card-FX-WEAK"))
    assert "stale (measured on other bytes, run #7 at 2026-11-28 08:00:00 UTC): not used by the verdict" in weak
    index = page[page.index('<table class="index">') : page.index("</table>", page.index('<table class="index">'))]
    assert '<th class="num">mutation</th>' in index
    assert "60% (1 of 7 error) &lt; 90%</a>" in index and ">stale</a>" in index and '<td class="num">—</td>' in index
    claims = htmllib.unescape(section(page, "unclaimed"))
    assert "What no theorem constrains" in claims
    assert "2 of 5 functions of the implementation are claimed by no card" in claims
    assert "Acc.__init__" in claims and "shout" in claims
    assert re.search(
        r"fakeimpl/arith.py::add</td><td>.*FX-ADD.*FX-WEAK.*</td><td class=\"num\">5</td>"
        r"<td class=\"num bad\">1</td>",
        claims,
    )
    assert 'href="#card-FX-WEAK-mutation"' in section(page, "unclaimed")
    assert 'id="card-FX-WEAK-mutation"' in page
    assert not re.search(r"<script|<link|@import|url\(", page, re.I)  # still self-contained


# ---------------------------------------------------------------- Markdown


def test_markdown_has_mutation_column_sections_diff_blocks_and_claims(view):
    md = markdown.render(view)
    lines = md.splitlines()
    assert lines[
        lines.index(
            "| card | title | regime | verdict | date | headline | witnesses | controls | liars | time | mutation |"
        )
        + 1
    ].endswith("--:|--:|")
    add_row = next(ln for ln in lines if ln.startswith("| FX-ADD "))
    assert add_row.endswith("| 60% (1 of 7 error) &lt; 90% |") and add_row.count(" | ") == 10
    assert next(ln for ln in lines if ln.startswith("| FX-WEAK ")).endswith("| stale |")
    assert next(ln for ln in lines if ln.startswith("| FX-LOOSE ")).endswith("| — |")
    assert "### FX-ADD: mutation score 60%" in md
    assert (
        "```diff\n--- a/fakeimpl/arith.py\n+++ b/fakeimpl/arith.py\n@@ -4,2 +4,2 @@\n def add(a, b):\n"
        "-    return a + b\n+    return a - b\n```" in md
    )
    assert "+        out = add(out, x) if x < 3 else out" in md  # raw inside the fence
    assert "`fakeimpl/arith.py:5:11:binop` fakeimpl/arith.py:5 `add`: `a + b -> a - b`" in md
    assert "the accumulator starts at 0 either way: &lt;no input> tells them apart" in md
    assert "SyntaxError: the function changed since the key was made" in md
    assert "| `fakeimpl/arith.py:5:11:binop#3` | `a + b -> a \\| b` | killed | exact-floats |" in md
    assert "> stale (measured on other bytes, run #7 at 2026-11-28 08:00:00 UTC): not used by the verdict" in md
    assert "## What no theorem constrains" in md
    assert "2 of 5 functions of the implementation are claimed by no card" in md
    assert "| `fakeimpl/text.py` | `shout` |" in md
    assert "| `fakeimpl/arith.py::add` | FX-ADD, FX-WEAK | 5 | 1 |" in md


def test_markdown_fence_outlasts_backticks_in_a_diff():
    doc = mutated_doc()
    tricky = dataclasses.replace(MUTANTS[0], diff="-    s = '```'\n+    s = '````'\n")
    cards = tuple(
        dataclasses.replace(c, mutation=dataclasses.replace(MUTATION, mutants=(tricky,))) if c.id == "FX-ADD" else c
        for c in doc.cards
    )
    md = markdown.render(build_view(dataclasses.replace(doc, cards=cards), root=PROJECT))
    assert "`````diff\n-    s = '```'\n+    s = '````'\n`````" in md


# ---------------------------------------------------------------- terminal


def test_terminal_shows_score_column_survivors_and_claims_line(view):
    out = term(view)
    header = next(ln for ln in out.splitlines() if " verdict " in ln and " time " in ln)
    assert "mutation" in header
    assert "60% (1 of 7 error) < 90%" in out and "stale" in out
    assert (
        "FX-ADD mutation 60%: 2 killed, 1 timeout, 2 survived, 1 equivalent, 1 error · below its min_score 90% "
        "· +0.05 since the last mutate run (was 55%)"
    ) in out
    assert "survived fakeimpl/arith.py:5:11:binop  a + b -> a - b" in out
    assert "survived fakeimpl/arith.py:11:14:guard" in out
    assert "FX-WEAK mutation 100%: 1 killed" in out and "stale (measured on other bytes, run #7" in out
    assert "what no theorem constrains: 2 of 5 functions of the implementation are claimed by no card" in out
    assert "--- a/fakeimpl" not in out  # no diffs in the terminal
    assert out.rstrip().splitlines()[-1].startswith("gate FAIL")


def test_terminal_caps_the_survivors_of_a_card():
    many = tuple(dataclasses.replace(MUTANTS[0], key=f"fakeimpl/arith.py:5:11:binop#{i}") for i in range(9))
    m = mutation_view(as_json(dataclasses.replace(MUTATION, mutants=many, survived=9)))
    buf = io.StringIO()
    terminal.render_mutation(Console(file=buf, width=200, color_system=None), "FX-ADD", m)
    out = buf.getvalue()
    assert out.count("    survived ") == terminal.SURVIVORS_SHOWN and "… 4 more survivor(s): see index.html" in out


def test_show_prints_the_last_mutation_score():
    card = next(c for c in mutated_doc().cards if c.id == "FX-ADD")
    last = {"run_started": "2026-11-30T09:00:00Z", **card.to_json()}

    class Shown:  # the fields render_card reads of a Card
        id, title, regime, version, display_path, module = "FX-ADD", "add", "N", 1, "cards-mixed/FX-ADD.yaml", "m"
        theorem = proof = "p"
        refs, covers, requires, all_witnesses, liars, notes, tags = ("r",), ("c",), (), (), (), "", ()

    buf = io.StringIO()
    terminal.render_card(Console(file=buf, width=200, color_system=None), Shown(), last, "")
    out = buf.getvalue()
    assert "FX-ADD mutation 60%: 2 killed" in out and "survived fakeimpl/arith.py:5:11:binop" in out


# ---------------------------------------------------------------- without mutation data


def test_a_document_without_mutation_renders_no_mutation_section():
    view = build_view(plain_doc(), root=PROJECT)
    assert view["claims"] is None and view["summary"]["mutation"] is False
    assert all(c["mutation"] is None for c in view["cards"])
    page, md, out = html.render(view), markdown.render(view), term(view)
    for text in (page, md, out):
        assert "mutation" not in text.lower() and "no theorem constrains" not in text
    assert (
        "| card | title | regime | verdict | date | headline | witnesses | controls | liars | time |\n"
        "|---|---|:-:|---|---|---|--:|--:|--:|--:|\n" in md
    )
    # a claims table alone (a mutate run whose cards all errored) still renders, without the column
    claims_only = build_view(dataclasses.replace(plain_doc(), claims=CLAIMS), root=PROJECT)
    assert "What no theorem constrains" in html.render(claims_only)
    assert "| time | mutation |" not in markdown.render(claims_only)
