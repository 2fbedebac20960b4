"""The report view: the verdicts document prepared once for the HTML, Markdown and JUnit renderers.

:func:`build_view` takes the document of :mod:`harness.record.build`, each
card's past verdicts from the ledger and the project root, and returns plain
data (dicts, lists, strings, numbers) in the order it is shown. Here and only
here are decided: the history strip and its transitions (newly FAILED,
newly PROVEN, flaky), the source lines of each ref, the text of every bound
check (and which the judge left unjudged because the witness stopped early),
each FAILED witness's failure block (its check with numbered steps one a
line, the shrunk example, its draws by label, Hypothesis' explanation, the
reproduction script; :func:`failure_view`), a FAILED card's headline (what
failed: :func:`failed_headline`), the failure excerpt and the command that
replays it, the summary bar,
the display form of the header, each card's mutation block (score, floor,
staleness, survivors with their diffs, equivalent and broken mutants, the
killed ones), the examples each Hypothesis property ran (per witness and per
card) and the project's "what no theorem constrains" tables. The renderers
loop and print.

Reading ref sources is the only I/O; nothing here touches the clock.
"""

from __future__ import annotations

import copy
import os
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness.compare.diff import summary_counts
from harness.compare.render import changed_measures, liars_text, verdict_text
from harness.ledger.history import PastVerdict
from harness.liars import scan
from harness.plan.subjects import split
from harness.record.build import HEADLINE_KEYS, not_applicable, replay_command
from harness.record.document import RunDocument
from harness.report.svg import Bar, Point, measure_bars, trend
from harness.select.refs import RefSite, resolve_ref
from harness.statuses import VERDICTS, MutantStatus, Outcome, Verdict
from harness.verdict import observed_summary
from harness.wording import (
    check_message,
    check_parts,
    check_text,
    fmt_value,
    not_judged,
    short_check,
    stopped_text,
    unevaluated_text,
)

HISTORY_LIMIT = 30  # marks in a card's history strip, the current run included
SOURCE_LINES = 40  # lines of a ref shown beside the proof; the rest is counted
FAILURE_LINES = 60  # lines of a failure's text shown
VALUE_CHARS = 160  # characters of one recorded value shown
REPRODUCTION_KEY = "reproduction"  # evidence: the standalone reproduction script kv_repro wrote for a failure
EXERCISED_KEY = "exercised"  # evidence: what a program claim's steps did (harness.targets.claims._Exercised)
REGIME_NAMES = {"N": "numerical", "A": "algebraic/structural", "C": "integrity", "D": "decision soundness"}
STATUS_MARK = {Outcome.PASSED: "✓", Outcome.FAILED: "✗", Outcome.ERROR: "!", Outcome.SKIPPED: "–", Outcome.NOT_RUN: "·"}


# ---------------------------------------------------------------- history


def transition(prev: Mapping[str, Any] | None, cur: Mapping[str, Any]) -> dict[str, Any] | None:
    """How ``cur`` differs from the run before it; None when the verdict did not change.

    Both are ``{"verdict", "digest"}``. kind: "first" (no earlier verdict),
    "newly FAILED", "newly PROVEN" or "now <VERDICT>"; flaky: the verdict
    changed although every bound file had the same bytes (same digest).
    """
    if prev is None:
        return {"kind": "first", "flaky": False, "text": "first run"}
    if prev["verdict"] == cur["verdict"]:
        return None
    kind = {Verdict.FAILED: "newly FAILED", Verdict.PROVEN: "newly PROVEN"}.get(cur["verdict"], f"now {cur['verdict']}")
    flaky = prev["digest"] == cur["digest"]
    text = f"{kind} (was {prev['verdict']})" + ("; flaky: no bound file changed" if flaky else "")
    return {"kind": kind, "flaky": flaky, "text": text}


def history_marks(
    past: Sequence[PastVerdict], current: Mapping[str, Any] | None, limit: int = HISTORY_LIMIT
) -> list[dict[str, Any]]:
    """Oldest-first marks for a card's strip: past verdicts then ``current`` (this run), each with its transition.

    ``current`` is ``{"started", "verdict", "digest", "report_dir"}`` (and
    ``replayed_from``, the original start time, for a replayed verdict) or
    None (history shown without a run, e.g. ``history ID``).
    """
    seq = [
        {
            "started": p.started,
            "verdict": p.verdict,
            "digest": p.bound_digest,
            "report_dir": p.report_dir,
            "commit": p.git_commit,
            "current": False,
            "replayed_from": p.replayed_started,
        }
        for p in past
    ]
    if current is not None:
        seq.append({"replayed_from": None, **current, "commit": None, "current": True})
    marks, prev = [], None
    for item in seq:
        change = transition(prev, item)
        marks.append(
            {
                **item,
                "date": display_date(item["started"]),
                "change": change,
                "title": f"{display_date(item['started'])} {item['verdict']}"
                + (f" {replayed_text(item['replayed_from'])}" if item["replayed_from"] else "")
                + (f" — {change['text']}" if change and change["kind"] != "first" else ""),
            }
        )
        prev = item
    return marks[-limit:]


# ---------------------------------------------------------------- pieces


def card_anchor(card_id: str) -> str:
    """The HTML id of a card's section."""
    return "card-" + re.sub(r"[^A-Za-z0-9_-]+", "-", card_id)


def display_date(iso: str | None) -> str:
    """``2025-11-29T13:38:22Z`` -> ``2025-11-29 13:38:22 UTC`` (unchanged when not in that form)."""
    if not iso:
        return "–"
    m = re.fullmatch(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?Z", iso)
    return f"{m.group(1)} {m.group(2)} UTC" if m else iso


def replayed_text(started: str | None) -> str:
    """``replayed from 2026-11-29 13:43:41 UTC``: how every format marks a verdict taken from an earlier run."""
    return f"replayed from {display_date(started)}" if started else ""


def ref_source(root: Path, ref: str, max_lines: int = SOURCE_LINES) -> dict[str, Any]:
    """A ref with its location and source lines: {ref, symbol, location, lines: [{no, text}], more, error}."""
    file, _, symbol = ref.partition("::")
    site = resolve_ref(root, ref)
    if not isinstance(site, RefSite):
        return {"ref": ref, "symbol": symbol, "location": file, "lines": [], "more": 0, "error": site}
    try:
        text = (root / site.path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return {
            "ref": ref,
            "symbol": symbol,
            "location": f"{site.path}:{site.line}",
            "lines": [],
            "more": 0,
            "error": f"cannot read: {exc}",
        }
    span = list(range(site.line, min(site.end_line, len(text)) + 1))
    shown = span[:max_lines]
    return {
        "ref": ref,
        "symbol": symbol,
        "location": f"{site.path}:{site.line}",
        "lines": [{"no": n, "text": text[n - 1]} for n in shown],
        "more": len(span) - len(shown),
        "error": "",
    }


def _check_text(c: Mapping[str, Any]) -> str:
    if c["holds"] is None and not_judged(c.get("detail") or ""):
        return stopped_text(c["key"], c["op"], c["limit"], c["actual"], c["detail"])
    if c["holds"] is None:
        return unevaluated_text(c["key"], c["actual"])
    return check_text(c["key"], c["op"], c["limit"], c["actual"], c.get("detail") or "")


def display_value(value: Any, limit: int = VALUE_CHARS) -> str:
    """Recorded evidence as text: floats as 3 significant digits, also inside dicts and lists; cut at ``limit``."""

    def fmt(v: Any) -> str:
        summary = observed_summary(v)
        if summary is not None:  # evidence.observe
            nan = f", {summary['nan']} NaN" if summary["nan"] else ""
            return f"max {fmt(summary['max'])}, min {fmt(summary['min'])} ({summary['observed']} observed{nan})"
        if isinstance(v, Mapping):
            return "{" + ", ".join(f"{k}: {fmt(x)}" for k, x in v.items()) + "}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        return fmt_value(v)

    text = fmt(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _node_label(nodeid: str) -> str:
    return nodeid[nodeid.index("[") :] if "[" in nodeid else ""


def _plain(e: Mapping[str, Any]) -> bool:
    """A property run that ran its whole budget and nothing else worth a word."""
    return not e.get("short") and not e.get("exhausted") and not e.get("explicit") and e["ran"] == e["max_examples"]


def _property_text(e: Mapping[str, Any]) -> str:
    name = e["property"]
    label = _node_label(e.get("node") or "")
    if label and not name.endswith(label):
        name += label
    if e.get("short"):
        how = f"{e['ran']} ({e['short'].partition(': ')[0]})"  # how it fell short; the card's reason has the fix
    elif e.get("exhausted"):
        how = f"{e['ran']} (exhausted)"
    elif e["max_examples"] is not None and e["ran"] != e["max_examples"]:
        how = f"{e['ran']} of {e['max_examples']}"
    else:
        how = str(e["ran"])
    if e.get("explicit"):
        how += f" + {e['explicit']} @example"
    return f"{name} {how}"


def examples_text(examples: Sequence[Mapping[str, Any]]) -> str:
    """The examples a witness's Hypothesis properties ran, compact: ``examples: 1000`` when each ran the same
    whole budget, else each property with its count (``prop_a 1000, prop_b 2 (exhausted)``); "" for none."""
    if not examples:
        return ""
    counts = {e["ran"] for e in examples}
    if all(_plain(e) for e in examples) and len(counts) == 1:
        each = f" (each of {len(examples)} property runs)" if len(examples) > 1 else ""
        return f"examples: {counts.pop()}{each}"
    return "examples: " + ", ".join(_property_text(e) for e in examples)


def examples_cell(witnesses: Iterable[Mapping[str, Any]]) -> str:
    """A card's examples in one cell: the examples its properties ran (``1000``, or the range ``2–1000``); ``–``
    when it has no property; ``short`` added when one ran short of the profile's budget."""
    runs = [e for w in witnesses for e in w.get("examples") or ()]
    if not runs:
        return "–"
    lo, hi = min(e["ran"] for e in runs), max(e["ran"] for e in runs)
    text = str(lo) if lo == hi else f"{lo}–{hi}"
    return text + (" short" if any(e.get("short") for e in runs) else "")


# ---------------------------------------------------------------- a failing witness

_COMMENT_LINE = re.compile(r"^\s*# ?(.*)$")  # a whole-line comment in a shrunk example: Hypothesis explaining it
_DATA_ARG = re.compile(r"^\s*\w+=data\(\.\.\.\),?\s*(#.*)?$")  # st.data()'s argument: its draws are listed


_E_LINE = re.compile(r"^E(?: |$)")  # pytest's lines of the exception in a failure text
_EXAMPLE_NOTE = re.compile(r"^\s*(Falsifying (explicit )?example|Failing test case|Falsifying test case)\b")


def failure_check(failure: str) -> str:
    """The failing check's message as pytest printed it (its last ``E   `` lines, without the Hypothesis notes
    after it), every line; "" when the failure text has none. Documents from before ``hypothesis.check`` and
    failures outside a property have no other copy that is not cut to one line."""
    lines = failure.splitlines()
    end = next((i for i in range(len(lines) - 1, -1, -1) if _E_LINE.match(lines[i])), None)
    if end is None:
        return ""
    start = end
    while start > 0 and _E_LINE.match(lines[start - 1]):
        start -= 1
    kept = []
    for line in textwrap.dedent("\n".join(ln[1:] for ln in lines[start : end + 1])).splitlines():
        if _EXAMPLE_NOTE.match(line):
            break
        kept.append(line.rstrip())
    return check_message("\n".join(kept).strip())


def reproduction_view(path: str, report_path: Path | None) -> dict[str, str]:
    """A reproduction script's path as shown and linked: ``{"path", "shown", "href"}``.

    A relative path is the report folder's (kvproof's run moves the scripts into it, as ``repro/<target>/
    <test>.py``): linked as is from index.html, shown inside ``report_path``, or, before the folder exists (the
    terminal's view), with "(in the report folder)". An absolute one (``--kvproof-repro DIR`` in plain pytest)
    is linked only when it lies inside ``report_path``, else shown as text (``href`` "").
    """
    given = Path(path)
    if not given.is_absolute():
        if ".." in given.parts:
            return {"path": path, "shown": path, "href": ""}
        shown = str(report_path / given) if report_path is not None else f"{path} (in the report folder)"
        return {"path": path, "shown": shown, "href": quote(given.as_posix())}
    href = ""
    for a, b in ((given, report_path), (given.resolve(), report_path.resolve() if report_path else None)):
        if b is None:
            continue
        try:
            rel = Path(os.path.normpath(a)).relative_to(os.path.normpath(b))
        except ValueError:
            continue
        href = quote(rel.as_posix()) if rel.parts else ""
        break
    return {"path": path, "shown": path, "href": href}


def reproductions(w: Mapping[str, Any], report_path: Path | None) -> list[dict[str, str]]:
    """The standalone reproduction scripts the witness's nodes recorded (evidence ``reproduction``, written by
    the ``kv_repro`` fixture): :func:`reproduction_view` of each, with its ``node``."""
    evidence = w.get("evidence") or {}
    per_node = evidence if w.get("evidence_per_node") else {"": evidence}
    return [
        {**reproduction_view(path, report_path), "node": _node_label(node)}
        for node, values in per_node.items()
        if isinstance(values, Mapping) and isinstance(path := values.get(REPRODUCTION_KEY), str) and path
    ]


def failure_view(w: Mapping[str, Any], replay: str) -> dict[str, Any] | None:
    """What a FAILED witness shows of its failure, in reading order; None for any other status.

    ``check``: what failed, in full: the failing check's message when its test failed (Hypothesis' ``check``,
    else as pytest printed it, :func:`failure_check`, else the node's one-line message), else the first bound
    it broke; cut into ``head``, ``steps``, ``tail`` and ``rest`` (:func:`harness.wording.check_parts`), as
    ``check_lines`` (the steps numbered, one a line) and in ``short``. Then the shrunk example as Hypothesis
    printed it (its whole-line comments moved to ``explanation``, the ``data=data(...)`` argument replaced by
    ``draws``, each by its label), ``explanation`` and the test's ``notes``, the seed, the
    ``@reproduce_failure`` line and the command that replays the run.
    """
    if w["status"] != Outcome.FAILED:
        return None
    hyp = w.get("hypothesis") or {}
    assertion = any(n.get("outcome") == Outcome.FAILED for n in w.get("nodes") or ())
    broken = next((c for c in w.get("bounds") or () if c["holds"] is False), None)
    if assertion or broken is None:
        check = (
            hyp.get("check")
            or failure_check(w.get("failure") or "")
            or check_message(w.get("message") or "")
            or w.get("why")
            or ""
        )
    else:
        check = _check_text(broken) + (
            f" {_node_label(broken.get('node') or '')}" if w.get("evidence_per_node") else ""
        )
    example = hyp.get("example") or ""
    draws = [
        {
            "name": d.get("label") or f"draw {d.get('draw')}",
            "draw": d.get("draw"),
            "value": str(d.get("value", "")),
            "comment": d.get("comment") or "",
        }
        for d in hyp.get("draws") or ()
        if isinstance(d, Mapping)
    ]
    explanation = list(hyp.get("explanation") or ())
    if "explanation" not in hyp:  # a document from before kvproof kept them apart: the example's comment lines
        explanation = [m.group(1) for ln in example.splitlines() if (m := _COMMENT_LINE.match(ln))]
    shown = [ln for ln in example.splitlines() if not _COMMENT_LINE.match(ln) and not (draws and _DATA_ARG.match(ln))]
    parts = check_parts(check)
    numbered = [f"  {k}. {step}" for k, step in enumerate(parts["steps"], 1)]
    lines = [parts["head"], *numbered, *([parts["tail"]] if parts["steps"] else []), *parts["rest"]]
    return {
        "assertion": assertion or broken is None,
        "check": check,
        **parts,
        "check_lines": [ln for ln in lines if ln],
        "short": short_check(check),
        "location": (w.get("location") or "") if assertion else "",
        "example": "\n".join(shown),
        "draws": draws,
        "explanation": explanation,
        "notes": [str(n) for n in hyp.get("notes") or ()],
        "seed": hyp.get("seed"),
        "profile": hyp.get("profile"),
        "reproduce": hyp.get("reproduce") or "",
        "replay": replay if example else "",
    }


def failed_headline(card: Mapping[str, Any]) -> dict[str, Any] | None:
    """A FAILED card's headline: what failed, never a measure that held. The first failing witness's (or
    control's) broken bound (``examples = 7 (≥ 10)``), or, when its test failed, its check in short
    (``handles-agree: handle 1: the rows held …``). None when no witness failed."""
    w = next((w for w in card["witnesses"] + card["controls"] if w.get("failure_block")), None)
    if w is None:
        return None
    block = w["failure_block"]
    broken = next((c for c in w["bounds"] if c["holds"] is False), None)
    if block["assertion"] or broken is None:
        text = f"{w['id']}: {block['short']}" if block["short"] else f"{w['id']} failed"
        return {"key": "", "value": None, "text": text, "witness": w["id"], "op": None, "limit": None, "holds": False}
    labels = dict(HEADLINE_KEYS)
    key, value = broken["key"], broken["actual"]
    shown = float(value) if key in labels and isinstance(value, int | float) and not isinstance(value, bool) else value
    text = check_text(key, broken["op"], broken["limit"], shown, label=labels.get(key, ""))
    return {
        "key": key,
        "value": value,
        "text": text,
        "witness": w["id"],
        "op": broken["op"],
        "limit": broken["limit"],
        "holds": False,
    }


def _witness_view(w: Mapping[str, Any], replay: str, report_path: Path | None) -> dict[str, Any]:
    out = copy.deepcopy(dict(w))
    out["mark"] = STATUS_MARK.get(w["status"], "?")
    out["checks"] = [
        {
            "text": _check_text(c),
            "holds": c["holds"],
            "judged": not not_judged(c.get("detail") or ""),
            "node": _node_label(c.get("node") or ""),
        }
        for c in w["bounds"]
    ]
    out["failure_block"] = failure_view(w, replay)
    out["reproductions"] = reproductions(w, report_path)
    bounded = {c["key"] for c in w["bounds"]} | ({REPRODUCTION_KEY} if w["status"] != Outcome.PASSED else set())
    bounded |= {EXERCISED_KEY}
    out["exercised"] = exercised_grids(w)
    evidence = w.get("evidence") or {}
    per_node = evidence if w.get("evidence_per_node") else {"": evidence}
    out["recorded"] = [
        {"node": _node_label(node), "key": k, "text": display_value(v)}
        for node, values in per_node.items()
        if isinstance(values, Mapping)
        for k, v in values.items()
        if k not in bounded
    ]
    out["failure_text"] = w.get("failure") or ""
    failure = out["failure_text"].splitlines()
    out["failure_excerpt"] = "\n".join(failure[-FAILURE_LINES:])
    out["failure_cut"] = max(0, len(failure) - FAILURE_LINES)
    hyp = w.get("hypothesis") or None
    out["replay"] = replay if hyp and hyp.get("example") else ""
    out["examples_text"] = examples_text(w.get("examples") or ())
    out["examples_short"] = any(e.get("short") for e in w.get("examples") or ())
    return out


def link_sources(cards: list[dict[str, Any]], root: Path, report_path: Path | None) -> None:
    """Each witness's test file and each liar's module as a link from the report folder (when it is written),
    and each liar's registered ``why`` (what it does wrong), read from the liar index without importing."""
    try:
        sites, _ = scan(root)
    except Exception:  # noqa: BLE001 (a report is still written when the liar index cannot be read now)
        sites = {}

    def href(path: Path) -> str | None:
        return os.path.relpath(path, report_path) if report_path is not None and path.is_file() else None

    for c in cards:
        for w in c["witnesses"] + c["controls"]:
            w["source_href"] = href(root / w["test"].split("::")[0]) if w.get("test") else None
        for liar in c["liars"]:
            site = sites.get(liar["name"])
            liar["does"] = site.why if site is not None else ""
            liar["source_href"] = href(site.path) if site is not None else None


def exercised_grids(w: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per node (target), the grid of what a program claim exercised: ``{"node", "verbs", "rows", "never",
    "boundaries"}``; rows are (verb before, counts of each verb after it on the same handle), ``never`` the
    pairs never tried and ``boundaries`` (edge, count) with the count 0 ones said so."""
    evidence = w.get("evidence") or {}
    per_node = evidence if w.get("evidence_per_node") else {"": evidence}
    out = []
    for node, values in per_node.items():
        got = values.get(EXERCISED_KEY) if isinstance(values, Mapping) else None
        pairs = got.get("pairs") if isinstance(got, Mapping) else None
        if not isinstance(pairs, Mapping) or not pairs:
            continue
        verbs = list(next(iter(pairs.values())).keys())
        rows = [(a, [int(after.get(b, 0)) for b in verbs]) for a, after in pairs.items()]
        never = [f"{a} → {b}" for a, counts in rows for b, n in zip(verbs, counts, strict=True) if n == 0]
        bounds = [(k, int(n)) for k, n in (got.get("boundaries") or {}).items()]
        out.append({"node": _node_label(node), "verbs": verbs, "rows": rows, "never": never, "boundaries": bounds})
    return out


def _counts(cards: Iterable[Mapping[str, Any]], total: int | None = None) -> list[dict[str, Any]]:
    cards = list(cards)
    total = len(cards) if total is None else total
    return [
        {"verdict": v, "n": n, "pct": round(100.0 * n / total, 2) if total else 0.0}
        for v in VERDICTS
        for n in [sum(c["verdict"] == v for c in cards)]
    ]


def _header_view(head: Mapping[str, Any]) -> dict[str, Any]:
    git = head.get("git") or {}
    commit = git.get("commit")
    dirty = git.get("dirty")
    return {
        "date": display_date(head.get("started")),
        "finished": display_date(head.get("finished")),
        "timestamp": (head.get("started") or "").rstrip("Z"),
        "commit": commit or "not a git checkout",
        "commit_short": commit[:12] if commit else "–",
        "dirty": dirty,
        "tree": "dirty (uncommitted changes)" if dirty else ("clean" if dirty is False else "unknown"),
        "host": (head.get("host") or {}).get("name", "?"),
        "platform": (head.get("host") or {}).get("platform", "?"),
        "machine": (head.get("host") or {}).get("machine", "?"),
        "versions": [{"name": k, "version": v or "–"} for k, v in (head.get("versions") or {}).items()],
        "profile": head.get("profile"),
        "seed": head.get("seed"),
        "liars": "on" if head.get("liars", True) else "off (--no-liars)",
        "duration": f"{head.get('duration_s', 0.0):.1f} s",
        "command": head.get("command", ""),
        "numerics": head.get("numerics"),
        "launcher": head.get("launcher"),
        "executor": head.get("executor"),
        "gate": head["summary"]["gate"],
    }


def environment_properties(head: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, value) pairs describing where and how the run happened (JUnit properties)."""
    git = head.get("git") or {}
    props = [
        ("kvproof.started", head.get("started") or ""),
        ("git.commit", git.get("commit") or ""),
        ("git.dirty", str(git.get("dirty")).lower()),
        ("host.name", (head.get("host") or {}).get("name", "")),
        ("host.platform", (head.get("host") or {}).get("platform", "")),
        ("host.machine", (head.get("host") or {}).get("machine", "")),
        ("hypothesis.profile", str(head.get("profile"))),
        ("hypothesis.seed", str(head.get("seed"))),
        ("kvproof.liars", str(head.get("liars", True)).lower()),
        ("kvproof.command", head.get("command", "")),
        ("kvproof.gate", head["summary"]["gate"]),
    ]
    props += [(f"version.{k}", v or "") for k, v in (head.get("versions") or {}).items()]
    if head.get("numerics"):
        props.append(("kvproof.numerics", head["numerics"]))
    if head.get("launcher"):
        props.append(("kvproof.launcher", head["launcher"]))
    if head.get("executor"):
        props.append(("kvproof.executor", head["executor"]))
    return props


# ---------------------------------------------------------------- mutation


def percent(score: float | None) -> str:
    """A mutation score as a percent to 0.1 (``71.4%``, ``90%``), ``—`` when nothing was scored."""
    return "—" if score is None else f"{100 * score:.1f}".removesuffix(".0") + "%"


def _diff_lines(diff: str) -> list[dict[str, str]]:
    """A unified diff as lines, each with its kind: add, del, hunk (``@@``, ``---``, ``+++``) or ctx."""
    out = []
    for text in diff.splitlines():
        kind = (
            "hunk"
            if text.startswith(("@@", "--- ", "+++ "))
            else "add"
            if text.startswith("+")
            else "del"
            if text.startswith("-")
            else "ctx"
        )
        out.append({"text": text, "kind": kind})
    return out


def _mutant_view(m: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(m)
    out["location"] = f"{m['path']}:{m['line']}"
    out["diff_lines"] = _diff_lines(m.get("diff") or "")
    out["reused"] = f"reused from run #{m['reused_from']}" if m.get("reused_from") is not None else ""
    return out


def _floor_text(m: Mapping[str, Any]) -> str:
    floor = m["min_score"]
    if floor is None:
        return "no min_score"
    if m["holds"] is True:
        return f"meets its min_score {percent(floor)}"
    if m["holds"] is False:
        return f"below its min_score {percent(floor)}"
    why = (
        "stale"
        if m["stale"]
        else (m.get("other_sample") or ("no mutant scored" if m["score"] is None else "not judged"))
    )
    return f"min_score {percent(floor)}: not judged ({why})"


def mutation_view(m: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A card's mutation result (its JSON form) as shown: texts decided here, mutants grouped by status.

    ``cell`` is the summary table's column: the score (``60% < 90%`` when
    below the card's min_score), ``stale`` when it was measured on other
    bytes or with other equivalence marks, ``— (no mutant scored)`` when
    nothing was scored; errors beside it (``71% (3 of 40 error)``).
    """
    if m is None:
        return None
    mutants = [_mutant_view(x) for x in m["mutants"]]
    by = {s: [x for x in mutants if x["status"] == s] for s in MutantStatus}
    counts = (
        f"{m['killed']} killed, {m['timeout']} timeout, {m['survived']} survived, "
        f"{m['equivalent']} equivalent, {m['error']} error"
    )
    cap = f", at most {m['max_mutants']}" if m["max_mutants"] is not None else ""
    sampled = f"of {m['candidates']} candidates (sampled {len(mutants)}{cap}, seed {m['seed']})"
    if m.get("partial"):
        sampled = (
            f"of {m['candidates']} candidates: only the {len(mutants)} mutant(s) given with --mutant ran "
            "(a check of chosen mutants, not the card's score: never recorded, never judges)"
        )
    elif m.get("other_sample"):  # harness.mutation.sample: only a score on the floor's sample judges a floor
        sampled += f"; {m['other_sample']}: never judges a min_score"
    when = display_date(m["measured_at"]) if m["measured_at"] else "–"
    run = f"run #{m['measured_run']}" if m["measured_run"] is not None else ""
    stale = (
        f"stale ({m.get('stale_why') or 'measured on other bytes'}, {run + ' at ' if run else 'at '}{when}): "
        "not used by the verdict"
        if m["stale"]
        else ""
    )
    measured = f"measured in {run} ({when})" if run and not m["stale"] else ""  # the stale note says it
    delta = ""
    if m["previous_score"] is not None and m["score"] is not None:
        delta = (
            f"{m['score'] - m['previous_score']:+.2f} since the last mutate run (was {percent(m['previous_score'])})"
        )
    score = percent(m["score"])
    noted = score if m["score"] is not None else "— (no mutant scored)"
    if m["error"]:  # mutants that could not be applied are not scored: said beside the score, never hidden
        noted += f" ({m['error']} of {len(mutants)} error)"
    reused = sum(1 for x in mutants if x["reused"])
    return {
        "score": m["score"],
        "score_text": score,
        "holds": m["holds"],
        "stale": m["stale"],
        "cell": "stale"
        if m["stale"]
        else (
            "partial"
            if m.get("partial")
            else f"{noted} (other sample)"
            if m.get("other_sample")
            else noted
            if m["holds"] is not False
            else f"{noted} < {percent(m['min_score'])}"
        ),
        "counts": counts,
        "sampled": sampled,
        "floor": _floor_text(m),
        "stale_text": stale,
        "measured": measured,
        "delta": delta,
        "reused": f"{reused} result(s) reused from earlier runs (bound files unchanged)" if reused else "",
        "functions": list(m["functions"]),
        "survived": by[MutantStatus.SURVIVED],
        "equivalent": by[MutantStatus.EQUIVALENT],
        "errors": by[MutantStatus.ERROR],
        "detected": by[MutantStatus.KILLED] + by[MutantStatus.TIMEOUT],
        "total": len(mutants),
    }


def claims_view(claims: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The project view of a mutate run: the functions no card claims, the claimed ones with survivors."""
    if not claims:
        return None
    rows = [
        {
            "name": f"{c['path']}::{c['qualname']}",
            "path": c["path"],
            "qualname": c["qualname"],
            "cards": [{"id": cid, "anchor": card_anchor(cid)} for cid in c["cards"]],
            "cards_text": ", ".join(c["cards"]) or "–",
            "mutants": c["mutants"],
            "survived": c["survived"],
        }
        for c in claims
    ]
    unclaimed = [r for r in rows if not r["cards"]]
    surviving = [r for r in rows if r["cards"] and r["survived"]]
    return {
        "unclaimed": unclaimed,
        "surviving": surviving,
        "total": len(rows),
        "summary": f"{len(unclaimed)} of {len(rows)} functions of the implementation are claimed by no card",
        "surviving_summary": f"{len(surviving)} claimed function(s) have surviving mutants",
    }


# ---------------------------------------------------------------- since the last PROVEN

NEVER_PROVEN = "never PROVEN in this history"


def since_proven_view(sp: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A card that is not PROVEN: which of its bound files changed since its last PROVEN run (the document's
    ``since_proven``), as ``{"text", "never", "run_id", "started", "report_dir", "files"}``; ``text`` is the
    one line every renderer prints (``changed since last PROVEN (run 12, 2026-12-03T10:00:00Z): impl/paged.py,
    witnesses/test_paged_fork.py``). None when the document does not say (PROVEN, or no ledger read)."""
    if not sp:
        return None
    if sp.get("run_id") is None:
        return {"text": NEVER_PROVEN, "never": True, "files": [], "run_id": None, "started": "", "report_dir": None}
    files = [
        {**f, "shown": f["path"] if f["change"] == "changed" else f"{f['path']} ({f['change']})"}
        for f in sp.get("files") or ()
    ]
    run = f"run {sp['run_id']}, {sp.get('started') or '?'}"
    text = (
        f"changed since last PROVEN ({run}): " + ", ".join(f["shown"] for f in files)
        if files
        else f"no bound file changed since last PROVEN ({run}): same bytes as then"
    )
    return {
        "text": text,
        "never": False,
        "files": files,
        "run_id": sp["run_id"],
        "started": sp.get("started") or "",
        "report_dir": sp.get("report_dir"),
    }


# ---------------------------------------------------------------- the view


def card_view(
    card: Mapping[str, Any],
    head: Mapping[str, Any],
    past: Sequence[PastVerdict],
    root: Path,
    report_dir: str | None,
    replay: str,
    report_path: Path | None = None,
) -> dict[str, Any]:
    """One card as every renderer shows it. A FAILED card's ``headline`` is what failed (:func:`failed_headline`);
    the document's own stays ``measured_headline`` (its trend is drawn from the ledger's)."""
    out = copy.deepcopy(dict(card))
    replayed = card.get("replayed_from") or None
    # the verdict's date: a replayed verdict keeps the date of the run that produced its evidence
    out["date"] = display_date(replayed["started"] if replayed else head.get("started"))
    out["replayed"] = replayed_text(replayed["started"]) if replayed else ""
    out["replayed_from"] = replayed
    out["anchor"] = card_anchor(card["id"])
    out["regime_name"] = REGIME_NAMES.get(card["regime"], card["regime"])
    out["ref_sources"] = [ref_source(root, r) for r in card["refs"]]
    out["witnesses"] = [_witness_view(w, replay, report_path) for w in card["witnesses"]]
    out["controls"] = [_witness_view(w, replay, report_path) for w in card["controls"]]
    out["measured_headline"] = card.get("headline")
    if card["verdict"] == Verdict.FAILED:
        out["headline"] = failed_headline(out) or card.get("headline")
    out["examples_cell"] = examples_cell(card["witnesses"] + card["controls"])
    out["failing"] = (
        [w for w in out["witnesses"] + out["controls"] if w["status"] != Outcome.PASSED]
        if card["verdict"] != Verdict.PROVEN
        else []
    )
    marks = history_marks(
        past,
        {
            "started": head.get("started"),
            "verdict": card["verdict"],
            "digest": card["bound_digest"],
            "report_dir": report_dir,
            "replayed_from": replayed["started"] if replayed else None,
        },
    )
    out["history"] = marks
    change = marks[-1]["change"] if marks else None
    out["change"] = change if change and change["kind"] != "first" else None
    out["runs_seen"] = len(past) + 1
    out["mutation"] = mutation_view(card.get("mutation"))
    out["since_proven"] = since_proven_view(card.get("since_proven")) if card["verdict"] != Verdict.PROVEN else None
    return out


# worst first: a card's verdict over its cells is the worst of its required, runnable cells
_RANK = {Verdict.FAILED: 0, Verdict.ERROR: 1, Verdict.VACUOUS: 2, Verdict.UNVERIFIED: 3, Verdict.PROVEN: 4}
NOT_RUNNABLE = "n/a here"
NOT_APPLICABLE = "n/a"  # a target without a capability the card needs


def grid_view(cards: Sequence[Mapping[str, Any]], head: Mapping[str, Any]) -> dict[str, Any] | None:
    """The card x configuration grid of a ``--matrix`` run (None for a plain run): one row per card, one cell
    per configuration (its verdict, or "n/a here" with the reason when this machine cannot run it), and
    the card's verdict over the grid (its worst required cell)."""
    subs = head.get("subjects") or []
    if not subs:
        return None
    rows: dict[str, dict[str, Any]] = {}
    for c in cards:
        base, name = split(c["id"])
        row = rows.setdefault(base, {"id": base, "title": c["title"], "cells": {}, "ran": []})
        row["ran"] += c["witnesses"] + c["controls"]
        shown, reproduction = c["verdict"], ""
        if c["verdict"] == Verdict.UNVERIFIED and "n/a:" in c["reason"]:
            shown = NOT_APPLICABLE  # the target lacks a capability the card needs: not a verdict about it
        known = next((s.get("known") or {} for s in subs if s["name"] == name), {})
        if c["verdict"] == Verdict.FAILED and base in known:
            shown, reproduction = f"{Verdict.FAILED} (known)", known[base]
        row["cells"][name] = {
            "verdict": shown,
            "anchor": c["anchor"],
            "reason": c["reason"] if c["verdict"] != Verdict.PROVEN else "",
            "reproduction": reproduction,
        }
    required = {s["name"] for s in subs if s["required"] and s["runnable"]}
    for row in rows.values():
        for s in subs:
            if not s["runnable"]:
                row["cells"][s["name"]] = {"verdict": NOT_RUNNABLE, "anchor": "", "reason": s["why_not"]}
        counted = [cell["verdict"] for name, cell in row["cells"].items() if name in required]
        counted = [v for v in counted if v != NOT_APPLICABLE]
        row["verdict"] = min(counted, key=lambda v: _RANK.get(v, 0)) if counted else NOT_RUNNABLE
        none = {"verdict": "–", "anchor": "", "reason": "the card has no cell under this subject", "reproduction": ""}
        row["cells"] = [{"subject": s["name"], **row["cells"].get(s["name"], none)} for s in subs]
        row["examples"] = examples_cell(row.pop("ran"))  # over all its cells
    return {
        "subjects": [
            {
                **s,
                "settings_text": " ".join(f"{k}={v}" for k, v in s["settings"].items()) or "no settings",
                "drift": s.get("drift") or "",  # a target installed at another version than its known list's
            }
            for s in subs
        ],
        "rows": list(rows.values()),
        "proven_on": [s["name"] for s in subs if s["runnable"]],
        "examples": any(row["examples"] != "–" for row in rows.values()),
        "not_runnable": [s for s in subs if not s["runnable"]],
    }


def build_view(
    run: RunDocument,
    past: Mapping[str, Sequence[PastVerdict]] | None = None,
    *,
    root: Path,
    report_dir: str | None = None,
    trends: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    comparison: Any = None,
    report_path: Path | None = None,
) -> dict[str, Any]:
    """Everything every report shows (terminal, HTML, Markdown, JUnit), in display order, as plain data.

    ``past`` maps card id -> its earlier verdicts, oldest first (this run
    not included); ``root`` is where ref paths are read from; ``report_dir``
    the folder name this report is written to (for the history links), and
    ``report_path`` that folder's path once written (a reproduction script
    inside it is linked). Templates receive plain data: the document's JSON
    form, extended.
    """
    past = past or {}
    doc = run.to_json()
    head = doc["header"]
    cards = [
        card_view(c, head, past.get(c["id"], ()), root, report_dir, replay_command(run.header, c["id"]), report_path)
        for c in doc["cards"]
    ]
    link_sources(cards, root, report_path)
    for c in cards:
        c["trend"] = trend_view(c, head, (trends or {}).get(c["id"], ()))
    baseline = baseline_view(comparison, cards) if comparison is not None else None
    summary = head["summary"]
    by_regime = [
        {
            "regime": r,
            "name": REGIME_NAMES.get(r, r),
            "total": sum(c["regime"] == r for c in cards),
            "counts": _counts([c for c in cards if c["regime"] == r]),
        }
        for r in summary["by_regime"]
    ]
    changes = [
        {"id": c["id"], "anchor": c["anchor"], "verdict": c["verdict"], **c["change"]} for c in cards if c["change"]
    ]
    not_proven = [c for c in cards if c["verdict"] != Verdict.PROVEN]
    na = [c.id for c in run.cards if not_applicable(c)]  # as the gate decides it (harness.record.build)
    return {
        "title": f"kvproof {summary['gate']} — {display_date(head.get('started'))}",
        "header": _header_view(head),
        "properties": environment_properties(head),
        "summary": {
            "total": summary["total"],
            "gate": summary["gate"],
            "counts": _counts(cards),
            "by_regime": [r for r in by_regime if r["total"]],
            "changes": changes,
            "proven": sum(c["verdict"] == Verdict.PROVEN for c in cards),
            "not_proven": len(not_proven),
            "not_applicable": na,
            "replayed": sum(1 for c in cards if c["replayed"]),
            "flaky": sum(1 for ch in changes if ch["flaky"]),
            "mutation": any(c["mutation"] for c in cards),
            "examples": any(w["examples_text"] for c in cards for w in c["witnesses"] + c["controls"]),
        },
        "cards": cards,
        "grid": grid_view(cards, head),
        "claims": claims_view(doc.get("claims") or ()),
        "not_proven": not_proven,
        "report_dir": report_dir,
        "timing": doc["timing"],
        "baseline": baseline,
    }


def trend_view(card: Mapping[str, Any], head: Mapping[str, Any], past: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Inline SVG trends of the card's headline measure (against its bound) and of its duration, over the
    ledger's earlier runs and this one; '' where fewer than two runs have a value."""

    h = card.get("measured_headline", card.get("headline")) or {}
    replayed = bool(card.get("replayed_from"))
    now = {
        "started": head.get("started"),
        "key": h.get("key"),
        "value": h.get("value"),
        "op": h.get("op"),
        "limit": h.get("limit"),
        "duration_s": None if replayed else card.get("duration_s"),
    }
    rows = list(past) + [now]

    def number(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    same = [r for r in rows if h.get("key") and r.get("key") == h.get("key")]
    measure = [Point(display_date(r["started"]), number(r.get("value"))) for r in same]
    durations = [Point(display_date(r["started"]), number(r.get("duration_s"))) for r in rows]
    out = {"measure": "", "duration": ""}
    if sum(p.value is not None for p in measure) >= 2:
        bound = (h["op"], h["limit"]) if isinstance(h.get("limit"), (int, float)) else None
        out["measure"] = trend(measure, bound=bound, title=f"{card['id']} {h['key']}")
    if sum(p.value is not None for p in durations) >= 2:
        out["duration"] = trend(durations, unit=" s", title=f"{card['id']} time")
    return out


def baseline_view(cmp: Any, cards: list[dict[str, Any]]) -> dict[str, Any]:
    """The 'vs baseline' column (per card, in ``cards``) and section: regressions, moved measures as bars."""

    by_id = {c.id: c for c in cmp.cards}
    for c in cards:
        ch = by_id.get(c["id"])
        if ch is None:
            c["vs_baseline"] = None
            continue
        moved = changed_measures(ch)
        text = "new" if ch.status == "added" else ("same" if ch.status == "unchanged" else verdict_text(ch))
        if ch.status == "changed" and ch.verdict_before == ch.verdict_after:
            if ch.newly_surviving:
                text = f"liar {', '.join(ch.newly_surviving)} survives"
            elif ch.liars_before != ch.liars_after:
                text = f"liars {liars_text(ch)}"
            elif moved:
                text = f"{len(moved)} measure(s) moved"
            else:
                text = (
                    "card or files changed"
                    if ch.changed_files or ch.card_diff or ch.version_before != ch.version_after
                    else "changed"
                )
        c["vs_baseline"] = {"text": text, "regression": bool(ch.regressions), "status": ch.status}

    def num(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    bars = [
        Bar(f"{ch.id}/{m.witness}: {m.key}", num(m.before), num(m.after), num(m.limit), m.regression)
        for ch in cmp.cards
        for m in changed_measures(ch)
    ]
    return {
        "label": cmp.before.label,
        "gate_before": cmp.before.gate,
        "counts": summary_counts(cmp),
        "regressions": [{"card": r.card, "rule": r.rule, "text": r.text} for r in cmp.regressions],
        "removed": list(cmp.removed),
        "bars": measure_bars(bars),
    }
