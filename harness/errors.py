"""One root exception for the harness; each error is also a builtin.

Messages name the culprit as ``field=value``, what is allowed, and the fix.
"""


class HarnessError(Exception):
    """Root of every error the harness raises on purpose."""


class UsageError(HarnessError, ValueError):
    """The command line asked for something impossible (exit code 2)."""


class CardInvalid(HarnessError, ValueError):
    """One or more theorem cards failed to load or validate (exit code 2).

    ``problems`` holds every :class:`harness.cards.Problem` found, so one
    exception reports all cards at once.
    """

    def __init__(self, problems: "list") -> None:
        self.problems = list(problems)
        lines = [str(p) for p in self.problems]
        super().__init__(f"{len(lines)} problem(s) in theorem cards:\n" + "\n".join(lines))


class LiarError(HarnessError, LookupError):
    """A liar is unknown, or its target cannot be found or patched."""


class LedgerError(HarnessError, OSError):
    """The ledger (``reports/ledger.sqlite``) cannot be opened, read or migrated."""


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


class NotCapable(HarnessError, NotImplementedError):
    """A target was asked for a verb it does not offer (``harness.targets``): the cell is n/a, not a verdict."""


class TargetUnknown(HarnessError, LookupError):
    """A target name (``--kvproof-target``, ``KVPROOF_TARGETS``, obligations/targets.yaml) names no target."""
