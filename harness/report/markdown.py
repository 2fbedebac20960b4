"""Render the report view as Markdown (``verdicts.md``): a ledger table to paste into a pull request.

One row per card (verdict, date, headline measure, counts, time; a verdict
replayed by ``--changed`` shows "replayed from <date>" as its date), then the
transitions since the last run, then every card that is not PROVEN with its
reason. Computes nothing; see :mod:`harness.report.view`.
"""
from __future__ import annotations

from typing import Any, Mapping

from harness.report.data import fraction, liars_fraction
from harness.statuses import Verdict


def _html(text: str) -> str:
    """Markdown passes raw HTML through: a title like ``<script>`` must show as text (``<`` is enough)."""
    return text.replace("<", "&lt;")


def _cell(text: Any) -> str:
    """Table cells: one line, pipes escaped, HTML shown as text, never empty."""
    text = _html(" ".join(str(text).split()))
    return text.replace("\\", "\\\\").replace("|", "\\|") or "–"


def _inline(text: Any) -> str:
    return _html(" ".join(str(text).split()))


def _code(text: Any) -> str:
    """Inside backticks nothing is interpreted; a backtick would end the span."""
    return " ".join(str(text).split()).replace("`", "'")


def render(view: Mapping[str, Any]) -> str:
    head, summary = view["header"], view["summary"]
    dirty = " (dirty)" if head["dirty"] else ""
    counts = ", ".join(f"{c['n']} {c['verdict']}" for c in summary["counts"] if c["n"])
    out = [f"# kvproof verdicts — gate {summary['gate']}", "",
           f"{head['date']} · commit `{head['commit_short']}`{dirty} · {head['host']} · "
           f"profile {head['profile']}, seed {head['seed']} · liars {head['liars']} · "
           f"{counts} of {summary['total']} card(s)"
           + (f" ({summary['replayed']} replayed)" if summary["replayed"] else "") + f" in {head['duration']}", "",
           *([f"numerics: {_inline(head['numerics'])}", ""] if head.get("numerics") else []),
           "| card | title | regime | verdict | date | headline | witnesses | controls | liars | time |",
           "|---|---|:-:|---|---|---|--:|--:|--:|--:|"]
    for c in view["cards"]:
        n = c["counts"]
        verdict = c["verdict"] if c["verdict"] == Verdict.PROVEN else f"**{c['verdict']}**"
        out.append("| " + " | ".join([
            _cell(c["id"]), _cell(c["title"]), c["regime"], verdict, _cell(c["replayed"] or c["date"]),
            _cell(c["headline"]["text"] if c["headline"] else "–"),
            fraction(n["witnesses_passed"], n["witnesses_total"]), fraction(n["controls_held"], n["controls_total"]),
            liars_fraction(n),
            "replayed" if c["replayed"] else f"{c['duration_s']:.2f} s"]) + " |")
    if summary["changes"]:
        out += ["", "## Changes since the last run", ""]
        out += [f"- **{_inline(ch['id'])}** {ch['text']}" for ch in summary["changes"]]
    if view["not_proven"]:
        out += ["", "## Not PROVEN", ""]
        for c in view["not_proven"]:
            out.append(f"- **{_inline(c['id'])}** {c['verdict']}: {_inline(c['reason'])}")
            if c["detail"]:
                out.append(f"  - `{_code(c['detail'])}`")
            for w in c["failing"]:
                if w["replay"]:
                    out.append(f"  - replay: `{w['replay']}`")
                reproduce = (w.get("hypothesis") or {}).get("reproduce")
                if reproduce:
                    out.append(f"  - reproduce: `{_code(reproduce)}`")
    return "\n".join(out) + "\n"
