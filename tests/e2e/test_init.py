"""`kvproof init` in an empty folder, then `kvproof run`: a PROVEN card and a report, with no other step.

Also: an existing pyproject.toml without a [tool.kvproof] table keeps its text and gets the table; a folder
that is already a project, or holds a file init would write, is refused (exit 2, one line, nothing written).
"""

from __future__ import annotations

import json
import re

from test_guide_own_cache import env, kvproof  # noqa: F401 (env is a fixture)


def test_init_then_run_proves_the_example_card_and_writes_a_report(tmp_path, env):  # noqa: F811
    project = tmp_path / "fresh"
    project.mkdir()
    made = kvproof(project, env, "init")
    assert made.returncode == 0, made.stdout + made.stderr
    assert re.search(r"next: `(\S*/)?kvproof run`", made.stdout), made.stdout  # as called: runs as printed
    proc = kvproof(project, env, "run", "--json", "v.json", "-j", "1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (card,) = json.loads((project / "v.json").read_text())["cards"]
    assert card["id"] == "EXAMPLE-HANDLES" and card["verdict"] == "PROVEN", card["reason"]
    assert all(liar["caught"] for liar in card["liars"]) and card["liars"]
    assert any((p / "index.html").is_file() for p in (project / "reports").iterdir())
    again = kvproof(project, env, "init")
    assert again.returncode == 2 and "already a kvproof project" in again.stderr, again.stderr


def test_init_adds_the_table_to_an_existing_pyproject_and_refuses_to_overwrite(tmp_path, env):  # noqa: F811
    project = tmp_path / "mine"
    project.mkdir()
    original = '[project]\nname = "mine"\nversion = "1.2.3"\n'
    (project / "pyproject.toml").write_text(original)
    made = kvproof(project, env, "init")
    assert made.returncode == 0, made.stderr
    text = (project / "pyproject.toml").read_text()
    assert text.startswith(original) and '[tool.kvproof]\ntargets = ["example_kvproof:TARGET"]' in text

    other = tmp_path / "taken"
    (other / "witnesses").mkdir(parents=True)
    (other / "witnesses" / "conftest.py").write_text("# mine\n")
    refused = kvproof(other, env, "init")
    assert refused.returncode == 2 and "witnesses/conftest.py already exist" in refused.stderr, refused.stderr
    assert (other / "witnesses" / "conftest.py").read_text() == "# mine\n"
    assert not (other / "pyproject.toml").exists() and not (other / "obligations").exists()


def test_init_refuses_a_pyproject_that_is_no_regular_file_without_writing_anything(tmp_path):
    import os

    import pytest

    from harness.errors import UsageError
    from harness.select.scaffold import init_project

    for kind in ("fifo", "folder"):
        dest = tmp_path / kind
        dest.mkdir()
        if kind == "fifo":
            os.mkfifo(dest / "pyproject.toml")  # reading it would block forever
        else:
            (dest / "pyproject.toml").mkdir()
        with pytest.raises(UsageError, match="is not a regular file"):
            init_project(dest)
        assert sorted(p.name for p in dest.iterdir()) == ["pyproject.toml"], kind
