"""Render the report view as JUnit XML (``junit.xml``) for CI test reports.

One ``<testsuite name="kvproof">`` with the run's environment as
``<properties>`` and one ``<testcase>`` per card (classname ``kvproof.<module>``,
name the card id). The verdict maps onto JUnit's outcomes so that only
PROVEN reads as a pass, as in the release gate:

- FAILED -> ``<failure type="FAILED">`` (the claim is refuted by evidence)
- ERROR -> ``<error type="ERROR">`` (the card or witness is broken)
- VACUOUS, UNVERIFIED -> ``<failure type="VACUOUS|UNVERIFIED">`` (not proven;
  ``<skipped>`` would let a CI page show green for a claim nobody checked)

The witness lines go to ``<system-out>``. A verdict replayed by ``--changed``
says "replayed from <date>" there and carries a ``kvproof.replayed_from``
property; its ``time`` is 0 (this run spent nothing on it). Computes nothing.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from harness.plan.subjects import split
from harness.report.view import NOT_RUNNABLE
from harness.statuses import Verdict

_CONTROL = str.maketrans({chr(i): " " for i in range(32) if chr(i) not in "\t\n\r"})


def _text(value: Any) -> str:
    """XML 1.0 cannot hold most control characters: replace them."""
    return str(value).translate(_CONTROL)


def _lines(card: Mapping[str, Any]) -> str:
    out = [f"{card['id']}: {card['title']}", f"verdict {card['verdict']}: {card['reason']}"]
    if card["replayed"]:
        src = card["replayed_from"]
        out.append(
            f"{card['replayed']} (run {src['run_id']}, report {src.get('report_dir') or '–'}): "
            "not run again, its bound files are unchanged"
        )
    if card["headline"]:
        out.append(f"headline {card['headline']['text']}")
    for w in card["witnesses"] + card["controls"]:
        checks = "; ".join(c["text"] for c in w["checks"])
        out.append(
            f"  {w['kind']} {w['id']} {w['status']} {w['duration_s']:.3f} s {w['test']}"
            + (f" [{checks}]" if checks else "")
            + (f" — {w['why']}" if w["why"] else "")
        )
    for entry in card["liars"]:
        who = "caught by " + ", ".join(entry["caught_by"]) if entry["caught"] else entry["status"]
        out.append(f"  liar {entry['name']} {who}")
    if card["change"]:
        out.append(f"history: {card['change']['text']}")
    return "\n".join(out)


def _failure(w: Mapping[str, Any]) -> list[str]:
    """A failed witness's failure block (the report view's ``failure_block``), a labelled part a paragraph."""
    f = w["failure_block"]
    check = list(f["check_lines"])
    where = f" at {f['location']}" if f["location"] else ""
    parts = [f"{'failing check' if f['assertion'] else 'bound not met'}{where}:", *check]
    if f["example"]:
        parts += [f"shrunk Hypothesis example (seed {f['seed']}, profile {f['profile']}):", f["example"]]
    if f["draws"]:
        parts += ["data.draw:", *(f"  {d['name']}: {d['value']}" for d in f["draws"])]
    if f["explanation"]:
        parts += ["Hypothesis' explanation:", *f["explanation"]]
    if f["notes"]:
        parts += ["noted by the test:", *f["notes"]]
    if f["reproduce"]:
        parts.append(f"reproduce: {f['reproduce']}")
    return parts


def _body(card: Mapping[str, Any]) -> str:
    parts = [card["reason"]]
    if card["detail"] and not any(w.get("failure_block") and w["failure_block"]["example"] for w in card["failing"]):
        parts.append(card["detail"])
    for w in card["failing"]:
        parts.append(f"--- {w['kind']} {w['id']} ({w['test']}): {w['status']}: {w['why']}")
        if w.get("failure_block") and w["failure_block"]["assertion"]:  # a bound not met: the line above says it
            parts += _failure(w)
        parts += [f"reproduction: {r['shown']}" + (f" {r['node']}" if r["node"] else "") for r in w["reproductions"]]
        if w["failure_excerpt"]:
            parts.append(w["failure_excerpt"])
        if w["replay"]:
            parts.append(f"replay: {w['replay']}")
    return "\n".join(parts)


def render(view: Mapping[str, Any]) -> str:
    head, cards, grid = view["header"], view["cards"], view.get("grid")
    failures = sum(c["verdict"] in (Verdict.FAILED, Verdict.VACUOUS, Verdict.UNVERIFIED) for c in cards)
    errors = sum(c["verdict"] == "ERROR" for c in cards)
    total_time = sum(c["duration_s"] for c in cards)
    not_runnable = sum(c["verdict"] == NOT_RUNNABLE for row in (grid or {}).get("rows", ()) for c in row["cells"])
    common = {
        "tests": str(len(cards) + not_runnable),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": str(not_runnable),
        "time": f"{total_time:.3f}",
    }
    root = ET.Element("testsuites", {"name": "kvproof", **common})
    suite = ET.SubElement(
        root,
        "testsuite",
        {"name": "kvproof", **common, "timestamp": head["timestamp"], "hostname": _text(head["host"])},
    )
    props = ET.SubElement(suite, "properties")
    for name, value in view["properties"]:
        ET.SubElement(props, "property", {"name": name, "value": _text(value)})
    for c in cards:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"kvproof.{c['module']}",
                "name": _text(c["id"]),
                "file": _text(c["card_path"]),
                "time": f"{c['duration_s']:.3f}",
            },
        )
        if c["replayed"] or grid:
            props = ET.SubElement(case, "properties")
        if c["replayed"]:
            ET.SubElement(
                props, "property", {"name": "kvproof.replayed_from", "value": _text(c["replayed_from"]["started"])}
            )
        if grid:
            ET.SubElement(props, "property", {"name": "kvproof.configuration", "value": _text(split(c["id"])[1])})
        if c["verdict"] != Verdict.PROVEN:
            tag = "error" if c["verdict"] == Verdict.ERROR else "failure"
            el = ET.SubElement(case, tag, {"type": c["verdict"], "message": _text(f"{c['verdict']}: {c['reason']}")})
            el.text = _text(_body(c))
        ET.SubElement(case, "system-out").text = _text(_lines(c))
    for row in grid["rows"] if grid else ():  # a configuration this machine cannot run: a visible skipped cell
        for cell in row["cells"]:
            if cell["verdict"] == NOT_RUNNABLE:
                case = ET.SubElement(
                    suite, "testcase", {"classname": "kvproof.matrix", "name": _text(f"{row['id']}@{cell['subject']}")}
                )
                ET.SubElement(case, "skipped", {"message": _text(f"not runnable here: {cell['reason']}")})
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
