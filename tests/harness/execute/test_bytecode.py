"""Stale bytecode never runs in a witness process: a source edited within the second its .pyc was written, to the
same size, would otherwise keep the old code (Python checks whole-second mtime and size; so does pytest's rewrite
cache), and the verdict would be bound to bytes that never ran."""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.execute.bytecode import drop_ambiguous, source_of


def _layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    root, prefix = tmp_path / "project", tmp_path / "prefix"
    (root / "pkg").mkdir(parents=True)
    source = root / "pkg" / "m.py"
    source.write_text("x = 1\n")
    mirror = prefix / root.resolve().relative_to(root.resolve().anchor)
    return root, prefix, mirror


def test_a_pyc_written_in_the_second_its_source_was_edited_is_dropped_and_a_later_one_kept(tmp_path):
    root, prefix, mirror = _layout(tmp_path)
    source = root / "pkg" / "m.py"
    (mirror / "pkg").mkdir(parents=True)
    same = mirror / "pkg" / "m.cpython-311.pyc"  # the import system's name under a prefix
    rewritten = mirror / "pkg" / "m.cpython-311-pytest-8.3.5.pyc"  # pytest's rewrite cache under a prefix
    later = mirror / "pkg" / "__pycache__" / "n.cpython-311.pyc"
    (root / "pkg" / "n.py").write_text("y = 2\n")
    later.parent.mkdir()
    for pyc in (same, rewritten, later):
        pyc.write_bytes(b"stale")
    t = 1_700_000_000
    os.utime(source, (t + 0.2, t + 0.2))
    os.utime(same, (t + 0.9, t + 0.9))  # same second as the edit: ambiguous
    os.utime(rewritten, (t - 5, t - 5))  # before the edit
    os.utime(root / "pkg" / "n.py", (t, t))
    os.utime(later, (t + 2, t + 2))  # well after its source: trusted
    assert drop_ambiguous(prefix, root) == 2
    assert not same.exists() and not rewritten.exists() and later.exists()
    assert source_of(later, mirror, root.resolve()) == root.resolve() / "pkg" / "n.py"


def test_libraries_and_caches_inside_the_project_are_left_alone(tmp_path):
    root, prefix, mirror = _layout(tmp_path)
    lib = mirror / ".venv" / "lib" / "x.cpython-311.pyc"
    lib.parent.mkdir(parents=True)
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "lib" / "x.py").write_text("z = 3\n")
    lib.write_bytes(b"lib")
    os.utime(lib, (1, 1))
    assert drop_ambiguous(prefix, root) == 0 and lib.exists()
    assert drop_ambiguous(tmp_path / "no-such-prefix", root) == 0


def test_a_same_size_edit_in_the_same_second_is_what_the_next_run_proves(tmp_path):
    """End to end: the witnesses pass, then add() is broken to the same size within the same second; the next run
    must run the broken add (the stale bytecode passed before)."""
    from test_hostile_witnesses import _copy_project, _run

    root = _copy_project(tmp_path / "project")
    first = _run(root, "run", "FX-ADD", "--no-liars", "-j", "1", "--json", "v.json")
    (card,) = json.loads((root / "v.json").read_text())["cards"]
    assert card["counts"]["witnesses_passed"] == card["counts"]["witnesses_total"], first.stdout + first.stderr
    arith = root / "fakeimpl" / "arith.py"
    before = arith.stat()
    text = arith.read_text()
    assert "return a + b" in text
    arith.write_text(text.replace("return a + b", "return a - b", 1))
    assert arith.stat().st_size == before.st_size
    pyc = next((root / ".cache" / "pycache").rglob("arith.cpython-*.pyc"))
    os.utime(arith, (before.st_atime, before.st_mtime))  # the edit lands in the same second as before
    os.utime(pyc, (before.st_mtime, before.st_mtime))  # and the bytecode was written in that second
    second = _run(root, "run", "FX-ADD", "--no-liars", "-j", "1", "--json", "v.json")
    (card,) = json.loads((root / "v.json").read_text())["cards"]
    assert card["verdict"] == "FAILED", second.stdout + second.stderr
