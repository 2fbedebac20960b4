"""The exercised grid of a program claim: per target, which verb pairs and edges its steps hit (issue 37)."""

from __future__ import annotations

from harness.report.view import exercised_grids

EXERCISED = {
    "pairs": {"append": {"append": 3, "fork": 0, "release": 2}, "fork": {"append": 1, "fork": 0, "release": 4}},
    "boundaries": {"an append across a block edge": 7, "a truncate to a block edge": 0},
}


def test_a_grid_per_node_lists_the_pairs_and_edges_never_tried():
    w = {"evidence_per_node": True, "evidence": {"t.py::test_x[impl.paged]": {"exercised": EXERCISED, "steps": 9}}}
    (g,) = exercised_grids(w)
    assert g["node"] == "[impl.paged]" and g["verbs"] == ["append", "fork", "release"]
    assert g["rows"] == [("append", [3, 0, 2]), ("fork", [1, 0, 4])]
    assert g["never"] == ["append → fork", "fork → fork"]
    assert ("a truncate to a block edge", 0) in g["boundaries"]


def test_no_grid_without_the_evidence_or_with_a_malformed_one():
    assert exercised_grids({"evidence": {"steps": 3}}) == []
    assert exercised_grids({"evidence": {"exercised": {"pairs": "x"}}}) == []
