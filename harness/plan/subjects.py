"""Subjects: what a verdict is about. Here, impl under one configuration (``<cards dir>/configurations.yaml``).

A configuration is a named set of settings (environment variables such as
``KVPROOF_KERNEL=numpy`` or ``OMP_NUM_THREADS=4``) with the reason it
exists, the CPU features it needs, and whether its cells count for the gate.
``run --matrix [NAME ...]`` runs every selected card under every selected
configuration: each (card, configuration) is a *cell* with its own jobs,
verdict, binding and history. A cell's id is the card's id for the default
configuration (so a plain run and a matrix run share one history) and
``CARD@NAME`` for the others (:func:`cell_id`).

Before anything runs each configuration is *probed* (:func:`probe`): its CPU
features are checked against ``/proc/cpuinfo`` and the file's ``probe``
function (``module:function``, e.g. ``impl.linear:numerics_path``) is
called in a fresh interpreter under the configuration's settings. Its
result is the configuration's numerics line; an exception (a setting the
implementation refuses, a kernel build this CPU cannot execute) makes the
configuration *not runnable here*, a visible cell with the reason, never a
silent omission, and never a failed gate.

The file (schema: ``obligations/configurations.schema.json``)::

    probe: impl.linear:numerics_path
    configurations:
      - name: numpy
        reason: what every machine without a C compiler runs
        settings: {KVPROOF_KERNEL: numpy}

A malformed file is refused before anything runs (:class:`ConfigurationsInvalid`,
exit 2, each problem with its file, line, field and value).
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

import yaml

from harness.errors import CardInvalid, InputRefused, UsageError, YamlAliasRefused
from harness.inputs import HINTS_LIMIT, read_text
from harness.project import KVPROOF_HOME
from harness.select.problems import Problem, line_for, line_index, parse_yaml, schema_problems, short

FILENAME = "configurations.yaml"
SCHEMA_PATH = KVPROOF_HOME / "obligations" / "configurations.schema.json"
DEFAULT = "default"
SEPARATOR = "@"  # CARD@CONFIGURATION
PROBE_TIMEOUT_S = 300.0  # a probe may compile a kernel build


class ConfigurationsInvalid(CardInvalid):
    """The configurations file is malformed: every problem, each with file, line, field and value."""


@dataclass(frozen=True)
class Configuration:
    """One named configuration as the file declares it."""

    name: str
    reason: str
    settings: Mapping[str, str] = field(default_factory=dict)
    cpu: tuple[str, ...] = ()  # /proc/cpuinfo flags it needs (e.g. avx512f)
    required: bool = True  # its cells count for the gate when it is runnable here
    line: int = 0
    index: int = 0  # its place in the file's list (configurations[index])


@dataclass(frozen=True)
class Subject:
    """A configuration as probed on this machine: runnable or not (and why), and its numerics line."""

    name: str
    reason: str
    settings: Mapping[str, str]
    required: bool
    runnable: bool
    why_not: str = ""  # when not runnable: what this machine lacks or what the probe raised
    numerics: str | None = None
    known: Mapping[str, str] = field(default_factory=dict)  # a target's expected failures: card id -> reproduction
    invalid: tuple[tuple[str, str, str], ...] = ()  # (field, value, message): the configuration is wrong, not n/a
    drift: str = (
        ""  # a target whose known list was surveyed on another version: the note saying so (known.Survey.drift)
    )

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "reason": self.reason,
            "settings": dict(self.settings),
            "required": self.required,
            "runnable": self.runnable,
            "why_not": self.why_not,
            "numerics": self.numerics,
            "known": dict(self.known),
            "drift": self.drift,
        }


@dataclass(frozen=True)
class Configurations:
    probe: str | None
    items: tuple[Configuration, ...]
    path: Path | None = None

    def names(self) -> list[str]:
        return [c.name for c in self.items]

    def select(self, patterns: Sequence[str]) -> list[Configuration]:
        """The configurations ``patterns`` name (globs; none: all), default first; UsageError for a pattern
        that names none."""
        if not patterns:
            return list(self.items)
        chosen = [c for c in self.items if any(fnmatchcase(c.name, p) for p in patterns)]
        for p in patterns:
            if not any(fnmatchcase(c.name, p) for c in self.items):
                raise UsageError(
                    f"--matrix {p!r} names no configuration; the configurations are: {', '.join(self.names())}"
                )
        return sorted(chosen, key=lambda c: c.name != DEFAULT)


def cell_id(card_id: str, subject: str) -> str:
    """The id of (card, subject): the card's own id for the default subject, ``CARD@SUBJECT`` otherwise."""
    return card_id if subject == DEFAULT else f"{card_id}{SEPARATOR}{subject}"


def split(cell: str) -> tuple[str, str]:
    """(card id, subject) of a cell id."""
    card, sep, subject = cell.partition(SEPARATOR)
    return (card, subject) if sep else (card, DEFAULT)


def path_in(cards_dir: Path) -> Path:
    return cards_dir / FILENAME


def _schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def load(cards_dir: Path, root: Path) -> Configurations:
    """The configurations next to the cards; only ``default`` when there is no file. Raises
    ConfigurationsInvalid with every problem."""
    path = path_in(cards_dir)
    if not path.exists():
        return Configurations(None, (Configuration(DEFAULT, "the implementation as it runs by default"),))
    shown = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    if not path.is_file():
        raise ConfigurationsInvalid([Problem(shown, 0, "", "", "is not a regular file; make it a YAML file")])
    try:
        node, data = parse_yaml(read_text(path, HINTS_LIMIT))
    except InputRefused as exc:
        raise ConfigurationsInvalid([Problem(shown, 0, "", "", f"{exc.why}; replace it with the YAML file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationsInvalid([Problem(shown, 0, "", "", f"cannot read it: {exc}")]) from None
    except YamlAliasRefused as exc:
        msg = f"YAML aliases (*{exc.name}) are not allowed in the configurations; write the value out"
        raise ConfigurationsInvalid([Problem(shown, exc.line, "", f"*{exc.name}", msg)]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        msg = f"YAML syntax error: {getattr(exc, 'problem', exc)}; fix the YAML here"
        raise ConfigurationsInvalid([Problem(shown, line, "", "", msg)]) from None
    values, keys, dupes = line_index(node) if node is not None else ({}, {}, [])
    problems = [Problem(shown, ln, f, "", "appears twice; keep one") for f, ln in dupes]
    problems += schema_problems(data, shown, values, keys, schema=_schema())
    if problems:
        raise ConfigurationsInvalid(problems)
    items, seen = [], {}
    for i, entry in enumerate(data["configurations"]):
        line = line_for(values, ("configurations", i))
        name = entry["name"]
        if name in seen:
            problems.append(
                Problem(
                    shown,
                    line,
                    f"configurations[{i}].name",
                    short(name),
                    f"used twice (first at line {seen[name]}); give each configuration its own name",
                )
            )
            continue
        seen[name] = line
        settings = {k: str(v) for k, v in (entry.get("settings") or {}).items()}
        cpu = tuple(r.removeprefix("cpu:") for r in entry.get("requires", ()))
        items.append(Configuration(name, entry["reason"], settings, cpu, entry.get("required", True), line, i))
    if DEFAULT not in seen:
        problems.append(
            Problem(
                shown,
                0,
                "configurations",
                "",
                f"has no configuration named {DEFAULT!r}; add one (settings: {{}}): a plain run is about it",
            )
        )
    if problems:
        raise ConfigurationsInvalid(problems)
    return Configurations(data.get("probe"), tuple(items), path)


def cpu_flags() -> set[str] | None:
    """This CPU's feature flags from /proc/cpuinfo; None where there is no such file."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags") and ":" in line:
            return set(line.split(":", 1)[1].split())
    return set()


# The probe's own process: the project's probe function is called with os.environ replaced by a mapping that
# notes every name looked up (get, [], in), so a setting nobody reads -- a misspelt name -- is found. The result
# is one tagged JSON line, so a probe module that exits at import (sys.exit(0)) gives no result, not a success.
_PROBE_CODE = """\
import collections.abc, importlib, json, os, sys

class Reading(collections.abc.MutableMapping):
    def __init__(self, real):
        self.real, self.read = real, set()
    def __getitem__(self, key):
        self.read.add(key)
        return self.real[key]
    def __setitem__(self, key, value):
        self.real[key] = value
    def __delitem__(self, key):
        del self.real[key]
    def __iter__(self):
        return iter(self.real)
    def __len__(self):
        return len(self.real)
    def items(self):
        return self.real.items()
    def values(self):
        return self.real.values()
    def copy(self):
        return self.real.copy()

env = os.environ = Reading(os.environ)
try:
    fn = getattr(importlib.import_module(MODULE), FUNC)
    row = {"numerics": str(fn())}
except Exception as exc:
    row = {"error": f"{type(exc).__name__}: {exc}", "unavailable": bool(getattr(exc, "unavailable", False))}
row["read"] = sorted(k for k in env.read if isinstance(k, str))
sys.stdout.write("\\n" + TAG + json.dumps(row) + "\\n")
"""
PROBE_TAG = "kvproof-probe-result: "
SETTING_PREFIX = "KVPROOF_"  # the settings whose names the probe can check: the implementation reads them itself


def probe(cfg: Configuration, probe_ref: str | None, root: Path, python: str = sys.executable) -> Subject:
    """``cfg`` as this machine can run it (see the module docstring).

    Not runnable here (a visible n/a cell): a CPU feature it requires is missing, or the probe raised an
    exception marked ``unavailable = True`` (impl's :class:`~impl.errors.SettingUnavailable`). Invalid
    (:attr:`Subject.invalid`, refused before anything runs): the probe raised any other exception (a setting
    value the implementation refuses), ended without a result, or never read a ``KVPROOF_*`` setting the
    configuration sets (a misspelt name would otherwise prove the default configuration under another name).
    """
    flags = cpu_flags() if cfg.cpu else set()
    if cfg.cpu and flags is not None:
        missing = [f for f in cfg.cpu if f not in flags]
        if missing:
            why = f"this CPU lacks {', '.join(missing)}"
            return Subject(cfg.name, cfg.reason, cfg.settings, cfg.required, False, why)
    if not probe_ref:
        return Subject(cfg.name, cfg.reason, cfg.settings, cfg.required, True)
    module, _, func = probe_ref.partition(":")
    code = f"MODULE, FUNC, TAG = {module!r}, {func!r}, {PROBE_TAG!r}\n" + _PROBE_CODE
    env = {**os.environ, **cfg.settings, "PYTHONPATH": os.pathsep.join([str(root), str(KVPROOF_HOME)])}
    try:
        done = subprocess.run(
            [python, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Subject(cfg.name, cfg.reason, cfg.settings, cfg.required, False, f"the probe did not finish: {exc}")
    row = _probe_row(done.stdout)
    field = f"configurations[{cfg.index}]"
    if row is None:
        tail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1][:400]
        why = f"the probe {probe_ref} ended without a result (exit code {done.returncode}: {tail})"
        return _invalid(cfg, ((f"{field}.name", cfg.name, f"{why}; fix {module} so that {func}() returns"),))
    if "error" in row:
        if row.get("unavailable"):
            return Subject(cfg.name, cfg.reason, cfg.settings, cfg.required, False, str(row["error"])[:400])
        msg = f"the probe {probe_ref} refused it: {str(row['error'])[:400]}"
        return _invalid(cfg, ((f"{field}.settings", _shown_settings(cfg), msg),))
    unread = _unread(cfg, set(row.get("read", ())))
    if unread:
        return _invalid(cfg, unread)
    return Subject(cfg.name, cfg.reason, cfg.settings, cfg.required, True, "", str(row["numerics"]).strip() or None)


def _probe_row(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(PROBE_TAG):
            try:
                row = json.loads(line[len(PROBE_TAG) :])
            except json.JSONDecodeError:
                return None
            return row if isinstance(row, dict) else None
    return None


def _shown_settings(cfg: Configuration) -> str:
    return short(", ".join(f"{k}={v}" for k, v in cfg.settings.items()) or "{}")


def _unread(cfg: Configuration, read: set[str]) -> tuple[tuple[str, str, str], ...]:
    """(field, value, message) for each ``KVPROOF_*`` setting of ``cfg`` the probe never looked up."""
    known = sorted(n for n in read if n.startswith(SETTING_PREFIX))
    out = []
    for name, value in cfg.settings.items():
        if name.startswith(SETTING_PREFIX) and name not in read:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            out.append(
                (
                    f"configurations[{cfg.index}].settings.{name}",
                    short(value),
                    f"is a setting the implementation never reads (its probe looked up {', '.join(known) or 'none'})"
                    f"; {hint}a misspelt setting would prove the default configuration under another name",
                )
            )
    return tuple(out)


def _invalid(cfg: Configuration, problems: tuple[tuple[str, str, str], ...]) -> Subject:
    why = "; ".join(f"{f}: {m}" for f, _, m in problems)
    return Subject(cfg.name, cfg.reason, cfg.settings, cfg.required, False, why, invalid=problems)


def refuse_invalid(found: Configurations, probed: Sequence[Subject], root: Path) -> None:
    """ConfigurationsInvalid (exit 2) naming every invalid configuration's file, line, field and value."""
    bad = [s for s in probed if s.invalid]
    if not bad:
        return
    path = found.path
    shown = "" if path is None else (path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path))
    lines = {c.name: c.line for c in found.items}
    raise ConfigurationsInvalid(
        [
            Problem(
                shown,
                lines.get(s.name, 0),
                f,
                v,
                m + " (a configuration this machine cannot run is n/a; "
                "one that is invalid is an error: fix it or remove it)",
            )
            for s in bad
            for f, v, m in s.invalid
        ]
    )
