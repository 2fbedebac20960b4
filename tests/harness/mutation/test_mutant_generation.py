"""The mutant generator (harness/mutation/generate.py): each operator, keys that rebuild their mutant, seeded sampling,
and swapping a compiled mutant into a process like a liar."""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from pathlib import Path

import pytest

from harness.errors import LiarError
from harness.mutation import generate as mutants
from harness.mutation import swap

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "project"

SOURCE = '''\
"""Module doc."""


def arith(a, b):
    """Doc: 1 + 1 is never mutated."""
    c = a + b * 2
    c -= 3
    return c // 4 % 5


def logic(x, xs):
    if x < 0 or not xs:
        raise ValueError(f"x={x + 1} must be >= 0")
    for v in xs:
        if v == x:
            break
        if v is None:
            continue
    assert x in xs
    return min(x, -x), max(xs), True


def annotated(n: int = 3) -> int:
    return n
'''


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    pkg = tmp_path / "mut_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(SOURCE)
    return tmp_path


def _by_op(ms):
    out: dict[str, list[str]] = {}
    for m in ms:
        out.setdefault(m.operator, []).append(m.change)
    return out


def test_every_operator_makes_its_change(project):
    ops = _by_op(mutants.generate(project, "mut_pkg/ops.py"))
    assert {
        "a + b * 2 -> a - b * 2",
        "b * 2 -> b / 2",
        "c -= 3 -> c += 3",
        "c // 4 -> c / 4",
        "c // 4 % 5 -> c // 4 / 5",
    } <= set(ops["arith"])
    assert set(ops["compare"]) == {
        "x < 0 -> x <= 0",
        "v == x -> v != x",
        "v is None -> v is not None",
        "x in xs -> x not in xs",
    }
    assert ops["boolop"] == ["x < 0 or not xs -> x < 0 and (not xs)"]
    assert set(ops["unary"]) == {"not xs -> xs", "-x -> x"}
    assert ops["bool"] == ["True -> False"]
    assert {"2 -> 3", "3 -> 4", "4 -> 5", "5 -> 6", "0 -> 1"} <= set(ops["const+1"])
    assert "0 -> -1" in ops["const-1"]
    assert set(ops["loopctl"]) == {"break -> continue", "continue -> break"}
    assert ops["noloop"] == ["xs -> ()"]
    assert set(ops["minmax"]) == {"min(x, -x) -> max(x, -x)", "max(xs) -> min(xs)"}
    assert {"c = a + b * 2 -> pass", "c -= 3 -> pass", "assert x in xs -> pass"} <= set(ops["drop"])
    assert any(c.startswith("raise ValueError(") and c.endswith("-> pass") for c in ops["drop"])


def test_docstrings_annotations_defaults_and_messages_are_never_mutated(project):
    ms = mutants.generate(project, "mut_pkg/ops.py")
    assert not [m for m in ms if m.qualname == "annotated"]  # `n: int = 3` and `-> int` only
    assert not [m for m in ms if "1 + 1" in m.before]  # the docstring
    assert not [m for m in ms if m.line == 13 and m.operator != "drop"]  # inside the raise: the message


def test_each_mutant_parses_and_differs_from_the_original_in_one_place(project):
    text = (project / "mut_pkg/ops.py").read_text()
    for m in mutants.generate(project, "mut_pkg/ops.py"):
        found, mutated, fn = mutants.find(project, m.key)
        assert found == m
        assert mutated != text
        ast.parse(mutated)
        assert isinstance(fn, ast.FunctionDef) and fn.name == m.qualname.split(".")[-1]
        changed = [i for i, (a, b) in enumerate(zip(text.splitlines(), mutated.splitlines(), strict=False)) if a != b]
        assert changed and changed[0] + 1 == m.line


def test_keys_are_unique_even_where_nodes_start_at_one_place(project):
    ms = mutants.generate(project, "mut_pkg/ops.py")
    keys = [m.key for m in ms]
    assert len(keys) == len(set(keys))
    nested = [
        m for m in ms if m.line == 6 and m.col == 8 and m.operator == "arith"
    ]  # `a + b * 2` starts where `a` does
    assert [m.key.rsplit(":", 1)[1] for m in nested] == ["arith"]
    real = mutants.generate(Path(__file__).resolve().parents[3], "impl/kv.py", ["KVCache.nbytes"])
    assert len({m.key for m in real}) == len(real)


def test_a_key_rebuilds_the_same_mutant_and_a_stale_key_is_refused(project):
    m = mutants.generate(project, "mut_pkg/ops.py")[5]
    again, _, _ = mutants.find(project, m.key)
    assert again == m
    (project / "mut_pkg/ops.py").write_text("\n\n" + SOURCE)  # the code moved down two lines
    with pytest.raises(LiarError, match="no such mutant now"):
        mutants.find(project, m.key)
    for bad in ("impl/kv.py", "impl/kv.py:1:2:explode", "kv.txt:1:2:arith"):
        with pytest.raises(LiarError, match="not a mutant key"):
            mutants.parse_key(bad)


def test_sampling_is_reproducible_from_the_seed_and_spread_over_functions(project):
    ms = mutants.generate(project, "mut_pkg/ops.py")
    a = mutants.sample(ms, 6, seed=7, salt="CARD")
    assert a == mutants.sample(ms, 6, seed=7, salt="CARD")
    assert len(a) == 6 and a == [m for m in ms if m in a]  # kept in file order
    assert {m.qualname for m in a} == {"arith", "logic"}  # each function gets its share
    others = {tuple(m.key for m in mutants.sample(ms, 6, seed=s, salt="CARD")) for s in range(8)}
    assert len(others) > 1  # another seed, another sample
    assert mutants.sample(ms, None, 0, "x") == ms and mutants.sample(ms, 10_000, 0, "x") == ms


def test_the_diff_names_the_file_and_shows_the_changed_line(project):
    m = next(m for m in mutants.generate(project, "mut_pkg/ops.py") if m.operator == "minmax")
    text = mutants.diff(project, m)
    assert text.startswith("--- a/mut_pkg/ops.py\n+++ b/mut_pkg/ops.py\n")
    assert "-    return min(x, -x), max(xs), True" in text and "+    return max(x, -x), max(xs), True" in text


# ---------------------------------------------------------------- applied in a process


@pytest.fixture()
def fixture_on_path():
    sys.path.insert(0, str(FIXTURE))
    yield FIXTURE
    sys.path.remove(str(FIXTURE))
    for name in [n for n in sys.modules if n == "fakeimpl" or n.startswith("fakeimpl.")]:
        del sys.modules[name]


def _key(root: Path, qualname: str, change: str) -> str:
    return next(m.key for m in mutants.generate(root, "fakeimpl/scale.py", [qualname]) if m.change == change)


def test_apply_swaps_a_function_and_undo_restores_it(fixture_on_path):
    import fakeimpl.scale as mod

    original = mod.scale
    applied = swap.apply(_key(FIXTURE, "scale", "x * k -> x / k"), FIXTURE)
    assert mod.scale(3) == 1.5 and mod.scale is not original
    assert applied.target == "fakeimpl.scale:scale"
    assert inspect.getsourcefile(mod.scale) == str((FIXTURE / "fakeimpl/scale.py").resolve())
    applied.undo()
    assert mod.scale is original and mod.scale(3) == 6


@pytest.mark.parametrize(
    "qualname, change, check",
    [
        ("Box.doubled", "self.__v * 2 -> self.__v / 2", lambda Box: Box(4).doubled == 2),  # property, private name
        ("Box.half", "x / 2 -> x * 2", lambda Box: Box.half(3) == 6 and Box(1).half(3) == 6),  # staticmethod
        ("Box.of", "v + 0 -> v - 0", lambda Box: isinstance(Box.of(2), Box)),  # classmethod keeps cls
        ("Box.__init__", "self.__v = v -> pass", lambda Box: not hasattr(Box(1), "_Box__v")),
    ],
)
def test_apply_keeps_the_kind_of_method(fixture_on_path, qualname, change, check):
    import fakeimpl.scale as mod

    before = inspect.getattr_static(mod.Box, qualname.split(".")[1])
    applied = swap.apply(_key(FIXTURE, qualname, change), FIXTURE)
    after = inspect.getattr_static(mod.Box, qualname.split(".")[1])
    assert type(after) is type(before)
    assert check(mod.Box)
    applied.undo()
    assert inspect.getattr_static(mod.Box, qualname.split(".")[1]) is before


def test_zero_argument_super_works_in_a_mutated_method(tmp_path):
    pkg = tmp_path / "sup_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        textwrap.dedent("""\
        class Base:
            def size(self):
                return 10


        class Child(Base):
            def size(self):
                return super().size() + 1
        """)
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import sup_pkg.m as m

        key = next(x.key for x in mutants.generate(tmp_path, "sup_pkg/m.py", ["Child.size"]) if x.operator == "arith")
        applied = swap.apply(key, tmp_path)
        assert m.Child().size() == 9
        applied.undo()
        assert m.Child().size() == 11
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("sup_pkg.m", None)
        sys.modules.pop("sup_pkg", None)
