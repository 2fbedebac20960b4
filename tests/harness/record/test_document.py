"""The run document: one typed form, one JSON form, and the schema that describes it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema

from harness.plan.binding import BoundFile, digest
from harness.record.document import (
    SCHEMA_VERSION,
    CardResult,
    Claim,
    MutantResult,
    MutationResult,
    RunDocument,
    RunHeader,
    WitnessResult,
)

HERE = Path(__file__).resolve().parents[2]  # tests/
V1_DOC = HERE / "fixtures" / "report-data" / "mixed-verdicts.json"  # written by kvproof before version 2
SCHEMA = json.loads((HERE.parent / "obligations" / "verdicts.schema.json").read_text())


def _leaves(value, path=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{path}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, value


def test_a_version_1_document_reads_into_types_and_keeps_every_value():
    old = json.loads(V1_DOC.read_text())
    doc = RunDocument.from_json(old)
    new = dict(_leaves(doc.to_json()))
    for path, value in _leaves(old):
        assert new[path] == value, path


def test_upgraded_fields_are_derived_from_what_version_1_stored():
    old = json.loads(V1_DOC.read_text())
    card = CardResult.from_json(old["cards"][1])
    liars_s = sum(entry["duration_s"] for entry in old["cards"][1]["liars"] if entry["status"] != "not_run")
    assert card.honest_s == round(old["cards"][1]["duration_s"] - liars_s, 3)
    assert card.bound_digest == digest(BoundFile(**b) for b in old["cards"][1]["bound_files"])
    assert all(w.evidence_per_node == (len(w.nodes) > 1) for w in card.witnesses)


def test_round_trip_through_json_is_the_identity():
    doc = RunDocument.from_json(json.loads(V1_DOC.read_text()))
    assert RunDocument.from_json(json.loads(json.dumps(doc.to_json()))) == doc


def test_a_current_document_validates_against_the_schema():
    doc = RunDocument.from_json(json.loads(V1_DOC.read_text()))
    data = doc.to_json()
    data["header"]["schema_version"] = SCHEMA_VERSION
    data["header"]["jobs"] = 2  # the version-1 fixture predates -j
    jsonschema.validate(data, SCHEMA)


def test_the_schema_describes_every_field_of_the_types():
    defs = SCHEMA["$defs"]
    for cls, props in (
        (RunHeader, SCHEMA["properties"]["header"]["properties"]),
        (CardResult, defs["card"]["properties"]),
        (WitnessResult, defs["witness"]["properties"]),
        (MutationResult, defs["mutation"]["properties"]),
        (MutantResult, defs["mutant"]["properties"]),
        (Claim, defs["claim"]["properties"]),
    ):
        names = {f.name for f in dataclasses.fields(cls)}
        assert names == set(props), (cls.__name__, names ^ set(props))
