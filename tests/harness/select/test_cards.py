"""Card loading and validation: a table of malformed cards and the problem each must produce."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

from harness.errors import CardInvalid, HarnessError, UsageError
from harness.liars import scan
from harness.select.cards import SCHEMA_PATH, Problem, load_cards, resolve_ref, resolve_test, select

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "project"

GOOD = """\
id: FX-GOOD
title: add is exact
module: fakeimpl.arith
regime: N
theorem: add(a, b) == a + b.
proof: add returns a + b.
refs: [fakeimpl/arith.py::add]
witnesses:
  - id: exact
    test: witnesses/test_arith.py::test_add_exact
    bounds: {max_abs_delta: {le: 0}}
liars: [arith.off_by_one]
version: 1
"""


def _load(tmp_path: Path, *texts: str):
    for i, text in enumerate(texts):
        (tmp_path / f"card{i}.yaml").write_text(text)
    sites, _ = scan(ROOT)
    return load_cards(tmp_path, ROOT, sites)


def _edit(old: str, new: str, base: str = GOOD) -> str:
    assert old in base, old
    return base.replace(old, new, 1)


# (name, card text, field, message fragment, kind)
MALFORMED = [
    ("yaml-syntax", "id: [unclosed\ntitle: x\n", "", "YAML syntax error", "load"),
    ("not-a-mapping", "- id: FX\n", "", "must be a YAML mapping", "load"),
    ("empty-file", "", "", "must be a YAML mapping", "load"),
    ("missing-title", _edit("title: add is exact\n", ""), "title", "missing required field", "load"),
    ("misspelt-field", _edit("witnesses:", "witness:"), "witness", "did you mean `witnesses`?", "load"),
    ("unknown-regime", _edit("regime: N", "regime: X"), "regime", "allowed: N, A, C, D", "load"),
    ("version-as-string", _edit("version: 1", "version: '1'"), "version", "expected integer", "load"),
    ("version-zero", _edit("version: 1", "version: 0"), "version", "must be >= 1", "load"),
    (
        "ref-shape",
        _edit("fakeimpl/arith.py::add", "fakeimpl/arith.py:add"),
        "refs[0]",
        "path.py::Name or path.py::Class.method",
        "load",
    ),
    (
        "witness-without-test",
        _edit("    test: witnesses/test_arith.py::test_add_exact\n", ""),
        "witnesses[0].test",
        "missing required field",
        "load",
    ),
    ("witness-field-misspelt", _edit("bounds:", "bound:"), "witnesses[0].bound", "did you mean `bounds`?", "load"),
    (
        "bound-op-misspelt",
        _edit("{le: 0}", "{lte: 0}"),
        "witnesses[0].bounds.max_abs_delta.lte",
        "did you mean `le`?",
        "load",
    ),
    (
        "bound-limit-not-number",
        _edit("{le: 0}", "{le: zero}"),
        "witnesses[0].bounds.max_abs_delta.le",
        "expected number",
        "load",
    ),
    (
        "tolerance-without-reason",
        _edit("{le: 0}", "{le: 1.0e-4}"),
        "witnesses[0].bounds.max_abs_delta.le",
        "a tolerance above zero needs a reason",
        "load",
    ),
    (
        "no-witnesses",
        _edit(GOOD[GOOD.index("witnesses:") : GOOD.index("liars:")], "witnesses: []\n"),
        "witnesses",
        "at least 1",
        "load",
    ),
    (
        "timeout-negative",
        _edit("    bounds:", "    timeout: -1\n    bounds:"),
        "witnesses[0].timeout",
        "must be > 0",
        "load",
    ),
    (
        "duplicate-yaml-key",
        _edit("title: add is exact\n", "title: add is exact\ntitle: again\n"),
        "title",
        "duplicate key",
        "load",
    ),
    (
        "duplicate-witness-id",
        _edit(
            "liars:",
            "controls:\n  - id: exact\n    test: witnesses/test_arith.py::test_different_inputs_differ\nliars:",
        ),
        "controls[0].id",
        "duplicate witness id",
        "load",
    ),
    ("bad-requirement", _edit("liars:", "requires: [oracle]\nliars:"), "requires[0]", "oracle:NAME", "load"),
    (
        "ref-does-not-resolve",
        _edit("fakeimpl/arith.py::add", "fakeimpl/arith.py::ad"),
        "refs[0]",
        "did you mean `add`?",
        "link",
    ),
    (
        "ref-method-missing",
        _edit("fakeimpl/arith.py::add", "fakeimpl/arith.py::Acc.pushh"),
        "refs[0]",
        "not defined in Acc (did you mean `push`?)",
        "link",
    ),
    (
        "ref-file-missing",
        _edit("fakeimpl/arith.py::add", "fakeimpl/nope.py::add"),
        "refs[0]",
        "no such file fakeimpl/nope.py",
        "link",
    ),
    (
        "test-node-missing",
        _edit("test_add_exact", "test_add_exat"),
        "witnesses[0].test",
        "is not a test in witnesses/test_arith.py (did you mean `test_add_exact`?)",
        "link",
    ),
    (
        "test-file-missing",
        _edit("witnesses/test_arith.py", "witnesses/test_nope.py"),
        "witnesses[0].test",
        "no such file witnesses/test_nope.py",
        "link",
    ),
    (
        "unknown-liar",
        _edit("arith.off_by_one", "arith.of_by_one"),
        "liars[0]",
        "unknown liar (did you mean `arith.off_by_one`?)",
        "link",
    ),
    ("liar-target-gone", _edit("arith.off_by_one", "arith.gone"), "liars[0]", "does not resolve", "link"),
    ("covers-missing", _edit("liars:", "covers: [fakeimpl/gone.py]\nliars:"), "covers[0]", "no such file", "link"),
]


@pytest.mark.parametrize("name,text,field,fragment,kind", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_card_reports_field_and_fix(tmp_path, name, text, field, fragment, kind):
    result = _load(tmp_path, text)
    matching = [p for p in result.problems if p.field == field and fragment in p.message]
    assert matching, f"expected {field!r} ~ {fragment!r}, got:\n" + "\n".join(map(str, result.problems))
    assert matching[0].kind == kind
    assert str(matching[0]).startswith(str(tmp_path / "card0.yaml"))
    if kind == "load":
        assert result.cards == ()


def test_good_card_loads_with_default_covers_and_fingerprint(tmp_path):
    result = _load(tmp_path, GOOD)
    assert result.problems == ()
    (card,) = result.cards
    assert card.covers == ("fakeimpl/arith.py", "witnesses/test_arith.py")
    assert card.fingerprint == hashlib.sha256(GOOD.encode()).hexdigest()
    assert card.witnesses[0].bounds[0].op == "le" and card.witnesses[0].kind == "witness"


def test_problem_names_the_line_of_the_bad_value(tmp_path):
    result = _load(tmp_path, _edit("regime: N", "regime: X"))
    (problem,) = result.problems
    assert problem.line == GOOD.splitlines().index("regime: N") + 1
    assert str(problem).endswith(
        "regime='X': not allowed; allowed: N, A, C, D (Kind of claim: N numerical, "
        "A algebraic/structural, C integrity, D decision soundness.)"
    )


def test_every_problem_in_every_card_is_reported_at_once(tmp_path):
    bad1 = _edit("FX-GOOD", "FX-ONE", _edit("regime: N", "regime: X", _edit("witnesses:", "witness:")))
    bad2 = _edit("FX-GOOD", "FX-TWO", _edit("test_add_exact", "test_nope"))
    result = _load(tmp_path, bad1, bad2, GOOD)
    fields = sorted((Path(p.path).name, p.field) for p in result.problems)
    assert ("card0.yaml", "regime") in fields and ("card0.yaml", "witness") in fields
    assert ("card1.yaml", "witnesses[0].test") in fields
    assert [c.id for c in result.cards] == ["FX-TWO", "FX-GOOD"]


def test_duplicate_card_ids_across_files_name_the_first(tmp_path):
    result = _load(tmp_path, GOOD, GOOD)
    (problem,) = result.problems
    assert problem.field == "id" and "duplicate card id (first defined at" in problem.message
    assert "card0.yaml" in problem.message and Path(problem.path).name == "card1.yaml"


def test_yaml_is_loaded_safely(tmp_path):
    evil = "id: !!python/object/apply:os.system ['echo pwned']\n"
    result = _load(tmp_path, evil)
    assert result.problems and "YAML" in result.problems[0].message


def test_resolve_ref_and_test_give_lines():
    site = resolve_ref(ROOT, "fakeimpl/arith.py::Acc.push")
    assert site.path == "fakeimpl/arith.py" and site.line > 1 and site.end_line >= site.line
    assert resolve_test(ROOT, "witnesses/test_arith.py::test_acc_matches_sum[xs0]").line > 1


def test_card_invalid_is_a_value_error_with_every_problem():
    problems = [Problem("a.yaml", 3, "regime", "'X'", "not allowed")] * 2
    exc = CardInvalid(problems)
    assert isinstance(exc, HarnessError) and isinstance(exc, ValueError)
    assert str(exc).count("a.yaml:3: regime='X': not allowed") == 2


def test_select_by_glob_and_tag_and_suggests_on_typo():
    result = load_cards(ROOT / "obligations", ROOT, scan(ROOT)[0])
    assert [c.id for c in select(result.cards, ["FX-A*"])] == ["FX-ACC", "FX-ADD"]
    assert [c.id for c in select(result.cards, [], ["acc"])] == ["FX-ACC"]
    with pytest.raises(UsageError, match="did you mean `FX-ADD`"):
        select(result.cards, ["FX-ADDD"])


def test_liar_scan_indexes_names_without_importing():
    sites, problems = scan(ROOT)
    assert problems == []
    assert sites["arith.acc_forgets"].target == "fakeimpl.arith:Acc.push"
    assert sites["arith.off_by_one"].path.name == "arith.py"


def test_liar_scan_reports_duplicate_names(tmp_path):
    folder = tmp_path / "witnesses" / "liars"
    folder.mkdir(parents=True)
    src = 'from harness.liars import liar\n@liar("a.b", target="m:f")\ndef f(): pass\n'
    (folder / "one.py").write_text(src)
    (folder / "two.py").write_text(src)
    sites, problems = scan(tmp_path)
    # neither copy is indexed: a run must not pick one by file order
    assert list(sites) == [] and "more than once" in str(problems[0])
    assert problems[0].path == "witnesses/liars/two.py" and problems[0].field == "name"


def test_fixture_cards_match_the_schema_and_the_schema_is_valid():
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    result = load_cards(ROOT / "obligations", ROOT, scan(ROOT)[0])
    assert result.problems == () and len(result.cards) == 2


def test_docs_cards_md_is_generated_from_the_schema():
    from harness.select.schemadoc import render

    docs = Path(__file__).resolve().parents[3] / "docs" / "cards.md"
    assert docs.read_text() == render(), "run: python -m harness.select.schemadoc > docs/cards.md"


# ---------------------------------------------------------------- liars (the mechanism cards name)


def _liar_project(tmp_path: Path, pkg: str) -> Path:
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "a.py").write_text(
        "def f(x):\n    return x + 1\n\nclass C:\n    def m(self):\n        return 'real'\n"
        "    @staticmethod\n    def s():\n        return 'real'\n"
    )
    (tmp_path / pkg / "b.py").write_text(f"from {pkg}.a import f\n\ndef g(x):\n    return f(x) * 10\n")
    liars = tmp_path / "witnesses" / "liars"
    liars.mkdir(parents=True)
    (liars / "demo.py").write_text(
        textwrap.dedent(f"""\
        from harness.liars import liar

        @liar("demo.f_wrong", target="{pkg}.a:f")
        def f(x):
            return x + 2

        @liar("demo.m_wrapped", target="{pkg}.a:C.m", factory=True)
        def make(original):
            def m(self):
                return "lie:" + original(self)
            return m

        @liar("demo.s_wrong", target="{pkg}.a:C.s")
        def s():
            return "lie"
        """)
    )
    return tmp_path


def test_liar_patches_a_function_everywhere_it_was_imported_and_undoes(tmp_path, monkeypatch):
    import importlib

    from harness.liars import apply

    root = _liar_project(tmp_path, "liarpkg1")
    monkeypatch.syspath_prepend(str(root))
    b = importlib.import_module("liarpkg1.b")
    applied = apply("demo.f_wrong", root)
    try:
        assert b.g(1) == 30 and sys.modules["liarpkg1.a"].f(1) == 3  # `from a import f` copy rebound too
    finally:
        applied.undo()
    assert b.g(1) == 20


def test_liar_factory_wraps_a_method_and_keeps_staticmethods_static(tmp_path, monkeypatch):
    import importlib

    from harness.liars import apply

    root = _liar_project(tmp_path, "liarpkg2")
    monkeypatch.syspath_prepend(str(root))
    a = importlib.import_module("liarpkg2.a")
    undo = [apply("demo.m_wrapped", root).undo, apply("demo.s_wrong", root).undo]
    try:
        assert a.C().m() == "lie:real" and a.C.s() == "lie" and a.C().s() == "lie"
    finally:
        for u in undo:
            u()
    assert a.C().m() == "real" and a.C.s() == "real"


def test_unknown_liar_raises_liar_error(tmp_path):
    from harness.errors import LiarError
    from harness.liars import apply

    with pytest.raises(LiarError, match="is not registered"):
        apply("demo.nope", _liar_project(tmp_path, "liarpkg3"))
