"""The one report-data builder: verdicts -> a plain, JSON-able document.

Every renderer (terminal now; HTML, Markdown, JUnit later) renders the
dict :func:`build` returns and computes nothing: order, totals, counts per
verdict and regime, the headline measure and the gate result are decided
here once. The document is also what ``--json`` writes; its shape is
``obligations/verdicts.schema.json`` (``SCHEMA_VERSION`` below).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.binding import BoundFile
from harness.cards import Card, Witness
from harness.run import CardRun
from harness.statuses import VERDICTS, Gate, LiarStatus, Outcome, Verdict
from harness.verdict import (CardVerdict, LiarVerdict, WitnessOutcome,
                             WitnessVerdict)

SCHEMA = "kvproof.verdicts"
SCHEMA_VERSION = 1
REGIMES = ("N", "A", "C", "D")
HEADLINE_KEYS = (("max_abs_delta", "max|Δ|"), ("max_rel_delta", "max rel Δ"))


@dataclass(frozen=True)
class CardReport:
    """Inputs for one card: what it claims, how it ran, what was decided, what it is bound to."""

    card: Card
    run: CardRun
    verdict: CardVerdict
    bound_files: tuple[BoundFile, ...]


@dataclass(frozen=True)
class Replayed:
    """A card not run again (``--changed``): its entry from the original run whose bound files had these bytes.

    ``run_id``, ``started`` and ``report_dir`` name that original run (never
    another replay: see :meth:`harness.ledger.Ledger.last_matching`).
    """

    entry: dict[str, Any]
    run_id: int
    started: str
    report_dir: str | None


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3e}"
    return repr(value) if isinstance(value, str) else str(value)


def fraction(a: int, b: int) -> str:
    """``3/4``, or ``–`` when there is nothing to count."""
    return f"{a}/{b}" if b else "–"


def liars_fraction(counts: Mapping[str, Any]) -> str:
    """``2/3`` caught, or ``not run`` when the card lists liars but none ran (e.g. its witnesses failed)."""
    if counts["liars_total"] and counts.get("liars_run", counts["liars_total"]) == 0:
        return "not run"
    return fraction(counts["liars_caught"], counts["liars_total"])


OP_TEXT = {"le": "≤", "lt": "<", "ge": "≥", "gt": ">", "eq": "=", "ne": "≠"}


def _worst(op: str, checks: list[dict[str, Any]]) -> dict[str, Any]:
    """The check furthest on the wrong side of its bound: max for le/lt, min for ge/gt, else the first broken."""
    if op in ("le", "lt"):
        return max(checks, key=lambda c: (math.isnan(c["actual"]), c["actual"]))
    if op in ("ge", "gt"):
        return min(checks, key=lambda c: (not math.isnan(c["actual"]), c["actual"]))
    return next((c for c in checks if c["holds"] is False), checks[0])


def fmt_limit(value: Any) -> str:
    """A bound's limit as a card author would write it: 0, 3, 1.5e-04, 0.25."""
    if isinstance(value, float) and value != 0 and math.isfinite(value) and not 1e-3 <= abs(value) < 1e4:
        return f"{value:.1e}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def headline(witnesses: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The measure shown beside a verdict, taken from bounded evidence of the witnesses (not controls).

    The first bound in card order on a delta key (max_abs_delta, max_rel_delta)
    that was recorded as a number, else the first recorded numeric bound;
    for a parametrized witness its worst node. Unbounded evidence never
    becomes the headline (ORACLE-PARITY records hidden-state absolute deltas
    for information; its claim is bounded on the logits). None when nothing
    bounded was measured.
    """
    witnesses = list(witnesses)
    labels = dict(HEADLINE_KEYS)
    for wanted in (lambda key: key in labels, lambda key: True):
        for w in witnesses:
            by_bound: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for c in w["bounds"]:
                if c["holds"] is not None and _num(c["actual"]) and wanted(c["key"]):
                    by_bound.setdefault((c["key"], c["op"]), []).append(c)
            for (key, op), checks in by_bound.items():
                worst = _worst(op, checks)
                value, limit = worst["actual"], worst["limit"]
                shown = fmt_value(float(value)) if key in labels else fmt_value(value)
                text = f"{labels.get(key, key)} = {shown} ({OP_TEXT[op]} {fmt_limit(limit)})"
                return {"key": key, "value": value, "text": text, "witness": w["id"], "op": op, "limit": limit,
                        "holds": worst["holds"]}
    return None


def _witness_entry(w: Witness, outcome: WitnessOutcome | None, judged: WitnessVerdict) -> dict[str, Any]:
    nodes = outcome.nodes if outcome else ()
    bad = next((n for n in nodes if n.outcome != Outcome.PASSED), None)
    return {
        "id": w.id,
        "kind": w.kind,
        "test": w.test,
        "status": judged.status,
        "why": judged.why,
        "duration_s": round(outcome.duration, 4) if outcome else 0.0,
        "timeout_s": w.timeout,
        "evidence": dict(outcome.evidence) if outcome else {},
        "bounds": [{"key": c.key, "op": c.op, "limit": c.limit, "actual": c.actual, "holds": c.holds,
                    "node": c.nodeid, "detail": c.detail} for c in judged.checks]
                  or [{"key": b.key, "op": b.op, "limit": b.limit, "actual": None, "holds": None, "node": ""}
                      for b in w.bounds],
        "reason": w.reason,
        "message": bad.message if bad else "",
        "location": bad.location if bad else "",
        "failure": bad.failure if bad else "",
        "hypothesis": next((dict(n.hypothesis) for n in nodes if n.hypothesis), None),
        "nodes": [{"nodeid": n.nodeid, "outcome": n.outcome, "duration_s": round(n.duration, 4)} for n in nodes],
    }


def _liar_entry(card: Card, lv: LiarVerdict, run: CardRun) -> dict[str, Any]:
    lrun = next((r for r in run.outcomes.liars if r.name == lv.name), None)
    outcomes = {o.witness_id: o for o in (lrun.witnesses if lrun else ())}
    return {
        "name": lv.name,
        "caught": lv.caught,
        "caught_by": list(lv.caught_by),
        "status": lv.status,
        "why": lv.why,
        "duration_s": round(lrun.duration, 4) if lrun else 0.0,
        "witnesses": [_witness_entry(w, outcomes.get(w.id), j) for w, j in zip(card.witnesses, lv.witnesses)],
    }


def _detail(verdict: str, entries: list[dict[str, Any]], liars: list[dict[str, Any]]) -> str:
    """A second line under the reason: the shrunk example, or which witness caught which liar."""
    if verdict == Verdict.PROVEN:
        return ""
    for e in entries:
        hyp = e.get("hypothesis") or {}
        if e["status"] == Outcome.FAILED and hyp.get("example"):
            lines = [ln.strip() for ln in hyp["example"].splitlines() if ln.strip()]
            text = " ".join(lines)
            return (text if len(text) <= 160 else text[:157] + "...") + f" (seed {hyp.get('seed')})"
    if liars and any(entry["status"] != LiarStatus.NOT_RUN for entry in liars):
        parts = []
        for entry in liars:
            if entry["caught"]:
                parts.append(f"{entry['name']} caught by {', '.join(entry['caught_by'])}")
            else:
                parts.append(f"{entry['name']} {entry['status']}")
        return "liars: " + "; ".join(parts)
    return ""


def card_entry(rep: CardReport) -> dict[str, Any]:
    card, run, v = rep.card, rep.run, rep.verdict
    w_out = {o.witness_id: o for o in run.outcomes.witnesses}
    c_out = {o.witness_id: o for o in run.outcomes.controls}
    witnesses = [_witness_entry(w, w_out.get(w.id), j) for w, j in zip(card.witnesses, v.witnesses)]
    controls = [_witness_entry(c, c_out.get(c.id), j) for c, j in zip(card.controls, v.controls)]
    liars = [_liar_entry(card, lv, run) for lv in v.liars]
    return {
        "id": card.id,
        "title": card.title,
        "module": card.module,
        "regime": card.regime,
        "version": card.version,
        "fingerprint": card.fingerprint,
        "card_path": card.display_path,
        "tags": list(card.tags),
        "requires": list(card.requires),
        "refs": list(card.refs),
        "theorem": card.theorem,
        "proof": card.proof,
        "notes": card.notes,
        "verdict": v.verdict,
        "reason": v.reason,
        "duration_s": round(run.duration, 3),
        "headline": headline(witnesses),
        "counts": {
            "witnesses_passed": sum(w["status"] == Outcome.PASSED for w in witnesses),
            "witnesses_total": len(witnesses),
            "controls_held": sum(c["status"] == Outcome.PASSED for c in controls),
            "controls_total": len(controls),
            "liars_caught": sum(entry["caught"] for entry in liars),
            "liars_total": len(liars),
            "liars_run": sum(entry["status"] != LiarStatus.NOT_RUN for entry in liars),
        },
        "detail": _detail(v.verdict, witnesses + controls, liars),
        "replayed_from": None,
        "bound_files": [{"path": b.path, "role": b.role, "sha256": b.sha256} for b in rep.bound_files],
        "witnesses": witnesses,
        "controls": controls,
        "liars": liars,
    }


def replayed_entry(rep: Replayed) -> dict[str, Any]:
    """The original entry, marked as replayed; ``duration_s`` 0 (this run spent nothing on it)."""
    entry = dict(rep.entry)
    entry["replayed_from"] = {"run_id": rep.run_id, "started": rep.started, "report_dir": rep.report_dir,
                              "duration_s": entry.get("duration_s", 0.0)}
    entry["duration_s"] = 0.0
    return entry


def timing(cards: list[dict[str, Any]], wall_s: float | None, jobs: int | None) -> dict[str, Any]:
    """Where the time went, per card, slowest first: the honest process, its start-up, the liar processes.

    ``startup_s`` is the honest process's time outside any witness node
    (interpreter start, imports, collection); a model load inside a fixture
    counts toward the first witness that asked for it.
    """
    rows = []
    for c in cards:
        if c.get("replayed_from") or not c["duration_s"]:
            continue  # replayed, or not run (link problems)
        liars = [entry for entry in c["liars"] if entry["status"] != LiarStatus.NOT_RUN or entry["duration_s"]]
        liars_s = sum(entry["duration_s"] for entry in liars)
        honest_s = max(c["duration_s"] - liars_s, 0.0)
        nodes = c["witnesses"] + c["controls"]
        slow = max(nodes, key=lambda w: w["duration_s"], default=None)
        slow_liar = max(liars, key=lambda entry: entry["duration_s"], default=None)
        rows.append({
            "id": c["id"], "total_s": round(c["duration_s"], 3), "honest_s": round(honest_s, 3),
            "startup_s": round(max(honest_s - sum(w["duration_s"] for w in nodes), 0.0), 3),
            "liars_s": round(liars_s, 3), "liar_runs": len(liars),
            "slowest_witness": {"id": slow["id"], "duration_s": slow["duration_s"]} if slow else None,
            "slowest_liar": {"name": slow_liar["name"], "duration_s": slow_liar["duration_s"]} if slow_liar else None,
        })
    rows.sort(key=lambda r: -r["total_s"])
    return {"wall_s": None if wall_s is None else round(wall_s, 3), "jobs": jobs,
            "process_s": round(sum(r["total_s"] for r in rows), 3),
            "processes": sum(1 + r["liar_runs"] for r in rows if r["total_s"] > 0),
            "replayed": sum(1 for c in cards if c.get("replayed_from")), "cards": rows}


def replay_command(head: Mapping[str, Any], card_id: str) -> str:
    """The command that reruns one card with this run's profile and seed (and its cards folder if not the default)."""
    cards = ""
    root, folder = head.get("root"), head.get("cards_dir")
    if root and folder and Path(folder) != Path(root) / "obligations":
        try:
            cards = f" --cards {Path(folder).relative_to(root).as_posix()}"
        except ValueError:
            cards = f" --cards {folder}"
    return f"python run_obligations.py run {card_id}{cards} --profile {head.get('profile')} --seed {head.get('seed')}"


def _add_replay(card: dict[str, Any], header: Mapping[str, Any]) -> None:
    """``hypothesis.replay`` on each honest-run witness or control that Hypothesis falsified (not under a liar)."""
    for w in card["witnesses"] + card["controls"]:
        hyp = w.get("hypothesis")
        if hyp and hyp.get("example"):
            w["hypothesis"] = {**hyp, "replay": replay_command(header, card["id"])}


def build(header: dict[str, Any], reports: Iterable[CardReport | Replayed], *, finished: str | None = None,
          wall_s: float | None = None) -> dict[str, Any]:
    """The verdicts document: ``{"header": {...}, "cards": [...], "timing": {...}}`` in card order.

    ``header`` comes from :func:`harness.provenance.header`; this adds the
    schema name and version, the finish time, per-verdict and per-regime
    counts, how many verdicts were replayed and the gate result (PASS only
    when every card is PROVEN, replayed or not). ``timing`` is
    :func:`timing` (``header["jobs"]`` is the number of worker processes).
    """
    cards = [replayed_entry(r) if isinstance(r, Replayed) else card_entry(r) for r in reports]
    for c in cards:
        if not c.get("replayed_from"):
            _add_replay(c, header)
    counts = {k: sum(c["verdict"] == k for c in cards) for k in VERDICTS}
    by_regime = {r: {k: sum(c["verdict"] == k and c["regime"] == r for c in cards) for k in VERDICTS}
                 for r in REGIMES}
    gate = Gate.PASS if cards and all(c["verdict"] == Verdict.PROVEN for c in cards) else Gate.FAIL
    not_proven = [{"id": c["id"], "verdict": c["verdict"], "reason": c["reason"]}
                  for c in cards if c["verdict"] != Verdict.PROVEN]
    head = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **header,
            "finished": finished,
            "duration_s": round(wall_s if wall_s is not None else sum(c["duration_s"] for c in cards), 3),
            "summary": {"total": len(cards), "counts": counts, "by_regime": by_regime,
                        "gate": gate, "not_proven": not_proven,
                        "replayed": sum(1 for c in cards if c.get("replayed_from"))}}
    return {"header": head, "cards": cards, "timing": timing(cards, wall_s, header.get("jobs"))}
