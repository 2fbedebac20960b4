"""C mutants, built before they run: each changed C file compiled once, by the project's own build hook.

A project puts a C file under mutation analysis by naming, in its
``pyproject.toml``, how a changed copy of it is built and loaded::

    [tool.kvproof.c-sources."impl/kernels.c"]
    build = "impl.kernels:build_source"  # text -> path of the built library; raises when it does not compile
    load = "impl.kernels:use_source"     # text -> undo(): this process runs the changed build until undo()

:func:`prebuild` (the mutation stage, before any C mutant runs) builds every
sampled C mutant through ``build`` in ``-j`` worker processes (the
project's own cache: a witness process that loads the mutant later finds
it built) and sorts them:

- does not compile: ``error`` (not scored), with the compiler's first line;
- compiles to the same bytes as the unchanged file: ``equivalent``, never
  run (trivial compiler equivalence, Papadakis et al., ICSE 2015: a change
  the compiler optimises away, or code in an ``#if`` branch this build
  leaves out, cannot change a result on this build);
- otherwise: run, as any mutant, in a witness process where
  :mod:`harness.mutation.swap` calls ``load`` (a hook that cannot load it,
  e.g. under a numpy fallback, makes the mutant ``error``: never a silent
  fallback).

Run as ``python -m harness.mutation.cbuild ROOT BUILD_HOOK`` it reads
``{"key", "text"}`` lines on stdin and writes one result line each
(:func:`_serve`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.mutation import cgen
from harness.project import KVPROOF_HOME

EQUIVALENT_SAME_CODE = "compiles to the same bytes as the unchanged file on this build (trivial compiler equivalence)"


@dataclass(frozen=True)
class Hooks:
    """How a C file's changed copies are built (parent side) and loaded (witness side): ``module:function``."""

    path: str
    build: str
    load: str


def hooks(root: Path) -> dict[str, Hooks]:
    """``[tool.kvproof.c-sources]`` of ``root/pyproject.toml``: C path -> its hooks ({} when none).

    UsageError (one paragraph naming the file, the entry and what is allowed) for a malformed entry.
    """
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{pyproject}: cannot be read as TOML ({exc}); fix it") from None
    table = data.get("tool", {}).get("kvproof", {}).get("c-sources", {})
    where = f"{pyproject}: [tool.kvproof.c-sources]"
    if not isinstance(table, dict):
        raise UsageError(f'{where} must be a table of C paths, e.g. [tool.kvproof.c-sources."impl/kernels.c"]')
    out = {}
    for path, entry in table.items():
        fields = entry if isinstance(entry, dict) else {}
        bad = [f for f in ("build", "load") if not (isinstance(fields.get(f), str) and ":" in fields[f].strip(":"))]
        if not isinstance(entry, dict) or bad or not path.endswith((".c", ".h")):
            raise UsageError(
                f"{where}.{json.dumps(path)} = {entry!r}: each entry is a C file (.c or .h, relative to the project "
                'root) with build = "module:function" (text -> the built library\'s path; raises when the text does '
                'not compile) and load = "module:function" (text -> undo); '
                + (f"{', '.join(bad)} missing or not module:function" if bad else "not a .c/.h path or not a table")
            )
        if not (root / path).is_file():
            raise UsageError(
                f"{where}.{json.dumps(path)}: no such file {root / path}; fix the path or remove the entry"
            )
        out[path] = Hooks(path, fields["build"], fields["load"])
    return out


def resolve(spec: str):
    """The function ``module:function`` names (imported now)."""
    import importlib

    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


# ---------------------------------------------------------------- parent side


@dataclass(frozen=True)
class Built:
    """What building one C mutant gave: ``ok`` (run it), ``same`` (equivalent: not run) or ``error``."""

    key: str
    status: str
    detail: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class BuildReport:
    results: Mapping[str, Built]
    wall_s: float
    cpu_s: float  # compile seconds summed over the mutants (cached ones cost ~0)


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(root), str(KVPROOF_HOME), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def prebuild(root: Path, mutants: Sequence, jobs: int, say=None) -> BuildReport:
    """Build every C mutant of ``mutants`` (:class:`~harness.mutation.generate.Mutant`) through its file's
    build hook, ``jobs`` at a time; each mutant's :class:`Built`, keyed by mutant key."""
    t0 = time.monotonic()
    by_file: dict[str, list] = {}
    for m in {m.key: m for m in mutants}.values():
        by_file.setdefault(m.path, []).append(m)
    if not by_file:
        return BuildReport({}, 0.0, 0.0)
    hk = hooks(root)
    results: dict[str, Built] = {}
    cpu = 0.0
    for path, ms in by_file.items():
        if path not in hk:
            for m in ms:
                why = f'no build hook for {path}: add [tool.kvproof.c-sources."{path}"] to pyproject.toml'
                results[m.key] = Built(m.key, "error", why)
            continue
        items = [{"key": "", "text": (root / path).read_text(encoding="utf-8")}]
        for m in ms:
            items.append({"key": m.key, "text": cgen.find(root, m.key)[1]})
        if say:
            say(f"mutate: building {len(ms)} C mutant(s) of {path} ({jobs} at a time) ...")
        original = _run_builder(root, hk[path].build, items[:1])[0]
        if original.get("error"):
            raise UsageError(
                f"{path} does not build through {hk[path].build} as it is: {original['error']}; fix the build "
                "before measuring its mutants"
            )
        chunks = [items[1 + i :: jobs] for i in range(max(1, jobs))]
        hook = hk[path].build
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
            done = [r for rows in ex.map(lambda c, h=hook: _run_builder(root, h, c), chunks) for r in rows]
        for r in done:
            cpu += r.get("seconds", 0.0)
            if r.get("error"):
                results[r["key"]] = Built(r["key"], "error", f"does not compile: {r['error']}", r["seconds"])
            elif r["sha256"] == original["sha256"]:
                results[r["key"]] = Built(r["key"], "same", EQUIVALENT_SAME_CODE, r["seconds"])
            else:
                results[r["key"]] = Built(r["key"], "ok", "", r["seconds"])
    return BuildReport(results, round(time.monotonic() - t0, 3), round(cpu, 3))


def _run_builder(root: Path, hook: str, items: Sequence[Mapping[str, str]]) -> list[dict]:
    if not items:
        return []
    proc = subprocess.run(
        [sys.executable, "-m", "harness.mutation.cbuild", str(root), hook],
        input="".join(json.dumps(i) + "\n" for i in items),
        capture_output=True,
        text=True,
        cwd=root,
        env=_env(root),
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(rows) != len(items):
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        got = {r["key"] for r in rows}
        lost = [i["key"] for i in items if i["key"] not in got]
        rows += [{"key": k, "error": f"the build process failed: {why}", "seconds": 0.0} for k in lost]
    return rows


# ---------------------------------------------------------------- the builder process


def _serve(root: Path, hook: str) -> int:
    build = resolve(hook)
    for line in sys.stdin:
        item = json.loads(line)
        t = time.monotonic()
        try:
            path = Path(build(item["text"]))
            row = {"key": item["key"], "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        except Exception as exc:  # noqa: BLE001 - a mutant that does not compile: its message is the result
            lines = str(exc).splitlines() or [""]
            first = next((ln for ln in lines if "error" in ln), lines[0])
            row = {"key": item["key"], "error": f"{type(exc).__name__}: {first.strip()[:300]}"}
        row["seconds"] = round(time.monotonic() - t, 3)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_serve(Path(sys.argv[1]), sys.argv[2]))


__all__ = ["EQUIVALENT_SAME_CODE", "BuildReport", "Built", "Hooks", "hooks", "prebuild", "resolve"]
