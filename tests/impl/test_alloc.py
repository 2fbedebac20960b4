"""impl.alloc: the allocator policy load_model applies, its opt-out and its errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from impl import alloc
from impl.errors import SettingError


def _status_in_a_fresh_process(env_value: str | None) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if k != alloc.ENV}
    if env_value is not None:
        env[alloc.ENV] = env_value
    code = "from impl import alloc; print(alloc.configure())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_default_keeps_freed_memory_where_glibc_allows():
    r = _status_in_a_fresh_process(None)
    assert r.returncode == 0, r.stderr
    import platform

    if platform.libc_ver()[0] == "glibc":
        assert "keeps freed memory" in r.stdout
    else:
        assert "system malloc defaults" in r.stdout


def test_system_leaves_the_defaults_alone():
    r = _status_in_a_fresh_process("system")
    assert r.returncode == 0 and r.stdout.strip() == f"system malloc defaults ({alloc.ENV}=system)"


def test_an_unknown_value_is_refused_naming_the_choices(monkeypatch):
    monkeypatch.setenv(alloc.ENV, "fast")
    with pytest.raises(SettingError) as e:
        alloc.configure()
    assert f"{alloc.ENV}='fast'" in str(e.value) and all(c in str(e.value) for c in ("auto", "keep", "system"))
