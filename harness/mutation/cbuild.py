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
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.mutation import cgen, cschema
from harness.project import KVPROOF_HOME

EQUIVALENT_SAME_CODE = "compiles to the same bytes as the unchanged file on this build (trivial compiler equivalence)"


@dataclass(frozen=True)
class Hooks:
    """How a C file's changed copies are built (parent side) and loaded (witness side): ``module:function``;
    ``preprocess`` (optional): text -> the text the build compiles after the C preprocessor."""

    path: str
    build: str
    load: str
    preprocess: str = ""


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
        pre = fields.get("preprocess", "")
        if not (isinstance(pre, str) and (pre == "" or ":" in pre.strip(":"))):
            raise UsageError(f'{where}.{json.dumps(path)}.preprocess = {pre!r}: expected "module:function" or nothing')
        out[path] = Hooks(path, fields["build"], fields["load"], pre)
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


def prebuild(root: Path, mutants: Sequence, jobs: int, say=None, schema: bool = True) -> BuildReport:
    """Build every C mutant of ``mutants`` (:class:`~harness.mutation.keys.Mutant`) through its file's hooks;
    each mutant's :class:`Built`, keyed by mutant key.

    Per file, ``schema`` (the default): with a ``preprocess`` hook, a mutant absent from the preprocessed file
    is ``same`` (not in this build); the rest go into one mutant schema
    (:mod:`harness.mutation.cschema`), built once; a mutant the compiler refuses there (it names the
    line), or one in a place C needs a constant, is built alone, ``jobs`` at a time (``schema=False``: every
    mutant alone), and compared with the unchanged file's build (same bytes: ``same``; no build: ``error``).
    """
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
        h = hk[path]
        raw = (root / path).read_bytes()
        eds = cgen.edits(root, path, [m.key for m in ms])
        alone = [k for k in (m.key for m in ms) if k not in eds]  # (the file changed: find() will say so)
        todo = list(eds.values())
        if h.preprocess and schema:  # (the reference path, schema=False, compares each build's bytes instead)
            text, ids = cschema.render(raw, todo)
            row = _run_builder(root, h.preprocess, [{"key": "", "text": text.decode(), "op": "preprocess"}])[0]
            if row.get("error"):
                raise UsageError(f"{path} does not preprocess through {h.preprocess}: {row['error']}")
            present = {int(n) for n in re.findall(rf"\b{cschema.SWITCH} == (\d+)\b", row["text"])}
            for e in todo:
                if ids[e.mutant.key] not in present:
                    results[e.mutant.key] = Built(e.mutant.key, "same", NOT_IN_BUILD)
            todo = [e for e in todo if e.mutant.key not in results]
        if schema:
            placed, t_schema = _schema(root, path, h, raw, [e for e in todo if not e.constant], say)
            cpu += t_schema
            for key in placed:
                results[key] = Built(key, "ok", "in the run's mutant schema")
            alone += [e.mutant.key for e in todo if e.mutant.key not in placed]
        else:
            alone += [e.mutant.key for e in todo]
        if alone:
            done, t_alone = _alone(root, path, h, alone, jobs, say)
            cpu += t_alone
            results.update(done)
    return BuildReport(results, round(time.monotonic() - t0, 3), round(cpu, 3))


NOT_IN_BUILD = (
    "not in this build: the preprocessor leaves its code out (an #if branch of another build, or a macro never "
    "expanded), so it compiles to the unchanged bytes (trivial compiler equivalence)"
)
SCHEMA_TRIES = 8  # schema builds at most: each failure names lines, whose mutants are built alone


def _schema(root: Path, path: str, h: Hooks, raw: bytes, todo: list, say) -> tuple[set[str], float]:
    """Build ``todo`` (edits) as one schema, leaving out those the compiler refuses; (keys placed, seconds)."""
    cpu = 0.0
    for _ in range(SCHEMA_TRIES):
        if not todo:
            return set(), cpu
        text, ids = cschema.render(raw, todo)
        if say:
            say(f"mutate: building one schema of {len(todo)} C mutant(s) of {path} ...")
        row = _run_builder(root, h.build, [{"key": "", "text": text.decode(), "op": "build"}])[0]
        cpu += row.get("seconds", 0.0)
        if not row.get("error"):
            _index(root, path, text, ids, todo)
            return set(ids), cpu
        lines = _error_lines(row.get("message", ""))
        keep = [e for e in todo if not any(e.lines[0] <= n <= e.lines[1] for n in lines)]
        if len(keep) == len(todo):  # the compiler named no line a mutant stands on: build them all alone
            return set(), cpu
        todo = keep
    return set(), cpu


def _error_lines(message: str) -> set[int]:
    """Lines of the compiled file an error points at: the error's own place and the places its inlining or
    macro expansion came from (system headers left out)."""
    out: set[int] = set()
    context: list[int] = []
    for line in message.splitlines():
        places = [int(n) for f, n in re.findall(r"([\w./-]+\.[ch]):(\d+):\d+", line) if not f.startswith("/usr/")]
        if line.startswith("In function") or (line and not line[0].isspace() and "inlined from" not in line):
            context = [] if "error" not in line else context
        if "inlined from" in line or "in expansion of macro" in line or "In function" in line:
            context += places
        if ": error:" in line:
            out.update(places + context)
            context = []
    return out


def _alone(root: Path, path: str, h: Hooks, keys: list[str], jobs: int, say) -> tuple[dict[str, Built], float]:
    """Each mutant built alone, ``jobs`` at a time, compared with the unchanged file's build."""
    items = [{"key": k, "text": cgen.find(root, k)[1], "op": "build"} for k in keys]
    if say:
        say(f"mutate: building {len(items)} C mutant(s) of {path} one by one ({jobs} at a time) ...")
    original = _run_builder(root, h.build, [{"key": "", "text": (root / path).read_text(encoding="utf-8")}])[0]
    if original.get("error"):
        raise UsageError(
            f"{path} does not build through {h.build} as it is: {original['error']}; fix the build before "
            "measuring its mutants"
        )
    chunks = [items[i::jobs] for i in range(max(1, jobs))]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        done = [r for rows in ex.map(lambda c: _run_builder(root, h.build, c), chunks) for r in rows]
    out, cpu = {}, 0.0
    for r in done:
        cpu += r.get("seconds", 0.0)
        if r.get("error"):
            out[r["key"]] = Built(r["key"], "error", f"does not compile: {r['error']}", r["seconds"])
        elif r["sha256"] == original["sha256"]:
            out[r["key"]] = Built(r["key"], "same", EQUIVALENT_SAME_CODE, r["seconds"])
        else:
            out[r["key"]] = Built(r["key"], "ok", "", r["seconds"])
    return out, cpu


# ---------------------------------------------------------------- where a witness finds a mutant's schema


def index_dir(root: Path) -> Path:
    """Where the schemata of ``root``'s C mutants and the index from a mutant to its schema and switch live."""
    return root / ".cache" / "kvproof-c-schemata"


def _entry(root: Path, path: str, mutant_text: str) -> Path:
    return index_dir(root) / (hashlib.sha256(f"{path}\0{mutant_text}".encode()).hexdigest()[:40] + ".json")


def _index(root: Path, path: str, text: bytes, ids: Mapping[str, int], todo: Sequence) -> None:
    """Record, for each mutant's own text, the schema that computes it and its switch value (content-addressed:
    an entry stays true for as long as its files exist); entries older than a week are removed."""
    folder = index_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    schema = folder / (hashlib.sha256(text).hexdigest()[:40] + ".c")
    if not schema.exists():
        tmp = schema.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(text)
        os.replace(tmp, schema)
    for e in todo:
        entry = _entry(root, path, cgen.find(root, e.mutant.key)[1])
        tmp = entry.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"schema": schema.name, "switch": ids[e.mutant.key]}))
        os.replace(tmp, entry)
    now = time.time()
    for old in folder.iterdir():
        try:
            if now - old.stat().st_mtime > 7 * 24 * 3600:
                old.unlink()
        except OSError:
            continue


def schema_for(root: Path, path: str, mutant_text: str) -> tuple[str, dict[str, int]] | None:
    """(schema text, switches) that compute the mutant whose file text is ``mutant_text``; None: build it alone."""
    entry = _entry(root, path, mutant_text)
    try:
        data = json.loads(entry.read_text())
        text = (index_dir(root) / data["schema"]).read_text(encoding="utf-8")
    except (OSError, ValueError, KeyError):
        return None
    return text, {cschema.SWITCH: int(data["switch"])}


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
    """The builder process: each stdin line ``{"key", "text", "op"}`` -> one stdout line: ``op`` "build" (the
    default): ``{"key", "sha256"}`` of the built library, or ``{"key", "error", "message"}`` (the first error
    line; the whole message); "preprocess": ``{"key", "text"}``."""
    fn = resolve(hook)
    for line in sys.stdin:
        item = json.loads(line)
        t = time.monotonic()
        try:
            if item.get("op") == "preprocess":
                row = {"key": item["key"], "text": fn(item["text"])}
            else:
                path = Path(fn(item["text"]))
                row = {"key": item["key"], "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        except Exception as exc:  # noqa: BLE001 - a mutant that does not compile: its message is the result
            lines = str(exc).splitlines() or [""]
            first = next((ln for ln in lines if "error" in ln), lines[0])
            row = {"key": item["key"], "error": f"{type(exc).__name__}: {first.strip()[:300]}", "message": str(exc)}
        row["seconds"] = round(time.monotonic() - t, 3)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_serve(Path(sys.argv[1]), sys.argv[2]))


__all__ = [
    "EQUIVALENT_SAME_CODE",
    "NOT_IN_BUILD",
    "BuildReport",
    "Built",
    "Hooks",
    "hooks",
    "index_dir",
    "prebuild",
    "resolve",
    "schema_for",
]
