"""The oracle export says where it is in a log too: off a terminal, plain progress lines (first run, CI)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import Progress

from harness.oracle import export


def test_off_a_terminal_the_export_prints_plain_lines_throttled_and_the_end(monkeypatch):
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=100)
    clock = iter(float(t) for t in range(0, 1000, 3))  # each call 3 s later
    monkeypatch.setattr(export.time, "perf_counter", lambda: next(clock))
    with Progress(console=console) as progress:
        bar = export._Bar(progress)
        for i in range(10):
            bar.advance(f"prompt {i}")
        bar.done()
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("oracle export:")]
    assert lines[0].startswith(f"oracle export: 0/{bar.steps} loading transformers")
    assert lines[-1].startswith(f"oracle export: {bar.steps}/{bar.steps} done")
    assert 3 <= len(lines) <= 6, lines  # 30 s of steps: a line at most every 10 s, plus the first and the end


def test_on_a_terminal_only_the_bar_draws():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with Progress(console=console) as progress:
        bar = export._Bar(progress)
        bar.advance("prompt 0")
        bar.done()
    assert "oracle export:" not in out.getvalue()
