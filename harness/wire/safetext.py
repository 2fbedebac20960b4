"""Text made safe to store and to show: every text that reaches a report, the ledger or the terminal.

A leaf: imports nothing of the harness. Three rules, applied where untrusted
text enters the runner (a witness process's events and pytest's account,
:mod:`harness.execute.ingress`), again where the terminal shows text
(:mod:`harness.report.terminal`), and by the writers as a last line:

- **encoding**: a lone surrogate (a file name that is not UTF-8, read with
  ``os.fsdecode``: ``'caf\\udce9.bin'``) becomes the escape of its byte,
  ``caf\\xe9.bin``, as ``backslashreplace`` writes it; any other lone
  surrogate ``\\udXXX``. What is left encodes as UTF-8.
- **control characters**: C0 (``\\x1b``, ``\\r``, BEL ...), DEL, C1
  (``\\x9b``, a one-byte CSI), the bidi overrides and isolates (U+202A-202E,
  U+2066-2069, U+200E/F, U+061C) and the line/paragraph separators become
  visible escapes (``\\x1b``, ``\\r``, ``\\u202e``), so no escape sequence
  reaches a terminal raw and no text reads backwards. ``\\n`` and ``\\t``
  stay where text is multi-line (a traceback), and are escaped too in
  one-line text (a message, a node id, a key).
- **size**: a text longer than its limit keeps its head and tail around a
  marker that says how long it was (:func:`safe_text`); a name (node id,
  evidence key) clipped also gets a digest of the whole, so two long names
  never become one. A recorded value whose JSON is larger than
  :data:`VALUE_LIMIT` is replaced by a marker string saying what it was and
  how big (:func:`clipped_marker`); a bound on such a key cannot be judged
  (:func:`is_clipped`: ERROR, record a summary such as the max instead).

:class:`GuardedStream` is the other half of "a run that cannot print still
records": standard output or error closed early (``run | head -1``), full
(``> /dev/full``) or unable to encode a character never raises; what could
not be written is dropped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

TEXT_LIMIT = 8000  # characters: failure text, collection errors, output tails, Hypothesis examples
LINE_LIMIT = 1000  # characters: one-line texts (a message, a reason, an error)
NAME_LIMIT = 300  # characters: node ids, evidence keys, locations, names
VALUE_LIMIT = 16 * 1024  # bytes of JSON: one recorded evidence value
NODE_EVIDENCE_LIMIT = 64 * 1024  # bytes of JSON: all evidence of one node (the largest values clipped first)
KEYS_LIMIT = 200  # evidence keys of one node; the rest are dropped, and a key says how many
CLIPPED = "<clipped by kvproof: "  # how a clipped evidence value starts (is_clipped)

# lone surrogates, C0 but \t \n, DEL + C1, bidi controls, line/paragraph separators
_UNSAFE = "\ud800-\udfff\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
UNSAFE_RE = re.compile(f"[{_UNSAFE}]")  # in multi-line text
UNSAFE_LINE_RE = re.compile(f"[{_UNSAFE}\t\n]")  # in one-line text
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape_char(m: re.Match[str]) -> str:
    ch = m.group(0)
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if 0xDC80 <= code <= 0xDCFF:  # a byte os.fsdecode could not decode: show the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str, *, lines: bool = True) -> str:
    """``text`` with every unsafe character as a visible escape (see the module docstring); no clipping.

    ``lines`` keeps ``\\n`` and ``\\t`` (multi-line text); False escapes them too.
    """
    return (UNSAFE_RE if lines else UNSAFE_LINE_RE).sub(_escape_char, text)


def is_safe(text: str, *, lines: bool = True) -> bool:
    return (UNSAFE_RE if lines else UNSAFE_LINE_RE).search(text) is None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def safe_text(text: Any, limit: int = TEXT_LIMIT, *, lines: bool = True, name: bool = False) -> str:
    """``text`` escaped and at most about ``limit`` characters: head, a marker saying how long it was, tail.

    Not a str (a forged event): its ``repr``. ``lines`` False: one line (``\\n`` escaped, the marker
    without line breaks). ``name``: a clipped text also ends with a digest of the whole text, so two
    names that differ only where they were clipped stay two names.
    """
    if not isinstance(text, str):
        text = repr(text)
    total = len(text)
    if total <= limit and is_safe(text, lines=lines):
        return text
    half = max(limit // 2, 1)
    if total > limit:  # escape only what is kept: a 50 MB message costs its head and tail
        head, tail = escape(text[:half], lines=lines)[:half], escape(text[-half:], lines=lines)[-half:]
    else:
        out = escape(text, lines=lines)
        if len(out) <= limit:
            return out
        head, tail = out[:half], out[-half:]
    sha = f", sha256 {_digest(text)}" if name else ""
    mark = f"… (clipped by kvproof: {total:,} characters{sha}) …"
    return f"{head}{mark}{tail}" if name or not lines else f"{head}\n{mark}\n{tail}"


def safe_line(text: Any, limit: int = LINE_LIMIT) -> str:
    """One line of text: :func:`safe_text` with ``\\n`` and ``\\t`` escaped."""
    return safe_text(text, limit, lines=False)


def safe_name(text: Any, limit: int = NAME_LIMIT) -> str:
    """A name (node id, evidence key, path): one line; clipped with a digest, so it stays unique."""
    return safe_text(text, limit, lines=False, name=True)


# ---------------------------------------------------------------- recorded values


def json_size(value: Any) -> int:
    """Bytes of ``value``'s compact JSON (NaN allowed, anything else as its repr)."""
    return len(json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=repr))


def _size_text(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 2**20:.1f} MiB"


def clipped_marker(value: Any, size: int, limit: int = VALUE_LIMIT) -> str:
    """The text that replaces a recorded value too large to keep: what it was and how big."""
    if isinstance(value, list | tuple):
        what = f"a list of {len(value):,} items"
    elif isinstance(value, Mapping):
        what = f"a dict of {len(value):,} keys"
    elif isinstance(value, str):
        what = f"a text of {len(value):,} characters"
    else:
        what = f"a {type(value).__name__}"
    return (
        f"{CLIPPED}{what}, {_size_text(size)} as JSON, over the limit of {_size_text(limit)}; "
        "record a summary (its max, its length) instead>"
    )


def is_clipped(value: Any) -> bool:
    """Was this recorded value replaced by :func:`clipped_marker`? (A bound on it cannot be judged.)"""
    return isinstance(value, str) and value.startswith(CLIPPED)


def safe_value(value: Any, limit: int = VALUE_LIMIT) -> Any:
    """A JSON value with every text in it safe (keys as names, strings as multi-line text), or, when its JSON
    is larger than ``limit`` bytes, :func:`clipped_marker`. Numbers, booleans and None are kept as they are."""
    if value is None or isinstance(value, bool | int | float):
        return value
    size = json_size(value)
    if size > limit:
        return clipped_marker(value, size, limit)
    return _walk(value)


def _walk(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, Mapping):
        return {safe_name(k): _walk(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v) for v in value]
    return safe_text(repr(value))


def safe_evidence(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """One node's evidence made safe: keys as names, each value within :data:`VALUE_LIMIT`, all of it within
    :data:`NODE_EVIDENCE_LIMIT` (the largest values clipped first), at most :data:`KEYS_LIMIT` keys."""
    items = list(evidence.items())
    out = {safe_name(k): safe_value(v) for k, v in items[:KEYS_LIMIT]}
    sizes = {k: json_size(v) for k, v in out.items()}
    total = sum(sizes.values())
    for key in sorted(sizes, key=sizes.__getitem__, reverse=True):
        if total <= NODE_EVIDENCE_LIMIT or sizes[key] <= 256:
            break
        out[key] = clipped_marker(out[key], sizes[key], NODE_EVIDENCE_LIMIT)
        total += json_size(out[key]) - sizes[key]
    if len(items) > KEYS_LIMIT:
        out[f"(clipped by kvproof: {len(items) - KEYS_LIMIT:,} more keys)"] = len(items) - KEYS_LIMIT
    return out


def is_safe_value(value: Any) -> bool:
    """Is every text in this JSON value (keys too) safe, as :func:`escape_value` would leave it?"""
    if isinstance(value, str):
        return is_safe(value)
    if isinstance(value, Mapping):
        return all(is_safe(k) if isinstance(k, str) else True for k in value) and all(
            is_safe_value(v) for v in value.values()
        )
    if isinstance(value, list | tuple):
        return all(is_safe_value(v) for v in value)
    return True


def escape_value(value: Any) -> Any:
    """A JSON value with every text in it (keys too) escaped as :func:`escape` does; nothing clipped."""
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, Mapping):
        return {escape(k) if isinstance(k, str) else k: escape_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [escape_value(v) for v in value]
    return value


# ---------------------------------------------------------------- the terminal


class GuardedStream:
    """A text stream that never raises on write: a closed pipe (EPIPE), a full disk (ENOSPC), a closed file or a
    character the stream cannot encode. Characters it cannot encode are written as backslash escapes; after a
    failed write the stream is :attr:`broken` and drops what follows. Everything else is the wrapped stream's.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if self.broken:
            return len(text)
        try:
            try:
                self.stream.write(text)
            except UnicodeEncodeError:
                enc = getattr(self.stream, "encoding", None) or "utf-8"
                self.stream.write(text.encode(enc, "backslashreplace").decode(enc, "replace"))
        except (OSError, ValueError):
            self._lose()
        return len(text)

    def flush(self) -> None:
        if self.broken:
            return
        try:
            self.stream.flush()
        except (OSError, ValueError):
            self._lose()

    def _lose(self) -> None:
        """From now on, write nothing; and point the file descriptor at /dev/null, so the interpreter's own
        flush of the wrapped stream at exit cannot fail either."""
        self.broken = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self.stream.fileno())
            finally:
                os.close(null)

    def isatty(self) -> bool:
        try:
            return not self.broken and self.stream.isatty()
        except (OSError, ValueError):
            return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def guarded_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` as :class:`GuardedStream` while the block runs (restored after): a
    command whose output cannot be written still does its work and returns its own exit code."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (s if s is None or isinstance(s, GuardedStream) else GuardedStream(s) for s in saved)
    try:
        yield
    finally:
        for guarded in (sys.stdout, sys.stderr):
            if isinstance(guarded, GuardedStream):
                guarded.flush()
        sys.stdout, sys.stderr = saved
