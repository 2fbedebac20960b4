"""Every status word the harness uses, as string enums, in one place.

They are :class:`enum.StrEnum`: each member *is* its string (``Verdict.PROVEN
== "PROVEN"``, ``json.dumps`` writes ``"PROVEN"``, templates print it), so
the JSON file, the ledger and the reports carry the same words as before,
while code names them instead of retyping them.
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    """A card's verdict (see :mod:`harness.verdict` for when each applies)."""

    PROVEN = "PROVEN"
    FAILED = "FAILED"
    VACUOUS = "VACUOUS"
    UNVERIFIED = "UNVERIFIED"
    ERROR = "ERROR"


VERDICTS = tuple(Verdict)  # display and count order


class Outcome(StrEnum):
    """What happened to one pytest node, and to a witness as a whole (its worst node)."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    NOT_RUN = "not_run"


WORST_FIRST = (Outcome.FAILED, Outcome.ERROR, Outcome.NOT_RUN, Outcome.SKIPPED, Outcome.PASSED)


class LiarStatus(StrEnum):
    """What a liar run showed about a card's witnesses."""

    CAUGHT = "caught"  # a witness check failed under the liar (an assertion or a bound)
    SURVIVED = "survived"  # every witness passed under it: the card is VACUOUS
    INCONCLUSIVE = "inconclusive"  # witnesses skipped or errored under it: it proved nothing
    NOT_RUN = "not_run"
    ERROR = "error"  # the liar could not be applied


class MutantStatus(StrEnum):
    """What a card's witnesses made of one mutant of the code it claims (:mod:`harness.mutation.score`)."""

    KILLED = "killed"  # a witness failed or errored under it
    TIMEOUT = "timeout"  # a witness ran past its (shortened) timeout: detected, shown apart
    SURVIVED = "survived"  # every witness passed: wrong code the card would let through
    EQUIVALENT = "equivalent"  # survived, and marked equivalent with a reason: not scored
    ERROR = "error"  # could not be applied or run (the code changed since the key was made): not scored


class Kind(StrEnum):
    """A card entry that checks the claim (witness) or shows the difference it measures (control)."""

    WITNESS = "witness"
    CONTROL = "control"


class Gate(StrEnum):
    """The release gate: PASS only when every selected card is PROVEN."""

    PASS = "PASS"
    FAIL = "FAIL"


class CardState(StrEnum):
    """What ``status`` shows for a card besides its last verdict."""

    STALE = "STALE"
    NEVER_RUN = "never run"
