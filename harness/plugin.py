"""pytest plugin for witnesses: the ``evidence`` fixture, Hypothesis profiles, outcome capture.

Loaded by ``witnesses/conftest.py`` (so plain ``pytest witnesses/`` works with
no harness) and by the harness with ``-p harness.plugin``.

- ``evidence`` holds what a witness measured; cards put bounds on its keys.
  ``evidence.record("tokens_differing", 0)`` stores one JSON-able value,
  once; ``evidence.observe("max_abs_delta", d)`` once per Hypothesis example
  keeps ``{"observed": n, "min": lo, "max": hi, "nan": k}`` and bounds are
  judged on its worst value; ``evidence.count("examples")`` keeps a tally.
  See :class:`harness.wire.evidence.Evidence`.
- Hypothesis profiles ``ci`` (fast, derandomized, default) and ``release``
  (many more examples), chosen with ``--kvproof-profile`` or the
  ``KVPROOF_PROFILE`` environment variable.
- With ``--kvproof-plan PLAN.json`` (a :class:`harness.wire.messages.JobPlan` written
  by :mod:`harness.execute.watch`) the plugin applies the plan's liar before
  collection and streams the events of :mod:`harness.wire.messages` to the
  plan's ``out`` file, flushed as it goes. It also arms :func:`faulthandler.dump_traceback_later` with the node's
  timeout, so a hang leaves the stack it hung in. When the plan names files to
  trace (``coverage``: a ``mutate`` run's honest run), it streams the lines of
  them each node's test body ran, and those run outside any test body
  (:class:`harness.wire.linecov.LineTracer`, :class:`harness.wire.messages.LinesRun`).
- A warm server's plan (``warm``, :mod:`harness.execute.warm`) applies no
  mutant: each process forked from it after collection adopts its own plan
  (:meth:`_Recorder.adopt`) and applies its mutant then.

Hypothesis details: when a node fails or errors with an exception that
carries Hypothesis' falsifying-example note (a ``@given`` test, or a
property nested in the test body as the shipped witnesses do; exception
groups included), its ``hypothesis`` field gets the example, the
``@reproduce_failure(...)`` line (``print_blob=True``) and the seed and
kvproof profile in force, and, apart from those notes, the failing check's
whole message, each ``data.draw`` by label and Hypothesis' explanation
(:func:`_hypothesis_failure`; the node's one-line ``message`` is cut); the report adds the ``run_obligations.py run``
command that replays it. In an honest run each node's result also carries,
for every property it ran, the examples it ran and the settings it ran
under (:mod:`harness.wire.property_runs`): the judge holds them to the profile's
budget.

Failure versus error: a call-phase ``AssertionError`` (numpy's testing
asserts, ``pytest.fail``, Hypothesis re-raising a falsified assertion, or an
exception group made only of those) is ``failed``; any other exception,
and anything raised in setup or teardown, is ``error``. Under a liar, so is a failed check raised from or
while handling an exception that left a call of the liar (``except Exception as e: pytest.fail(...)``,
:func:`_liar_crash`).
"""

from __future__ import annotations

import faulthandler
import os
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.errors import EXHAUSTED, NO_SPACE, LiarError, exhausted_prefix, no_space
from harness.statuses import Outcome
from harness.wire import messages
from harness.wire.evidence import Evidence
from harness.wire.messages import PROFILE_EXAMPLES, JobPlan, NodeResult, PropertyRun
from harness.wire.safetext import safe_evidence

PROFILES = ("ci", "release")
_FLAKY = {"Flaky", "FlakyFailure", "FlakyReplay", "FlakyStrategyDefinition", "FlakyBackendFailure"}
_TEXT_LIMIT = 8000
_MESSAGE_LIMIT = 300  # characters of a node's one-line message (the verdict's reason quotes it)


def _register_profiles() -> None:
    from hypothesis import HealthCheck, settings

    common = dict(deadline=None, database=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("ci", max_examples=PROFILE_EXAMPLES["ci"], derandomize=True, **common)
    settings.register_profile("release", max_examples=PROFILE_EXAMPLES["release"], derandomize=False, **common)


_register_profiles()  # at import, so --hypothesis-profile=release also finds them


# ---------------------------------------------------------------- evidence


_EVIDENCE_KEY = pytest.StashKey[Evidence]()


@pytest.fixture
def evidence(request: pytest.FixtureRequest) -> Evidence:
    """What the witness measured: ``evidence.record(key, v)``, ``.observe(key, x)``, ``.count(key)``."""
    ev = Evidence()
    request.node.stash[_EVIDENCE_KEY] = ev
    return ev


# ---------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvproof")
    group.addoption(
        "--kvproof-plan",
        default=None,
        metavar="PLAN.json",
        help="run plan written by the kvproof harness (liar, output file, timeouts)",
    )
    group.addoption(
        "--kvproof-profile",
        default=None,
        choices=PROFILES,
        help="Hypothesis profile: ci (fast, deterministic; default) or release",
    )


def pytest_configure(config: pytest.Config) -> None:
    from hypothesis import Phase, settings

    plan_path = config.getoption("kvproof_plan")
    plan = JobPlan.read(plan_path) if plan_path else None
    profile = (
        config.getoption("kvproof_profile")
        or (plan.profile if plan else None)
        or os.environ.get("KVPROOF_PROFILE")
        or "ci"
    )
    if profile not in PROFILES:
        raise pytest.UsageError(f"KVPROOF_PROFILE={profile!r}: allowed: {', '.join(PROFILES)}")
    if config.getoption("hypothesis_profile", None) is None:
        name = profile
        overrides: dict[str, Any] = {}
        if config.getoption("hypothesis_seed", None) is not None:
            overrides["derandomize"] = False  # NOTE: derandomize would ignore --hypothesis-seed
        if plan is not None and (plan.liar or plan.mutant or plan.warm):
            overrides["phases"] = (Phase.explicit, Phase.reuse, Phase.generate)  # no shrinking under a liar
        if overrides:
            name = f"{profile}-kvproof"
            settings.register_profile(name, settings.get_profile(profile), **overrides)
        settings.load_profile(name)
    if plan is not None:
        config.pluginmanager.register(_Recorder(config, plan, profile), "kvproof-recorder")


# ---------------------------------------------------------------- recorder


def _is_assertion(exc: BaseException) -> bool:
    if type(exc).__name__ in _FLAKY:
        return False
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_assertion(e) for e in exc.exceptions)
    return isinstance(exc, (AssertionError, pytest.fail.Exception))


def _liar_crash(exc: BaseException) -> BaseException | None:
    """The exception that left a call of the applied liar, in ``exc`` or the chain it was raised from or while
    handling; None when there is none.

    :func:`harness.liars.apply` tags every exception leaving a liar's call that the liar does not declare in
    ``raises``. ``except Exception as e: pytest.fail(f"... {e}")`` (or ``raise AssertionError(...) from e``, or
    ``from None``, which only hides the chain from the traceback) turns such a crash -- a wrong signature's
    TypeError, say -- into a failed check: the failure was decided by the exception, not by a check, so it does
    not catch the liar (an error: the liar is inconclusive). Exception groups are searched member by member.
    """
    from harness.liars import CALL_TAG

    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        cur = todo.pop()
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        if getattr(cur, CALL_TAG, None):
            return cur
        if isinstance(cur, BaseExceptionGroup):
            todo.extend(cur.exceptions)
        todo.extend((cur.__cause__, cur.__context__))
    return None


def _exhausted(exc: BaseException) -> str:
    """What resource ran out, when ``exc`` (or one it was raised from) says so; "" otherwise."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MemoryError):
            return "out of memory"
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            return no_space(exc.filename)
        if isinstance(exc, OSError) and exc.errno in EXHAUSTED:
            return EXHAUSTED[exc.errno]
        exc = exc.__cause__ or exc.__context__
    return ""


def _notes(exc: BaseException) -> list[str]:
    notes = list(getattr(exc, "__notes__", []) or [])
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            notes += _notes(sub)
    return notes


# NOTE: Hypothesis >= 6.1xx says "Failing test case: prop(...)"; older ones "Falsifying example: prop(...)"
_EXAMPLE_NOTE = re.compile(r"^\s*(Falsifying (explicit )?example|Failing test case|Falsifying test case)\b")
_REPRODUCE = re.compile(r"@reproduce_failure\([^\n]*?\)")
# ``data.draw(strategy, label=...)`` notes "Draw 1 (label): value", "Draw 2: value" without a label
_DRAW_NOTE = re.compile(r"^Draw (\d+)(?: \((.*?)\))?: (.*)\Z", re.S)
_EXPLANATION_NOTE = "Explanation:"
_COMMENT_LINE = re.compile(r"^\s*# ?(.*)$")  # a whole-line comment in the example: Hypothesis explaining it
_DRAW_COMMENT = re.compile(r"^(.*?)  # (.*)\Z", re.S)


def _leaves(exc: BaseException) -> list[BaseException]:
    """``exc``, or the exceptions an exception group holds (nested groups flattened), in order."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _check_text(exc: BaseException) -> str:
    """What the failing check said: an assertion's message (every line, without Hypothesis' notes), else
    ``Type: message``."""
    if isinstance(exc, pytest.fail.Exception):
        return str(exc.msg)
    text = str(exc)
    return text if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {text}".rstrip(": ")


def _read_notes(notes: list[str]) -> dict[str, Any]:
    """The parts of one failure's notes beside its example: the draws of ``data.draw`` (``{"draw", "label",
    "value", "comment"}``), Hypothesis' explanation lines (the whole-line comments of the example; the
    "Explanation:" note and the indented notes that follow it, one a line) and any other note
    (``hypothesis.note(...)`` from the test)."""
    draws: list[dict[str, Any]] = []
    comments: list[str] = []
    explained: list[str] = []  # raw lines, dedented together (their relative indentation kept)
    other: list[str] = []
    in_explanation = False
    for note in notes:
        stripped = note.strip()
        if in_explanation and note[:1] in (" ", "\t") and stripped:
            explained += note.splitlines()
            continue
        in_explanation = False
        draw = _DRAW_NOTE.match(stripped)
        if _EXAMPLE_NOTE.match(stripped):
            comments += [m.group(1) for ln in stripped.splitlines() if (m := _COMMENT_LINE.match(ln))]
        elif draw:
            value, comment = draw.group(3), ""
            split = _DRAW_COMMENT.match(value)
            if split:
                value, comment = split.group(1), split.group(2)
            draws.append({"draw": int(draw.group(1)), "label": draw.group(2) or "", "value": value, "comment": comment})
        elif stripped.startswith(_EXPLANATION_NOTE):
            in_explanation = True
            explained += note.splitlines()[1:]
        elif stripped and not _REPRODUCE.search(stripped):
            other.append(stripped)
    explanation = list(dict.fromkeys(comments))
    explanation += [ln.rstrip() for ln in textwrap.dedent("\n".join(explained)).splitlines() if ln.strip()]
    return {"draws": draws, "explanation": explanation, "notes": other}


def _hypothesis_failure(exc: BaseException) -> dict[str, Any] | None:
    """``{"example", "reproduce"}`` from the notes Hypothesis attaches to what a property raised, else None.

    Works for a ``@given`` test and for a property nested in the test body (the
    pattern witnesses use): the notes travel with the exception, and an
    exception group (several distinct failures) carries one per failure.

    Also, each only when there is one (from the first failure of a group, the one whose example comes first):
    ``check``, what the failing check said in full (:func:`_check_text`); ``draws``, each ``data.draw`` of the
    shrunk example by label; ``explanation``, Hypothesis' own lines about it ("The test always failed when
    commented parts were varied together.", "These lines were always and only run by failing test cases:");
    ``notes``, what the test noted with ``hypothesis.note``.
    """
    notes = [n.strip() for n in _notes(exc)]
    examples = [n for n in notes if _EXAMPLE_NOTE.match(n)]
    if not examples:
        return None
    reproduce = [m.group(0) for n in notes for m in _REPRODUCE.finditer(n)]
    found: dict[str, Any] = {
        "example": "\n\n".join(dict.fromkeys(examples)),
        "reproduce": "\n".join(dict.fromkeys(reproduce)),
    }
    first = next((e for e in _leaves(exc) if any(_EXAMPLE_NOTE.match(n.strip()) for n in _notes(e))), exc)
    check = _clip(_check_text(first).strip())
    if check:
        found["check"] = check
    found.update({k: v for k, v in _read_notes(_notes(first)).items() if v})
    return found


def _clip(text: str, limit: int = _TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n... (clipped) ...\n" + text[-limit // 2 :]


def _clip_line(text: str, limit: int) -> str:
    """One line at most about ``limit`` characters: its head and tail around `` … ``, still one line (the whole
    check is in the node's ``hypothesis.check`` or its failure text)."""
    return text if len(text) <= limit else text[: limit // 2].rstrip() + " … " + text[-limit // 2 :].lstrip()


@dataclass
class _NodeState:
    """What the recorder has learnt about one node so far (setup, call and teardown add to it)."""

    outcome: Outcome = Outcome.PASSED
    duration: float = 0.0
    evidence: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    failure: str = ""
    location: str = ""
    hypothesis: dict[str, Any] | None = None
    lines: dict[str, list[int]] = field(default_factory=dict)  # traced lines its test body ran (plan.coverage)
    examples: tuple[PropertyRun, ...] = ()  # each Hypothesis property run in it (an honest run's)

    def result(self, nodeid: str) -> NodeResult:
        return NodeResult(
            nodeid,
            self.outcome,
            self.duration,
            safe_evidence(
                self.evidence
            ),  # clipped here too: an honest node's line stays small (the runner clips again)
            self.message,
            self.failure,
            self.location,
            self.hypothesis,
            examples=self.examples,
        )


def _warm_up(root: Path, files: Sequence[str]) -> None:
    """What every process forked from a warm server would do for itself before its first example, done once in
    the server (measured: applying a mutant in a fork went from 17 to 6.6 ms with the first, and the 114 mutants of
    PKV-KAT, RING-T5 and KV-T5 ran in 6.8 s instead of 7.7 s, -j 1, with all three).

    - import what applying a mutant needs (:mod:`harness.mutation.swap`, with the liars and C build modules) and
      parse the claimed files (:func:`harness.mutation.generate.preparse`);
    - import ``numpy.random``: Hypothesis wraps numpy's global generator at a test's first example when numpy is
      loaded, importing it;
    - Hypothesis's constants of the local modules (drawn now and then as examples): it collects them at a
      test's first example from every module loaded and not yet seen, so a fork collects only the modules
      loaded since; the set is the same either way (the modules' source files, unchanged by a mutant, which is
      applied in memory).
    """
    import harness.mutation.swap  # noqa: F401
    from harness.mutation.generate import preparse

    preparse(root, files)
    try:
        import numpy.random  # noqa: F401
        from hypothesis.internal.conjecture.providers import _get_local_constants

        _get_local_constants()
    except Exception:  # noqa: BLE001 - a Hypothesis without it (private API): each fork does it, as before
        pass


class _Recorder:
    """Streams node events to the plan's JSONL file; applies the plan's liar or mutant."""

    def __init__(self, config: pytest.Config, plan: JobPlan, profile: str) -> None:
        self.config = config
        self.plan = plan
        self.profile = profile
        self.root = Path(plan.root or config.rootpath)
        self.out = open(plan.out, "a", encoding="utf-8", buffering=1)
        self.stacks = open(plan.stacks, "w", encoding="utf-8") if plan.stacks else None
        self.nodes: dict[str, _NodeState] = {}
        self.liar_source = ""  # the applied liar's module file
        self.session: pytest.Session | None = None
        # what a fresh process had imported where it applies a liar or mutant: a warm server's forks rebind
        # what was imported after this point, as a fresh process's later imports would have bound the mutant
        self.imported_before = frozenset(sys.modules)
        self.tracer = None
        if plan.coverage:
            from harness.wire.linecov import LineTracer

            self.tracer = LineTracer(self.root, plan.coverage)
            self.tracer.start()
        self.counter = None  # the examples each Hypothesis property runs: counted in an honest run only
        if not (plan.liar or plan.mutant or plan.warm):
            from harness.wire.property_runs import PropertyCounter

            counter = PropertyCounter()
            if counter.start():
                self.counter = counter
        if plan.liar or plan.mutant:
            os.environ["KVPROOF_APPLIED"] = plan.liar or plan.mutant  # harness.targets.fixture: no reproductions
        if plan.liar:
            self._apply_liar(plan.liar)
        if plan.mutant:
            self._apply_mutant(plan.mutant)

    def end_warmup(self) -> dict[str, list[int]]:
        """A warm server, before it forks: stop tracing; the traced lines that ran so far (collection).

        Also does, once here, what each fork would otherwise do for itself (:func:`_warm_up`).
        """
        lines: dict[str, list[int]] = {}
        if self.tracer is not None:
            lines = self.tracer.take()
            self.tracer.stop()
            self.tracer = None
        _warm_up(self.root, self.plan.coverage)
        return lines

    def adopt(self, plan: JobPlan) -> None:
        """In a process forked from a warm server: report to ``plan``'s files and apply its mutant.

        The mutant is applied after collection, so the ``from module import f`` copies made by modules
        imported since :attr:`imported_before` are rebound too (a fresh process imported those after
        applying it). Raises pytest.UsageError, after saying so on the stream, when it cannot be applied.
        """
        for fh in (self.out, self.stacks):
            if fh is not None:
                fh.close()  # this process's copies of the server's files
        self.plan = plan
        self.out = open(plan.out, "a", encoding="utf-8", buffering=1)
        self.stacks = open(plan.stacks, "w", encoding="utf-8") if plan.stacks else None
        if plan.mutant:
            os.environ["KVPROOF_APPLIED"] = plan.mutant  # harness.targets.fixture: no reproductions
            self._apply_mutant(plan.mutant, late=tuple(m for m in sys.modules if m not in self.imported_before))

    def emit(self, event: messages.Event) -> None:
        self.out.write(messages.encode(event) + "\n")
        self.out.flush()

    def _apply_liar(self, name: str) -> None:
        from harness.liars import apply

        try:
            applied = apply(name, self.root)
        except LiarError as exc:
            self.emit(messages.LiarApplied(name, False, error=str(exc)))
            raise pytest.UsageError(str(exc)) from None
        self.liar_source = applied.source
        self.emit(messages.LiarApplied(name, True, target=applied.target))

    def _apply_mutant(self, key: str, late: tuple[str, ...] = ()) -> None:
        from harness.mutation.swap import apply

        try:
            applied = apply(key, self.root, late)
        except LiarError as exc:
            self.emit(messages.LiarApplied(f"mutant {key}", False, error=str(exc)))
            raise pytest.UsageError(str(exc)) from None
        except Exception as exc:  # the mutated function does not even compile or define: say so, as for a liar
            msg = f"mutant={key!r}: could not be applied: {type(exc).__name__}: {exc}"
            self.emit(messages.LiarApplied(f"mutant {key}", False, error=msg))
            raise pytest.UsageError(msg) from None
        self.emit(messages.LiarApplied(applied.name, True, target=applied.target))

    def _hypothesis_run(self) -> dict[str, Any]:
        """The seed and kvproof profile in force: ``run --profile P --seed S`` replays the run."""
        from hypothesis import settings

        seed = self.config.getoption("hypothesis_seed", None)
        seed = int(seed) if isinstance(seed, str) and seed.lstrip("-").isdigit() else seed
        if seed is None:
            seed = "derandomized" if settings.default.derandomize else None
        return {"seed": seed, "profile": self.profile, "example": "", "reproduce": ""}

    # -- hooks

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.emit(messages.CollectError(report.nodeid, _clip(str(report.longrepr))))

    def _lines_outside(self) -> None:
        if self.tracer is not None:
            lines = self.tracer.take()
            if lines:
                self.emit(messages.LinesRun("", lines))

    def pytest_runtest_logstart(self, nodeid: str, location: tuple) -> None:
        self._lines_outside()  # collection, or what ran between nodes
        if self.counter is not None:
            self.counter.take()  # properties run outside any node belong to none
        timeout = self.plan.timeout_for(nodeid)
        self.nodes[nodeid] = _NodeState()
        self.emit(messages.NodeStarted(nodeid, timeout))
        if self.stacks is not None:
            faulthandler.dump_traceback_later(timeout, repeat=False, file=self.stacks)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        state = self.nodes.setdefault(item.nodeid, _NodeState())
        if self.tracer is not None:  # after each phase: the test body's lines are the node's, the rest anyone's
            if report.when == "call":
                state.lines = self.tracer.take()
            else:
                self._lines_outside()
        state.duration += report.duration
        ev = item.stash.get(_EVIDENCE_KEY, None)
        if ev is not None:
            state.evidence = dict(ev.values)
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False) and state.hypothesis is None:
            state.hypothesis = self._hypothesis_run()
        if report.passed or state.outcome in (Outcome.FAILED, Outcome.ERROR):
            return
        if report.skipped:
            if state.outcome == Outcome.PASSED:
                state.outcome = Outcome.SKIPPED
                longrepr = report.longrepr
                reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
                if hasattr(report, "wasxfail"):
                    reason = f"xfail: {report.wasxfail or reason}"
                state.message = reason.removeprefix("Skipped: ")
            return
        # failed in some phase
        exc = call.excinfo.value if call.excinfo is not None else None
        is_failure = report.when == "call" and exc is not None and _is_assertion(exc)
        behind = _liar_crash(exc) if is_failure and self.plan.liar else None
        is_failure = is_failure and behind is None
        in_liar = bool(self.liar_source) and call.excinfo is not None and self._raised_in_liar(call.excinfo)
        state.outcome = Outcome.FAILED if is_failure and not in_liar else Outcome.ERROR
        if call.excinfo is not None:
            first = (call.excinfo.exconly().strip().splitlines() or [""])[0]
        else:
            first = (report.longreprtext.strip().splitlines() or [""])[-1]
        prefix = "" if report.when == "call" else f"in {report.when}: "
        if in_liar:
            prefix = "raised inside the liar itself, not by a witness's check: " + prefix
        if behind is not None:
            crash = (f"{type(behind).__name__}: {behind}".splitlines() or [""])[0]
            prefix = (
                f"a check failed while handling {_clip_line(crash, 200)}, raised by a call of the liar: the exception "
                "decided it, not a check (if raising it is the liar's lie, declare it: @liar(..., raises=...)): "
                + prefix
            )
        exhausted = _exhausted(exc) if exc is not None else ""
        if exhausted:
            prefix = exhausted_prefix(exhausted) + prefix
        state.message = _clip_line(prefix + first, _MESSAGE_LIMIT)
        state.failure = _clip(report.longreprtext)
        if call.excinfo is not None:
            for entry in reversed(call.excinfo.traceback):
                if Path(entry.path) == Path(item.path):
                    path = Path(entry.path)
                    shown = path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else path
                    state.location = f"{shown}:{entry.lineno + 1}"
                    break
        if exc is not None:
            found = _hypothesis_failure(exc)
            if found is not None:  # a @given test, or a property nested in the test body
                state.hypothesis = {**(state.hypothesis or self._hypothesis_run()), **found}

    def _raised_in_liar(self, excinfo: pytest.ExceptionInfo) -> bool:
        """Was the exception raised in the liar module's own code (its innermost frame there)?"""
        tb = excinfo.tb
        while tb.tb_next is not None:
            tb = tb.tb_next
        return str(Path(tb.tb_frame.f_code.co_filename).resolve()) == self.liar_source

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple) -> None:
        if self.stacks is not None:
            faulthandler.cancel_dump_traceback_later()
        state = self.nodes.pop(nodeid, None)
        if state is not None:
            if state.lines:
                self.emit(messages.LinesRun(nodeid, state.lines))
            if self.counter is not None:
                state.examples = self._examples(nodeid, state)
            self.emit(messages.NodeFinished(state.result(nodeid)))
            if self.plan.liar and state.outcome == Outcome.FAILED and self.session is not None:
                # a liar is caught by the first witness whose check fails under it: the rest need not run
                # (an error does not catch it, so the run goes on to a witness that can)
                self.session.shouldfail = f"liar {self.plan.liar} caught by {nodeid}"  # as -x: exit code 1

    def _examples(self, nodeid: str, state: _NodeState) -> tuple[PropertyRun, ...]:
        """The properties the node ran; a ``@given`` test that passed with none seen is one that ran no example
        kvproof could count (``max_examples`` None): the judge does not call it PROVEN."""
        assert self.counter is not None
        runs = self.counter.take(nodeid)
        name = nodeid.rsplit("::", 1)[-1]
        given = state.hypothesis is not None  # set for a @given test (and for a falsified nested property)
        if given and state.outcome == Outcome.PASSED and not any(r.property == name for r in runs):
            runs += (PropertyRun(name, 0, None, None),)
        return runs

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.tracer is not None:
            self._lines_outside()
            self.tracer.stop()
        if self.counter is not None:
            self.counter.stop()
        self.out.close()
        if self.stacks is not None:
            self.stacks.close()
