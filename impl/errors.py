"""One root exception for impl; each error is also the builtin it refines.

Messages name the culprit as ``field=value``, say what is allowed and how
to fix it.
"""


class ImplError(Exception):
    """Root of every error impl raises on purpose."""


class WeightsError(ImplError, RuntimeError):
    """The GGUF weights file is missing, unreadable or not the expected one."""


class WeightsMissing(WeightsError, FileNotFoundError):
    """No weights file where one was expected."""


class WeightsCorrupt(WeightsError, ValueError):
    """The weights file exists but its content is wrong (hash, format)."""


class CacheError(ImplError, ValueError):
    """A KV-cache operation got arguments it cannot honour."""


class SettingError(ImplError, ValueError):
    """An environment setting (KVPROOF_KERNEL, KVPROOF_KERNEL_ISA, KVPROOF_ATTENTION, KVPROOF_DECODE) has a value
    impl does not know, or insists on a path that is unavailable (e.g. an ISA build this CPU cannot execute)."""


class SettingUnavailable(SettingError):
    """A valid setting that asks for a path this machine cannot run (an ISA build this CPU cannot execute, the C
    kernel where it does not build). ``unavailable`` tells a configuration probe "not runnable here" rather than
    "invalid" (harness.plan.subjects)."""

    unavailable = True


def setting(name: str, choices: tuple[str, ...], what: str, meaning: str) -> str:
    """The environment setting ``name``, lower-cased ("auto" when unset or empty), one of ``choices``; else a
    SettingError naming the value, ``what`` it should have been, the choices and ``meaning`` (what they do)."""
    import os

    raw = os.environ.get(name)
    choice = (raw or "auto").strip().lower() or "auto"
    if choice not in choices:
        raise SettingError(f"{name}={raw!r} is not {what}: use one of {', '.join(choices)} ({meaning}), or unset it")
    return choice
