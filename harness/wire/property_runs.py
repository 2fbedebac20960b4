"""Witness side: how many examples each Hypothesis property ran in a node, and under which settings.

A PROVEN states the examples each property actually ran, and the profile's budget is enforced on them
(:mod:`harness.verdict`, rule 10c): a witness cannot weaken itself with ``@settings(max_examples=1)``.
The plugin's recorder (:class:`harness.plugin._Recorder`) starts a :class:`PropertyCounter` in an honest
run's witness process and takes its :class:`harness.wire.messages.PropertyRun` records at the end of each node.

The figures come from Hypothesis' observability callbacks (``add_observability_callback``; before
Hypothesis 6.137 the ``TESTCASE_CALLBACKS`` list), one observation per test case, for ``@given`` tests and
for properties a test body defines and calls alike:

- a test case ``during <phase> phase`` (reuse, generate, target) with status passed or failed is one example
  ran; ``gave_up`` (invalid, overrun) is not, nor is a shrink. An ``explicit example`` counts apart.
- the settings it ran under are ``settings.default`` when its test case is observed: Hypothesis runs each
  test case inside ``local_settings(<the property's settings>)``, so a nested ``@settings``, a derived
  ``settings(parent, ...)`` and a profile the witness loads itself are all seen as they took effect.
- the "Hypothesis Statistics" observation at the end of a run says why it stopped; ``nothing left to do``
  after some examples means the search space was exhausted (a small finite strategy), not cut short.

Observations of one run share their ``property`` and ``run_start``. Coverage collection under
observability is switched off (``OBSERVABILITY_COLLECT_COVERAGE``): it would trace every line and cross
the ``mutate`` run's own line tracer; the examples Hypothesis generates are the same with or without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from harness.wire.messages import PropertyRun

_PHASE = re.compile(r"\bduring (\w+) phase\b")
_COUNTED_PHASES = frozenset({"reuse", "generate", "target"})
_STATISTICS = "Hypothesis Statistics"
_EXHAUSTED = "Stopped because nothing left to do"


@dataclass
class _Tally:
    name: str
    ran: int = 0
    explicit: int = 0
    max_examples: int | None = None
    generate: bool | None = None
    finished: bool = False  # Hypothesis said "nothing left to do"


class PropertyCounter:
    """Counts the examples of every property run on any thread while started; :meth:`take` hands them over."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, float], _Tally] = {}
        self._started = False

    def start(self) -> bool:
        """Register with Hypothesis; False when this Hypothesis has no observability to register with."""
        try:
            from hypothesis.internal import observability
        except ImportError:  # pragma: no cover - Hypothesis without observability
            return False
        observability.OBSERVABILITY_COLLECT_COVERAGE = False
        add = getattr(observability, "add_observability_callback", None)
        if add is not None:
            add(self._observe, all_threads=True)
        else:  # Hypothesis < 6.137: a plain list of callbacks, called on the thread that ran the test case
            observability.TESTCASE_CALLBACKS.append(self._observe)
        self._started = True
        return True

    def stop(self) -> None:
        if not self._started:
            return
        from hypothesis.internal import observability

        remove = getattr(observability, "remove_observability_callback", None)
        if remove is not None:
            remove(self._observe)
        elif self._observe in observability.TESTCASE_CALLBACKS:  # pragma: no cover - Hypothesis < 6.137
            observability.TESTCASE_CALLBACKS.remove(self._observe)
        self._started = False

    def take(self, nodeid: str = "") -> tuple[PropertyRun, ...]:
        """Every run counted since the last take, in the order they started; forgets them.

        A ``@given`` test's observations name the node id: it is shortened to the test's own name.
        """
        runs, self._runs = self._runs, {}
        out = []
        for t in runs.values():
            name = t.name.rsplit("::", 1)[-1] if nodeid and t.name == nodeid else t.name
            exhausted = t.finished and t.ran > 0 and (t.max_examples is None or t.ran < t.max_examples)
            out.append(PropertyRun(name, t.ran, t.max_examples, t.generate, exhausted, t.explicit))
        return tuple(out)

    def _observe(self, observation: Any, thread_id: int | None = None) -> None:
        # NOTE: called by Hypothesis inside the property's run: read, never raise
        try:
            key = (str(observation.property), float(observation.run_start))
            tally = self._runs.get(key)
            if tally is None:
                tally = self._runs[key] = _Tally(key[0])
            if observation.type == "test_case":
                self._test_case(tally, observation)
            elif observation.type == "info" and getattr(observation, "title", "") == _STATISTICS:
                tally.finished = _EXHAUSTED in str(getattr(observation, "content", ""))
        except Exception:  # noqa: BLE001 - a shape this kvproof does not know: the run is counted as far as seen
            pass

    @staticmethod
    def _test_case(tally: _Tally, observation: Any) -> None:
        from hypothesis import Phase, settings

        if tally.max_examples is None:
            current = settings.default  # the property's own settings: Hypothesis runs each test case under them
            tally.max_examples = int(current.max_examples)
            tally.generate = Phase.generate in current.phases
        how = str(observation.how_generated)
        if how == "explicit example":
            tally.explicit += 1
            return
        phase = _PHASE.search(how)
        if phase and phase.group(1) in _COUNTED_PHASES and observation.status in ("passed", "failed"):
            tally.ran += 1
