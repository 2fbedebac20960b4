"""The report view: the verdicts document prepared once for the HTML, Markdown and JUnit renderers.

:func:`build_view` takes the document of :mod:`harness.report.data`, each
card's past verdicts from the ledger and the project root, and returns plain
data (dicts, lists, strings, numbers) in the order it is shown. Here and only
here are decided: the history strip and its transitions (newly FAILED,
newly PROVEN, flaky), the source lines of each ref, the text of every bound
check, the failure excerpt and the command that replays it, the summary bar
and the display form of the header. The renderers loop and print.

Reading ref sources is the only I/O; nothing here touches the clock.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from harness.document import RunDocument
from harness.ledger import PastVerdict
from harness.refs import RefSite, resolve_ref
from harness.checktext import check_text, fmt_value, unevaluated_text
from harness.report.data import replay_command
from harness.statuses import VERDICTS, Outcome, Verdict
from harness.verdict import observed_summary

HISTORY_LIMIT = 30  # marks in a card's history strip, the current run included
SOURCE_LINES = 40  # lines of a ref shown beside the proof; the rest is counted
FAILURE_LINES = 60  # lines of a failure's text shown
VALUE_CHARS = 160  # characters of one recorded value shown
REGIME_NAMES = {"N": "numerical", "A": "algebraic/structural", "C": "integrity", "D": "decision soundness"}
STATUS_MARK = {Outcome.PASSED: "✓", Outcome.FAILED: "✗", Outcome.ERROR: "!", Outcome.SKIPPED: "–",
               Outcome.NOT_RUN: "·"}


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
    kind = {Verdict.FAILED: "newly FAILED", Verdict.PROVEN: "newly PROVEN"}.get(cur["verdict"],
                                                                                f"now {cur['verdict']}")
    flaky = prev["digest"] == cur["digest"]
    text = f"{kind} (was {prev['verdict']})" + ("; flaky: no bound file changed" if flaky else "")
    return {"kind": kind, "flaky": flaky, "text": text}


def history_marks(past: Sequence[PastVerdict], current: Mapping[str, Any] | None,
                  limit: int = HISTORY_LIMIT) -> list[dict[str, Any]]:
    """Oldest-first marks for a card's strip: past verdicts then ``current`` (this run), each with its transition.

    ``current`` is ``{"started", "verdict", "digest", "report_dir"}`` (and
    ``replayed_from``, the original start time, for a replayed verdict) or
    None (history shown without a run, e.g. ``history ID``).
    """
    seq = [{"started": p.started, "verdict": p.verdict, "digest": p.bound_digest, "report_dir": p.report_dir,
            "commit": p.git_commit, "current": False, "replayed_from": p.replayed_started} for p in past]
    if current is not None:
        seq.append({"replayed_from": None, **current, "commit": None, "current": True})
    marks, prev = [], None
    for item in seq:
        change = transition(prev, item)
        marks.append({**item, "date": display_date(item["started"]), "change": change,
                      "title": f"{display_date(item['started'])} {item['verdict']}"
                               + (f" {replayed_text(item['replayed_from'])}" if item["replayed_from"] else "")
                               + (f" — {change['text']}" if change and change["kind"] != "first" else "")})
        prev = item
    return marks[-limit:]


# ---------------------------------------------------------------- pieces


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
        return {"ref": ref, "symbol": symbol, "location": f"{site.path}:{site.line}", "lines": [], "more": 0,
                "error": f"cannot read: {exc}"}
    span = list(range(site.line, min(site.end_line, len(text)) + 1))
    shown = span[:max_lines]
    return {"ref": ref, "symbol": symbol, "location": f"{site.path}:{site.line}",
            "lines": [{"no": n, "text": text[n - 1]} for n in shown], "more": len(span) - len(shown), "error": ""}


def _check_text(c: Mapping[str, Any]) -> str:
    if c["holds"] is None:
        return unevaluated_text(c["key"], c["actual"])
    return check_text(c["key"], c["op"], c["limit"], c["actual"], c.get("detail") or "")


def display_value(value: Any, limit: int = VALUE_CHARS) -> str:
    """Recorded evidence as text: floats as 3 significant digits, also inside dicts and lists; cut at ``limit``."""
    def fmt(v: Any) -> str:
        summary = observed_summary(v)
        if summary is not None:  # evidence.observe
            nan = f", {summary['nan']} NaN" if summary["nan"] else ""
            return (f"max {fmt(summary['max'])}, min {fmt(summary['min'])} "
                    f"({summary['observed']} observed{nan})")
        if isinstance(v, Mapping):
            return "{" + ", ".join(f"{k}: {fmt(x)}" for k, x in v.items()) + "}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        return fmt_value(v)

    text = fmt(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _node_label(nodeid: str) -> str:
    return nodeid[nodeid.index("["):] if "[" in nodeid else ""


def _witness_view(w: Mapping[str, Any], replay: str) -> dict[str, Any]:
    out = copy.deepcopy(dict(w))
    out["mark"] = STATUS_MARK.get(w["status"], "?")
    out["checks"] = [{"text": _check_text(c), "holds": c["holds"], "node": _node_label(c.get("node") or "")}
                     for c in w["bounds"]]
    bounded = {c["key"] for c in w["bounds"]}
    evidence = w.get("evidence") or {}
    per_node = evidence if w.get("evidence_per_node") else {"": evidence}
    out["recorded"] = [{"node": _node_label(node), "key": k, "text": display_value(v)}
                       for node, values in per_node.items() if isinstance(values, Mapping)
                       for k, v in values.items() if k not in bounded]
    failure = (w.get("failure") or "").splitlines()
    out["failure_excerpt"] = "\n".join(failure[-FAILURE_LINES:])
    out["failure_cut"] = max(0, len(failure) - FAILURE_LINES)
    hyp = w.get("hypothesis") or None
    out["replay"] = replay if hyp and hyp.get("example") else ""
    return out


def _counts(cards: Iterable[Mapping[str, Any]], total: int | None = None) -> list[dict[str, Any]]:
    cards = list(cards)
    total = len(cards) if total is None else total
    return [{"verdict": v, "n": n, "pct": round(100.0 * n / total, 2) if total else 0.0}
            for v in VERDICTS for n in [sum(c["verdict"] == v for c in cards)]]


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
        "gate": head["summary"]["gate"],
    }


def environment_properties(head: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, value) pairs describing where and how the run happened (JUnit properties)."""
    git = head.get("git") or {}
    props = [("kvproof.started", head.get("started") or ""), ("git.commit", git.get("commit") or ""),
             ("git.dirty", str(git.get("dirty")).lower()), ("host.name", (head.get("host") or {}).get("name", "")),
             ("host.platform", (head.get("host") or {}).get("platform", "")),
             ("host.machine", (head.get("host") or {}).get("machine", "")),
             ("hypothesis.profile", str(head.get("profile"))), ("hypothesis.seed", str(head.get("seed"))),
             ("kvproof.liars", str(head.get("liars", True)).lower()), ("kvproof.command", head.get("command", "")),
             ("kvproof.gate", head["summary"]["gate"])]
    props += [(f"version.{k}", v or "") for k, v in (head.get("versions") or {}).items()]
    if head.get("numerics"):
        props.append(("kvproof.numerics", head["numerics"]))
    return props


# ---------------------------------------------------------------- the view


def card_view(card: Mapping[str, Any], head: Mapping[str, Any], past: Sequence[PastVerdict], root: Path,
              report_dir: str | None, replay: str) -> dict[str, Any]:
    out = copy.deepcopy(dict(card))
    replayed = card.get("replayed_from") or None
    # the verdict's date: a replayed verdict keeps the date of the run that produced its evidence
    out["date"] = display_date(replayed["started"] if replayed else head.get("started"))
    out["replayed"] = replayed_text(replayed["started"]) if replayed else ""
    out["replayed_from"] = replayed
    out["anchor"] = "card-" + re.sub(r"[^A-Za-z0-9_-]+", "-", card["id"])
    out["regime_name"] = REGIME_NAMES.get(card["regime"], card["regime"])
    out["ref_sources"] = [ref_source(root, r) for r in card["refs"]]
    out["witnesses"] = [_witness_view(w, replay) for w in card["witnesses"]]
    out["controls"] = [_witness_view(w, replay) for w in card["controls"]]
    out["failing"] = [w for w in out["witnesses"] + out["controls"] if w["status"] != Outcome.PASSED] \
        if card["verdict"] != Verdict.PROVEN else []
    marks = history_marks(past, {"started": head.get("started"), "verdict": card["verdict"],
                                 "digest": card["bound_digest"], "report_dir": report_dir,
                                 "replayed_from": replayed["started"] if replayed else None})
    out["history"] = marks
    change = marks[-1]["change"] if marks else None
    out["change"] = change if change and change["kind"] != "first" else None
    out["runs_seen"] = len(past) + 1
    return out


def build_view(run: RunDocument, past: Mapping[str, Sequence[PastVerdict]] | None = None, *,
               root: Path, report_dir: str | None = None) -> dict[str, Any]:
    """Everything every report shows (terminal, HTML, Markdown, JUnit), in display order, as plain data.

    ``past`` maps card id -> its earlier verdicts, oldest first (this run
    not included); ``root`` is where ref paths are read from; ``report_dir``
    the folder name this report is written to (for the history links).
    Templates receive plain data: the document's JSON form, extended.
    """
    past = past or {}
    doc = run.to_json()
    head = doc["header"]
    cards = [card_view(c, head, past.get(c["id"], ()), root, report_dir, replay_command(run.header, c["id"]))
             for c in doc["cards"]]
    summary = head["summary"]
    by_regime = [{"regime": r, "name": REGIME_NAMES.get(r, r), "total": sum(c["regime"] == r for c in cards),
                  "counts": _counts([c for c in cards if c["regime"] == r])}
                 for r in summary["by_regime"]]
    changes = [{"id": c["id"], "anchor": c["anchor"], "verdict": c["verdict"], **c["change"]}
               for c in cards if c["change"]]
    not_proven = [c for c in cards if c["verdict"] != Verdict.PROVEN]
    return {
        "title": f"kvproof {summary['gate']} — {display_date(head.get('started'))}",
        "header": _header_view(head),
        "properties": environment_properties(head),
        "summary": {"total": summary["total"], "gate": summary["gate"], "counts": _counts(cards),
                    "by_regime": [r for r in by_regime if r["total"]], "changes": changes,
                    "proven": sum(c["verdict"] == Verdict.PROVEN for c in cards), "not_proven": len(not_proven),
                    "replayed": sum(1 for c in cards if c["replayed"]),
                    "flaky": sum(1 for ch in changes if ch["flaky"])},
        "cards": cards,
        "not_proven": not_proven,
        "report_dir": report_dir,
        "timing": doc["timing"],
    }
