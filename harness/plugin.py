"""pytest plugin for witnesses: the ``evidence`` fixture, Hypothesis profiles, outcome capture.

Loaded by ``witnesses/conftest.py`` (so plain ``pytest witnesses/`` works with
no harness) and by the harness with ``-p harness.plugin``.

- ``evidence.record("max_abs_delta", 0.0)`` stores any JSON-able value a
  witness measured; cards put bounds on these keys.
- Hypothesis profiles ``ci`` (fast, derandomized, default) and ``release``
  (many more examples), chosen with ``--kvproof-profile`` or the
  ``KVPROOF_PROFILE`` environment variable.
- With ``--kvproof-plan PLAN.json`` (written by :mod:`harness.run`) the plugin
  applies the plan's liar before collection and streams one JSON line per
  event to the plan's ``out`` file, flushed as it goes: ``start`` when a node
  begins and ``result`` when it ends. A node with a ``start`` and no
  ``result`` is the one that was running when the process hung or died.
  It also arms :func:`faulthandler.dump_traceback_later` with the node's
  timeout, so a hang leaves the stack it hung in.

Failure versus error: a call-phase ``AssertionError`` (numpy's testing
asserts, ``pytest.fail``, Hypothesis re-raising a falsified assertion, or an
exception group made only of those) is ``failed``; any other exception,
and anything raised in setup or teardown, is ``error``.
"""
from __future__ import annotations

import faulthandler
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

PROFILES = ("ci", "release")
_FLAKY = {"Flaky", "FlakyFailure", "FlakyReplay", "FlakyStrategyDefinition", "FlakyBackendFailure"}
_TEXT_LIMIT = 8000


def _register_profiles() -> None:
    from hypothesis import HealthCheck, settings

    common = dict(deadline=None, database=None, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("ci", max_examples=50, derandomize=True, **common)
    settings.register_profile("release", max_examples=1000, derandomize=False, **common)


_register_profiles()  # at import, so --hypothesis-profile=release also finds them


# ---------------------------------------------------------------- evidence


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy scalars and arrays
        value = value.tolist()
    if isinstance(value, tuple):
        value = list(value)
    json.dumps(value, allow_nan=True)  # raises TypeError for anything else
    return value


class Evidence:
    """Measured values one witness records, keyed by name."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def __repr__(self) -> str:
        return f"Evidence({self.values!r})"

    def record(self, key: str, value: object) -> None:
        """Record ``value`` (number, str, bool, None, list, dict; numpy scalars and
        arrays are converted) under ``key``. Recording a key again replaces it.

        Raises TypeError when the key is not a str or the value is not JSON-able.
        """
        if not isinstance(key, str) or not key:
            raise TypeError(f"evidence.record(key={key!r}): key must be a non-empty str such as 'max_abs_delta'")
        try:
            self.values[key] = _jsonable(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"evidence.record({key!r}, value={value!r:.80}): value must be JSON-able "
                "(number, str, bool, None, list, dict); convert it, e.g. float(x)") from None


_EVIDENCE_KEY = pytest.StashKey[Evidence]()


@pytest.fixture
def evidence(request: pytest.FixtureRequest) -> Evidence:
    """Record measured values: ``evidence.record("max_abs_delta", 0.0)``."""
    ev = Evidence()
    request.node.stash[_EVIDENCE_KEY] = ev
    return ev


# ---------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvproof")
    group.addoption("--kvproof-plan", default=None, metavar="PLAN.json",
                    help="run plan written by the kvproof harness (liar, output file, timeouts)")
    group.addoption("--kvproof-profile", default=None, choices=PROFILES,
                    help="Hypothesis profile: ci (fast, deterministic; default) or release")


def pytest_configure(config: pytest.Config) -> None:
    from hypothesis import Phase, settings

    plan_path = config.getoption("kvproof_plan")
    plan = json.loads(Path(plan_path).read_text()) if plan_path else {}
    profile = config.getoption("kvproof_profile") or plan.get("profile") or os.environ.get("KVPROOF_PROFILE") or "ci"
    if profile not in PROFILES:
        raise pytest.UsageError(f"KVPROOF_PROFILE={profile!r}: allowed: {', '.join(PROFILES)}")
    if config.getoption("hypothesis_profile", None) is None:
        name = profile
        overrides: dict[str, Any] = {}
        if config.getoption("hypothesis_seed", None) is not None:
            overrides["derandomize"] = False  # NOTE: derandomize would ignore --hypothesis-seed
        if plan.get("liar"):
            overrides["phases"] = (Phase.explicit, Phase.reuse, Phase.generate)  # no shrinking under a liar
        if overrides:
            name = f"{profile}-kvproof"
            settings.register_profile(name, settings.get_profile(profile), **overrides)
        settings.load_profile(name)
    if plan:
        config.pluginmanager.register(_Recorder(config, plan, profile), "kvproof-recorder")


# ---------------------------------------------------------------- recorder


def _is_assertion(exc: BaseException) -> bool:
    if type(exc).__name__ in _FLAKY:
        return False
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_assertion(e) for e in exc.exceptions)
    return isinstance(exc, (AssertionError, pytest.fail.Exception))


def _notes(exc: BaseException) -> list[str]:
    notes = list(getattr(exc, "__notes__", []) or [])
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            notes += _notes(sub)
    return notes


def _clip(text: str, limit: int = _TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n... (clipped) ...\n" + text[-limit // 2:]


class _Recorder:
    """Streams node events to the plan's JSONL file; applies the plan's liar."""

    def __init__(self, config: pytest.Config, plan: dict, profile: str) -> None:
        self.config = config
        self.plan = plan
        self.root = Path(plan.get("root") or config.rootpath)
        self.out = open(plan["out"], "a", encoding="utf-8", buffering=1)
        self.stacks = open(plan["stacks"], "w", encoding="utf-8") if plan.get("stacks") else None
        self.timeouts: dict[str, float] = plan.get("timeouts", {})
        self.default_timeout = float(plan.get("default_timeout", 60))
        self.nodes: dict[str, dict] = {}
        self.emit("session", pid=os.getpid(), profile=profile, seed=plan.get("seed"), liar=plan.get("liar"))
        if plan.get("liar"):
            self._apply_liar(plan["liar"])

    def emit(self, event: str, **data: Any) -> None:
        self.out.write(json.dumps({"event": event, **data}, default=repr) + "\n")
        self.out.flush()

    def _apply_liar(self, name: str) -> None:
        from harness.errors import LiarError
        from harness.liars import apply

        try:
            applied = apply(name, self.root)
        except LiarError as exc:
            self.emit("liar", name=name, ok=False, error=str(exc))
            raise pytest.UsageError(str(exc)) from None
        self.emit("liar", name=name, ok=True, target=applied.target)

    def _timeout_for(self, nodeid: str) -> float:
        for test, seconds in self.timeouts.items():
            if nodeid == test or nodeid.startswith(test + "[") or nodeid.startswith(test + "::"):
                return float(seconds)
        return self.default_timeout

    # -- hooks

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.emit("collect_error", nodeid=report.nodeid, text=_clip(str(report.longrepr)))

    def pytest_runtest_logstart(self, nodeid: str, location: tuple) -> None:
        timeout = self._timeout_for(nodeid)
        self.nodes[nodeid] = {"outcome": "passed", "duration": 0.0, "message": "", "failure": "",
                              "location": "", "evidence": {}, "hypothesis": None}
        self.emit("start", nodeid=nodeid, t=time.time(), timeout=timeout)
        if self.stacks is not None:
            faulthandler.dump_traceback_later(timeout, repeat=False, file=self.stacks)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        state = self.nodes.setdefault(item.nodeid, {"outcome": "passed", "duration": 0.0, "message": "",
                                                    "failure": "", "location": "", "evidence": {},
                                                    "hypothesis": None})
        state["duration"] += report.duration
        ev = item.stash.get(_EVIDENCE_KEY, None)
        if ev is not None:
            state["evidence"] = dict(ev.values)
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False) and state["hypothesis"] is None:
            from hypothesis import settings

            seed = self.config.getoption("hypothesis_seed", None)
            seed = int(seed) if isinstance(seed, str) and seed.lstrip("-").isdigit() else seed
            state["hypothesis"] = {"seed": seed if seed is not None else (
                "derandomized" if settings.default.derandomize else None),
                "profile": settings.get_current_profile_name(), "example": "", "reproduce": ""}
        if report.passed or state["outcome"] in ("failed", "error"):
            return
        if report.skipped:
            if state["outcome"] == "passed":
                state["outcome"] = "skipped"
                longrepr = report.longrepr
                reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
                if hasattr(report, "wasxfail"):
                    reason = f"xfail: {report.wasxfail or reason}"
                state["message"] = reason.removeprefix("Skipped: ")
            return
        # failed in some phase
        exc = call.excinfo.value if call.excinfo is not None else None
        is_failure = report.when == "call" and exc is not None and _is_assertion(exc)
        state["outcome"] = "failed" if is_failure else "error"
        if call.excinfo is not None:
            first = (call.excinfo.exconly().strip().splitlines() or [""])[0]
        else:
            first = (report.longreprtext.strip().splitlines() or [""])[-1]
        prefix = "" if report.when == "call" else f"in {report.when}: "
        state["message"] = _clip(prefix + first, 300)
        state["failure"] = _clip(report.longreprtext)
        if call.excinfo is not None:
            for entry in reversed(call.excinfo.traceback):
                if Path(entry.path) == Path(item.path):
                    path = Path(entry.path)
                    shown = path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else path
                    state["location"] = f"{shown}:{entry.lineno + 1}"
                    break
        if exc is not None and state["hypothesis"] is not None:
            notes = _notes(exc)
            state["hypothesis"]["example"] = "\n".join(n for n in notes if "reproduce_failure" not in n)
            state["hypothesis"]["reproduce"] = "\n".join(n for n in notes if "reproduce_failure" in n)

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple) -> None:
        if self.stacks is not None:
            faulthandler.cancel_dump_traceback_later()
        state = self.nodes.pop(nodeid, None)
        if state is not None:
            self.emit("result", nodeid=nodeid, **state)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.emit("finish", exitstatus=int(exitstatus))

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.out.close()
        if self.stacks is not None:
            self.stacks.close()
