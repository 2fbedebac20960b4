"""Render the report view as Markdown (``verdicts.md``): a ledger table to paste into a pull request.

One row per card (verdict, date, headline measure, counts, time; a verdict
replayed by ``--changed`` shows "replayed from <date>" as its date), then the
transitions since the last run, then every card that is not PROVEN with its
reason, then (folded) the examples each witness's Hypothesis properties
ran. A report with mutation results adds a mutation column, "What no
theorem constrains" (functions no card claims, claimed functions with
surviving mutants) and per card its score, survivors as ``diff`` blocks,
equivalent and broken mutants with their reasons and the killed ones.
Computes nothing; see :mod:`harness.report.view`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from harness.record.build import fraction, liars_fraction
from harness.report.view import NOT_RUNNABLE
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


def _code_cell(text: Any) -> str:
    """A code span in a table cell: GFM reads an escaped pipe as a pipe even there; nothing else is interpreted."""
    if not str(text).strip():
        return "–"
    span = _code(text).replace("|", "\\|")
    return f"`{span}`"


def _fence(text: str, lang: str = "") -> list[str]:
    """A fenced block longer than any backtick run inside ``text``."""
    run = max((len(r) for r in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, run + 1)
    return [fence + lang, *text.rstrip("\n").splitlines(), fence]


def _where(x: Mapping[str, Any]) -> str:
    return f"`{_code(x['key'])}` {_inline(x['location'])} `{_code(x['qualname'])}`: `{_code(x['change'])}`"


def _table(heading: str, columns: str, align: str, rows: list[str]) -> list[str]:
    """``heading``, then a table: ``columns`` and ``align`` are its header lines, ``rows`` its rows."""
    return ["", heading, "", columns, align, *rows] if rows else []


def _mutation(c: Mapping[str, Any]) -> list[str]:
    m = c["mutation"]
    facts = [m["counts"], m["sampled"], m["floor"], m["delta"], m["measured"]]
    out = [
        "",
        f"### {_inline(c['id'])}: mutation score {m['score_text']}",
        "",
        f"{m['score_text']} of the scored mutants detected · " + " · ".join(f for f in facts if f),
    ]
    if m["stale_text"]:
        out += ["", f"> {m['stale_text']}"]
    if m["reused"]:
        out += ["", m["reused"]]
    if m["survived"]:
        out += ["", f"**Survived ({len(m['survived'])})**: wrong code every witness passes"]
        for x in m["survived"]:
            out += ["", _where(x) + (f" ({x['reused']})" if x["reused"] else "")]
            if x["diff"]:
                out += ["", *_fence(x["diff"], "diff")]
    for group, heading in (
        ("equivalent", "Equivalent ({n})**: marked with a reason, not scored"),
        ("errors", "Error ({n})**: could not be run, not scored"),
    ):
        if m[group]:
            out += ["", "**" + heading.format(n=len(m[group])), ""]
            out += [f"- {_where(x)} — {_inline(x['detail'] or x['killer'] or '–')}" for x in m[group]]
    if m["detected"]:
        out += _table(
            f"<details><summary>{len(m['detected'])} detected (killed or timed out)</summary>",
            "| mutant | change | status | caught by |",
            "|---|---|---|---|",
            [
                f"| {_code_cell(x['key'])} | {_code_cell(x['change'])} | {x['status']} | {_cell(x['killer'])} |"
                for x in m["detected"]
            ],
        ) + ["", "</details>"]
    return out


def _claims(claims: Mapping[str, Any]) -> list[str]:
    return (
        ["", "## What no theorem constrains", "", f"{claims['summary']}; {claims['surviving_summary']}."]
        + _table(
            f"Functions no card claims ({len(claims['unclaimed'])}):",
            "| file | function |",
            "|---|---|",
            [f"| {_code_cell(r['path'])} | {_code_cell(r['qualname'])} |" for r in claims["unclaimed"]],
        )
        + _table(
            f"Claimed functions with surviving mutants ({len(claims['surviving'])}):",
            "| function | claimed by | mutants | survived |",
            "|---|---|--:|--:|",
            [
                f"| {_code_cell(r['name'])} | {_cell(r['cards_text'])} | {r['mutants']} | {r['survived']} |"
                for r in claims["surviving"]
            ],
        )
    )


def _examples(cards: list[Mapping[str, Any]]) -> list[str]:
    """The examples each witness's Hypothesis properties ran, folded: one line per witness that has any."""
    rows = [
        f"- **{_inline(c['id'])}** `{_code(w['id'])}`: " + (f"**{_inline(t)}**" if w["examples_short"] else _inline(t))
        for c in cards
        for w in c["witnesses"] + c["controls"]
        if (t := w["examples_text"])
    ]
    return ["", "<details><summary>Hypothesis examples each witness ran</summary>", "", *rows, "", "</details>"]


def _grid(grid: Mapping[str, Any]) -> list[str]:
    """The card x configuration grid of a --matrix run, then what each configuration is."""
    names = [s["name"] + ("" if s["required"] else " (survey)") for s in grid["subjects"]]
    out = ["", "## Card x configuration", "", "| card | over all | " + " | ".join(map(_cell, names)) + " |"]
    out.append("|---|---|" + "---|" * len(names))
    for row in grid["rows"]:
        cells = [
            c["verdict"] if c["verdict"] in (Verdict.PROVEN, "–", NOT_RUNNABLE) else f"**{c['verdict']}**"
            for c in row["cells"]
        ]
        over = row["verdict"] if row["verdict"] == Verdict.PROVEN else f"**{row['verdict']}**"
        out.append(f"| {_cell(row['id'])} | {over} | " + " | ".join(cells) + " |")
    out.append("")
    for s in grid["subjects"]:
        what = _inline(s["numerics"] or s["reason"]) if s["runnable"] else f"not runnable here: {_inline(s['why_not'])}"
        out.append(f"- **{_inline(s['name'])}** (`{_code(s['settings_text'])}`): {what}")
        if s.get("drift"):
            out.append(f"  - drift: {_inline(s['drift'])}")
    return out


def _indented(lines: list[str], by: str = "    ") -> list[str]:
    return [by + ln if ln else "" for ln in lines]


def _node(r: Mapping[str, Any]) -> str:
    return f" {_inline(r['node'])}" if r.get("node") else ""


def _failure(w: Mapping[str, Any]) -> list[str]:
    """A failed witness's failure, as a list item: the failing check (numbered steps one a line), the shrunk
    example, its draws by label (a table), Hypothesis' explanation and what the test noted; fenced, never cut."""
    f = w["failure_block"]
    check = list(f["check_lines"])
    what = "failing check" if f["assertion"] else "bound not met"
    where = f" at {_inline(f['location'])}" if f["location"] else ""
    out = [f"  - {w['kind']} `{_code(w['id'])}` {what}{where}:", "", *_indented(_fence("\n".join(check)))]
    if f["example"]:
        out += ["", f"    shrunk Hypothesis example (seed {f['seed']}, profile {f['profile']}):", ""]
        out += _indented(_fence(f["example"]))
    if f["draws"]:
        rows = [f"| {_code_cell(d['name'])} | {_code_cell(d['value'])} |" for d in f["draws"]]
        out += ["", *_indented(["| data.draw | value |", "|---|---|", *rows])]
    for heading, key in (("Hypothesis' explanation", "explanation"), ("noted by the test", "notes")):
        if f[key]:
            out += ["", f"    {heading}:", "", *_indented(_fence("\n".join(f[key])))]
    return out + [""]


def render(view: Mapping[str, Any]) -> str:
    head, summary = view["header"], view["summary"]
    dirty = " (dirty)" if head["dirty"] else ""
    counts = ", ".join(f"{c['n']} {c['verdict']}" for c in summary["counts"] if c["n"])
    out = [
        f"# kvproof verdicts — gate {summary['gate']}",
        "",
        f"{head['date']} · commit `{head['commit_short']}`{dirty} · {head['host']} · "
        f"profile {head['profile']}, seed {head['seed']} · liars {head['liars']} · "
        f"{counts} of {summary['total']} card(s)"
        + (f" ({summary['replayed']} replayed)" if summary["replayed"] else "")
        + f" in {head['duration']}",
        "",
        *([f"numerics: {_inline(head['numerics'])}", ""] if head.get("numerics") else []),
        *([f"witness processes: {_inline(head['launcher'])}", ""] if head.get("launcher") else []),
        *([f"executor: {_inline(head['executor'])}", ""] if head.get("executor") else []),
        "| card | title | regime | verdict | date | headline | witnesses | controls | liars | time |"
        + (" mutation |" if summary["mutation"] else ""),
        "|---|---|:-:|---|---|---|--:|--:|--:|--:|" + ("--:|" if summary["mutation"] else ""),
    ]
    for c in view["cards"]:
        n = c["counts"]
        verdict = c["verdict"] if c["verdict"] == Verdict.PROVEN else f"**{c['verdict']}**"
        out.append(
            "| "
            + " | ".join(
                [
                    _cell(c["id"]),
                    _cell(c["title"]),
                    c["regime"],
                    verdict,
                    _cell(c["replayed"] or c["date"]),
                    _cell(c["headline"]["text"] if c["headline"] else "–"),
                    fraction(n["witnesses_passed"], n["witnesses_total"]),
                    fraction(n["controls_held"], n["controls_total"]),
                    liars_fraction(n),
                    "replayed" if c["replayed"] else f"{c['duration_s']:.2f} s",
                    *([_cell(c["mutation"]["cell"] if c["mutation"] else "—")] if summary["mutation"] else []),
                ]
            )
            + " |"
        )
    if view.get("grid"):
        out += _grid(view["grid"])
    if summary["changes"]:
        out += ["", "## Changes since the last run", ""]
        out += [f"- **{_inline(ch['id'])}** {ch['text']}" for ch in summary["changes"]]
    if view["not_proven"]:
        out += ["", "## Not PROVEN", ""]
        for c in view["not_proven"]:
            out.append(f"- **{_inline(c['id'])}** {c['verdict']}: {_inline(c['reason'])}")
            if c.get("since_proven"):
                out.append(f"  - {_inline(c['since_proven']['text'])}")
            if c["detail"] and not any(w.get("failure_block") and w["failure_block"]["example"] for w in c["failing"]):
                out.append(f"  - `{_code(c['detail'])}`")
            for w in c["failing"]:
                if w.get("failure_block"):
                    out += _failure(w)
                if w["replay"]:
                    out.append(f"  - replay: `{w['replay']}`")
                reproduce = (w.get("hypothesis") or {}).get("reproduce")
                if reproduce:
                    out.append(f"  - reproduce: `{_code(reproduce)}`")
                out += [f"  - reproduction{_node(r)}: `{_code(r['shown'])}`" for r in w.get("reproductions") or ()]
    if summary.get("examples"):
        out += _examples(view["cards"])
    if view["claims"]:
        out += _claims(view["claims"])
    mutated = [c for c in view["cards"] if c["mutation"]]
    if mutated:
        out += ["", "## Mutation"]
        for c in mutated:
            out += _mutation(c)
    return "\n".join(out) + "\n"
