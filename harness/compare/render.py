"""A :class:`harness.compare.diff.Comparison` as JSON, Markdown (for a pull request) and a rich terminal table."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from harness.compare.diff import CardChange, Comparison, MeasureChange, summary_counts
from harness.report.html import environment
from harness.report.svg import Bar, measure_bars
from harness.wire.safetext import escape as visible

COMPARE_SCHEMA = "kvproof.compare"
COMPARE_SCHEMA_VERSION = 1


def to_json(cmp: Comparison) -> dict[str, Any]:
    """Plain JSON types; infinities (a move off a zero headroom) are written as the string "inf"."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    data = clean(dataclasses.asdict(cmp))
    for card, change in zip(data["cards"], cmp.cards, strict=False):
        card["duration_change"] = change.duration_change
    return {
        "schema": COMPARE_SCHEMA,
        "schema_version": COMPARE_SCHEMA_VERSION,
        "summary": summary_counts(cmp),
        "added": list(cmp.added),
        "removed": list(cmp.removed),
        **data,
    }


def _num(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int) or float(v).is_integer() and abs(v) < 1e6:
        return f"{v:g}"
    return f"{v:.3g}"


def _delta(v: float | None, unit: str = "") -> str:
    if v is None:
        return ""
    return f"{v:+.3g}{unit}"


def verdict_text(c: CardChange) -> str:
    if c.status == "added":
        return f"(new) → {c.verdict_after}"
    if c.status == "removed":
        return f"{c.verdict_before} → (removed)"
    if c.verdict_before == c.verdict_after:
        return str(c.verdict_after)
    return f"{c.verdict_before} → {c.verdict_after}"


def liars_text(c: CardChange) -> str:
    def one(x):
        return "–" if x is None else f"{x[0]}/{x[1]}"

    if c.liars_before == c.liars_after:
        return one(c.liars_after)
    return f"{one(c.liars_before)} → {one(c.liars_after)}"


def duration_text(c: CardChange) -> str:
    a, b = c.duration_before, c.duration_after
    if a is None or b is None:
        return _num(b if b is not None else a) + " s"
    return f"{a:.1f} → {b:.1f} s ({_delta(b - a)})"


def measure_text(m: MeasureChange) -> str:
    mark = " ⚠" if m.regression else ""
    bound = f"{m.op} {_num(m.limit)}"
    where = f"{m.witness}[{m.node.rsplit('[', 1)[-1].rstrip(']')}]" if "[" in m.node else m.witness
    if where != m.witness:
        m = dataclasses.replace(m, witness=where)
    if m.before == m.after:
        return f"{m.witness}: {m.key} = {_num(m.after)} ({bound})"
    change = f"{_delta(m.change)}; " if m.change is not None else ""
    return f"{m.witness}: {m.key} {_num(m.before)} → {_num(m.after)} ({change}{bound}){mark}"


def changed_measures(c: CardChange) -> list[MeasureChange]:
    return [m for m in c.measures if m.before != m.after]


def to_markdown(cmp: Comparison) -> str:
    """A summary line, the regressions, and a table of every card that changed (unchanged ones counted)."""
    counts = summary_counts(cmp)
    lines = [
        f"## kvproof: {cmp.before.label} → {cmp.after.label}",
        "",
        f"Gate {cmp.before.gate} → {cmp.after.gate}; {counts['changed']} changed, {counts['unchanged']} "
        f"unchanged, {counts['added']} added, {counts['removed']} removed; "
        f"**{counts['regressions']} regression(s)**.",
        "",
    ]
    if cmp.regressions:
        lines += ["### Regressions", ""] + [f"- {_md(r.text)} ({r.rule})" for r in cmp.regressions] + [""]
    moved = [c for c in cmp.cards if c.status != "unchanged"]
    if moved:
        lines += [
            "| card | verdict | liars caught | time | measures that moved | bound files changed |",
            "|---|---|---|---|---|---|",
        ]
        for c in moved:
            ms = "<br>".join(_md(measure_text(m)) for m in changed_measures(c)) or "–"
            files = "<br>".join(_md(f) for f in c.changed_files) or "–"
            version = (
                ""
                if c.version_before == c.version_after or c.status != "changed"
                else f" (v{c.version_before} → v{c.version_after})"
            )
            lines.append(
                f"| {c.id}{version} | {verdict_text(c)} | {liars_text(c)} | {duration_text(c)} | {ms} | {files} |"
            )
        lines.append("")
    else:
        lines += ["No card changed.", ""]
    for c in cmp.cards:
        if c.card_diff:
            lines += [
                f"<details><summary>{c.id}: the card changed</summary>",
                "",
                "```diff",
                c.card_diff.rstrip("\n"),
                "```",
                "",
                "</details>",
                "",
            ]
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_terminal(console, cmp: Comparison, *, all_cards: bool = False) -> None:
    from rich.markup import escape
    from rich.table import Table

    def shown(text: str) -> str:  # control characters visible (harness.wire.safetext), then rich's markup escaped
        return escape(visible(text))

    counts = summary_counts(cmp)
    console.print(
        f"[bold]{shown(cmp.before.label)}[/] → [bold]{shown(cmp.after.label)}[/]: gate {cmp.before.gate} → "
        f"{cmp.after.gate}; {counts['changed']} changed, {counts['unchanged']} unchanged, "
        f"{counts['added']} added, {counts['removed']} removed"
    )
    rows = [c for c in cmp.cards if all_cards or c.status != "unchanged"]
    if rows:
        table = Table(show_lines=False, expand=False)
        for col in ("card", "verdict", "liars", "time", "measures that moved", "bound files changed"):
            table.add_column(col, overflow="fold")
        for c in rows:
            style = "red" if c.regressions else ("green" if c.status == "added" else "")
            version = (
                f"\nv{c.version_before} → v{c.version_after}"
                if (c.status == "changed" and c.version_before != c.version_after)
                else ""
            )
            table.add_row(
                shown(c.id) + version,
                verdict_text(c),
                liars_text(c),
                duration_text(c),
                shown("\n".join(measure_text(m) for m in changed_measures(c))) or "–",
                shown("\n".join(c.changed_files)) or "–",
                style=style,
            )
        console.print(table)
    for c in rows:
        if c.card_diff:
            console.print(f"[bold]{shown(c.id)}: the card changed[/]")
            console.print(visible(c.card_diff.rstrip("\n")), markup=False, highlight=False)
    if cmp.regressions:
        console.print(f"[bold red]{len(cmp.regressions)} regression(s):[/]")
        for r in cmp.regressions:
            console.print(f"  [red]{r.rule:8}[/] {shown(r.text)}", markup=True, highlight=False)
    else:
        console.print("[green]no regression[/]")


def to_html(cmp: Comparison) -> str:
    """One self-contained page (no script, nothing fetched): summary, regressions, the moved measures as bars,
    and the table of changed cards."""

    def num(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    moved = [c for c in cmp.cards if c.status != "unchanged"]
    bars = [
        Bar(f"{c.id}/{m.witness}: {m.key}", num(m.before), num(m.after), num(m.limit), m.regression)
        for c in moved
        for m in changed_measures(c)
    ]
    rows = [
        {
            "id": c.id,
            "verdict": verdict_text(c),
            "liars": liars_text(c),
            "time": duration_text(c),
            "measures": [measure_text(m) for m in changed_measures(c)] or ["–"],
            "files": list(c.changed_files) or ["–"],
            "version": f"v{c.version_before} → v{c.version_after}"
            if c.status == "changed" and c.version_before != c.version_after
            else "",
            "regression": bool(c.regressions),
            "diff": c.card_diff,
        }
        for c in moved
    ]
    return (
        environment()
        .get_template("compare.html.j2")
        .render(
            before=cmp.before.label,
            after=cmp.after.label,
            gate_before=cmp.before.gate,
            gate_after=cmp.after.gate,
            counts=summary_counts(cmp),
            regressions=[{"text": r.text, "rule": r.rule} for r in cmp.regressions],
            bars=measure_bars(bars),
            rows=rows,
        )
    )
