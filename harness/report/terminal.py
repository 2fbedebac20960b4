"""Render the verdicts document, cards, problems and the expected timings to a rich console. Computes nothing."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape as markup_escape
from rich.table import Table
from rich.text import Text

from harness.compare.render import render_terminal
from harness.plan import timings
from harness.plan.subjects import split
from harness.plan.timings import Expected, chain_s
from harness.project import program
from harness.record.build import fraction, liars_fraction
from harness.report.view import examples_text, mutation_view, replayed_text
from harness.statuses import VERDICTS, CardState, Gate, Outcome, Verdict
from harness.wire.safetext import escape as visible


def escape(text: str) -> str:
    """Text for the terminal: control characters, escape sequences, bidi overrides and lone surrogates as
    visible escapes (:mod:`harness.wire.safetext`; a ledger row from before they were escaped at ingress too), then
    rich's own markup escaped."""
    return markup_escape(visible(text))


STYLE = {
    Verdict.PROVEN: "bold green",
    Verdict.FAILED: "bold red",
    Verdict.VACUOUS: "bold magenta",
    Verdict.UNVERIFIED: "bold yellow",
    Verdict.ERROR: "bold white on red",
    CardState.STALE: "bold cyan",
}


def console(stderr: bool = False) -> Console:
    """A console for stdout (or stderr): the terminal's width, or 160 columns in logs (CI reads them wide)."""
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else int(os.environ.get("COLUMNS", "160"))
    return Console(stderr=stderr, width=width, highlight=False)


HEADLINE_WIDTH = 44  # columns of the results table's headline, at most (a measure fits on one line)
SURVIVORS_SHOWN = 5  # surviving mutants listed per card; the report lists them all


def verdict_text(verdict: str) -> str:
    return f"[{STYLE.get(verdict, 'bold')}]{verdict}[/]"


def _mutation_cell(m: Mapping[str, Any] | None) -> str:
    if m is None:
        return "—"
    style = "cyan" if m["stale"] else ("red" if m["holds"] is False else "")
    return f"[{style}]{escape(m['cell'])}[/]" if style else escape(m["cell"])


def render_mutation(console: Console, card_id: str, m: Mapping[str, Any], indent: str = "") -> None:
    """A card's mutation score in one line, then its surviving mutants (key and change), at most a few."""
    facts = [m["counts"], m["stale_text"] or m["floor"], m["measured"], m["delta"]]
    style = "cyan" if m["stale"] else ("red" if m["holds"] is False else "bold")
    console.print(
        f"{indent}[bold]{escape(card_id)}[/] mutation [{style}]{escape(m['score_text'])}[/]: "
        + escape(" · ".join(f for f in facts if f)),
        soft_wrap=True,
    )
    for x in m["survived"][:SURVIVORS_SHOWN]:
        console.print(f"{indent}    survived [bold]{escape(x['key'])}[/]  {escape(x['change'])}", soft_wrap=True)
    more = len(m["survived"]) - SURVIVORS_SHOWN
    if more > 0:
        console.print(f"{indent}    … {more} more survivor(s): see index.html", style="dim")


def render_grid(console: Console, grid: Mapping[str, Any]) -> None:
    """A ``--matrix`` run: one row per card, one column per configuration, then what each configuration is."""
    table = Table(title=None, show_lines=False, header_style="bold", pad_edge=False)
    width = max((len(r["id"]) for r in grid["rows"]), default=4)
    table.add_column("card", no_wrap=True, min_width=width)
    table.add_column("over all", no_wrap=True, min_width=10)
    for sub in grid["subjects"]:
        # NOTE: headers fold (a target's name is long); cells hold one verdict word each
        table.add_column(escape(sub["name"]) + ("" if sub["required"] else " (survey)"), overflow="fold")
    if grid.get("examples"):
        table.add_column("examples", justify="right", no_wrap=True)
    for row in grid["rows"]:
        cells = [
            verdict_text(c["verdict"]) if c["verdict"] in VERDICTS else f"[dim]{c['verdict']}[/]" for c in row["cells"]
        ]
        over = verdict_text(row["verdict"]) if row["verdict"] in VERDICTS else row["verdict"]
        table.add_row(escape(row["id"]), over, *cells, *((escape(row["examples"]),) if grid.get("examples") else ()))
    console.print(table)
    for sub in grid["subjects"]:
        what = (
            escape(sub["numerics"] or sub["reason"])
            if sub["runnable"]
            else f"[yellow]not runnable here[/]: {escape(sub['why_not'])}"
        )
        console.print(f"  [bold]{escape(sub['name'])}[/] ({escape(sub['settings_text'])}): {what}", soft_wrap=True)
        if sub.get("drift"):
            console.print(f"    [yellow]drift[/]: {escape(sub['drift'])}", soft_wrap=True)


@dataclass(frozen=True)
class Shown:
    """How much of a run the terminal shows (never what the run writes): ``verbosity`` is ``-v`` minus ``-q``
    (:data:`VERBOSITY`), ``maxfail`` and ``not_run`` the ``-x`` / ``--maxfail`` stop, if it stopped."""

    verbosity: int = 0
    maxfail: int = 0
    not_run: tuple[str, ...] = ()


VERBOSITY = {
    -2: "-qq: one line per card that is not PROVEN, the -x stop, the gate line",
    -1: "-q: each card that is not PROVEN with its failure, mutation survivors, the -x stop, the gate line, the report",
    0: "the start line, the results table, the cards that are not PROVEN, the gate line, the time per card",
    1: "-v: also each card's verdict as it is known, and under each card its witnesses, node ids, checks and liars",
    2: "-vv: also every node of a parametrized witness, the evidence recorded beside the bounds, each liar's witnesses",
}


def render_run(console: Console, view: Mapping[str, Any], shown: Shown | None = None) -> None:
    """The results table (a ``--matrix`` run: the card x configuration grid), then one or two lines per card
    or cell that is not PROVEN, then the gate (from the report view); ``shown``: how much (:class:`Shown`)."""
    head, s = view["header"], view["summary"]
    shown = shown or Shown()
    if shown.verbosity < 0:
        _render_rest(console, view, head, s, shown)
        return
    if view.get("grid"):
        render_grid(console, view["grid"])
        render_details(console, view, shown.verbosity)
        _render_rest(console, view, head, s, shown)
        return
    table = Table(title=None, show_lines=False, header_style="bold", pad_edge=False)
    for name, kw in (
        ("id", {"no_wrap": True}),
        ("title", {"overflow": "fold", "ratio": 1}),
        ("regime", {"justify": "center"}),
        ("verdict", {"no_wrap": True}),
        ("witnesses", {"justify": "right"}),
        ("controls", {"justify": "right"}),
        ("liars", {"justify": "right"}),
        ("headline", {"overflow": "fold", "max_width": HEADLINE_WIDTH}),  # a FAILED card's check in short wraps
        ("time", {"justify": "right", "overflow": "fold"}),
        *((("examples", {"justify": "right", "no_wrap": True}),) if s.get("examples") else ()),
        *((("mutation", {"justify": "right", "no_wrap": True}),) if s.get("mutation") else ()),
    ):
        table.add_column(name, **kw)
    for c in view["cards"]:
        n = c["counts"]
        table.add_row(
            escape(c["id"]),
            escape(c["title"]),
            c["regime"],
            verdict_text(c["verdict"]) + (" [dim](not run)[/]" if c["id"] in shown.not_run else ""),
            fraction(n["witnesses_passed"], n["witnesses_total"]),
            fraction(n["controls_held"], n["controls_total"]),
            liars_fraction(n),
            escape(c["headline"]["text"]) if c["headline"] else "–",
            f"[cyan]{replayed_text(c['replayed_from']['started'])}[/]"
            if c.get("replayed_from")
            else f"{c['duration_s']:.2f} s",
            *((escape(c["examples_cell"]),) if s.get("examples") else ()),
            *((_mutation_cell(c["mutation"]),) if s.get("mutation") else ()),
        )
    console.print(table)
    render_details(console, view, shown.verbosity)
    _render_rest(console, view, head, s, shown)


def failure_rows(w: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A failed witness's failure block as (label, text) rows, in reading order (from the report view's
    ``failure_block``): the failing check (numbered steps one a line), the shrunk example, its draws by label,
    Hypothesis' explanation, what the test noted, the ``@reproduce_failure`` line, the replay command and the
    reproduction scripts. Nothing is cut: a long row wraps."""
    f = w["failure_block"]
    check = list(f["check_lines"])
    if f["location"]:
        check.append(f"at {f['location']}")
    rows = [("check" if f["assertion"] else "bound", "\n".join(check))]
    if f["example"]:
        rows.append(("example", f"{f['example']}\n(shrunk; seed {f['seed']}, profile {f['profile']})"))
    if f["draws"]:
        rows.append(("draws", "\n".join(_draw_line(d) for d in f["draws"])))
    for label, key in (("explained", "explanation"), ("noted", "notes")):
        if f[key]:
            rows.append((label, "\n".join(f[key])))
    rows += [(label, f[key]) for label, key in (("reproduce", "reproduce"), ("replay", "replay")) if f[key]]
    rows += [("reproduction", r["shown"] + (f" {r['node']}" if r["node"] else "")) for r in w["reproductions"]]
    return rows


def _draw_line(d: Mapping[str, Any]) -> str:
    comment = f"  # {d['comment']}" if d["comment"] else ""
    return f"{d['name']}: {d['value']}{comment}"


def render_failure(console: Console, w: Mapping[str, Any], indent: int = 4) -> None:
    """One failed witness's block under its card's line: a heading, then :func:`failure_rows` as a two-column
    grid whose text column wraps (never truncated) and keeps the example's indentation."""
    console.print(
        Text(" " * (indent - 2) + f"{w['kind']} {visible(w['id'])} failed: ", style="bold")
        + Text(visible(w["test"]), style="dim"),
        soft_wrap=True,
    )
    grid = Table.grid(padding=(0, 1), pad_edge=False)
    grid.add_column(no_wrap=True, style="dim")
    grid.add_column(overflow="fold")
    for label, text in failure_rows(w):
        grid.add_row(Text(" " * indent + label + ":"), Text(visible(text)))
    console.print(grid)


def _render_rest(
    console: Console,
    view: Mapping[str, Any],
    head: Mapping[str, Any],
    s: Mapping[str, Any],
    shown: Shown,
) -> None:
    _render_not_proven(console, view, shown)
    if shown.verbosity < -1:
        _gate_line(console, view, head, s, shown)
        return
    for c in view["cards"]:
        if c.get("mutation") and (c["mutation"]["survived"] or c["mutation"]["stale"]):
            render_mutation(console, c["id"], c["mutation"])
    claims = view.get("claims")
    if claims:
        console.print(
            f"what no theorem constrains: {escape(claims['summary'])}; "
            f"{escape(claims['surviving_summary'])} (tables in index.html)",
            soft_wrap=True,
        )
    _gate_line(console, view, head, s, shown)


def _render_not_proven(console: Console, view: Mapping[str, Any], shown: Shown) -> None:
    """One or two lines (and each failed witness's block) per card that is not PROVEN; ``-qq``: one line each.
    The cards a ``-x`` / ``--maxfail`` stop left not run are one line for all, after them."""
    for c in view["cards"]:
        if c["verdict"] == Verdict.PROVEN or c["id"] in shown.not_run:
            continue
        console.print(f"{verdict_text(c['verdict'])} [bold]{escape(c['id'])}[/]: {escape(c['reason'])}", soft_wrap=True)
        if shown.verbosity < -1:
            continue
        if c["verdict"] == Verdict.FAILED and c.get("since_proven"):
            console.print(f"    {escape(c['since_proven']['text'])}", soft_wrap=True)
        failed = [w for w in c["failing"] if w.get("failure_block")]
        for w in failed:
            render_failure(console, w)
        if c["detail"] and not any(w["failure_block"]["example"] for w in failed):
            console.print(f"    {escape(c['detail'])}", soft_wrap=True, style="dim")
    if shown.maxfail:
        console.print(stopped_text(shown.maxfail, shown.not_run), soft_wrap=True, markup=False, highlight=False)


def stopped_text(maxfail: int, not_run: Sequence[str]) -> str:
    """The line a run stopped by ``-x`` / ``--maxfail`` ends its cards with: how many failed, which did not run."""
    names = f": {', '.join(visible(i) for i in not_run)}" if not_run else ""
    return f"stopped after {maxfail} failing card(s) (-x/--maxfail); {len(not_run)} card(s) not run{names}"


def _gate_line(
    console: Console, view: Mapping[str, Any], head: Mapping[str, Any], s: Mapping[str, Any], shown: Shown
) -> None:
    counts = ", ".join(f"{k['n']} {k['verdict']}" for k in s["counts"] if k["n"])
    gate = "[bold green]PASS[/]" if s["gate"] == Gate.PASS else "[bold red]FAIL[/]"
    replayed = f" ({s['replayed']} replayed)" if s.get("replayed") else ""
    what = f"cell(s) of {len(view['grid']['rows'])} card(s)" if view.get("grid") else "card(s)"
    na = s.get("not_applicable") or []
    na_text = f"; n/a here, not counted: {', '.join(na)}" if na and not view.get("grid") else ""
    stopped = f"; {len(shown.not_run)} of them not run (ERROR: -x/--maxfail)" if shown.not_run else ""
    console.print(
        f"gate {gate}: {counts} of {s['total']} {what}{replayed}{escape(na_text)}{stopped} in {head['duration']} "
        f"(profile {head['profile']}, seed {head['seed']})"
    )


def render_details(console: Console, view: Mapping[str, Any], verbosity: int) -> None:
    """``-v``: under each card (or cell) its verdict and reason, then each witness and control (its outcome, test
    node id and time; the node ids of a parametrized one, at most :data:`NODES_SHOWN` unless ``-vv``; each bound
    check), then each liar and what caught it; ``-vv`` adds the evidence recorded beside the bounds and, under each
    liar, its witnesses' outcomes."""
    if verbosity < 1:
        return
    for c in view["cards"]:
        replayed = f" [cyan]({replayed_text(c['replayed_from']['started'])})[/]" if c.get("replayed_from") else ""
        console.print(
            f"[bold]{escape(c['id'])}[/] {verdict_text(c['verdict'])}{replayed}: {escape(c['reason'])}", soft_wrap=True
        )
        for w in c["witnesses"] + c["controls"]:
            _render_witness(console, w, verbosity, "  ")
        for liar in c.get("liars") or ():
            who = f"caught by {', '.join(liar['caught_by'])}" if liar["caught"] else f"{liar['status']}: {liar['why']}"
            console.print(f"  liar [bold]{escape(liar['name'])}[/] {escape(who)}", soft_wrap=True)
            if verbosity >= 2:
                for w in liar.get("witnesses") or ():
                    console.print(f"    {w['kind']} {escape(w['id'])} {w['status']}", soft_wrap=True)


NODES_SHOWN = 5  # -v: node ids listed per parametrized witness; -vv lists them all
CHECK_MARK = {True: "[green]✓[/]", False: "[red]✗[/]", None: "[yellow]?[/]"}


def _render_witness(console: Console, w: Mapping[str, Any], verbosity: int, indent: str) -> None:
    """One witness or control under its card (:func:`render_details`)."""
    style = "green" if w["status"] == Outcome.PASSED else "red"
    console.print(
        f"{indent}{w['kind']} [bold]{escape(w['id'])}[/] [{style}]{w['status']}[/] {escape(w['test'])} "
        f"({w['duration_s']:.2f} s)" + (f": {escape(w['why'])}" if w["why"] else ""),
        soft_wrap=True,
    )
    nodes = list(w.get("nodes") or ())
    if len(nodes) > 1 or verbosity >= 2:
        limit = len(nodes) if verbosity >= 2 else NODES_SHOWN
        for n in nodes[:limit]:
            console.print(f"{indent}    {escape(n['nodeid'])} {n['outcome']} ({n['duration_s']:.2f} s)", soft_wrap=True)
        if len(nodes) > limit:
            console.print(f"{indent}    … {len(nodes) - limit} more node(s) (-vv lists them)", style="dim")
    for check in w.get("checks") or ():
        node = f" {escape(check['node'])}" if check.get("node") else ""
        mark = CHECK_MARK.get(check["holds"], "?")
        console.print(f"{indent}    {mark} {escape(check['text'])}{node}", soft_wrap=True)
    if verbosity >= 2:
        for r in w.get("recorded") or ():
            node = f" {escape(r['node'])}" if r["node"] else ""
            console.print(f"{indent}    recorded {escape(r['key'])} = {escape(r['text'])}{node}", soft_wrap=True)


def render_timing(console: Console, timing: dict[str, Any]) -> None:
    """Where the time went: one row per card that ran, slowest first (honest run, its start-up, liar runs)."""
    if not timing["cards"]:
        return
    table = Table(title=None, header_style="bold", pad_edge=False, box=None)
    table.add_column("card", no_wrap=True)
    for name, width in (("total", 7), ("honest", 7), ("start-up", 8), ("liars", 12)):
        table.add_column(name, no_wrap=True, justify="right", min_width=width)
    table.add_column("slowest witness", overflow="fold", ratio=1)
    table.add_column("slowest liar", overflow="fold", ratio=1)
    on_nodes = any(r.get("nodes") for r in timing["cards"])
    if on_nodes:
        table.add_column("nodes", overflow="fold", ratio=1)
    for r in timing["cards"]:
        w, lv = r["slowest_witness"], r["slowest_liar"]
        row = [
            escape(r["id"]),
            f"{r['total_s']:.1f} s",
            f"{r['honest_s']:.1f} s",
            f"{r['startup_s']:.1f} s",
            f"{r['liars_s']:.1f} s ({r['liar_runs']})" if r["liar_runs"] else "–",
            f"{escape(w['id'])} {w['duration_s']:.1f} s" if w else "–",
            f"{escape(lv['name'])} {lv['duration_s']:.1f} s" if lv else "–",
        ]
        if on_nodes:
            row.append(escape(", ".join(r.get("nodes") or ())) or "–")
        table.add_row(*row)
    jobs = f" with -j {timing['jobs']}" if timing.get("jobs") else ""
    wall = f" in {timing['wall_s']:.1f} s wall{jobs}" if timing.get("wall_s") is not None else ""
    console.print(
        f"time per card, slowest first: {timing['process_s']:.1f} s in {timing['processes']} witness process(es){wall}"
    )
    console.print(table)


def render_problems(console: Console, problems: Iterable[Any], heading: str) -> None:
    problems = list(problems)
    console.print(f"[bold red]{escape(heading)}[/]")
    for p in problems:
        console.print(f"  {escape(str(p))}", soft_wrap=True, highlight=False)


def render_list(console: Console, cards: Iterable[Any]) -> None:
    table = Table(header_style="bold", pad_edge=False)
    for col in ("id", "regime", "title", "witnesses", "controls", "liars", "tags", "file"):
        table.add_column(col, overflow="fold")
    for c in cards:
        table.add_row(
            escape(c.id),
            c.regime,
            escape(c.title),
            str(len(c.witnesses)),
            str(len(c.controls)),
            str(len(c.liars)),
            escape(", ".join(c.tags)),
            escape(c.display_path),
        )
    console.print(table)


def render_card(console: Console, card: Any, last: dict[str, Any] | None, last_note: str) -> None:
    """``show ID``: the card's fields, then its last verdict (or why there is none)."""
    console.print(
        f"[bold]{escape(card.id)}[/] — {escape(card.title)}  "
        f"[dim](regime {card.regime}, version {card.version}, {escape(card.display_path)})[/]"
    )
    console.print(f"[bold]module[/] {escape(card.module)}")
    console.print(f"[bold]theorem[/] {escape(card.theorem)}", soft_wrap=True)
    console.print(f"[bold]proof[/] {escape(card.proof)}", soft_wrap=True)
    console.print(f"[bold]refs[/] {escape(', '.join(card.refs)) or '–'}")
    console.print(f"[bold]covers[/] {escape(', '.join(card.covers))}")
    if card.requires:
        console.print(f"[bold]requires[/] {escape(', '.join(card.requires))}")
    for w in card.all_witnesses:
        bounds = ", ".join(str(b) for b in w.bounds)
        extra = f"  [{escape(bounds)}]" if bounds else ""
        console.print(f"  {w.kind} [bold]{escape(w.id)}[/] {escape(w.test)}{extra}", soft_wrap=True)
        if w.reason:
            console.print(f"      reason: {escape(w.reason)}", soft_wrap=True)
    console.print(f"[bold]liars[/] {escape(', '.join(card.liars)) or '–'}")
    if card.notes:
        console.print(f"[bold]notes[/] {escape(card.notes)}", soft_wrap=True)
    if card.tags:
        console.print(f"[bold]tags[/] {escape(', '.join(card.tags))}")
    if last is None:
        console.print(f"[bold]last verdict[/] {escape(last_note)}")
        return
    replayed = f" ({replayed_text(last['replayed_from']['started'])})" if last.get("replayed_from") else ""
    console.print(
        f"[bold]last verdict[/] {verdict_text(last['verdict'])} on {escape(last['run_started'])}{replayed}"
        f"{escape(last_note)}: {escape(last['reason'])}",
        soft_wrap=True,
    )
    for w in last.get("witnesses", []) + last.get("controls", []):
        shown = examples_text(w.get("examples") or ())
        if shown:
            console.print(f"  {w['kind']} [bold]{escape(w['id'])}[/] {escape(shown)}", soft_wrap=True)
    for entry in last.get("liars", []):
        who = ", ".join(entry["caught_by"]) if entry["caught"] else entry["status"]
        console.print(f"  liar {escape(entry['name'])}: {escape(who)}")
    mutation = mutation_view(last.get("mutation"))
    if mutation is not None:
        render_mutation(console, card.id, mutation, indent="  ")


def _when(iso: str) -> str:
    return iso.replace("T", " ").replace("Z", " UTC")


def render_status(console: Console, rows: Iterable[Any]) -> None:
    """``status``: each cell's last verdict and its date, STALE with the files that changed, "not gated" with why
    for a cell its run did not count; the newest measured mutation score (STALE when measured on other bytes) when
    any card has one."""
    table = Table(header_style="bold", pad_edge=False)
    rows = list(rows)
    scores = any(getattr(r, "mutation", "") for r in rows)
    for name, kw in (
        ("id", {"no_wrap": True}),
        ("state", {"no_wrap": True}),
        ("last run", {"no_wrap": True}),
        ("headline", {"no_wrap": True}),
        ("why", {"overflow": "fold", "ratio": 1}),
    ):
        table.add_column(name, **kw)
    if scores:
        table.add_column("mutation score", overflow="fold")
    for r in rows:
        extra = [escape(r.mutation or "–")] if scores else []
        if r.last is None:
            table.add_row(escape(r.card_id), "[dim]never run[/]", "–", "–", escape(r.title), *extra)
            continue
        state = verdict_text(r.state) + (f" (was {verdict_text(r.last.verdict)})" if r.state == CardState.STALE else "")
        why = (
            ("changed since: " + ", ".join(r.changed))
            if r.changed
            else ("" if r.state == Verdict.PROVEN else r.last.reason)
        )
        not_gated = getattr(r, "not_gated", "")
        if not_gated:
            state += " [dim](not gated)[/]"
            why = f"not gated: {not_gated}" + (f"; {why}" if why else "")
        when = _when(r.last.started) + (f" ({replayed_text(r.last.replayed_started)})" if r.last.replay_of else "")
        table.add_row(escape(r.card_id), state, when, escape(r.last.headline or "–"), escape(why), *extra)
    console.print(table)


def render_timings(
    console: Console,
    cards: Sequence[Any],
    expected: Mapping[str, Expected],
    sources: Mapping[str, str],
    shown_file: str,
) -> None:
    """``timings``: per card (and cell ``CARD@NAME``) and liar, the seconds the scheduler would expect, where they
    came from, and the witnesses that run first under each liar; then the order in which a plain run's honest runs
    start with ``-j 2`` or more (:mod:`harness.plan.timings` holds the numbers)."""
    table = Table(header_style="bold", pad_edge=False)
    for name, kw in (
        ("card / liar", {"no_wrap": True}),
        ("expected s", {"justify": "right"}),
        ("chain s", {"justify": "right"}),
        ("from", {"no_wrap": True}),
        ("runs first under the liar (caught it)", {"overflow": "fold"}),
    ):
        table.add_column(name, **kw)
    for card in cards:
        exp, src = expected.get(card.id, Expected()), sources.get(card.id, timings.UNKNOWN)
        shown_src = shown_file if src == timings.FILE else src
        table.add_row(escape(card.id), f"{exp.honest_s:.1f}", f"{chain_s(exp, card.liars):.1f}", escape(shown_src), "")
        for name in card.liars:
            known = name in exp.liars_s
            table.add_row(
                f"  {escape(name)}",
                f"{exp.liar(name):.1f}",
                "",
                escape(shown_src if known else timings.UNKNOWN),
                escape(", ".join(exp.caught_by.get(name, ())) or "–"),
            )
    console.print(table)
    plain = [c for c in cards if split(c.id)[0] == c.id]  # the order of a plain run: its cards, not the cells
    order = sorted(
        range(len(plain)), key=lambda i: (-chain_s(expected.get(plain[i].id, Expected()), plain[i].liars), i)
    )
    console.print(
        "with -j 2 or more, honest runs start in this order: " + ", ".join(plain[i].id for i in order),
        soft_wrap=True,
        markup=False,
        highlight=False,
    )


def render_runs(console: Console, runs: Iterable[dict[str, Any]]) -> None:
    """``history``: the recorded runs, newest first."""
    table = Table(header_style="bold", pad_edge=False)
    for col in ("run", "started", "gate", "cards", "commit", "profile", "seed", "report"):
        table.add_column(col, no_wrap=True)
    for r in runs:
        gate = "[bold green]PASS[/]" if r["gate"] == Gate.PASS else "[bold red]FAIL[/]"
        commit = (r["git_commit"] or "–")[:12] + (" dirty" if r["git_dirty"] else "")
        table.add_row(
            str(r["run_id"]),
            _when(r["started"]),
            gate,
            str(r["cards"]),
            commit,
            str(r["profile"]),
            str(r["seed"]),
            escape(r["report_dir"] or "–"),
        )
    console.print(table)


def render_history(console: Console, card_id: str, rows: Iterable[tuple[Any, dict[str, Any]]]) -> None:
    """``history ID``: one line per past verdict (oldest first) with its transition."""
    table = Table(title=f"history of {escape(card_id)}", header_style="bold", pad_edge=False)
    for name, kw in (
        ("started", {"no_wrap": True}),
        ("verdict", {"no_wrap": True}),
        ("change", {}),
        ("headline", {"no_wrap": True}),
        ("commit", {"no_wrap": True}),
        ("report", {"no_wrap": True}),
    ):
        table.add_column(name, **kw)
    for past, mark in rows:
        change = mark["change"]
        text = "" if change is None or change["kind"] == "first" else change["text"]
        commit = (past.git_commit or "–")[:12] + (" dirty" if past.git_dirty else "")
        table.add_row(
            _when(past.started),
            verdict_text(past.verdict),
            escape(text),
            escape(past.headline or "–"),
            commit,
            escape(past.report_dir or "–"),
        )
    console.print(table)


PLAIN_PROGRESS_S = 30.0  # without a terminal (a log, CI): a progress line at most this often


class TerminalReporter:
    """The :class:`harness.request.Reporter` of the command line: progress bar, results, where files went.

    ``verbosity`` (``-v`` counts up, ``-q`` down; :data:`VERBOSITY`) decides how much of it is printed, never what
    the run writes; warnings and errors go to ``err`` at every level.
    """

    def __init__(self, console: Console, err: Console, shown: Callable[[Path], str], verbosity: int = 0) -> None:
        self.console, self.err, self.shown = console, err, shown
        self.verbosity = max(-2, min(2, verbosity))
        self.stop = Shown(self.verbosity)  # this run's -x / --maxfail stop, when it stopped

    def warning(self, problems, title: str) -> None:
        render_problems(self.err, problems, title)

    def starting(self, req, selected, replayed, to_run) -> None:
        self.stop = Shown(self.verbosity)  # a new run (run --watch starts many)
        if self.verbosity < 0:
            return
        threads = "" if req.jobs == 1 else " (1 BLAS thread each)"
        where = f"-j {req.jobs}{threads}"
        ex = getattr(req, "executor", None)
        if ex is not None and ex.kind == "ray":
            where = (
                (f"on the Ray cluster at {ex.address}" if ex.address else "on a local Ray cluster")
                + (f", -j {req.jobs}" if ex.jobs_given else ", a job per CPU")
                + " (1 BLAS thread each)"
            )
        cards = len({c.base_id for c in selected})
        what = f"{cards} card(s)" if cards == len(selected) else f"{len(selected)} cell(s) of {cards} card(s)"
        self.console.print(
            f"kvproof: {what} from {escape(self.shown(req.cards_dir))}, profile "
            f"{req.profile}, seed {req.seed} (replay with --profile {req.profile} --seed {req.seed}), "
            f"{where}",
            soft_wrap=True,
        )
        if req.changed:
            names = f": {', '.join(c.id for c in to_run)}" if to_run else ""
            self.console.print(
                f"--changed: {len(replayed)} card(s) replayed (bound files unchanged since their last "
                f"PROVEN verdict), {len(to_run)} to run{names}",
                soft_wrap=True,
            )
        if getattr(req, "rerun_failed", False):
            names = f": {', '.join(c.id for c in to_run)}" if to_run else ""
            self.console.print(
                f"--rerun-failed: {len(replayed)} card(s) replayed (latest verdict PROVEN, bound files "
                f"unchanged), {len(to_run)} to run (not PROVEN last time, changed, or never run)"
                f"{names}",
                soft_wrap=True,
            )

    @contextmanager
    def progress(self, total: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            disable=not self.console.is_terminal,
        ) as bar:
            task = bar.add_task("starting", total=total)

            def on_start(job, running) -> None:
                bar.update(task, description="running " + ", ".join(j.label for j in running))

            last = [time.monotonic()]

            def on_done(job, settled: int) -> None:
                bar.update(task, completed=settled)  # liars that did not need to run count as done
                now = time.monotonic()
                plain = not self.console.is_terminal and self.verbosity >= 0
                if plain and (now - last[0] >= PLAIN_PROGRESS_S or settled >= total):
                    last[0] = now  # no bar in a log: a line now and then, so a long run shows it is alive
                    self.console.print(
                        f"progress: {settled}/{total} process(es) done, {bar.tasks[0].elapsed or 0:.0f} s",
                        soft_wrap=True,
                    )

            yield on_start, on_done

    def note(self, text: str) -> None:
        """A line about what the run is doing (the mutation stage's plan, for one); not with ``-q``."""
        if self.verbosity >= 0:
            self.console.print(escape(text), soft_wrap=True)

    def announce(self, text: str) -> None:
        """A line printed at every verbosity (``run --watch``: what changed, what runs again)."""
        self.console.print(escape(text), soft_wrap=True)

    def card_done(self, card_id: str, verdict: str, reason: str, duration: float) -> None:
        """A card's verdict as soon as it is known, during the run; printed with ``-v``."""
        if self.verbosity < 1:
            return
        why = f": {escape(reason)}" if verdict != Verdict.PROVEN else ""
        line = f"{verdict_text(verdict)} [bold]{escape(card_id)}[/] ({duration:.2f} s){why}"
        self.console.print(line, soft_wrap=True)

    def stopped(self, maxfail: int, not_run: Sequence[str]) -> None:
        """The run stopped at ``-x`` / ``--maxfail``: said with the results, beside the gate line."""
        self.stop = Shown(self.verbosity, maxfail, tuple(not_run))

    def results(self, view: Mapping[str, Any]) -> None:
        render_run(self.console, view, self.stop)
        if self.verbosity >= 0:
            render_timing(self.console, view["timing"])

    def baseline(self, comparison) -> None:
        """The 'vs baseline' section: what changed against --baseline, and the regressions (not with ``-qq``)."""
        if self.verbosity < -1:
            return
        self.console.print("[bold]vs baseline[/]")
        render_terminal(self.console, comparison)

    def wrote(self, what: str, path: Path) -> None:
        if self.verbosity < -1:
            return
        self.console.print(
            f"{'wrote' if what == 'json' else what} {escape(self.shown(path))}",
            soft_wrap=True,
        )

    def error(self, text: str) -> None:
        self.err.print(
            f"{program()}: {escape(text)}"
            if text.startswith("error")
            else f"[yellow]warning[/]: {escape(text.removeprefix('warning: '))}",
            soft_wrap=True,
        )
