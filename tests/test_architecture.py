"""The shape of the house: import graph without cycles, a witness side that imports only the wire, a complete map.

These tests read the source with :mod:`ast` (nothing under test is imported, except in the witness-side
test, which imports ``harness.plugin`` in a fresh interpreter and lists what came with it).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "impl")

# The witness side: what `import harness.plugin` may load of the harness, in every witness process and in
# the fork server's zygote. The wire, the status words, the errors, the evidence object; nothing of the judge
# or the card loader.
WITNESS_SIDE = {
    "harness",
    "harness.plugin",
    "harness.wire",
    "harness.wire.evidence",
    "harness.wire.messages",
    "harness.statuses",
    "harness.errors",
    "harness.wire.safetext",
}

# Function-level imports of our own packages that stay function-level, each with why. Everything else is
# imported at module level (optional third-party dependencies such as ray and torch may be imported lazily
# anywhere: they are not in this graph).
DEFERRED = {
    # CLI dispatch: `run_obligations.py validate` does not import the executor, Ray glue or the oracle export
    ("harness.cli", "harness.commands"): "CLI dispatch",
    ("harness.cli", "harness.oracle.cli"): "CLI dispatch",
    # the witness side applies a liar or mutant only when its plan names one
    ("harness.plugin", "harness.liars"): "witness side: only a liar process needs the liar index",
    ("harness.plugin", "harness.mutation.generate"): "witness side: only a warm server parses the claimed files",
    ("harness.plugin", "harness.mutation.swap"): "witness side: only a mutant process applies a mutant",
    ("harness.plugin", "harness.wire.linecov"): "witness side: only a mutate run's honest run traces lines",
    ("harness.plugin", "harness.wire.property_runs"): "witness side: only an honest run counts Hypothesis examples",
    # the harness never imports the project under proof at its own import time
    ("harness.oracle.store", "impl.model.weights"): "the project under proof (impl), optional",
    ("harness.oracle.cli", "impl.errors"): "the project under proof (impl), optional",
    ("harness.oracle.fixtures", "impl.errors"): "the project under proof (impl), optional",
    ("harness.targets.model", "impl.kernels"): "the project under proof (impl): only its own targets' model path",
    ("harness.targets.model", "impl.model.config"): "the project under proof (impl): only its own targets' model path",
    ("harness.targets.model", "impl.model.llama"): "the project under proof (impl): only its own targets' model path",
    ("harness.targets.model", "impl.model.session"): "the project under proof (impl): only its own targets' model path",
}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    deferred: bool  # inside a function
    type_only: bool  # under `if TYPE_CHECKING:`
    names: tuple[str, ...]


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(mods: dict[str, Path], source: str, node: ast.ImportFrom | ast.Import) -> Iterator[tuple[str, str]]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] in PACKAGES:
                yield alias.name, ""
        return
    base = node.module or ""
    if node.level:
        pkg = source.split(".") if (mods[source].name == "__init__.py") else source.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join([*pkg, *([node.module] if node.module else [])])
    if base.split(".")[0] not in PACKAGES:
        return
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        yield (sub, "") if sub in mods else (base, alias.name)


def edges() -> list[Edge]:
    mods = modules()
    out: list[Edge] = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def visit(node: ast.AST, deferred: bool, type_only: bool, name: str = name) -> None:
            for child in ast.iter_child_nodes(node):
                d, t = deferred, type_only
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                    d = True
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    t = True
                if isinstance(child, ast.Import | ast.ImportFrom):
                    for target, imported in _resolve(mods, name, child):
                        out.append(Edge(name, target, child.lineno, d, t, (imported,) if imported else ()))
                visit(child, d, t)

        visit(tree, False, False)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan), as sorted lists."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_import_graph_of_harness_and_impl_has_no_cycle_lazy_type_only_or_not():
    """Type-only imports count: a circle drawn under TYPE_CHECKING still ties the stages into one knot (issue 36)."""
    graph: dict[str, set[str]] = {}
    for e in edges():
        if e.source == e.target:
            continue
        graph.setdefault(e.source, set()).add(e.target)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_function_level_imports_are_only_the_listed_deferrals():
    deferred = {(e.source, e.target): e for e in edges() if e.deferred and not e.type_only}
    unexpected = {f"{e.source}:{e.line} imports {e.target}" for k, e in deferred.items() if k not in DEFERRED}
    assert unexpected == set()
    stale = {k for k in DEFERRED if k not in deferred}
    assert stale == set(), "DEFERRED lists imports that are no longer deferred: remove them"


def test_no_module_imports_a_private_name_of_another():
    private = {
        f"{e.source}:{e.line} imports {e.target}.{n}"
        for e in edges()
        for n in e.names
        if n.startswith("_") and not n.startswith("__") and e.target != e.source
    }
    assert private == set()


def test_package_inits_hold_a_map_and_import_nothing():
    for name, path in modules().items():
        if path.name != "__init__.py" or name in ("harness", "impl", "impl.model"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"{path}: the package's map belongs in its docstring"
        imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        assert not [n for n in imports if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")], (
            f"{path} imports something: a package __init__ imports nothing"
        )


def test_witness_side_imports_only_the_wire_the_status_words_and_the_errors():
    code = "import sys, harness.plugin; print('\\n'.join(sorted(m for m in sys.modules if m.startswith('harness'))))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert set(out.stdout.split()) == WITNESS_SIDE


def test_zygote_preloads_nothing_of_the_harness_beyond_the_witness_side():
    from harness.execute import zygote

    harness_preloads = {m for m in zygote.WITNESS_SIDE_MODULES if m.startswith("harness")}
    assert harness_preloads <= WITNESS_SIDE


def _layout_map() -> str:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page[page.index("## Layout") :]
    end = section.find("\n## ", 5)
    return section if end < 0 else section[:end]


def test_architecture_page_maps_every_module_of_harness_and_impl():
    section = _layout_map()
    missing = []
    for path in modules().values():
        rel = path.relative_to(ROOT).as_posix()
        if path.name == "__init__.py":
            pattern = re.escape(path.parent.name) + "/"  # a package is named by its folder
        else:
            pattern = re.escape(rel) + "|" + r"(?<![\w/.])" + re.escape(path.stem) + r"\.py"
        if not re.search(pattern, section):
            missing.append(rel)
    assert missing == []


def test_readme_links_the_architecture_page():
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


# The top of harness/: entry points, the shared types and leaves, the judge. Everything else is a stage's
# package. A new module here is a decision: add it with its reason, or put it in its stage (issue 36).
TOP_LEVEL = {
    "argtypes": "entry point: option types of the command line",
    "cli": "entry point: the command line",
    "commands": "entry point: the subcommand bodies",
    "pipeline": "entry point: prove(), the stages in order",
    "plugin": "entry point: the pytest plugin in each witness process",
    "liars": "entry point: the liar decorator witnesses import",
    "request": "shared type: what was asked, what came out",
    "errors": "leaf: the error hierarchy",
    "statuses": "leaf: every status word",
    "project": "leaf: the roots and the program name",
    "files": "leaf: hashing, JSON-safe values",
    "inputs": "leaf: every file read is a regular file of sane size",
    "outputs": "leaf: no output replaces an input; atomic writes",
    "schemas": "leaf: a JSON-Schema problem in a user's file -> one sentence",
    "verdict": "the judge",
    "wording": "the judge: how a bound and its check read",
}


def test_top_of_harness_holds_only_entry_points_shared_types_leaves_and_the_judge():
    top = {p.stem for p in (ROOT / "harness").glob("*.py") if p.name != "__init__.py"}
    assert len(TOP_LEVEL) <= 20
    assert top - set(TOP_LEVEL) == set(), "a new module at the top of harness/: put it in its stage's package"
    assert set(TOP_LEVEL) - top == set(), "TOP_LEVEL lists modules that are gone: remove them"


def _crowded_stages(section: str) -> dict[str, list[str]]:
    """Stages of the map (SELECT, PLAN, ...) with three or more modules at the top of harness/."""
    harness_part = section[section.index("\nharness/") : section.index("\nimpl/")]
    stage, by_stage = "", {}
    for line in harness_part.splitlines():
        if re.match(r"^ [A-Z][A-Z ]+", line):
            stage = line.split("(")[0].strip()
        elif re.match(r"^  [a-z_]+\.py", line):
            by_stage.setdefault(stage, set()).update(re.findall(r"\b([a-z_]+)\.py", line.split("   ")[0]))
    skip = ("ENTRY", "SHARED")  # not stages: the entry points and the leaves every stage shares
    return {s: sorted(m) for s, m in by_stage.items() if len(m) >= 3 and not s.startswith(skip)}


def test_every_stage_of_three_or_more_modules_is_a_package():
    """The map groups the top of harness/ by stage; no stage may keep three modules there (issue 36)."""
    assert _crowded_stages(_layout_map()) == {}


def test_the_stage_rule_sees_a_crowded_stage():
    planted = "\nharness/   x\n SELECT\n  cards.py   a\n  refs.py suggest.py   b\n select/   c\n\nimpl/   y\n"
    assert _crowded_stages(planted) == {"SELECT": ["cards", "refs", "suggest"]}


MAX_FUNCTION_LINES = 80


def _long_functions(path: Path, text: str) -> list[str]:
    """Every function (nested ones too) of ``text`` longer than MAX_FUNCTION_LINES, as ``path:line name (n lines)``."""
    long = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                long.append(f"{path}:{node.lineno} {node.name} ({n} lines)")
    return long


def test_no_function_in_harness_is_longer_than_80_lines():
    """One step per function: a stage is a short pipeline of named steps (``pipeline.prove``), not one long body."""
    long = [
        f
        for path in sorted((ROOT / "harness").rglob("*.py"))
        for f in _long_functions(path.relative_to(ROOT), path.read_text(encoding="utf-8"))
    ]
    assert long == []


def test_the_length_rule_sees_a_long_function_and_passes_a_short_one():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))  # 81 lines with the def
    planted = f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body.replace('    ', '        ')}\n"
    assert _long_functions(Path("p.py"), planted) == ["p.py:6 long (81 lines)"]


def test_public_surface_is_declared_and_resolves():
    import harness

    assert set(harness.__all__) >= {"plugin", "prove", "RunRequest", "liar"}
    for name in harness.__all__:
        assert getattr(harness, name) is not None


def test_test_modules_have_unique_basenames_across_tests_and_witnesses():
    """pytest imports test modules by basename (rootdir, no packages): two test_x.py in tests/ and witnesses/
    make `pytest` fail at collection ("import file mismatch") on a fresh checkout."""
    names = [
        p.name
        for folder in ("tests", "witnesses")
        for p in (ROOT / folder).rglob("test_*.py")
        if "fixtures" not in p.relative_to(ROOT).parts
    ]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_the_run_request_hand_off_loads_no_stage():
    """``import harness.request`` (what the command line builds, what every stage reads) loads at most 10 harness
    modules and no stage's machinery: it loaded 51 and pytest before the circle was cut (issue 36)."""
    code = (
        "import sys, harness.request; print(sorted(m for m in sys.modules if m.split('.')[0] in ('harness', 'pytest')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = ast.literal_eval(out.stdout.strip())
    assert "pytest" not in loaded, loaded
    assert len(loaded) <= 10, loaded
    assert not any(m.startswith(("harness.select.cards", "harness.pipeline", "harness.mutation.stage")) for m in loaded)
