"""One root exception for the harness; each error is also a builtin.

Messages name the culprit as ``field=value``, what is allowed, and the fix.
"""


class HarnessError(Exception):
    """Root of every error the harness raises on purpose."""


class UsageError(HarnessError, ValueError):
    """The command line asked for something impossible (exit code 2)."""


class OracleError(HarnessError, RuntimeError):
    """The oracle export is missing, stale or damaged."""


class OracleMissing(OracleError, FileNotFoundError):
    """No oracle export where one was expected."""


class OracleCorrupt(OracleError, ValueError):
    """A file of the oracle export does not match its manifest."""
