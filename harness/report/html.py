"""Render the report view as one self-contained HTML page (``index.html``).

jinja2 with autoescaping on and undefined names as errors; the template
(``templates/report.html.j2``) has its CSS inline, loads nothing from the
network and needs no script: the "not PROVEN only" filter is a checkbox
and a CSS rule. Computes nothing; see :mod:`harness.report.view`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.project import KVPROOF_HOME

TEMPLATES = Path(__file__).with_name("templates")


def _bytecode_cache():
    """jinja2's own bytecode cache in ``<checkout>/.cache/jinja2`` (compiling the report template took 0.4 s
    of every run); None (compile each time) where that folder cannot be made or written."""
    import jinja2

    folder = KVPROOF_HOME / ".cache" / "jinja2"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(folder)) if os.access(folder, os.W_OK | os.X_OK) else None


@functools.lru_cache(maxsize=1)
def environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        bytecode_cache=_bytecode_cache(),
    )


def render(view: Mapping[str, Any]) -> str:
    return environment().get_template("report.html.j2").render(view=view, **view)


def redirect_page(target: str) -> str:
    """A page that sends the browser to ``target`` (``reports/latest.html`` where symlinks fail)."""
    return (
        environment()
        .from_string(
            '<!doctype html><meta charset="utf-8"><title>kvproof: latest report</title>'
            '<meta http-equiv="refresh" content="0; url={{ t }}">'
            '<p>The latest report is <a href="{{ t }}">{{ t }}</a>.</p>\n'
        )
        .render(t=target)
    )
