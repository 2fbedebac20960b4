"""C mutants: generation in tree-sitter's C grammar, the mutant schema, and the build that sorts them.

The schema's promise is checked against its definition (the library has no undefined behaviour under any of
its mutants on these inputs: every index stays inside its array): for every mutant of a small C library, the schema
with the switch set to that mutant computes what the mutant built alone computes, on the same inputs, and
with the switch at 0 what the unchanged file computes (each compiled by gcc here, called through ctypes).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.mutation import cbuild, cgen, cschema
from harness.select import csource

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the C mutants")

LIB = textwrap.dedent(
    """\
    #include <math.h>
    #define SCALE(x) ((x) * 2 + 1)
    #define TWICE(NAME) static int NAME(int a) { return a + a; }
    TWICE(twice)
    static const int TABLE[4] = {1, 2, 3, 4};

    int poly(int n, int k) {
        int acc = 0;
        for (int i = 0; i < n; i++) {
            if (i % 3 == 0 && k > 1) continue;
            acc += SCALE(i) - k;
            if (acc > 1000) break;
        }
        return acc + twice(k) + TABLE[k & 1];
    }

    float clampf(float x, float lo) {
        float y = fmaxf(x, lo);
        return -y < 0.5f ? y : !(x > 0) + y;
    }

    int kind(int v) {
        int out = 0;
        switch (v) {
        case 1: out = 10; break;
        default: out = 20; break;
        }
    #if defined(NEVER_DEFINED)
        out = out * 7 + 3;
    #endif
        int scratch[8] = {0};
        scratch[v & 3] = out;
        return scratch[v & 3] + 0 * out;
    }
    """
)
FLAGS = ["-O2", "-fPIC", "-shared", "-std=gnu11", "-w"]


def _build(text: str, folder: Path, name: str) -> Path | None:
    (folder / f"{name}.c").write_text(text)
    so = folder / f"{name}.so"
    r = subprocess.run(["gcc", *FLAGS, "-o", so.name, f"{name}.c", "-lm"], cwd=folder, capture_output=True)
    return so if r.returncode == 0 else None


def _calls(so: Path, switch: int | None = None) -> tuple:
    lib = ctypes.CDLL(str(so))
    if switch is not None:
        ctypes.c_int.in_dll(lib, cschema.SWITCH).value = switch
    lib.clampf.restype = ctypes.c_float
    lib.clampf.argtypes = [ctypes.c_float, ctypes.c_float]
    ints = [(lib.poly(n, k)) for n in (0, 1, 5, 40) for k in (0, 1, 2, 3)]
    floats = [lib.clampf(x, lo) for x in (-1.0, 0.25, 3.0) for lo in (0.0, 1.0)]
    kinds = [lib.kind(v) for v in (0, 1, 2, 5)]
    return tuple(ints), tuple(floats), tuple(kinds)


@pytest.fixture()
def project(tmp_path):
    (tmp_path / "lib.c").write_text(LIB)
    return tmp_path


def test_every_operator_is_found_in_functions_and_macros_and_find_rebuilds_it(project):
    ms = cgen.generate(project, "lib.c")
    ops = Counter(m.operator for m in ms)
    for op in ("arith", "compare", "boolop", "unary", "const+1", "const-1", "loopctl", "noloop", "minmax", "drop"):
        assert ops[op] > 0, op
    assert ops["incdec"] > 0
    assert {m.qualname for m in ms} >= {"poly", "clampf", "kind", "SCALE", "TWICE"}
    assert not any(m.line == 5 for m in ms)  # a static initializer outside a function is never mutated
    for m in ms:
        found, text, _ = cgen.find(project, m.key)
        assert found == m and text != LIB
        assert sum(a != b for a, b in zip(text.splitlines(), LIB.splitlines(), strict=True)) == 1  # one line changed


def test_a_c_ref_claims_what_it_reaches_by_name(project):
    assert csource.reach(project, "lib.c", ["poly"]) == {"poly", "SCALE", "TWICE"}  # twice() comes from TWICE(twice)
    assert csource.reach(project, "lib.c", ["kind"]) == {"kind"}
    assert csource.names(project, "lib.c") == ["SCALE", "TWICE", "poly", "clampf", "kind"]


def test_a_mutant_in_a_constant_place_is_flagged(project):
    ms = cgen.generate(project, "lib.c", ["kind"])
    eds = cgen.edits(project, "lib.c", [m.key for m in ms])
    lines = LIB.splitlines()
    places = {lines.index("    int scratch[8] = {0};") + 1, lines.index("    case 1: out = 10; break;") + 1}
    constant = {e.mutant.change for e in eds.values() if e.constant}
    assert constant == {"8 -> 9", "8 -> 7", "1 -> 2", "1 -> 0"}  # the array size and the case label, nothing else
    assert all(e.mutant.line in places for e in eds.values() if e.constant)
    assert any(not e.constant for e in eds.values() if e.mutant.line in places)  # out = 10 sits beside the label


def test_the_schema_computes_each_mutant_exactly_as_its_own_build(project, tmp_path_factory):
    out = tmp_path_factory.mktemp("builds")
    original = _build(LIB, out, "original")
    assert original is not None
    ms = cgen.generate(project, "lib.c")
    eds = cgen.edits(project, "lib.c", [m.key for m in ms])
    alone = {}
    for i, e in enumerate(eds.values()):
        if not e.constant:
            so = _build(cgen.find(project, e.mutant.key)[1], out, f"m{i}")
            if so is not None:  # (continue outside a loop does not compile: no program to compare with)
                alone[e.mutant.key] = so
    todo = [e for e in eds.values() if e.mutant.key in alone]
    assert len(todo) > 0.8 * len(eds)
    text, ids = cschema.render(LIB.encode(), todo)
    schema = _build(text.decode(), out, "schema")
    assert schema is not None, "the schema of every mutant that compiles alone compiles"
    want0 = _calls(original)
    assert _calls(schema, 0) == want0
    differ = 0
    for e in todo:
        want = _calls(alone[e.mutant.key])
        assert _calls(schema, ids[e.mutant.key]) == want, e.mutant.key
        differ += want != want0
    assert differ >= 0.5 * len(todo)  # the inputs tell most mutants apart: the comparison is not vacuous


def _hooks_project(project: Path) -> Path:
    (project / "cbuilder.py").write_text(
        textwrap.dedent(
            f"""\
            import hashlib, subprocess, ctypes
            from pathlib import Path
            OUT = Path(__file__).parent / "builds"
            FLAGS = {FLAGS!r}

            def build(text):
                OUT.mkdir(exist_ok=True)
                folder = OUT / hashlib.sha256(text.encode()).hexdigest()[:16]
                folder.mkdir(exist_ok=True)
                (folder / "src.c").write_text(text)  # one name for every build: its bytes depend on the text only
                r = subprocess.run(["gcc", *FLAGS, "-o", "lib.so", "src.c", "-lm"], cwd=folder,
                                   capture_output=True, text=True)
                if r.returncode:
                    raise RuntimeError("gcc failed: " + r.stderr)
                return folder / "lib.so"

            def preprocess(text):
                r = subprocess.run(["gcc", "-E", "-P", "-x", "c", "-"], input=text, capture_output=True, text=True)
                return r.stdout

            def load(text, switches=None):
                lib = ctypes.CDLL(str(build(text)))
                for k, v in (switches or {{}}).items():
                    ctypes.c_int.in_dll(lib, k).value = v
                return lambda: None
            """
        )
    )
    (project / "pyproject.toml").write_text(
        '[tool.kvproof.c-sources."lib.c"]\nbuild = "cbuilder:build"\nload = "cbuilder:load"\n'
        'preprocess = "cbuilder:preprocess"\n'
    )
    return project


def test_the_build_sorts_mutants_the_same_with_and_without_the_schema(project):
    _hooks_project(project)
    ms = cgen.generate(project, "lib.c")
    fast = cbuild.prebuild(project, ms, 2)
    slow = cbuild.prebuild(project, ms, 2, schema=False)
    status = {k: b.status for k, b in fast.results.items()}
    assert set(status) == {m.key for m in ms}
    # the #if branch no build compiles: equivalent either way
    dead = [m.key for m in ms if m.line == LIB.splitlines().index("    out = out * 7 + 3;") + 1]
    assert dead and all(status[k] == "same" for k in dead)
    assert all(slow.results[k].status == "same" and "same bytes" in slow.results[k].detail for k in dead)
    assert "not in this build" in fast.results[dead[0]].detail
    # break -> continue in a switch outside any loop does not compile, so it cannot be in the schema
    bad = [m for m in ms if m.qualname == "kind" and m.operator == "loopctl"]
    assert bad and all(status[m.key] == "error" and "does not compile" in fast.results[m.key].detail for m in bad)
    assert all(slow.results[m.key].status == "error" for m in bad)
    placed = [k for k, b in fast.results.items() if b.detail == "in the run's mutant schema"]
    assert len(placed) > 0.6 * len(ms)
    # a placed mutant's own text leads a witness to the schema and its switch; the switch computes the mutant
    key = placed[0]
    text = cgen.find(project, key)[1]
    found = cbuild.schema_for(project, "lib.c", text)
    assert found is not None and found[1][cschema.SWITCH] >= 1
    # every mutant the slow path says differs from the original (ok) is run on the fast path too, or is an
    # error there only because it cannot compile alone either
    for k, b in slow.results.items():
        if b.status == "ok":
            assert status[k] == "ok", k


def test_a_bad_c_sources_entry_is_one_clear_paragraph(project):
    (project / "pyproject.toml").write_text('[tool.kvproof.c-sources."lib.c"]\nbuild = "cbuilder"\n')
    with pytest.raises(UsageError) as e:
        cbuild.hooks(project)
    msg = str(e.value)
    assert "pyproject.toml" in msg and "lib.c" in msg and "build, load missing or not module:function" in msg
    (project / "pyproject.toml").write_text('[tool.kvproof.c-sources."gone.c"]\nbuild = "a:b"\nload = "a:c"\n')
    with pytest.raises(UsageError, match="no such file"):
        cbuild.hooks(project)


def test_a_c_ref_resolves_to_its_definition_or_says_what_is_missing(project):
    from harness.select.refs import RefSite, resolve_ref

    site = resolve_ref(project, "lib.c::poly")
    assert isinstance(site, RefSite) and LIB.splitlines()[site.line - 1].startswith("int poly(")
    assert isinstance(resolve_ref(project, "lib.c::TWICE"), RefSite)  # a function-like macro
    assert "did you mean `poly`" in resolve_ref(project, "lib.c::polly")
    assert resolve_ref(project, "nope.c::poly") == "no such file nope.c"
