"""`validate` in one pass (issue 38): every problem of every card at once, each with its line, and no card that
still carries `kvproof new`'s placeholders (TODO, `refs: []`) is taken for a claim.

A schema problem (a misspelt field, a bad enum) must not hide the checks that can still run on the rest of the
card (refs, test nodes, liars, covers, bounds, paths, placeholders); a placeholder is matched as the whole word
TODO, in capitals, in the fields that state the claim, so prose that says "todo" or "TODOs" is left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.liars import scan
from harness.select.cards import load_cards
from harness.select.problems import PLACEHOLDER
from harness.select.scaffold import init_project, scaffold

REPO = Path(__file__).resolve().parents[3]
ROOT = REPO / "tests" / "fixtures" / "project"

from test_cards import GOOD  # noqa: E402 (the same good card the loader tests start from)


def _edit(old: str, new: str, base: str = GOOD) -> str:
    assert old in base, old
    return base.replace(old, new, 1)


def _load(folder: Path, *texts: str, root: Path = ROOT):
    folder.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        (folder / f"card{i}.yaml").write_text(text)
    return load_cards(folder, root, scan(root)[0])


def _line(text: str, needle: str) -> int:
    """1-based line of the first line of ``text`` holding ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _found(problems, field: str, fragment: str):
    hits = [p for p in problems if p.field == field and fragment in p.message]
    assert hits, f"expected {field!r} ~ {fragment!r}, got:\n" + "\n".join(map(str, problems))
    return hits[0]


# ---------------------------------------------------------------- several problems at once

MANY = """\
id: FX-MANY
title: TODO one line saying what is claimed
module: fakeimpl.arith
regime: X
theorem: add(a, b) == a + b.
proof: >
  TODO: why it holds.
refs: [fakeimpl/arith.py::ad, ../outside.py::add]
witnesses:
  - id: exact
    test: witnesses/test_arith.py::test_add_exat
    bounds: {max_abs_delta: {le: .nan}}
  - id: exact
    test: witnesses/test_arith.py::test_add_exact
    bound: {max_abs_delta: {le: 0}}
  - id: loose
    test: witnesses/test_arith.py::test_add_commutes
    bounds: {max_abs_delta: {le: 1.0e-3}}
covers: [fakeimpl/gone.py]
liers: [arith.off_by_one]
liars: [arith.of_by_one]
version: 1
"""

# (field, message fragment, the text on the line it must name)
MANY_EXPECTED = [
    ("title", "placeholder text", "title: TODO"),
    ("regime", "allowed: N, A, C, D", "regime: X"),
    ("proof", "placeholder text", "proof: >"),
    ("refs[0]", "did you mean `add`?", "refs:"),
    ("refs[1]", "leaves the project root", "refs:"),
    ("witnesses[0].test", "did you mean `test_add_exact`?", "test_add_exat"),
    ("witnesses[0].bounds.max_abs_delta.le", "finite", "le: .nan"),
    ("witnesses[1].id", "duplicate witness id", "  - id: exact\n    test: witnesses/test_arith.py::test_add_exact"),
    ("witnesses[1].bound", "did you mean `bounds`?", "bound: {"),
    ("witnesses[2].bounds.max_abs_delta.le", "needs a reason", "le: 1.0e-3"),
    ("covers[0]", "no such file", "covers:"),
    ("liers", "did you mean `liars`?", "liers:"),
    ("liars[0]", "did you mean `arith.off_by_one`?", "liars: [arith.of"),
]


def _line_of(text: str, needle: str) -> int:
    if "\n" in needle:  # a block that says which of two alike lines: the line it starts on
        return text[: text.index(needle)].count("\n") + 1
    return _line(text, needle)


def test_every_problem_of_a_card_is_reported_in_one_pass_with_its_line(tmp_path):
    result = _load(tmp_path / "cards", MANY)
    assert result.cards == ()
    for field, fragment, needle in MANY_EXPECTED:
        problem = _found(result.problems, field, fragment)
        assert problem.line == _line_of(MANY, needle), str(problem)
        assert problem.kind == "load", str(problem)  # the card does not load: nothing of it runs
        assert str(problem).startswith(f"{tmp_path / 'cards' / 'card0.yaml'}:{problem.line}: {field}")
    assert len(result.problems) == len(MANY_EXPECTED), "\n".join(map(str, result.problems))
    lines = [p.line for p in result.problems]
    assert lines == sorted(lines)


# a schema problem, and a problem only a later check finds: each pair must be reported together
SCHEMA_BREAKS = [
    ("misspelt-field", ("liars:", "liers: [arith.off_by_one]\nliars:"), "liers", "did you mean `liars`?"),
    ("bad-enum", ("regime: N", "regime: X"), "regime", "allowed: N, A, C, D"),
    ("missing-field", ("module: fakeimpl.arith\n", ""), "module", "missing required field"),
    ("version-text", ("version: 1", "version: '1'"), "version", "expected integer"),
    ("witness-field-misspelt", ("    bounds:", "    bound: {x: {le: 0}}\n    bounds:"), "witnesses[0].bound", "bounds"),
    ("requirement-shape", ("version: 1", "requires: [oracle]\nversion: 1"), "requires[0]", "oracle:NAME"),
]
LATER_CHECKS = [
    ("bad-ref", ("fakeimpl/arith.py::add]", "fakeimpl/arith.py::ad]"), "refs[0]", "did you mean `add`?"),
    ("ref-file-missing", ("fakeimpl/arith.py::add]", "fakeimpl/nope.py::add]"), "refs[0]", "no such file"),
    ("bad-test", ("test_add_exact", "test_add_exat"), "witnesses[0].test", "did you mean `test_add_exact`?"),
    ("unknown-liar", ("liars: [arith.off_by_one]", "liars: [arith.of_by_one]"), "liars[0]", "unknown liar"),
    ("nan-bound", ("{le: 0}", "{le: .nan}"), "witnesses[0].bounds.max_abs_delta.le", "finite"),
    ("inf-bound", ("{le: 0}", "{ge: -.inf}"), "witnesses[0].bounds.max_abs_delta.ge", "finite"),
    ("no-reason", ("{le: 0}", "{le: 1.0e-3}"), "witnesses[0].bounds.max_abs_delta.le", "needs a reason"),
    ("path-out", ("fakeimpl/arith.py::add]", "../x.py::add]"), "refs[0]", "leaves the project root"),
    ("covers-gone", ("version: 1", "covers: [fakeimpl/gone.py]\nversion: 1"), "covers[0]", "no such file"),
    ("placeholder-title", ("title: add is exact", f"title: {PLACEHOLDER} say it"), "title", "placeholder"),
    ("placeholder-theorem", ("theorem: add", f"theorem: {PLACEHOLDER} add"), "theorem", "placeholder"),
    ("empty-refs", ("refs: [fakeimpl/arith.py::add]", "refs: []"), "refs", "lists no symbol"),
    (
        "duplicate-witness-id",
        ("liars:", "controls:\n  - id: exact\n    test: witnesses/test_arith.py::test_add_commutes\nliars:"),
        "controls[0].id",
        "duplicate witness id",
    ),
]


@pytest.mark.parametrize("later", LATER_CHECKS, ids=[c[0] for c in LATER_CHECKS])
@pytest.mark.parametrize("schema", SCHEMA_BREAKS, ids=[c[0] for c in SCHEMA_BREAKS])
def test_a_schema_problem_hides_no_other_problem(tmp_path, schema, later):
    _, (old1, new1), field1, frag1 = schema
    _, (old2, new2), field2, frag2 = later
    text = _edit(old1, new1, _edit(old2, new2))
    result = _load(tmp_path / "cards", text)
    assert result.cards == ()
    for field, fragment in ((field1, frag1), (field2, frag2)):
        problem = _found(result.problems, field, fragment)
        assert problem.line > 0 and problem.kind == "load", str(problem)
    lines = [p.line for p in result.problems]
    assert lines == sorted(lines)


def test_a_value_the_schema_or_the_root_refuses_is_not_resolved_too(tmp_path):
    text = _edit("refs: [fakeimpl/arith.py::add]", "refs: [fakeimpl/arith.py:add, ../fakeimpl/arith.py::nope]")
    text = _edit("test_arith.py::test_add_exact", "test_arith.py:test_add_exact", text)
    result = _load(tmp_path / "cards", text)
    by_field = {}
    for p in result.problems:
        by_field.setdefault(p.field, []).append(p.message)
    assert len(by_field["refs[0]"]) == 1 and "path.py::Name" in by_field["refs[0]"][0]
    assert len(by_field["refs[1]"]) == 1 and "leaves the project root" in by_field["refs[1]"][0]
    assert len(by_field["witnesses[0].test"]) == 1 and "path.py::test_name" in by_field["witnesses[0].test"][0]


def test_every_card_in_the_folder_is_checked(tmp_path):
    one = _edit("FX-GOOD", "FX-ONE", _edit("regime: N", "regime: X", _edit("test_add_exact", "test_nope")))
    two = _edit("FX-GOOD", "FX-TWO", _edit("title: add is exact", f"title: {PLACEHOLDER}"))
    syntax = "id: FX-BROKEN\ntitle: [unclosed\n"
    result = _load(tmp_path / "cards", one, two, syntax, GOOD)
    got = {(Path(p.path).name, p.field, p.line) for p in result.problems}
    assert ("card0.yaml", "regime", 4) in got and ("card0.yaml", "witnesses[0].test", 10) in got
    assert ("card1.yaml", "title", 2) in got
    assert any(name == "card2.yaml" and line == 3 for name, _, line in got), got  # the parser's line
    assert [c.id for c in result.cards] == ["FX-TWO", "FX-GOOD"]


# ---------------------------------------------------------------- placeholders


@pytest.mark.parametrize(
    "old,new,field",
    [
        ("title: add is exact", f"title: {PLACEHOLDER}", "title"),
        ("title: add is exact", f"title: 'add is exact ({PLACEHOLDER}: say for which ints)'", "title"),
        ("theorem: add(a, b) == a + b.", f"theorem: >\n  add(a, b) == a + b.\n  {PLACEHOLDER}: bound it.", "theorem"),
        ("proof: add returns a + b.", f"proof: '{PLACEHOLDER}'", "proof"),
        ("proof: add returns a + b.", f"proof: add returns a + b (#{PLACEHOLDER})", "proof"),
        ("{le: 0}}", f"{{le: 1.0e-3}}}}\n    reason: {PLACEHOLDER}", "witnesses[0].reason"),
        (
            "liars:",
            "controls:\n  - id: differ\n    test: witnesses/test_arith.py::test_different_inputs_differ\n"
            f"    bounds: {{max_abs_delta: {{gt: 0}}}}\n    reason: {PLACEHOLDER} later\nliars:",
            "controls[0].reason",
        ),
    ],
)
def test_placeholder_in_a_claim_field_is_refused_and_the_card_errors(tmp_path, old, new, field):
    text = _edit(old, new)
    result = _load(tmp_path / "cards", text)
    problem = _found(result.problems, field, "placeholder text")
    assert problem.kind == "link" and PLACEHOLDER in problem.value
    assert problem.line == _line(text, field.rsplit(".", 1)[-1].split("[")[0] + ":"), str(problem)
    assert "replace it with" in problem.message and "new`" in problem.message
    # the card loads, and `run` makes it ERROR without running it (harness.plan.planning: link problems)
    assert [c.id for c in result.cards] == ["FX-GOOD"] and problem in result.link_problems("FX-GOOD")


@pytest.mark.parametrize(
    "prose",
    [
        "the todo list of add is empty",
        "Todo: nothing",
        "TODOs elsewhere stay elsewhere",
        "MASTODON_TODO_FLAG is read",
        "PHOTODOC and TODOLIST are names",
        "todo",
        "to do: nothing",
    ],
)
def test_the_word_in_other_cases_or_inside_a_word_is_no_placeholder(tmp_path, prose):
    text = _edit("theorem: add(a, b) == a + b.", f'theorem: "add(a, b) == a + b; {prose}."')
    text = _edit("title: add is exact", f'title: "add is exact, {prose}"', text)
    text = _edit("proof: add returns a + b.", f"proof: >\n  add returns a + b;\n  {prose}.", text)
    result = _load(tmp_path / "cards", text)
    assert result.problems == () and len(result.cards) == 1, "\n".join(map(str, result.problems))


def test_notes_may_say_what_is_left_to_do(tmp_path):
    text = _edit("version: 1", f"notes: {PLACEHOLDER} cover negative ints too.\nversion: 1")
    text = _edit("{le: 0}}", f"{{le: 0}}}}\n    notes: {PLACEHOLDER} a larger range", text)
    result = _load(tmp_path / "cards", text)
    assert result.problems == () and len(result.cards) == 1, "\n".join(map(str, result.problems))


def test_empty_refs_are_refused_with_how_to_list_symbols(tmp_path):
    text = _edit("refs: [fakeimpl/arith.py::add]", "refs: []            # e.g. [impl/kv.py::KVCache.evict]")
    result = _load(tmp_path / "cards", text)
    (problem,) = result.problems
    assert (problem.field, problem.value, problem.line, problem.kind) == ("refs", "[]", 7, "link")
    assert "file.py::Symbol" in problem.message and "new`" in problem.message
    assert str(problem).startswith(f"{tmp_path / 'cards' / 'card0.yaml'}:7: refs=[]: ")


def test_a_card_kvproof_new_wrote_names_each_placeholder_until_filled_in(tmp_path):
    folder = tmp_path / "obligations"
    card_path, _ = scaffold(tmp_path, folder, "KV-T9")
    text = card_path.read_text()
    result = load_cards(folder, tmp_path, scan(tmp_path)[0])
    got = {(p.field, p.line, p.kind) for p in result.problems}
    assert got == {
        ("title", _line(text, "title:"), "link"),
        ("theorem", _line(text, "theorem:"), "link"),
        ("proof", _line(text, "proof:"), "link"),
        ("refs", _line(text, "refs:"), "link"),
    }, "\n".join(map(str, result.problems))
    assert [c.id for c in result.cards] == ["KV-T9"]  # loads: `run KV-T9` is ERROR (not run), never PROVEN
    # filled in, it is clean (its witness then decides: FAILED until written)
    filled = (
        text.replace("title: TODO one line saying what is claimed", "title: add is exact")
        .replace("TODO: state the claim so that it could be false.", "add(a, b) == a + b.")
        .replace("TODO: why it holds, citing the mechanism by symbol (list the symbols in refs).", "a + b.")
        .replace("refs: []", "refs: [m.py::add]")
    )
    assert PLACEHOLDER not in filled
    (tmp_path / "m.py").write_text("def add(a, b):\n    return a + b\n")
    card_path.write_text(filled)
    result = load_cards(folder, tmp_path, scan(tmp_path)[0])
    assert result.problems == () and [c.id for c in result.cards] == ["KV-T9"]


def test_the_card_kvproof_init_writes_has_no_placeholder_and_no_problem(tmp_path):
    init_project(tmp_path)
    result = load_cards(tmp_path / "obligations", tmp_path, scan(tmp_path)[0])
    assert result.problems == () and [c.id for c in result.cards] == ["EXAMPLE-HANDLES"]


def test_a_card_without_refs_or_module_is_not_held_to_the_placeholder_rule(tmp_path):
    text = _edit("refs: [fakeimpl/arith.py::add]\n", "", _edit("module: fakeimpl.arith\n", ""))
    text = _edit("title: add is exact", f"title: {PLACEHOLDER}", text)
    result = _load(tmp_path / "cards", text)
    assert {p.field for p in result.problems} == {"refs", "module"}  # the schema's: both are required


# ---------------------------------------------------------------- the command


def test_validate_prints_every_problem_of_every_card_sorted_by_line_and_exits_2(tmp_path):
    project = tmp_path / "p"
    shutil.copytree(ROOT, project, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    (project / "cards-x").mkdir()
    (project / "cards-x" / "a-many.yaml").write_text(MANY)
    (project / "cards-x" / "b-scaffold.yaml").write_text(_edit("refs: [fakeimpl/arith.py::add]", "refs: []"))
    env = {**os.environ, "KVPROOF_ROOT": str(project), "COLUMNS": "300"}
    env.pop("KVPROOF_CARDS_DIR", None)
    proc = subprocess.run(
        [sys.executable, str(REPO / "run_obligations.py"), "validate", "--cards", "cards-x"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{len(MANY_EXPECTED) + 1} problem(s) in 2 file(s)" in proc.stdout, proc.stdout
    rows = [line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("cards-x/a-many.yaml:")]
    expected = sorted((_line_of(MANY, needle), field) for field, _, needle in MANY_EXPECTED)
    shown = [(int(r.split(":")[1]), re.match(r"[^=:]+", r.split(":", 2)[2].strip()).group(0)) for r in rows]
    assert shown == expected, proc.stdout
    assert "cards-x/b-scaffold.yaml:7: refs=[]: lists no symbol" in proc.stdout
