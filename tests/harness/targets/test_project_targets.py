"""A project's own targets (``[tool.kvproof] targets`` in its pyproject.toml, harness/targets/pyproject.py): loaded,
selected by default in its witness processes, and refused up front, one paragraph each, when an entry is wrong;
``validate`` also checks obligations/targets.yaml (schema, registered targets, reproduction files)."""

from __future__ import annotations

import itertools
import json
import re
import sys
import textwrap
from pathlib import Path

import pytest
from test_guide_own_cache import env, kvproof, make_project  # noqa: F401 (env: a fixture)

from harness.targets import pyproject, registry
from harness.targets.pyproject import ProjectTargetsInvalid

COUNTER = itertools.count()

ADAPTER = """
from harness.targets.own import TARGETS as OWN
from harness.targets.protocol import Target

def build(geometry, batch, window, capacity, trace=None):
    return OWN["reference"].make(geometry, batch, window, capacity)

def target(name):
    return Target(name, "a list of rows", "mycache", frozenset({"append", "read", "truncate", "mask"}),
                  OWN["reference"].numerics, (), build)
"""


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    """Each test's sys.path and registry project are its own; nothing cached survives it."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(registry, "_root", [])
    monkeypatch.delenv("KVPROOF_ROOT", raising=False)
    monkeypatch.delenv("KVPROOF_TARGETS", raising=False)
    pyproject.forget()
    yield
    pyproject.forget()


def write_project(root: Path, body: str, entries: str, table: str = "") -> str:
    """A project at ``root`` whose adapter module (a fresh name) ends with ``body``; returns the module's name."""
    name = f"adapter_{next(COUNTER)}"
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{name}.py").write_text(ADAPTER + textwrap.dedent(body))
    targets = entries.replace("MOD", name)
    (root / "pyproject.toml").write_text(f'[project]\nname = "x"\n\n[tool.kvproof]\ntargets = {targets}\n{table}')
    return name


def test_declared_targets_load_from_the_root_without_installing_and_become_the_default_selection(tmp_path):
    write_project(tmp_path, 'A = target("mycache")\nB = {"mycache.big": target("mycache.big")}\n', '["MOD:A", "MOD:B"]')
    found = pyproject.load(tmp_path, registry.TARGETS)
    assert list(found) == ["mycache", "mycache.big"]
    registry.use_project(tmp_path)
    assert [t.name for t in registry.select()] == ["mycache", "mycache.big"]  # default: the group project
    assert [t.name for t in registry.select("mycache.*")] == ["mycache.big"]
    assert registry.select("own") == tuple(registry.TARGETS[n] for n in registry.GROUPS["own"])
    assert set(registry.groups()["all"]) == set(registry.TARGETS) | {"mycache", "mycache.big"}
    registry.use_project(None)
    assert registry.default() == "own" and "mycache" not in registry.targets()


@pytest.mark.parametrize(
    ("body", "entries", "table", "says"),
    [
        ("", '"MOD:A"', "", r"targets = 'adapter_\d+:A': must be a list of strings"),
        ("", '["MOD"]', "", r"targets\[0\] = 'adapter_\d+': is not 'module:NAME'"),
        (
            "",
            '["nowhere_at_all:A"]',
            "",
            r"raised ModuleNotFoundError.*put nowhere_at_all\.py \(or its package\) in the project root",
        ),
        ("raise RuntimeError('boom')\n", '["MOD:A"]', "", r"raised RuntimeError: boom; fix adapter_\d+ so that"),
        ("", '["MOD:A"]', "", r"has no attribute 'A'; name the Target"),
        ("A = 3\n", '["MOD:A"]', "", r"adapter_\d+\.A is a int, not a Target"),
        ("A = [target('x'), 3]\n", '["MOD:A"]', "", r"is a list holding a int, not a Target"),
        ("A = {'y': target('x')}\n", '["MOD:A"]', "", r"\['y'\] is the target named 'x': a dict's keys must be"),
        ("A = target('impl.mine')\n", '["MOD:A"]', "", r"named 'impl.mine', which is under a prefix kvproof keeps"),
        ("A = target('reference')\n", '["MOD:A"]', "", r"named 'reference', which is a built-in target's name"),
        ("A = target('project')\n", '["MOD:A"]', "", r"named 'project', which is a group's name"),
        ("A = target('My Cache')\n", '["MOD:A"]', "", r"named 'My Cache', which is not allowed: a name is lowercase"),
        ("A = target('a')\n", '["MOD:A", "MOD:A"]', "", r"targets\[1\].*named 'a', which targets\[0\] = .* already"),
        ("A = target('a')\n", '["MOD:A"]', "target = 1\n", r"target = 1: is not a \[tool.kvproof\] setting; the"),
    ],
)
def test_a_bad_entry_is_one_paragraph_naming_the_file_field_value_and_fix(tmp_path, body, entries, table, says):
    write_project(tmp_path, body, entries, table)
    with pytest.raises(ProjectTargetsInvalid) as info:
        pyproject.load(tmp_path, registry.TARGETS)
    text = str(info.value)
    assert text.startswith(f"{tmp_path / 'pyproject.toml'}: [tool.kvproof] ")
    assert "\n" not in text and "Traceback" not in text
    assert re.search(says, text), text


def test_validate_lists_a_bad_entry_and_run_refuses_it_before_anything_runs(tmp_path, env):  # noqa: F811
    root = make_project(tmp_path / "toy")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("toycache_kvproof:TARGET", "toycache_kvproof:TARGETS"))
    check = kvproof(root, env, "validate")
    assert check.returncode == 2, check.stdout + check.stderr
    assert "pyproject.toml: [tool.kvproof] targets[0]='toycache_kvproof:TARGETS': module toycache_kvproof" in (
        check.stdout
    )
    assert "has no attribute 'TARGETS'" in check.stdout and "Traceback" not in check.stdout + check.stderr
    run = kvproof(root, env, "run", "-j", "1")
    assert run.returncode == 2 and "kvproof: error: " in run.stderr and "has no attribute 'TARGETS'" in run.stderr
    assert "Traceback" not in run.stderr and not (root / "reports").exists()  # refused before the first witness


KNOWN = """\
format: kvproof-targets
version: 1
targets:
  {target}:
    surveyed: toycache==0.1.0
    known:
      - finding: refuses-crop-0
        card: TOY-TRUNCATE
        witness: keeps-first-n
        test: witnesses/test_toycache.py::test_truncate_keeps_exactly_the_first_n
        class: toycache.KVCache
        claim: truncate(len) keeps everything.
        backing: KVCache.truncate's docstring.
        reproduction: {repro}
"""


@pytest.mark.parametrize(
    ("target", "repro", "says"),
    [
        ("toycache", "known/refuses.py", ""),
        ("toycash", "known/refuses.py", "targets/toycash: target='toycash' is not a target; did you mean toycache?"),
        (
            "toycache",
            "known/missing.py",
            "targets/toycache/known/0/reproduction: 'known/missing.py' is not a file inside",
        ),
        ("Toy Cache", "known/refuses.py", "targets: 'Toy Cache' does not match"),
    ],
)
def test_validate_checks_targets_yaml_names_registered_targets_and_existing_reproductions(
    tmp_path,
    env,  # noqa: F811
    target,
    repro,
    says,
):
    root = make_project(tmp_path / "toy")
    (root / "known").mkdir()
    (root / "known" / "refuses.py").write_text("raise SystemExit(1)\n")
    (root / "obligations" / "targets.yaml").write_text(KNOWN.format(target=f"'{target}'", repro=repro))
    check = kvproof(root, env, "validate")
    if not says:
        assert check.returncode == 0, check.stdout + check.stderr
        return
    assert check.returncode == 2, check.stdout + check.stderr
    assert f"obligations/targets.yaml: {says}" in check.stdout, check.stdout
    assert "Traceback" not in check.stdout + check.stderr


def test_run_target_project_proves_the_cards_tagged_targets_on_each_project_target(tmp_path, env):  # noqa: F811
    """``kvproof run --target project``: a TOY-TRUNCATE@toycache cell beside the plain run (its own target gates);
    TOY-READBACK, not tagged ``targets``, has no cell there (shown as such, also in index.html)."""
    root = make_project(tmp_path / "toy")
    card = root / "obligations" / "TOY-TRUNCATE.yaml"
    card.write_text(card.read_text().replace("tags: [toycache]", "tags: [toycache, targets]"))
    proc = kvproof(root, env, "run", "--target", "project", "--json", "v.json", "-j", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((root / "v.json").read_text())
    assert {c["id"]: c["verdict"] for c in doc["cards"]} == {
        "TOY-READBACK": "PROVEN",
        "TOY-TRUNCATE": "PROVEN",
        "TOY-TRUNCATE@toycache": "PROVEN",
    }
    page = next(p for p in (root / "reports").iterdir() if not p.is_symlink() and p.is_dir()) / "index.html"
    assert "the card has no cell under this subject" in page.read_text()


class Custom(BaseException):
    pass


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("import sys\nsys.exit(0)\n", r"called sys\.exit\(0\)"),
        ("import sys\nsys.exit()\n", r"called sys\.exit\(None\)"),
        ("exit(0)\n", r"called sys\.exit\(0\)"),
        ("quit()\n", r"called sys\.exit\(None\)"),
        ("raise SystemExit(1)\n", r"called sys\.exit\(1\)"),
        ("import os\nos._exit(0)\n", r"called os\._exit\(0\)"),
        ("import posix\nposix._exit(0)\n", r"called os\._exit\(0\)"),
        ("raise GeneratorExit()\n", r"raised GeneratorExit"),
        ("class Stop(BaseException):\n    pass\nraise Stop('halt')\n", r"raised Stop: halt"),
        ("import sys\nif True:\n    A = target('a')\n    sys.exit(0)\n", r"called sys\.exit\(0\)"),
    ],
)
def test_a_module_that_ends_the_interpreter_at_import_is_an_error_naming_it(tmp_path, body, says):
    name = write_project(tmp_path, body, '["MOD:A"]')
    with pytest.raises(ProjectTargetsInvalid) as info:
        pyproject.load(tmp_path, registry.TARGETS)
    text = str(info.value)
    assert f"importing {name} " in text and "may not end the run" in text and '__name__ == "__main__"' in text, text
    assert re.search(says, text), text
    assert "\n" not in text
    import os

    assert os._exit.__module__ in ("posix", "nt") and os._exit.__name__ == "_exit"  # restored


def test_an_exit_handler_registered_at_import_runs_guarded_and_cannot_replace_the_exit_code(tmp_path, env):  # noqa: F811
    root = make_project(tmp_path / "toy")
    module = next(p for p in root.glob("*.py") if "TARGET" in p.read_text())
    module.write_text(
        module.read_text()
        + "\nimport atexit, os\natexit.register(os._exit, 0)\n"
        + "@atexit.register\ndef _bye():\n    raise SystemExit(0)\n"
    )
    for args in (("run", "NO-SUCH-CARD"), ("run", "--target", "no-such-target")):
        proc = kvproof(root, env, *args)
        assert proc.returncode == 2, (args, proc.returncode, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert "an exit handler registered by importing" in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", [("run", "-j", "1"), ("validate",), ("run", "--target", "project", "-j", "1")])
def test_run_and_validate_of_a_project_whose_adapter_exits_at_import_exit_2_with_one_paragraph(
    tmp_path,
    env,  # noqa: F811
    command,
):
    root = make_project(tmp_path / "toy")
    module = next(p for p in root.glob("*.py") if "TARGET" in p.read_text())
    module.write_text("import sys\nsys.exit(0)\n" + module.read_text())
    proc = kvproof(root, env, *command)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, (command, proc.returncode, text)
    assert "called sys.exit(0)" in text and "Traceback" not in text, text
    assert not (root / "reports").exists()
