"""harness.project.project_root: KVPROOF_ROOT wins; else the nearest kvproof project above the working directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.project import KVPROOF_HOME, project_root


@pytest.fixture(autouse=True)
def no_root_env(monkeypatch):
    monkeypatch.delenv("KVPROOF_ROOT", raising=False)


def test_kvproof_root_wins_over_what_the_working_directory_would_find(tmp_path, monkeypatch):
    (tmp_path / "a" / "obligations").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    monkeypatch.setenv("KVPROOF_ROOT", str(tmp_path / "b"))
    assert project_root(tmp_path / "a") == (tmp_path / "b").resolve()


def test_kvproof_root_that_is_not_a_folder_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPROOF_ROOT", str(tmp_path / "missing"))
    with pytest.raises(UsageError, match="is not a folder"):
        project_root(tmp_path)


def test_the_nearest_folder_holding_obligations_is_found_from_deep_inside(tmp_path):
    deep = tmp_path / "proj" / "src" / "pkg"
    deep.mkdir(parents=True)
    (tmp_path / "proj" / "obligations").mkdir()
    assert project_root(deep) == (tmp_path / "proj").resolve()
    assert project_root(tmp_path / "proj") == (tmp_path / "proj").resolve()


def test_a_tool_kvproof_table_marks_a_root_nearer_than_an_obligations_folder_above_it(tmp_path):
    (tmp_path / "obligations").mkdir()
    inner = tmp_path / "sub"
    (inner / "deeper").mkdir(parents=True)
    (inner / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.kvproof]\n')
    assert project_root(inner / "deeper") == inner.resolve()


def test_a_pyproject_without_the_table_is_passed_over(tmp_path):
    (tmp_path / "obligations").mkdir()
    inner = tmp_path / "sub"
    inner.mkdir()
    (inner / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.ruff]\nline-length = 100\n')
    assert project_root(inner) == tmp_path.resolve()


def test_nothing_found_is_a_usage_error_naming_what_was_looked_for_and_the_fix(tmp_path):
    if any((p / "obligations").is_dir() or (p / "pyproject.toml").is_file() for p in tmp_path.parents):
        pytest.skip(f"a parent of {tmp_path} is itself a project")
    with pytest.raises(UsageError, match=r"no kvproof project at or above .*\[tool.kvproof\].*KVPROOF_ROOT"):
        project_root(tmp_path)


def test_an_unreadable_pyproject_on_the_way_up_is_a_usage_error_naming_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.kvproof\n")
    with pytest.raises(UsageError, match="pyproject.toml: cannot be read as TOML"):
        project_root(tmp_path)


def test_the_checkout_finds_itself_from_its_own_folders():
    assert project_root(KVPROOF_HOME / "witnesses" / "liars") == KVPROOF_HOME
    assert project_root() == KVPROOF_HOME or Path.cwd().resolve() != KVPROOF_HOME


def test_the_cli_runs_on_the_project_it_is_started_in_without_kvproof_root(tmp_path):
    """run_obligations.py list from a subfolder of a copied fixture project lists that project's cards; from a
    folder that is no project it exits 2 with the usage error."""
    fixture = KVPROOF_HOME / "tests" / "fixtures" / "project"
    project = tmp_path / "proj"
    shutil.copytree(fixture, project, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    env = {k: v for k, v in os.environ.items() if k not in ("KVPROOF_ROOT", "KVPROOF_CARDS_DIR")}
    entry = str(KVPROOF_HOME / "run_obligations.py")
    out = subprocess.run(
        [sys.executable, entry, "list"], cwd=project / "witnesses", env=env, capture_output=True, text=True, timeout=60
    )
    cards = sorted(p.stem for p in (project / "obligations").glob("*.yaml"))
    assert out.returncode == 0, out.stderr
    assert cards and all(c in out.stdout for c in cards)
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    if any((p / "obligations").is_dir() or (p / "pyproject.toml").is_file() for p in nowhere.parents):
        return
    out = subprocess.run([sys.executable, entry, "list"], cwd=nowhere, env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "no kvproof project at or above" in out.stderr + out.stdout
