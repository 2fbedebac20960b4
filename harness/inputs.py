"""Every file the harness reads is what it claims to be: a regular file of a sane size, read without hanging.

A card, ``timings.json``, the equivalence marks, a ``--baseline`` or
``compare`` document and the ledger are all opened through here (or
checked with :func:`what_it_is` first, for SQLite). A folder, a FIFO
(which would block the reader forever), a device (``/dev/zero`` never
ends) or a socket is refused with :class:`InputRefused` saying what the
path is; so is a file larger than the caller's limit. Symlinks are
followed: a link to a regular file is that file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.errors import InputRefused

MiB = 1 << 20
CARD_LIMIT = 1 * MiB  # a card is a page of YAML; the biggest real one is ~3 KB
HINTS_LIMIT = 16 * MiB  # timings.json, equivalent-mutants.yaml, a report's cards/index.json
DOCUMENT_LIMIT = 256 * MiB  # a verdicts.json (a full mutate run's is ~1 MB)

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """What a ``st_mode`` is, in words ("a regular file", "a FIFO (named pipe)", ...)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def what_it_is(path: Path) -> str | None:
    """None when ``path`` is a regular file (after symlinks) or does not exist; else what it is instead."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    return None if stat.S_ISREG(mode) else kind_of(mode)


def read_bytes(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``; InputRefused (an OSError) when it is anything else or over ``limit``.

    Opened with O_NONBLOCK, so a FIFO put where a file was expected is
    refused at once instead of blocking until someone writes to it.
    Other OSErrors (missing, no permission) propagate unchanged.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputRefused(path, f"is {kind_of(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise InputRefused(path, f"is {info.st_size:,} bytes, more than the {limit:,} a file of its kind may be")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # it grew while we read it
                raise InputRefused(path, f"is more than the {limit:,} bytes a file of its kind may be")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: Path, limit: int) -> str:
    """:func:`read_bytes` decoded as UTF-8 (UnicodeDecodeError, a ValueError, when it is not)."""
    return read_bytes(path, limit).decode("utf-8")
