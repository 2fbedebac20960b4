"""The inline SVG pictures of the reports (harness.report.svg): well-formed, self-contained, and honest."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.report.svg import Bar, Point, measure_bars, trend

NS = "{http://www.w3.org/2000/svg}"


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # well-formed XML, or this raises
    assert root.tag == NS + "svg" and root.get("role") == "img" and root.get("viewBox")
    assert "<script" not in svg and "href" not in svg  # self-contained: nothing to run, nothing to fetch
    return root


def test_trend_draws_one_point_per_measured_run_and_the_bound():
    pts = [Point("2026-11-01", 1e-5), Point("2026-11-02", None), Point("2026-11-03", 2e-5), Point("2026-11-04", 3e-5)]
    root = _parse(trend(pts, bound=("le", 1e-4), title="logits max|delta|"))
    circles = root.findall(f"{NS}circle")
    assert len(circles) == 3  # the unmeasured run is a gap, not a zero
    (line,) = root.findall(f"{NS}line")
    ys = [float(c.get("cy")) for c in circles]
    assert ys[0] > ys[1] > ys[2]  # growing values go up the picture
    assert float(line.get("y1")) < min(ys)  # the bound (1e-4) lies above every value: the room left is visible
    label = root.get("aria-label")
    assert "3 of 4 runs measured" in label and "newest 3e-05" in label and "bound le 0.0001" in label
    assert [c.find(f"{NS}title").text for c in circles][-1] == "2026-11-04: 3e-05"


def test_a_constant_measure_on_its_bound_still_draws_and_nothing_measured_draws_nothing():
    root = _parse(trend([Point("a", 0.0), Point("b", 0.0)], bound=("le", 0), title="t"))
    assert len(root.findall(f"{NS}circle")) == 2
    assert trend([Point("a", None)], title="t") == ""


def test_measure_bars_scale_to_the_bound_and_mark_regressions():
    root = _parse(
        measure_bars(
            [
                Bar("ORACLE/logits: max_abs_delta", 6e-5, 1.2e-4, 1.5e-4, regression=True),
                Bar("KV-T3/ctl: max_abs_delta", 12.5, 12.4, 0),
            ]
        )
    )
    rects = root.findall(f"{NS}rect")
    assert len(rects) == 4
    before, after = float(rects[0].get("width")), float(rects[1].get("width"))
    assert after == 2 * before and rects[1].get("fill") == "#b42318"
    assert measure_bars([]) == ""
