"""Project code in the runner: any way it tries to end the process becomes an error that names it.

The runner imports a few modules of the project under proof into its own
process (a project's ``[tool.kvproof] targets`` adapters,
:mod:`harness.targets.pyproject`). Such a module is often a script, and a
script may end the interpreter at import: ``sys.exit(0)`` (no ``__main__``
guard), ``exit()``, ``raise SystemExit``, ``os._exit(0)``, or an exit handler
(``atexit.register(os._exit, 0)``) that would replace the runner's exit code
at shutdown. Any of these could turn a failed gate into exit 0.

:func:`project_code` runs such code so that none of them can:

- ``SystemExit`` (``sys.exit``, ``exit()``, ``quit()``) and every other
  ``BaseException`` but a real Ctrl-C become :class:`ProjectCodeExited`, a
  :class:`~harness.errors.UsageError` (exit 2) naming the module and how it
  tried to exit;
- ``os._exit`` (and ``posix._exit``) is replaced while the code runs, so a call raises instead of
  ending the process;
- an exit handler the code registers is kept, but runs guarded at shutdown:
  it cannot call ``os._exit`` or change the exit status (its exception is
  reported in one line, without a traceback).

Outside the guard, a ``SystemExit`` that reaches the command line from
anywhere but the argument parser is an error too (:mod:`harness.cli`).
What the guard cannot stop: code that deliberately kills the process by a
signal (the exit status then says so: never 0), starts a thread that exits
later, or rewrites the harness in memory (docs/trust.md, "Where the line
is").
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from harness.errors import UsageError

WHY = "project code imported by kvproof may not end the run (an exit there could turn a failed gate into exit 0)"


class ProjectCodeExited(UsageError):
    """Project code imported into the runner tried to end the process (or raised a BaseException).

    ``how``: what it did, e.g. "called sys.exit(0) (or exit(), quit(), raise SystemExit)".
    """

    def __init__(self, message: str, how: str = "") -> None:
        super().__init__(message)
        self.how = how


class _ExitCalled(BaseException):
    """Raised in place of ``os._exit`` while project code runs in the runner."""

    def __init__(self, code: object) -> None:
        super().__init__(code)
        self.code = code


def _guarded_exit_handler(fn: Callable[..., Any], args: tuple, kwargs: dict, what: str) -> Callable[[], None]:
    def run() -> None:
        real = os._exit
        os._exit = _refuse_exit  # type: ignore[assignment]
        try:
            fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - nothing a project's exit handler does may end the runner
            print(f"kvproof: an exit handler registered by {what} {_how(exc)}; ignored", file=sys.stderr)
        finally:
            os._exit = real  # type: ignore[assignment]

    return run


def _refuse_exit(code: object = 0) -> None:
    raise _ExitCalled(code)


def _how(exc: BaseException) -> str:
    if isinstance(exc, _ExitCalled):
        return f"called os._exit({exc.code!r})"
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r}) (or exit(), quit(), raise SystemExit)"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"raised {type(exc).__name__}" + (f": {text[:300]}" if text else "")


@contextmanager
def project_code(what: str, fix: str) -> Iterator[None]:
    """Run the body (an import of project code) so that it cannot end the runner.

    ``what`` names the code for the message ("importing mycache_target (pyproject.toml [tool.kvproof]
    targets[0])"), ``fix`` says how to fix it. Raises :class:`ProjectCodeExited` for any exit or
    BaseException but KeyboardInterrupt (a real Ctrl-C stays one); an ordinary Exception passes through
    for the caller to name.
    """
    real_exit = os._exit
    exits = [m for m in (os, sys.modules.get("posix"), sys.modules.get("nt")) if m is not None and hasattr(m, "_exit")]
    registered: list[tuple[Callable[..., Any], tuple, dict]] = []
    real_register = atexit.register

    def register(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        registered.append((fn, args, kwargs))
        return fn

    for module in exits:
        module._exit = _refuse_exit  # type: ignore[attr-defined]
    atexit.register = register  # type: ignore[assignment]
    try:
        yield
    except KeyboardInterrupt:
        raise
    except Exception:
        raise
    except BaseException as exc:  # SystemExit, os._exit (patched), GeneratorExit, a custom BaseException
        how = _how(exc)
        raise ProjectCodeExited(f"{what} {how}: {WHY}; {fix}", how) from None
    finally:
        for module in exits:
            module._exit = real_exit  # type: ignore[attr-defined]
        atexit.register = real_register  # type: ignore[assignment]
        for fn, args, kwargs in registered:
            real_register(_guarded_exit_handler(fn, args, kwargs, what))
