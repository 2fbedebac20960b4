"""Where what a witness process wrote enters the runner: its event stream, pytest's account, its output tails.

Everything a witness process writes is untrusted text: a node id with a
file name that is not UTF-8, an assertion message carrying ``\\x1b[2J``, a
50 MB failure, evidence holding a list of two million floats, a line that is
not an event at all. It is read here and nowhere else, and made safe here
once (:mod:`harness.wire.safetext`), before anything is judged, recorded or
shown:

- an event line is decoded leniently (bytes that are not UTF-8 become
  escapes), checked (every field of the type the wire says) and made safe:
  names (node ids, evidence keys, locations) one line and at most
  :data:`~harness.wire.safetext.NAME_LIMIT` characters, a message one line, a
  failure or collection error at most :data:`~harness.wire.safetext.TEXT_LIMIT`,
  each evidence value at most :data:`~harness.wire.safetext.VALUE_LIMIT` bytes of
  JSON (:func:`harness.wire.safetext.safe_evidence`). A line that is not a
  well-formed event is kept aside (:attr:`EventTail.unreadable`): the
  process's "passed" results are then not believed
  (:func:`harness.execute.watch.execute`).
- pytest's account (:class:`harness.wire.messages.Account`): its node ids made
  safe exactly as the events' are, so the two accounts still meet.
- the tail of a process's log or of the stacks ``faulthandler`` wrote.

Bounds are judged after this, on the values as recorded: a bound on a value
replaced by the clipped marker cannot be judged (:func:`harness.verdict.check_bound`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from harness.statuses import Outcome
from harness.wire import messages
from harness.wire.messages import NodeResult
from harness.wire.safetext import (
    KEYS_LIMIT,
    NAME_LIMIT,
    TEXT_LIMIT,
    safe_evidence,
    safe_line,
    safe_name,
    safe_text,
    safe_value,
)

NODE_OUTCOMES = frozenset({Outcome.PASSED, Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED})
# NodeResult's text fields and how each is made safe; any other str field is multi-line text
_NODE_TEXT = {"nodeid": safe_name, "message": safe_line, "failure": safe_text, "location": safe_name}


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(f"not a well-formed event: {what}")


def _mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping of a field we do not know field by field (the Hypothesis run): keys as names, texts
    multi-line, nested mappings likewise, anything else within the value limit."""
    out: dict[str, Any] = {}
    for k, v in list(value.items())[:KEYS_LIMIT]:
        out[safe_name(k)] = _field(v)
    return out


def _field(value: Any) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, Mapping):
        return _mapping(value)
    if isinstance(value, list | tuple):
        return type(value)(safe_value(x) for x in value[:KEYS_LIMIT])
    return safe_value(value)


PROPERTY_RUNS_LIMIT = 1000  # Hypothesis property runs one node may report; more is not a witness's work


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _property_runs(runs: Any) -> tuple[messages.PropertyRun, ...]:
    """The examples each Hypothesis property ran, checked field by field (the judge compares them with the
    profile's budget); never clipped: a run left out could be the one that ran short of it."""
    _need(isinstance(runs, tuple) and len(runs) <= PROPERTY_RUNS_LIMIT, "result: examples is not a short list")
    out = []
    for r in runs:
        _need(isinstance(r, messages.PropertyRun), "result: examples holds something else than property runs")
        _need(_count(r.ran) and _count(r.explicit), "result: examples: ran or explicit is not a count")
        _need(r.max_examples is None or _count(r.max_examples), "result: examples: max_examples is not a count")
        _need(r.generate is None or isinstance(r.generate, bool), "result: examples: generate is not true or false")
        _need(isinstance(r.exhausted, bool), "result: examples: exhausted is not true or false")
        out.append(replace(r, property=safe_name(r.property)))
    return tuple(out)


def _result(r: NodeResult) -> NodeResult:
    _need(isinstance(r.nodeid, str) and bool(r.nodeid), "result: nodeid is not a text")
    _need(r.outcome in NODE_OUTCOMES, f"result: outcome={safe_line(r.outcome, 40)}")
    _need(_number(r.duration) and math.isfinite(r.duration), "result: duration is not a number")
    _need(isinstance(r.evidence, Mapping), "result: evidence is not an object")
    _need(r.hypothesis is None or isinstance(r.hypothesis, Mapping), "result: hypothesis is not an object")
    changes: dict[str, Any] = {}
    for f in fields(r):
        value = getattr(r, f.name)
        if f.name == "outcome":
            changes[f.name] = Outcome(value)
        elif f.name == "evidence":
            changes[f.name] = safe_evidence(value)
        elif f.name in _NODE_TEXT:
            changes[f.name] = _NODE_TEXT[f.name](value)
        elif f.name == "examples":
            changes[f.name] = _property_runs(value)
        elif value is not None:
            changes[f.name] = _field(value)
    return replace(r, **changes)


def clean(event: messages.Event) -> messages.Event:
    """``event`` with every field checked and every text made safe; ValueError when it is not well formed."""
    if isinstance(event, messages.NodeFinished):
        return messages.NodeFinished(_result(event.result))
    if isinstance(event, messages.NodeStarted):
        _need(isinstance(event.nodeid, str), "start: nodeid is not a text")
        _need(_number(event.timeout), "start: timeout is not a number")
        return messages.NodeStarted(safe_name(event.nodeid), float(event.timeout))
    if isinstance(event, messages.CollectError):
        return messages.CollectError(safe_name(event.nodeid), safe_text(event.text))
    if isinstance(event, messages.LiarApplied):
        _need(isinstance(event.ok, bool), "liar: ok is not true or false")
        return messages.LiarApplied(
            safe_line(event.name, NAME_LIMIT), event.ok, safe_name(event.target), safe_line(event.error)
        )
    if isinstance(event, messages.LinesRun):
        lines = event.lines
        _need(isinstance(lines, Mapping), "lines: not an object")
        _need(
            all(isinstance(v, list) and all(isinstance(n, int) for n in v) for v in lines.values()),
            "lines: not lists of line numbers",
        )
        return messages.LinesRun(safe_name(event.nodeid), {safe_name(k): v for k, v in lines.items()})
    if is_dataclass(event):  # an event added to the wire later: its texts made safe, field by field
        return replace(event, **{f.name: _field(getattr(event, f.name)) for f in fields(event)})
    raise ValueError(f"not a kvproof event: {type(event).__name__}")


def read_event(line: bytes) -> messages.Event:
    """One line of the event stream -> a safe event (:func:`clean`); ValueError when it is not one."""
    try:
        return clean(messages.decode(line.decode("utf-8", "surrogateescape")))
    except (TypeError, RecursionError, AttributeError) as exc:  # a field of the wrong shape
        raise ValueError(f"not a well-formed event: {type(exc).__name__}") from None


LINE_LIMIT = 64 << 20  # bytes: the plugin's events are far smaller (it clips evidence and texts before writing)
READ_CHUNK = 1 << 20  # bytes read from the events file at a time
TAIL_BYTES = 64 << 10  # bytes of a log's end read for its tail (a witness may print gigabytes)


class EventTail:
    """The events file as the plugin appends to it: each :meth:`read` returns the safe events of the lines
    completed since the last; lines that are not events go to :attr:`unreadable` (their start, made safe).

    Memory stays bounded whatever the process writes: the file is read a chunk at a time, and a line longer
    than :data:`LINE_LIMIT` (no event of the plugin's is) is dropped as it streams in, recorded as unreadable.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = 0  # bytes read so far
        self.partial = b""  # an unfinished last line, kept for the next read
        self.dropping = 0  # bytes of an over-long line dropped so far (0: not in one)
        self.unreadable: list[str] = []

    def read(self) -> list[messages.Event]:
        out: list[messages.Event] = []
        with open(self.path, "rb") as fh:
            fh.seek(self.pos)
            while chunk := fh.read(READ_CHUNK):
                self.pos += len(chunk)
                out += self._lines(chunk)
        return out

    def _lines(self, chunk: bytes) -> list[messages.Event]:
        *lines, rest = (self.partial + chunk).split(b"\n")
        out: list[messages.Event] = []
        for line in lines:
            if self.dropping:  # the end of an over-long line
                self._too_long(self.dropping + len(line))
                continue
            if not line.strip():
                continue
            try:
                out.append(read_event(line))
            except ValueError as exc:
                self.unreadable.append(f"{safe_line(line[:200].decode('utf-8', 'replace'), 120)} ({exc})")
        if self.dropping or len(rest) > LINE_LIMIT:
            self.dropping += len(rest)
            rest = b""
        self.partial = rest
        return out

    def _too_long(self, size: int) -> None:
        self.unreadable.append(f"a line of {size:,} bytes (no event is over {LINE_LIMIT:,}): not read")
        self.dropping = 0


def read_account(path: Path) -> messages.Account | None:
    """pytest's own account at ``path`` with its node ids made safe as the events' are; None when missing."""
    account = messages.Account.read(path)
    if account is None:
        return None
    return replace(
        account,
        calls={safe_name(k): safe_line(v, NAME_LIMIT) for k, v in account.calls.items()},
        refused=tuple(safe_line(r) for r in account.refused),
    )


def read_tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a process's log (or stacks file), made safe; "" when unreadable."""
    return safe_text("\n".join(tail_text(path).strip().splitlines()[-lines:]), TEXT_LIMIT)


def tail_text(path: Path, size: int = TAIL_BYTES) -> str:
    """The last ``size`` bytes of ``path`` as text (undecodable bytes replaced); "" when unreadable."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - size))
            return fh.read(size).decode("utf-8", "replace")
    except OSError:
        return ""
