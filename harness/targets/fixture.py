"""pytest plugin: the ``kv_target`` fixture, parametrized over the selected targets, and reproductions.

Loaded by ``witnesses/conftest.py`` (``pytest_plugins``). A witness about a
cache takes ``kv_target`` (a :class:`harness.targets.protocol.Target`) and
declares what it needs::

    @pytest.mark.kv_capabilities("truncate", "fork")
    def test_something(kv_target, evidence): ...

The test is parametrized over the targets of ``--kvproof-target NAME[,NAME]``
(names, groups ``own``/``transformers``/``project``/``all``, globs), else
``KVPROOF_TARGETS``, else the project's own targets when its pyproject.toml
declares some (``[tool.kvproof] targets``, found from pytest's rootdir up),
else ``own`` (the reference and impl's designs), with
the target name as the parameter id (``test_x[transformers.static]``). A
target that lacks a needed capability skips with ``n/a: target X lacks
capability Y``; one that cannot run here skips with ``n/a: target X is not
runnable here: <why>``. Neither is a verdict about the target.

``kv_repro`` collects a witness's failures on traced (third-party) handles;
with ``--kvproof-repro DIR`` the last one (Hypothesis' shrunk example) is
written as ``DIR/<target>/<test>.py`` when the test ends
(:mod:`harness.targets.repro`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.errors import TargetUnknown, UsageError
from harness.project import project_root
from harness.targets import registry
from harness.targets.protocol import Handle, Target
from harness.targets.replay import Program, replays
from harness.targets.replay import script as replay_script
from harness.targets.repro import Check, Header, Trace, render, write

MARKER = "kv_capabilities"
REPRO_ENV = "KVPROOF_REPRO_DIR"  # where an honest run's witness processes write reproductions
APPLIED_ENV = "KVPROOF_APPLIED"  # set in a witness process once a liar or mutant is patched in: no reproductions


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvproof")
    group.addoption(
        "--kvproof-target",
        default=None,
        metavar="NAME[,NAME]",
        help=f"targets for kv_target witnesses: names, groups (own, transformers, project, all) or globs "
        f"(default: ${registry.ENV_TARGETS}, else the project's [tool.kvproof] targets, else own)",
    )
    group.addoption(
        "--kvproof-repro",
        default=None,
        metavar="DIR",
        help="write a standalone reproduction of each failure on a third-party target to DIR/<target>/<test>.py",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(*capabilities): the kv_target capabilities a witness needs (else n/a for that target)"
    )
    try:
        registry.use_project(project_of(config))
        registry.select(config.getoption("kvproof_target"))
    except (TargetUnknown, UsageError) as exc:  # an unknown name; the project's [tool.kvproof] targets do not load
        raise pytest.UsageError(str(exc)) from None


def project_of(config: pytest.Config) -> Path | None:
    """The kvproof project whose targets these witnesses see: ``KVPROOF_ROOT``, else the nearest project at or
    above pytest's rootdir (the harness sets it to the project root), else none."""
    try:
        return project_root(Path(config.rootpath))
    except UsageError:
        return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kv_target" in metafunc.fixturenames:
        names = [t.name for t in registry.select(metafunc.config.getoption("kvproof_target"))]
        metafunc.parametrize("kv_target", names, indirect=True, ids=names)


def needed(item: pytest.Item) -> list[str]:
    """The capabilities the item's ``kv_capabilities`` markers name, in order."""
    out: list[str] = []
    for mark in item.iter_markers(MARKER):
        out += [c for c in mark.args if c not in out]
    return out


@pytest.fixture
def kv_target(request: pytest.FixtureRequest) -> Target:
    """The target this parametrization is about; skips (n/a) when it cannot run here or lacks a capability."""
    target = registry.get(request.param)
    if not target.runnable:
        pytest.skip(f"n/a: target {target.name} is not runnable here: {target.unavailable}")
    lacking = target.lacks(needed(request.node))
    if lacking:
        pytest.skip(f"n/a: target {target.name} lacks capability {', '.join(lacking)}")
    return target


@dataclass
class Failure:
    """One failed check on a traced handle, with the script state at that point."""

    header: Header
    trace: Trace


@dataclass
class ReproSink:
    """Traces for one witness's handles and the last failure on them."""

    target: Target
    witness: str
    folder: Path | None
    failures: list[Failure] = field(default_factory=list)
    programs: list[ProgramFailure] = field(default_factory=list)

    def trace(self) -> Trace | None:
        """A fresh trace for the handles of one example (None for impl's own targets). A handle whose adapter
        keeps no trace is recorded at the protocol level instead (:mod:`harness.targets.replay`)."""
        return None if self.target.own else Trace()

    def failed(self, handle: Handle, check: Check, claim: str, verbs: tuple[str, ...], title: str = "") -> None:
        """Record that ``check`` fails on ``handle`` (a traced or recorded one; others are ignored) here."""
        program = getattr(handle, "program", None)
        if isinstance(program, Program):
            self.programs.append(ProgramFailure(program.snapshot(), claim, check.says, "occupancy" in verbs))
            return
        trace = getattr(handle, "trace", None)
        if trace is None:
            return
        t = trace.snapshot()
        t.check(check)
        header = Header(
            title or f"{self.target.title}: {claim}",
            self.target.name,
            self.target.binding(),
            self.target.title.split(":")[0],
            claim,
            self.target.backing(verbs),
            self.witness,
        )
        self.failures.append(Failure(header, t))

    def script(self) -> str:
        """The reproduction of the last failure, as text ("" when none, or when a recorded program's replay
        does not find the problem: a failure that needs two histories compared has no one-program script)."""
        if self.programs:
            last = self.programs[-1]
            if not replays(self.target, last.program, last.occupancy):
                return ""
            return replay_script(self.target, last.program, last.claim, self.witness, last.says, last.occupancy)
        if not self.failures:
            return ""
        last = self.failures[-1]
        return render(last.header, last.trace)


@dataclass(frozen=True)
class ProgramFailure:
    """A check that failed on a recorded handle: the program up to it."""

    program: Program
    claim: str
    says: str
    occupancy: bool = False  # the claim checked occupancy: so does the script


def repro_folder(config: pytest.Config) -> Path | None:
    """Where reproductions go: ``--kvproof-repro DIR``, else ``$KVPROOF_REPRO_DIR`` (set by kvproof for an honest
    run's witness processes; a liar or mutant run unsets it), else nowhere."""
    folder = config.getoption("kvproof_repro") or os.environ.get(REPRO_ENV)
    return Path(folder) if folder else None


@pytest.fixture
def kv_repro(request: pytest.FixtureRequest, kv_target: Target, evidence):
    """A :class:`ReproSink` for this witness; at teardown, when a folder is given, writes the last failure's
    script to ``FOLDER/<target>/<test>.py`` and records its path as the evidence ``reproduction`` (in a
    kvproof run, relative to the report folder, which holds it as ``repro/<target>/<test>.py``)."""
    sink = ReproSink(kv_target, request.node.nodeid, repro_folder(request.config))
    yield sink
    if sink.folder is not None and (sink.failures or sink.programs) and not os.environ.get(APPLIED_ENV):
        text = sink.script()
        if text:
            name = request.node.originalname if hasattr(request.node, "originalname") else request.node.name
            path = write(sink.folder / kv_target.name / f"{name}.py", text)
            from_run = not request.config.getoption("kvproof_repro")  # kvproof's run moves it into its report
            evidence.record("reproduction", f"repro/{kv_target.name}/{name}.py" if from_run else str(path))
