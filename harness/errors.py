"""One root exception for the harness; each error is also a builtin.

Messages name the culprit as ``field=value``, what is allowed, and the fix.
"""

import errno

# What ran out, in words, by the OSError's errno: a witness that fills the disk or the memory is not a witness
# that failed (the witness side reads it from the exception, the runner from the dead process's output, where
# each errno's os.strerror text stands).
EXHAUSTED = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "a file grew past the size limit (ulimit -f)",
    errno.ENOMEM: "out of memory",
    errno.EMFILE: "too many open files",
}


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # a file system (or its quota) that is full


# a witness process whose own write (its event stream, its account) found the disk full exits with this code: its
# stderr is on that disk too, so the exit code is all that reaches the runner (EX_IOERR of sysexits.h)
NO_SPACE_EXIT = 74


def no_space_in(exc: BaseException | None) -> bool:
    """Does ``exc``, or an exception it was raised from, say a file system is full?"""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def no_space(path: object = None, fix: str = "") -> str:
    """A full file system in words, with the fix: ``no space left on PATH (TMPDIR=...): free space or point
    TMPDIR elsewhere``. ``path``: the file or folder a write failed on, else the temp folder (where witnesses and
    the runner's job folders write). ``fix``: what to do instead of moving TMPDIR, for a write that is not in the
    temp folder (a report folder, a --json file)."""
    import os
    import tempfile

    if fix:
        return f"no space left on {path} (the device is full): free space there or {fix}"
    tmp = os.environ.get("TMPDIR")
    where = f"TMPDIR={tmp}" if tmp else f"TMPDIR unset: the temp folder is {tempfile.gettempdir()}"
    return f"no space left on {path or tempfile.gettempdir()} ({where}): free space or point TMPDIR elsewhere"


def exhausted_prefix(why: str) -> str:
    """What starts the message of a test that ran out of a resource (``why``, from :data:`EXHAUSTED` or
    :func:`no_space`): a full disk names itself and its fix, anything else is "resource exhausted (...)"."""
    return f"{why}: " if why.startswith("no space left on ") else f"resource exhausted ({why}): "


class HarnessError(Exception):
    """Root of every error the harness raises on purpose."""


class NoSpace(HarnessError, OSError):
    """A write of the harness itself (a job folder, the report, --json) found its file system full (exit code 2)."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(exc.errno, no_space(exc.filename))

    def __str__(self) -> str:
        return str(self.strerror)


class UsageError(HarnessError, ValueError):
    """The command line asked for something impossible (exit code 2)."""


class CardInvalid(HarnessError, ValueError):
    """One or more theorem cards failed to load or validate (exit code 2).

    ``problems`` holds every :class:`harness.select.cards.Problem` found, so one
    exception reports all cards at once.
    """

    def __init__(self, problems: "list") -> None:
        self.problems = list(problems)
        lines = [str(p) for p in self.problems]
        super().__init__(f"{len(lines)} problem(s) in theorem cards:\n" + "\n".join(lines))


class LiarError(HarnessError, LookupError):
    """A liar is unknown, or its target cannot be found or patched."""


class LedgerError(HarnessError, OSError):
    """The ledger (``reports/ledger.sqlite``) cannot be opened, read, written or migrated."""


class LedgerDamaged(LedgerError):
    """The ledger file is damaged: garbled pages, a missing table, a row that does not read back."""


class LedgerLocked(LedgerError):
    """Another process held the ledger's lock for longer than the wait (``KVPROOF_LEDGER_TIMEOUT``)."""


class RunNotRecorded(LedgerError):
    """A run's report folder was written complete but the ledger could not record the run.

    ``kept`` is the folder, kept under a name that says so (``<name>.unrecorded``); ``cause`` is the
    LedgerError, whose message names the ledger and the fix.
    """

    def __init__(self, cause: LedgerError, kept: object) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.kept = kept


class Cancelled(HarnessError, RuntimeError):
    """A witness process was cancelled (Ctrl-C in the scheduler); its process group was killed."""


class OracleError(HarnessError, RuntimeError):
    """The oracle export is missing, stale or damaged."""


class OracleMissing(OracleError, FileNotFoundError):
    """No oracle export where one was expected."""


class OracleCorrupt(OracleError, ValueError):
    """A file of the oracle export does not match its manifest."""


class OracleStale(OracleError, ValueError):
    """The oracle export is intact but was made for other weights, prompts or format."""


class InputRefused(HarnessError, OSError):
    """A file the harness reads is not what it claims to be: a folder, a FIFO, a device, or too large.

    ``why`` completes the sentence "``path`` ..." ("is a FIFO (named pipe), not a regular file").
    """

    def __init__(self, path: object, why: str) -> None:
        super().__init__(f"{path} {why}")
        self.path = path
        self.why = why


class YamlAliasRefused(HarnessError, ValueError):
    """A YAML alias (``*name``) in a card or the equivalence marks, refused before anything expands it.

    Aliases let a few lines stand for billions of values ("billion laughs"); cards never need them.
    """

    def __init__(self, name: str, line: int) -> None:
        super().__init__(f"YAML alias *{name} at line {line}")
        self.name = name
        self.line = line


class DocumentInvalid(HarnessError, ValueError):
    """A run document read back (a verdicts.json, a run in the ledger) does not fit its schema version or itself.

    ``field`` is a JSON path (``header.schema_version``, ``cards[3].id``), ``value`` what is there (shown
    with ``repr``), ``allowed`` what may be there.
    """

    def __init__(self, field: str, value: object, allowed: str, *, missing: bool = False) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        super().__init__(f"{field} is missing; {allowed}" if missing else f"{field}={shown}: {allowed}")
        self.field = field
        self.value = value
        self.allowed = allowed


class NotCapable(HarnessError, NotImplementedError):
    """A target was asked for a verb it does not offer (``harness.targets``): the cell is n/a, not a verdict."""


class TargetUnknown(HarnessError, LookupError):
    """A target name (``--kvproof-target``, ``KVPROOF_TARGETS``, obligations/targets.yaml) names no target."""
