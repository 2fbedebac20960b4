"""Renderers of the verdicts document built by :mod:`harness.report.data`.

``terminal`` (rich table) and ``jsonfile`` (the ``--json`` document) now;
HTML, Markdown and JUnit render the same document later.
"""
